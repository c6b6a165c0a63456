//! A small pool of ONNX Runtime sessions of one model, each owned by a dedicated worker
//! thread (`Session::run` takes `&mut self` and blocks). Padded batches go in through a shared
//! queue; each comes back as the selected output tensor through a oneshot channel, so async
//! callers never block the executor. Counts inputs, batches and the nanoseconds spent inside
//! `Session::run`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Instant;

use ort::session::Session;
use ort::value::{Tensor, ValueType};

use super::tokenizer::TokenSequence;
use super::{EmbedCounters, EmbedError, EmbedStats};
use crate::settings::EmbeddingSettings;

/// Token sequences padded to the longest of the batch (id 0, mask 0, token type 0), row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PaddedBatch {
    pub rows: usize,
    pub cols: usize,
    pub ids: Vec<i64>,
    pub mask: Vec<i64>,
    pub type_ids: Vec<i64>,
}

impl PaddedBatch {
    /// Pads `sequences` to the longest of them.
    pub fn pad(sequences: &[&TokenSequence]) -> Self {
        let rows = sequences.len();
        let cols = sequences.iter().map(|s| s.len()).max().unwrap_or(0);
        let mut ids = vec![0i64; rows * cols];
        let mut mask = vec![0i64; rows * cols];
        let mut type_ids = vec![0i64; rows * cols];
        for (row, sequence) in sequences.iter().enumerate() {
            let base = row * cols;
            ids[base..base + sequence.len()].copy_from_slice(&sequence.ids);
            type_ids[base..base + sequence.len()].copy_from_slice(&sequence.type_ids);
            mask[base..base + sequence.len()].fill(1);
        }
        Self {
            rows,
            cols,
            ids,
            mask,
            type_ids,
        }
    }
}

/// Groups indices of `lengths` into batches of at most `batch_size`, shortest inputs first, so
/// each batch pads as little as possible.
pub(crate) fn length_sorted_batches(lengths: &[usize], batch_size: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    order
        .chunks(batch_size.max(1))
        .map(<[usize]>::to_vec)
        .collect()
}

/// The output tensor a batch produced, copied out of the session.
#[derive(Debug, Clone)]
pub(crate) struct BatchOutput {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// Which graph input receives which part of a [`PaddedBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InputRole {
    Ids,
    Mask,
    TypeIds,
}

struct Job {
    batch: PaddedBatch,
    reply: tokio::sync::oneshot::Sender<Result<BatchOutput, EmbedError>>,
}

/// The graph a pool loads: a model file as it is, or a graph rewritten from one.
pub(crate) enum ModelGraph {
    File(PathBuf),
    Rewritten { from: PathBuf, bytes: Vec<u8> },
}

impl ModelGraph {
    /// The model file, for messages.
    pub(crate) fn path(&self) -> &Path {
        match self {
            Self::File(path) | Self::Rewritten { from: path, .. } => path,
        }
    }
}

/// Sessions of one model on worker threads.
pub(crate) struct SessionPool {
    sender: Option<mpsc::Sender<Job>>,
    workers: Vec<JoinHandle<()>>,
    counters: Arc<EmbedCounters>,
    /// Declared shape of the output returned for every batch (`-1` for dynamic dimensions).
    pub output_shape: Vec<i64>,
}

