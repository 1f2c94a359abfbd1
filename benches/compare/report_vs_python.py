#!/usr/bin/env python3
"""`freshstack report DIR` vs the same report computed in Python with the reference's pieces:
tiktoken for the token counts and the reference evaluator (freshstack==0.0.6,
EvaluateRetrieval) for every pooling run. Each side is timed as a whole process, loading
included, on the same generated dataset: 50,000 corpus rows from 8 repositories, 200 questions
(3 nuggets each, bodies with a fenced code block) and 20 pooling runs of 100 documents per
question. The script also checks that both produce the same numbers.

There is no reference implementation of the statistics (the paper's code does not release one);
the Python side follows our documented rules (query = title + " " + text, code = a fenced block or
an HTML <pre>, relevant = listed relevant and not listed non-relevant). Question ids are
zero-padded so the reference's `startswith` grouping of nuggets does not mix questions.

Usage (from the repository root, after `cargo build --release`):
  source ~/.cache/freshstack-refenv/env.sh
  python benches/compare/report_vs_python.py [--docs 50000] [--questions 200] [--repeat 3]
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

PEER = r"""
import glob, json, os, re, sys
import tiktoken
from freshstack.datasets.util import nuggets_to_query_qrels
from freshstack.retrieval.evaluation import EvaluateRetrieval
from freshstack.util import load_runfile

d = sys.argv[1]
enc = tiktoken.get_encoding("o200k_base")
fence = re.compile(r"^[ \t>]*(```|~~~)", re.M)
pre = re.compile(r"<pre[>\s]", re.I)
code = lambda t: bool(fence.search(t) or pre.search(t))
repos = {}
with open(os.path.join(d, "corpus.jsonl")) as f:
    for line in f:
        if line.strip():
            doc = json.loads(line)
            url = doc["metadata"]["url"]
            repo = "/".join(url.split("/")[3:5])
            repos[repo] = repos.get(repo, 0) + 1
rows = [json.loads(l) for l in open(os.path.join(d, "queries.jsonl")) if l.strip()]
n = len(rows)
qt = sum(len(enc.encode(r["query_title"] + " " + r["query_text"], disallowed_special=())) for r in rows)
at = sum(len(enc.encode(r["answer_text"], disallowed_special=())) for r in rows)
nuggets = sum(len(r["nuggets"]) for r in rows)
per_nugget = per_query = 0
qrels_nuggets = {}
for r in rows:
    rel_q = set()
    for g in r["nuggets"]:
        rel = set(g["relevant_corpus_ids"]) - set(g["non_relevant_corpus_ids"])
        per_nugget += len(rel)
        rel_q |= rel
        qrels_nuggets.setdefault(g["_id"], {})
        for x in g["relevant_corpus_ids"]:
            qrels_nuggets[g["_id"]][x] = 1
        for x in g["non_relevant_corpus_ids"]:
            qrels_nuggets[g["_id"]][x] = 0
    per_query += len(rel_q)
out = {
    "num_docs": sum(repos.values()), "num_repos": len(repos),
    "avg_query_tokens": round(qt / n, 4), "avg_answer_tokens": round(at / n, 4),
    "pct_queries_with_code": round(100 * sum(code(r["query_title"]) or code(r["query_text"]) for r in rows) / n, 4),
    "pct_answers_with_code": round(100 * sum(code(r["answer_text"]) for r in rows) / n, 4),
    "avg_nuggets_per_query": round(nuggets / n, 4),
    "avg_relevant_docs_per_nugget": round(per_nugget / nuggets, 4),
    "avg_relevant_docs_per_query": round(per_query / n, 4),
}
q2n, qq = nuggets_to_query_qrels(qrels_nuggets)
runs = {}
for path in sorted(glob.glob(os.path.join(d, "runs", "*.trec"))):
    res = {q: v for q, v in load_runfile(path).items() if q in q2n}
    a, c, r = EvaluateRetrieval(k_values=[10, 20, 50]).evaluate(qrels_nuggets, q2n, qq, res)
    runs["runs/" + os.path.basename(path)] = [a["alpha-nDCG@10"], c["Coverage@20"], r["Recall@50"]]
