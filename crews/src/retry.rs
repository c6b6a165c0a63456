//! The one retry policy of Orkeon's remote calls (the OpenAI-compatible chat model in
//! `orkeon-agents`, the OpenAI-compatible embedder in `orkeon-knowledge`): how many attempts,
//! which failures may succeed on another attempt (`429` and `5xx` answers; transport failures
//! as each client classifies them), and how long to wait before the next one — the server's
//! `Retry-After` when it gives a reasonable one, else exponential backoff with full jitter.
//!
//! Full jitter: the wait before retry `n` (0-based) is uniform in `[0, min(max_delay,
//! base_delay · 2ⁿ))`, so clients that failed together do not retry together.

use std::future::Future;
use std::time::Duration;

/// When and how often a failed call is tried again (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt: at most `max_retries + 1` attempts.
    pub max_retries: u32,
    /// Ceiling of the first retry's wait; it doubles with every retry.
    pub base_delay: Duration,
    /// No computed wait is longer.
    pub max_delay: Duration,
    /// A server's `Retry-After` up to this long is honoured; a longer one is ignored in favour
    /// of the computed backoff (a call that must wait minutes is better reported than held).
    pub max_retry_after: Duration,
}

/// A failed attempt, and whether another one may succeed.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure<E> {
    pub error: E,
    pub retryable: bool,
    /// The wait the server asked for, if any.
    pub retry_after: Option<Duration>,
}

impl<E> Failure<E> {
    /// A failure another attempt may not have (a timeout, a dropped connection).
    pub fn retryable(error: E) -> Self {
        Self {
            error,
            retryable: true,
            retry_after: None,
        }
    }

    /// A failure another attempt would repeat (a bad request, an unreadable answer).
    pub fn fatal(error: E) -> Self {
        Self {
            error,
            retryable: false,
            retry_after: None,
        }
    }

    /// An HTTP answer with `status`: retryable when [`RetryPolicy::retries_status`] says so,
    /// after the server's `retry_after` when it gave one.
    pub fn status(error: E, status: u16, retry_after: Option<Duration>) -> Self {
        Self {
            error,
            retryable: RetryPolicy::retries_status(status),
            retry_after,
        }
    }
}

/// The last failure, when the policy stopped trying.
#[derive(Debug, Clone, PartialEq)]
pub struct GaveUp<E> {
    pub error: E,
    /// Attempts made, the failed last one included.
    pub attempts: u32,
}

/// What the caller is told before each wait (for its log).
#[derive(Debug)]
pub struct RetryNotice<'a, E> {
    /// The attempt that failed, 1-based.
    pub attempt: u32,
    /// The wait before the next attempt.
    pub delay: Duration,
    pub error: &'a E,
}

impl RetryPolicy {
    /// Default ceiling of the first retry's wait.
    pub const BASE_DELAY: Duration = Duration::from_millis(250);
    /// Default cap of a computed wait.
    pub const MAX_DELAY: Duration = Duration::from_secs(8);
    /// Default longest `Retry-After` honoured.
    pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

    /// The default policy with `max_retries` retries.
    pub fn new(max_retries: u32) -> Self {
        Self {
            max_retries,
            base_delay: Self::BASE_DELAY,
            max_delay: Self::MAX_DELAY,
            max_retry_after: Self::MAX_RETRY_AFTER,
        }
    }

    /// Whether an HTTP answer with `status` is worth another attempt: `429 Too Many Requests`
    /// and every `5xx`.
    pub fn retries_status(status: u16) -> bool {
        status == 429 || (500..=599).contains(&status)
    }

    /// The ceiling of the wait before retry `retry` (0-based): `base_delay · 2^retry`, capped
    /// at `max_delay`.
    pub fn backoff_ceiling(&self, retry: u32) -> Duration {
        self.base_delay
            .saturating_mul(1u32 << retry.min(16))
            .min(self.max_delay)
    }

    /// The full-jitter wait before retry `retry` for a uniform draw `unit` in `[0, 1)`.
    pub fn backoff_with(&self, retry: u32, unit: f64) -> Duration {
        self.backoff_ceiling(retry).mul_f64(unit.clamp(0.0, 1.0))
    }

