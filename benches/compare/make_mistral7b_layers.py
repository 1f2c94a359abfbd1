#!/usr/bin/env python3
"""Writes a random-weight model with E5-Mistral-7B's exact layer shapes (hidden 4096, MLP 14336,
32 query / 8 key-value heads) but only N layers (default 2) and a tiny vocabulary, in bf16, for
measuring per-layer CPU throughput of our Mistral forward pass without a 14 GB download:
tokens/s of the full 32-layer model is the measured figure x N / 32.

    /work/venv-enc/bin/python benches/compare/make_mistral7b_layers.py /tmp/mistral7b-2l [N]
    target/release/freshstack embed --model /tmp/mistral7b-2l --model-dtype bf16 ...
"""
import pathlib
import shutil
import sys

import torch
from transformers import MistralConfig, MistralModel

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    layers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    tiny = ROOT / "tests" / "fixtures" / "embed" / "tiny-mistral"
    config = MistralConfig.from_pretrained(tiny)
    config.hidden_size = 4096
    config.intermediate_size = 14336
    config.num_attention_heads = 32
    config.num_key_value_heads = 8
    config.head_dim = 128
    config.num_hidden_layers = layers
    config.max_position_embeddings = 32768
    config.sliding_window = 4096
    torch.manual_seed(0)
    model = MistralModel(config).to(torch.bfloat16).eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    shutil.copy(tiny / "tokenizer.json", out / "tokenizer.json")
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {out}: {layers} layers, {params / 1e6:.0f}M parameters (bf16)")


if __name__ == "__main__":
    main()
