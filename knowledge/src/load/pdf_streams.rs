//! Bounded decoding of PDF streams: a flate (or LZW) bomb is refused before it is inflated
//! past [`LoadLimits::max_pdf_stream_bytes`] per stream or
//! [`LoadLimits::max_pdf_document_bytes`] per document.
//!
//! lopdf inflates with `read_to_end`, without any bound, at two moments:
//!
//! 1. **while loading** — cross-reference streams (`/Type /XRef`) and object streams
//!    (`/Type /ObjStm`, also when a stream's `/Length` points into one). [`prescan`] finds those
//!    streams in the raw bytes *before* lopdf sees them (every name is read with its `#xx`
//!    escapes decoded, the dictionary around it parsed from the `obj` keyword before it), and
//!    decodes their filter chain with bounded readers, keeping nothing. A dictionary it cannot
//!    parse is probed with every supported filter, three deep. An *encrypted* file with object
//!    streams is refused: their bytes are encrypted here and lopdf decrypts and inflates them
//!    during the load.
//! 2. **lazily, on every use** — page contents, form XObjects, fonts, CMaps. [`decode_in_place`]
//!    runs after the load and before any extraction: every filtered stream except images (which
//!    the text extractor never decodes) is decoded with bounded readers and stored decoded, so
//!    lopdf never inflates it again.
//!
//! The supported filters are lopdf's: `FlateDecode` (with lopdf's raw-deflate fallback),
//! `LZWDecode` (`/EarlyChange`), `ASCII85Decode`, and the PNG predictors of `/DecodeParms`; a
//! predictor row wider than the stream limit is refused too (lopdf would allocate it). Every
//! decoder writes into a buffer that stops one byte past its cap: nothing is ever allocated
//! beyond the limit.

use std::io::Read;

use pdf_extract::{Dictionary, Document as PdfDocument, Object};

use crate::settings::LoadLimits;

/// Longest filter chain decoded (longer chains are refused: no honest file needs them).
pub const MAX_FILTERS: usize = 8;
/// Filter layers [`prescan`] tries on a stream whose dictionary it cannot read.
const PROBE_DEPTH: usize = 3;
/// `obj` keywords before a name [`prescan`] tries as the start of its dictionary.
const DICT_CANDIDATES: usize = 16;
/// Bytes of one dictionary [`prescan`] reads at most.
const MAX_DICT_BYTES: usize = 1 << 20;
/// Nesting of arrays and dictionaries [`prescan`] follows (lopdf's own bound).
const MAX_NESTING: usize = 100;

/// Why a PDF's streams were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamError {
    /// A limit was hit: what, the limit, its configuration key.
    OverLimit {
        what: String,
        limit: u64,
        key: &'static str,
    },
    /// The file cannot be decoded safely for another reason.
    Refused(String),
}

/// What one decoder produced.
enum Stage {
    /// The output (at most the cap).
    Done(Vec<u8>),
    /// The data is not valid for this filter (lopdf fails too, or yields nothing).
    Invalid,
}

/// Past the cap.
struct Over;

fn inflate(input: &[u8], cap: usize) -> Result<Stage, Over> {
    let mut out = Vec::new();
    let bound = cap as u64 + 1;
    let result = flate2::read::ZlibDecoder::new(input)
        .take(bound)
        .read_to_end(&mut out);
    // lopdf keeps what was inflated before an error, and retries a stream that yielded nothing
    // as raw deflate after the two header bytes.
    if result.is_err() && out.is_empty() && input.len() > 2 {
        let _ = flate2::read::DeflateDecoder::new(&input[2..])
            .take(bound)
            .read_to_end(&mut out);
    }
    if out.len() > cap {
        return Err(Over);
    }
    Ok(Stage::Done(out))
}

