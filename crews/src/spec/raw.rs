//! The crew file exactly as written: serde types mirroring the YAML, with every value a
//! validation error may point at wrapped in [`Spanned`] so errors carry line and column.
//!
//! Nothing here checks cross references; [`super::validate`] turns a [`RawCrew`] into a
//! [`super::CrewSpec`].

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_saphyr::Spanned;

use super::spanned_value::SpannedValue;
use super::{CitationPolicy, DegradedPolicy, ProcessKind};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCrew {
    pub name: Option<Spanned<String>>,
    pub description: Option<String>,
    pub process: Option<Spanned<ProcessKind>>,
    pub llm: Option<Spanned<SpannedValue>>,
    pub manager: Option<Spanned<RawManager>>,
    pub rag: Option<RawRag>,
    pub agents: Spanned<OrderedMap<RawAgent>>,
    pub tasks: Spanned<Vec<RawTask>>,
    pub graph: Option<Spanned<RawGraph>>,
    pub kickoff: Option<RawKickoff>,
    pub on_degraded: Option<DegradedPolicy>,
    pub citations: Option<CitationPolicy>,
    pub profile: Option<Spanned<String>>,
    pub retry: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawManager {
    pub llm: Option<Spanned<SpannedValue>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRag {
    pub collections: Spanned<OrderedMap<RawCollection>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCollection {
    pub sources: Spanned<Vec<Spanned<String>>>,
    pub chunking: Option<Spanned<SpannedValue>>,
    pub profile: Option<Spanned<String>>,
    pub shared: Option<bool>,
    pub ephemeral: Option<Spanned<bool>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAgent {
    pub role: Spanned<String>,
    pub goal: Spanned<String>,
    pub backstory: Option<String>,
    /// Collection names, or `{collection, profile, max_passages}` maps.
    #[serde(default)]
    pub knowledge: Vec<Spanned<SpannedValue>>,
    #[serde(default)]
    pub tools: Vec<Spanned<String>>,
    pub max_passages: Option<Spanned<usize>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTask {
    pub name: Spanned<String>,
    pub agent: Spanned<String>,
    pub description: Spanned<String>,
    pub expected_output: Spanned<String>,
    pub context: Option<Vec<Spanned<String>>>,
    pub citations: Option<CitationPolicy>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGraph {
    pub start: Spanned<String>,
    pub edges: Spanned<Vec<RawEdge>>,
    pub max_iterations: Option<Spanned<usize>>,
    pub max_seconds: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEdge {
    pub from: Spanned<String>,
    pub to: Spanned<String>,
    pub when: Option<Spanned<RawWhen>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWhen {
    pub output_contains: Option<Spanned<String>>,
    pub output_not_contains: Option<Spanned<String>>,
    pub output_matches: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKickoff {
    #[serde(default)]
    pub on_load: bool,
    pub inputs: Option<OrderedMap<Spanned<serde_json::Value>>>,
}

/// A YAML mapping whose keys keep their position and whose entries keep file order.
#[derive(Debug)]
pub(super) struct OrderedMap<V>(pub Vec<(Spanned<String>, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OrderedMapVisitor<V>(PhantomData<V>);

        impl<'de, V: Deserialize<'de>> Visitor<'de> for OrderedMapVisitor<V> {
            type Value = OrderedMap<V>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping of names to entries")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries: Vec<(Spanned<String>, V)> = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    if entries.iter().any(|(k, _)| k.value == key.value) {
                        return Err(de::Error::custom(format!(
                            "duplicate name '{}' at line {}, column {}",
                            key.value,
                            key.referenced.line(),
                            key.referenced.column()
                        )));
                    }
                    let value = map.next_value::<V>()?;
                    entries.push((key, value));
                }
                Ok(OrderedMap(entries))
            }
        }

        deserializer.deserialize_map(OrderedMapVisitor(PhantomData))
    }
}
