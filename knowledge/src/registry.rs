//! [`Registry`]: named components — rerankers, query transformers, RAG profiles — under a name
//! and aliases, matched case-insensitively. The reranker and transformer factories are
//! registries of builders (`query::RerankerFactory`, `query::TransformerFactory`), the profile
//! resolver keeps one. A later registration of a name replaces the earlier
//! one (so a host can override a built-in) and takes over the aliases it claims. A name nobody
//! answers to fails with [`UnknownName`]: what was asked for, the known names, and the nearest
//! one when it looks like a typo.

use std::fmt;
use std::sync::RwLock;

use orkeon_crews::spec::suggest::nearest;

/// What a registry holds, as its error message names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label {
    /// Singular: `reranker`, `query transformer`, `RAG profile`.
    pub kind: &'static str,
    /// Plural, in "known …": `rerankers`.
    pub plural: &'static str,
    /// The configuration key that names a component, if any (`rag.rerank.kind`).
    pub key: Option<&'static str>,
    /// What to do about an unknown name, if there is more to say than the list.
    pub advice: Option<&'static str>,
}

/// A name no entry of a registry answers to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct UnknownName {
    pub label: &'static Label,
    /// The name as it was asked for.
    pub name: String,
    /// The names that would have worked (aliases excluded), sorted.
    pub known: Vec<String>,
    /// The known name nearest to `name`, when it looks like a typo of it.
    pub suggestion: Option<String>,
}

impl UnknownName {
    /// The error for `name`, with the nearest of `known` as the suggestion.
    pub fn new(label: &'static Label, name: &str, known: Vec<String>) -> Self {
        let suggestion = nearest(name.trim(), known.iter().map(String::as_str)).map(str::to_owned);
        Self {
            label,
            name: name.to_string(),
            known,
            suggestion,
        }
    }
}

impl fmt::Display for UnknownName {
    /// `unknown reranker 'onx' (rag.rerank.kind); known rerankers: llm, none, onnx; did you
    /// mean 'onnx'?`, then the advice, if any.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} '{}'", self.label.kind, self.name)?;
        if let Some(key) = self.label.key {
            write!(f, " ({key})")?;
        }
        write!(
            f,
            "; known {}: {}",
            self.label.plural,
            self.known.join(", ")
        )?;
        if let Some(near) = &self.suggestion {
            write!(f, "; did you mean '{near}'?")?;
        }
        if let Some(advice) = self.label.advice {
            let separator = if self.suggestion.is_some() { " " } else { ". " };
            write!(f, "{separator}{advice}")?;
        }
        Ok(())
    }
}

struct Entry<T> {
    name: String,
    aliases: Vec<String>,
    item: T,
}

/// Named items (see the module documentation). Safe to share: registration and lookup take
/// `&self`.
pub struct Registry<T> {
    label: &'static Label,
    entries: RwLock<Vec<Entry<T>>>,
}

fn key(name: &str) -> String {
    name.trim().to_ascii_lowercase()
}

impl<T: Clone> Registry<T> {
    /// An empty registry of `label`'s kind.
    pub fn new(label: &'static Label) -> Self {
        Self {
            label,
            entries: RwLock::new(Vec::new()),
        }
    }

    /// What the registry holds.
    pub fn label(&self) -> &'static Label {
        self.label
    }

    /// Registers (or replaces) `item` under `name` and `aliases`; an alias another entry held
    /// moves to this one.
    pub fn register(&self, name: &str, aliases: &[&str], item: T) {
        let name = key(name);
        let aliases: Vec<String> = aliases.iter().map(|a| key(a)).collect();
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        entries.retain(|e| e.name != name);
        for entry in entries.iter_mut() {
            entry.aliases.retain(|a| !aliases.contains(a) && *a != name);
        }
        entries.push(Entry {
            name,
            aliases,
            item,
        });
    }

    /// Registered names (aliases excluded), sorted.
    pub fn known(&self) -> Vec<String> {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
        names.sort();
        names
    }

    /// The item registered under `name` or an alias, if any.
    pub fn find(&self, name: &str) -> Option<T> {
        let wanted = key(name);
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        entries
            .iter()
            .find(|e| e.name == wanted || e.aliases.contains(&wanted))
            .map(|e| e.item.clone())
    }

    /// Whether `name` (or an alias) is registered.
    pub fn is_known(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    /// The item registered under `name` or an alias, else the error listing the known names.
    pub fn get(&self, name: &str) -> Result<T, UnknownName> {
        self.find(name).ok_or_else(|| self.unknown(name))
    }

    /// The error for a `name` this registry does not know.
    pub fn unknown(&self, name: &str) -> UnknownName {
        UnknownName::new(self.label, name, self.known())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLOURS: Label = Label {
        kind: "colour",
        plural: "colours",
        key: Some("paint.colour"),
        advice: None,
    };

    fn colours() -> Registry<u32> {
        let registry = Registry::new(&COLOURS);
        registry.register("Red", &["crimson", "scarlet"], 1);
        registry.register("green", &[], 2);
        registry.register("blue", &["navy"], 3);
        registry
    }

    #[test]
    fn names_and_aliases_match_case_insensitively() {
        let registry = colours();
        assert_eq!(registry.get("red"), Ok(1));
        assert_eq!(registry.get(" SCARLET "), Ok(1));
        assert_eq!(registry.get("Navy"), Ok(3));
        assert!(registry.is_known("GREEN"));
        assert!(!registry.is_known("mauve"));
        assert_eq!(registry.known(), vec!["blue", "green", "red"]);
    }

    #[test]
    fn a_later_registration_replaces_the_name_and_takes_its_aliases() {
        let registry = colours();
        registry.register("red", &[], 10);
        assert_eq!(registry.get("red"), Ok(10));
        assert_eq!(
            registry.find("crimson"),
            None,
            "the new red claimed no alias"
        );
        registry.register("indigo", &["navy", "green"], 4);
        assert_eq!(registry.get("navy"), Ok(4), "the alias moved");
        assert_eq!(
            registry.get("green"),
            Ok(2),
            "a name is not an alias: the older entry keeps answering to it"
        );
        assert_eq!(registry.known(), vec!["blue", "green", "indigo", "red"]);
    }

    #[test]
    fn an_unknown_name_lists_the_known_ones_and_suggests_the_nearest() {
        let registry = colours();
        let typo = registry.get("gren").unwrap_err();
        assert_eq!(typo.suggestion.as_deref(), Some("green"));
        assert_eq!(
            typo.to_string(),
            "unknown colour 'gren' (paint.colour); known colours: blue, green, red; did you mean 'green'?"
        );
        let unrelated = registry.get("mauve").unwrap_err();
        assert_eq!(unrelated.suggestion, None);
        assert_eq!(
            unrelated.to_string(),
            "unknown colour 'mauve' (paint.colour); known colours: blue, green, red"
        );
    }

    #[test]
    fn advice_follows_the_list_or_the_suggestion() {
        const LABEL: Label = Label {
            kind: "RAG profile",
            plural: "profiles",
            key: None,
            advice: Some("Set rag.profile to one of them"),
        };
        let known = vec!["balanced".to_string(), "fast".to_string()];
        assert_eq!(
            UnknownName::new(&LABEL, "turbo", known.clone()).to_string(),
            "unknown RAG profile 'turbo'; known profiles: balanced, fast. Set rag.profile to one of them"
        );
        assert_eq!(
            UnknownName::new(&LABEL, "balancd", known).to_string(),
            "unknown RAG profile 'balancd'; known profiles: balanced, fast; did you mean 'balanced'? Set rag.profile to one of them"
        );
    }
}
