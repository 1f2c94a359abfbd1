#!/usr/bin/env python3
"""Builds tiny random-weight Mistral, Qwen2, Qwen3, Gemma-2 and Gemma-3 models with Hugging Face
`transformers` and writes, per architecture, tests/fixtures/embed/tiny-<arch>/ with config.json,
model.safetensors, tokenizer.json (a small BPE trained here) and reference.json: last-token
pooled, L2-normalised final hidden states of texts of different lengths, computed one text at a
time in float32 (eager attention). The configs keep each family's quirks: grouped-query
attention, sliding windows shorter than the texts, Qwen2 q/k/v biases, Qwen3 q/k norms and an
explicit head_dim, Gemma-2 soft-capping, query_pre_attn_scalar and (1 + w) norms, Gemma-3
(1 + w) q/k norms and a RoPE base per layer type (causal, as harrier).

    /work/venv-enc/bin/python scripts/gen_tiny_decoders.py [NAME ...]   # default: all
"""
import json
import pathlib
import sys

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers, decoders
from transformers import (
    Gemma2Config,
    Gemma2Model,
    Gemma3TextConfig,
    Gemma3TextModel,
    MistralConfig,
    MistralModel,
    Qwen2Config,
    Qwen2Model,
    Qwen3Config,
    Qwen3Model,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "embed"
MAX_LEN = 48

CORPUS = [
    "How do I define a route with a parameter in Laravel?",
    "Eloquent relationships: hasMany, belongsTo and many-to-many pivot tables.",
    "The queue worker stops after processing jobs; use Supervisor to keep it running.",
    "def fibonacci(n): a, b = 0, 1; return a",
    "SELECT id, name FROM users WHERE email LIKE '%@example.com';",
    "Blade templates escape output; middleware filters HTTP requests.",
]
TEXTS = [
    "route parameter",
    "How do I keep the queue worker running?",
    "a",
    "Eloquent pivot tables and many-to-many relationships in Laravel models",
    # Longer than MAX_LEN tokens: truncated, EOS kept last.
    " ".join(["the queue worker processes jobs and writes logs"] * 8),
    "SELECT name FROM users;",
]


def train_tokenizer(bos: bool, eos_in_template: bool) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<pad>", "<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    single = ("<s> " if bos else "") + "$A" + (" </s>" if eos_in_template else "")
    tok.post_processor = processors.TemplateProcessing(
        single=single,
        special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))],
    )
    return tok


def randomise(model: torch.nn.Module, gemma: bool) -> None:
    gen = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen) * 0.1
            if "norm" in name and not gemma:
                p.copy_(1.0 + noise)
            else:
                p.copy_(noise)


def build(name: str, config, model_cls, bos: bool, eos_in_template: bool, gemma: bool = False) -> None:
    wanted = sys.argv[1:]
    if wanted and name not in wanted:
        return
    tok = train_tokenizer(bos, eos_in_template)
    eos = tok.token_to_id("</s>")
    config.vocab_size = tok.get_vocab_size()
    config.eos_token_id = eos
    config.bos_token_id = tok.token_to_id("<s>")
    config.pad_token_id = tok.token_to_id("<pad>")
    config.max_position_embeddings = MAX_LEN
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = model_cls(config).eval()
    randomise(model, gemma)
    out = OUT / f"tiny-{name}"
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save(str(out / "tokenizer.json"))

    # Same tokenisation as the embedder: truncate so that an appended EOS still fits.
    tok.enable_truncation(MAX_LEN if eos_in_template else MAX_LEN - 1)
    vectors, token_counts = [], []
    for text in TEXTS:
        ids = tok.encode(text).ids
        if not ids or ids[-1] != eos:
            ids = ids + [eos]
        token_counts.append(len(ids))
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
        vectors.append(torch.nn.functional.normalize(hidden, dim=-1).tolist())
    (out / "reference.json").write_text(
        json.dumps({"texts": TEXTS, "tokens": token_counts, "vectors": vectors}) + "\n"
    )
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"tiny-{name}: {size} bytes, tokens per text {token_counts}")


def main() -> None:
    common = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
    )
    build("mistral", MistralConfig(**common, sliding_window=7, rope_theta=10000.0), MistralModel, bos=True, eos_in_template=False)
    build(
        "qwen2",
        Qwen2Config(**common, use_sliding_window=True, sliding_window=9, max_window_layers=1, rope_theta=1e6),
        Qwen2Model,
        bos=False,
        eos_in_template=True,
    )
    build("qwen3", Qwen3Config(**common, head_dim=16, rope_theta=1e6), Qwen3Model, bos=False, eos_in_template=True)
    build(
        "gemma2",
        Gemma2Config(
            **common,
            head_dim=16,
            query_pre_attn_scalar=24,
            attn_logit_softcapping=5.0,
            final_logit_softcapping=30.0,
            sliding_window=7,
            hidden_activation="gelu_pytorch_tanh",
        ),
        Gemma2Model,
        bos=True,
        eos_in_template=False,
        gemma=True,
    )
    build(
        "gemma3",
        Gemma3TextConfig(
            **common,
            head_dim=16,
            query_pre_attn_scalar=24,
            sliding_window=7,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            },
            hidden_activation="gelu_pytorch_tanh",
        ),
        Gemma3TextModel,
        bos=True,
        eos_in_template=False,
        gemma=True,
    )


if __name__ == "__main__":
    main()
