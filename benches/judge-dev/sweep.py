#!/usr/bin/env python3
"""Sweeps the blend and threshold of a `probability` judge over rows already written.

    python3 benches/judge-dev/sweep.py JUDGMENTS.jsonl [LABELS.jsonl]

A `probability` judgment row keeps both of its signals (`probability`, the model's P(yes), and
`term_coverage`), so every (term weight, threshold) can be scored against the reference labels
without a new model call. Prints, per term weight, the ROC AUC of the blended score, the best
Cohen's kappa over thresholds 0.20-0.80 with its threshold and support rate, and the kappa at
0.40; then kappa over a band of thresholds for the model alone and a quarter-terms blend.
LABELS defaults to ../shared/judge-dev/labels.jsonl beside the checkout.

Last, a leave-one-question-out cross-validation of that choice: for each question, the (term
weight, threshold) with the best kappa on the other questions judges the left-out one; the
pooled verdicts' kappa estimates what a choice made on reference labels keeps on questions it
was not chosen on (the held-out topic asks the same across topics).
"""

import json
import sys
from pathlib import Path


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def kappa(predicted, truth):
    n = len(truth)
    agree = sum(p == t for p, t in zip(predicted, truth)) / n
    p_yes, t_yes = sum(predicted) / n, sum(truth) / n
    chance = p_yes * t_yes + (1 - p_yes) * (1 - t_yes)
    return ((agree - chance) / (1 - chance) if chance < 1 else 0.0), p_yes


def roc_auc(scores, truth):
    pos = sorted(s for s, t in zip(scores, truth) if t)
    neg = sorted(s for s, t in zip(scores, truth) if not t)
    wins = 0.0
    for p in pos:
        wins += sum(1.0 if p > q else 0.5 if p == q else 0.0 for q in neg)
    return wins / (len(pos) * len(neg))


def main():
    root = Path(__file__).resolve().parents[2]
    judgments = read_jsonl(sys.argv[1])
    labels_path = sys.argv[2] if len(sys.argv) > 2 else root.parent / "shared/judge-dev/labels.jsonl"
    key = lambda r: (str(r["query_id"]), r["nugget_id"], r["doc_id"])
    labels = {key(r): bool(r["supported"]) for r in read_jsonl(labels_path)}
    rows = [r for r in judgments if key(r) in labels]
    if len(rows) < len(judgments):
        print(f"{len(judgments) - len(rows)} judged pairs have no reference label (left out)")
    truth = [labels[key(r)] for r in rows]
    thresholds = [t / 100 for t in range(20, 81)]

    def blended(weight):
        return [(1 - weight) * r["probability"] + weight * r["term_coverage"] for r in rows]

    for weight in [0.0, 0.25, 0.4, 0.5, 0.6, 0.75, 1.0]:
        scores = blended(weight)
        (best, support), at = max((kappa([s >= t for s in scores], truth), t) for t in thresholds)
        at_40, support_40 = kappa([s >= 0.4 for s in scores], truth)
        print(
            f"term weight {weight:.2f}: AUC {roc_auc(scores, truth):.3f}, best kappa {best:.3f} "
            f"at {at:.2f} (support {support:.3f}); at 0.40 {at_40:.3f} (support {support_40:.3f})"
        )
    for weight in [0.0, 0.25]:
        scores = blended(weight)
        band = " ".join(
            f"{t:.2f}:{kappa([s >= t for s in scores], truth)[0]:.3f}"
            for t in [x / 100 for x in range(40, 76, 3)]
        )
        print(f"term weight {weight:.2f}, kappa by threshold: {band}")
    for name, weights in [
        ("model alone (term weight 0)", [0.0]),
        ("fixed blend (term weight 0.5)", [0.5]),
        ("blend chosen too (term weight 0-1 by 0.05)", [w / 20 for w in range(21)]),
    ]:
        pooled, support, chosen = cross_validate(rows, truth, weights, thresholds)
        picks = ", ".join(f"{q}:{w:.2f}/{t:.2f}" for q, (w, t) in chosen.items())
        print(
            f"leave-one-question-out, {name}: kappa {pooled:.3f} (support {support:.3f}); "
            f"weight/threshold chosen per question: {picks}"
        )


def cross_validate(rows, truth, weights, thresholds):
    """Leave-one-question-out: returns the pooled kappa and support rate of verdicts each made
    with the parameters chosen on the other questions, and the parameters chosen per question."""
    questions = sorted({str(r["query_id"]) for r in rows})
    scores = {
        w: [(1 - w) * r["probability"] + w * r["term_coverage"] for r in rows] for w in weights
    }
    predicted = [False] * len(rows)
    chosen = {}
    for q in questions:
        train = [i for i, r in enumerate(rows) if str(r["query_id"]) != q]
        test = [i for i, r in enumerate(rows) if str(r["query_id"]) == q]
        train_truth = [truth[i] for i in train]
        (_, _), w, t = max(
            (kappa([scores[w][i] >= t for i in train], train_truth), w, t)
            for w in weights
            for t in thresholds
        )
        chosen[q] = (w, t)
        for i in test:
            predicted[i] = scores[w][i] >= t
    pooled, support = kappa(predicted, truth)
    return pooled, support, chosen


if __name__ == "__main__":
    main()
