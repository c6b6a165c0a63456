//! Bearer-token authentication: when a token is configured (`server.token_env`), every call
//! must carry `authorization: Bearer <token>`; the comparison takes constant time.

use std::sync::Arc;

use tonic::{Request, Status};

/// Checks the bearer token on every call when one is configured.
#[derive(Clone)]
pub struct TokenCheck {
    expected: Option<Arc<str>>,
}

impl TokenCheck {
    pub fn new(expected: Option<Arc<str>>) -> Self {
        Self { expected }
    }
}

impl tonic::service::Interceptor for TokenCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else {
            return Ok(request);
        };
        let given = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match given {
            Some(token) if constant_time_eq(token.as_bytes(), expected.as_bytes()) => Ok(request),
            Some(_) => Err(Status::unauthenticated("invalid bearer token")),
            None => Err(Status::unauthenticated(
                "missing bearer token: send `authorization: Bearer <token>`",
            )),
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    fn with_header(value: Option<&str>) -> Request<()> {
        let mut request = Request::new(());
        if let Some(value) = value {
            request
                .metadata_mut()
                .insert("authorization", value.parse().expect("header"));
        }
        request
    }

    #[test]
    fn only_the_configured_token_passes() {
        let mut check = TokenCheck::new(Some(Arc::from("s3cret")));
        assert!(check.call(with_header(Some("Bearer s3cret"))).is_ok());
        let wrong = check.call(with_header(Some("Bearer nope"))).unwrap_err();
        assert_eq!(wrong.code(), tonic::Code::Unauthenticated);
        let missing = check.call(with_header(None)).unwrap_err();
        assert!(missing.message().contains("missing bearer token"));
        let mut open = TokenCheck::new(None);
        assert!(open.call(with_header(None)).is_ok());
    }
}
