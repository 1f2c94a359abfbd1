"""freshstack from Python: the FreshStack evaluation (a drop-in for the reference package's
``EvaluateRetrieval``), native dense encoders, hybrid BM25 + dense search over a freshstack
index, fusion and dataset loading, all offline and in-process.

>>> import freshstack_rs as fs
>>> alpha, coverage, recall = fs.EvaluateRetrieval(k_values=[10, 20, 50]).evaluate(
...     qrels_nuggets=qrels_nuggets, query_to_nuggets=query_to_nuggets,
...     qrels_query=qrels_query, results=results)
"""
from __future__ import annotations

import json
import logging
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _native
from ._native import FreshstackError, Index, fuse, paired_significance

__all__ = [
    "DataLoader",
    "Encoder",
    "EvaluateRetrieval",
    "FreshstackError",
    "Index",
    "MtebEncoder",
    "build",
    "evaluate_metrics",
    "fuse",
    "load_dataset",
    "paired_significance",
    "refresh",
]
__version__ = _native.__version__

logger = logging.getLogger(__name__)


class EvaluateRetrieval:
    """The reference's evaluator (``freshstack.retrieval.evaluation.EvaluateRetrieval`` of
    freshstack 0.0.6), computed in Rust: the same arguments, the same three dicts with the same
    keys and values (alpha-nDCG only for k <= 20, as ndeval; means rounded to 4 decimals)."""

    def __init__(self, k_values: Sequence[int] = (1, 3, 5, 10, 100, 1000)):
        self.k_values = list(k_values)
        self.top_k = max(self.k_values)
        self.results: Dict[str, Dict[str, float]] = {}

    def evaluate(
        self,
        qrels_nuggets: Dict[str, Dict[str, int]],
        query_to_nuggets: Dict[str, List[str]],
        qrels_query: Dict[str, Dict[str, int]],
        results: Dict[str, Dict[str, float]],
    ) -> Tuple[Dict[str, float], Dict[str, float], Dict[str, float]]:
        """alpha-nDCG@k, Coverage@k and Recall@k of ``results`` (the questions of
        ``qrels_query`` only)."""
        if not qrels_nuggets or not qrels_query or not results:
            raise ValueError("qrels and results must be provided for evaluation.")
        alpha, coverage, recall = _native.evaluate(
            qrels_nuggets, query_to_nuggets, qrels_query, results, self.k_values
        )
        for metric in (alpha, coverage, recall):
            for name, value in metric.items():
                logger.info("%s: %.4f", name, value)
        return alpha, coverage, recall


def evaluate_metrics(
    qrels_nuggets: Dict[str, Dict[str, int]],
    query_to_nuggets: Dict[str, List[str]],
    results: Dict[str, Dict[str, float]],
    metrics: Sequence[str] = ("alpha_ndcg", "coverage", "recall"),
    k_values: Sequence[int] = (),
) -> Tuple[Dict[str, float], Dict[str, Dict[str, float]]]:
    """Any measures of ``freshstack eval`` (alpha_ndcg, coverage, recall, ndcg, mrr, precision,
    hole, judged; each at ``k_values``, or its default k when empty): ``(means, per_query)``
    keyed ``name@k``. Query-level relevance is derived from the nugget labels."""
    return _native.evaluate_metrics(
        qrels_nuggets, query_to_nuggets, results, list(metrics), list(k_values)
    )


