"""EvaluateRetrieval against the reference package itself (freshstack==0.0.6 with pyndeval and
pytrec_eval), on generated questions, nuggets and runs: the same keys and values."""
from __future__ import annotations

import math
import random

import pytest

import freshstack_rs as fs


def generated(questions=60, nuggets=4, docs=120, seed=7):
    rng = random.Random(seed)
    qrels_nuggets, query_to_nuggets, qrels_query, results = {}, {}, {}, {}
    for q in range(questions):
        qid = f"q{q}"
        pool = [f"d{rng.randrange(docs * 3)}" for _ in range(docs)]
        ids = []
        for n in range(rng.randint(1, nuggets)):
            nid = f"{qid}_{n}"
            ids.append(nid)
            supported = rng.sample(pool, rng.randint(1, 6))
            qrels_nuggets[nid] = {d: 1 for d in supported}
            for d in supported:
                qrels_query.setdefault(qid, {})[d] = 1
        query_to_nuggets[qid] = ids
        # Scores with ties (rounded), as real fused runs have.
        results[qid] = {d: round(rng.random(), 2) for d in pool}
    # A run question the qrels do not know: ignored by both.
    results["unknown"] = {"d1": 1.0}
    return qrels_nuggets, query_to_nuggets, qrels_query, results


def reference():
    try:
        from freshstack.retrieval.evaluation import EvaluateRetrieval
    except ImportError as e:  # pragma: no cover - CI installs it
        pytest.skip(f"SKIPPED LOUDLY: the reference evaluator is not installed ({e})")
    return EvaluateRetrieval


@pytest.mark.parametrize("k_values", [[10, 20, 50], [1, 3, 5, 10, 100, 1000], [5, 25]])
def test_evaluate_equals_the_reference(k_values):
    data = generated()
    ours = fs.EvaluateRetrieval(k_values=k_values).evaluate(*data[:2], data[2], data[3])
    ref_cls = reference()
    theirs = ref_cls(k_values=k_values).evaluate(
        qrels_nuggets=data[0], query_to_nuggets=data[1], qrels_query=data[2], results=data[3]
    )
    for mine, ref in zip(ours, theirs):
        assert list(mine) == list(ref)
        for key in ref:
            assert round(mine[key], 4) == round(ref[key], 4), (key, mine[key], ref[key])


def test_keyword_arguments_and_reference_names():
    data = generated(questions=5)
    alpha, coverage, recall = fs.EvaluateRetrieval(k_values=[10, 20, 50]).evaluate(
        qrels_nuggets=data[0], query_to_nuggets=data[1], qrels_query=data[2], results=data[3]
    )
    assert list(alpha) == ["alpha-nDCG@10", "alpha-nDCG@20"]
    assert list(coverage) == ["Coverage@10", "Coverage@20", "Coverage@50"]
    assert list(recall) == ["Recall@10", "Recall@20", "Recall@50"]
    assert all(0.0 <= v <= 1.0 for d in (alpha, coverage, recall) for v in d.values())


def test_other_metrics_and_per_query_values():
    data = generated(questions=8)
    means, per_query = fs.evaluate_metrics(
        data[0], data[1], data[3], metrics=["ndcg", "mrr", "coverage"], k_values=[10]
    )
    assert set(means) == {"ndcg@10", "mrr@10", "coverage@10"}
    assert set(per_query) == set(data[1])
    for key, mean in means.items():
        values = [row[key] for row in per_query.values()]
        assert math.isclose(mean, round(sum(values) / len(values), 4), abs_tol=1e-4)


def test_paired_significance():
    a = [0.1, 0.4, 0.35, 0.8, 0.5, 0.2]
    same = fs.paired_significance(a, a, permutations=1000)
    assert same["mean_difference"] == 0.0 and same["randomization"] == 1.0
    better = fs.paired_significance(a, [x + 0.3 for x in a], permutations=1000)
    assert math.isclose(better["mean_difference"], 0.3) and better["t_test"] < 0.05


@pytest.mark.parametrize(
    "results, error, words",
    [
        ([("q0", {})], TypeError, ["results", "dict"]),
        ({"q0": {"d1": "high"}}, TypeError, ["results", "q0", "d1", "number"]),
        ({"q0": {"d1": float("nan")}}, ValueError, ["results", "q0", "d1", "finite"]),
        ({0: {"d1": 1.0}}, TypeError, ["results", "str"]),
    ],
)
def test_bad_runs_name_the_argument_and_key(results, error, words):
    data = generated(questions=2)
    with pytest.raises(error) as info:
        fs.EvaluateRetrieval(k_values=[10]).evaluate(data[0], data[1], data[2], results)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_a_non_integer_label_is_refused():
    data = generated(questions=2)
    nid = next(iter(data[0]))
    doc = next(iter(data[0][nid]))
    data[0][nid][doc] = 0.5
    with pytest.raises(ValueError, match="not an integer"):
        fs.EvaluateRetrieval(k_values=[10]).evaluate(*data)


def test_a_panic_in_rust_is_a_python_exception():
    with pytest.raises(BaseException) as info:
        fs._native._panic_for_test()
    assert "deliberate panic" in str(info.value)
    # The interpreter goes on.
    data = generated(questions=3)
    assert fs.EvaluateRetrieval(k_values=[10]).evaluate(*data)[1]["Coverage@10"] >= 0.0
