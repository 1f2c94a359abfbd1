#!/usr/bin/env python3
"""Generate the evaluation parity fixtures under tests/fixtures/eval/.

Randomised cases (ties, close scores that tie as 32-bit floats, missing queries, queries the
judgments do not know, zero-label judged docs, nuggets with no judged document, docs in both the
relevant and non-relevant lists, doc ids with spaces, query ids q1 and q12, duplicate run lines)
are evaluated with the reference evaluator, freshstack==0.0.6, and the inputs plus its outputs are
written as JSON lines, so `cargo test` needs no Python.

The reference's metric functions are called exactly as `EvaluateRetrieval.evaluate` /
`evaluate_custom` call them, with one deliberate difference: nuggets are grouped to queries by
the query that lists them (for a queries.jsonl) or by the qid column (ndeval qrels), not by the
reference's `startswith` prefix match, which gives q12's nuggets to q1. Where the reference
crashes on a query (nuggets without any judged document), that query is removed from the run
before calling it, which is what scoring it 0 means; such cases are flagged.

Usage: source ~/.cache/freshstack-refenv/env.sh && python scripts/gen_eval_fixtures.py
"""
from __future__ import annotations

import json
import os
import random
import sys
import tempfile
from collections import defaultdict

from freshstack.retrieval.metrics import alpha_ndcg, coverage, hole, ndcg, recall
from freshstack.retrieval.util import round_and_log
from freshstack.util import load_runfile

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "eval")
SEED = 20241130
NUM_CASES = 60


def doc_pool(rng: random.Random) -> list[str]:
    docs = [f"owner/repo/src/file{i}.py_{i * 10}_{i * 10 + 9}" for i in range(rng.randint(6, 25))]
    docs += ["my repo/docs/read me.md_0_120", "a b c_1_2"]
    return docs


