//! Citation markers in model output. The marker syntax, the run-level ledger and the output
//! check live in the crews kernel ([`orkeon_crews::citations`]) because the run owns the
//! ledger; they are re-exported here for the runner and the tools.

pub use orkeon_crews::citations::{CitationCheck, CitationLedger, cited_markers, map_markers};