    /// The wait before retry `retry` when the server said nothing: a random full-jitter draw.
    pub fn backoff(&self, retry: u32) -> Duration {
        self.backoff_with(retry, rand::random::<f64>())
    }

    /// The wait before retry `retry`: the server's `retry_after` when it is at most
    /// `max_retry_after`, else [`RetryPolicy::backoff`].
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        retry_after
            .filter(|wait| *wait <= self.max_retry_after)
            .unwrap_or_else(|| self.backoff(retry))
    }

    /// Runs `attempt` until it succeeds, fails for good, or the retries are spent; `on_retry`
    /// hears about every failure that is retried, before the wait.
    pub async fn run<T, E, F, Fut, N>(
        &self,
        mut attempt: F,
        mut on_retry: N,
    ) -> Result<T, GaveUp<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Failure<E>>>,
        N: FnMut(RetryNotice<'_, E>),
    {
        let mut retry: u32 = 0;
        loop {
            let failure = match attempt().await {
                Ok(value) => return Ok(value),
                Err(failure) => failure,
            };
            if !failure.retryable || retry >= self.max_retries {
                return Err(GaveUp {
                    error: failure.error,
                    attempts: retry + 1,
                });
            }
            let delay = self.delay(retry, failure.retry_after);
            on_retry(RetryNotice {
                attempt: retry + 1,
                delay,
                error: &failure.error,
            });
            tokio::time::sleep(delay).await;
            retry += 1;
        }
    }
}

