//! The incremental ingestion pipeline: load → validate → chunk → embed → upsert, driven by the
//! per-collection manifest.
