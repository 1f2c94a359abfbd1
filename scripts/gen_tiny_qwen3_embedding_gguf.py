#!/usr/bin/env python3
"""Writes tests/fixtures/embed/tiny-qwen3-embedding.gguf: the tiny random Qwen3 embedder of
tests/fixtures/embed/tiny-qwen3/ (scripts/gen_tiny_decoders.py) as llama.cpp lays out a
Qwen3-Embedding GGUF: architecture `qwen3` with `qwen3.pooling_type` 3 (last token), llama.cpp's
tensor names (no output head), its gpt2 byte-level BPE vocabulary and merges with the special
tokens typed as control tokens, and `tokenizer.ggml.add_eos_token` set, since the GGUF carries
no post-processor to append the EOS the model pools. F32 tensors, so that the Rust test can
compare its vectors with that directory's `reference.json` (computed by `transformers`).

    /work/venv-enc/bin/pip install gguf
    /work/venv-enc/bin/python scripts/gen_tiny_qwen3_embedding_gguf.py [SRC_DIR OUT_FILE]

With SRC_DIR and OUT_FILE it converts another Qwen3 directory of the same layout, such as the
real-shaped random model `benches/compare/decoder_vs_torch.py` writes (bf16 weights are read
through torch), e.g. for `llama-quantize` to quantize as it would a real Qwen3-Embedding.
"""
import json
import pathlib
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from gguf_names import QWEN3_LAYER

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "tests" / "fixtures" / "embed" / "tiny-qwen3"
OUT = ROOT / "tests" / "fixtures" / "embed" / "tiny-qwen3-embedding.gguf"


def read_weights(path: pathlib.Path) -> dict:
    try:
        return load_file(str(path))
    except TypeError:
        # numpy has no bfloat16: read such files through torch, widened to f32.
        from safetensors.torch import load_file as load_torch

        return {k: v.float().numpy() for k, v in load_torch(str(path)).items()}


def main() -> None:
    src, out = SRC, OUT
    if len(sys.argv) == 3:
        src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    elif len(sys.argv) != 1:
        sys.exit("usage: gen_tiny_qwen3_embedding_gguf.py [SRC_DIR OUT_FILE]")
    config = json.loads((src / "config.json").read_text())
    weights = read_weights(src / "model.safetensors")
    prefix = "model." if "model.embed_tokens.weight" in weights else ""
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    specials = {t.content for t in tok.get_added_tokens_decoder().values()}
    merges = json.loads(tok.to_str())["model"]["merges"]

    w = GGUFWriter(str(out), "qwen3")
    w.add_string("general.name", "tiny-qwen3-embedding")
    w.add_uint32("qwen3.context_length", config["max_position_embeddings"])
    w.add_uint32("qwen3.embedding_length", config["hidden_size"])
    w.add_uint32("qwen3.block_count", config["num_hidden_layers"])
    w.add_uint32("qwen3.feed_forward_length", config["intermediate_size"])
    w.add_uint32("qwen3.attention.head_count", config["num_attention_heads"])
    w.add_uint32("qwen3.attention.head_count_kv", config["num_key_value_heads"])
    w.add_uint32("qwen3.attention.key_length", config["head_dim"])
    w.add_uint32("qwen3.attention.value_length", config["head_dim"])
    w.add_float32("qwen3.attention.layer_norm_rms_epsilon", config["rms_norm_eps"])
    rope = config.get("rope_parameters") or {}
    w.add_float32("qwen3.rope.freq_base", rope.get("rope_theta", config.get("rope_theta", 1e6)))
    w.add_uint32("qwen3.pooling_type", 3)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "default")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.merges", [" ".join(m) if isinstance(m, list) else m for m in merges])
    w.add_array("tokenizer.ggml.token_type", [3 if t in specials else 1 for t in tokens])
    w.add_uint32("tokenizer.ggml.eos_token_id", config["eos_token_id"])
    w.add_uint32("tokenizer.ggml.padding_token_id", config["pad_token_id"])
    w.add_bool("tokenizer.ggml.add_eos_token", True)
    w.add_bool("tokenizer.ggml.add_bos_token", False)

    def add(name, array):
        w.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32), raw_dtype=GGMLQuantizationType.F32)

    add("token_embd.weight", weights[f"{prefix}embed_tokens.weight"])
    for i in range(config["num_hidden_layers"]):
        for hf, gg in QWEN3_LAYER:
            add(f"blk.{i}.{gg}.weight", weights[f"{prefix}layers.{i}.{hf}.weight"])
    add("output_norm.weight", weights[f"{prefix}norm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{out.name}: {out.stat().st_size} bytes, {len(tokens)} tokens")


if __name__ == "__main__":
    main()
