//! Tests of the state graph engine: routing, cycles, every breaker trip, failures.

use std::time::Duration;

use super::*;

#[derive(Debug, Default)]
struct Trail {
    visited: Vec<String>,
    counter: usize,
    touched_before_sleep: bool,
}

fn record(
    name: &'static str,
) -> FnNode<impl Fn(&mut Trail) -> Result<(), NodeError> + Send + Sync> {
    node_fn(move |s: &mut Trail| {
        s.visited.push(name.to_string());
        s.counter += 1;
        Ok(())
    })
}

fn generous() -> CircuitBreakerPolicy {
    CircuitBreakerPolicy {
        max_transitions: 100,
        max_state_visits: 100,
        per_state_timeout: Duration::from_secs(5),
        total_timeout: Duration::from_secs(10),
    }
}

#[tokio::test]
async fn linear_graph_runs_every_node_in_order() {
    let mut graph = StateGraph::new("a");
    graph
        .add_node("a", record("a"))
        .add_node("b", record("b"))
        .add_node("c", record("c"))
        .add_edge("a", "b")
        .add_edge("b", "c")
        .add_edge("c", END);
    assert_eq!(graph.validate(), Ok(()));
    let run = graph.run(Trail::default(), &generous()).await;
    assert_eq!(run.outcome, GraphOutcome::Completed);
    assert_eq!(run.path, vec!["a", "b", "c"]);
    assert_eq!(run.state.visited, vec!["a", "b", "c"]);
}

#[tokio::test]
async fn conditional_edge_routes_on_the_state() {
    for (start_counter, expected) in [(0, "even"), (1, "odd")] {
        let mut graph = StateGraph::new("classify");
        graph
            .add_node("classify", node_fn(|_: &mut Trail| Ok(())))
            .add_node("even", record("even"))
            .add_node("odd", record("odd"))
            .add_conditional_edge("classify", |s: &Trail| {
                if s.counter.is_multiple_of(2) {
                    "even"
                } else {
                    "odd"
                }
                .to_string()
            })
            .add_edge("even", END)
            .add_edge("odd", END);
        assert_eq!(graph.validate(), Ok(()));
        let state = Trail {
            counter: start_counter,
            ..Trail::default()
        };
        let run = graph.run(state, &generous()).await;
        assert_eq!(run.outcome, GraphOutcome::Completed);
        assert_eq!(run.path, vec!["classify", expected]);
    }
}

#[tokio::test]
async fn controlled_cycle_ends_when_the_router_says_so() {
    let mut graph = StateGraph::new("work");
    graph
        .add_node("work", record("work"))
        .add_node("check", node_fn(|_: &mut Trail| Ok(())))
        .add_edge("work", "check")
        .add_conditional_edge("check", |s: &Trail| {
            if s.counter < 3 { "work" } else { END }.to_string()
        });
    let run = graph.run(Trail::default(), &generous()).await;
    assert_eq!(run.outcome, GraphOutcome::Completed);
    assert_eq!(run.state.counter, 3);
    assert_eq!(
        run.path,
        vec!["work", "check", "work", "check", "work", "check"]
    );
}

#[tokio::test]
async fn async_nodes_run_and_keep_their_changes() {
    let mut graph = StateGraph::new("slow");
    graph
        .add_node(
            "slow",
            async_node_fn(|s: &mut Trail| {
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    s.counter += 10;
                    Ok(())
                })
            }),
        )
        .add_edge("slow", END);
    let run = graph.run(Trail::default(), &generous()).await;
    assert_eq!(run.outcome, GraphOutcome::Completed);
    assert_eq!(run.state.counter, 10);
}

fn endless_ping_pong() -> StateGraph<Trail> {
    let mut graph = StateGraph::new("ping");
    graph
        .add_node("ping", record("ping"))
        .add_node("pong", record("pong"))
        .add_edge("ping", "pong")
        .add_edge("pong", "ping");
    graph
}