fn lzw(input: &[u8], early_change: bool, cap: usize) -> Result<Stage, Over> {
    use weezl::{BitOrder, LzwStatus, decode::Decoder};
    let mut decoder = if early_change {
        Decoder::with_tiff_size_switch(BitOrder::Msb, 8)
    } else {
        Decoder::new(BitOrder::Msb, 8)
    };
    let mut out = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut rest = input;
    loop {
        let result = decoder.decode_bytes(rest, &mut buffer);
        out.extend_from_slice(&buffer[..result.consumed_out]);
        if out.len() > cap {
            return Err(Over);
        }
        rest = &rest[result.consumed_in..];
        match result.status {
            Ok(LzwStatus::Ok) if result.consumed_in > 0 || result.consumed_out > 0 => {}
            _ => break,
        }
    }
    Ok(Stage::Done(out))
}

/// ASCII85 as lopdf decodes it (a `z` inside a group and an overflowing group are errors).
fn ascii85(input: &[u8], cap: usize) -> Result<Stage, Over> {
    let body = input.strip_suffix(b"~>").unwrap_or(input);
    let mut out = Vec::new();
    let mut group: u32 = 0;
    let mut count = 0;
    for &byte in body {
        if byte == b'z' {
            if count != 0 {
                return Ok(Stage::Invalid);
            }
            out.extend_from_slice(&[0; 4]);
        } else if byte.is_ascii_whitespace() {
            continue;
        } else if !(b'!'..=b'u').contains(&byte) {
            break;
        } else {
            let Some(next) = group
                .checked_mul(85)
                .and_then(|g| g.checked_add(u32::from(byte - b'!')))
            else {
                return Ok(Stage::Invalid);
            };
            group = next;
            count += 1;
            if count == 5 {
                out.extend_from_slice(&group.to_be_bytes());
                group = 0;
                count = 0;
            }
        }
        if out.len() > cap {
            return Err(Over);
        }
    }
    if count > 0 {
        for _ in count..5 {
            let Some(next) = group.checked_mul(85).and_then(|g| g.checked_add(84)) else {
                return Ok(Stage::Invalid);
            };
            group = next;
        }
        out.extend_from_slice(&group.to_be_bytes()[..count - 1]);
    }
    if out.len() > cap {
        return Err(Over);
    }
    Ok(Stage::Done(out))
}

/// The decoding parameters lopdf reads (only a direct `/DecodeParms` dictionary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Params {
    predictor: i64,
    columns: i64,
    colors: i64,
    bits: i64,
    early_change: bool,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            predictor: 1,
            columns: 1,
            colors: 1,
            bits: 8,
            early_change: true,
        }
    }
}

impl Params {
    fn from_lopdf(dict: &Dictionary) -> Self {
        let Ok(params) = dict.get(b"DecodeParms").and_then(Object::as_dict) else {
            return Self::default();
        };
        let int =
            |key: &[u8], default: i64| params.get(key).and_then(Object::as_i64).unwrap_or(default);
        Self {
            predictor: int(b"Predictor", 1),
            columns: int(b"Columns", 1),
            colors: int(b"Colors", 1),
            bits: int(b"BitsPerComponent", 8),
            early_change: int(b"EarlyChange", 1) != 0,
        }
    }

    /// Bytes per pixel and pixels per row of a PNG predictor, `None` without one; `Err` when a
    /// row alone would be wider than `cap`.
    fn png_row(&self, cap: usize) -> Result<Option<(usize, usize)>, Over> {
        if !(10..=15).contains(&self.predictor) {
            return Ok(None);
        }
        let columns = usize::try_from(self.columns.max(1)).map_err(|_| Over)?;
        let colors = usize::try_from(self.colors.max(1)).map_err(|_| Over)?;
        let bits = usize::try_from(self.bits.max(8)).map_err(|_| Over)?;
        let bytes_per_pixel = colors.checked_mul(bits).ok_or(Over)? / 8;
        let row = bytes_per_pixel.checked_mul(columns).ok_or(Over)?;
        if row > cap {
            return Err(Over);
        }
        Ok(Some((bytes_per_pixel, columns)))
    }
}

