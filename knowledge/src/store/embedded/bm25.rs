//! A collection's persisted BM25 text index (tantivy), derived from sled.
//!
//! Fields: `chunk_id` (raw, stored), `source_id` (raw, for delete-by-source) and `text`
//! (tokenised by tantivy's `en_stem` analyser: lowercase + English stemming). Every commit
//! carries the [`IndexStamp`] of the sled state it reflects as its payload, so a lagging index
//! is recognised at open and rebuilt. Queries are free text: they are analysed with the same
//! analyser and become a disjunction of terms (no query syntax to trip over).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use tantivy::collector::TopDocs;
use tantivy::directory::MmapDirectory;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term, doc};
use tracing::warn;

use super::index_stamp::IndexStamp;
use crate::store::StoreError;
use crate::types::StoredChunk;

const TEXT_ANALYZER: &str = "en_stem";
const WRITER_MEMORY_BYTES: usize = 32 * 1024 * 1024;

/// A collection's tantivy index with its writer and reader.
pub struct Bm25Index {
    dir: PathBuf,
    index: Index,
    /// `None` once [`close`](Self::close)d.
    writer: Option<IndexWriter>,
    reader: IndexReader,
    chunk_id: Field,
    source_id: Field,
    text: Field,
}

fn schema() -> (Schema, Field, Field, Field) {
    let mut builder = Schema::builder();
    let chunk_id = builder.add_text_field("chunk_id", STRING | STORED);
    let source_id = builder.add_text_field("source_id", STRING);
    let text_options = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(TEXT_ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let text = builder.add_text_field("text", text_options);
    (builder.build(), chunk_id, source_id, text)
}

impl Bm25Index {
    /// Opens the index in `dir`, creating it when missing. An index that cannot be opened
    /// (damaged, or written with another schema) is wiped and recreated empty: it carries no
    /// stamp then, so the caller rebuilds it from sled.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        match Self::open_or_create(dir) {
            Ok(index) => Ok(index),
            Err(error) => {
                warn!(dir = %dir.display(), %error, "BM25 index unreadable; recreating it from sled");
                std::fs::remove_dir_all(dir)
                    .map_err(|e| io_error(dir, &format!("removing the unreadable index: {e}")))?;
                Self::open_or_create(dir)
            }
        }
    }

    fn open_or_create(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| io_error(dir, &format!("creating the folder: {e}")))?;
        let (schema, chunk_id, source_id, text) = schema();
        let directory = MmapDirectory::open(dir).map_err(|e| io_error(dir, &e.to_string()))?;
        let index =
            Index::open_or_create(directory, schema).map_err(|e| io_error(dir, &e.to_string()))?;
        let writer = index
            .writer_with_num_threads(1, WRITER_MEMORY_BYTES)
            .map_err(|e| io_error(dir, &format!("opening the writer: {e}")))?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e| io_error(dir, &format!("opening the reader: {e}")))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            index,
            writer: Some(writer),
            reader,
            chunk_id,
            source_id,
            text,
        })
    }

    /// The stamp of the last commit (`None` for a new index or one committed by something else).
    pub fn stamp(&self) -> Result<Option<IndexStamp>, StoreError> {
        let metas = self
            .index
            .load_metas()
            .map_err(|e| io_error(&self.dir, &format!("reading meta.json: {e}")))?;
        Ok(metas.payload.and_then(|payload| payload.parse().ok()))
    }

    fn writer(&mut self) -> Result<&mut IndexWriter, StoreError> {
        self.writer.as_mut().ok_or_else(|| {
            io_error(
                &self.dir,
                "the index is closed (its collection was dropped)",
            )
        })
    }

    /// Stops the writer (waiting for its merges) so the index folder can be removed.
    pub fn close(&mut self) {
        if let Some(writer) = self.writer.take()
            && let Err(error) = writer.wait_merging_threads()
        {
            warn!(dir = %self.dir.display(), %error, "BM25 merge threads failed while closing");
        }
    }

    fn add_chunks<'c>(
        &mut self,
        chunks: impl IntoIterator<Item = &'c StoredChunk>,
    ) -> Result<(), StoreError> {
        let (chunk_id, source_id, text) = (self.chunk_id, self.source_id, self.text);
        let dir = self.dir.clone();
        let writer = self.writer()?;
        for chunk in chunks {
            writer
                .add_document(doc!(
                    chunk_id => chunk.id.as_str(),
                    source_id => chunk.source_id.as_str(),
                    text => chunk.text.as_str(),
                ))
                .map_err(|e| io_error(&dir, &format!("indexing chunk '{}': {e}", chunk.id)))?;
        }
        Ok(())
    }

    fn commit(&mut self, stamp: IndexStamp) -> Result<(), StoreError> {
        let writer = self.writer()?;
        let result = writer.prepare_commit().and_then(|mut prepared| {
            prepared.set_payload(&stamp.to_string());
            prepared.commit()
        });
        if let Err(error) = result {
            if let Err(rollback) = writer.rollback() {
                warn!(dir = %self.dir.display(), %rollback, "BM25 rollback failed");
            }
            return Err(io_error(&self.dir, &format!("committing: {error}")));
        }
        self.reader
            .reload()
            .map_err(|e| io_error(&self.dir, &format!("reloading the reader: {e}")))
    }

    /// Removes the documents of every source in `source_ids`, adds `chunks` (of those
    /// sources) and commits once with `stamp`: one tantivy commit for a whole batch.
    pub fn replace_sources(
        &mut self,
        source_ids: &[&str],
        chunks: &[&StoredChunk],
        stamp: IndexStamp,
    ) -> Result<(), StoreError> {
        for source_id in source_ids {
            let term = Term::from_field_text(self.source_id, source_id);
            self.writer()?.delete_term(term);
        }
        self.add_chunks(chunks.iter().copied())?;
        self.commit(stamp)
    }

    /// Replaces a source's documents by `chunks` and commits with `stamp`.
    #[cfg(test)]
    pub fn replace_source(
        &mut self,
        source_id: &str,
        chunks: &[StoredChunk],
        stamp: IndexStamp,
    ) -> Result<(), StoreError> {
        let chunks: Vec<&StoredChunk> = chunks.iter().collect();
        self.replace_sources(&[source_id], &chunks, stamp)
    }

    /// Removes a source's documents and commits with `stamp`.
    #[cfg(test)]
    pub fn delete_source(&mut self, source_id: &str, stamp: IndexStamp) -> Result<(), StoreError> {
        self.replace_sources(&[source_id], &[], stamp)
    }

    /// Replaces the whole index by `chunks` and commits with `stamp`.
    pub fn rebuild(&mut self, chunks: &[StoredChunk], stamp: IndexStamp) -> Result<(), StoreError> {
        let dir = self.dir.clone();
        self.writer()?
            .delete_all_documents()
            .map_err(|e| io_error(&dir, &format!("clearing: {e}")))?;
        self.add_chunks(chunks.iter())?;
        self.commit(stamp)
    }

    /// The `limit` best chunk ids for a free-text query, with their BM25 scores (best first,
    /// ties by id). Ids are as indexed: the caller filters them against sled.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<(String, f32)>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut analyzer = self
            .index
            .tokenizer_for_field(self.text)
            .map_err(|e| io_error(&self.dir, &format!("loading the text analyser: {e}")))?;
        let mut terms = BTreeSet::new();
        let mut stream = analyzer.token_stream(query);
        while stream.advance() {
            terms.insert(stream.token().text.clone());
        }
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let clauses: Vec<(Occur, Box<dyn Query>)> = terms
            .into_iter()
            .map(|term| {
                let query: Box<dyn Query> = Box::new(TermQuery::new(
                    Term::from_field_text(self.text, &term),
                    IndexRecordOption::WithFreqs,
                ));
                (Occur::Should, query)
            })
            .collect();
        let searcher = self.reader.searcher();
        let top = searcher
            .search(&BooleanQuery::new(clauses), &TopDocs::with_limit(limit))
            .map_err(|e| io_error(&self.dir, &format!("searching: {e}")))?;
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let document: TantivyDocument = searcher
                .doc(address)
                .map_err(|e| io_error(&self.dir, &format!("reading a hit: {e}")))?;
            if let Some(id) = document.get_first(self.chunk_id).and_then(|v| v.as_str()) {
                hits.push((id.to_string(), score));
            }
        }
        // Equal scores in chunk id order (tantivy orders them by document address, which
        // depends on the order of indexing): the same order as the exact vector scan's and the
        // in-memory store's.
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(hits)
    }

    /// Every indexed chunk id (with repetitions, if any): lets the consistency check compare
    /// the index to sled.
    pub fn all_ids(&self) -> Result<Vec<String>, StoreError> {
        use tantivy::query::AllQuery;
        let searcher = self.reader.searcher();
        let total = searcher.num_docs() as usize;
        if total == 0 {
            return Ok(Vec::new());
        }
        let addresses = searcher
            .search(&AllQuery, &TopDocs::with_limit(total))
            .map_err(|e| io_error(&self.dir, &format!("listing every document: {e}")))?;
        let mut ids = Vec::with_capacity(addresses.len());
        for (_, address) in addresses {
            let document: TantivyDocument = searcher
                .doc(address)
                .map_err(|e| io_error(&self.dir, &format!("reading a document: {e}")))?;
            let id = document
                .get_first(self.chunk_id)
                .and_then(|v| v.as_str())
                .ok_or_else(|| io_error(&self.dir, "a document has no chunk id"))?;
            ids.push(id.to_string());
        }
        Ok(ids)
    }
}

