//! The generic bounded state graph: named async nodes over a shared state `S`, fixed and
//! conditional edges, controlled cycles, and a circuit breaker whose trip is a value.
//!
//! A run starts at the start node; after each node, its single outgoing edge (fixed, or a
//! router reading the state) names the next node or [`END`]. The [`CircuitBreakerPolicy`]
//! bounds the run independently of any routing logic:
//!
//! - `max_transitions`: moves from one node to another node (entering the start node and
//!   moving to [`END`] are not counted);
//! - `max_state_visits`: executions of any single node;
//! - `per_state_timeout`: one node execution (the node future is dropped; changes it already
//!   made to the state are kept);
//! - `total_timeout`: the whole run.
//!
//! Every way a run can stop — completion, a trip, a node failure, a route to an unknown
//! node — is a [`GraphOutcome`]; the engine never panics for a loop condition. Both
//! `process: graph` crews and the corrective RAG pipeline run on this engine.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::ports::BoxError;

/// The pseudo-node that ends a run.
pub const END: &str = "__end__";

/// Why a node failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The run was cancelled while the node ran.
    #[error("the run was cancelled")]
    Cancelled,
    /// The node's work failed; the library error travels as the source.
    #[error(transparent)]
    Failed(BoxError),
}

impl NodeError {
    /// A failure described by a message (for nodes whose failure has no error value).
    pub fn new(message: impl fmt::Display) -> Self {
        Self::Failed(message.to_string().into())
    }

    /// A failure caused by a library error, kept as the source.
    pub fn caused_by(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Failed(Box::new(error))
    }
}

impl From<String> for NodeError {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for NodeError {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

/// One step of a graph: reads and updates the state.
#[async_trait]
pub trait Node<S: Send>: Send + Sync {
    async fn run(&self, state: &mut S) -> Result<(), NodeError>;
}

/// A node made from a synchronous closure (see [`node_fn`]).
pub struct FnNode<F>(F);

#[async_trait]
impl<S, F> Node<S> for FnNode<F>
where
    S: Send,
    F: Fn(&mut S) -> Result<(), NodeError> + Send + Sync,
{
    async fn run(&self, state: &mut S) -> Result<(), NodeError> {
        (self.0)(state)
    }
}

/// A node from a synchronous closure over the state.
pub fn node_fn<S, F>(f: F) -> FnNode<F>
where
    S: Send,
    F: Fn(&mut S) -> Result<(), NodeError> + Send + Sync,
{
    FnNode(f)
}

/// The future an [`async_node_fn`] closure returns.
pub type NodeFuture<'a> = Pin<Box<dyn Future<Output = Result<(), NodeError>> + Send + 'a>>;

/// A node made from an asynchronous closure (see [`async_node_fn`]).
pub struct AsyncFnNode<F>(F);

#[async_trait]
impl<S, F> Node<S> for AsyncFnNode<F>
where
    S: Send,
    F: for<'a> Fn(&'a mut S) -> NodeFuture<'a> + Send + Sync,
{
    async fn run(&self, state: &mut S) -> Result<(), NodeError> {
        (self.0)(state).await
    }
}

/// A node from an asynchronous closure: `async_node_fn(|s| Box::pin(async move { … }))`.
pub fn async_node_fn<S, F>(f: F) -> AsyncFnNode<F>
where
    S: Send,
    F: for<'a> Fn(&'a mut S) -> NodeFuture<'a> + Send + Sync,
{
    AsyncFnNode(f)
}

type Router<S> = Box<dyn Fn(&S) -> String + Send + Sync>;

enum Edge<S> {
    Fixed(String),
    Conditional(Router<S>),
}

/// Why a graph is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    #[error("the start node '{0}' was never added")]
    MissingStart(String),
    #[error("node '{0}' was added twice")]
    DuplicateNode(String),
    #[error("'{0}' is reserved for the end of the run and cannot name a node")]
    ReservedName(String),
    #[error("an edge leaves '{0}', which is not a node")]
    UnknownEdgeSource(String),
    #[error("the edge from '{from}' leads to '{to}', which is not a node")]
    UnknownEdgeTarget { from: String, to: String },
    #[error("node '{0}' has no outgoing edge (add one, to END if the run should stop there)")]
    NoOutgoingEdge(String),
    #[error("node '{0}' has more than one outgoing edge (use one conditional edge to branch)")]
    MultipleOutgoingEdges(String),
}

/// Bounds of one graph run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitBreakerPolicy {
    pub max_transitions: usize,
    pub max_state_visits: usize,
    pub per_state_timeout: Duration,
    pub total_timeout: Duration,
}

