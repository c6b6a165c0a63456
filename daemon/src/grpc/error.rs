//! The one mapping between [`ServiceError`] and `tonic::Status`, in both directions: the server
//! turns an operation's error into a status with standard error details (`BadRequest` naming
//! the field, `ResourceInfo` + `ErrorInfo` for what is missing and what exists), and the CLI's
//! remote client turns a status back into the same `ServiceError`, so a remote command fails
//! with the message the local one prints.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::service::ServiceError;

/// `ErrorInfo` domain of Orkeon's statuses.
const DOMAIN: &str = "orkeon";
/// Separator of the `known` names in `ErrorInfo` metadata (names never contain it).
const KNOWN_SEPARATOR: char = '\n';

impl From<ServiceError> for Status {
    fn from(error: ServiceError) -> Self {
        let message = error.to_string();
        match error {
            ServiceError::InvalidArgument { field, message } => Status::with_error_details(
                Code::InvalidArgument,
                format!("{field}: {message}"),
                ErrorDetails::with_bad_request_violation(field, message),
            ),
            ServiceError::NotFound {
                kind,
                name,
                known,
                hint,
            } => {
                let mut details =
                    ErrorDetails::with_resource_info(kind.clone(), name.clone(), "", "not found");
                let metadata = HashMap::from([
                    ("kind".to_string(), kind),
                    ("name".to_string(), name),
                    (
                        "known".to_string(),
                        known.join(&KNOWN_SEPARATOR.to_string()),
                    ),
                    ("hint".to_string(), hint),
                ]);
                details.set_error_info("NOT_FOUND", DOMAIN, metadata);
                Status::with_error_details(Code::NotFound, message, details)
            }
            ServiceError::FailedPrecondition(_) => Status::with_error_details(
                Code::FailedPrecondition,
                message.clone(),
                ErrorDetails::with_precondition_failure_violation(
                    "FAILED_PRECONDITION",
                    "request",
                    message,
                ),
            ),
            ServiceError::Unauthenticated(_) => Status::unauthenticated(message),
            ServiceError::Unavailable(_) => Status::unavailable(message),
            ServiceError::ResourceExhausted(_) => Status::resource_exhausted(message),
            ServiceError::Internal(_) => Status::internal(message),
        }
    }
}

impl From<Status> for ServiceError {
    fn from(status: Status) -> Self {
        let message = status.message().to_string();
        let details = status.get_error_details();
        match status.code() {
            Code::InvalidArgument => match details
                .bad_request()
                .and_then(|b| b.field_violations.first().cloned())
            {
                Some(v) => ServiceError::InvalidArgument {
                    field: v.field,
                    message: v.description,
                },
                None => ServiceError::invalid("request", message),
            },
            Code::NotFound => match details.error_info() {
                Some(info) => {
                    let get = |k: &str| info.metadata.get(k).cloned().unwrap_or_default();
                    let known = get("known");
                    ServiceError::NotFound {
                        kind: get("kind"),
                        name: get("name"),
                        known: known
                            .split(KNOWN_SEPARATOR)
                            .filter(|s| !s.is_empty())
                            .map(str::to_string)
                            .collect(),
                        hint: get("hint"),
                    }
                }
                None => ServiceError::Internal(message),
            },
            Code::FailedPrecondition => ServiceError::FailedPrecondition(message),
            Code::Unauthenticated | Code::PermissionDenied => {
                ServiceError::Unauthenticated(message)
            }
            Code::ResourceExhausted => ServiceError::ResourceExhausted(message),
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Aborted => {
                ServiceError::Unavailable(format!("{message} ({:?})", status.code()))
            }
            _ => ServiceError::Internal(format!("{message} ({:?})", status.code())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineError;
    use crate::runs::RunStoreError;
    use orkeon_knowledge::query::QueryError;

    /// Every variant maps to its code, and comes back from the wire as itself.
    #[test]
    fn every_variant_maps_to_its_code_and_round_trips() {
        let cases = vec![
            (
                ServiceError::invalid("crew", "is required"),
                Code::InvalidArgument,
            ),
            (
                ServiceError::unknown_collection("kb", vec!["a".into(), "b".into()]),
                Code::NotFound,
            ),
            (
                ServiceError::FailedPrecondition("crew 'x' has no valid version".into()),
                Code::FailedPrecondition,
            ),
            (
                ServiceError::Unauthenticated("missing bearer token".into()),
                Code::Unauthenticated,
            ),
            (
                ServiceError::Unavailable("shutting down".into()),
                Code::Unavailable,
            ),
            (
                ServiceError::ResourceExhausted("run queue full".into()),
                Code::ResourceExhausted,
            ),
            (ServiceError::Internal("disk".into()), Code::Internal),
        ];
        for (error, code) in cases {
            let status = Status::from(error.clone());
            assert_eq!(status.code(), code, "{error}");
            assert_eq!(status.message(), error.to_string());
            let back = ServiceError::from(status);
            match (&error, &back) {
                // The client marks transport-class codes with the code it saw.
                (ServiceError::Unavailable(a), ServiceError::Unavailable(b)) => {
                    assert!(b.starts_with(a.as_str()), "{b}")
                }
                (ServiceError::Internal(a), ServiceError::Internal(b)) => {
                    assert!(b.starts_with(a.as_str()), "{b}")
                }
                _ => assert_eq!(back, error),
            }
        }
    }

    #[test]
    fn invalid_argument_names_the_field_in_standard_details() {
        let status = Status::from(ServiceError::invalid("top_n", "must be at most 100"));
        let details = status.get_error_details();
        let violations = &details.bad_request().expect("bad request").field_violations;
        assert_eq!(violations[0].field, "top_n");
        assert_eq!(violations[0].description, "must be at most 100");
    }

    #[test]
    fn library_errors_reach_the_right_code() {
        let cases: Vec<(ServiceError, Code)> = vec![
            (EngineError::ShuttingDown.into(), Code::Unavailable),
            (
                EngineError::MissingInput("question".into()).into(),
                Code::InvalidArgument,
            ),
            (
                EngineError::UnknownCrew {
                    name: "x".into(),
                    known: vec!["a".into()],
                }
                .into(),
                Code::NotFound,
            ),
            (
                EngineError::InvalidCrew {
                    name: "x".into(),
                    error: "x.yaml:1:1: bad".into(),
                }
                .into(),
                Code::FailedPrecondition,
            ),
            (RunStoreError::UnknownRun("r".into()).into(), Code::NotFound),
            (QueryError::EmptyQuestion.into(), Code::InvalidArgument),
            (
                QueryError::NoChatModel {
                    stage: "generate".into(),
                }
                .into(),
                Code::FailedPrecondition,
            ),
            (
                orkeon_knowledge::store::StoreError::Io("disk full".into()).into(),
                Code::Internal,
            ),
            (
                orkeon_knowledge::store::StoreError::UnknownCollection("kb".into()).into(),
                Code::NotFound,
            ),
            (
                orkeon_knowledge::ingest::IngestError::ReindexAborted {
                    collection: "kb".into(),
                    source: Box::new(orkeon_knowledge::ingest::IngestError::Embed(
                        orkeon_knowledge::embed::EmbedError::Inference("down".into()),
                    )),
                }
                .into(),
                Code::Unavailable,
            ),
        ];
        for (error, code) in cases {
            let text = error.to_string();
            assert_eq!(Status::from(error).code(), code, "{text}");
        }
    }
}
