#!/usr/bin/env python3
"""`freshstack eval` vs the reference evaluator (freshstack==0.0.6), each timed as a whole
process, loading included, on the same generated input: 1,000 questions (5 nuggets each) and a
run of 1,000 documents per question.

Both compute alpha-nDCG, Coverage and Recall at k = 10, 20, 50 (the reference's
EvaluateRetrieval with those k values; ours with `--k 10,20,50`, which adds alpha-nDCG@50, a
value the reference drops). The reference side reads queries.jsonl the way its DataLoader reads
the Hugging Face rows and derives the query qrels with its own `nuggets_to_query_qrels`.
The script also checks that both print the same values.

Usage (from the repository root, after `cargo build --release`):
  source ~/.cache/freshstack-refenv/env.sh
  python benches/compare/eval_vs_reference.py [--questions 1000] [--docs 1000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

REFERENCE = r"""
import json, sys
from freshstack.datasets.util import nuggets_to_query_qrels
from freshstack.retrieval.evaluation import EvaluateRetrieval
from freshstack.util import load_runfile
queries_path, run_path = sys.argv[1], sys.argv[2]
qrels_nuggets = {}
with open(queries_path) as f:
    for line in f:
        row = json.loads(line)
        for nugget in row["nuggets"]:
            nid = str(nugget["_id"])
            qrels_nuggets.setdefault(nid, {})
            for d in nugget["relevant_corpus_ids"]:
                qrels_nuggets[nid][d] = 1
            for d in nugget["non_relevant_corpus_ids"]:
                qrels_nuggets[nid][d] = 0
query_to_nuggets, qrels_query = nuggets_to_query_qrels(qrels_nuggets)
results = load_runfile(run_path)
a, c, r = EvaluateRetrieval(k_values=[10, 20, 50]).evaluate(qrels_nuggets, query_to_nuggets, qrels_query, results)
out = {}
for d in (a, c, r):
    for key, v in d.items():
        name, k = key.split("@")
        out[{"alpha-nDCG": "alpha_ndcg", "Coverage": "coverage", "Recall": "recall"}[name] + "@" + k] = v
print(json.dumps(out))
"""


def generate(dir_: str, questions: int, docs_per_run: int, seed: int) -> tuple[str, str]:
    rng = random.Random(seed)
    corpus = [f"owner/repo/src/module{i // 50}/file{i}.py_{i}_{i + 700}" for i in range(200_000)]
    queries_path = os.path.join(dir_, "queries.jsonl")
    run_path = os.path.join(dir_, "run.trec")
    judged: dict[str, list[str]] = {}
    with open(queries_path, "w") as f:
        for q in range(questions):
            qid = f"q{q:05d}"
            pool = rng.sample(corpus, 40)
            judged[qid] = pool
            nuggets = []
            for n in range(5):
                rel = rng.sample(pool, rng.randint(1, 8))
                non = [d for d in rng.sample(pool, 10) if d not in rel]
                nuggets.append({"_id": f"{qid}_{n}", "text": f"fact {n}", "relevant_corpus_ids": rel,
                                "non_relevant_corpus_ids": non})
            f.write(json.dumps({"query_id": qid, "query_title": "How to", "query_text": "body",
                                "answer_id": str(q), "answer_text": "answer",
                                "metadata": {"date": "2024-10-01", "tags": ["python"]},
                                "nuggets": nuggets}) + "\n")
    with open(run_path, "w") as f:
        for qid, pool in judged.items():
            # Judged documents land in the top 200 (a retriever that is not random), the rest
            # of the ranking is random corpus documents; scores have 2 decimals (some ties).
            docs = [d for d in rng.sample(corpus, docs_per_run) if d not in pool][: docs_per_run - 30]
            for d in rng.sample(pool, 30):
                docs.insert(rng.randrange(0, 200), d)
            scores = sorted((round(rng.uniform(0, 100), 2) for _ in docs), reverse=True)
            for rank, (d, s) in enumerate(zip(docs, scores)):
                f.write(f"{qid} Q0 {d} {rank + 1} {s} bench\n")
    return queries_path, run_path


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """Wall-clock seconds, CPU seconds (user + system, all threads) and stdout of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.stdout


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--binary", default="target/release/freshstack")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        queries, run = generate(tmp, args.questions, args.docs, args.seed)
        ours_cmd = [args.binary, "eval", "--queries", queries, "--run", run, "--k", "10,20,50", "--json"]
        ref_cmd = [sys.executable, "-c", REFERENCE, queries, run]
        ours = [timed(ours_cmd) for _ in range(args.repeat)]
        ref = [timed(ref_cmd) for _ in range(args.repeat)]
    ours_values = json.loads(ours[0][2])
    ref_values = json.loads(ref[0][2])
    mismatches = {k: (ours_values.get(k), v) for k, v in ref_values.items() if ours_values.get(k) != v}
    w_ours, c_ours = min(t[0] for t in ours), min(t[1] for t in ours)
    w_ref, c_ref = min(t[0] for t in ref), min(t[1] for t in ref)
    print(f"input: {args.questions} questions x {args.docs} documents per run, 5 nuggets per question")
    print(f"freshstack eval (release): best of {args.repeat}: wall {w_ours:.3f} s, cpu {c_ours:.3f} s")
    print(f"reference EvaluateRetrieval: best of {args.repeat}: wall {w_ref:.3f} s, cpu {c_ref:.3f} s")
    print(f"ratio: wall {w_ref / w_ours:.1f}x, cpu {c_ref / c_ours:.1f}x")
    print("values: identical" if not mismatches else f"values differ: {mismatches}")
    return 0 if not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
