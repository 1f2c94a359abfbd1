#!/usr/bin/env python3
"""BM25: freshstack (tantivy + own scorer) against bm25s on the same corpus and queries.

Builds the PHP manual corpus with `freshstack corpus` (from ../shared/corpora/php-doc-en.tar.gz),
samples long queries (350-500 whitespace tokens of manual text with code, like FreshStack
questions, seeded), then for each side: index build time, queries/s single-threaded, and the
top-10 overlap between the two runs. bm25s: method "lucene", k1 0.9, b 0.4, English stop words,
PyStemmer English. Ours runs twice: `--analyzer plain` (bm25s's tokenization: like for like) and
the default `--analyzer code`.

usage: source ~/.cache/freshstack-refenv/env.sh
       python benches/compare/bm25_vs_bm25s.py [--queries 200] [--bin target/release/freshstack]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import time

import bm25s
import Stemmer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - start


def read_run(path, k=10):
    runs = {}
    with open(path) as f:
        for line in f:
            qid, _, doc, rank, _score, _tag = line.split()
            if int(rank) <= k:
                runs.setdefault(qid, []).append(doc)
    return runs


def overlap(a, b, k=10):
    vals = [len(set(a.get(q, [])[:k]) & set(b.get(q, [])[:k])) / k for q in b]
    return sum(vals) / max(len(vals), 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/freshstack"))
    ap.add_argument("--archive", default=os.path.join(ROOT, "../shared/corpora/php-doc-en.tar.gz"))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bm25cmp.")
    with tarfile.open(args.archive) as tar:
        tar.extractall(work, filter="data")
    tree = os.path.join(work, "php-doc-en")
    corpus = os.path.join(work, "corpus.jsonl")
    run([args.bin, "corpus", "--repo", f"php/doc-en={tree}", "--out", corpus])
    docs = [json.loads(line) for line in open(corpus)]
    ids = [d["_id"] for d in docs]
    texts = [(d["title"] + "\n" + d["text"]) if d["title"] else d["text"] for d in docs]

    rng = random.Random(42)
    queries = []
    long_docs = [t for t in texts if len(t.split()) >= 350]
    for i in range(args.queries):
        words = rng.choice(long_docs).split()
        n = rng.randint(350, min(500, len(words)))
        start = rng.randint(0, len(words) - n)
        queries.append({"_id": f"q{i}", "text": " ".join(words[start:start + n])})
    qfile = os.path.join(work, "queries.jsonl")
    with open(qfile, "w") as f:
        for q in queries:
            f.write(json.dumps(q) + "\n")
    print(f"corpus: {len(docs)} documents; {len(queries)} queries of 350-500 words")

    # bm25s
    stemmer = Stemmer.Stemmer("english")
    t0 = time.perf_counter()
    corpus_tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
    retriever = bm25s.BM25(method="lucene", k1=0.9, b=0.4)
    retriever.index(corpus_tokens, show_progress=False)
    bm25s_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    q_tokens = bm25s.tokenize([q["text"] for q in queries], stopwords="en", stemmer=stemmer,
                              show_progress=False)
    results, _scores = retriever.retrieve(q_tokens, k=10, n_threads=1, show_progress=False)
    bm25s_query = time.perf_counter() - t0
    bm25s_run = {q["_id"]: [ids[j] for j in results[i]] for i, q in enumerate(queries)}
    print(f"bm25s {bm25s.__version__}: build {bm25s_build:.2f} s, "
          f"{len(queries) / bm25s_query:.1f} queries/s (1 thread)")

    for analyzer in ["plain", "code"]:
        index = os.path.join(work, f"index-{analyzer}")
        build = run([args.bin, "index", "--corpus", corpus, "--index", index, "--bm25",
                     "--analyzer", analyzer])
        out = os.path.join(work, f"{analyzer}.trec")
        # Time the batch minus the engine open (measured on a one-query run).
        one = os.path.join(work, "one.jsonl")
        with open(one, "w") as f:
            f.write(json.dumps(queries[0]) + "\n")
        base = min(run([args.bin, "retrieve", "--index", index, "--queries", one, "--out", out,
                        "-k", "10", "--threads", "1", "--field", "text"]) for _ in range(3))
        total = run([args.bin, "retrieve", "--index", index, "--queries", qfile, "--out", out,
                     "-k", "10", "--threads", "1", "--field", "text"])
        qps = (len(queries) - 1) / max(total - base, 1e-9)
        ours = read_run(out)
        print(f"freshstack --analyzer {analyzer}: build {build:.2f} s ({bm25s_build / build:.1f}x "
              f"bm25s), {qps:.1f} queries/s (1 thread, {qps * bm25s_query / len(queries):.1f}x "
              f"bm25s), top-10 overlap with bm25s {overlap(ours, bm25s_run):.3f}")


if __name__ == "__main__":
    sys.exit(main())
