//! Runs as the daemon serves them: the run store port ([`RunStore`], persisted by the storage
//! provider) plus live delivery. [`Runs`] appends through the store (durable first), then
//! publishes each event on the run's bounded broadcast channel; [`Runs::follow`] is the one
//! replay-and-follow loop (watchers, waiters): a subscriber that falls behind reads the events it
//! missed back from the store by sequence number.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::Stream;
pub use orkeon_crews::run::store::{
    RunNotice, RunRecord, RunStore, RunStoreError, Served, StoredEvent, now,
};
use orkeon_crews::run::{RunEvent, RunStatus};
use tokio::sync::broadcast;

/// Capacity of each run's live channel; slower watchers catch up from the store.
const LIVE_CAPACITY: usize = 256;

/// The run store with live subscriptions.
pub struct Runs {
    store: Arc<dyn RunStore>,
    live: Mutex<HashMap<String, broadcast::Sender<StoredEvent>>>,
}

impl Runs {
    pub fn new(store: Arc<dyn RunStore>) -> Self {
        Self {
            store,
            live: Mutex::new(HashMap::new()),
        }
    }

    /// Ends the runs a previous process left running (terminal event + failed record).
    pub fn recover_interrupted(&self) -> Result<usize, RunStoreError> {
        self.store.recover_interrupted()
    }

    /// See [`RunStore::serve_definition`].
    pub fn serve_definition(
        &self,
        crew: &str,
        hash: &str,
    ) -> Result<Vec<(String, String)>, RunStoreError> {
        self.store.serve_definition(crew, hash)
    }

    /// See [`RunStore::is_shared`].
    pub fn is_shared(&self) -> bool {
        self.store.is_shared()
    }

    /// See [`RunStore::claim`].
    pub fn claim(&self, served: &Served) -> Result<Option<RunRecord>, RunStoreError> {
        self.store.claim(served)
    }

    /// See [`RunStore::queued`].
    pub fn queued(&self) -> Result<usize, RunStoreError> {
        self.store.queued()
    }

    /// See [`RunStore::cancel_queued`].
    pub fn cancel_queued(&self, run_id: &str, reason: &str) -> Result<bool, RunStoreError> {
        self.store.cancel_queued(run_id, reason)
    }

    /// See [`RunStore::notices`].
    pub fn notices(&self) -> Option<broadcast::Receiver<RunNotice>> {
        self.store.notices()
    }

    /// Creates a run, or returns the existing one with the same idempotency key (`false`).
    pub fn create(&self, run: RunRecord) -> Result<(RunRecord, bool), RunStoreError> {
        self.store.create(run)
    }

    /// The run an idempotency key created for a crew, if any.
    pub fn find_by_key(&self, crew: &str, key: &str) -> Result<Option<RunRecord>, RunStoreError> {
        self.store.find_by_key(crew, key)
    }

    pub fn get(&self, run_id: &str) -> Result<RunRecord, RunStoreError> {
        self.store.get(run_id)
    }

    /// Runs, newest first, strictly before `after` when given.
    pub fn list(&self, limit: usize, after: Option<&str>) -> Result<Vec<RunRecord>, RunStoreError> {
        self.store.list(limit, after)
    }

    /// Events with `seq > after`, in order.
    pub fn events_after(
        &self,
        run_id: &str,
        after: u64,
    ) -> Result<Vec<StoredEvent>, RunStoreError> {
        self.store.events_after(run_id, after)
    }

    /// Appends an event (durable when this returns) and publishes it to live watchers.
    pub fn append(&self, run_id: &str, event: RunEvent) -> Result<StoredEvent, RunStoreError> {
        let stored = self.store.append(run_id, event)?;
        if let Some(sender) = self.sender(run_id, false) {
            // No receiver is fine: watchers read from the store.
            let _ = sender.send(stored.clone());
        }
        Ok(stored)
    }

    /// Records a run's end.
    pub fn finish(
        &self,
        run_id: &str,
        state: RunStatus,
        reason: Option<String>,
        final_output: Option<String>,
    ) -> Result<RunRecord, RunStoreError> {
        self.store.finish(run_id, state, reason, final_output)
    }

    /// A receiver of the run's future events (subscribe before reading the backlog).
    pub fn subscribe(&self, run_id: &str) -> broadcast::Receiver<StoredEvent> {
        match self.sender(run_id, true) {
            Some(sender) => sender.subscribe(),
            None => broadcast::channel(1).1,
        }
    }

    /// The run's events after `after_seq`, then its new ones as they are appended, ending
    /// after the terminal event (or when the run is over and nothing newer exists). The one
    /// replay-and-follow loop: watchers and waiters use it. A slow consumer only delays itself:
    /// what the live channel drops is read back from the store.
    pub fn follow(
        self: &Arc<Self>,
        run_id: &str,
        after_seq: u64,
    ) -> impl Stream<Item = Result<StoredEvent, RunStoreError>> + Send + 'static {
        follow_stream(self.clone(), run_id.to_string(), after_seq)
    }

    /// Drops the live channel of a finished run.
    pub fn close_live(&self, run_id: &str) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.remove(run_id);
    }

    fn sender(&self, run_id: &str, create: bool) -> Option<broadcast::Sender<StoredEvent>> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        if create {
            Some(
                live.entry(run_id.to_string())
                    .or_insert_with(|| broadcast::channel(LIVE_CAPACITY).0)
                    .clone(),
            )
        } else {
            live.get(run_id).cloned()
        }
    }
}

