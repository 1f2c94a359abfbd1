#!/usr/bin/env python3
"""Builds tiny random-weight Qwen3 and Gemma 1, 2 and 3 causal language models with Hugging Face
`transformers`, writes each as a GGUF file (F32 tensors, llama.cpp's tensor names and metadata
keys, a tokenizer and a chat template in the metadata) under
tests/fixtures/gguf/, and records what `transformers` computes for a fixed chat prompt: the
rendered prompt, its token ids, the logits of the first generated position and the greedy
continuation (stopped at the same stop tokens as `LocalChat`). The Rust tests in tests/llm.rs
load the GGUF files with `LocalChat` and compare.

Tokenizers as the families ship them in GGUF: Qwen3 a gpt2 byte-level BPE (trained here with
`tokenizers`), Gemma-3 a SentencePiece BPE with byte fallback, no dummy prefix and whitespace
kept (trained here with `sentencepiece`; written as tokens, scores and token types, llama.cpp's
`llama` tokenizer model). The Gemma reference also records SentencePiece's ids for a few awkward
texts (unseen characters, emoji, runs of spaces, newlines) to check our rebuilt tokenizer.

The configs keep each family's quirks: Qwen3 q/k norms, an explicit head_dim and grouped-query
attention, an untied output head; Gemma 1 GELU (tanh), (1 + w) norms and the embedding scale;
Gemma 2 also post-norms, attention and final logit soft-capping (small caps, so they bite) and
sliding layers alternating with global ones; Gemma-3 (1 + w) norms (written as w + 1, as llama.cpp's
converter does), the sqrt(hidden) embedding scale, post-attention and post-feed-forward norms,
GELU (tanh) feed-forward, five sliding-window layers with a local RoPE base then one global
layer with linear RoPE scaling (as Gemma-3 4B and larger), tied embeddings. The sliding window
(16) is shorter than the prompt, so it matters while reading the prompt and while generating.

    /work/venv-enc/bin/pip install gguf
    /work/venv-enc/bin/python scripts/gen_tiny_gguf.py
"""
import json
import pathlib

import io

import jinja2
import numpy as np
import sentencepiece as spm
import torch
from gguf import GGUFWriter, GGMLQuantizationType
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GemmaConfig,
    GemmaForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from gguf_names import QWEN3_LAYER

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "gguf"
CONTEXT = 256
MAX_NEW = 16

CORPUS = [
    "How do I define a route with a parameter in Laravel?",
    "Eloquent relationships: hasMany, belongsTo and many-to-many pivot tables.",
    "The queue worker stops after processing jobs; use Supervisor to keep it running.",
    'Answer with JSON: {"nuggets": ["a fact", "another fact"]}',
    "SELECT id, name FROM users WHERE email LIKE '%@example.com';",
    "You are a careful assistant. Write the key facts of the answer.",
]
MESSAGES = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "How do I keep the queue worker running? Answer with JSON."},
]

# Minimal transcriptions of the families' chat templates (the parts our renderer relies on).
QWEN3_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)
GEMMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)
# The markers LocalChat stops at (besides tokenizer.ggml.eos_token_id).
STOP_MARKERS = ["<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|endoftext|>", "</s>"]


