#!/usr/bin/env bash
# A GGUF embedding model through `freshstack embed` and through llama.cpp's `llama-embedding`, on
# the same documents and thread count: vectors compared row by row (cosine) and speed.
#
# usage: benches/compare/embed_vs_llamacpp.sh --corpus FILE [--limit N] [--threads N]
#            [--rounds N] [--model FILE.gguf] [--prefix TEXT]
#
#   scripts/setup.sh --with-encoders        # models/nomic-embed-text-v1.5.f16.gguf
#   scripts/setup-llama-server.sh           # llama-embedding
#   cargo run --release -- corpus --repo me/freshstack=. --max-tokens 256 --out /tmp/fs.jsonl
#   benches/compare/embed_vs_llamacpp.sh --corpus /tmp/fs.jsonl --limit 500 --threads 2
#
# Each document is read as `freshstack embed` reads a corpus row (title + " " + text) and given
# the document prefix of the model's card (--prefix, default nomic-embed's "search_document: "),
# so both sides embed the same strings. llama-embedding gets them in one prompt file split by a
# separator no document holds, mean pooling, L2 normalisation, a 2048-token context and batch.
# Rounds alternate the two sides; each side's median wall time (process start to exit, model load
# included on both) and its compute time (ours: the `embed` time it prints; llama.cpp: from its
# first batch's log stamp to exit) are printed, with the ratios. Needs python3 with
# numpy (the torch venv of embed_vs_st.py has it). llama.cpp: $FRESHSTACK_LLAMA_CPP_BIN, else the
# newest ${FRESHSTACK_CACHE:-~/.cache/freshstack}/llama.cpp/*/bin. freshstack: $FRESHSTACK_BIN,
# else this checkout's release build.
set -euo pipefail
cd "$(dirname "$0")/../.."

corpus=""
limit=500
threads=2
rounds=3
model="models/nomic-embed-text-v1.5.f16.gguf"
prefix="search_document: "
while [[ $# -gt 0 ]]; do
    case "$1" in
        --corpus) corpus="$2"; shift 2 ;;
        --limit) limit="$2"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --model) model="$2"; shift 2 ;;
        --prefix) prefix="$2"; shift 2 ;;
        *) echo "embed_vs_llamacpp: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ -n "$corpus" ]] || { echo "embed_vs_llamacpp: --corpus FILE is required" >&2; exit 2; }
[[ -f "$model" ]] || { echo "embed_vs_llamacpp: $model is missing (scripts/setup.sh --with-encoders)" >&2; exit 2; }

bin_dir="${FRESHSTACK_LLAMA_CPP_BIN:-}"
if [[ -z "$bin_dir" ]]; then
    bin_dir="$(ls -d "${FRESHSTACK_CACHE:-$HOME/.cache/freshstack}"/llama.cpp/*/bin 2>/dev/null | sort | tail -1)"
fi
llama="$bin_dir/llama-embedding"
[[ -x "$llama" ]] || { echo "embed_vs_llamacpp: no llama-embedding (run scripts/setup-llama-server.sh)" >&2; exit 2; }
freshstack="${FRESHSTACK_BIN:-target/release/freshstack}"
[[ -x "$freshstack" ]] || cargo build --release --quiet

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
separator="<|freshstack-document-separator|>"
python3 - "$corpus" "$limit" "$prefix" "$separator" "$tmp" <<'PY'
import json, sys
corpus, limit, prefix, separator, tmp = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
rows = [line for line in open(corpus, encoding="utf-8") if line.strip()][:limit]
def document_text(row):
    title, text = row.get("title") or "", row.get("text") or ""
    if title.strip() and text.strip():
        return title + " " + text
    return text if text.strip() else title
texts = [prefix + document_text(json.loads(line)) for line in rows]
if any(separator in t for t in texts):
    sys.exit("embed_vs_llamacpp: a document holds the separator")
open(f"{tmp}/docs.jsonl", "w", encoding="utf-8").writelines(rows)
open(f"{tmp}/prompts.txt", "w", encoding="utf-8").write(separator.join(texts))
PY

