#!/usr/bin/env python3
"""HNSW: freshstack (hnsw_rs through `freshstack index --vectors` / `retrieve --ann hnsw`) against
hnswlib on the same random unit vectors and parameters (M 16, ef_construction 200, ef 128).
Prints build time, recall@10 against exact search, and single-threaded queries/s for both.

usage: source ~/.cache/freshstack-refenv/env.sh
       python benches/compare/hnsw_vs_hnswlib.py [--n 100000] [--dim 384] [--queries 1000]
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

import hnswlib
import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def timed(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - start


def unit(rng, n, dim):
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def read_run(path):
    run = {}
    for line in open(path):
        qid, _, doc, _rank, _score, _tag = line.split()
        run.setdefault(qid, []).append(doc)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=200)
    ap.add_argument("--ef", type=int, default=128)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/freshstack"))
    args = ap.parse_args()
    rng = np.random.default_rng(42)
    data = unit(rng, args.n, args.dim)
    queries = unit(rng, args.queries, args.dim)
    truth = np.argsort(-(queries @ data.T), axis=1)[:, :10]
    work = tempfile.mkdtemp(prefix="hnswcmp.")
    ids = [f"d{i}" for i in range(args.n)]
    qids = [f"q{i}" for i in range(args.queries)]
    np.save(os.path.join(work, "docs.npy"), data)
    open(os.path.join(work, "docs.ids"), "w").write("\n".join(ids) + "\n")
    np.save(os.path.join(work, "queries.npy"), queries)
    open(os.path.join(work, "queries.ids"), "w").write("\n".join(qids) + "\n")
    with open(os.path.join(work, "corpus.jsonl"), "w") as f:
        for i in ids:
            f.write(json.dumps({"_id": i, "title": "", "text": "x"}) + "\n")
    with open(os.path.join(work, "queries.jsonl"), "w") as f:
        for q in qids:
            f.write(json.dumps({"_id": q, "text": "x"}) + "\n")
    with open(os.path.join(work, "one.jsonl"), "w") as f:
        f.write(json.dumps({"_id": qids[0], "text": "x"}) + "\n")
    print(f"{args.n} x {args.dim} random unit vectors, {args.queries} queries, M {args.m}, "
          f"ef_construction {args.ef_construction}, ef {args.ef}, {os.cpu_count()} cores")

    t0 = time.perf_counter()
    index = hnswlib.Index(space="ip", dim=args.dim)
    index.init_index(max_elements=args.n, ef_construction=args.ef_construction, M=args.m,
                     random_seed=42)
    index.add_items(data, np.arange(args.n))
    lib_build = time.perf_counter() - t0
    index.set_ef(args.ef)
    index.set_num_threads(1)
    t0 = time.perf_counter()
    labels, _ = index.knn_query(queries, k=10, num_threads=1)
    lib_qps = args.queries / (time.perf_counter() - t0)
    lib_recall = np.mean([len(set(labels[i]) & set(truth[i])) / 10 for i in range(args.queries)])
    print(f"hnswlib {hnswlib.__version__ if hasattr(hnswlib, '__version__') else ''}: build "
          f"{lib_build:.1f} s (all cores), recall@10 {lib_recall:.4f}, {lib_qps:.0f} queries/s "
          f"(1 thread)")

    index_dir = os.path.join(work, "index")
    build = timed([args.bin, "index", "--corpus", os.path.join(work, "corpus.jsonl"), "--index",
                   index_dir, "--vectors", f"v={os.path.join(work, 'docs.npy')}", "--hnsw-m",
                   str(args.m), "--hnsw-ef-construction", str(args.ef_construction)])
    common = [args.bin, "retrieve", "--index", index_dir, "--retriever", "dense", "-k", "10",
              "--threads", "1", "--field", "text", "--ef-search", str(args.ef),
              "--query-vectors", f"v={os.path.join(work, 'queries.npy')}"]
    results = {}
    for ann in ["hnsw", "exact"]:
        out = os.path.join(work, f"{ann}.trec")
        base = min(timed(common + ["--ann", ann, "--queries", os.path.join(work, "one.jsonl"),
                                   "--out", out]) for _ in range(2))
        total = timed(common + ["--ann", ann, "--queries", os.path.join(work, "queries.jsonl"),
                                "--out", out])
        run = read_run(out)
        recall = np.mean([len({int(d[1:]) for d in run[q][:10]} & set(truth[i])) / 10
                          for i, q in enumerate(qids)])
        results[ann] = ((args.queries - 1) / max(total - base, 1e-9), recall)
    qps, recall = results["hnsw"]
    print(f"freshstack hnsw: build {build:.1f} s (all cores, incl. corpus read and copy), "
          f"recall@10 {recall:.4f}, {qps:.0f} queries/s (1 thread, {qps / lib_qps:.2f}x hnswlib)")
    print(f"freshstack exact: recall@10 {results['exact'][1]:.4f}, "
          f"{results['exact'][0]:.0f} queries/s (1 thread)")


if __name__ == "__main__":
    main()