/// Applies the PNG predictor after a Flate or LZW stage, as lopdf does.
fn predict(data: Vec<u8>, params: &Params, cap: usize) -> Result<Stage, Over> {
    match params.png_row(cap)? {
        None => Ok(Stage::Done(data)),
        Some((bytes_per_pixel, columns)) => {
            match pdf_extract::filters::png::decode_frame(&data, bytes_per_pixel, columns) {
                Ok(decoded) if decoded.len() > cap => Err(Over),
                Ok(decoded) => Ok(Stage::Done(decoded)),
                Err(_) => Ok(Stage::Invalid),
            }
        }
    }
}

/// Result of decoding a filter chain within a cap.
enum Chain {
    /// Every filter decoded: the plain content.
    Plain(Vec<u8>),
    /// A filter is unsupported or its data invalid: lopdf stops there too. Carries the bytes
    /// decoded before that point (what lopdf may still allocate).
    Partial(usize),
}

fn decode_chain(
    filters: &[&[u8]],
    params: &Params,
    content: &[u8],
    cap: usize,
) -> Result<Chain, StreamError> {
    if filters.len() > MAX_FILTERS {
        return Err(StreamError::Refused(format!(
            "a stream has {} filters (at most {MAX_FILTERS} are decoded); the file is malformed or hostile",
            filters.len()
        )));
    }
    let over = |_| StreamError::OverLimit {
        what: String::new(),
        limit: cap as u64,
        key: "",
    };
    let mut data: Option<Vec<u8>> = None;
    for filter in filters {
        let input = data.as_deref().unwrap_or(content);
        let stage = match *filter {
            b"FlateDecode" => match inflate(input, cap).map_err(over)? {
                Stage::Done(out) => predict(out, params, cap).map_err(over)?,
                invalid => invalid,
            },
            b"LZWDecode" => match lzw(input, params.early_change, cap).map_err(over)? {
                Stage::Done(out) => predict(out, params, cap).map_err(over)?,
                invalid => invalid,
            },
            b"ASCII85Decode" => ascii85(input, cap).map_err(over)?,
            _ => Stage::Invalid,
        };
        match stage {
            Stage::Done(out) => data = Some(out),
            Stage::Invalid => return Ok(Chain::Partial(data.map_or(0, |d| d.len()))),
        }
    }
    Ok(Chain::Plain(data.unwrap_or_default()))
}

/// Tracks the bytes decoded for one document and names the limit that was hit.
struct Budget<'a> {
    limits: &'a LoadLimits,
    used: u64,
}

impl Budget<'_> {
    /// The cap of the next stream: the stream limit, or what is left of the document's.
    fn cap(&self) -> usize {
        let left = (self.limits.max_pdf_document_bytes as u64).saturating_sub(self.used);
        (self.limits.max_pdf_stream_bytes as u64).min(left) as usize
    }

    /// The error for a stream (`what`) that went past [`Budget::cap`].
    fn exceeded(&self, what: &str) -> StreamError {
        let stream_limit = self.limits.max_pdf_stream_bytes as u64;
        let left = (self.limits.max_pdf_document_bytes as u64).saturating_sub(self.used);
        if stream_limit <= left {
            StreamError::OverLimit {
                what: format!("{what} inflates to more than {stream_limit} bytes"),
                limit: stream_limit,
                key: "limits.max_pdf_stream_bytes",
            }
        } else {
            StreamError::OverLimit {
                what: format!(
                    "its streams inflate to more than {} bytes in all ({what} is past it)",
                    self.limits.max_pdf_document_bytes
                ),
                limit: self.limits.max_pdf_document_bytes as u64,
                key: "limits.max_pdf_document_bytes",
            }
        }
    }

    fn decode(
        &mut self,
        what: &str,
        filters: &[&[u8]],
        params: &Params,
        content: &[u8],
    ) -> Result<Chain, StreamError> {
        let chain = match decode_chain(filters, params, content, self.cap()) {
            Err(StreamError::OverLimit { .. }) => return Err(self.exceeded(what)),
            other => other?,
        };
        self.used += match &chain {
            Chain::Plain(plain) => plain.len() as u64,
            Chain::Partial(bytes) => *bytes as u64,
        };
        Ok(chain)
    }
}

