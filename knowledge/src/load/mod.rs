//! Loaders: source descriptors → raw bytes → [`crate::types::Document`]s.
//!
//! Sources are files (globs expanded relative to a base directory, confined to allowed roots)
//! or http(s) URLs (off unless allowed). The loader is chosen by extension / content type.
