#!/usr/bin/env python3
"""Decoder embedders in bf16 on the CPU: `freshstack embed` against Hugging Face `transformers`
(PyTorch CPU, bf16, same threads) on the same token ids, with random weights in a real model's
layer shapes (no checkpoint download). Prints tokens/s, peak memory and the ratio per round (the
sides alternate; medians are reported), plus how close the two sets of vectors are.

    /work/venv-enc/bin/python benches/compare/decoder_vs_torch.py --corpus /tmp/laravel.jsonl \
        --shape qwen3-0.6b --limit 32 --threads 2

Shapes: `qwen3-0.6b` (Qwen3-Embedding-0.6B: hidden 1024, 28 layers, MLP 3072, 16/8 heads) and
`mistral-7b` (E5-Mistral-7B: hidden 4096, MLP 14336, 32/8 heads; `--layers` of its 32, default
2: multiply the time by 32 / layers for the whole model). The tokenizer is the tiny test
fixture's (a small vocabulary: texts are cut at `--max-length` tokens either way). Both sides
take the same ids: truncated to max length - 1, EOS appended, last-token pooling, L2 norm.
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import sys
import tempfile

from embed_vs_st import run_with_rss  # this directory is on sys.path when run as a script

ROOT = pathlib.Path(__file__).resolve().parents[2]

SHAPES = {
    "qwen3-0.6b": ("qwen3", dict(hidden_size=1024, intermediate_size=3072, num_attention_heads=16,
                                 num_key_value_heads=8, head_dim=128, num_hidden_layers=28)),
    "mistral-7b": ("mistral", dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                   num_key_value_heads=8, head_dim=128, num_hidden_layers=32)),
}

TORCH_CHILD = r"""
import json, sys, time
import numpy as np
import torch
torch.set_num_threads(int(sys.argv[3]))
from transformers import AutoModel
model_dir, ids_path, threads, budget, out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
t0 = time.perf_counter()
model = AutoModel.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
rows = json.load(open(ids_path))
t1 = time.perf_counter()
order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
vectors = [None] * len(rows)
with torch.inference_mode():
    start = 0
    while start < len(order):
        width = len(rows[order[start]])
        size = max(1, budget // max(width, 1))
        batch = order[start:start + size]
        start += size
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for r, i in enumerate(batch):
            ids[r, :len(rows[i])] = torch.tensor(rows[i])
            mask[r, :len(rows[i])] = 1
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
        for r, i in enumerate(batch):
            v = hidden[r, len(rows[i]) - 1].float()
            vectors[i] = (v / v.norm()).numpy()
t2 = time.perf_counter()
np.save(out, np.stack(vectors).astype(np.float32))
print(json.dumps({"load_s": t1 - t0, "embed_s": t2 - t1, "tokens": sum(map(len, rows))}))
"""


def make_model(shape: str, layers: int | None, out: pathlib.Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModel

    arch, dims = SHAPES[shape]
    tiny = ROOT / "tests" / "fixtures" / "embed" / f"tiny-{arch}"
    config = AutoConfig.from_pretrained(tiny)
    for key, value in dims.items():
        setattr(config, key, value)
    if layers:
        config.num_hidden_layers = layers
    if hasattr(config, "layer_types") and config.layer_types is not None:
        config.layer_types = ["full_attention"] * config.num_hidden_layers
    config.max_position_embeddings = 32768
    torch.manual_seed(0)
    model = AutoModel.from_config(config).to(torch.bfloat16).eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    shutil.copy(tiny / "tokenizer.json", out / "tokenizer.json")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-0.6b")
    parser.add_argument("--layers", type=int, default=None, help="layers to build (mistral-7b: 2)")
    parser.add_argument("--limit", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--max-batch-tokens", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--binary", default=str(ROOT / "target" / "release" / "freshstack"))
    args = parser.parse_args()
    layers = args.layers or (2 if args.shape == "mistral-7b" else None)

    from tokenizers import Tokenizer

    model_dir = pathlib.Path(tempfile.gettempdir()) / f"freshstack-{args.shape}-{layers or 'all'}l"
    if not (model_dir / "model.safetensors").is_file():
        make_model(args.shape, layers, model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    eos = config["eos_token_id"]
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="decoder-bench-"))
    subset = tmp / "docs.jsonl"
    with open(args.corpus, encoding="utf-8") as src:
        rows = [json.loads(line) for line in src if line.strip()][: args.limit]
    with open(subset, "w", encoding="utf-8") as dst:
        for row in rows:
            dst.write(json.dumps(row) + "\n")
    # The ids freshstack computes: title + " " + text (the title is empty here), truncated to
    # max length - 1, EOS appended unless already last.
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ids = []
    for row in rows:
        text = (row.get("title", "") + " " + row["text"]) if row.get("title") else row["text"]
        got = tokenizer.encode(text).ids[: args.max_length - 1]
        if not got or got[-1] != eos:
            got.append(eos)
        ids.append(got)
    ids_path = tmp / "ids.json"
    ids_path.write_text(json.dumps(ids))

    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads),
               MKL_NUM_THREADS=str(args.threads))
    ours_npy, theirs_npy = tmp / "ours.npy", tmp / "theirs.npy"
    ours_runs, theirs_runs = [], []
    for _ in range(max(1, args.rounds)):
        _, err, rss = run_with_rss(
            [args.binary, "embed", "--model", str(model_dir), "--model-dtype", "bf16", "--input",
             str(subset), "--out", str(ours_npy), "--max-length", str(args.max_length),
             "--max-batch-tokens", str(args.max_batch_tokens), "--threads", str(args.threads)], env)
        m = re.search(r": (\d+) tokens, \d+ truncated; load ([\d.]+)s, embed ([\d.]+)s", err)
        if not m:
            sys.exit(f"cannot parse freshstack output:\n{err}")
        ours_runs.append((float(m.group(3)), float(m.group(2)), int(m.group(1)), rss))
        out, _, rss = run_with_rss(
            [sys.executable, "-c", TORCH_CHILD, str(model_dir), str(ids_path), str(args.threads),
             str(args.max_batch_tokens), str(theirs_npy)], env)
        theirs = json.loads(out.strip().splitlines()[-1])
        theirs_runs.append((theirs["embed_s"], theirs["load_s"], theirs["tokens"], rss))
    print("embed seconds per round (ours / theirs): "
          + ", ".join(f"{o[0]:.2f} / {t[0]:.2f}" for o, t in zip(ours_runs, theirs_runs)))
    ours = sorted(ours_runs)[len(ours_runs) // 2]
    theirs = sorted(theirs_runs)[len(theirs_runs) // 2]
    if ours[2] != theirs[2]:
        print(f"WARNING: token counts differ (ours {ours[2]}, theirs {theirs[2]})")

    import numpy as np
    a, b = np.load(ours_npy), np.load(theirs_npy)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    n = len(rows)
    print(f"{n} documents, {ours[2]} tokens, max length {args.max_length}, {args.threads} threads, "
          f"shape {args.shape} ({layers or 'all'} layers), bf16")
    print(f"{'':22}{'tokens/s':>10}{'embed s':>10}{'load s':>9}{'peak MiB':>10}")
    print(f"{'freshstack':22}{ours[2] / ours[0]:10.1f}{ours[0]:10.2f}{ours[1]:9.2f}{ours[3] / 1024:10.0f}")
    print(f"{'transformers (torch)':22}{theirs[2] / theirs[0]:10.1f}{theirs[0]:10.2f}{theirs[1]:9.2f}"
          f"{theirs[3] / 1024:10.0f}")
    print(f"ratio of medians (ours / theirs): tokens/s {theirs[0] / ours[0]:.2f}x, "
          f"peak memory {ours[3] / theirs[3]:.2f}x")
    print(f"cosine ours vs theirs: min {cos.min():.6f}, mean {cos.mean():.6f}")


if __name__ == "__main__":
    main()
