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
