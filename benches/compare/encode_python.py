#!/usr/bin/env python3
"""freshstack_rs.Encoder vs sentence-transformers in one Python process, on the same texts
(a corpus JSONL's documents, title + " " + text as `freshstack embed` reads them), the same
thread count: docs/s of each (median over rounds, model loading excluded), the ratio, and the
smallest cosine between the two vectors of a text.

Usage (from the repository root; torch on CPU and this package in the same environment):
  python -m venv /tmp/stenv && /tmp/stenv/bin/pip install torch sentence-transformers ./python
  /tmp/stenv/bin/python benches/compare/encode_python.py --corpus corpus.jsonl --limit 532 \
      [--model models/all-MiniLM-L6-v2] [--threads 2] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def document_text(row):
    title, text = row.get("title") or "", row.get("text") or ""
    if title.strip() and text.strip():
        return title + " " + text
    return text if text.strip() else title


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--model", default="models/all-MiniLM-L6-v2")
    parser.add_argument("--limit", type=int, default=532)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=256)
    args = parser.parse_args()
    os.environ.setdefault("RAYON_NUM_THREADS", str(args.threads))

    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    from sentence_transformers import SentenceTransformer

    import freshstack_rs

    with open(args.corpus) as f:
        texts = [document_text(json.loads(line)) for line, _ in zip(f, range(args.limit))]
    ours = freshstack_rs.Encoder(args.model, max_length=args.max_length)
    theirs = SentenceTransformer(args.model, device="cpu")
    theirs.max_seq_length = args.max_length

    def rounds(fn):
        times, out = [], None
        for _ in range(args.rounds):
            started = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - started)
        return statistics.median(times), times, out

    our_s, our_runs, a = rounds(lambda: ours.encode(texts))
    st_s, st_runs, b = rounds(
        lambda: theirs.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    )
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    print(f"{len(texts)} documents, {args.model}, {args.threads} threads, {args.rounds} rounds")
    print(f"freshstack_rs: {len(texts) / our_s:.1f} docs/s (runs {', '.join(f'{t:.2f}' for t in our_runs)} s)")
    print(f"sentence-transformers: {len(texts) / st_s:.1f} docs/s (runs {', '.join(f'{t:.2f}' for t in st_runs)} s)")
    print(f"ratio: {st_s / our_s:.2f}x   min cosine: {cos.min():.6f}")


if __name__ == "__main__":
    main()