fn io_error(dir: &Path, what: &str) -> StoreError {
    StoreError::Io(format!("BM25 index {}: {what}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(source: &str, id: &str, text: &str) -> StoredChunk {
        StoredChunk {
            id: id.into(),
            source_id: source.into(),
            ordinal: 0,
            text: text.into(),
            start: 0,
            end: text.len(),
            metadata: Default::default(),
            content_hash: id.into(),
            vector: vec![],
        }
    }

    fn stamp(generation: u64) -> IndexStamp {
        IndexStamp {
            incarnation: 5,
            generation,
        }
    }

    #[test]
    fn stems_replaces_by_source_and_persists_its_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bm25");
        {
            let mut index = Bm25Index::open(&path).unwrap();
            assert_eq!(index.stamp().unwrap(), None);
            index
                .replace_source(
                    "a",
                    &[
                        chunk("a", "a0", "The cats were running in the garden"),
                        chunk("a", "a1", "Dogs sleep all day"),
                    ],
                    stamp(1),
                )
                .unwrap();
            index
                .replace_source(
                    "b",
                    &[chunk("b", "b0", "A cat runs; a cat jumps")],
                    stamp(2),
                )
                .unwrap();
            let hits = index.search("Cat RUN!", 10).unwrap();
            let ids: Vec<&str> = hits.iter().map(|(id, _)| id.as_str()).collect();
            assert_eq!(ids, vec!["b0", "a0"], "{hits:?}");
            assert!(hits[0].1 > hits[1].1);

            index
                .replace_source("a", &[chunk("a", "a2", "Birds sing")], stamp(3))
                .unwrap();
            assert_eq!(index.search("cats", 10).unwrap().len(), 1);
            assert_eq!(index.search("birds", 10).unwrap()[0].0, "a2");
            assert!(index.search("?!", 10).unwrap().is_empty());
            index.delete_source("b", stamp(4)).unwrap();
            assert!(index.search("cat", 10).unwrap().is_empty());
        }
        let index = Bm25Index::open(&path).unwrap();
        assert_eq!(index.stamp().unwrap(), Some(stamp(4)));
        assert_eq!(index.all_ids().unwrap(), vec!["a2".to_string()]);
    }

    #[test]
    fn unreadable_index_is_recreated_without_a_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bm25");
        {
            let mut index = Bm25Index::open(&path).unwrap();
            index
                .rebuild(&[chunk("a", "a0", "hello world")], stamp(9))
                .unwrap();
        }
        std::fs::write(path.join("meta.json"), b"{ garbage").unwrap();
        let mut index = Bm25Index::open(&path).unwrap();
        assert_eq!(index.stamp().unwrap(), None);
        assert!(index.all_ids().unwrap().is_empty());
        index
            .rebuild(&[chunk("a", "a0", "hello world")], stamp(9))
            .unwrap();
        assert_eq!(index.search("hello", 5).unwrap()[0].0, "a0");
    }
}
