#!/usr/bin/env python3
"""Writes tests/fixtures/embed/nomic_gguf_reference.json: llama.cpp's `llama-embedding` vectors
of the encoder parity texts (the `texts` of minilm_reference.json, so every encoder is checked on
the same ones) with the f16 nomic-embed-text-v1.5 GGUF, as documents ("search_document: "
prefix) and the first five as queries ("search_query: "). Mean pooling, L2 normalisation.

    scripts/setup.sh --with-encoders && scripts/setup-llama-server.sh
    python3 scripts/gen_gguf_encoder_reference.py

llama-embedding: $FRESHSTACK_LLAMA_CPP_BIN/llama-embedding, else the newest build under
${FRESHSTACK_CACHE:-~/.cache/freshstack}/llama.cpp/*/bin. Standard library only.
"""
import glob
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "nomic-embed-text-v1.5.f16.gguf"
OUT = ROOT / "tests" / "fixtures" / "embed" / "nomic_gguf_reference.json"
QUERIES = 5
SEPARATOR = "<|freshstack-text-separator|>"


def llama_embedding() -> str:
    if os.environ.get("FRESHSTACK_LLAMA_CPP_BIN"):
        return os.path.join(os.environ["FRESHSTACK_LLAMA_CPP_BIN"], "llama-embedding")
    cache = os.environ.get("FRESHSTACK_CACHE", os.path.expanduser("~/.cache/freshstack"))
    found = sorted(glob.glob(os.path.join(cache, "llama.cpp", "*", "bin", "llama-embedding")))
    if not found:
        sys.exit("gen_gguf_encoder_reference: no llama-embedding (run scripts/setup-llama-server.sh)")
    return found[-1]


def embed(binary: str, texts: list[str]) -> list[list[float]]:
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        f.write(SEPARATOR.join(texts))
        prompts = f.name
    try:
        out = subprocess.run(
            [binary, "-m", str(MODEL), "-f", prompts, "--embd-separator", SEPARATOR,
             "--embd-normalize", "2", "--embd-output-format", "array", "--pooling", "mean",
             "-c", "2048", "-b", "2048", "-t", "2", "--no-warmup"],
            capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(prompts)
    # The vectors are one line, "[[...],...,[...]]"; log lines may come before or after it.
    (line,) = [l for l in out.splitlines() if l.startswith("[[")]
    vectors = json.loads(line)
    if len(vectors) != len(texts):
        sys.exit(f"gen_gguf_encoder_reference: {len(vectors)} vectors for {len(texts)} texts")
    return vectors


def main() -> None:
    if not MODEL.is_file():
        sys.exit(f"gen_gguf_encoder_reference: {MODEL} is missing (scripts/setup.sh --with-encoders)")
    texts = json.loads((OUT.parent / "minilm_reference.json").read_text(encoding="utf-8"))["texts"]
    if any(SEPARATOR in t for t in texts):
        sys.exit("gen_gguf_encoder_reference: a text holds the separator")
    binary = llama_embedding()
    vectors = embed(binary, ["search_document: " + t for t in texts])
    query_vectors = embed(binary, ["search_query: " + t for t in texts[:QUERIES]])
    OUT.write_text(json.dumps({
        "model": MODEL.name,
        "reference": "llama.cpp llama-embedding (" + os.path.basename(os.path.dirname(os.path.dirname(binary))) + ")",
        "texts": texts,
        "vectors": vectors,
        "query_vectors": query_vectors,
    }), encoding="utf-8")
    print(f"wrote {OUT} ({len(vectors)} documents, {len(query_vectors)} queries)")


if __name__ == "__main__":
    main()