impl SessionPool {
    /// Loads `graph` once per worker. Workers × `threads` intra-op threads stay within the
    /// machine's cores (at least one worker). `settings` locate ONNX Runtime.
    /// `preferred_outputs` picks the output by name (first match), else the graph's first
    /// output is used. `disabled_optimizers` names ONNX Runtime graph optimisations to leave
    /// out (`;`-separated; empty: none).
    pub fn load(
        graph: &ModelGraph,
        settings: &EmbeddingSettings,
        threads: usize,
        preferred_outputs: &[&str],
        disabled_optimizers: &str,
    ) -> Result<Self, EmbedError> {
        let (_, env) = super::runtime::environment(settings)?;
        let model = graph.path();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = threads.clamp(1, cores);
        let worker_count = (cores / threads).max(1);
        let load_failed = |e: &dyn std::fmt::Display| {
            EmbedError::Setup(format!("cannot load ONNX model {}: {e}", model.display()))
        };
        let load_one = || {
            let mut builder = Session::builder(&env)
                .map_err(|e| load_failed(&e))?
                .with_intra_threads(threads)
                .map_err(|e| load_failed(&e))?
                .with_inter_threads(1)
                .map_err(|e| load_failed(&e))?;
            if !disabled_optimizers.is_empty() {
                builder = builder
                    .with_disabled_optimizers(disabled_optimizers)
                    .map_err(|e| load_failed(&e))?;
            }
            match graph {
                ModelGraph::File(path) => builder.commit_from_file(path),
                ModelGraph::Rewritten { bytes, .. } => builder.commit_from_memory(bytes),
            }
            .map_err(|e| load_failed(&e))
        };
        // The sessions load side by side (graph optimisation is single-threaded): a cold
        // ingestion waits for one load, not one per worker.
        let sessions: Vec<Session> = std::thread::scope(|scope| {
            let loading: Vec<_> = (0..worker_count).map(|_| scope.spawn(load_one)).collect();
            loading
                .into_iter()
                .map(|handle| {
                    handle.join().unwrap_or_else(|_| {
                        Err(EmbedError::Setup(format!(
                            "loading ONNX model {} panicked",
                            model.display()
                        )))
                    })
                })
                .collect::<Result<_, _>>()
        })?;
        // worker_count >= 1, so there is a first session.
        let first = &sessions[0];
        let mut roles = Vec::new();
        for input in first.inputs() {
            let role = match input.name() {
                "input_ids" => InputRole::Ids,
                "attention_mask" => InputRole::Mask,
                "token_type_ids" => InputRole::TypeIds,
                other => {
                    return Err(EmbedError::Setup(format!(
                        "ONNX model {} has an input {other:?} this program cannot feed (known: \
                         input_ids, attention_mask, token_type_ids)",
                        model.display()
                    )));
                }
            };
            roles.push((input.name().to_string(), role));
        }
        if !roles.iter().any(|(_, r)| *r == InputRole::Ids) {
            return Err(EmbedError::Setup(format!(
                "ONNX model {} has no input_ids input",
                model.display()
            )));
        }
        let outputs = first.outputs();
        let output = preferred_outputs
            .iter()
            .find_map(|wanted| outputs.iter().find(|o| o.name() == *wanted))
            .or_else(|| outputs.first())
            .ok_or_else(|| {
                EmbedError::Setup(format!("ONNX model {} has no output", model.display()))
            })?;
        let output_name = output.name().to_string();
        let output_shape: Vec<i64> = match output.dtype() {
            ValueType::Tensor { shape, .. } => shape.iter().copied().collect(),
            other => {
                return Err(EmbedError::Setup(format!(
                    "ONNX model {}: output {output_name} is not a tensor ({other:?})",
                    model.display()
                )));
            }
        };
        tracing::info!(
            model = %model.display(),
            workers = worker_count,
            intra_threads = threads,
            output = %output_name,
            "ONNX sessions ready"
        );
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        let counters = Arc::new(EmbedCounters::default());
        let mut workers = Vec::with_capacity(worker_count);
        for (index, session) in sessions.into_iter().enumerate() {
            let receiver = Arc::clone(&receiver);
            let counters = Arc::clone(&counters);
            let roles = roles.clone();
            let output_name = output_name.clone();
            let handle = std::thread::Builder::new()
                .name(format!("onnx-worker-{index}"))
                .spawn(move || worker_loop(session, &receiver, &roles, &output_name, &counters))
                .map_err(|e| {
                    EmbedError::Setup(format!("cannot start an ONNX worker thread: {e}"))
                })?;
            workers.push(handle);
        }
        Ok(Self {
            sender: Some(sender),
            workers,
            counters,
            output_shape,
        })
    }