class Encoder:
    """A dense encoder run natively: a model directory, a Hugging Face cache id
    (``sentence-transformers/all-MiniLM-L6-v2``) or a model card, read offline.

    ``encode`` returns unit-length ``float32`` rows. ``encode_queries`` / ``encode_corpus`` are
    the names BEIR and MTEB call, so the encoder can stand where those expect a model."""

    def __init__(
        self,
        model: str,
        max_length: Optional[int] = None,
        dimensions: Optional[int] = None,
    ):
        self._inner = _native.Encoder(model, max_length=max_length, dimensions=dimensions)

    @property
    def dim(self) -> int:
        """Width of the vectors."""
        return self._inner.dim

    def encode(
        self,
        texts,
        batch_size: int = 256,
        kind: str = "document",
        **_ignored,
    ) -> np.ndarray:
        """``texts`` (a str or a list of str) as an array ``[n, dim]`` (``[dim]`` for one
        str); ``kind`` is ``"query"`` or ``"document"`` (the model's templates)."""
        if isinstance(texts, str):
            return self._inner.encode([texts], batch_size, kind)[0]
        return self._inner.encode(list(texts), batch_size, kind)

    def encode_queries(self, queries, batch_size: int = 256, **kwargs) -> np.ndarray:
        """Queries, with the model's query template."""
        return self.encode(list(queries), batch_size=batch_size, kind="query")

    def encode_corpus(self, corpus, batch_size: int = 256, **kwargs) -> np.ndarray:
        """Documents: strs, or BEIR rows ``{"title", "text"}`` (title and text joined by a
        space, as BEIR's sentence-transformers wrapper does)."""
        if isinstance(corpus, dict):
            corpus = [corpus[k] for k in corpus]
        texts = [
            d if isinstance(d, str) else (d.get("title", "") + " " + d.get("text", "")).strip()
            for d in corpus
        ]
        return self.encode(texts, batch_size=batch_size, kind="document")


def _prompt_kind(prompt_type) -> str:
    """MTEB's ``PromptType`` (an enum whose value is ``"query"`` or ``"document"`` /
    ``"passage"``, or its value itself, or None) as this encoder's text kind."""
    value = getattr(prompt_type, "value", prompt_type)
    if value is None or value in ("document", "passage"):
        return "document"
    if value == "query":
        return "query"
    raise ValueError(f"prompt_type: {prompt_type!r} is not query, document or passage")


def _batch_texts(batch) -> List[str]:
    """The texts of one MTEB batch: a dict of columns (``text``, or ``title`` + ``body`` /
    ``text`` joined by a space), or a list of strs."""
    if isinstance(batch, str):
        return [batch]
    if isinstance(batch, dict):
        if "text" in batch:
            return [str(t) for t in batch["text"]]
        if "body" in batch:
            titles = batch.get("title") or [""] * len(batch["body"])
            return [(str(a) + " " + str(b)).strip() for a, b in zip(titles, batch["body"])]
        raise TypeError(f"inputs: a batch has no 'text' column (columns: {sorted(batch)})")
    return [str(t) for t in batch]


class MtebEncoder:
    """An :class:`Encoder` in the shape MTEB calls (``mteb.evaluate(model, tasks)``): MTEB 2's
    ``encode(inputs, *, task_metadata, hf_split, hf_subset, prompt_type)`` over batches of
    ``{"text": [...]}`` and MTEB 1's ``encode(sentences, *, task_name, prompt_type)``, plus
    ``similarity`` and ``similarity_pairwise`` (cosine: the vectors are unit length). Queries
    (``prompt_type`` query) get the model's query template, everything else its document one.
    """

    def __init__(self, encoder, batch_size: int = 256, **kwargs):
        self.encoder = encoder if isinstance(encoder, Encoder) else Encoder(encoder, **kwargs)
        self.batch_size = batch_size

    def encode(self, inputs, *, prompt_type=None, batch_size: Optional[int] = None, **_ignored) -> np.ndarray:
        """Vectors ``[n, dim]`` for ``inputs``: a str, a list of strs, or an iterable of MTEB
        batches (a ``DataLoader``); ``task_metadata``, ``hf_split``, ``hf_subset`` and
        ``task_name`` are accepted and not needed."""
        kind = _prompt_kind(prompt_type)
        size = batch_size or self.batch_size
        if isinstance(inputs, str):
            texts = [inputs]
        elif isinstance(inputs, (list, tuple)) and all(isinstance(t, str) for t in inputs):
            texts = list(inputs)
        else:
            texts = []
            for batch in inputs:
                texts.extend(_batch_texts(batch))
        if not texts:
            return np.zeros((0, self.encoder.dim), dtype=np.float32)
        return self.encoder.encode(texts, batch_size=size, kind=kind)

    def similarity(self, a, b) -> np.ndarray:
        """Cosine similarity of every row of ``a`` with every row of ``b``: ``[len(a), len(b)]``."""
        a, b = _unit_rows(a), _unit_rows(b)
        return a @ b.T

    def similarity_pairwise(self, a, b) -> np.ndarray:
        """Cosine similarity of row ``i`` of ``a`` with row ``i`` of ``b``."""
        a, b = _unit_rows(a), _unit_rows(b)
        if a.shape != b.shape:
            raise ValueError(f"similarity_pairwise: shapes {a.shape} and {b.shape} differ")
        return (a * b).sum(axis=1)


