#!/usr/bin/env python3
"""Builds two tiny random-weight cross-encoders with Hugging Face `transformers` and writes
tests/fixtures/rerank/tiny-<kind>/ with config.json, model.safetensors, tokenizer.json (a small
tokenizer trained here) and reference.json: the relevance logit of (query, document) pairs,
computed one pair at a time in float32 with the document truncated to fit MAX_LEN tokens
(`only_second`, as `freshstack rerank` does).

- tiny-bert: BertForSequenceClassification (bert + pooler + classifier), the layout of
  cross-encoder/ms-marco-MiniLM-L-6-v2; WordPiece tokenizer, `[CLS] q [SEP] d [SEP]` with
  segment ids 0/1.
- tiny-xlmr: XLMRobertaForSequenceClassification (roberta + dense/tanh/out_proj head), the layout
  of BAAI/bge-reranker-base and -v2-m3; Unigram tokenizer with `<pad>` = 1, so positions start at
  padding_idx + 1 = 2; `<s> q </s></s> d </s>`, one segment.

    /work/venv-enc/bin/python scripts/gen_tiny_rerankers.py
"""
import json
import pathlib

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    XLMRobertaConfig,
    XLMRobertaForSequenceClassification,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "rerank"
MAX_LEN = 40

CORPUS = [
    "How do I define a route with a parameter in Laravel?",
    "Eloquent relationships: hasMany, belongsTo and many-to-many pivot tables.",
    "The queue worker stops after processing jobs; use Supervisor to keep it running.",
    "def fibonacci(n): a, b = 0, 1; return a",
    "SELECT id, name FROM users WHERE email LIKE '%@example.com';",
    "Blade templates escape output; middleware filters HTTP requests.",
    "Angular signals update the view when a computed value changes.",
]
PAIRS = [
    ["route parameter", "Route::get('/user/{id}', fn ($id) => $id); defines a route parameter."],
    ["route parameter", "SELECT name FROM users;"],
    ["How do I keep the queue worker running?", "Use Supervisor to keep the queue worker running."],
    ["How do I keep the queue worker running?", "a"],
    # The document is far longer than MAX_LEN tokens: truncated, the query kept whole.
    ["queue worker", " ".join(["the queue worker processes jobs and writes logs"] * 8)],
    ["Eloquent pivot tables", "many-to-many relationships use a pivot table in Eloquent models"],
    ["signals", "Angular signals update the view when a computed value changes."],
]


def randomise(model: torch.nn.Module) -> None:
    gen = torch.Generator().manual_seed(4321)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen) * 0.2
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + noise)
            else:
                p.copy_(noise)


def wordpiece_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=180, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return tok


def unigram_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=160, special_tokens=["<s>", "<pad>", "</s>", "<unk>"], unk_token="<unk>"
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    assert tok.token_to_id("<pad>") == 1
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", bos), ("</s>", eos)],
    )
    return tok


def build(name: str, tok: Tokenizer, config, model_cls) -> None:
    config.vocab_size = tok.get_vocab_size()
    config.num_labels = 1
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = model_cls(config).eval()
    randomise(model)
    out = OUT / f"tiny-{name}"
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save(str(out / "tokenizer.json"))

    tok.enable_truncation(MAX_LEN, strategy="only_second")
    scores, token_counts, truncated = [], [], []
    for query, doc in PAIRS:
        enc = tok.encode(query, doc)
        token_counts.append(len(enc.ids))
        truncated.append(bool(enc.overflowing))
        with torch.no_grad():
            logits = model(
                input_ids=torch.tensor([enc.ids]),
                token_type_ids=torch.tensor([enc.type_ids]),
                attention_mask=torch.ones(1, len(enc.ids), dtype=torch.long),
            ).logits
        scores.append(float(logits[0, 0]))
    (out / "reference.json").write_text(
        json.dumps(
            {"max_length": MAX_LEN, "pairs": PAIRS, "tokens": token_counts, "truncated": truncated, "scores": scores}
        )
        + "\n"
    )
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"tiny-{name}: {size} bytes, tokens per pair {token_counts}, scores {scores}")


def embed_reference() -> None:
    """tiny-xlmr's backbone as an embedder (BGE-M3 style: CLS pooling, L2-normalised), for the
    `embed` path of XLM-RoBERTa: embed_reference.json next to the model."""
    from transformers import XLMRobertaModel

    out = OUT / "tiny-xlmr"
    model = XLMRobertaModel.from_pretrained(out, add_pooling_layer=False).eval()
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    tok.enable_truncation(MAX_LEN)
    texts = [q for q, _ in PAIRS] + [PAIRS[4][1]]
    vectors, tokens = [], []
    for text in texts:
        ids = tok.encode(text).ids
        tokens.append(len(ids))
        with torch.no_grad():
            cls = model(input_ids=torch.tensor([ids])).last_hidden_state[0, 0]
        vectors.append(torch.nn.functional.normalize(cls, dim=-1).tolist())
    (out / "embed_reference.json").write_text(
        json.dumps({"texts": texts, "tokens": tokens, "vectors": vectors}) + "\n"
    )


def main() -> None:
    common = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    bert_tok = wordpiece_tokenizer()
    build(
        "bert",
        bert_tok,
        BertConfig(**common, max_position_embeddings=MAX_LEN, type_vocab_size=2,
                   pad_token_id=bert_tok.token_to_id("[PAD]")),
        BertForSequenceClassification,
    )
    xlmr_tok = unigram_tokenizer()
    build(
        "xlmr",
        xlmr_tok,
        XLMRobertaConfig(
            **common,
            max_position_embeddings=MAX_LEN + 2,
            type_vocab_size=1,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            layer_norm_eps=1e-5,
        ),
        XLMRobertaForSequenceClassification,
    )
    embed_reference()


if __name__ == "__main__":
    main()