def train_tokenizer(specials: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    return tok


def randomise(model: torch.nn.Module, gemma: bool, seed: int = 1234) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            # Gemma: wide norm weights so that the layers outweigh the tied, scaled embedding
            # (else the greedy answer just repeats a token).
            if "norm" in name:
                p.copy_(noise * 3.0 if gemma else 1.0 + noise * 0.1)
            else:
                p.copy_(noise * (0.1 if gemma else 0.5))


def greedy(model, prompt_ids: list[int], stop_ids: set[int]):
    ids = list(prompt_ids)
    first_logits = None
    out = []
    margins = []
    with torch.no_grad():
        for _ in range(MAX_NEW):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            if first_logits is None:
                first_logits = logits.tolist()
            top = torch.topk(logits, 2).values
            margins.append(float(top[0] - top[1]))
            nxt = int(torch.argmax(logits))
            if nxt in stop_ids:
                break
            out.append(nxt)
            ids.append(nxt)
    print(f"  smallest top-1/top-2 logit margin along the greedy path: {min(margins):.4f}")
    return out, first_logits


def gpt2_metadata(tok: Tokenizer) -> list:
    vocab = tok.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    specials = {t.content for t in tok.get_added_tokens_decoder().values()}
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [
        ("string", "tokenizer.ggml.model", "gpt2"),
        ("array", "tokenizer.ggml.tokens", tokens),
        ("array", "tokenizer.ggml.merges", [" ".join(m) if isinstance(m, list) else m for m in merges]),
        ("array", "tokenizer.ggml.token_type", [3 if t in specials else 1 for t in tokens]),
    ]


def write_gguf(path, arch, name, tokenizer_meta, template, eos, meta, tensors):
    w = GGUFWriter(str(path), arch)
    w.add_string("general.name", name)
    for key, (kind, value) in meta.items():
        getattr(w, f"add_{kind}")(f"{arch}.{key}", value)
    for kind, key, value in tokenizer_meta:
        getattr(w, f"add_{kind}")(key, value)
    w.add_uint32("tokenizer.ggml.eos_token_id", eos)
    w.add_string("tokenizer.chat_template", template)
    for tname, t in tensors:
        w.add_tensor(tname, t.detach().to(torch.float32).numpy().astype(np.float32), raw_dtype=GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def layer_tensors(sd, n_layers, names, norm_shift):
    out = []
    for i in range(n_layers):
        for hf, gg in names:
            t = sd[f"model.layers.{i}.{hf}.weight"]
            if gg.endswith("norm"):
                t = t + norm_shift
            out.append((f"blk.{i}.{gg}.weight", t))
    return out


def finish(arch, encode, decode, vocab, model, template_src, render_kwargs, bos_token, gguf_path, extra=None):
    prompt = jinja2.Environment().from_string(template_src).render(
        messages=MESSAGES, add_generation_prompt=True, bos_token=bos_token, **render_kwargs
    )
    prompt_ids = encode(prompt)
    stop_ids = {vocab[m] for m in STOP_MARKERS if m in vocab}
    tokens, logits = greedy(model, prompt_ids, stop_ids)
    reference = {
        "messages": MESSAGES,
        "prompt": prompt,
        "prompt_ids": prompt_ids,
        "greedy_ids": tokens,
        "greedy_text": decode(tokens),
        "first_logits": logits,
        **(extra or {}),
    }
    (OUT / f"tiny-{arch}.json").write_text(json.dumps(reference) + "\n")
    print(f"{gguf_path.name}: {gguf_path.stat().st_size} bytes, prompt {len(prompt_ids)} tokens, greedy {tokens}")


def qwen3() -> None:
    tok = train_tokenizer(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"])
    vocab = tok.get_vocab()
    cfg = Qwen3Config(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        max_position_embeddings=CONTEXT,
        rope_theta=1e6,
        tie_word_embeddings=False,
        eos_token_id=vocab["<|im_end|>"],
    )
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg).eval()
    randomise(model, gemma=False)
    sd = model.state_dict()
    tensors = [("token_embd.weight", sd["model.embed_tokens.weight"])]
    tensors += layer_tensors(sd, cfg.num_hidden_layers, QWEN3_LAYER, 0.0)
    tensors += [("output_norm.weight", sd["model.norm.weight"]), ("output.weight", sd["lm_head.weight"])]
    meta = {
        "context_length": ("uint32", CONTEXT),
        "embedding_length": ("uint32", cfg.hidden_size),
        "block_count": ("uint32", cfg.num_hidden_layers),
        "feed_forward_length": ("uint32", cfg.intermediate_size),
        "attention.head_count": ("uint32", cfg.num_attention_heads),
        "attention.head_count_kv": ("uint32", cfg.num_key_value_heads),
        "attention.key_length": ("uint32", cfg.head_dim),
        "attention.value_length": ("uint32", cfg.head_dim),
        "attention.layer_norm_rms_epsilon": ("float32", cfg.rms_norm_eps),
        "rope.freq_base": ("float32", 1e6),
    }
    path = OUT / "tiny-qwen3.gguf"
    write_gguf(path, "qwen3", "tiny-qwen3", gpt2_metadata(tok), QWEN3_TEMPLATE, vocab["<|im_end|>"], meta, tensors)
    finish(
        "qwen3",
        lambda text: tok.encode(text).ids,
        lambda ids: tok.decode(ids, skip_special_tokens=True),
        vocab,
        model,
        QWEN3_TEMPLATE,
        {"enable_thinking": False},
        "",
        path,
    )


# Chosen so that no greedy step is a near tie (see the margin printed).
GEMMA_SEED = 1234
GEMMA_CONTROL = ["<pad>", "<eos>", "<bos>", "<unk>"]
GEMMA_USER = ["<start_of_turn>", "<end_of_turn>"]
SPM_TEXTS = [
    "How do I keep the queue worker running?",
    "  two leading spaces,   three inside and a trailing one ",
    "line one\nline two\n\n\tindented",
    "naïve café Zürich — 東京 🚀 émoji",
    "1234567890 0.5 -3e10",
    "<start_of_turn>user\nhi<end_of_turn>\n",
]


def train_spm():
    """A SentencePiece BPE model the way Gemma's is set up: byte fallback, no dummy prefix,
    whitespace and characters kept as they are."""
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 4 + [MESSAGES[0]["content"], MESSAGES[1]["content"]]),
        model_writer=buf,
        model_type="bpe",
        vocab_size=500,
        byte_fallback=True,
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        split_digits=True,
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        pad_piece="<pad>",
        eos_piece="<eos>",
        bos_piece="<bos>",
        unk_piece="<unk>",
        user_defined_symbols=GEMMA_USER,
        allow_whitespace_only_pieces=True,
        minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_proto=buf.getvalue())


