//! Names the setting behind tonic's own refusal of an oversized request.
//!
//! tonic checks `server.max_request_bytes` (its `max_decoding_message_size`) while decoding,
//! before any of our handlers run, and answers `OUT_OF_RANGE` with "decoded message length too
//! large: found N bytes, the limit is: M bytes". That says the numbers but not which setting to
//! change. This response map appends the setting's name to that one status, wherever tonic put
//! it: in the headers of a trailers-only response or in the trailers of a streamed body.

use http_body_util::BodyExt;
use tonic::body::Body;
use tonic::{Code, Status};

/// The text tonic's decoder puts in the status it returns for an oversized message.
const TONIC_TOO_LARGE: &str = "message length too large";

/// Rewrites an `OUT_OF_RANGE` "message length too large" status in `response` so that it names
/// `server.max_request_bytes`; every other response passes unchanged.
pub fn name_request_limit(response: http::Response<Body>) -> http::Response<Body> {
    let (mut parts, body) = response.into_parts();
    name_in(&mut parts.headers);
    let body = body.map_frame(|mut frame| {
        if let Some(trailers) = frame.trailers_mut() {
            name_in(trailers);
        }
        frame
    });
    http::Response::from_parts(parts, Body::new(body))
}

fn name_in(headers: &mut http::HeaderMap) {
    // Look at the code first: only our own statuses reach here, but parsing the rest of a status
    // (its details) is needless work for every other response.
    let out_of_range = headers
        .get(Status::GRPC_STATUS)
        .is_some_and(|code| Code::from_bytes(code.as_bytes()) == Code::OutOfRange);
    if !out_of_range {
        return;
    }
    let Some(status) = Status::from_header_map(headers) else {
        return;
    };
    if !status.message().contains(TONIC_TOO_LARGE) {
        return;
    }
    let named = Status::new(
        Code::OutOfRange,
        format!(
            "{}: the request is larger than server.max_request_bytes; send a smaller request or raise server.max_request_bytes in the daemon's config",
            status.message()
        ),
    );
    // The message is ASCII text we built; encoding it cannot fail, and if it did the original
    // status would stay, which is still a correct answer.
    let _ = named.add_header(headers);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oversized() -> Status {
        Status::out_of_range(
            "decoded message length too large: found 4194320 bytes, the limit is: 4194304 bytes",
        )
    }

    async fn status_of(response: http::Response<Body>) -> Status {
        if let Some(status) = Status::from_header_map(response.headers()) {
            return status;
        }
        let collected = response.into_body().collect().await.expect("body");
        Status::from_header_map(collected.trailers().expect("trailers")).expect("a status")
    }

    #[tokio::test]
    async fn a_trailers_only_refusal_names_the_setting() {
        let named = status_of(name_request_limit(oversized().into_http())).await;
        assert_eq!(named.code(), Code::OutOfRange);
        assert!(
            named.message().contains("server.max_request_bytes"),
            "{}",
            named.message()
        );
        assert!(
            named.message().contains("the limit is: 4194304 bytes"),
            "{}",
            named.message()
        );
    }

    #[tokio::test]
    async fn a_refusal_in_the_trailers_names_the_setting() {
        let mut trailers = http::HeaderMap::new();
        oversized().add_header(&mut trailers).expect("headers");
        let body = http_body_util::StreamBody::new(tokio_stream::iter([Ok::<_, Status>(
            http_body::Frame::trailers(trailers),
        )]));
        let response = http::Response::new(Body::new(body));
        let named = status_of(name_request_limit(response)).await;
        assert!(
            named.message().contains("server.max_request_bytes"),
            "{}",
            named.message()
        );
    }

    #[tokio::test]
    async fn other_statuses_pass_unchanged() {
        for status in [
            Status::out_of_range("page 9 is past the end"),
            Status::invalid_argument("message length too large"),
        ] {
            let passed = status_of(name_request_limit(status.clone().into_http())).await;
            assert_eq!(passed.code(), status.code());
            assert_eq!(passed.message(), status.message());
        }
    }
}