impl CircuitBreakerPolicy {
    /// The breaker derived from an iteration budget `n`, as the corrective pipeline uses it:
    /// (n+2)×7 transitions, n+2 visits per node, 2 minutes per node, 10 minutes in total.
    pub fn for_iterations(n: usize) -> Self {
        let visits = n.saturating_add(2);
        Self {
            max_transitions: visits.saturating_mul(7),
            max_state_visits: visits,
            per_state_timeout: Duration::from_secs(120),
            total_timeout: Duration::from_secs(600),
        }
    }
}

/// Which bound of the [`CircuitBreakerPolicy`] stopped a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BreakerTrip {
    /// The next move would exceed this many node-to-node transitions.
    MaxTransitions(usize),
    /// `node` would run for the `visits`-th time, beyond the per-node limit.
    MaxStateVisits { node: String, visits: usize },
    /// One execution of `node` took longer than `after`.
    StateTimeout { node: String, after: Duration },
    /// The run took longer than this.
    TotalTimeout(Duration),
}

impl fmt::Display for BreakerTrip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BreakerTrip::MaxTransitions(max) => {
                write!(f, "more than {max} transitions between nodes")
            }
            BreakerTrip::MaxStateVisits { node, visits } => {
                write!(f, "node '{node}' would run {visits} times, over the limit")
            }
            BreakerTrip::StateTimeout { node, after } => {
                write!(f, "node '{node}' ran longer than {after:?}")
            }
            BreakerTrip::TotalTimeout(total) => write!(f, "the run took longer than {total:?}"),
        }
    }
}

/// How a graph run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphOutcome {
    /// A route reached [`END`].
    Completed,
    /// The circuit breaker stopped the run.
    CircuitBroken(BreakerTrip),
    /// A node returned an error (or has no outgoing edge).
    NodeFailed { node: String, error: String },
    /// The run was routed to (or started at) a name that is not a node.
    UnknownNode(String),
}

impl fmt::Display for GraphOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphOutcome::Completed => f.write_str("completed"),
            GraphOutcome::CircuitBroken(trip) => write!(f, "circuit breaker tripped: {trip}"),
            GraphOutcome::NodeFailed { node, error } => write!(f, "node '{node}' failed: {error}"),
            GraphOutcome::UnknownNode(name) => write!(f, "routed to unknown node '{name}'"),
        }
    }
}

/// The result of a run: the final state (whatever the outcome), how it ended, and the
/// nodes that ran, in order.
#[derive(Debug)]
pub struct GraphRun<S> {
    pub state: S,
    pub outcome: GraphOutcome,
    pub path: Vec<String>,
}

/// A graph of named async nodes over a state `S`.
pub struct StateGraph<S> {
    start: String,
    nodes: HashMap<String, Box<dyn Node<S>>>,
    edges: HashMap<String, Vec<Edge<S>>>,
    /// Problems found while building (duplicates, reserved names), reported by `validate`.
    build_errors: Vec<GraphError>,
}