def spm_metadata(sp) -> list:
    n = sp.get_piece_size()
    tokens = [sp.id_to_piece(i) for i in range(n)]
    scores = [float(sp.get_score(i)) for i in range(n)]

    def kind(i):
        if sp.is_control(i):
            return 3
        if sp.is_unknown(i):
            return 2
        if sp.is_byte(i):
            return 6
        if sp.is_unused(i):
            return 5
        if tokens[i] in GEMMA_USER:
            return 4
        return 1

    return [
        ("string", "tokenizer.ggml.model", "llama"),
        ("array", "tokenizer.ggml.tokens", tokens),
        ("array", "tokenizer.ggml.scores", scores),
        ("array", "tokenizer.ggml.token_type", [kind(i) for i in range(n)]),
        ("bool", "tokenizer.ggml.add_space_prefix", False),
    ]


def spm_encode(sp, text: str) -> list[int]:
    """SentencePiece ids of `text`, control tokens (`<bos>`...) matched whole as llama.cpp does
    (SentencePiece itself would spell them out)."""
    ids = []
    rest = text
    while rest:
        hits = [(rest.find(c), c) for c in GEMMA_CONTROL if c in rest]
        if not hits:
            ids += sp.encode(rest)
            break
        at, c = min(hits)
        if at:
            ids += sp.encode(rest[:at])
        ids.append(sp.piece_to_id(c))
        rest = rest[at + len(c):]
    return ids


