"""An index built by the CLI, searched from Python (BM25, dense with the recorded encoder,
fusion), fusion of dict runs, and a dataset read offline from a Hugging Face cache layout."""
from __future__ import annotations

import json

import pytest

import freshstack_rs as fs

from conftest import ROOT, model_dir, run

DOCS = [
    ("r/x/routes.php_0_10", "Route::get('/user/{id}', function (string $id) { return $id; });"),
    ("r/x/queue.php_0_10", "php artisan queue:work --tries=3 runs the queue worker with retries"),
    ("r/x/cache.php_0_10", "Cache::remember('users', 60, fn () => User::all()); caches a query"),
    ("r/x/mail.php_0_10", "Mail::to($user)->send(new OrderShipped($order)); sends a mailable"),
]


@pytest.fixture(scope="module")
def index(tmp_path_factory, freshstack_bin):
    d = tmp_path_factory.mktemp("index")
    corpus = d / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"_id": i, "title": "", "text": t, "metadata": {"repo": "r/x"}}) + "\n"
            for i, t in DOCS
        )
    )
    minilm = model_dir("all-MiniLM-L6-v2")
    out = d / "idx"
    run([freshstack_bin, "index", "--corpus", corpus, "--bm25", "--dense", f"minilm={minilm}", "--index", out])
    return out


def test_bm25_dense_and_fusion_search(index):
    engine = fs.Index(str(index))
    assert len(engine) == 4
    hits = engine.search("queue worker retries", k=2)
    # BM25 returns only documents holding a query term.
    assert [d for d, _ in hits] == ["r/x/queue.php_0_10"]
    assert engine.search("run the queue worker with a query cache", k=2)[0][1] > 0
    dense = engine.search("how do I send an email to a user", k=1, retriever="dense:minilm")
    assert dense[0][0] == "r/x/mail.php_0_10"
    exact = engine.search("how do I send an email to a user", k=1, retriever="dense:minilm", exact=True)
    assert exact == dense
    fused = engine.search("cache a query result", k=4, retriever="fusion")
    assert fused[0][0] == "r/x/cache.php_0_10" and len(fused) == 4


def test_retrieve_gives_a_run_and_bad_retriever_is_an_error(index):
    engine = fs.Index(str(index))
    queries = {"1": "queue worker", "2": "route parameter"}
    results = engine.retrieve(queries, k=3)
    assert list(results) == ["1", "2"]
    assert next(iter(results["2"])) == "r/x/routes.php_0_10"
    for q, text in queries.items():
        assert list(results[q].items()) == engine.search(text, k=3)
    with pytest.raises(ValueError, match="retriever"):
        engine.search("x", retriever="splade")
    with pytest.raises(fs.FreshstackError):
        fs.Index(str(index / "missing"))


def test_fuse_normalized_sum_and_rrf():
    a = {"q": {"d1": 3.0, "d2": 2.0, "d3": 1.0}}
    b = {"q": {"d3": 10.0, "d2": 5.0, "d4": 0.0}}
    fused = fs.fuse([a, b])
    # Min-max per run, then summed: d2 0.5 + 0.5, d3 0 + 1, d1 1 + 0, d4 0.
    assert fused["q"]["d4"] == 0.0
    assert {d: round(s, 6) for d, s in fused["q"].items() if d != "d4"} == {"d1": 1.0, "d2": 1.0, "d3": 1.0}
    rrf = fs.fuse([a, b], method="rrf", rrf_k=60)
    assert list(rrf["q"])[0] in ("d2", "d3")
    assert abs(rrf["q"]["d2"] - (1 / 62 + 1 / 62)) < 1e-12
    with pytest.raises(ValueError, match="method"):
        fs.fuse([a], method="max")


def test_load_dataset_from_a_hub_cache(monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(ROOT / "tests" / "fixtures" / "benchmark" / "hf" / "hub"))
    loader = fs.DataLoader("freshstack/queries-tiny", "freshstack/corpus-tiny", topic="tiny")
    corpus, queries, nuggets = loader.load()
    qrels_nuggets, qrels_query, query_to_nuggets = loader.load_qrels()
    assert corpus and queries and nuggets
    for qid, ids in query_to_nuggets.items():
        assert qid in queries
        for nid in ids:
            assert nid in nuggets
            for doc in qrels_nuggets[nid]:
                assert qrels_query[qid][doc] == 1
    with pytest.raises(fs.FreshstackError):
        fs.load_dataset("freshstack/queries-tiny:nope", "freshstack/corpus-tiny:nope")