def make_case(rng: random.Random, index: int) -> dict:
    pool = doc_pool(rng)
    ndeval_format = rng.random() < 0.3
    qids = rng.sample(["q1", "q12", "q2", "123", "77", "a_b", "x9", "q120", "z"], rng.randint(1, 8))
    queries = []  # reference-schema rows
    lines = []  # ndeval lines
    for qid in qids:
        nuggets = []
        all_empty = rng.random() < 0.12
        for n in range(rng.randint(1, 5)):
            rel = [] if all_empty else rng.sample(pool, rng.randint(0, 4))
            non = [] if all_empty else rng.sample(pool, rng.randint(0, 3))
            nuggets.append({"_id": f"{qid}_{n}", "text": f"nugget {n}",
                            "relevant_corpus_ids": rel, "non_relevant_corpus_ids": non})
            if ndeval_format:
                for d in rel:
                    lines.append((qid, f"{qid}_{n}", d, rng.choice([1, 1, 2])))
                for d in non:
                    lines.append((qid, f"{qid}_{n}", d, 0))
        queries.append({"query_id": qid, "query_title": "t", "query_text": "b", "answer_id": "1",
                        "answer_text": "a", "metadata": {"date": None, "tags": []}, "nuggets": nuggets})
    # Judgments as the reference's loader builds them, grouped by the owning query.
    qrels_nuggets: dict[str, dict[str, int]] = {}
    query_to_nuggets: dict[str, list[str]] = {}
    if ndeval_format:
        for qid, nid, d, label in lines:
            qrels_nuggets.setdefault(nid, {})[d] = label
            if nid not in query_to_nuggets.setdefault(qid, []):
                query_to_nuggets[qid].append(nid)
    else:
        for q in queries:
            for nug in q["nuggets"]:
                qrels_nuggets.setdefault(nug["_id"], {})
                for d in nug["relevant_corpus_ids"]:
                    qrels_nuggets[nug["_id"]][d] = 1
                for d in nug["non_relevant_corpus_ids"]:
                    qrels_nuggets[nug["_id"]][d] = 0
                query_to_nuggets.setdefault(q["query_id"], []).append(nug["_id"])
    qrels_query: dict[str, dict[str, int]] = {}
    for qid, nids in query_to_nuggets.items():
        qrels_query[qid] = {}
        for nid in nids:
            for d, s in qrels_nuggets[nid].items():
                qrels_query[qid][d] = qrels_query[qid].get(d, 0) + s

    # The run: some judged queries missing, some unknown ones, ties, near-ties, duplicates.
    run_qids = [q for q in qids if rng.random() < 0.85] + (["unknown"] if rng.random() < 0.3 else [])
    run_qids = run_qids or [qids[0]]
    rng.shuffle(run_qids)
    score_style = rng.choice(["ties", "floats", "near"])
    run_lines = []
    for qid in run_qids:
        candidates = pool + [f"unjudged/doc{i}.md_0_1" for i in range(rng.randint(0, 10))]
        n = rng.randint(1, min(len(candidates), 40))
        for rank, d in enumerate(rng.sample(candidates, n)):
            if score_style == "ties":
                score = rng.choice([3.0, 2.5, 2.0, 1.0, 0.0, -1.0])
            elif score_style == "near":
                score = rng.choice([1.0, 1.0000000001, 1.00000001, 0.5, 0.5000000002])
            else:
                score = round(rng.uniform(-5, 20), rng.choice([2, 6, 12]))
            run_lines.append(f"{qid} Q0 {d} {rank + 1} {score!r} tag")
            if rng.random() < 0.03:
                run_lines.append(f"{qid} Q0 {d} {rank + 1} {score + 1.0!r} tag")
    ks = sorted(rng.sample([1, 3, 5, 10, 20, 30, 50, 100], rng.randint(1, 4)))

    with tempfile.NamedTemporaryFile("w", suffix=".trec", delete=False) as f:
        f.write("\n".join(run_lines) + "\n")
        run_path = f.name
    results = load_runfile(run_path)
    os.unlink(run_path)
    results = {q: results[q] for q in results if q in qrels_query}
    # Queries whose nuggets have no judged document crash pyndeval: score them 0 (drop them).
    unjudged = [q for q in qrels_query if not qrels_query[q]]
    alpha_results = {q: r for q, r in results.items() if q not in unjudged}

    expected: dict[str, float] = {}
    if any(k <= 20 for k in ks) and alpha_results:
        for key, v in round_and_log(alpha_ndcg(qrels_nuggets, query_to_nuggets, alpha_results, ks)).items():
            expected["alpha_ndcg@" + key.split("@")[1]] = v
    elif any(k <= 20 for k in ks):
        for k in ks:
            if k <= 20:
                expected[f"alpha_ndcg@{k}"] = 0.0
    for key, v in round_and_log(coverage(qrels_nuggets, query_to_nuggets, results, ks)).items():
        expected["coverage@" + key.split("@")[1]] = v
    for key, v in round_and_log(recall(qrels_query, results, ks)).items():
        expected["recall@" + key.split("@")[1]] = v
    for key, v in round_and_log(ndcg(qrels_query, results, ks), precision=4).items():
        expected["ndcg@" + key.split("@")[1]] = v
    holes = hole(qrels_query, results, ks) if results else {}
    expected_hole = {q: {"hole@" + key.split("@")[1]: v for key, v in h.items()} for q, h in holes.items()}
    return {
        "name": f"case{index:03d}",
        "k_values": ks,
        "format": "ndeval" if ndeval_format else "queries",
        "queries": queries if not ndeval_format else [],
        "ndeval": "".join(f"{q} {n} {d} {l}\n" for q, n, d, l in lines) if ndeval_format else "",
        "run": "\n".join(run_lines) + "\n",
        "reference_crashes_on": sorted(set(unjudged) & set(results)),
        "expected": expected,
        "expected_hole": expected_hole,
    }


def rounding_cases(rng: random.Random) -> list[list]:
    out = []
    for _ in range(3000):
        nd = rng.choice([4, 5])
        kind = rng.random()
        if kind < 0.4:
            x = rng.random()
        elif kind < 0.7:
            x = rng.randint(0, 10 ** (nd + 1)) / 10 ** (nd + 1)  # near decimal ties
        else:
            x = rng.randint(0, 2 ** 12) / 2 ** rng.randint(6, 12)  # exact binary ties
        out.append([x, nd, round(x, nd)])
    return out


def ttest_cases(rng: random.Random) -> list[dict]:
    from scipy.stats import ttest_rel

    out = []
    for _ in range(20):
        n = rng.randint(3, 60)
        a = [rng.random() for _ in range(n)]
        b = [min(1.0, max(0.0, x + rng.gauss(0.02, 0.1))) for x in a]
        out.append({"a": a, "b": b, "p": float(ttest_rel(a, b).pvalue)})
    return out


def main() -> int:
    rng = random.Random(SEED)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "parity.jsonl"), "w") as f:
        for i in range(NUM_CASES):
            f.write(json.dumps(make_case(rng, i), sort_keys=True) + "\n")
    with open(os.path.join(OUT, "rounding.json"), "w") as f:
        json.dump(rounding_cases(rng), f)
    with open(os.path.join(OUT, "ttest.json"), "w") as f:
        json.dump(ttest_cases(rng), f)
    print(f"wrote {NUM_CASES} cases to {os.path.normpath(OUT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
