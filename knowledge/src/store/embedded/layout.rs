//! The on-disk layout: how collection names map to their storage, and one storage's sled
//! tree (key prefixes and the value encodings of chunks, manifest entries and meta keys).
//!
//! A collection's data lives under a *storage id*: the sled tree `col/<storage>` and the index
//! folder `indexes/<storage>/`. The `collections` registry tree maps each name to its storage
//! id; an empty value (data folders written before rebuilds existed) means the storage id is
//! the name itself. New storages — a created collection, or a rebuild beside a live one — get
//! `<name>@<16 hex digits>`, which no collection name can be ('@' is not allowed in names), so
//! a storage id is never reused and never reachable by a user. Publishing a rebuild is one
//! flushed registry write that points the name at the new storage; any storage the registry
//! does not point at is garbage (an unfinished rebuild, a swapped-out or dropped version, a
//! creation cut short) and is removed when the store is opened.
//!
//! One storage's tree:
//!
//! ```text
//! c/<chunk_id>     chunk: [format 1][u32 LE header length][JSON header][vector as LE f32]
//! s/<source_id>    SourceRecord as JSON (the incremental manifest)
//! m/profile        EmbeddingProfile as JSON
//! m/generation     u64 big-endian, incremented by every mutating batch
//! m/incarnation    u64 big-endian, random per creation of the collection
//! ```
//!
//! The chunk header carries everything but the id (the key) and the vector (the tail), so the
//! vector index can be loaded without parsing any JSON.

use serde::{Deserialize, Serialize};

use crate::types::{Metadata, StoredChunk};

/// Prefix of chunk keys.
pub const CHUNK_PREFIX: &[u8] = b"c/";
/// Prefix of manifest (source record) keys.
pub const SOURCE_PREFIX: &[u8] = b"s/";
/// The collection's embedding profile.
pub const PROFILE_KEY: &[u8] = b"m/profile";
/// The collection's generation counter.
pub const GENERATION_KEY: &[u8] = b"m/generation";
/// The collection's incarnation (distinguishes a re-created collection from its predecessor).
pub const INCARNATION_KEY: &[u8] = b"m/incarnation";

/// Prefix of the sled trees holding storages.
pub const TREE_PREFIX: &str = "col/";

/// Name of the sled tree of storage `storage`.
pub fn collection_tree_name(storage: &str) -> String {
    format!("{TREE_PREFIX}{storage}")
}

/// A fresh storage id for collection `name`.
pub fn new_storage_id(name: &str, random: u64) -> String {
    format!("{name}@{random:016x}")
}

/// Whether `id` is shaped like a storage id: a collection name (storages of data folders from
/// before rebuilds existed) or `<name>@<16 hex digits>`. Only such folders and trees are ever
/// removed as garbage.
pub fn is_storage_id(id: &str) -> bool {
    let (name, suffix) = match id.split_once('@') {
        Some((name, suffix)) => (name, Some(suffix)),
        None => (id, None),
    };
    crate::store::validate_collection_name(name).is_ok()
        && suffix.is_none_or(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Encodes a registry value: the storage id a name points at.
pub fn encode_registry_value(storage: &str) -> &[u8] {
    storage.as_bytes()
}

/// The storage id a registry entry points at (`name` itself for an empty legacy value).
pub fn decode_registry_value(name: &str, value: &[u8]) -> Result<String, String> {
    if value.is_empty() {
        return Ok(name.to_string());
    }
    let storage = std::str::from_utf8(value)
        .map_err(|_| format!("the storage id of collection '{name}' is not UTF-8"))?;
    if !is_storage_id(storage) {
        return Err(format!(
            "collection '{name}' points at '{storage}', which is not a storage id"
        ));
    }
    Ok(storage.to_string())
}

/// Key of a chunk.
pub fn chunk_key(chunk_id: &str) -> Vec<u8> {
    prefixed(CHUNK_PREFIX, chunk_id)
}

/// Key of a source's manifest entry.
pub fn source_key(source_id: &str) -> Vec<u8> {
    prefixed(SOURCE_PREFIX, source_id)
}

fn prefixed(prefix: &[u8], id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + id.len());
    key.extend_from_slice(prefix);
    key.extend_from_slice(id.as_bytes());
    key
}

/// The id part of a prefixed key (`None` when the key lacks the prefix or is not UTF-8).
pub fn id_of_key<'a>(prefix: &[u8], key: &'a [u8]) -> Option<&'a str> {
    key.strip_prefix(prefix)
        .and_then(|id| std::str::from_utf8(id).ok())
}

/// Encodes a u64 meta value (generation, incarnation).
pub fn encode_u64(value: u64) -> [u8; 8] {
    value.to_be_bytes()
}

/// Decodes a u64 meta value.
pub fn decode_u64(bytes: &[u8]) -> Result<u64, String> {
    let array: [u8; 8] = bytes
        .try_into()
        .map_err(|_| format!("expected 8 bytes, found {}", bytes.len()))?;
    Ok(u64::from_be_bytes(array))
}

const CHUNK_FORMAT: u8 = 1;
const CHUNK_PREAMBLE: usize = 1 + 4;

#[derive(Serialize)]
struct ChunkHeaderRef<'a> {
    source_id: &'a str,
    ordinal: u32,
    text: &'a str,
    start: usize,
    end: usize,
    metadata: &'a Metadata,
    content_hash: &'a str,
}

#[derive(Deserialize)]
struct ChunkHeader {
    source_id: String,
    ordinal: u32,
    text: String,
    start: usize,
    end: usize,
    metadata: Metadata,
    content_hash: String,
}

