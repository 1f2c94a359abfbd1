#!/usr/bin/env python3
"""Writes tests/fixtures/embed/nomic_gguf_reference.json: llama.cpp's `llama-embedding` vectors
of the encoder parity texts (the `texts` of minilm_reference.json, so every encoder is checked on
the same ones) with the f16 nomic-embed-text-v1.5 GGUF, as documents ("search_document: "
prefix) and the first five as queries ("search_query: "). Mean pooling, L2 normalisation.

With `--quant TYPE` (Q8_0, Q4_K_M, ...) the f16 file is first quantized by llama.cpp's
`llama-quantize` and the vectors are those of the quantized file, written to
nomic_gguf_<type>_reference.json with the quantized file's sha256 (the test quantizes the same
way and checks it got the same bytes).

    scripts/setup.sh --with-encoders && scripts/setup-llama-server.sh
    python3 scripts/gen_gguf_encoder_reference.py [--quant TYPE]

llama.cpp's tools: $FRESHSTACK_LLAMA_CPP_BIN, else the newest build under
${FRESHSTACK_CACHE:-~/.cache/freshstack}/llama.cpp/*/bin. Standard library only.
"""
import glob
import hashlib
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


def llama_tool(name: str) -> str:
    if os.environ.get("FRESHSTACK_LLAMA_CPP_BIN"):
        return os.path.join(os.environ["FRESHSTACK_LLAMA_CPP_BIN"], name)
    cache = os.environ.get("FRESHSTACK_CACHE", os.path.expanduser("~/.cache/freshstack"))
    found = sorted(glob.glob(os.path.join(cache, "llama.cpp", "*", "bin", name)))
    if not found:
        sys.exit(f"gen_gguf_encoder_reference: no {name} (run scripts/setup-llama-server.sh)")
    return found[-1]


def embed(binary: str, model: pathlib.Path, texts: list[str]) -> list[list[float]]:
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        f.write(SEPARATOR.join(texts))
        prompts = f.name
    try:
        out = subprocess.run(
            [binary, "-m", str(model), "-f", prompts, "--embd-separator", SEPARATOR,
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
    binary = llama_tool("llama-embedding")
    args = sys.argv[1:]
    quant = None
    if args[:1] == ["--quant"] and len(args) == 2:
        quant = args[1]
    elif args:
        sys.exit("usage: gen_gguf_encoder_reference.py [--quant TYPE]")
    with tempfile.TemporaryDirectory() as tmp:
        model, out, extra = MODEL, OUT, {}
        if quant:
            model = pathlib.Path(tmp) / f"nomic-embed-text-v1.5.{quant}.gguf"
            subprocess.run([llama_tool("llama-quantize"), str(MODEL), str(model), quant],
                           capture_output=True, check=True)
            out = OUT.with_name(f"nomic_gguf_{quant.lower()}_reference.json")
            extra = {"quantization": quant,
                     "gguf_sha256": hashlib.sha256(model.read_bytes()).hexdigest()}
        vectors = embed(binary, model, ["search_document: " + t for t in texts])
        query_vectors = embed(binary, model, ["search_query: " + t for t in texts[:QUERIES]])
    out.write_text(json.dumps({
        "model": model.name,
        **extra,
        "reference": "llama.cpp llama-embedding (" + os.path.basename(os.path.dirname(os.path.dirname(binary))) + ")",
        "texts": texts,
        "vectors": vectors,
        "query_vectors": query_vectors,
    }), encoding="utf-8")
    print(f"wrote {out} ({len(vectors)} documents, {len(query_vectors)} queries)")


if __name__ == "__main__":
    main()
