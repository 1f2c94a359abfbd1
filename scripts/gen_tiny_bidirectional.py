#!/usr/bin/env python3
"""Builds tiny random-weight bidirectional decoder-style encoders with `transformers`.

`pplx-qwen3`: a Qwen3 run the way pplx-embed runs it, written to
tests/fixtures/embed/tiny-pplx-qwen3/: config.json (`model_type` `bidirectional_pplx_qwen3`, as
perplexity-ai/pplx-embed-v1 declares), model.safetensors, tokenizer.json (no EOS template),
1_Pooling/config.json (mean pooling) and reference.json: mean-pooled, L2-normalised final hidden
states of scripts/gen_tiny_decoders.py's texts, one text at a time in float32 with eager
attention under an all-zero additive mask, so that every token attends to every other one (the
upstream model only clears the causal triangle). The script checks that the causal run of the
same weights gives other vectors, so the fixture does test the attention's direction.

`eurobert`: EuroBERT (Jina v5 text nano's backbone: Llama blocks, bidirectional attention),
written to tests/fixtures/embed/tiny-eurobert/ with a BOS + EOS tokenizer template,
1_Pooling/config.json asking for the last token (as Jina v5 pools) and reference.json: the
last token's final hidden state, L2-normalised, one text at a time in float32 (eager).

    /work/venv-enc/bin/python scripts/gen_tiny_bidirectional.py [pplx-qwen3|eurobert ...]
"""
import json
import pathlib
import sys

import torch
from transformers import EuroBertConfig, EuroBertModel, Qwen3Config, Qwen3Model

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gen_tiny_decoders import MAX_LEN, OUT, TEXTS, randomise, train_tokenizer  # noqa: E402


def mean_pooled(model, ids, bidirectional):
    n = len(ids)
    mask = torch.zeros(1, 1, n, n) if bidirectional else None
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor([ids]), attention_mask=mask).last_hidden_state[0]
    return torch.nn.functional.normalize(hidden.mean(dim=0), dim=-1)


def pooling_config(width, mode):
    modes = ["cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken"]
    config = {"word_embedding_dimension": width}
    config.update({f"pooling_mode_{m}": m == mode for m in modes})
    config["include_prompt"] = True
    return config


def write_fixture(name, model_cls, config, tok, pooling_mode, vector_of, model_type=None):
    """Builds `model_cls(config)` with random weights, writes it to tests/fixtures/embed/tiny-NAME/
    with `tok`, a 1_Pooling config for `pooling_mode` (and `model_type` / `architectures`
    rewritten when given), and reference.json from `vector_of(model, ids)` per text."""
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = model_cls(config).eval()
    randomise(model, gemma=False)
    out = OUT / f"tiny-{name}"
    (out / "1_Pooling").mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    if model_type is not None:
        written = json.loads((out / "config.json").read_text())
        written["model_type"], written["architectures"] = model_type
        (out / "config.json").write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
    tok.save(str(out / "tokenizer.json"))
    pooling = pooling_config(config.hidden_size, pooling_mode)
    (out / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2) + "\n")
    tok.enable_truncation(MAX_LEN)
    vectors, token_counts = [], []
    for text in TEXTS:
        ids = tok.encode(text).ids
        token_counts.append(len(ids))
        vectors.append(vector_of(model, ids).tolist())
    (out / "reference.json").write_text(
        json.dumps({"texts": TEXTS, "tokens": token_counts, "vectors": vectors}) + "\n"
    )
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"tiny-{name}: {size} bytes, tokens per text {token_counts}")


def pplx_qwen3() -> None:
    tok = train_tokenizer(bos=False, eos_in_template=False)
    config = Qwen3Config(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        rope_theta=1e6,
        max_position_embeddings=MAX_LEN,
        eos_token_id=tok.token_to_id("</s>"),
        bos_token_id=tok.token_to_id("<s>"),
        pad_token_id=tok.token_to_id("<pad>"),
        tie_word_embeddings=True,
    )

    def bidirectional_mean(model, ids):
        both = mean_pooled(model, ids, bidirectional=True)
        if len(ids) > 1:
            causal = mean_pooled(model, ids, bidirectional=False)
            assert (both - causal).abs().max() > 1e-3, f"{ids}: the mask changed nothing"
        return both

    write_fixture(
        "pplx-qwen3", Qwen3Model, config, tok, "mean_tokens", bidirectional_mean,
        model_type=("bidirectional_pplx_qwen3", ["PPLXQwen3Model"]),
    )


def eurobert() -> None:
    tok = train_tokenizer(bos=True, eos_in_template=True)
    config = EuroBertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 250000.0},
        max_position_embeddings=MAX_LEN,
        eos_token_id=tok.token_to_id("</s>"),
        bos_token_id=tok.token_to_id("<s>"),
        pad_token_id=tok.token_to_id("<pad>"),
        mask_token_id=tok.token_to_id("<unk>"),
    )

    def last_token(model, ids):
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
        return torch.nn.functional.normalize(hidden, dim=-1)

    write_fixture("eurobert", EuroBertModel, config, tok, "lasttoken", last_token)


def main() -> None:
    builders = {"pplx-qwen3": pplx_qwen3, "eurobert": eurobert}
    for name in sys.argv[1:] or builders:
        builders[name]()


if __name__ == "__main__":
    main()
