//! [`ServiceError`]: the one error type of the application layer. Every library error an
//! operation can meet converts into it here (`From`), by what the caller can do about it; the
//! gRPC layer maps it to a status code in `grpc/error.rs` and nowhere else.

use orkeon_knowledge::eval::EvalError;
use orkeon_knowledge::ingest::IngestError;
use orkeon_knowledge::query::QueryError;
use orkeon_knowledge::store::StoreError;

use crate::engine::EngineError;
use crate::runs::RunStoreError;

/// Why an operation failed, classified by what the caller can do about it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServiceError {
    /// The request itself is wrong: `field` names what to fix.
    #[error("{field}: {message}")]
    InvalidArgument { field: String, message: String },
    /// A named thing does not exist; `known` lists what does.
    #[error("{kind} '{name}' does not exist (known: {}){hint}", known_list(.known))]
    NotFound {
        kind: String,
        name: String,
        known: Vec<String>,
        /// What to do next, e.g. "; create it with `orkeon rag ingest …`" (may be empty).
        hint: String,
    },
    /// The request is valid but the system is not in a state to serve it (a crew with no
    /// valid version, a profile that cannot retrieve alone, a component that is not set up).
    #[error("{0}")]
    FailedPrecondition(String),
    /// Try again later (shutting down, an upstream LLM is failing).
    /// The caller is not allowed in (a missing or wrong bearer token).
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Unavailable(String),
    /// A limit was reached (a queue is full).
    #[error("{0}")]
    ResourceExhausted(String),
    /// A fault on our side (I/O, corruption, a task that died).
    #[error("{0}")]
    Internal(String),
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        "none".to_string()
    } else {
        known.join(", ")
    }
}

impl ServiceError {
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        ServiceError::InvalidArgument {
            field: field.to_string(),
            message: message.into(),
        }
    }

    /// `InvalidArgument` "is required" unless `value` has non-blank text.
    pub fn require(field: &str, value: &str) -> Result<(), Self> {
        if value.trim().is_empty() {
            return Err(Self::invalid(field, "is required"));
        }
        Ok(())
    }

    /// The same class of error with another message (a `NotFound` keeps its own).
    fn reworded(self, message: String) -> Self {
        match self {
            ServiceError::InvalidArgument { field, .. } => Self::invalid(&field, message),
            not_found @ ServiceError::NotFound { .. } => not_found,
            ServiceError::FailedPrecondition(_) => ServiceError::FailedPrecondition(message),
            ServiceError::Unauthenticated(_) => ServiceError::Unauthenticated(message),
            ServiceError::Unavailable(_) => ServiceError::Unavailable(message),
            ServiceError::ResourceExhausted(_) => ServiceError::ResourceExhausted(message),
            ServiceError::Internal(_) => ServiceError::Internal(message),
        }
    }

    pub fn unknown_collection(name: &str, known: Vec<String>) -> Self {
        ServiceError::NotFound {
            kind: "collection".into(),
            name: name.to_string(),
            known,
            hint: format!("; create it with `orkeon rag ingest --collection {name} --source PATH`"),
        }
    }
}

impl From<StoreError> for ServiceError {
    fn from(error: StoreError) -> Self {
        let message = error.to_string();
        match error {
            StoreError::UnknownCollection(name) => Self::unknown_collection(&name, Vec::new()),
            StoreError::InvalidName(_) => Self::invalid("collection", message),
            StoreError::InvalidRequest { .. } => Self::invalid("query", message),
            StoreError::ProfileMismatch { .. } | StoreError::InvalidSetting { .. } => {
                ServiceError::FailedPrecondition(message)
            }
            StoreError::InvalidBatch { .. } | StoreError::Io(_) | StoreError::Corrupt(_) => {
                ServiceError::Internal(message)
            }
        }
    }
}

