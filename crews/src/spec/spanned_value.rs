//! A free-form YAML value (`llm:`, `chunking:`, a `knowledge:` entry) that remembers where every
//! key and value was written, so a problem found deep inside it — by this crate or by the host's
//! [`super::SettingsChecks`] — is reported at its own line and column, not at the map's.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Location, Spanned};

/// A YAML value with positions.
#[derive(Debug, Clone)]
pub(super) enum SpannedValue {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    List(Vec<Spanned<SpannedValue>>),
    /// Entries in file order; keys are unique (duplicates are refused while parsing).
    Map(Vec<(Spanned<String>, Spanned<SpannedValue>)>),
}

impl SpannedValue {
    /// The value without positions.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            SpannedValue::Null => serde_json::Value::Null,
            SpannedValue::Bool(b) => serde_json::Value::Bool(*b),
            SpannedValue::Number(n) => serde_json::Value::Number(n.clone()),
            SpannedValue::String(s) => serde_json::Value::String(s.clone()),
            SpannedValue::List(items) => {
                serde_json::Value::Array(items.iter().map(|i| i.value.to_json()).collect())
            }
            SpannedValue::Map(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.value.clone(), v.value.to_json()))
                    .collect(),
            ),
        }
    }

    /// The entries of a map (`None` for any other value).
    pub fn entries(&self) -> Option<&[(Spanned<String>, Spanned<SpannedValue>)]> {
        match self {
            SpannedValue::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// Where the value at `path` (map keys) was written: the deepest key of `path` present,
    /// else `fallback`. A path that names a key points at that key's value.
    pub fn locate(&self, path: &[String], fallback: Location) -> Location {
        let mut node = self;
        let mut location = fallback;
        for key in path {
            let Some((k, v)) = node
                .entries()
                .and_then(|entries| entries.iter().find(|(k, _)| &k.value == key))
            else {
                break;
            };
            location = if matches!(v.value, SpannedValue::Map(_)) {
                k.referenced
            } else {
                v.referenced
            };
            node = &v.value;
        }
        location
    }

    /// What a YAML user would call this kind of value.
    pub fn kind(&self) -> &'static str {
        match self {
            SpannedValue::Null => "nothing",
            SpannedValue::Bool(_) => "true/false",
            SpannedValue::Number(_) => "a number",
            SpannedValue::String(_) => "text",
            SpannedValue::List(_) => "a list",
            SpannedValue::Map(_) => "a map",
        }
    }
}

impl<'de> Deserialize<'de> for SpannedValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ValueVisitor;

        impl<'de> Visitor<'de> for ValueVisitor {
            type Value = SpannedValue;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a YAML value")
            }

            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(SpannedValue::Null)
            }

            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(SpannedValue::Null)
            }

            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                SpannedValue::deserialize(d)
            }

            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(SpannedValue::Bool(v))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(SpannedValue::Number(v.into()))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(SpannedValue::Number(v.into()))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                serde_json::Number::from_f64(v)
                    .map(SpannedValue::Number)
                    .ok_or_else(|| E::custom(format!("{v} is not a finite number")))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(SpannedValue::String(v.to_string()))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(SpannedValue::String(v))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Spanned<SpannedValue>>()? {
                    items.push(item);
                }
                Ok(SpannedValue::List(items))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries: Vec<(Spanned<String>, Spanned<SpannedValue>)> = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    if entries.iter().any(|(k, _)| k.value == key.value) {
                        return Err(de::Error::custom(format!(
                            "duplicate key '{}' at line {}, column {}",
                            key.value,
                            key.referenced.line(),
                            key.referenced.column()
                        )));
                    }
                    let value = map.next_value::<Spanned<SpannedValue>>()?;
                    entries.push((key, value));
                }
                Ok(SpannedValue::Map(entries))
            }
        }

        deserializer.deserialize_any(ValueVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Doc {
        llm: Spanned<SpannedValue>,
    }

    #[test]
    fn positions_reach_nested_keys_and_json_keeps_the_values() {
        let text = "llm:\n  provider: openai\n  openai:\n    model: x\n    temperature: 0.5\n";
        let doc: Doc = serde_saphyr::from_str(text).unwrap();
        let json = doc.llm.value.to_json();
        assert_eq!(json["provider"], "openai");
        assert_eq!(json["openai"]["temperature"], 0.5);
        let at = |path: &[&str]| {
            let path: Vec<String> = path.iter().map(|s| s.to_string()).collect();
            let l = doc.llm.value.locate(&path, doc.llm.referenced);
            (l.line(), l.column())
        };
        assert_eq!(at(&["provider"]), (2, 13));
        assert_eq!(at(&["openai", "temperature"]).0, 5);
        // A missing key points at the deepest one present.
        assert_eq!(at(&["openai", "nope"]).0, 3);
        assert_eq!(at(&[]).0, doc.llm.referenced.line());
    }

    #[test]
    fn duplicate_keys_are_refused() {
        let text = "llm:\n  provider: a\n  provider: b\n";
        assert!(serde_saphyr::from_str::<Doc>(text).is_err());
    }
}