def _unit_rows(x) -> np.ndarray:
    """``x`` as float32 rows of unit length (a zero row stays zero)."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def _config_args(config) -> dict:
    """A build config as the native call takes it: a TOML path, or a dict (the TOML file's
    tables as nested dicts; relative paths resolve against the working directory)."""
    if isinstance(config, dict):
        return {"config_json": json.dumps(config)}
    if isinstance(config, (str, os.PathLike)):
        return {"config_path": os.fspath(config)}
    raise TypeError(f"config: expected a path or a dict, got {type(config).__name__}")


def build(config, out, logger: Optional[logging.Logger] = None) -> dict:
    """``freshstack build``: the whole pipeline (questions, corpus, index, nuggets, variants,
    pool, judge, export, report) into ``out``, resuming what an earlier run finished.
    ``config`` is a TOML path or the same settings as a dict. Progress and each stage's line
    go to ``logger`` (default ``logging.getLogger("freshstack_rs")``) at INFO. Ctrl-C stops
    the build at its next item or stage and raises KeyboardInterrupt; a rerun resumes.
    Returns ``{"out", "questions", "documents", "stages": [{"stage", "ran", "seconds",
    "detail"}]}``."""
    return _native.build(logger or logger_default(), os.fspath(out), **_config_args(config))


def refresh(from_dir, config, out, logger: Optional[logging.Logger] = None) -> dict:
    """``freshstack refresh``: a new build in ``out`` from the finished build ``from_dir`` with
    the newer inputs ``config`` names, carrying over every unchanged result; as :func:`build`."""
    return _native.refresh(
        logger or logger_default(), os.fspath(from_dir), os.fspath(out), **_config_args(config)
    )


def logger_default() -> logging.Logger:
    """The logger :func:`build` and :func:`refresh` report to unless given another."""
    return logger


def load_dataset(
    queries: str, corpus: str, split: str = "test", corpus_split: str = "train"
) -> dict:
    """A dataset as dicts: ``queries`` and ``corpus`` are local paths (an export directory or
    its files) or ``ORG/NAME:TOPIC`` ids in the Hugging Face cache (never downloaded). Keys:
    corpus, queries, nuggets, qrels_nuggets, qrels_query, query_to_nuggets."""
    return _native.load_dataset(queries, corpus, split, corpus_split)


class DataLoader:
    """The reference's ``DataLoader`` over :func:`load_dataset`: ``load()`` gives
    ``(corpus, queries, nuggets)``, ``load_qrels()`` ``(qrels_nuggets, qrels_query,
    query_to_nuggets)``."""

    def __init__(
        self,
        queries_repo: str = "freshstack/queries-oct-2024",
        corpus_repo: str = "freshstack/corpus-oct-2024",
        topic: Optional[str] = None,
    ):
        def spec(repo: str) -> str:
            # A hub id takes the topic as its config; a local path stays as it is.
            if topic and ":" not in repo and not os.path.exists(repo):
                return f"{repo}:{topic}"
            return repo

        self._queries = spec(queries_repo)
        self._corpus = spec(corpus_repo)
        self._data: Optional[dict] = None

    def _loaded(self, split: str) -> dict:
        if self._data is None:
            self._data = load_dataset(self._queries, self._corpus, split=split)
        return self._data

    def load(self, split: str = "test"):
        d = self._loaded(split)
        return d["corpus"], d["queries"], d["nuggets"]

    def load_qrels(self, split: str = "test"):
        d = self._loaded(split)
        return d["qrels_nuggets"], d["qrels_query"], d["query_to_nuggets"]
