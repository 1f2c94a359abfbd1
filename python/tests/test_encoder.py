"""The native encoder against sentence-transformers' vectors for the same texts (stored by
scripts/gen_encoder_reference.py), as numpy arrays."""
from __future__ import annotations

import json

import numpy as np
import pytest

import freshstack_rs as fs

from conftest import ROOT, model_dir


def reference(name):
    return json.loads((ROOT / "tests" / "fixtures" / "embed" / f"{name}_reference.json").read_text())


def test_minilm_matches_sentence_transformers():
    encoder = fs.Encoder(str(model_dir("all-MiniLM-L6-v2")))
    ref = reference("minilm")
    vectors = encoder.encode(ref["texts"])
    want = np.asarray(ref["vectors"], dtype=np.float32)
    assert vectors.dtype == np.float32 and vectors.shape == want.shape
    assert vectors.flags["C_CONTIGUOUS"]
    cosines = (vectors * want).sum(1) / np.linalg.norm(want, axis=1)
    assert cosines.min() >= 0.9999, cosines.min()
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert encoder.dim == 384


def test_batches_one_string_and_adapters():
    encoder = fs.Encoder(str(model_dir("all-MiniLM-L6-v2")))
    texts = reference("minilm")["texts"]
    whole = encoder.encode(texts, batch_size=64)
    pieces = encoder.encode(texts, batch_size=3)
    assert np.allclose(whole, pieces, atol=1e-6)
    one = encoder.encode(texts[0])
    assert one.shape == (384,) and np.allclose(one, whole[0], atol=1e-6)
    corpus = encoder.encode_corpus([{"title": "", "text": t} for t in texts[:4]])
    assert np.allclose(corpus, whole[:4], atol=1e-6)
    assert encoder.encode_queries(texts[:2]).shape == (2, 384)
    assert encoder.encode([]).shape == (0, 384)


def test_bad_model_and_kind_are_errors():
    with pytest.raises(fs.FreshstackError):
        fs.Encoder(str(ROOT / "no-such-model"))
    encoder = fs.Encoder(str(model_dir("all-MiniLM-L6-v2")))
    with pytest.raises(ValueError, match="kind"):
        encoder.encode(["x"], kind="passage")
    with pytest.raises(TypeError):
        encoder.encode([1, 2])


class _PromptType:
    """Stands for mteb.types.PromptType (an enum with a ``value``): mteb pulls in torch, which
    the tests never install."""

    def __init__(self, value):
        self.value = value


def test_mteb_adapter_takes_mteb_batches_and_prompt_types():
    encoder = fs.Encoder(str(model_dir("all-MiniLM-L6-v2")))
    model = fs.MtebEncoder(encoder, batch_size=4)
    texts = reference("minilm")["texts"][:6]
    # MTEB 2 hands a DataLoader of column batches; MTEB 1 a list of sentences.
    loader = [{"text": texts[:4]}, {"text": texts[4:]}]
    from_batches = model.encode(
        loader, task_metadata=None, hf_split="test", hf_subset="default", prompt_type=None
    )
    from_list = model.encode(texts, task_name="FreshStackRetrieval")
    assert from_batches.shape == (6, 384)
    assert np.allclose(from_batches, from_list, atol=1e-6)
    assert np.allclose(from_list, encoder.encode(texts, kind="document"), atol=1e-6)
    queries = model.encode(loader, prompt_type=_PromptType("query"))
    assert np.allclose(queries, encoder.encode(texts, kind="query"), atol=1e-6)
    passages = model.encode(loader, prompt_type=_PromptType("passage"))
    assert np.allclose(passages, from_list, atol=1e-6)
    # Title + body batches join the two as BEIR does.
    joined = model.encode([{"title": ["A"], "body": ["b c"]}])
    assert np.allclose(joined, encoder.encode(["A b c"]), atol=1e-6)
    # Cosine similarities, full and pairwise.
    sim = model.similarity(from_list[:2], from_list)
    assert sim.shape == (2, 6) and np.allclose(np.diag(sim[:, :2]), 1.0, atol=1e-5)
    pairwise = model.similarity_pairwise(from_list, from_list[::-1])
    assert pairwise.shape == (6,) and np.isclose(pairwise[0], sim[0, 5], atol=1e-6)
    assert model.encode([]).shape == (0, 384)
    with pytest.raises(ValueError, match="prompt_type"):
        model.encode(texts, prompt_type="summary")
    with pytest.raises(TypeError, match="text"):
        model.encode([{"image": [1]}])