#[tokio::test]
async fn max_transitions_trips_an_endless_cycle() {
    let policy = CircuitBreakerPolicy {
        max_transitions: 5,
        ..generous()
    };
    let run = endless_ping_pong().run(Trail::default(), &policy).await;
    assert_eq!(
        run.outcome,
        GraphOutcome::CircuitBroken(BreakerTrip::MaxTransitions(5))
    );
    assert_eq!(run.path.len(), 6, "5 transitions join 6 node runs");
    assert_eq!(run.state.counter, 6);
}

#[tokio::test]
async fn max_state_visits_trips_a_self_loop() {
    let mut graph = StateGraph::new("spin");
    graph
        .add_node("spin", record("spin"))
        .add_edge("spin", "spin");
    let policy = CircuitBreakerPolicy {
        max_state_visits: 3,
        ..generous()
    };
    let run = graph.run(Trail::default(), &policy).await;
    assert_eq!(
        run.outcome,
        GraphOutcome::CircuitBroken(BreakerTrip::MaxStateVisits {
            node: "spin".to_string(),
            visits: 4
        })
    );
    assert_eq!(run.state.counter, 3);
    assert_eq!(run.path.len(), 3);
}

#[tokio::test]
async fn per_state_timeout_trips_and_the_state_survives() {
    let mut graph = StateGraph::new("stuck");
    graph
        .add_node(
            "stuck",
            async_node_fn(|s: &mut Trail| {
                Box::pin(async move {
                    s.touched_before_sleep = true;
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    s.counter = 99;
                    Ok(())
                })
            }),
        )
        .add_edge("stuck", END);
    let policy = CircuitBreakerPolicy {
        per_state_timeout: Duration::from_millis(50),
        ..generous()
    };
    let run = graph.run(Trail::default(), &policy).await;
    assert_eq!(
        run.outcome,
        GraphOutcome::CircuitBroken(BreakerTrip::StateTimeout {
            node: "stuck".to_string(),
            after: Duration::from_millis(50)
        })
    );
    assert!(run.state.touched_before_sleep);
    assert_eq!(run.state.counter, 0);
    assert_eq!(run.path, vec!["stuck"]);
}

#[tokio::test]
async fn total_timeout_trips_a_slow_cycle() {
    let mut graph = StateGraph::new("tick");
    graph
        .add_node(
            "tick",
            async_node_fn(|s: &mut Trail| {
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    s.counter += 1;
                    Ok(())
                })
            }),
        )
        .add_edge("tick", "tick");
    let policy = CircuitBreakerPolicy {
        total_timeout: Duration::from_millis(120),
        ..generous()
    };
    let run = graph.run(Trail::default(), &policy).await;
    assert_eq!(
        run.outcome,
        GraphOutcome::CircuitBroken(BreakerTrip::TotalTimeout(Duration::from_millis(120)))
    );
    assert!(
        run.state.counter >= 1,
        "some ticks completed before the deadline"
    );
    assert!(run.path.len() >= run.state.counter);
}

#[tokio::test]
async fn node_failure_is_an_outcome_with_the_state_kept() {
    let mut graph = StateGraph::new("a");
    graph
        .add_node("a", record("a"))
        .add_node(
            "broken",
            node_fn(|_: &mut Trail| Err(NodeError::new("disk is full"))),
        )
        .add_edge("a", "broken")
        .add_edge("broken", END);
    let run = graph.run(Trail::default(), &generous()).await;
    assert_eq!(
        run.outcome,
        GraphOutcome::NodeFailed {
            node: "broken".to_string(),
            error: "disk is full".to_string()
        }
    );
    assert_eq!(run.state.visited, vec!["a"]);
    assert_eq!(run.path, vec!["a", "broken"]);
    assert_eq!(
        run.outcome.to_string(),
        "node 'broken' failed: disk is full"
    );
}