/// Decodes, within the limits, every filtered stream of a loaded document except images, and
/// stores it decoded (see the module documentation). `already` is what [`prescan`] counted.
pub fn decode_in_place(
    pdf: &mut PdfDocument,
    limits: &LoadLimits,
    already: u64,
) -> Result<(), StreamError> {
    let mut budget = Budget {
        limits,
        used: already,
    };
    for (id, object) in pdf.objects.iter_mut() {
        let Object::Stream(stream) = object else {
            continue;
        };
        if stream.dict.get(b"Subtype").and_then(Object::as_name).ok() == Some(&b"Image"[..]) {
            continue;
        }
        let filters: Vec<Vec<u8>> = match stream.filters() {
            Ok(filters) if !filters.is_empty() => filters.into_iter().map(<[u8]>::to_vec).collect(),
            _ => continue,
        };
        let filters: Vec<&[u8]> = filters.iter().map(Vec::as_slice).collect();
        let params = Params::from_lopdf(&stream.dict);
        let what = format!("stream {} {} R", id.0, id.1);
        if let Chain::Plain(plain) = budget.decode(&what, &filters, &params, &stream.content)? {
            stream.set_plain_content(plain);
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ the raw pre-scan

/// Bytes the pre-scan may read while looking for dictionaries, per byte of the file (a hostile
/// file full of `obj` keywords and `/ObjStm` names must not make it quadratic).
const SCAN_WORK_PER_BYTE: usize = 16;

/// Checks, in the raw bytes and before lopdf loads them, every stream lopdf inflates while
/// loading (see the module documentation). Returns the bytes they decode to, counted against
/// the document's limit.
pub fn prescan(bytes: &[u8], limits: &LoadLimits) -> Result<u64, StreamError> {
    let mut scan = Scan {
        bytes,
        budget: Budget { limits, used: 0 },
        seen_starts: std::collections::BTreeSet::new(),
        floor: 0,
        work: 0,
        max_work: bytes.len().saturating_mul(SCAN_WORK_PER_BYTE).max(1 << 20),
    };
    let mut encrypted = false;
    let mut object_streams = 0usize;
    let mut position = 0;
    while let Some(offset) = memchr(b'/', &bytes[position..]) {
        let slash = position + offset;
        let (name, end) = read_name(bytes, slash + 1);
        position = end.max(slash + 1);
        match name.as_slice() {
            b"Encrypt" => encrypted = true,
            b"ObjStm" | b"XRef" => {
                if name == b"ObjStm" {
                    object_streams += 1;
                }
                scan.check_stream_around(slash)?;
                scan.floor = slash;
            }
            _ => {}
        }
    }
    if encrypted && object_streams > 0 {
        return Err(StreamError::Refused(
            "it is encrypted and packs objects in compressed object streams, which cannot be inflated within the limits before decryption; decrypt it first (e.g. `qpdf --decrypt in.pdf out.pdf`)".into(),
        ));
    }
    Ok(scan.budget.used)
}

/// State of one [`prescan`].
struct Scan<'a> {
    bytes: &'a [u8],
    budget: Budget<'a>,
    /// Data offsets of the streams already checked.
    seen_starts: std::collections::BTreeSet<usize>,
    /// Dictionaries are looked for after the previous name only.
    floor: usize,
    /// Bytes read looking for dictionaries, bounded by `max_work`.
    work: usize,
    max_work: usize,
}

impl Scan<'_> {
    fn spend(&mut self, bytes: usize) -> Result<(), StreamError> {
        self.work = self.work.saturating_add(bytes);
        if self.work > self.max_work {
            return Err(StreamError::Refused(
                "its object streams cannot be located within a bounded scan; the file is malformed or hostile".into(),
            ));
        }
        Ok(())
    }

    /// Finds the stream whose dictionary holds the name at `name_at` and checks it.
    fn check_stream_around(&mut self, name_at: usize) -> Result<(), StreamError> {
        let bytes = self.bytes;
        let what = format!("the object or cross-reference stream near byte {name_at}");
        let floor = self.floor.max(name_at.saturating_sub(MAX_DICT_BYTES));
        let mut search_end = name_at;
        for _ in 0..DICT_CANDIDATES {
            let Some(found) = rfind(&bytes[floor..search_end], b"obj") else {
                break;
            };
            let obj_at = floor + found;
            self.spend(search_end - obj_at)?;
            search_end = obj_at;
            let mut lexer = Lexer::new(bytes, obj_at + 3);
            lexer.skip_space();
            let dict_start = lexer.at;
            let value = lexer.value(0);
            self.spend(lexer.at - obj_at)?;
            let Some(Value::Dict(dict)) = value else {
                continue;
            };
            if !(dict_start < name_at && name_at < lexer.at) {
                continue;
            }
            let Some(data_start) = lexer.stream_keyword() else {
                continue;
            };
            if !self.seen_starts.insert(data_start) {
                return Ok(());
            }
            let data = match dict_int(&dict, b"Length") {
                Some(length) if length >= 0 => {
                    let end = data_start.saturating_add(length as usize).min(bytes.len());
                    &bytes[data_start..end]
                }
                // An indirect or missing length: up to the end of the file (a prefix inflates
                // to a prefix of the output, so this bounds what lopdf can get).
                _ => &bytes[data_start..],
            };
            let filters = dict_filters(&dict);
            let filters: Vec<&[u8]> = filters.iter().map(Vec::as_slice).collect();
            let params = dict_params(&dict);
            self.budget.decode(&what, &filters, &params, data)?;
            return Ok(());
        }
        // The dictionary could not be read: probe the next stream with every filter.
        let Some(data_start) = next_stream_data(bytes, name_at) else {
            return Ok(());
        };
        self.spend(data_start - name_at)?;
        if !self.seen_starts.insert(data_start) {
            return Ok(());
        }
        let cap = self.budget.cap();
        let size = probe(&bytes[data_start..], cap, PROBE_DEPTH)
            .map_err(|_| self.budget.exceeded(&what))?;
        self.budget.used += size as u64;
        Ok(())
    }
}

/// The largest output any chain of up to `depth` supported filters gives for `data`.
fn probe(data: &[u8], cap: usize, depth: usize) -> Result<usize, Over> {
    if depth == 0 || data.is_empty() {
        return Ok(0);
    }
    let mut largest = 0;
    let stages = [
        inflate(data, cap)?,
        lzw(data, true, cap)?,
        lzw(data, false, cap)?,
        ascii85(data, cap)?,
    ];
    for stage in stages {
        if let Stage::Done(out) = stage {
            largest = largest.max(out.len()).max(probe(&out, cap, depth - 1)?);
        }
    }
    Ok(largest)
}

/// Where the data of the first `stream` keyword after `from` begins.
fn next_stream_data(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(found) = find(&bytes[at..], b"stream") {
        let keyword = at + found;
        at = keyword + 6;
        if keyword >= 3 && &bytes[keyword - 3..keyword] == b"end" {
            continue;
        }
        let mut lexer = Lexer::new(bytes, keyword);
        if let Some(start) = lexer.stream_keyword() {
            return Some(start);
        }
    }
    None
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn rfind(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

fn memchr(byte: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == byte)
}

fn is_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | b'\0' | b'\x0C')
}

