#!/usr/bin/env python3
"""Embeds the same documents with `freshstack embed` and with sentence-transformers (PyTorch,
CPU, same thread count) and prints docs/s, tokens/s, peak memory and the ratio, plus how close
the two sets of vectors are.

    scripts/setup.sh
    cargo run --release -- corpus --repo laravel/docs=DIR --out /tmp/laravel.jsonl --max-tokens 256
    cargo build --release
    /work/venv-enc/bin/python benches/compare/embed_vs_st.py --corpus /tmp/laravel.jsonl \
        --limit 500 --threads 2

Each side runs in its own process, timed from the first text to the last vector (model loading
excluded, reported separately); peak memory is that process's max RSS (wait4).
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]

ST_CHILD = r"""
import json, sys, time
import numpy as np
import torch
torch.set_num_threads(int(sys.argv[3]))
from sentence_transformers import SentenceTransformer
t0 = time.perf_counter()
model = SentenceTransformer(sys.argv[1], device="cpu")
model.max_seq_length = int(sys.argv[4])
def document_text(row):
    # As `freshstack embed` reads a corpus row: title + " " + text, or the non-blank one.
    title, text = row.get("title") or "", row.get("text") or ""
    if title.strip() and text.strip():
        return title + " " + text
    return text if text.strip() else title
texts = [document_text(json.loads(l)) for l in open(sys.argv[2], encoding="utf-8") if l.strip()]
t1 = time.perf_counter()
# A model with retrieval prompts (EmbeddingGemma) embeds documents with its document prompt, as
# `freshstack embed` does with a corpus.
prompt = "document" if "document" in (getattr(model, "prompts", None) or {}) else None
vectors = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                       prompt_name=prompt)
t2 = time.perf_counter()
prefix = model.prompts[prompt] if prompt else ""
tokens = sum(min(len(model.tokenizer(prefix + t)["input_ids"]), model.max_seq_length) for t in texts)
np.save(sys.argv[5], vectors.astype(np.float32))
print(json.dumps({"load_s": t1 - t0, "embed_s": t2 - t1, "tokens": tokens}))
"""


def run_with_rss(cmd, env):
    """Runs cmd under /usr/bin/time to get its max RSS in KiB."""
    timed = ["/usr/bin/time", "-f", "MAXRSS_KB=%M", *cmd]
    proc = subprocess.run(timed, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} failed:\n{proc.stderr}")
    rss = int(re.search(r"MAXRSS_KB=(\d+)", proc.stderr).group(1))
    return proc.stdout, proc.stderr, rss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--model", default=str(ROOT / "models" / "all-MiniLM-L6-v2"))
    parser.add_argument("--binary", default=str(ROOT / "target" / "release" / "freshstack"))
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternate the two sides this many times; each side's median is reported")
    args = parser.parse_args()

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="embed-bench-"))
    subset = tmp / "docs.jsonl"
    with open(args.corpus, encoding="utf-8") as src, open(subset, "w", encoding="utf-8") as dst:
        rows = [line for line in src if line.strip()][: args.limit]
        dst.writelines(rows)
    n = len(rows)
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads),
               MKL_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="true")

    ours_npy = tmp / "ours.npy"
    st_npy = tmp / "st.npy"
    # The sides alternate so that a slow spell of a shared machine hits both; medians are kept.
    ours_runs, st_runs = [], []
    for _ in range(max(1, args.rounds)):
        _, err, ours_rss = run_with_rss(
            [args.binary, "embed", "--model", args.model, "--input", str(subset), "--out", str(ours_npy),
             "--max-length", str(args.max_length), "--threads", str(args.threads)], env)
        m = re.search(r"embedded (\d+) .*?: (\d+) tokens, (\d+) truncated; load ([\d.]+)s, embed ([\d.]+)s", err)
        if not m:
            sys.exit(f"cannot parse freshstack output:\n{err}")
        ours_runs.append((float(m.group(5)), float(m.group(4)), int(m.group(2)), ours_rss))
        out, _, st_rss = run_with_rss(
            [sys.executable, "-c", ST_CHILD, args.model, str(subset), str(args.threads), str(args.max_length),
             str(st_npy)], env)
        st = json.loads(out.strip().splitlines()[-1])
        st_runs.append((st["embed_s"], st["load_s"], st["tokens"], st_rss))
    print("embed seconds per round (ours / theirs): "
          + ", ".join(f"{o[0]:.2f} / {t[0]:.2f}" for o, t in zip(ours_runs, st_runs)))
    ours_embed, ours_load, ours_tokens, ours_rss = sorted(ours_runs)[len(ours_runs) // 2]
    st_embed, st_load, st_tokens, st_rss = sorted(st_runs)[len(st_runs) // 2]
    st = {"embed_s": st_embed, "load_s": st_load, "tokens": st_tokens}

    import numpy as np
    ours_vec = np.load(ours_npy)
    st_vec = np.load(st_npy)
    cos = (ours_vec * st_vec).sum(1) / (np.linalg.norm(ours_vec, axis=1) * np.linalg.norm(st_vec, axis=1))

    print(f"{n} documents, max length {args.max_length}, {args.threads} threads, model {args.model}")
    print(f"{'':22}{'docs/s':>10}{'tokens/s':>12}{'embed s':>10}{'load s':>9}{'peak MiB':>10}")
    print(f"{'freshstack':22}{n / ours_embed:10.1f}{ours_tokens / ours_embed:12.0f}{ours_embed:10.2f}"
          f"{ours_load:9.2f}{ours_rss / 1024:10.0f}")
    print(f"{'sentence-transformers':22}{n / st['embed_s']:10.1f}{st['tokens'] / st['embed_s']:12.0f}"
          f"{st['embed_s']:10.2f}{st['load_s']:9.2f}{st_rss / 1024:10.0f}")
    print(f"ratio of medians (ours / theirs): docs/s {st['embed_s'] / ours_embed:.2f}x, peak memory {ours_rss / st_rss:.2f}x")
    print(f"cosine ours vs theirs: min {cos.min():.6f}, mean {cos.mean():.6f}")


if __name__ == "__main__":
    main()