/// The wait a server asks for, from its headers (`header` returns a header's value by
/// lower-case name): `Retry-After-Ms` (milliseconds) first, else `Retry-After` in seconds. An
/// HTTP-date `Retry-After`, a negative or an unreadable value counts as none.
pub fn retry_after<'h>(header: impl Fn(&'static str) -> Option<&'h str>) -> Option<Duration> {
    let read = |name: &'static str| -> Option<f64> {
        header(name)?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    read("retry-after-ms")
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .or_else(|| read("retry-after").map(Duration::from_secs_f64))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::collections::HashMap;

    use super::*;

    fn fast(max_retries: u32) -> RetryPolicy {
        RetryPolicy {
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
            ..RetryPolicy::new(max_retries)
        }
    }

    #[test]
    fn rate_limits_and_server_errors_retry_client_errors_do_not() {
        for status in [429, 500, 502, 503, 504, 599] {
            assert!(RetryPolicy::retries_status(status), "{status}");
        }
        for status in [200, 301, 400, 401, 403, 404, 408, 422, 600] {
            assert!(!RetryPolicy::retries_status(status), "{status}");
        }
        assert!(Failure::status("x", 503, None).retryable);
        assert!(!Failure::status("x", 400, None).retryable);
    }

    #[test]
    fn the_ceiling_doubles_from_the_base_and_stops_at_the_cap() {
        let policy = RetryPolicy::new(3);
        let ceilings: Vec<u128> = (0..8)
            .map(|retry| policy.backoff_ceiling(retry).as_millis())
            .collect();
        assert_eq!(ceilings, vec![250, 500, 1000, 2000, 4000, 8000, 8000, 8000]);
        // Far past the cap the shift saturates instead of overflowing.
        assert_eq!(policy.backoff_ceiling(u32::MAX), RetryPolicy::MAX_DELAY);
    }

    #[test]
    fn full_jitter_spans_zero_to_the_ceiling() {
        let policy = RetryPolicy::new(3);
        assert_eq!(policy.backoff_with(2, 0.0), Duration::ZERO);
        assert_eq!(policy.backoff_with(2, 0.5), Duration::from_millis(500));
        assert_eq!(policy.backoff_with(2, 1.0), Duration::from_millis(1000));
        for retry in 0..20 {
            let delay = policy.backoff(retry);
            assert!(
                delay <= policy.backoff_ceiling(retry),
                "retry {retry}: {delay:?}"
            );
        }
        // Draws differ: the waits of clients that failed together are spread out.
        let draws: std::collections::HashSet<Duration> =
            (0..32).map(|_| policy.backoff(5)).collect();
        assert!(draws.len() > 1, "{draws:?}");
    }

    #[test]
    fn a_reasonable_retry_after_wins_over_the_backoff() {
        let policy = RetryPolicy::new(3);
        assert_eq!(
            policy.delay(0, Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
        assert_eq!(policy.delay(4, Some(Duration::ZERO)), Duration::ZERO);
        let too_long = policy.delay(0, Some(Duration::from_secs(3600)));
        assert!(too_long <= policy.backoff_ceiling(0), "{too_long:?}");
        assert!(policy.delay(1, None) <= policy.backoff_ceiling(1));
    }

    #[test]
    fn retry_after_reads_milliseconds_then_seconds() {
        let headers =
            |pairs: &[(&'static str, &'static str)]| -> HashMap<&'static str, &'static str> {
                pairs.iter().copied().collect()
            };
        let read =
            |h: &HashMap<&'static str, &'static str>| retry_after(|name| h.get(name).copied());
        assert_eq!(
            read(&headers(&[("retry-after", "2")])),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            read(&headers(&[("retry-after", " 1.5 ")])),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            read(&headers(&[("retry-after", "2"), ("retry-after-ms", "150")])),
            Some(Duration::from_millis(150))
        );
        assert_eq!(
            read(&headers(&[(
                "retry-after",
                "Wed, 21 Oct 2015 07:28:00 GMT"
            )])),
            None
        );
        assert_eq!(read(&headers(&[("retry-after", "-1")])), None);
        assert_eq!(read(&headers(&[])), None);
    }

    #[tokio::test]
    async fn retryable_failures_are_retried_until_success() {
        let calls = Cell::new(0u32);
        let mut notices = Vec::new();
        let result = fast(3)
            .run(
                || {
                    calls.set(calls.get() + 1);
                    let n = calls.get();
                    async move {
                        if n < 3 {
                            Err(Failure::retryable(format!("failure {n}")))
                        } else {
                            Ok(n)
                        }
                    }
                },
                |notice| notices.push((notice.attempt, notice.error.clone())),
            )
            .await;
        assert_eq!(result, Ok(3));
        assert_eq!(
            notices,
            vec![(1, "failure 1".to_string()), (2, "failure 2".to_string())]
        );
    }

    #[tokio::test]
    async fn the_retries_run_out_and_the_last_failure_is_reported() {
        let calls = Cell::new(0u32);
        let result: Result<(), _> = fast(2)
            .run(
                || {
                    calls.set(calls.get() + 1);
                    let n = calls.get();
                    async move { Err(Failure::status(format!("503 #{n}"), 503, None)) }
                },
                |_| {},
            )
            .await;
        assert_eq!(
            result,
            Err(GaveUp {
                error: "503 #3".to_string(),
                attempts: 3
            })
        );
        assert_eq!(calls.get(), 3, "one call and two retries");
    }

    #[tokio::test]
    async fn a_fatal_failure_stops_at_once() {
        let calls = Cell::new(0u32);
        let mut retried = false;
        let result: Result<(), _> = fast(5)
            .run(
                || {
                    calls.set(calls.get() + 1);
                    async { Err(Failure::status("bad request", 400, None)) }
                },
                |_| retried = true,
            )
            .await;
        assert_eq!(
            result,
            Err(GaveUp {
                error: "bad request",
                attempts: 1
            })
        );
        assert_eq!(calls.get(), 1);
        assert!(!retried);
    }

    #[tokio::test]
    async fn no_retries_means_one_attempt() {
        let calls = Cell::new(0u32);
        let result: Result<(), _> = fast(0)
            .run(
                || {
                    calls.set(calls.get() + 1);
                    async { Err(Failure::retryable("timeout")) }
                },
                |_| {},
            )
            .await;
        assert_eq!(result.unwrap_err().attempts, 1);
        assert_eq!(calls.get(), 1);
    }
}