impl<S: Send + 'static> StateGraph<S> {
    /// An empty graph that will start at `start`.
    pub fn new(start: &str) -> Self {
        Self {
            start: start.to_string(),
            nodes: HashMap::new(),
            edges: HashMap::new(),
            build_errors: Vec::new(),
        }
    }

    /// Adds a node (a second node with the same name replaces the first and makes the
    /// graph invalid).
    pub fn add_node(&mut self, name: &str, node: impl Node<S> + 'static) -> &mut Self {
        if name == END {
            self.build_errors
                .push(GraphError::ReservedName(name.to_string()));
            return self;
        }
        if self
            .nodes
            .insert(name.to_string(), Box::new(node))
            .is_some()
        {
            self.build_errors
                .push(GraphError::DuplicateNode(name.to_string()));
        }
        self
    }

    /// After `from`, always go to `to` (a node or [`END`]).
    pub fn add_edge(&mut self, from: &str, to: &str) -> &mut Self {
        self.edges
            .entry(from.to_string())
            .or_default()
            .push(Edge::Fixed(to.to_string()));
        self
    }

    /// After `from`, go where `router` says (a node or [`END`]); checked at run time.
    pub fn add_conditional_edge(
        &mut self,
        from: &str,
        router: impl Fn(&S) -> String + Send + Sync + 'static,
    ) -> &mut Self {
        self.edges
            .entry(from.to_string())
            .or_default()
            .push(Edge::Conditional(Box::new(router)));
        self
    }

    /// Checks the start node exists, names are unique and not reserved, every edge leaves
    /// a node, fixed edges lead to nodes or [`END`], and every node has exactly one
    /// outgoing edge. Reports the first problem (nodes in name order).
    pub fn validate(&self) -> Result<(), GraphError> {
        if let Some(problem) = self.build_errors.first() {
            return Err(problem.clone());
        }
        if !self.nodes.contains_key(&self.start) {
            return Err(GraphError::MissingStart(self.start.clone()));
        }
        let mut sources: Vec<&String> = self.edges.keys().collect();
        sources.sort();
        for from in sources {
            if !self.nodes.contains_key(from) {
                return Err(GraphError::UnknownEdgeSource(from.clone()));
            }
            for edge in &self.edges[from] {
                if let Edge::Fixed(to) = edge
                    && to != END
                    && !self.nodes.contains_key(to)
                {
                    return Err(GraphError::UnknownEdgeTarget {
                        from: from.clone(),
                        to: to.clone(),
                    });
                }
            }
        }
        let mut names: Vec<&String> = self.nodes.keys().collect();
        names.sort();
        for name in names {
            match self.edges.get(name).map_or(0, Vec::len) {
                0 => return Err(GraphError::NoOutgoingEdge(name.clone())),
                1 => {}
                _ => return Err(GraphError::MultipleOutgoingEdges(name.clone())),
            }
        }
        Ok(())
    }

    /// Where to go after `node` (which has just run on `state`).
    fn next(&self, node: &str, state: &S) -> Result<String, String> {
        match self.edges.get(node).map(Vec::as_slice) {
            Some([Edge::Fixed(to)]) => Ok(to.clone()),
            Some([Edge::Conditional(router)]) => Ok(router(state)),
            Some([]) | None => Err("the node has no outgoing edge".to_string()),
            Some(_) => Err("the node has more than one outgoing edge".to_string()),
        }
    }

    /// Runs the graph from the start node until [`END`], a trip, a node failure or an
    /// unknown node. The state is returned in every case.
    pub async fn run(&self, mut state: S, policy: &CircuitBreakerPolicy) -> GraphRun<S> {
        let started = Instant::now();
        let mut path: Vec<String> = Vec::new();
        let mut visits: HashMap<String, usize> = HashMap::new();
        let mut transitions = 0usize;
        let mut current = self.start.clone();

        let outcome = loop {
            if current == END {
                break GraphOutcome::Completed;
            }
            let Some(node) = self.nodes.get(&current) else {
                break GraphOutcome::UnknownNode(current);
            };
            let count = visits.entry(current.clone()).or_insert(0);
            *count += 1;
            if *count > policy.max_state_visits {
                break GraphOutcome::CircuitBroken(BreakerTrip::MaxStateVisits {
                    node: current,
                    visits: *count,
                });
            }
            let elapsed = started.elapsed();
            if elapsed >= policy.total_timeout {
                break GraphOutcome::CircuitBroken(BreakerTrip::TotalTimeout(policy.total_timeout));
            }
            let remaining = policy.total_timeout - elapsed;
            let (limit, limited_by_total) = if remaining < policy.per_state_timeout {
                (remaining, true)
            } else {
                (policy.per_state_timeout, false)
            };

            path.push(current.clone());
            tracing::debug!(node = %current, visit = *count, "graph node starts");
            match tokio::time::timeout(limit, node.run(&mut state)).await {
                Err(_) if limited_by_total => {
                    break GraphOutcome::CircuitBroken(BreakerTrip::TotalTimeout(
                        policy.total_timeout,
                    ));
                }
                Err(_) => {
                    break GraphOutcome::CircuitBroken(BreakerTrip::StateTimeout {
                        node: current,
                        after: policy.per_state_timeout,
                    });
                }
                Ok(Err(error)) => {
                    break GraphOutcome::NodeFailed {
                        node: current,
                        error: error.to_string(),
                    };
                }
                Ok(Ok(())) => {}
            }

            let next = match self.next(&current, &state) {
                Ok(next) => next,
                Err(error) => {
                    break GraphOutcome::NodeFailed {
                        node: current,
                        error,
                    };
                }
            };
            tracing::debug!(from = %current, to = %next, "graph transition");
            if next != END {
                transitions += 1;
                if transitions > policy.max_transitions {
                    break GraphOutcome::CircuitBroken(BreakerTrip::MaxTransitions(
                        policy.max_transitions,
                    ));
                }
            }
            current = next;
        };

        match &outcome {
            GraphOutcome::Completed => {
                tracing::debug!(nodes = path.len(), "graph run completed");
            }
            other => tracing::warn!(outcome = %other, nodes = path.len(), "graph run stopped"),
        }
        GraphRun {
            state,
            outcome,
            path,
        }
    }
}

#[cfg(test)]
mod tests;
