#!/usr/bin/env bash
# HNSW on real embeddings (issue 20's last target): recall@10 at the default ef, against exact
# search and against hnswlib, on all-MiniLM-L6-v2 vectors of real source code.
#
#   benches/compare/hnsw_real_embeddings.sh [--docs 50000] [--queries 1000] [--device cpu|cuda]
#                                           [--max-length 256] [--threads N]
#                                           [FRESHSTACK_BINARY] [WORKDIR]
#
# 1. `freshstack corpus` chunks every crate under ~/.cargo/registry/src (or $CODE_ROOT: one
#    directory per repository) into 256-token documents of the model's own tokenizer, so no
#    chunk is truncated when embedded;
# 2. splits by crate (versions of one crate grouped, seeded shuffle): whole crates go to the
#    documents until --docs chunks, and --queries chunks are sampled from crates that are NOT
#    among the documents (held out, so no query has its own copy in the index);
# 3. embeds both with `freshstack embed` (all-MiniLM-L6-v2 from models/, max length 256, or
#    --max-length 128, the length the model was trained at, for half the time; one CPU core does
#    ~1,500 tokens/s, so 50,000 chunks of ~200 tokens take ~115 core-minutes at 256; `--device
#    cuda` on a GPU build takes about a minute);
# 4. runs benches/compare/hnsw_vs_hnswlib.py --vectors on them (M 16, ef_construction 200, ef
#    swept over 32-256; the default ef of `retrieve` is 128).
# Each step is skipped when its output exists in WORKDIR (default ~/.cache/freshstack-hnsw-real,
# outside the repository), so an interrupted run resumes. Needs python3 with numpy and hnswlib
# (the reference venv, ~/.cache/freshstack-refenv).
set -euo pipefail
DOCS=50000
QUERIES=1000
DEVICE=cpu
MAX_LENGTH=256
THREADS=()
while [ $# -gt 0 ]; do
  case $1 in
    --docs) DOCS=$2; shift 2 ;;
    --queries) QUERIES=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    --max-length) MAX_LENGTH=$2; shift 2 ;;
    --threads) THREADS=(--threads "$2"); shift 2 ;;
    *) break ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(realpath "${1:-$ROOT/target/release/freshstack}")
WORK=${2:-$HOME/.cache/freshstack-hnsw-real}
MODEL=$ROOT/models/all-MiniLM-L6-v2
CODE_ROOT=${CODE_ROOT:-$(echo "$HOME"/.cargo/registry/src/*/ | cut -d' ' -f1)}
PY=${PYTHON:-python3}
[ -d "$MODEL" ] || { echo "hnsw_real_embeddings: $MODEL is missing (run scripts/setup.sh)" >&2; exit 2; }
mkdir -p "$WORK" && cd "$WORK"

if [ ! -s all.jsonl ]; then
  repos=()
  for dir in "$CODE_ROOT"/*/; do
    name=$(basename "$dir")
    repos+=(--repo "code/${name//+/_}=$dir")
  done
  echo "corpus: ${#repos[@]} repositories under $CODE_ROOT" >&2
  "$BIN" corpus "${repos[@]}" --out all.jsonl --max-tokens 256 \
    --tokenizer "hf:$MODEL/tokenizer.json" --summary corpus-summary.json
fi

if [ ! -s docs.jsonl ] || [ ! -s queries.jsonl ]; then
  "$PY" - "$DOCS" "$QUERIES" <<'PY'
import collections, json, random, re, sys
docs_wanted, queries_wanted = int(sys.argv[1]), int(sys.argv[2])
groups = collections.OrderedDict()
for line in open("all.jsonl"):
    repo = json.loads(line)["_id"].split("/")[1]
    crate = re.sub(r"-\d+(\.\d+)*.*$", "", repo)  # anyhow-1.0.102 and anyhow-1.0.105: one group
    groups.setdefault(crate, []).append(line)
names = sorted(groups)
random.Random(20).shuffle(names)
docs, held = [], []
for name in names:
    (docs if len(docs) < docs_wanted else held).extend(groups[name])
docs = docs[:docs_wanted]
queries = random.Random(21).sample(held, queries_wanted)
open("docs.jsonl", "w").writelines(docs)
open("queries.jsonl", "w").writelines(queries)
print(f"{len(docs)} document chunks, {len(queries)} held-out query chunks "
      f"(from {len(held)} chunks of crates not among the documents)", file=sys.stderr)
PY
fi

for kind in queries docs; do
  if [ ! -s "$kind.npy" ]; then
    /usr/bin/time -f "embed $kind: %e s wall, %M KiB peak RSS" \
      "$BIN" "${THREADS[@]}" embed --model "$MODEL" --input "$kind.jsonl" --out "$kind.npy" \
      --max-length "$MAX_LENGTH" \
      --device "$DEVICE"
  fi
done

"$PY" "$ROOT/benches/compare/hnsw_vs_hnswlib.py" --vectors docs.npy --query-vectors queries.npy \
  --bin "$BIN" --efs 32,64,128,256 --repeat 2