out["runs"] = runs
print(json.dumps(out, sort_keys=True))
"""

WORDS = ["route", "the", "middleware", "returns", "a", "collection", "when", "query", "builder",
         "is", "called", "error", "Illuminate\\Support", "->where('id', $id)", "404"]


def prose(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def doc(i: int) -> str:
    return f"owner{i % 8}/repo/src/module{i // 50}/file{i}.py_0_{700 + i % 300}"


def generate(d: str, docs: int, questions: int, seed: int) -> None:
    rng = random.Random(seed)
    with open(os.path.join(d, "corpus.jsonl"), "w") as f:
        for i in range(docs):
            f.write(json.dumps({"_id": doc(i), "title": "", "text": prose(rng, 40), "metadata": {
                "url": f"https://github.com/owner{i % 8}/repo/blob/HEAD/x", "start_byte": 0,
                "end_byte": 700, "commit_id": None}}) + "\n")
    pools = []
    with open(os.path.join(d, "queries.jsonl"), "w") as f:
        for q in range(questions):
            qid = f"q{q:04d}"
            pool = [rng.randrange(docs) for _ in range(30)]
            nuggets = [{"_id": f"{qid}_{n}", "text": prose(rng, 12),
                        "relevant_corpus_ids": [doc(rng.choice(pool)) for _ in range(3)],
                        "non_relevant_corpus_ids": [doc(rng.choice(pool)) for _ in range(5)]}
                       for n in range(3)]
            body = prose(rng, 150)
            if q % 3:
                body += "\n\n```php\n" + prose(rng, 60) + "\n```\n\n" + prose(rng, 80)
            answer = prose(rng, 150) + ("\n<pre><code>x</code></pre>" if q % 2 else "")
            f.write(json.dumps({"query_id": qid, "query_title": prose(rng, 10), "query_text": body,
                                "answer_id": str(q), "answer_text": answer,
                                "metadata": {"date": "2024-10-01", "tags": ["php"]},
                                "nuggets": nuggets}) + "\n")
            pools.append((qid, pool))
    os.makedirs(os.path.join(d, "runs"))
    for t in ["inference.question", "inference.subquestions", "inference.closed_book_answer",
              "oracle.answer", "oracle.nuggets"]:
        for r in ["bm25", "bge-base-en-v1.5", "e5-mistral-7b-instruct", "fusion"]:
            with open(os.path.join(d, "runs", f"{t}.{r}.trec"), "w") as f:
                for qid, pool in pools:
                    for rank in range(100):
                        i = rng.choice(pool) if rank % 7 == 0 else rng.randrange(docs)
                        f.write(f"{qid} Q0 {doc(i)} {rank + 1} {100 - rank - rng.random():.4f} {r}\n")


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
    ap.add_argument("--docs", type=int, default=50_000)
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--binary", default="target/release/freshstack")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp, args.docs, args.questions, args.seed)
        ours = [timed([args.binary, "report", tmp]) for _ in range(args.repeat)]
        peer = [timed([sys.executable, "-c", PEER, tmp]) for _ in range(args.repeat)]
        with open(os.path.join(tmp, "stats.json")) as f:
            stats = json.load(f)["statistics"]
        with open(os.path.join(tmp, "results.json")) as f:
            rows = json.load(f)["rows"]
    expected = json.loads(peer[0][2])
    mismatches = {k: (stats.get(k), v) for k, v in expected.items() if k != "runs" and stats.get(k) != v}
    for row in rows:
        got = [row["alpha_ndcg@10"], row["coverage@20"], row["recall@50"]]
        if expected["runs"].get(row["run"]) != got:
            mismatches[row["run"]] = (got, expected["runs"].get(row["run"]))
    if len(rows) != len(expected["runs"]):
        mismatches["rows"] = (len(rows), len(expected["runs"]))
    w_ours, c_ours = min(t[0] for t in ours), min(t[1] for t in ours)
    w_peer, c_peer = min(t[0] for t in peer), min(t[1] for t in peer)
    print(f"input: {args.docs} docs, {args.questions} questions, {len(rows)} runs of 100 docs per question")
    print(f"freshstack report: best of {args.repeat}: wall {w_ours:.3f} s, cpu {c_ours:.3f} s")
    print(f"python (tiktoken + reference evaluator): best of {args.repeat}: wall {w_peer:.3f} s, cpu {c_peer:.3f} s")
    print(f"ratio: wall {w_peer / w_ours:.1f}x, cpu {c_peer / c_ours:.1f}x")
    print("values: identical" if not mismatches else f"values differ: {mismatches}")
    return 0 if not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
