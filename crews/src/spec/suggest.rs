//! Nearest valid names for "did you mean …?" hints.

/// The candidate closest to `name`, when one is close enough to be a plausible typo
/// (case-insensitive Damerau–Levenshtein distance of at most a third of the longer name,
/// minimum 1, or one name containing the other).
pub fn nearest<'a, I>(name: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let wanted = name.to_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        let lower = candidate.to_lowercase();
        let distance = strsim::damerau_levenshtein(&wanted, &lower);
        let longer = wanted.chars().count().max(lower.chars().count());
        let allowed = (longer / 3).max(1);
        let contains = !wanted.is_empty()
            && !lower.is_empty()
            && (lower.contains(&wanted) || wanted.contains(&lower));
        if (distance <= allowed || contains) && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// `did you mean 'x'?` when a near name exists, else the list of valid names (or `none`).
pub fn hint<'a, I>(name: &str, candidates: I, kind: &str) -> Option<String>
where
    I: IntoIterator<Item = &'a str>,
    I::IntoIter: Clone,
{
    let candidates = candidates.into_iter();
    if let Some(near) = nearest(name, candidates.clone()) {
        return Some(format!("did you mean '{near}'?"));
    }
    let all: Vec<&str> = candidates.collect();
    if all.is_empty() {
        Some(format!("no {kind} are declared"))
    } else {
        Some(format!("declared {kind}: {}", all.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_typos_and_ignores_unrelated_names() {
        let names = ["support", "research", "writer"];
        assert_eq!(nearest("suport", names), Some("support"));
        assert_eq!(nearest("Writer", names), Some("writer"));
        assert_eq!(nearest("reserch", names), Some("research"));
        assert_eq!(nearest("zzz", names), None);
        assert_eq!(
            nearest("chunkng", ["sources", "chunking"]),
            Some("chunking")
        );
        assert_eq!(
            nearest(
                "output_has",
                ["output_contains", "output_not_contains", "output_matches"]
            ),
            None,
            "an ambiguous prefix is no suggestion"
        );
    }

    #[test]
    fn hint_lists_names_when_nothing_is_near() {
        let names = ["support", "writer"];
        assert_eq!(
            hint("suport", names, "agents").as_deref(),
            Some("did you mean 'support'?")
        );
        assert_eq!(
            hint("qqq", names, "agents").as_deref(),
            Some("declared agents: support, writer")
        );
        assert_eq!(
            hint("qqq", [], "collections").as_deref(),
            Some("no collections are declared")
        );
    }
}