impl From<IngestError> for ServiceError {
    fn from(error: IngestError) -> Self {
        let message = error.to_string();
        match error {
            // The request named something that cannot be loaded (a path outside the roots, a
            // URL that is not allowed, a glob that does not parse): the caller fixes `sources`.
            IngestError::Load(_) => Self::invalid("sources", message),
            IngestError::Chunk(_) => Self::invalid("chunking", message),
            IngestError::Store(store) => store.into(),
            IngestError::Embed(_) => ServiceError::Unavailable(message),
            IngestError::Quarantine(_) | IngestError::Task(_) => ServiceError::Internal(message),
            // The caller asks for replace, or names the other sources too.
            IngestError::ReindexWouldPurge { .. } => Self::invalid("replace", message),
            // Classified by its cause, with the message saying the collection is unchanged.
            IngestError::ReindexAborted { source, .. } => {
                ServiceError::from(*source).reworded(message)
            }
        }
    }
}

impl From<QueryError> for ServiceError {
    fn from(error: QueryError) -> Self {
        let message = error.to_string();
        match error {
            QueryError::UnknownProfile { .. } | QueryError::ProfileNotAvailable { .. } => {
                Self::invalid("profile", message)
            }
            QueryError::InvalidQuery(_) | QueryError::EmptyQuestion => {
                Self::invalid("query", message)
            }
            QueryError::EmptyCollection => Self::invalid("collection", message),
            QueryError::UnknownReranker { .. }
            | QueryError::UnknownTransformer { .. }
            | QueryError::InvalidOption { .. }
            | QueryError::NoChatModel { .. }
            | QueryError::RetrievalOnlyUnsupported { .. }
            | QueryError::Setup { .. }
            | QueryError::Chat {
                source: orkeon_crews::ports::ChatError::NotConfigured(_),
                ..
            } => ServiceError::FailedPrecondition(message),
            QueryError::Chat { .. } => ServiceError::Unavailable(message),
            QueryError::Store { source, .. } => match source {
                StoreError::UnknownCollection(_) | StoreError::InvalidName(_) => source.into(),
                _ => ServiceError::Internal(message),
            },
            QueryError::Embed { .. }
            | QueryError::Rerank { .. }
            | QueryError::Groundedness { .. }
            | QueryError::Internal { .. } => ServiceError::Internal(message),
        }
    }
}

impl From<EvalError> for ServiceError {
    fn from(error: EvalError) -> Self {
        let message = error.to_string();
        match error {
            EvalError::Io { .. }
            | EvalError::UnknownFormat { .. }
            | EvalError::InvalidDataset { .. }
            | EvalError::InvalidLine { .. }
            | EvalError::UnknownSplit { .. } => Self::invalid("dataset", message),
            EvalError::InvalidOptions(_) => Self::invalid("options", message),
            EvalError::Ingest { source, .. } => source.into(),
            EvalError::Profile { .. } => Self::invalid("compare", message),
            _ => ServiceError::Internal(message),
        }
    }
}

impl From<RunStoreError> for ServiceError {
    fn from(error: RunStoreError) -> Self {
        match error {
            RunStoreError::UnknownRun(id) => ServiceError::NotFound {
                kind: "run".into(),
                name: id,
                known: Vec::new(),
                hint: "; list runs with `orkeon crew runs`".into(),
            },
            other => ServiceError::Internal(other.to_string()),
        }
    }
}

impl From<EngineError> for ServiceError {
    fn from(error: EngineError) -> Self {
        let message = error.to_string();
        match error {
            EngineError::UnknownCrew { name, known } => ServiceError::NotFound {
                kind: "crew".into(),
                name,
                known,
                hint: String::new(),
            },
            EngineError::InvalidCrew { .. } | EngineError::DefinitionConflict { .. } => {
                ServiceError::FailedPrecondition(message)
            }
            EngineError::MissingInput(_) => Self::invalid("inputs", message),
            EngineError::ShuttingDown => ServiceError::Unavailable(message),
            EngineError::Overloaded { .. } => ServiceError::ResourceExhausted(message),
            EngineError::Store(store) => store.into(),
            EngineError::Setup(_) => ServiceError::Internal(message),
        }
    }
}
