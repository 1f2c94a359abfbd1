#!/usr/bin/env bash
# Builds tests/fixtures/index-v1/: a tiny index (BM25 + one dense model from precomputed f32
# vectors, no HNSW cache) in the current format, which tests/hybrid.rs opens and searches, so a
# format change that breaks old indexes is noticed. Rerun only when FORMAT_VERSION changes (then
# add a new directory, keep the old one and its test expecting a clear error).
# usage: scripts/make-index-fixture.sh [path/to/freshstack]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:-$root/target/debug/freshstack}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$work" <<'PY'
import json, struct, sys
work = sys.argv[1]
docs = [
    ("php/doc/array.md_0_10", "array_map applies a callback to every element of an array"),
    ("php/doc/string.md_0_10", "str_contains checks whether a string contains a substring"),
    ("laravel/docs/queues.md_0_10", "Queued jobs run in the background with queue:work"),
    ("laravel/docs/cache.md_0_10", "Cache::remember caches the result of a closure"),
]
with open(f"{work}/corpus.jsonl", "w") as f:
    for i, t in docs:
        f.write(json.dumps({"_id": i, "title": "", "text": t, "metadata": {}}) + "\n")
# One-hot 4-d vectors: document n is axis n.
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), }"
header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
with open(f"{work}/v.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    for n in range(4):
        f.write(struct.pack("<4f", *[1.0 if j == n else 0.0 for j in range(4)]))
with open(f"{work}/v.ids", "w") as f:
    f.write("\n".join(i for i, _ in docs) + "\n")
PY
out="$root/tests/fixtures/index-v1"
rm -rf "$out"
(cd "$work" && "$bin" index --corpus corpus.jsonl --index "$out" --bm25 --vectors onehot=v.npy --no-hnsw)
find "$out" -name "*.lock" -delete
echo "wrote $out"
