#!/usr/bin/env python3
"""Builds a tiny random-weight ModernBERT with Hugging Face `transformers` and writes
tests/fixtures/embed/tiny-modernbert/ (config.json, model.safetensors, tokenizer.json, and
reference.json: CLS-pooled, L2-normalised final hidden states of scripts/gen_tiny_decoders.py's
texts, one text at a time in float32, eager attention). Its config keeps the family's quirks:
alternating global and local layers with a window shorter than the texts, a RoPE base per layer
type, GeGLU, no biases, the first layer without its attention norm.

    /work/venv-enc/bin/python scripts/gen_tiny_modernbert.py
"""
import json
import pathlib
import sys

import torch
from transformers import ModernBertConfig, ModernBertModel

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gen_tiny_decoders import MAX_LEN, OUT, TEXTS, randomise, train_tokenizer  # noqa: E402


def main() -> None:
    tok = train_tokenizer(bos=True, eos_in_template=True)
    config = ModernBertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        max_position_embeddings=MAX_LEN,
        local_attention=8,
        global_attn_every_n_layers=2,
        global_rope_theta=160000.0,
        local_rope_theta=10000.0,
        hidden_activation="gelu",
        pad_token_id=tok.token_to_id("<pad>"),
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("</s>"),
        cls_token_id=tok.token_to_id("<s>"),
        sep_token_id=tok.token_to_id("</s>"),
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = ModernBertModel(config).eval()
    randomise(model, gemma=False)
    out = OUT / "tiny-modernbert"
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save(str(out / "tokenizer.json"))
    tok.enable_truncation(MAX_LEN)
    vectors, token_counts = [], []
    for text in TEXTS:
        ids = tok.encode(text).ids
        token_counts.append(len(ids))
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids])).last_hidden_state[0, 0]
        vectors.append(torch.nn.functional.normalize(hidden, dim=-1).tolist())
    (out / "reference.json").write_text(
        json.dumps({"texts": TEXTS, "tokens": token_counts, "vectors": vectors}) + "\n"
    )
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"tiny-modernbert: {size} bytes, tokens per text {token_counts}")


if __name__ == "__main__":
    main()