def test_an_index_built_from_python_answers_as_the_cli_one(index, tmp_path):
    """Index.build over the same corpus gives the same hits as the CLI's index."""
    minilm = model_dir("all-MiniLM-L6-v2")
    lines = []

    class Lines:
        def info(self, line):
            lines.append(line)

    built = fs.Index.build(
        tmp_path / "idx", index.parent / "corpus.jsonl", dense=[f"minilm={minilm}"], logger=Lines()
    )
    cli = fs.Index(str(index))
    assert len(built) == 4
    for query in ("queue worker retries", "how do I send an email to a user"):
        for retriever in ("bm25", "dense:minilm", "fusion"):
            assert built.search(query, k=4, retriever=retriever) == cli.search(
                query, k=4, retriever=retriever
            )
    assert any(line.startswith("bm25") for line in lines), lines
    with pytest.raises(fs.FreshstackError, match="nothing to build"):
        fs.Index.build(tmp_path / "none", index.parent / "corpus.jsonl", bm25=False)
    with pytest.raises(ValueError, match="vector_dtype"):
        fs.Index.build(tmp_path / "bad", index.parent / "corpus.jsonl", vector_dtype="f8")


def test_search_vectors_takes_numpy_queries(index):
    import numpy as np

    engine = fs.Index(str(index))
    encoder = fs.Encoder(str(model_dir("all-MiniLM-L6-v2")))
    queries = ["how do I send an email to a user", "queue worker retries"]
    vectors = encoder.encode(queries, kind="query")
    for exact in (False, True):
        batch = engine.search_vectors(vectors, k=3, model="minilm", exact=exact)
        assert len(batch) == 2
        for query, hits, vector in zip(queries, batch, vectors):
            by_text = engine.search(query, k=3, retriever="dense:minilm", exact=exact)
            assert [d for d, _ in hits] == [d for d, _ in by_text]
            assert np.allclose([s for _, s in hits], [s for _, s in by_text], atol=1e-5)
            assert engine.search_vectors(vector, k=3, exact=exact) == hits
    with pytest.raises(TypeError, match="float32"):
        engine.search_vectors(vectors.astype(np.float64))
    with pytest.raises(ValueError, match="C-contiguous"):
        engine.search_vectors(np.repeat(vectors, 2, axis=1)[:, ::2])
    with pytest.raises(fs.FreshstackError, match="dimension"):
        engine.search_vectors(vectors[:, :100].copy())
    bad = vectors.copy()
    bad[0, 0] = np.nan
    with pytest.raises(fs.FreshstackError, match="NaN"):
        engine.search_vectors(bad)


def test_retrieve_in_slices_gives_every_query_its_own_hits(index):
    """More queries than one slice between Ctrl-C checks: each query's hits are those of its
    own search, for BM25 and the dense model."""
    engine = fs.Index(str(index))
    words = ["queue", "worker", "route", "cache", "mail", "user", "query", "send", "retries", "id"]
    queries = {f"q{i}": f"{words[i % 10]} {words[(i * 7) % 10]} {words[(i * 3) % 10]}" for i in range(150)}
    for retriever in ("bm25", "dense:minilm"):
        run_ = engine.retrieve(queries, k=3, retriever=retriever)
        assert list(run_) == list(queries)
        for q in ("q0", "q63", "q64", "q65", "q149"):
            assert list(run_[q].items()) == engine.search(queries[q], k=3, retriever=retriever), q


def test_refresh_removes_and_adds_documents_like_a_fresh_build(index, tmp_path):
    """Index.refresh on a copy of the CLI's index: a repository's documents go, new ones come
    (BM25 and the recorded dense model); the result answers as an index built from scratch over
    the same documents, and the old object keeps its snapshot."""
    import shutil

    copy = tmp_path / "idx"
    shutil.copytree(index, copy)
    added = tmp_path / "added.jsonl"
    new_docs = [
        ("s/y/horizon.php_0_10", "php artisan horizon starts the Horizon dashboard for Redis queues"),
        ("s/y/events.php_0_10", "Event::dispatch(new OrderShipped($order)); fires an event to listeners"),
    ]
    added.write_text(
        "".join(
            json.dumps({"_id": i, "title": "", "text": t, "metadata": {"repo": "s/y"}}) + "\n"
            for i, t in new_docs
        )
    )
    old = fs.Index(str(copy))
    lines = []

    class Lines:
        def info(self, line):
            lines.append(line)

    refreshed = old.refresh(add=added, remove_repos=["r/x"], logger=Lines())
    assert len(refreshed) == 2 and len(old) == 4
    fresh = fs.Index.build(
        tmp_path / "fresh", added, dense=[f"minilm={model_dir('all-MiniLM-L6-v2')}"]
    )
    for query in ("horizon redis queue dashboard", "dispatch an event to its listeners"):
        for retriever in ("bm25", "dense:minilm"):
            got = refreshed.search(query, k=2, retriever=retriever, exact=True)
            want = fresh.search(query, k=2, retriever=retriever, exact=True)
            assert [d for d, _ in got] == [d for d, _ in want], (query, retriever)
            assert all(abs(a - b) < 1e-5 for (_, a), (_, b) in zip(got, want))
    assert old.search("queue worker retries", k=1)[0][0] == "r/x/queue.php_0_10"
    with pytest.raises(ValueError, match="nothing to refresh"):
        refreshed.refresh()
    with pytest.raises(fs.FreshstackError, match="r/x"):
        refreshed.refresh(remove_repos=["r/x"])