/// How long a follower waits for news before it looks at the store again: short when nothing
/// but this process's own appends can wake it, longer when the store also announces the other
/// processes' events ([`RunStore::notices`]).
const RECHECK: std::time::Duration = std::time::Duration::from_secs(1);
const RECHECK_WITH_NOTICES: std::time::Duration = std::time::Duration::from_secs(5);

/// State of one [`Runs::follow`] stream.
struct Follow {
    runs: Arc<Runs>,
    run_id: String,
    last: u64,
    live: broadcast::Receiver<StoredEvent>,
    /// The store's notices (events appended by other processes), when it has them.
    notices: Option<broadcast::Receiver<RunNotice>>,
    pending: std::collections::VecDeque<StoredEvent>,
    done: bool,
}

impl Follow {
    /// Waits until this run may have a new event: one appended here, a notice of one appended
    /// elsewhere (or of missed notices), or the recheck interval.
    async fn news(&mut self) {
        let recheck = if self.notices.is_some() {
            RECHECK_WITH_NOTICES
        } else {
            RECHECK
        };
        let run_id = self.run_id.clone();
        let notices = &mut self.notices;
        let elsewhere = async {
            let Some(rx) = notices.as_mut() else {
                return std::future::pending::<bool>().await;
            };
            loop {
                match rx.recv().await {
                    Ok(RunNotice::Event { run_id: id, .. }) if id == run_id => return true,
                    Ok(RunNotice::Resync) => return true,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return true,
                    Err(broadcast::error::RecvError::Closed) => return false,
                }
            }
        };
        let mut closed_notices = false;
        tokio::select! {
            received = self.live.recv() => {
                if let Err(broadcast::error::RecvError::Closed) = received {
                    self.live = self.runs.subscribe(&self.run_id);
                }
            }
            open = elsewhere => closed_notices = !open,
            _ = tokio::time::sleep(recheck) => {}
        }
        if closed_notices {
            self.notices = None;
        }
    }
}

fn follow_stream(
    runs: Arc<Runs>,
    run_id: String,
    after_seq: u64,
) -> impl Stream<Item = Result<StoredEvent, RunStoreError>> + Send + 'static {
    // Subscribe before reading the backlog so nothing falls between the two.
    let live = runs.subscribe(&run_id);
    let notices = runs.notices();
    let state = Follow {
        runs,
        run_id,
        last: after_seq,
        live,
        notices,
        pending: Default::default(),
        done: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if st.done {
                return None;
            }
            if let Some(event) = st.pending.pop_front() {
                st.last = event.seq;
                st.done = event.is_terminal();
                return Some((Ok(event), st));
            }
            match st.runs.events_after(&st.run_id, st.last) {
                Ok(events) if !events.is_empty() => {
                    st.pending.extend(events);
                    continue;
                }
                Ok(_) => {}
                Err(error) => {
                    st.done = true;
                    return Some((Err(error), st));
                }
            }
            // Nothing newer: done when the run is over, else wait for news.
            match st.runs.get(&st.run_id) {
                Ok(run) if run.state.is_terminal() && run.last_seq <= st.last => return None,
                Ok(_) => {}
                Err(error) => {
                    st.done = true;
                    return Some((Err(error), st));
                }
            }
            st.news().await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use orkeon_crews::run::store::MemoryRunStore;
    use orkeon_crews::run::store::conformance::record;

    fn runs() -> Arc<Runs> {
        Arc::new(Runs::new(Arc::new(MemoryRunStore::default())))
    }

    #[tokio::test]
    async fn live_subscribers_receive_new_events() {
        let store = runs();
        store.create(record("r1", "support", None)).expect("create");
        let mut rx = store.subscribe("r1");
        store
            .append(
                "r1",
                RunEvent::TaskStarted {
                    task: "t".into(),
                    agent: "a".into(),
                },
            )
            .expect("append");
        assert_eq!(rx.recv().await.expect("event").seq, 1);
    }

    #[tokio::test]
    async fn follow_replays_then_streams_until_the_run_finishes() {
        use futures::StreamExt;
        let store = runs();
        store.create(record("r1", "support", None)).expect("create");
        let started = RunEvent::TaskStarted {
            task: "t".into(),
            agent: "a".into(),
        };
        store.append("r1", started.clone()).expect("append");
        store.append("r1", started.clone()).expect("append");
        let follower = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .follow("r1", 1)
                    .map(|e| e.expect("event").seq)
                    .collect::<Vec<_>>()
                    .await
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        store
            .append(
                "r1",
                RunEvent::RunFinished {
                    status: RunStatus::Finished,
                    reason: None,
                    final_output: None,
                },
            )
            .expect("append");
        store
            .finish("r1", RunStatus::Finished, None, None)
            .expect("finish");
        let seqs = tokio::time::timeout(std::time::Duration::from_secs(5), follower)
            .await
            .expect("the follower ends after the terminal event")
            .expect("join");
        assert_eq!(seqs, vec![2, 3]);
    }
}
