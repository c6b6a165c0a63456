//! The bridge between the synchronous storage ports and the asynchronous PostgreSQL driver.
//!
//! `DocumentStore`, `QuarantineStore` and `RunStore` are synchronous, and they are called both
//! from plain threads (CLI commands, `spawn_blocking`, tests) and from inside tokio tasks (the
//! daemon's gRPC handlers, crews' runs). `tokio-postgres` and `deadpool-postgres` are async, and
//! their connections are tasks bound to the runtime that created them.
//!
//! So the store owns a private multi-thread runtime: every call spawns its future on it (the
//! pool's connections live there too) and waits for the result:
//! - on a worker of a multi-thread runtime, inside [`tokio::task::block_in_place`], so the
//!   caller's other tasks move to other workers while this one waits;
//! - anywhere else (a plain thread, a blocking-pool thread, a current-thread runtime, where
//!   `block_in_place` would panic) with a plain blocking wait: the future runs on the store's own
//!   runtime, never on the waiting thread, so it cannot deadlock.
//!
//! `Runtime::block_on` is never used: it panics when called inside a runtime. The runtime is
//! shut down in the background when the store is dropped, because dropping a runtime inside an
//! async context panics too.

use std::future::Future;

use tokio::runtime::{Builder, Runtime, RuntimeFlavor};

/// The store's private runtime.
pub(crate) struct Bridge {
    runtime: Option<Runtime>,
}

impl Bridge {
    /// A runtime of `threads` workers.
    pub(crate) fn new(threads: usize) -> std::io::Result<Self> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("orkeon-postgres")
            .enable_all()
            .build()?;
        Ok(Self {
            runtime: Some(runtime),
        })
    }

    /// Runs `future` on the store's runtime and waits for its output (see the module docs).
    /// A panic inside the future is resumed on the caller.
    pub(crate) fn run<F>(&self, future: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let runtime = self
            .runtime
            .as_ref()
            .expect("the store's runtime lives as long as the store");
        let handle = runtime.spawn(future);
        let wait = move || futures::executor::block_on(handle);
        let joined = match tokio::runtime::Handle::try_current() {
            Ok(current) if current.runtime_flavor() == RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(wait)
            }
            _ => wait(),
        };
        match joined {
            Ok(output) => output,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(error) => panic!("a PostgreSQL store call was cancelled: {error}"),
        }
    }
}

impl Bridge {
    /// Spawns `future` on the store's runtime without waiting; it is cancelled when the store
    /// (so the runtime) is dropped.
    pub(crate) fn spawn<F>(&self, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if let Some(runtime) = &self.runtime {
            runtime.spawn(future);
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_from_a_plain_thread() {
        let bridge = Bridge::new(1).unwrap();
        assert_eq!(bridge.run(async { 40 + 2 }), 42);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_from_a_multi_thread_worker_and_drops_inside_it() {
        let bridge = Bridge::new(1).unwrap();
        let value = bridge.run(async {
            tokio::task::yield_now().await;
            7
        });
        assert_eq!(value, 7);
        drop(bridge);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn runs_from_a_current_thread_runtime() {
        let bridge = Bridge::new(1).unwrap();
        assert_eq!(bridge.run(async { "ok" }), "ok");
        drop(bridge);
    }

    #[test]
    fn a_panic_inside_reaches_the_caller() {
        let bridge = Bridge::new(1).unwrap();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            bridge.run(async { panic!("inner failure") })
        }));
        let payload = caught.expect_err("the panic is resumed");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"inner failure"));
    }
}
