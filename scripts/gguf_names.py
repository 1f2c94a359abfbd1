"""Hugging Face -> llama.cpp tensor names shared by the tiny GGUF fixture builders.

Per-layer pairs (`model.layers.{i}.HF.weight` -> `blk.{i}.GGUF.weight`) as llama.cpp's
convert_hf_to_gguf.py writes them.
"""

# A Qwen3 decoder layer (the LLM and the embedding model share it).
QWEN3_LAYER = [
    ("input_layernorm", "attn_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("self_attn.q_norm", "attn_q_norm"),
    ("self_attn.k_norm", "attn_k_norm"),
    ("post_attention_layernorm", "ffn_norm"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
]
