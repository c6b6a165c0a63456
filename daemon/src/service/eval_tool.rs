//! [`CrewEvalTool`]: the `rag_eval` tool of crews' agents, over the application layer's
//! evaluation ([`KnowledgeApi::evaluate`]). It evaluates the calling agent's attached collection
//! as it is (nothing is ingested) on a golden YAML dataset that must lie inside the crew file's
//! folder, offline and retrieval-only, and answers the metrics table.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use orkeon_agents::tools::{EvalRequest, EvalScope, EvalTool};
use serde_json::json;

use super::{EvalParams, KnowledgeApi};

/// Documents ranked per case (the least the metrics @10 need).
const RETRIEVE_K: usize = 10;
/// Cases run at once.
const CONCURRENCY: usize = 2;

/// Serves `rag_eval` for crews.
pub struct CrewEvalTool {
    api: Arc<dyn KnowledgeApi>,
    /// Profile evaluated when the call names none (`rag.profile`).
    default_profile: String,
}

impl CrewEvalTool {
    pub fn new(api: Arc<dyn KnowledgeApi>, default_profile: impl Into<String>) -> Self {
        Self {
            api,
            default_profile: default_profile.into(),
        }
    }
}

/// `dataset` resolved against `crew_dir`, refused unless it is a file inside it (symlinks and
/// `..` resolved first).
fn dataset_in_crew_dir(crew_dir: &Path, dataset: &str) -> Result<PathBuf, String> {
    let folder = crew_dir.canonicalize().map_err(|e| {
        format!(
            "rag_eval: the crew folder {} cannot be read: {e}",
            crew_dir.display()
        )
    })?;
    let joined = crew_dir.join(dataset);
    let path = joined.canonicalize().map_err(|e| {
        format!(
            "rag_eval: dataset '{dataset}' ({}) cannot be read: {e}; name a golden YAML file inside the crew's folder",
            joined.display()
        )
    })?;
    if !path.starts_with(&folder) {
        return Err(format!(
            "rag_eval: dataset '{dataset}' resolves to {}, outside the crew's folder {}; datasets must lie inside it",
            path.display(),
            folder.display()
        ));
    }
    if !path.is_file() {
        return Err(format!(
            "rag_eval: dataset '{dataset}' is not a file; name a golden YAML file (BEIR folders are evaluated with `orkeon rag eval`)"
        ));
    }
    Ok(path)
}

#[async_trait]
impl EvalTool for CrewEvalTool {
    async fn evaluate(
        &self,
        request: EvalRequest,
        scope: EvalScope,
    ) -> Result<serde_json::Value, String> {
        let dataset = request.dataset.unwrap_or_default();
        let path = dataset_in_crew_dir(&scope.crew_dir, &dataset)?;
        let profiles = if request.profiles.is_empty() {
            vec![self.default_profile.clone()]
        } else {
            request.profiles
        };
        let params = EvalParams {
            dataset: path,
            split: "test".into(),
            profiles,
            offline: true,
            generate: false,
            concurrency: CONCURRENCY,
            retrieve_k: RETRIEVE_K,
            gate: None,
            collection: Some(scope.collection.clone()),
            // Already confined to the crew's folder.
            base_dir: Some(scope.crew_dir.clone()),
            chunking: Default::default(),
            ephemeral: false,
        };
        let outcome = self
            .api
            .evaluate(params, None)
            .await
            .map_err(|e| format!("rag_eval of '{}' on {dataset}: {e}", scope.collection))?;
        let profiles: Vec<serde_json::Value> = outcome
            .report
            .profiles
            .iter()
            .map(|p| {
                json!({
                    "profile": p.profile,
                    "ndcg_at_10": p.ndcg_at_10,
                    "mrr_at_10": p.mrr_at_10,
                    "recall_at": p.recall_at,
                    "cases": p.gated_cases,
                })
            })
            .collect();
        Ok(json!({
            "collection": scope.collection,
            "dataset": dataset,
            "queries": outcome.report.queries,
            "profiles": profiles,
            "table": outcome.markdown,
            "warnings": outcome.report.warnings,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datasets_outside_the_crew_folder_are_refused() {
        let work = tempfile::tempdir().unwrap();
        let crew = work.path().join("crews");
        std::fs::create_dir_all(crew.join("eval")).unwrap();
        std::fs::write(crew.join("eval/golden.yaml"), "cases: []\n").unwrap();
        std::fs::write(work.path().join("secret.yaml"), "cases: []\n").unwrap();

        let inside = dataset_in_crew_dir(&crew, "eval/golden.yaml").unwrap();
        assert!(inside.ends_with("crews/eval/golden.yaml"), "{inside:?}");
        let escape = dataset_in_crew_dir(&crew, "../secret.yaml").unwrap_err();
        assert!(escape.contains("outside the crew's folder"), "{escape}");
        let absolute = dataset_in_crew_dir(
            &crew,
            &work.path().join("secret.yaml").display().to_string(),
        )
        .unwrap_err();
        assert!(absolute.contains("outside the crew's folder"), "{absolute}");
        let folder = dataset_in_crew_dir(&crew, "eval").unwrap_err();
        assert!(folder.contains("not a file"), "{folder}");
        let missing = dataset_in_crew_dir(&crew, "eval/none.yaml").unwrap_err();
        assert!(missing.contains("cannot be read"), "{missing}");
    }
}
