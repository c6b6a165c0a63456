//! Shared by the integration tests that use the real models: where the model files are, and
//! the embedding settings pointing there.

#![allow(dead_code)]

use std::path::PathBuf;

use orkeon_knowledge::settings::EmbeddingSettings;
/// The models folder: `$ORKEON_MODELS_DIR`, else `../shared/models` (the crate's one helper).
pub use orkeon_knowledge::testing::models_dir;

/// One model's folder in [`models_dir`].
pub fn model(name: &str) -> PathBuf {
    models_dir().join(name)
}

/// Default embedding settings whose `models_dir` is [`models_dir`].
pub fn embedding_settings() -> EmbeddingSettings {
    EmbeddingSettings {
        models_dir: Some(models_dir()),
        ..EmbeddingSettings::default()
    }
}

/// Cosine similarity.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}