/// Encodes a chunk's value (its id lives in the key).
pub fn encode_chunk(chunk: &StoredChunk) -> Result<Vec<u8>, String> {
    let header = serde_json::to_vec(&ChunkHeaderRef {
        source_id: &chunk.source_id,
        ordinal: chunk.ordinal,
        text: &chunk.text,
        start: chunk.start,
        end: chunk.end,
        metadata: &chunk.metadata,
        content_hash: &chunk.content_hash,
    })
    .map_err(|e| format!("cannot encode chunk '{}': {e}", chunk.id))?;
    let header_len = u32::try_from(header.len())
        .map_err(|_| format!("chunk '{}' is larger than 4 GiB", chunk.id))?;
    let mut out = Vec::with_capacity(CHUNK_PREAMBLE + header.len() + chunk.vector.len() * 4);
    out.push(CHUNK_FORMAT);
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(&header);
    for value in &chunk.vector {
        out.extend_from_slice(&value.to_le_bytes());
    }
    Ok(out)
}

/// Splits an encoded chunk into its JSON header and its vector bytes.
fn split_chunk(bytes: &[u8]) -> Result<(&[u8], &[u8]), String> {
    let (&format, rest) = bytes
        .split_first()
        .ok_or_else(|| "empty chunk value".to_string())?;
    if format != CHUNK_FORMAT {
        return Err(format!("unknown chunk format {format}"));
    }
    let len_bytes: [u8; 4] = rest
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| "truncated chunk value".to_string())?;
    let header_len = u32::from_le_bytes(len_bytes) as usize;
    let rest = &rest[4..];
    if rest.len() < header_len {
        return Err(format!(
            "chunk header claims {header_len} bytes but only {} remain",
            rest.len()
        ));
    }
    let (header, vector) = rest.split_at(header_len);
    if vector.len() % 4 != 0 {
        return Err(format!(
            "vector part has {} bytes, not a multiple of 4",
            vector.len()
        ));
    }
    Ok((header, vector))
}

fn decode_vector(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Decodes a whole chunk.
pub fn decode_chunk(chunk_id: &str, bytes: &[u8]) -> Result<StoredChunk, String> {
    let (header, vector) = split_chunk(bytes)?;
    let header: ChunkHeader =
        serde_json::from_slice(header).map_err(|e| format!("malformed chunk header: {e}"))?;
    Ok(StoredChunk {
        id: chunk_id.to_string(),
        source_id: header.source_id,
        ordinal: header.ordinal,
        text: header.text,
        start: header.start,
        end: header.end,
        metadata: header.metadata,
        content_hash: header.content_hash,
        vector: decode_vector(vector),
    })
}

/// Decodes only a chunk's vector (no JSON parsing).
pub fn decode_chunk_vector(bytes: &[u8]) -> Result<Vec<f32>, String> {
    let (_, vector) = split_chunk(bytes)?;
    Ok(decode_vector(vector))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk() -> StoredChunk {
        StoredChunk {
            id: "a.md#0".into(),
            source_id: "a.md".into(),
            ordinal: 3,
            text: "héllo wörld".into(),
            start: 10,
            end: 24,
            metadata: [("heading_path".to_string(), "A > B".to_string())].into(),
            content_hash: "abc".into(),
            vector: vec![0.5, -1.25, f32::MIN_POSITIVE, 3.0e7],
        }
    }

    #[test]
    fn chunk_round_trips_and_vector_decodes_alone() {
        let original = chunk();
        let bytes = encode_chunk(&original).unwrap();
        assert_eq!(decode_chunk("a.md#0", &bytes).unwrap(), original);
        assert_eq!(decode_chunk_vector(&bytes).unwrap(), original.vector);
    }

    #[test]
    fn damaged_chunk_values_are_reported() {
        let bytes = encode_chunk(&chunk()).unwrap();
        assert!(decode_chunk("x", &[]).unwrap_err().contains("empty"));
        assert!(
            decode_chunk("x", &bytes[..3])
                .unwrap_err()
                .contains("truncated")
        );
        assert!(
            decode_chunk("x", &bytes[..bytes.len() - 1])
                .unwrap_err()
                .contains("multiple of 4")
        );
        let mut other_format = bytes.clone();
        other_format[0] = 9;
        assert!(
            decode_chunk("x", &other_format)
                .unwrap_err()
                .contains("format 9")
        );
        let mut bad_json = bytes;
        bad_json[5] = b'!';
        assert!(
            decode_chunk("x", &bad_json)
                .unwrap_err()
                .contains("malformed")
        );
    }

    #[test]
    fn storage_ids_stay_outside_collection_names() {
        let id = new_storage_id("kb", 0xab);
        assert_eq!(id, "kb@00000000000000ab");
        assert!(is_storage_id(&id) && is_storage_id("kb"));
        assert!(crate::store::validate_collection_name(&id).is_err());
        for bad in [
            "kb@12",
            "kb@zzzzzzzzzzzzzzzz",
            "../kb",
            "@0000000000000000",
            "",
        ] {
            assert!(!is_storage_id(bad), "{bad}");
        }
        assert_eq!(decode_registry_value("kb", b"").unwrap(), "kb");
        assert_eq!(decode_registry_value("kb", id.as_bytes()).unwrap(), id);
        assert!(decode_registry_value("kb", b"../etc").is_err());
    }

    #[test]
    fn keys_carry_their_ids() {
        assert_eq!(id_of_key(CHUNK_PREFIX, &chunk_key("x/y#1")), Some("x/y#1"));
        assert_eq!(id_of_key(SOURCE_PREFIX, &chunk_key("x")), None);
        assert_eq!(decode_u64(&encode_u64(42)).unwrap(), 42);
        assert!(decode_u64(b"1234").is_err());
    }
}
