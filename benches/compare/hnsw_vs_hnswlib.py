#!/usr/bin/env python3
"""HNSW: freshstack (hnsw_rs through `freshstack index --vectors` / `retrieve --ann hnsw`) against
hnswlib on the same vectors and parameters (M 16, ef_construction 200, ef swept).
Prints build time, recall@10 against exact search, and single-threaded queries/s for both.

Vectors: real embeddings with --vectors DOCS.npy --query-vectors QUERIES.npy (as written by
`freshstack embed`, ids in the .ids files next to them), else seeded random unit vectors
(--n, --dim: the hardest case for HNSW). freshstack's queries/s is measured through the CLI:
(time of retrieving all queries - time of retrieving one) / (queries - 1), best of --repeat,
so process start, index open and graph load are not counted.

usage: source ~/.cache/freshstack-refenv/bin/activate
       python benches/compare/hnsw_vs_hnswlib.py [--n 100000] [--dim 384] [--queries 1000]
       python benches/compare/hnsw_vs_hnswlib.py --vectors docs.npy --query-vectors q.npy
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
    ap.add_argument("--efs", default="32,64,128,256", help="search widths to sweep")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--vectors", help="document vectors .npy (real embeddings)")
    ap.add_argument("--query-vectors", help="query vectors .npy (with --vectors)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/freshstack"))
    args = ap.parse_args()
    if args.vectors:
        data = np.load(args.vectors).astype(np.float32)
        queries = np.load(args.query_vectors).astype(np.float32)
        args.n, args.dim = data.shape
        args.queries = len(queries)
        what = f"real embeddings {os.path.basename(args.vectors)}"
    else:
        rng = np.random.default_rng(42)
        data = unit(rng, args.n, args.dim)
        queries = unit(rng, args.queries, args.dim)
        what = "random unit vectors"
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
    efs = [int(e) for e in args.efs.split(",")]
    print(f"{args.n} x {args.dim} {what}, {args.queries} queries, M {args.m}, "
          f"ef_construction {args.ef_construction}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}")

    t0 = time.perf_counter()
    index = hnswlib.Index(space="ip", dim=args.dim)
    index.init_index(max_elements=args.n, ef_construction=args.ef_construction, M=args.m,
                     random_seed=42)
    index.add_items(data, np.arange(args.n))
    lib_build = time.perf_counter() - t0
    index.set_num_threads(1)
    lib = {}
    for ef in efs:
        index.set_ef(max(ef, 10))
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            labels, _ = index.knn_query(queries, k=10, num_threads=1)
            best = min(best, time.perf_counter() - t0)
        recall = np.mean([len(set(labels[i]) & set(truth[i])) / 10
                          for i in range(args.queries)])
        lib[ef] = (args.queries / best, recall)

    index_dir = os.path.join(work, "index")
    build = timed([args.bin, "index", "--corpus", os.path.join(work, "corpus.jsonl"), "--index",
                   index_dir, "--vectors", f"v={os.path.join(work, 'docs.npy')}", "--hnsw-m",
                   str(args.m), "--hnsw-ef-construction", str(args.ef_construction)])
    print(f"build: hnswlib {lib_build:.1f} s, freshstack {build:.1f} s (all cores; freshstack "
          f"incl. process start, corpus read and vector copy)")

    def ours(ann, ef):
        common = [args.bin, "retrieve", "--index", index_dir, "--retriever", "dense", "-k", "10",
                  "--threads", "1", "--field", "text", "--ef-search", str(ef), "--ann", ann,
                  "--query-vectors", f"v={os.path.join(work, 'queries.npy')}"]
        out = os.path.join(work, f"{ann}.trec")
        one = os.path.join(work, "one.jsonl")
        allq = os.path.join(work, "queries.jsonl")
        base = min(timed(common + ["--queries", one, "--out", out]) for _ in range(args.repeat))
        total = min(timed(common + ["--queries", allq, "--out", out])
                    for _ in range(args.repeat))
        run = read_run(out)
        recall = np.mean([len({int(d[1:]) for d in run[q][:10]} & set(truth[i])) / 10
                          for i, q in enumerate(qids)])
        return (args.queries - 1) / max(total - base, 1e-9), recall

    print(f"{'ef':>5} {'hnswlib q/s':>12} {'recall@10':>10} {'freshstack q/s':>15} "
          f"{'recall@10':>10} {'ratio':>6}")
    for ef in efs:
        qps, recall = ours("hnsw", ef)
        lib_qps, lib_recall = lib[ef]
        print(f"{ef:>5} {lib_qps:>12.0f} {lib_recall:>10.4f} {qps:>15.0f} {recall:>10.4f} "
              f"{qps / lib_qps:>6.2f}")
    qps, recall = ours("exact", efs[0])
    print(f"freshstack exact (flat): recall@10 {recall:.4f}, {qps:.0f} queries/s (1 thread)")


if __name__ == "__main__":
    main()
