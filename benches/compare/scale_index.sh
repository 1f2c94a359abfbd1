#!/usr/bin/env bash
# Disk and memory per document of each artefact of a build, on real chunks, for the README's
# "Scaling to millions of documents" section (figures per million chunks are extrapolated
# linearly from these).
#
#   benches/compare/scale_index.sh [FRESHSTACK_BINARY] [WORKDIR]
#   benches/compare/scale_index.sh --dense N [FRESHSTACK_BINARY] [WORKDIR]
#
# With --dense N: the dense index alone at N synthetic vectors (384-d, f16, a seeded Gaussian
# mixture of N/100 centres, as benches/compare/hnsw_vs_hnswlib.py --clustered): `index
# --vectors` (matrix copy + HNSW build, M 16, ef_construction 200, all cores) with wall time and
# peak RSS, the sizes of vectors.npy and graph.bin, then 1,000 queries (held-out points of the
# mixture) through `retrieve --ann hnsw --threads 1` at the default ef: queries/s with process
# start and graph load subtracted (the time of one query), and recall@10 against exact search
# (numpy). Needs numpy; 1M vectors take ~2 GB of RAM in the generator.
#
# Without it:
# 1. chunks the PHP manual (../shared/corpora/php-doc-en.tar.gz) into a corpus;
# 2. builds a BM25 index of it;
# 3. tiles real all-MiniLM-L6-v2 vectors (tests/fixtures/embed/minilm_reference.json, made by
#    sentence-transformers) plus small seeded noise, renormalised, to one f16 row per chunk, so
#    that the HNSW graph of the whole corpus can be built without embedding all of it (the
#    graph's size depends on the row count, the dimension and M, not on the values);
# 4. builds BM25 + vectors + HNSW, and runs 200 queries (BM25 and HNSW) against it;
# printing wall time, peak RSS (GNU time) and sizes on disk. Needs python3 with numpy.
set -euo pipefail
DENSE=
if [ "${1:-}" = --dense ]; then DENSE=${2:?--dense needs a row count}; shift 2; fi
BIN=${1:-target/release/freshstack}
WORK=${2:-/tmp/freshstack-scale}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(realpath "$BIN")
PY=${PYTHON:-python3}
mkdir -p "$WORK" && cd "$WORK"
if [ -n "$DENSE" ]; then
  secs() { /usr/bin/time -f "%e %M" -o time.txt "$@" > /dev/null 2> log.txt || { cat log.txt; exit 1; }; }
  "$PY" - "$DENSE" <<'PY'
import json, sys, numpy as np
n, dim, q = int(sys.argv[1]), 384, 1000
rng = np.random.default_rng(42)
centres = rng.standard_normal((max(n // 100, 1), dim)).astype(np.float32)
centres /= np.linalg.norm(centres, axis=1, keepdims=True)
def draw(count):
    out = np.empty((count, dim), dtype=np.float16)
    for s in range(0, count, 100_000):
        m = min(100_000, count - s)
        x = centres[rng.integers(0, len(centres), m)]
        x = x + rng.standard_normal((m, dim)).astype(np.float32) * (0.6 / np.sqrt(dim))
        out[s:s + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out
docs, queries = draw(n), draw(q)
np.save("dense.npy", docs)
np.save("qv.npy", queries.astype(np.float32))
with open("dense.ids", "w") as ids, open("dense.jsonl", "w") as corpus:
    for i in range(n):
        ids.write(f"d{i}\n")
        corpus.write(json.dumps({"_id": f"d{i}", "title": "", "text": "x"}) + "\n")
with open("qv.ids", "w") as ids, open("q.jsonl", "w") as qs, open("one.jsonl", "w") as one:
    for i in range(q):
        ids.write(f"q{i}\n")
        qs.write(json.dumps({"_id": f"q{i}", "text": "x"}) + "\n")
    one.write(json.dumps({"_id": "q0", "text": "x"}) + "\n")
# Exact top 10 (float32), by blocks of 100,000 rows.
qf = queries.astype(np.float32)
top_s = np.full((q, 0), -np.inf, dtype=np.float32)
top_i = np.zeros((q, 0), dtype=np.int64)
for s in range(0, n, 100_000):
    sc = qf @ docs[s:s + 100_000].astype(np.float32).T
    k = min(10, sc.shape[1])
    part = np.argpartition(-sc, k - 1, axis=1)[:, :k]
    top_s = np.concatenate([top_s, np.take_along_axis(sc, part, 1)], 1)
    top_i = np.concatenate([top_i, part + s], 1)
    keep = np.argsort(-top_s, axis=1)[:, :10]
    top_s, top_i = np.take_along_axis(top_s, keep, 1), np.take_along_axis(top_i, keep, 1)
np.save("truth.npy", top_i)
PY
  rm -rf idx-dense
  secs "$BIN" index --corpus dense.jsonl --index idx-dense --vectors v=dense.npy
  read -r build kb < time.txt
  common=("$BIN" retrieve --index idx-dense --retriever dense:v --query-vectors v=qv.npy -k 10
    --threads 1 --field text --ann hnsw)
  secs "${common[@]}" --queries one.jsonl --out one.trec; read -r t1 _ < time.txt
  secs "${common[@]}" --queries q.jsonl --out all.trec; read -r tall qkb < time.txt
  recall=$("$PY" - <<'PY'
import numpy as np
truth = np.load("truth.npy")
got = {}
for line in open("all.trec"):
    q, _, d, *_ = line.split()
    got.setdefault(int(q[1:]), []).append(int(d[1:]))
print(f"{np.mean([len(set(got.get(i, [])) & set(t)) / 10 for i, t in enumerate(truth)]):.4f}")
PY
)
  printf '%s vectors x 384 (f16, clustered), %s cores, load %s\n' "$DENSE" "$(nproc)" \
    "$(cut -d' ' -f1 /proc/loadavg)"
  printf 'index --vectors: %.1f s, peak RSS %.0f MiB\n' "$build" "$(echo "$kb / 1024" | bc -l)"
  printf 'disk: vectors.npy %s bytes, graph.bin %s bytes\n' \
    "$(stat -c %s idx-dense/dense/v/vectors.npy)" "$(stat -c %s idx-dense/dense/v/hnsw/graph.bin)"
  printf 'retrieve (1 thread, default ef): %.0f queries/s, recall@10 %s, peak RSS %.0f MiB\n' \
    "$(echo "999 / ($tall - $t1)" | bc -l)" "$recall" "$(echo "$qkb / 1024" | bc -l)"
  exit 0
fi
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