now() { date +%s.%N; }
ours_wall=() ours_compute=() theirs_wall=() theirs_compute=()
for round in $(seq 1 "$rounds"); do
    start="$(now)"
    RAYON_NUM_THREADS="$threads" "$freshstack" embed --model "$model" --input "$tmp/docs.jsonl" \
        --out "$tmp/ours.npy" --threads "$threads" 2>"$tmp/ours.log"
    ours_wall+=("$(echo "$(now) - $start" | bc)")
    ours_compute+=("$(grep -o 'embed [0-9.]*s' "$tmp/ours.log" | tail -1 | tr -dc '0-9.')")
    start="$(now)"
    "$llama" -m "$model" -f "$tmp/prompts.txt" --embd-separator "$separator" --embd-normalize 2 \
        --embd-output-format array --pooling mean -t "$threads" -c 2048 -b 2048 --no-warmup \
        >"$tmp/theirs.json" 2>"$tmp/theirs.log"
    theirs_wall+=("$(echo "$(now) - $start" | bc)")
    # Its compute: from the first batch's log stamp (minutes.seconds.ms.us since start) to exit.
    first="$(grep -m1 'batch_decode' "$tmp/theirs.log" | awk -F'[. ]' '{print $1 * 60 + $2 + $3 / 1e3 + $4 / 1e6}')"
    theirs_compute+=("$(echo "${theirs_wall[-1]} - $first" | bc)")
    echo "round $round: freshstack ${ours_wall[-1]} s (embed ${ours_compute[-1]} s), llama.cpp ${theirs_wall[-1]} s (batches ${theirs_compute[-1]} s)"
done

python3 - "$tmp" "${ours_wall[*]}" "${ours_compute[*]}" "${theirs_wall[*]}" "${theirs_compute[*]}" "$threads" "$model" <<'PY'
import json, statistics, sys
import numpy as np
tmp, ours_wall, ours_compute, theirs_wall, theirs_compute, threads, model = sys.argv[1:]
med = lambda s: statistics.median(float(x) for x in s.split())
ours = np.load(f"{tmp}/ours.npy").astype(np.float64)
# The vectors are one line, "[[...],...,[...]]"; log lines may come before or after it.
(line,) = [l for l in open(f"{tmp}/theirs.json", encoding="utf-8") if l.startswith("[[")]
theirs = np.array(json.loads(line), dtype=np.float64)
if ours.shape != theirs.shape:
    sys.exit(f"embed_vs_llamacpp: shapes differ: ours {ours.shape}, llama.cpp {theirs.shape}")
cos = (ours * theirs).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
n = ours.shape[0]
print(f"{n} documents, {threads} threads, {model}")
print(f"cosine freshstack vs llama.cpp: min {cos.min():.7f}, mean {cos.mean():.7f}")
# llama.cpp's WordPiece tokenizer drops a backslash where BERT's tokenizer (ours, the model's
# own) keeps it as a token: those documents are not the same input on both sides.
rows = [json.loads(l) for l in open(f"{tmp}/docs.jsonl", encoding="utf-8")]
plain = np.array(["\\" not in (r.get("title") or "") + (r.get("text") or "") for r in rows])
if plain.any():
    print(f"  on the {plain.sum()} documents without a backslash: min {cos[plain].min():.7f}, "
          f"mean {cos[plain].mean():.7f}")
worst = np.argsort(cos)[:3]
print("  lowest: " + ", ".join(f"row {i} ({cos[i]:.5f}{', has a backslash' if not plain[i] else ''})" for i in worst))
ow, oc, tw, tc = med(ours_wall), med(ours_compute), med(theirs_wall), med(theirs_compute)
print(f"median wall s: freshstack {ow:.2f}, llama.cpp {tw:.2f} -> {tw / ow:.2f}x")
print(f"median compute s: freshstack embed {oc:.2f}, llama.cpp batches {tc:.2f} -> {tc / oc:.2f}x")
PY
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
