//! Chunkers: a document → byte-addressed chunks, sized in embedding-model tokens.
//!
//! Strategies behind [`ChunkerFactory`]: `recursive`, `sentence`, `structural`, `semantic`.
//! Unknown names fail listing the known ones.
