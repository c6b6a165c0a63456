//! Golden-dataset source refs and how they match ingested source ids.
//!
//! A ref names a file (`policies/refunds.md`) or one part of a file (`data/stores.csv#row=3`,
//! `reports/q3.pdf#page=2`), relative to any folder of the corpus. It matches a source id when:
//!
//! - its file path is a **path-segment suffix** of the id's file path: `policies/refunds.md`
//!   matches `policies/refunds.md` and `eval/corpus/policies/refunds.md`, never
//!   `old-policies/refunds.md` nor `nonrefunds.md`;
//! - and, when the ref names a part, the id names the same part. A ref without a part matches
//!   every part of its file (`data.csv` matches `data.csv#row=1`, `data.csv#row=2`, …); a ref
//!   with a part matches only that part.
//!
//! Backslashes are read as `/` and a leading `./` is ignored. Two refs of one case *overlap*
//! when some source id could match both (`refunds.md` and `policies/refunds.md`, or `data.csv`
//! and `data.csv#row=3`): the loader refuses that, so every source id matches at most one ref
//! of a case and a document can never be counted twice.

use crate::ingest::file_of;

/// A parsed source ref.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SourceRef {
    /// The ref as written in the dataset (the key it is reported under).
    pub text: String,
    /// File path, `/`-separated, without a leading `./`.
    file: String,
    /// Part suffix without `#` (`row=3`), if the ref names one.
    part: Option<String>,
}

/// Why a ref cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceRefError {
    #[error("the ref is empty")]
    Empty,
    #[error(
        "the ref `{0}` is absolute or climbs out of the corpus (`..`); write it relative to the corpus folder"
    )]
    NotRelative(String),
}

fn normalise_path(path: &str) -> String {
    let path = path.trim().replace('\\', "/");
    let mut rest = path.as_str();
    while let Some(stripped) = rest.strip_prefix("./") {
        rest = stripped;
    }
    rest.to_string()
}

/// Splits a source id or ref into its file path and part (`#row=N` / `#page=N`).
fn split(id: &str) -> (String, Option<String>) {
    let file = file_of(id);
    let part = id
        .get(file.len()..)
        .and_then(|rest| rest.strip_prefix('#'))
        .map(str::to_string);
    (normalise_path(file), part)
}

/// Whether `suffix` equals `path` or ends it at a `/` boundary.
fn is_segment_suffix(suffix: &str, path: &str) -> bool {
    path == suffix
        || (path.len() > suffix.len()
            && path.ends_with(suffix)
            && path.as_bytes()[path.len() - suffix.len() - 1] == b'/')
}

impl SourceRef {
    pub fn parse(text: &str) -> Result<Self, SourceRefError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(SourceRefError::Empty);
        }
        let (file, part) = split(trimmed);
        if file.is_empty() {
            return Err(SourceRefError::Empty);
        }
        if file.starts_with('/') || file.split('/').any(|segment| segment == "..") {
            return Err(SourceRefError::NotRelative(trimmed.to_string()));
        }
        Ok(Self {
            text: trimmed.to_string(),
            file,
            part,
        })
    }

    /// The file path the ref names (without its part).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Whether this ref matches the ingested `source_id` (see the module documentation).
    pub fn matches(&self, source_id: &str) -> bool {
        let (file, part) = split(source_id);
        if !is_segment_suffix(&self.file, &file) {
            return false;
        }
        match &self.part {
            None => true,
            Some(wanted) => part.as_deref() == Some(wanted.as_str()),
        }
    }

    /// Whether the ref's file path matches the file `path` (its part is not considered: which
    /// rows or pages a file yields is only known after loading it).
    pub fn names_file(&self, path: &str) -> bool {
        is_segment_suffix(&self.file, &normalise_path(path))
    }

    /// Whether some source id could match both refs.
    pub fn overlaps(&self, other: &SourceRef) -> bool {
        let files_overlap = is_segment_suffix(&self.file, &other.file)
            || is_segment_suffix(&other.file, &self.file);
        files_overlap
            && match (&self.part, &other.part) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(text: &str) -> SourceRef {
        SourceRef::parse(text).unwrap()
    }

    #[test]
    fn a_ref_matches_its_path_and_any_folder_above_it() {
        let refunds = r("policies/refunds.md");
        assert!(refunds.matches("policies/refunds.md"));
        assert!(refunds.matches("eval/corpus/policies/refunds.md"));
        assert!(refunds.matches("eval\\corpus\\policies\\refunds.md"));
        assert!(r("./policies/refunds.md").matches("policies/refunds.md"));
    }

    #[test]
    fn suffixes_are_aligned_on_path_segments() {
        let refunds = r("refunds.md");
        assert!(refunds.matches("policies/refunds.md"));
        assert!(!refunds.matches("policies/nonrefunds.md"));
        assert!(!r("policies/refunds.md").matches("old-policies/refunds.md"));
        assert!(!r("policies/refunds.md").matches("refunds.md"));
        assert!(!refunds.matches("policies/refunds.md.bak"));
    }

    #[test]
    fn a_file_ref_matches_all_its_parts_and_a_part_ref_only_its_part() {
        let file = r("data/stores.csv");
        assert!(file.matches("data/stores.csv"));
        assert!(file.matches("data/stores.csv#row=3"));
        assert!(file.matches("corpus/data/stores.csv#row=17"));

        let row = r("data/stores.csv#row=3");
        assert!(row.matches("data/stores.csv#row=3"));
        assert!(row.matches("corpus/data/stores.csv#row=3"));
        assert!(!row.matches("data/stores.csv#row=30"));
        assert!(!row.matches("data/stores.csv#row=4"));
        assert!(!row.matches("data/stores.csv"));

        let page = r("reports/q3.pdf#page=2");
        assert!(page.matches("reports/q3.pdf#page=2"));
        assert!(!page.matches("reports/q3.pdf#page=12"));
        assert!(r("reports/q3.pdf").matches("reports/q3.pdf#page=12"));
        assert!(page.names_file("corpus/reports/q3.pdf"));
        assert!(!page.names_file("corpus/reports/q3.pdf.txt"));
    }

    #[test]
    fn overlapping_refs_are_detected() {
        assert!(r("refunds.md").overlaps(&r("policies/refunds.md")));
        assert!(r("policies/refunds.md").overlaps(&r("refunds.md")));
        assert!(r("data.csv").overlaps(&r("data.csv#row=3")));
        assert!(r("data.csv#row=3").overlaps(&r("x/data.csv#row=3")));
        assert!(!r("data.csv#row=3").overlaps(&r("data.csv#row=4")));
        assert!(!r("a/refunds.md").overlaps(&r("b/refunds.md")));
        assert!(!r("refunds.md").overlaps(&r("nonrefunds.md")));
    }

    #[test]
    fn unusable_refs_are_refused() {
        assert_eq!(SourceRef::parse("  "), Err(SourceRefError::Empty));
        assert_eq!(SourceRef::parse("#row=3"), Err(SourceRefError::Empty));
        assert!(matches!(
            SourceRef::parse("../secrets.md"),
            Err(SourceRefError::NotRelative(_))
        ));
        assert!(matches!(
            SourceRef::parse("/etc/passwd"),
            Err(SourceRefError::NotRelative(_))
        ));
    }
}