    /// Queues one batch for the next free worker at once; the returned future yields its output.
    /// Submitting every batch before awaiting any keeps all workers busy.
    pub fn submit(
        &self,
        batch: PaddedBatch,
    ) -> Result<impl Future<Output = Result<BatchOutput, EmbedError>> + use<>, EmbedError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.sender
            .as_ref()
            .ok_or_else(|| EmbedError::Inference("the ONNX workers are shut down".into()))?
            .send(Job { batch, reply })
            .map_err(|_| EmbedError::Inference("the ONNX workers have stopped".into()))?;
        Ok(async move {
            answer.await.map_err(|_| {
                EmbedError::Inference("an ONNX worker stopped before answering".into())
            })?
        })
    }

    /// Cumulative counters.
    pub fn stats(&self) -> EmbedStats {
        self.counters.stats()
    }
}

impl Drop for SessionPool {
    fn drop(&mut self) {
        // Closing the queue ends every worker loop.
        self.sender.take();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

fn worker_loop(
    mut session: Session,
    receiver: &Mutex<mpsc::Receiver<Job>>,
    roles: &[(String, InputRole)],
    output_name: &str,
    counters: &EmbedCounters,
) {
    loop {
        let job = {
            let Ok(guard) = receiver.lock() else { return };
            match guard.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        let rows = job.batch.rows;
        let result = run_batch(&mut session, job.batch, roles, output_name, counters);
        if result.is_ok() {
            counters.add_batch(rows);
        }
        let _ = job.reply.send(result);
    }
}

fn run_batch(
    session: &mut Session,
    batch: PaddedBatch,
    roles: &[(String, InputRole)],
    output_name: &str,
    counters: &EmbedCounters,
) -> Result<BatchOutput, EmbedError> {
    let failed = |e: &dyn std::fmt::Display| EmbedError::Inference(format!("ONNX Runtime: {e}"));
    let shape = [batch.rows, batch.cols];
    let PaddedBatch {
        ids,
        mask,
        type_ids,
        ..
    } = batch;
    let mut parts = [Some(ids), Some(mask), Some(type_ids)];
    let mut inputs = Vec::with_capacity(roles.len());
    for (name, role) in roles {
        let slot = match role {
            InputRole::Ids => 0,
            InputRole::Mask => 1,
            InputRole::TypeIds => 2,
        };
        let data = parts[slot].take().ok_or_else(|| {
            EmbedError::Inference(format!("the model declares input {name} twice"))
        })?;
        let tensor = Tensor::from_array((shape, data)).map_err(|e| failed(&e))?;
        inputs.push((name.clone(), tensor));
    }
    let started = Instant::now();
    let outputs = session.run(inputs).map_err(|e| failed(&e))?;
    counters.add_inference(started.elapsed());
    let value = outputs
        .get(output_name)
        .ok_or_else(|| EmbedError::Inference(format!("the model returned no {output_name}")))?;
    let (out_shape, data) = value.try_extract_tensor::<f32>().map_err(|e| failed(&e))?;
    Ok(BatchOutput {
        shape: out_shape
            .iter()
            .map(|&d| usize::try_from(d).unwrap_or(0))
            .collect(),
        data: data.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_to_the_longest_with_zero_mask() {
        let a = TokenSequence {
            ids: vec![101, 5, 102],
            type_ids: vec![0, 0, 0],
        };
        let b = TokenSequence {
            ids: vec![101, 102],
            type_ids: vec![0, 1],
        };
        let batch = PaddedBatch::pad(&[&a, &b]);
        assert_eq!((batch.rows, batch.cols), (2, 3));
        assert_eq!(batch.ids, vec![101, 5, 102, 101, 102, 0]);
        assert_eq!(batch.mask, vec![1, 1, 1, 1, 1, 0]);
        assert_eq!(batch.type_ids, vec![0, 0, 0, 0, 1, 0]);
    }

    #[test]
    fn batches_are_formed_from_length_sorted_inputs() {
        let batches = length_sorted_batches(&[9, 2, 7, 3, 5], 2);
        assert_eq!(batches, vec![vec![1, 3], vec![4, 2], vec![0]]);
        assert_eq!(length_sorted_batches(&[], 4), Vec::<Vec<usize>>::new());
        assert_eq!(length_sorted_batches(&[1, 1], 0), vec![vec![0], vec![1]]);
    }
}
