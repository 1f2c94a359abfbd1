#!/usr/bin/env bash
# Disk and memory per document of each artefact of a build, on real chunks, for the README's
# "Scaling to millions of documents" section (figures per million chunks are extrapolated
# linearly from these).
#
#   benches/compare/scale_index.sh [FRESHSTACK_BINARY] [WORKDIR]
#
# 1. chunks the PHP manual (../shared/corpora/php-doc-en.tar.gz) into a corpus;
# 2. builds a BM25 index of it;
# 3. tiles real all-MiniLM-L6-v2 vectors (tests/fixtures/embed/minilm_reference.json, made by
#    sentence-transformers) plus small seeded noise, renormalised, to one f16 row per chunk, so
#    that the HNSW graph of the whole corpus can be built without embedding all of it (the
#    graph's size depends on the row count, the dimension and M, not on the values);
# 4. builds BM25 + vectors + HNSW, and runs 200 queries (BM25 and HNSW) against it;
# printing wall time, peak RSS (GNU time) and sizes on disk. Needs python3 with numpy.
set -euo pipefail
BIN=${1:-target/release/freshstack}
WORK=${2:-/tmp/freshstack-scale}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(realpath "$BIN")
PY=${PYTHON:-python3}
mkdir -p "$WORK" && cd "$WORK"
measure() { # label, command...
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o time.txt "$@" > /dev/null 2> log.txt || { cat log.txt; exit 1; }
  read -r secs kb < time.txt
  printf '%-28s %8.1f s %9.1f MiB peak RSS\n' "$label" "$secs" "$(echo "$kb / 1024" | bc -l)"
}
test -d php-doc-en || tar xzf "$ROOT/../shared/corpora/php-doc-en.tar.gz"
measure "corpus" "$BIN" corpus --repo php/doc-en=php-doc-en --out corpus.jsonl --summary summary.json
N=$(wc -l < corpus.jsonl)
rm -rf idx-bm25 idx-all
measure "index --bm25" "$BIN" index --corpus corpus.jsonl --index idx-bm25 --bm25
"$PY" - "$N" "$ROOT/tests/fixtures/embed/minilm_reference.json" <<'PY'
import json, sys, numpy as np
n = int(sys.argv[1])
real = np.array(json.load(open(sys.argv[2]))["vectors"], dtype=np.float32)
rng = np.random.default_rng(0)
rows = real[np.arange(n) % len(real)] + rng.normal(0, 0.05, (n, real.shape[1])).astype(np.float32)
rows /= np.linalg.norm(rows, axis=1, keepdims=True)
np.save("tiled.npy", rows.astype(np.float16))
with open("corpus.jsonl") as f, open("tiled.ids", "w") as out:
    for line in f:
        out.write(json.loads(line)["_id"] + "\n")
PY
measure "index --bm25 --vectors (HNSW)" "$BIN" index --corpus corpus.jsonl --index idx-all --bm25 \
  --vectors minilm=tiled.npy
"$PY" - <<'PY'
import json, numpy as np
with open("corpus.jsonl") as f, open("queries.jsonl", "w") as out:
    for i, line in enumerate(f):
        if i % 64 == 0:
            text = json.loads(line)["text"][:300]
            out.write(json.dumps({"_id": f"q{i}", "text": text}) + "\n")
ids = [json.loads(l)["_id"] for l in open("queries.jsonl")]
v = np.load("tiled.npy")
np.save("qv.npy", v[: len(ids)].astype(np.float32))
open("qv.ids", "w").write("".join(i + "\n" for i in ids))
PY
measure "retrieve bm25 (200 q)" "$BIN" retrieve --index idx-all --queries queries.jsonl --field text \
  --out bm25.trec
measure "retrieve dense HNSW (200 q)" "$BIN" retrieve --index idx-all --queries queries.jsonl \
  --field text --retriever dense:minilm --query-vectors minilm=qv.npy --out dense.trec
echo "documents: $N; corpus.jsonl $(stat -c %s corpus.jsonl) bytes"
du -sb idx-bm25/bm25 idx-all/dense/minilm/vectors.npy idx-all/dense/minilm/hnsw idx-all/ids.txt
