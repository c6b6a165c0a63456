//! CSV loader: one document per data row, written as `Header: value` lines so that each row
//! reads (and embeds) as a small self-describing record.
//!
//! The first record is the header. Empty values are left out; a row whose values are all
//! empty yields no document (but still counts for the numbering, so `#row=N` always points at
//! the N-th data row of the file). Rows longer than the header label their extra values
//! `column K`; a blank header cell is labelled the same way. A file with more data rows than
//! `max_rows` (`limits.max_csv_rows`) is refused as a whole, before any row is kept past it.

use super::{LoadError, SourceKind, decode_utf8};
use crate::types::{Document, Metadata};

/// Parses CSV bytes into one document per non-empty data row (`source_id#row=N`, metadata
/// `row` = N, 1-based); more than `max_rows` data rows is [`LoadError::OverLimit`].
pub fn parse(source_id: &str, bytes: &[u8], max_rows: usize) -> Result<Vec<Document>, LoadError> {
    let text = decode_utf8(source_id, SourceKind::Csv, bytes)?;
    let parse_error = |reason: String| LoadError::Parse {
        source_id: source_id.to_owned(),
        kind: SourceKind::Csv,
        reason,
    };
    let mut reader = ::csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .trim(::csv::Trim::All)
        .from_reader(text.as_bytes());
    let headers: Vec<String> = reader
        .headers()
        .map_err(|e| parse_error(format!("cannot read the header row: {e}")))?
        .iter()
        .map(str::to_owned)
        .collect();
    if headers.iter().all(String::is_empty) {
        return Err(parse_error(
            "the first row (the header) is empty; put the column names on the first line".into(),
        ));
    }

    let mut documents = Vec::new();
    for (index, record) in reader.records().enumerate() {
        let row = index + 1;
        if row > max_rows {
            return Err(LoadError::OverLimit {
                source_id: source_id.to_owned(),
                what: format!("it has more than {max_rows} data rows"),
                limit: max_rows as u64,
                key: "limits.max_csv_rows",
            });
        }
        let record = record.map_err(|e| {
            let line = e
                .position()
                .map(|p| format!(" (line {})", p.line()))
                .unwrap_or_default();
            parse_error(format!("data row {row}{line}: {e}"))
        })?;
        let mut lines = Vec::new();
        for (column, value) in record.iter().enumerate() {
            if value.is_empty() {
                continue;
            }
            let label = match headers.get(column) {
                Some(header) if !header.is_empty() => header.clone(),
                _ => format!("column {}", column + 1),
            };
            lines.push(format!("{label}: {value}"));
        }
        if lines.is_empty() {
            continue;
        }
        let mut metadata = Metadata::new();
        metadata.insert("row".into(), row.to_string());
        documents.push(Document {
            source_id: format!("{source_id}#row={row}"),
            text: lines.join("\n"),
            loader: SourceKind::Csv.as_str().to_owned(),
            metadata,
        });
    }
    Ok(documents)
}
