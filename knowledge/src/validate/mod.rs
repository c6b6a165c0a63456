//! Validation of every document before chunking: prompt-injection and integrity checks, and the
//! quarantine for rejected content.
