#!/usr/bin/env python3
"""THE PEER (not Orkeon): a plain Python onnxruntime loop, the baseline of `benches/vs_python.rs`.

It does only what a user could script in a few lines: embed every document whole with the same
model file Orkeon uses (onnxruntime from the same wheel, `tokenizers` for the model's own
`tokenizer.json`), and answer queries by encoding them and scanning every document vector.

Embedding: 1 session with `--threads` intra-op threads (default 2), texts tokenised (special
tokens, truncated to 512), sorted by length, cut into batches, each padded to its longest
member; [CLS] pooling, L2 normalisation, output back in input order. Timed per batch size from
the first tokenisation to the last vector (session creation excluded); the best is reported.

Queries: one at a time, each with bge's query prefix, a batch of one, then an exact dot-product
scan over the document matrix and the top `--top-n`. p50/p95 over the queries after warm-up.

Prints one JSON object on stdout. Needs `onnxruntime` and `tokenizers`
(`python3 -m pip install onnxruntime==1.31.1 tokenizers`).
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

QUERY_PREFIX = "Represent this sentence for searching relevant passages: "
MAX_TOKENS = 512


def percentile(samples, q):
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))
    return ordered[index]


def load(model_dir, threads):
    tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(MAX_TOKENS)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        os.path.join(model_dir, "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    return tokenizer, session


def run_batch(session, input_names, encodings):
    cols = max(len(e.ids) for e in encodings)
    rows = len(encodings)
    ids = np.zeros((rows, cols), dtype=np.int64)
    mask = np.zeros((rows, cols), dtype=np.int64)
    types = np.zeros((rows, cols), dtype=np.int64)
    for r, e in enumerate(encodings):
        n = len(e.ids)
        ids[r, :n] = e.ids
        mask[r, :n] = 1
        types[r, :n] = e.type_ids
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    out = session.run(None, {k: v for k, v in feeds.items() if k in input_names})[0]
    cls = out[:, 0, :]
    return cls / np.linalg.norm(cls, axis=1, keepdims=True)


def embed(tokenizer, session, texts, batch_size):
    input_names = {i.name for i in session.get_inputs()}
    started = time.perf_counter()
    encodings = tokenizer.encode_batch(texts)
    order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
    vectors = [None] * len(texts)
    for first in range(0, len(order), batch_size):
        members = order[first:first + batch_size]
        out = run_batch(session, input_names, [encodings[i] for i in members])
        for i, v in zip(members, out):
            vectors[i] = v
    elapsed = time.perf_counter() - started
    tokens = sum(len(e.ids) for e in encodings)
    return np.stack(vectors), elapsed, tokens


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--corpus", required=True, help="folder of .txt documents")
    parser.add_argument("--queries", required=True, help="file with one query per line")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", default="2,32")
    parser.add_argument("--top-n", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()

    names = sorted(n for n in os.listdir(args.corpus) if n.endswith(".txt"))
    texts = []
    for name in names:
        with open(os.path.join(args.corpus, name), encoding="utf-8") as f:
            texts.append(f.read())
    with open(args.queries, encoding="utf-8") as f:
        queries = [line.strip() for line in f if line.strip()]

    load_started = time.perf_counter()
    tokenizer, session = load(args.model_dir, args.threads)
    load_s = time.perf_counter() - load_started

    runs = []
    matrix = None
    for batch in [int(b) for b in args.batches.split(",") if b.strip()]:
        vectors, seconds, tokens = embed(tokenizer, session, texts, batch)
        runs.append({"batch_size": batch, "seconds": round(seconds, 3)})
        matrix = vectors
        print(f"peer: batch {batch}: {seconds:.2f} s", file=sys.stderr)
    best = min(runs, key=lambda r: r["seconds"])

    input_names = {i.name for i in session.get_inputs()}
    encode_ms, search_ms, total_ms = [], [], []
    for round_index, query in enumerate(queries[: args.warmup] + queries):
        started = time.perf_counter()
        encoding = tokenizer.encode(QUERY_PREFIX + query)
        vector = run_batch(session, input_names, [encoding])[0]
        encoded = time.perf_counter()
        scores = matrix @ vector
        top = np.argpartition(-scores, min(args.top_n, len(scores) - 1))[: args.top_n]
        top = top[np.argsort(-scores[top])]
        _ = [names[i] for i in top]
        done = time.perf_counter()
        if round_index >= args.warmup:
            encode_ms.append((encoded - started) * 1e3)
            search_ms.append((done - encoded) * 1e3)
            total_ms.append((done - started) * 1e3)

    print(
        json.dumps(
            {
                "label": "PEER: plain Python onnxruntime loop (benches/peer/embed_peer.py), not Orkeon",
                "onnxruntime": ort.__version__,
                "threads": args.threads,
                "documents": len(texts),
                "tokens": tokens,
                "load_s": round(load_s, 3),
                "embed_runs": runs,
                "embed_best_s": best["seconds"],
                "embed_best_batch": best["batch_size"],
                "queries": len(total_ms),
                "query_p50_ms": round(statistics.median(total_ms), 3),
                "query_p95_ms": round(percentile(total_ms, 0.95), 3),
                "query_encode_p50_ms": round(statistics.median(encode_ms), 3),
                "query_search_p50_ms": round(statistics.median(search_ms), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