#[tokio::test]
async fn router_to_an_unknown_node_is_an_outcome() {
    let mut graph = StateGraph::new("a");
    graph
        .add_node("a", record("a"))
        .add_conditional_edge("a", |_: &Trail| "nowhere".to_string());
    assert_eq!(
        graph.validate(),
        Ok(()),
        "routers are only checked at run time"
    );
    let run = graph.run(Trail::default(), &generous()).await;
    assert_eq!(
        run.outcome,
        GraphOutcome::UnknownNode("nowhere".to_string())
    );
    assert_eq!(run.state.counter, 1);
}

#[tokio::test]
async fn unvalidated_graphs_end_with_an_outcome_not_a_panic() {
    let graph: StateGraph<Trail> = StateGraph::new("missing");
    let run = graph.run(Trail::default(), &generous()).await;
    assert_eq!(
        run.outcome,
        GraphOutcome::UnknownNode("missing".to_string())
    );
    assert!(run.path.is_empty());

    let mut graph = StateGraph::new("dead_end");
    graph.add_node("dead_end", record("dead_end"));
    let run = graph.run(Trail::default(), &generous()).await;
    assert_eq!(
        run.outcome,
        GraphOutcome::NodeFailed {
            node: "dead_end".to_string(),
            error: "the node has no outgoing edge".to_string()
        }
    );
}

#[test]
fn validate_reports_malformed_graphs() {
    let graph: StateGraph<Trail> = StateGraph::new("start");
    assert_eq!(
        graph.validate(),
        Err(GraphError::MissingStart("start".to_string()))
    );

    let mut graph = StateGraph::new("a");
    graph.add_node("a", record("a")).add_edge("a", "b");
    assert_eq!(
        graph.validate(),
        Err(GraphError::UnknownEdgeTarget {
            from: "a".to_string(),
            to: "b".to_string()
        })
    );

    let mut graph = StateGraph::new("a");
    graph
        .add_node("a", record("a"))
        .add_node("b", record("b"))
        .add_edge("a", "b");
    assert_eq!(
        graph.validate(),
        Err(GraphError::NoOutgoingEdge("b".to_string()))
    );

    let mut graph = StateGraph::new("a");
    graph
        .add_node("a", record("a"))
        .add_edge("a", END)
        .add_conditional_edge("a", |_: &Trail| END.to_string());
    assert_eq!(
        graph.validate(),
        Err(GraphError::MultipleOutgoingEdges("a".to_string()))
    );

    let mut graph = StateGraph::new("a");
    graph
        .add_node("a", record("a"))
        .add_edge("a", END)
        .add_edge("ghost", END);
    assert_eq!(
        graph.validate(),
        Err(GraphError::UnknownEdgeSource("ghost".to_string()))
    );

    let mut graph = StateGraph::new("a");
    graph
        .add_node("a", record("a"))
        .add_node("a", record("a"))
        .add_edge("a", END);
    assert_eq!(
        graph.validate(),
        Err(GraphError::DuplicateNode("a".to_string()))
    );

    let mut graph = StateGraph::new("a");
    graph
        .add_node("a", record("a"))
        .add_node(END, record("end"))
        .add_edge("a", END);
    assert_eq!(
        graph.validate(),
        Err(GraphError::ReservedName(END.to_string()))
    );
}

#[test]
fn policy_for_iterations_follows_the_double_bound() {
    let policy = CircuitBreakerPolicy::for_iterations(3);
    assert_eq!(policy.max_transitions, 35);
    assert_eq!(policy.max_state_visits, 5);
    assert_eq!(policy.per_state_timeout, Duration::from_secs(120));
    assert_eq!(policy.total_timeout, Duration::from_secs(600));
}

#[tokio::test]
async fn a_run_can_be_spawned_on_the_runtime() {
    let graph = std::sync::Arc::new(endless_ping_pong());
    let policy = CircuitBreakerPolicy {
        max_transitions: 2,
        ..generous()
    };
    let handle = tokio::spawn({
        let graph = graph.clone();
        async move { graph.run(Trail::default(), &policy).await }
    });
    let run = handle.await.unwrap();
    assert_eq!(
        run.outcome,
        GraphOutcome::CircuitBroken(BreakerTrip::MaxTransitions(2))
    );
}