fn is_delimiter(byte: u8) -> bool {
    matches!(
        byte,
        b'(' | b')' | b'<' | b'>' | b'[' | b']' | b'{' | b'}' | b'/' | b'%'
    )
}

fn hex_value(byte: u8) -> Option<u8> {
    (byte as char).to_digit(16).map(|d| d as u8)
}

/// The name starting at `start` (after its `/`), `#xx` escapes decoded, and where it ends.
fn read_name(bytes: &[u8], start: usize) -> (Vec<u8>, usize) {
    let mut name = Vec::new();
    let mut at = start;
    while at < bytes.len() && !is_whitespace(bytes[at]) && !is_delimiter(bytes[at]) {
        if bytes[at] == b'#'
            && let (Some(hi), Some(lo)) = (
                bytes.get(at + 1).copied().and_then(hex_value),
                bytes.get(at + 2).copied().and_then(hex_value),
            )
        {
            name.push(hi << 4 | lo);
            at += 3;
            continue;
        }
        name.push(bytes[at]);
        at += 1;
    }
    (name, at)
}

/// A PDF value as far as [`prescan`] needs it.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Dict(Vec<(Vec<u8>, Value)>),
    Array(Vec<Value>),
    Name(Vec<u8>),
    Int(i64),
    /// Strings, reals, booleans, references, keywords.
    Other,
}

