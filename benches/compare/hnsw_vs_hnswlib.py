#!/usr/bin/env python3
"""HNSW: freshstack (`freshstack index --vectors` / `retrieve --ann hnsw`) against hnswlib on the
same vectors and parameters (M 16, ef_construction 200, ef swept).
Prints build time (all cores) and memory, recall@10 against exact search, and single-threaded
queries/s for both.

Vectors: real embeddings with --vectors DOCS.npy --query-vectors QUERIES.npy (as written by
`freshstack embed`, ids in the .ids files next to them), else seeded random unit vectors
(--n, --dim: the hardest case for HNSW), or with --clustered a seeded Gaussian mixture
(--clusters centres, unit vectors around each; closer to real embeddings than uniform noise).
Memory: hnswlib's is the growth of this process's resident set over the build; freshstack's the
peak RSS of the whole `index` process (GNU time), which also holds the vectors. freshstack's queries/s is measured through the CLI:
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


def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def clustered(rng, n, dim, centres, spread):
    """Unit vectors around `centres` seeded cluster centres (uniform random directions)."""
    c = unit(rng, centres, dim)
    which = rng.integers(0, centres, n)
    x = c[which] + rng.standard_normal((n, dim)).astype(np.float32) * (spread / np.sqrt(dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def timed_rss(cmd):
    """Wall seconds and peak RSS (KiB) of `cmd`, through GNU time."""
    out = tempfile.mktemp(prefix="hnswcmp-time.")
    start = time.perf_counter()
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", out] + cmd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    kb = int(open(out).read().split()[-1])
    os.unlink(out)
    return wall, kb


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
    ap.add_argument("--clustered", action="store_true", help="seeded Gaussian mixture")
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--spread", type=float, default=0.6,
                    help="noise norm around a centre (unit centres)")
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
    elif args.clustered:
        rng = np.random.default_rng(42)
        both = clustered(rng, args.n + args.queries, args.dim, args.clusters, args.spread)
        data, queries = both[:args.n], both[args.n:]
        what = f"clustered unit vectors ({args.clusters} centres, spread {args.spread})"
    else:
        rng = np.random.default_rng(42)
        data = unit(rng, args.n, args.dim)
        queries = unit(rng, args.queries, args.dim)
        what = "random unit vectors"
    scores = queries @ data.T  # (queries x n) float32: 0.4 GB at 1,000 x 100,000
    # The 10th best exact score per query: a returned document counts as a true neighbour when
    # its exact score reaches it (ties, e.g. duplicate chunks, make any tied one correct).
    kth = -np.partition(-scores, 9, axis=1)[:, 9]

    def recall_of(rows):
        return float(np.mean([np.sum(scores[i, list(r)[:10]] >= kth[i] - 1e-6) / 10
                              for i, r in enumerate(rows)]))
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

    before = rss_kb()
    t0 = time.perf_counter()
    index = hnswlib.Index(space="ip", dim=args.dim)
    index.init_index(max_elements=args.n, ef_construction=args.ef_construction, M=args.m,
                     random_seed=42)
    index.add_items(data, np.arange(args.n))
    lib_build = time.perf_counter() - t0
    lib_mib = (rss_kb() - before) / 1024
    index.set_num_threads(1)
    lib = {}
    for ef in efs:
        index.set_ef(max(ef, 10))
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            labels, _ = index.knn_query(queries, k=10, num_threads=1)
            best = min(best, time.perf_counter() - t0)
        lib[ef] = (args.queries / best, recall_of(labels))

    index_dir = os.path.join(work, "index")
    build, peak_kb = timed_rss([args.bin, "index", "--corpus", os.path.join(work, "corpus.jsonl"), "--index",
                   index_dir, "--vectors", f"v={os.path.join(work, 'docs.npy')}", "--hnsw-m",
                   str(args.m), "--hnsw-ef-construction", str(args.ef_construction)])
    graph = os.path.join(index_dir, "dense", "v", "hnsw", "graph.bin")
    graph_mib = os.path.getsize(graph) / 2**20 if os.path.exists(graph) else float("nan")
    print(f"build: hnswlib {lib_build:.1f} s, freshstack {build:.1f} s (ratio "
          f"{build / lib_build:.2f}; all cores; freshstack incl. process start, corpus read and "
          f"vector copy)")
    print(f"memory: hnswlib index {lib_mib:.0f} MiB; freshstack index process peak RSS "
          f"{peak_kb / 1024:.0f} MiB, graph.bin {graph_mib:.1f} MiB")

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
        recall = recall_of([[int(d[1:]) for d in run.get(q, [])] for q in qids])
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
