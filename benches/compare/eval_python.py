#!/usr/bin/env python3
"""freshstack_rs.EvaluateRetrieval vs the reference's EvaluateRetrieval (freshstack==0.0.6), in
one Python process, dicts in and out: 1,000 questions (up to 5 nuggets each) and a run of 1,000
documents per question, k = 10, 20, 50. Prints each side's median seconds over the repeats,
the ratio, and whether every value is equal.

Usage (from the repository root): the package built in release, e.g.
  python -m venv /tmp/fsenv && /tmp/fsenv/bin/pip install ./python numpy pyndeval \
      pytrec-eval-terrier tqdm && /tmp/fsenv/bin/pip install --no-deps freshstack==0.0.6
  /tmp/fsenv/bin/python benches/compare/eval_python.py [--questions 1000] [--docs 1000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import random
import statistics
import time


def generated(questions: int, docs: int, seed: int = 11):
    rng = random.Random(seed)
    qrels_nuggets, query_to_nuggets, qrels_query, results = {}, {}, {}, {}
    for q in range(questions):
        qid = f"{70000000 + q}"
        pool = [f"owner/repo/src/file{rng.randrange(50000)}.py_{rng.randrange(9999)}_{rng.randrange(9999)}" for _ in range(docs)]
        ids = []
        for n in range(rng.randint(1, 5)):
            nid = f"{qid}_{n}"
            ids.append(nid)
            supported = rng.sample(pool[:200], rng.randint(1, 8))
            qrels_nuggets[nid] = {d: 1 for d in supported}
            for d in supported:
                qrels_query.setdefault(qid, {})[d] = 1
        query_to_nuggets[qid] = ids
        results[qid] = {d: round(rng.random(), 4) for d in pool}
    return qrels_nuggets, query_to_nuggets, qrels_query, results


def timed(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), times, out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import logging

    logging.disable(logging.INFO)
    import freshstack_rs
    from freshstack.retrieval.evaluation import EvaluateRetrieval as Reference

    data = generated(args.questions, args.docs)
    k = [10, 20, 50]
    kw = dict(qrels_nuggets=data[0], query_to_nuggets=data[1], qrels_query=data[2], results=data[3])
    ours_s, ours_runs, ours = timed(lambda: freshstack_rs.EvaluateRetrieval(k_values=k).evaluate(**kw), args.repeat)
    ref_s, ref_runs, ref = timed(lambda: Reference(k_values=k).evaluate(**kw), args.repeat)
    equal = all(list(a) == list(b) and all(a[key] == b[key] for key in b) for a, b in zip(ours, ref))
    print(f"{args.questions} questions x {args.docs} documents, k = {k}, {args.repeat} repeats")
    print(f"freshstack_rs: {ours_s:.3f} s (runs {', '.join(f'{t:.3f}' for t in ours_runs)})")
    print(f"reference:     {ref_s:.3f} s (runs {', '.join(f'{t:.3f}' for t in ref_runs)})")
    print(f"ratio: {ref_s / ours_s:.1f}x   equal values: {equal}")
    for a in ours:
        print("  ", a)
    if not equal:
        for a, b in zip(ours, ref):
            print("  ours", a, "\n  ref ", b)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