fn dict_get<'a>(dict: &'a [(Vec<u8>, Value)], key: &[u8]) -> Option<&'a Value> {
    dict.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn dict_int(dict: &[(Vec<u8>, Value)], key: &[u8]) -> Option<i64> {
    match dict_get(dict, key) {
        Some(Value::Int(value)) => Some(*value),
        _ => None,
    }
}

fn dict_filters(dict: &[(Vec<u8>, Value)]) -> Vec<Vec<u8>> {
    match dict_get(dict, b"Filter") {
        Some(Value::Name(name)) => vec![name.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::Name(name) => name.clone(),
                _ => b"?".to_vec(),
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn dict_params(dict: &[(Vec<u8>, Value)]) -> Params {
    let Some(Value::Dict(params)) = dict_get(dict, b"DecodeParms") else {
        return Params::default();
    };
    let int = |key: &[u8], default: i64| dict_int(params, key).unwrap_or(default);
    Params {
        predictor: int(b"Predictor", 1),
        columns: int(b"Columns", 1),
        colors: int(b"Colors", 1),
        bits: int(b"BitsPerComponent", 8),
        early_change: int(b"EarlyChange", 1) != 0,
    }
}

/// A forward reader of PDF tokens, bounded in bytes and nesting.
struct Lexer<'a> {
    bytes: &'a [u8],
    at: usize,
    limit: usize,
}

impl<'a> Lexer<'a> {
    fn new(bytes: &'a [u8], at: usize) -> Self {
        Self {
            bytes,
            at,
            limit: at.saturating_add(MAX_DICT_BYTES).min(bytes.len()),
        }
    }

    fn peek(&self) -> Option<u8> {
        (self.at < self.limit).then(|| self.bytes[self.at])
    }

    fn starts_with(&self, token: &[u8]) -> bool {
        self.bytes[self.at.min(self.limit)..self.limit].starts_with(token)
    }

    /// Whitespace and comments.
    fn skip_space(&mut self) {
        while let Some(byte) = self.peek() {
            if is_whitespace(byte) {
                self.at += 1;
            } else if byte == b'%' {
                while let Some(byte) = self.peek() {
                    if byte == b'\n' || byte == b'\r' {
                        break;
                    }
                    self.at += 1;
                }
            } else {
                break;
            }
        }
    }

    /// After a dictionary: whitespace, `stream`, spaces, an end of line → the data's offset.
    fn stream_keyword(&mut self) -> Option<usize> {
        self.skip_space();
        if !self.starts_with(b"stream") {
            return None;
        }
        self.at += 6;
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
        if self.starts_with(b"\r\n") {
            Some(self.at + 2)
        } else if matches!(self.peek(), Some(b'\n' | b'\r')) {
            Some(self.at + 1)
        } else {
            None
        }
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        if depth > MAX_NESTING {
            return None;
        }
        self.skip_space();
        let byte = self.peek()?;
        match byte {
            b'<' if self.starts_with(b"<<") => {
                self.at += 2;
                let mut entries = Vec::new();
                loop {
                    self.skip_space();
                    if self.starts_with(b">>") {
                        self.at += 2;
                        return Some(Value::Dict(entries));
                    }
                    let Some(Value::Name(key)) = self.value(depth + 1) else {
                        return None;
                    };
                    let value = self.value(depth + 1)?;
                    let value = self.reference_after(value);
                    entries.push((key, value));
                }
            }
            b'<' => {
                self.at += 1;
                while let Some(byte) = self.peek() {
                    self.at += 1;
                    if byte == b'>' {
                        return Some(Value::Other);
                    }
                }
                None
            }
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                loop {
                    self.skip_space();
                    if self.peek() == Some(b']') {
                        self.at += 1;
                        return Some(Value::Array(items));
                    }
                    let item = self.value(depth + 1)?;
                    items.push(item);
                }
            }
            b'(' => {
                self.at += 1;
                let mut open = 1usize;
                while let Some(byte) = self.peek() {
                    self.at += 1;
                    match byte {
                        b'\\' => self.at += 1,
                        b'(' => open += 1,
                        b')' => {
                            open -= 1;
                            if open == 0 {
                                return Some(Value::Other);
                            }
                        }
                        _ => {}
                    }
                }
                None
            }
            b'/' => {
                let (name, end) = read_name(self.bytes, self.at + 1);
                self.at = end.min(self.limit);
                Some(Value::Name(name))
            }
            b'>' | b']' | b')' | b'{' | b'}' => None,
            _ => {
                let start = self.at;
                while let Some(byte) = self.peek() {
                    if is_whitespace(byte) || is_delimiter(byte) {
                        break;
                    }
                    self.at += 1;
                }
                let token = &self.bytes[start..self.at];
                if token.is_empty() {
                    return None;
                }
                Some(
                    std::str::from_utf8(token)
                        .ok()
                        .and_then(|t| t.parse::<i64>().ok())
                        .map_or(Value::Other, Value::Int),
                )
            }
        }
    }

    /// `n g R` after an integer value is a reference.
    fn reference_after(&mut self, value: Value) -> Value {
        if !matches!(value, Value::Int(_)) {
            return value;
        }
        let saved = self.at;
        self.skip_space();
        let generation_start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        if self.at > generation_start {
            self.skip_space();
            if self.peek() == Some(b'R') {
                self.at += 1;
                return Value::Other;
            }
        }
        self.at = saved;
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zlib(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut encoder =
            flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn decoders_stop_one_byte_past_the_cap() {
        let packed = zlib(&vec![0u8; 10_000]);
        assert!(matches!(inflate(&packed, 10_000), Ok(Stage::Done(out)) if out.len() == 10_000));
        assert!(inflate(&packed, 9_999).is_err());
        assert!(matches!(ascii85(b"zzz~>", 12), Ok(Stage::Done(out)) if out == vec![0; 12]));
        assert!(ascii85(b"zzzz~>", 12).is_err());
        assert!(matches!(ascii85(b"9jqo^~>", 100), Ok(Stage::Done(out)) if out == b"Man "));
    }

    #[test]
    fn predictor_rows_wider_than_the_cap_are_refused() {
        let params = Params {
            predictor: 12,
            columns: 1 << 40,
            ..Params::default()
        };
        assert!(params.png_row(1 << 20).is_err());
        let params = Params {
            predictor: 12,
            columns: i64::MAX,
            colors: i64::MAX,
            ..Params::default()
        };
        assert!(params.png_row(usize::MAX).is_err());
    }

    #[test]
    fn names_are_read_with_escapes_and_dictionaries_with_references() {
        assert_eq!(read_name(b"Obj#53tm ", 0), (b"ObjStm".to_vec(), 8));
        let source = b"<< /Type /XRef /Length 5 0 R /Filter [/ASCII85Decode /FlateDecode] /DecodeParms << /Predictor 12 /Columns 5 >> /S (a (b) \\) >> c) >>\nstream\r\nDATA";
        let mut lexer = Lexer::new(source, 0);
        let Some(Value::Dict(dict)) = lexer.value(0) else {
            panic!("a dictionary")
        };
        assert_eq!(dict_get(&dict, b"Length"), Some(&Value::Other));
        assert_eq!(
            dict_filters(&dict),
            vec![b"ASCII85Decode".to_vec(), b"FlateDecode".to_vec()]
        );
        assert_eq!(dict_params(&dict).columns, 5);
        let start = lexer.stream_keyword().expect("stream keyword");
        assert_eq!(&source[start..], b"DATA");
    }
}
