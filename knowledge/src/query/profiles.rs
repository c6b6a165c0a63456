//! [`ProfileResolver`]: profile name → pipeline, memoised per name.
//!
//! Built-in profiles `fast`, `balanced` and `quality` build a [`StagedRagPipeline`] from
//! [`resolve_options`] (preset, then every configured key). `corrective` and `adaptive` are
//! registered as "not yet available" until their pipelines land: asking for them fails with a
//! clear error instead of silently running something else; their builders are replaced with
//! [`ProfileResolver::register`]. The reserved name `default` resolves to the host's own
//! pipeline when one was given, else to the configured `rag.profile`. Unknown names fail
//! listing the known ones.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::options::{PROFILE_LABEL, resolve_options};
use super::pipeline::{PipelineDeps, StagedRagPipeline};
use super::{QueryError, RagPipeline};
use crate::registry::{Registry, UnknownName};
use crate::settings::RagSettings;

/// Builds a profile's pipeline from the configuration and the shared dependencies.
pub type PipelineBuilder = Arc<
    dyn Fn(&RagSettings, &PipelineDeps) -> Result<Arc<dyn RagPipeline>, QueryError> + Send + Sync,
>;

/// The reserved profile name for the host's own pipeline.
pub const DEFAULT_PROFILE: &str = "default";

/// Profile name → memoised pipeline.
pub struct ProfileResolver {
    settings: RagSettings,
    deps: PipelineDeps,
    default: Option<Arc<dyn RagPipeline>>,
    builders: Registry<PipelineBuilder>,
    built: Mutex<HashMap<String, Arc<dyn RagPipeline>>>,
}

/// A builder for a staged profile.
pub fn staged_profile(profile: &'static str) -> PipelineBuilder {
    Arc::new(move |settings, deps| {
        let options = resolve_options(profile, settings)?;
        Ok(
            Arc::new(StagedRagPipeline::new(profile, options, deps.clone())?)
                as Arc<dyn RagPipeline>,
        )
    })
}

fn not_yet_available(profile: &'static str) -> PipelineBuilder {
    Arc::new(move |_, _| {
        Err(QueryError::ProfileNotAvailable {
            name: profile.to_string(),
            reason: format!(
                "the {profile} pipeline is not part of this build yet (it arrives with the corrective/adaptive work, issue 7); use fast, balanced or quality meanwhile"
            ),
        })
    })
}

fn normalise(name: &str) -> String {
    name.trim().to_ascii_lowercase()
}

impl ProfileResolver {
    /// `default`: the host's own pipeline for the reserved name `default` (else `default`
    /// means the configured `settings.profile`).
    pub fn new(
        settings: RagSettings,
        deps: PipelineDeps,
        default: Option<Arc<dyn RagPipeline>>,
    ) -> Self {
        let builders = Registry::new(&PROFILE_LABEL);
        for profile in ["fast", "balanced", "quality"] {
            builders.register(profile, &[], staged_profile(profile));
        }
        for profile in ["corrective", "adaptive"] {
            builders.register(profile, &[], not_yet_available(profile));
        }
        Self {
            settings,
            deps,
            default,
            builders,
            built: Mutex::new(HashMap::new()),
        }
    }

    /// Registers (or replaces) the builder of a profile; a pipeline already built under that
    /// name is forgotten.
    pub fn register(&self, name: &str, builder: PipelineBuilder) {
        let name = normalise(name);
        self.built
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&name);
        self.builders.register(&name, &[], builder);
    }

    /// Known profile names, sorted, `default` included.
    pub fn known(&self) -> Vec<String> {
        let mut names = self.builders.known();
        names.push(DEFAULT_PROFILE.to_string());
        names.sort();
        names
    }

    /// The configuration profiles are built from.
    pub fn settings(&self) -> &RagSettings {
        &self.settings
    }

    /// The pipeline of `name` (case-insensitive), built on first use and memoised.
    pub fn resolve(&self, name: &str) -> Result<Arc<dyn RagPipeline>, QueryError> {
        let key = normalise(name);
        if key == DEFAULT_PROFILE {
            if let Some(host) = &self.default {
                return Ok(host.clone());
            }
            let configured = normalise(&self.settings.profile);
            if configured == DEFAULT_PROFILE {
                return Err(QueryError::InvalidOption {
                    key: "profile".into(),
                    reason: "is 'default', but no host pipeline was given; name a profile (fast, balanced, quality)".into(),
                });
            }
            return self.resolve(&configured);
        }
        if let Some(pipeline) = self
            .built
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(pipeline.clone());
        }
        let builder = self.builders.find(&key).ok_or_else(|| {
            QueryError::UnknownProfile(UnknownName::new(&PROFILE_LABEL, name.trim(), self.known()))
        })?;
        // Built without holding a lock, so that a builder may resolve other profiles; if two
        // callers race, the first stored pipeline wins and both get it.
        let pipeline = builder(&self.settings, &self.deps)?;
        tracing::info!(profile = %key, pipeline = pipeline.name(), "RAG profile resolved");
        let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        Ok(built.entry(key).or_insert(pipeline).clone())
    }
}
