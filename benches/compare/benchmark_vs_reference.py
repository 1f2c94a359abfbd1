#!/usr/bin/env python3
"""`freshstack benchmark` vs the reference evaluator (freshstack==0.0.6 EvaluateRetrieval): runs
our benchmark, then scores every run file it wrote with the reference, on qrels built from the
same Parquet/JSONL question files the way the reference's DataLoader builds them
(`_load_nuggets_and_qrels` + `nuggets_to_query_qrels`), and prints both side by side.

Exits 1 when any value differs. Default input: the test fixture (a tiny dataset in the Hugging
Face cache layout); point --hf-cache / --queries / --corpus / --topic at the real cache to check
the published topics, e.g.
  --hf-cache ~/.cache/huggingface/hub --queries freshstack/queries-oct-2024 \
  --corpus freshstack/corpus-oct-2024 --topic langchain,yolo,laravel,angular,godot

--synthetic N instead writes a synthetic topic (N questions with 4 nuggets, 20 * N documents) in
the hub cache layout with pyarrow (nested nuggets, snappy) and checks that.

Usage (from the repository root, after `cargo build`):
  source ~/.cache/freshstack-refenv/bin/activate
  python benches/compare/benchmark_vs_reference.py [--retriever bm25 --retriever dense:models/all-MiniLM-L6-v2 --fusion]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

FIXTURE = os.path.join("tests", "fixtures", "benchmark", "hf", "hub")

REFERENCE = r"""
import json, sys
from freshstack.datasets.util import nuggets_to_query_qrels
from freshstack.retrieval.evaluation import EvaluateRetrieval
from freshstack.util import load_runfile
rows_path, run_path = sys.argv[1], sys.argv[2]
qrels_nuggets = {}
with open(rows_path) as f:
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
print(json.dumps({"alpha_ndcg@10": a["alpha-nDCG@10"], "coverage@20": c["Coverage@20"], "recall@50": r["Recall@50"]}))
"""


def question_files(spec: str, topic: str, hf_cache: str, split: str) -> list[str]:
    """The files our loader reads for `spec` (a hub id read from the cache, or a local path)."""
    if os.path.exists(spec):
        path = os.path.join(spec, topic) if os.path.isdir(os.path.join(spec, topic)) else spec
        if os.path.isfile(path):
            return [path]
        jsonl = os.path.join(path, "queries.jsonl")
        return [jsonl] if os.path.isfile(jsonl) else sorted(glob.glob(os.path.join(path, "*.parquet")))
    repo, _, config = spec.partition(":")
    config = config or topic
    base = os.path.join(hf_cache, "datasets--" + repo.replace("/", "--"))
    snapshots = sorted(glob.glob(os.path.join(base, "snapshots", "*")))
    main = os.path.join(base, "refs", "main")
    if os.path.isfile(main):
        preferred = os.path.join(base, "snapshots", open(main).read().strip())
        snapshots = [preferred] + [s for s in snapshots if s != preferred]
    for snap in snapshots:
        files = sorted(glob.glob(os.path.join(snap, config, f"{split}-*.parquet")))
        files = files or sorted(glob.glob(os.path.join(snap, config, split, "*.parquet")))
        if files:
            return files
    sys.exit(f"no cached files for {spec} ({config}, {split}) under {base}")


def rows_as_jsonl(files: list[str], out: str) -> None:
    """Question rows (as the reference's load_dataset yields them) to JSONL."""
    import pyarrow.parquet as pq

    with open(out, "w") as f:
        for path in files:
            if path.endswith(".parquet"):
                for row in pq.read_table(path).to_pylist():
                    f.write(json.dumps({"nuggets": row["nuggets"]}) + "\n")
            else:
                with open(path) as src:
                    for line in src:
                        if line.strip():
                            f.write(json.dumps({"nuggets": json.loads(line)["nuggets"]}) + "\n")


def synthetic(hub: str, questions: int, seed: int = 7) -> None:
    """A topic `synthetic` in the hub cache layout: words from a small vocabulary, so BM25 ties
    and partial matches are common; each nugget judges 3 relevant and 2 non-relevant documents."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    vocab = [f"{w}{i}" for w in ("cache", "route", "render", "token", "queue", "model", "event") for i in range(60)]
    ndocs = 20 * questions
    ids = [f"org/repo/src/f{i // 7}.py_{i}_{i + 900}" for i in range(ndocs)]
    rev = "0" * 40
    texts = {d: " ".join(rng.choices(vocab, k=120)) for d in ids}
    queries = []
    for q in range(questions):
        # Ids of one width, like Stack Overflow's: the reference groups nuggets to questions by
        # prefix (`q1` would also collect `q12_0`), a bug we do not copy.
        qid = str(78_000_000 + q)
        words = rng.choices(vocab, k=200)
        nuggets = []
        for n in range(4):
            rel = rng.sample(ids, 3)
            for d in rel:
                # Relevant documents share some of the question's words, so retrieval finds
                # some of them and the metrics are far from 0.
                texts[d] += " " + " ".join(rng.sample(words, 25))
            nuggets.append({"_id": f"{qid}_{n}", "text": "n", "relevant_corpus_ids": rel,
                            "non_relevant_corpus_ids": rng.sample(ids, 2)})
        queries.append({"query_id": qid, "query_title": " ".join(rng.choices(words, k=6)),
                        "query_text": " ".join(words), "answer_id": qid, "answer_text": "a",
                        "metadata": {"date": "2024-10-01", "tags": ["t"]}, "nuggets": nuggets})
    for repo, split, rows in (
        ("freshstack/corpus-synthetic", "train",
         [{"_id": d, "title": "", "text": texts[d],
           "metadata": {"url": "u", "start_byte": 0, "end_byte": 900, "commit_id": "c"}} for d in ids]),
        ("freshstack/queries-synthetic", "test", queries),
    ):
        base = os.path.join(hub, "datasets--" + repo.replace("/", "--"))
        os.makedirs(os.path.join(base, "refs"), exist_ok=True)
        open(os.path.join(base, "refs", "main"), "w").write(rev)
        target = os.path.join(base, "snapshots", rev, "synthetic")
        os.makedirs(target, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), os.path.join(target, f"{split}-00000-of-00001.parquet"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="target/debug/freshstack")
    ap.add_argument("--hf-cache", default=FIXTURE)
    ap.add_argument("--queries", default="freshstack/queries-tiny")
    ap.add_argument("--corpus", default="freshstack/corpus-tiny")
    ap.add_argument("--topic", default="tiny")
    ap.add_argument("--retriever", action="append", default=None)
    ap.add_argument("--fusion", action="store_true")
    ap.add_argument("-k", type=int, default=100)
    ap.add_argument("--synthetic", type=int, default=0, metavar="N", help="check a synthetic topic of N questions")
    ap.add_argument("--out", default=None, help="keep the benchmark output here (default: a temp dir)")
    args = ap.parse_args()
    retrievers = args.retriever or ["bm25"]
    with tempfile.TemporaryDirectory() as tmp:
        if args.synthetic:
            args.hf_cache = os.path.join(tmp, "hub")
            synthetic(args.hf_cache, args.synthetic)
            args.queries, args.corpus, args.topic = (
                "freshstack/queries-synthetic", "freshstack/corpus-synthetic", "synthetic")
        out = args.out or os.path.join(tmp, "out")
        cmd = [args.binary, "benchmark", "--queries", args.queries, "--corpus", args.corpus,
               "--topic", args.topic, "--hf-cache", args.hf_cache, "--out", out, "-k", str(args.k)]
        for r in retrievers:
            cmd += ["--retriever", r]
        if args.fusion:
            cmd.append("--fusion")
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        ours_seconds = time.perf_counter() - start
        results = json.load(open(os.path.join(out, "results.json")))
        mismatches = 0
        ref_seconds = 0.0
        print(f"{'topic':<12} {'retriever':<28} {'measure':<14} {'ours':>8} {'reference':>10}")
        for topic in results["topics"]:
            rows = os.path.join(tmp, f"{topic['name']}.rows.jsonl")
            rows_as_jsonl(question_files(args.queries, topic["name"], args.hf_cache, "test"), rows)
            for result in results["results"]:
                if result["topic"] != topic["name"]:
                    continue
                run = os.path.join(out, result["run_file"])
                start = time.perf_counter()
                ref = json.loads(subprocess.run([sys.executable, "-c", REFERENCE, rows, run], check=True,
                                                capture_output=True, text=True).stdout.strip().splitlines()[-1])
                ref_seconds += time.perf_counter() - start
                for measure, value in result["metrics"]:
                    same = ref[measure] == value
                    mismatches += not same
                    print(f"{topic['name']:<12} {result['retriever']:<28} {measure:<14} {value:>8.4f} "
                          f"{ref[measure]:>10.4f}{'' if same else '  DIFFERENT'}")
    print(f"freshstack benchmark (load, index, retrieve, evaluate): {ours_seconds:.2f} s; "
          f"reference evaluation of the same runs: {ref_seconds:.2f} s")
    print("values: identical" if not mismatches else f"values: {mismatches} differ")
    return 0 if not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
