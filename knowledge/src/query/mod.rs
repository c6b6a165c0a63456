//! The staged query pipeline: transform → retrieve → fuse → rerank → assemble → generate →
//! groundedness.