def gemma(arch: str) -> None:
    """Gemma 1 (`gemma`), Gemma 2 (`gemma2`) or Gemma 3 (`gemma3`)."""
    sp = train_spm()
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    common = dict(
        vocab_size=sp.get_piece_size(),
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        max_position_embeddings=CONTEXT,
        hidden_activation="gelu_pytorch_tanh",
        tie_word_embeddings=True,
        pad_token_id=vocab["<pad>"],
        eos_token_id=vocab["<eos>"],
        bos_token_id=vocab["<bos>"],
    )
    meta = {}
    if arch == "gemma3":
        layers = 6
        cfg = Gemma3TextConfig(
            **common,
            num_hidden_layers=layers,
            query_pre_attn_scalar=16,
            sliding_window=16,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
            },
            final_logit_softcapping=None,
            attn_logit_softcapping=None,
        )
        model_cls = Gemma3ForCausalLM
        meta = {
            "attention.sliding_window": ("uint32", 16),
            "rope.freq_base": ("float32", 1e6),
            "rope.scaling.type": ("string", "linear"),
            "rope.scaling.factor": ("float32", 8.0),
        }
    elif arch == "gemma2":
        # Small caps so that soft-capping changes the numbers; even layers slide.
        layers = 3
        cfg = Gemma2Config(
            **common,
            num_hidden_layers=layers,
            query_pre_attn_scalar=16,
            sliding_window=16,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=3.0,
            rope_theta=10000.0,
        )
        model_cls = Gemma2ForCausalLM
        meta = {
            "attention.sliding_window": ("uint32", 16),
            "attn_logit_softcapping": ("float32", 2.0),
            "final_logit_softcapping": ("float32", 3.0),
            "rope.freq_base": ("float32", 10000.0),
        }
    else:
        # No RoPE base in the metadata: llama.cpp's Gemma converter writes none (10000).
        layers = 2
        cfg = GemmaConfig(**common, num_hidden_layers=layers, rope_theta=10000.0)
        model_cls = GemmaForCausalLM
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = model_cls(cfg).eval()
    randomise(model, gemma=True, seed=GEMMA_SEED)
    sd = model.state_dict()
    names = [
        ("input_layernorm", "attn_norm"),
        ("self_attn.q_proj", "attn_q"),
        ("self_attn.k_proj", "attn_k"),
        ("self_attn.v_proj", "attn_v"),
        ("self_attn.o_proj", "attn_output"),
        ("mlp.gate_proj", "ffn_gate"),
        ("mlp.up_proj", "ffn_up"),
        ("mlp.down_proj", "ffn_down"),
    ]
    if arch == "gemma":
        names += [("post_attention_layernorm", "ffn_norm")]
    else:
        names += [
            ("post_attention_layernorm", "post_attention_norm"),
            ("pre_feedforward_layernorm", "ffn_norm"),
            ("post_feedforward_layernorm", "post_ffw_norm"),
        ]
    if arch == "gemma3":
        names += [("self_attn.q_norm", "attn_q_norm"), ("self_attn.k_norm", "attn_k_norm")]
    tensors = [("token_embd.weight", sd["model.embed_tokens.weight"])]
    tensors += layer_tensors(sd, layers, names, 1.0)
    tensors += [("output_norm.weight", sd["model.norm.weight"] + 1.0)]
    meta = {
        "context_length": ("uint32", CONTEXT),
        "embedding_length": ("uint32", cfg.hidden_size),
        "block_count": ("uint32", layers),
        "feed_forward_length": ("uint32", cfg.intermediate_size),
        "attention.head_count": ("uint32", cfg.num_attention_heads),
        "attention.head_count_kv": ("uint32", cfg.num_key_value_heads),
        "attention.key_length": ("uint32", cfg.head_dim),
        "attention.value_length": ("uint32", cfg.head_dim),
        "attention.layer_norm_rms_epsilon": ("float32", cfg.rms_norm_eps),
        **meta,
    }
    path = OUT / f"tiny-{arch}.gguf"
    write_gguf(path, arch, f"tiny-{arch}", spm_metadata(sp), GEMMA3_TEMPLATE, vocab["<eos>"], meta, tensors)
    special = {sp.piece_to_id(c) for c in GEMMA_CONTROL + GEMMA_USER}
    finish(
        arch,
        lambda text: spm_encode(sp, text),
        lambda ids: sp.decode([i for i in ids if i not in special]),
        vocab,
        model,
        GEMMA3_TEMPLATE,
        {},
        "<bos>",
        path,
        {"tokenize": [[t, spm_encode(sp, t)] for t in SPM_TEXTS]},
    )


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    qwen3()
    for arch in ["gemma", "gemma2", "gemma3"]:
        gemma(arch)


if __name__ == "__main__":
    main()
