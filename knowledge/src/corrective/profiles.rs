//! The `corrective` and `adaptive` profiles on the [`ProfileResolver`]: replaces the resolver's
//! "not yet available" entries with the real builders. The lead calls [`register_profiles`] (or
//! [`register_profiles_shared`], when the resolver is in an `Arc`) once at start-up.

use std::sync::Arc;

use crate::query::RagPipeline;
use crate::query::profiles::{PipelineBuilder, ProfileResolver};
use crate::routing::{AdaptiveRagPipeline, DelegateSource, OwnDelegates, ResolverDelegates};

use super::pipeline::CorrectiveRagPipeline;

/// The builder of the `corrective` profile.
pub fn corrective_builder() -> PipelineBuilder {
    Arc::new(|settings, deps| {
        Ok(Arc::new(CorrectiveRagPipeline::from_settings(
            "corrective",
            settings,
            deps,
        )?) as Arc<dyn RagPipeline>)
    })
}

/// Registers `corrective` and `adaptive`. The adaptive pipeline memoises its own delegates
/// (`balanced`, `corrective`), built from the same configuration and dependencies as the
/// resolver's.
pub fn register_profiles(resolver: &ProfileResolver) {
    resolver.register("corrective", corrective_builder());
    resolver.register(
        "adaptive",
        Arc::new(|settings, deps| {
            let delegates: Arc<dyn DelegateSource> = Arc::new(OwnDelegates::new(
                settings.clone(),
                deps.clone(),
                corrective_builder(),
            ));
            Ok(Arc::new(AdaptiveRagPipeline::from_settings(
                "adaptive", settings, deps, delegates,
            )?) as Arc<dyn RagPipeline>)
        }),
    );
}

/// Registers `corrective` and `adaptive`, the adaptive routes delegating to the resolver's own
/// memoised `balanced` and `corrective` pipelines.
pub fn register_profiles_shared(resolver: &Arc<ProfileResolver>) {
    resolver.register("corrective", corrective_builder());
    let weak = Arc::downgrade(resolver);
    resolver.register(
        "adaptive",
        Arc::new(move |settings, deps| {
            let delegates: Arc<dyn DelegateSource> = Arc::new(ResolverDelegates(weak.clone()));
            Ok(Arc::new(AdaptiveRagPipeline::from_settings(
                "adaptive", settings, deps, delegates,
            )?) as Arc<dyn RagPipeline>)
        }),
    );
}
