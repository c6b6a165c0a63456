//! How manifest entries map to requested files: a file yields one part per document
//! (`stores.csv#row=3`, `manual.pdf#page=2`) or a single part named like the file.

use std::collections::BTreeMap;

use crate::store::SourceRecord;

/// The file (or URL) a part id belongs to: the id without its `#row=`/`#page=` suffix.
pub fn file_of(source_id: &str) -> &str {
    match source_id.rsplit_once('#') {
        Some((file, part)) if part.starts_with("row=") || part.starts_with("page=") => file,
        _ => source_id,
    }
}

/// Manifest entries belonging to `file`.
pub fn part_ids_of<'a>(records: &'a BTreeMap<String, SourceRecord>, file: &str) -> Vec<&'a str> {
    records
        .keys()
        .filter(|id| file_of(id) == file)
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_suffixes_map_to_their_file() {
        assert_eq!(file_of("stores.csv#row=3"), "stores.csv");
        assert_eq!(file_of("manual.pdf#page=12"), "manual.pdf");
        assert_eq!(file_of("kb/faq.md"), "kb/faq.md");
        assert_eq!(
            file_of("https://example.org/a#intro"),
            "https://example.org/a#intro"
        );
    }
}
