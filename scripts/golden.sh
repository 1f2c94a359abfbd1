#!/usr/bin/env bash
# Golden outputs of a representative CLI sequence, for byte-for-byte before/after comparisons of a
# change that must not change behaviour (issue 18):
#
#   scripts/golden.sh BEFORE_BINARY /tmp/golden-before
#   scripts/golden.sh target/debug/freshstack /tmp/golden-after
#   diff -r /tmp/golden-before /tmp/golden-after && echo identical
#
# Inputs: tests/fixtures (Stack Overflow dumps, the report and benchmark datasets, the tiny
# cross-encoder, a tiny random-weight GGUF), models/all-MiniLM-L6-v2 (scripts/setup.sh) and a small
# repository and question files written here. Covers: stackoverflow import/tags/topics, corpus,
# index (BM25, a dense model encoded by the index, precomputed vectors), embed (f32, f16,
# queries, two shards and merge), retrieve (bm25, dense hnsw/exact, fusion, rrf, the oracle
# fields, BEIR queries, query vectors, rerank, string and numeric query ids), search, fuse,
# rerank, eval, report, benchmark, the three LLM stages and a whole `build` with the native GGUF
# engine standing in for a model (greedy and schema-constrained, so deterministic), and a few
# bad inputs (their one-line errors). Every command runs in OUT/work with relative paths; OUT/rc
# lists each command's exit status, OUT/stdout and OUT/stderr keep what the commands print where
# it is deterministic (stderr of the failing ones only: the others print timings). Takes ~2
# minutes on 2 cores.
set -euo pipefail

BIN=$(realpath "${1:?usage: scripts/golden.sh FRESHSTACK_BINARY OUT_DIR}")
OUT=${2:?usage: scripts/golden.sh FRESHSTACK_BINARY OUT_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FIX=$ROOT/tests/fixtures
MINILM=$ROOT/models/all-MiniLM-L6-v2
GGUF=$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -d "$MINILM" ] || { echo "golden: $MINILM is missing (run scripts/setup.sh)" >&2; exit 2; }
[ -f "$GGUF" ] || { echo "golden: $GGUF is missing (run scripts/setup-llm.sh)" >&2; exit 2; }

rm -rf "$OUT"
mkdir -p "$OUT/work" "$OUT/stdout" "$OUT/stderr"
cd "$OUT/work"
export RUST_LOG= NO_COLOR=1

# step NAME [--stdout] [--fails] -- ARGS...: runs the binary, records its exit status; keeps its
# stdout with --stdout, and its stderr when it fails (a failure is expected with --fails).
step() {
  local name=$1 keep_stdout=0 fails=0
  shift
  while [ "$1" != -- ]; do
    case $1 in
      --stdout) keep_stdout=1 ;;
      --fails) fails=1 ;;
    esac
    shift
  done
  shift
  local rc=0
  "$BIN" "$@" >"../stdout/$name" 2>"../stderr/$name" || rc=$?
  echo "$name $rc" >>../rc
  [ $keep_stdout = 1 ] || rm "../stdout/$name"
  if [ $rc = 0 ]; then
    rm "../stderr/$name"
  elif [ $fails = 0 ]; then
    echo "golden: $name failed unexpectedly ($rc):" >&2
    cat "../stderr/$name" >&2
  fi
}

# --- inputs written here ------------------------------------------------------------------
mkdir -p repo/docs repo/src repo/app
cat >repo/docs/cache.md <<'EOF'
# Cache

Set ALPHA in the cache config to enable the store. The cache store keeps values between requests.

## Drivers

The BETA driver keeps entries in memory; the file driver writes them under storage/cache.
EOF
cat >repo/docs/queue.md <<'EOF'
# Queue

Queues need ALPHA workers and a BETA connection to run jobs. Start a worker with `php artisan
queue:work`; jobs stay pending while no worker runs.

## Retries

A failed job is retried `tries` times, then moved to the failed_jobs table.
EOF
cat >repo/docs/routing.md <<'EOF'
# Routing

Routes map URLs to controllers. Define them in routes/web.php with Route::get, Route::post and
friends; route parameters are passed to the controller method in order.
EOF
cat >repo/src/routes.php <<'EOF'
<?php
// Routes map URLs to controllers.
Route::get('/cache', fn () => cache('x'));
Route::post('/jobs', [JobController::class, 'store']);
EOF
cat >repo/app/worker.py <<'EOF'
"""A queue worker: pops jobs and runs them until stopped."""


def run(queue, tries=3):
    while True:
        job = queue.pop()
        for attempt in range(tries):
            if job.run():
                break
EOF
cat >repo/README.md <<'EOF'
# Demo

A demo application with a cache, a queue and routes.
EOF

# Reference-schema questions with judged nuggets (string ids), the same with numeric ids, one
# with an empty title, BEIR queries.
cat >questions.jsonl <<'EOF'
{"query_id": "q1", "query_title": "How do I enable the cache store", "query_text": "My cache config does nothing.", "answer_id": "a1", "answer_text": "Set ALPHA in the cache config.", "metadata": {"date": "2024-05-01T10:00:00.000", "tags": ["demo"]}, "nuggets": [{"_id": "q1_0", "text": "ALPHA enables the cache store.", "relevant_corpus_ids": ["acme/demo/docs/cache.md_0_209"], "non_relevant_corpus_ids": ["acme/demo/README.md_0_60"]}]}
{"query_id": "q2", "query_title": "Why do my queue jobs never run", "query_text": "Jobs stay pending forever.", "answer_id": "a2", "answer_text": "Start a worker with queue:work.", "metadata": {"date": "2024-05-02T10:00:00.000", "tags": ["demo", "queue"]}, "nuggets": [{"_id": "q2_0", "text": "A worker must run.", "relevant_corpus_ids": ["acme/demo/docs/queue.md_0_244"], "non_relevant_corpus_ids": []}, {"_id": "q2_1", "text": "Failed jobs are retried.", "relevant_corpus_ids": ["acme/demo/app/worker.py_0_214"], "non_relevant_corpus_ids": []}]}
{"query_id": "q3", "query_title": "How are routes matched", "query_text": "What maps a URL to a controller?", "answer_id": "a3", "answer_text": "Route::get in routes/web.php.", "metadata": {"date": "2024-05-03T10:00:00.000", "tags": ["demo"]}, "nuggets": [{"_id": "q3_0", "text": "Routes are defined with Route::get.", "relevant_corpus_ids": ["acme/demo/src/routes.php_0_138"], "non_relevant_corpus_ids": []}]}
EOF
sed -e 's/"query_id": "q\([0-9]\)"/"query_id": 10\1/' -e 's/"_id": "q\([0-9]\)_/"_id": "10\1_/g' \
  questions.jsonl >questions-num.jsonl
cat >questions-notitle.jsonl <<'EOF'
{"query_id": "n1", "query_title": "", "query_text": "Where do failed queue jobs go?", "answer_text": "The failed_jobs table."}
{"query_id": "n2", "query_title": "Route parameters", "query_text": "", "answer_text": "In order."}
EOF
cat >beir.jsonl <<'EOF'
{"_id": "b1", "text": "cache driver memory"}
{"_id": "b2", "text": "queue worker retries"}
EOF

# --- questions ------------------------------------------------------------------------------
step so-import -- stackoverflow import --posts "$FIX/stackoverflow/Posts.xml" --tag laravel \
  --out so.jsonl --summary so.summary.json
step so-import-7z -- stackoverflow import --posts "$FIX/stackoverflow/posts.7z" --tag laravel \
  --allow-unaccepted --out so7z.jsonl
step so-quickstart -- stackoverflow import --posts "$ROOT/examples/quickstart/Posts.xml" \
  --tag freshstack --out quickstart.jsonl
step so-tags --stdout -- stackoverflow tags --posts "$FIX/stackoverflow/Posts.xml" --tag laravel --json
step so-topics --stdout -- stackoverflow topics --posts "$ROOT/examples/quickstart/Posts.xml" \
  --since 2020-01-01 --min-posts 1 --json

# --- corpus, embeddings, indexes --------------------------------------------------------------
step corpus -- corpus --repo acme/demo=repo --max-tokens 64 --out corpus.jsonl --summary corpus.summary.json
step embed-docs -- embed --model "$MINILM" --input corpus.jsonl --out docs.npy --threads 1
step embed-docs-f16 -- embed --model "$MINILM" --input corpus.jsonl --out docs16.npy --dtype f16
step embed-queries -- embed --model "$MINILM" --input questions.jsonl --out q.npy
step embed-queries-num -- embed --model "$MINILM" --input questions-num.jsonl --out qnum.npy
step embed-queries-notitle -- embed --model "$MINILM" --input questions-notitle.jsonl --out qnotitle.npy
step embed-shard0 -- embed --model "$MINILM" --input corpus.jsonl --out docs.s0.npy --shard 0/2
step embed-shard1 -- embed --model "$MINILM" --input corpus.jsonl --out docs.s1.npy --shard 1/2
step merge-embed -- merge --out docs.merged.npy docs.s1.npy docs.s0.npy
step index -- index --corpus corpus.jsonl --index idx --bm25 --dense "minilm=$MINILM"
step index-vectors -- index --corpus corpus.jsonl --index idx-vec --bm25 --vectors pre=docs.npy --vector-dtype f32
step index-vectors16 -- index --corpus corpus.jsonl --index idx-vec16 --vectors pre=docs16.npy --no-hnsw

# --- retrieval --------------------------------------------------------------------------------
step retrieve-bm25 -- retrieve --index idx --queries questions.jsonl --out bm25.trec -k 5
step retrieve-bm25-num -- retrieve --index idx --queries questions-num.jsonl --out bm25-num.trec -k 5
step retrieve-bm25-notitle -- retrieve --index idx --queries questions-notitle.jsonl --out bm25-notitle.trec -k 5
step retrieve-answer -- retrieve --index idx --queries questions.jsonl --field answer --out answer.trec -k 5
step retrieve-nuggets -- retrieve --index idx --queries questions.jsonl --field nuggets --out nuggets.trec -k 5
step retrieve-beir -- retrieve --index idx --queries beir.jsonl --out beir.trec -k 5
step retrieve-beir-text -- retrieve --index idx --queries beir.jsonl --field text --out beir-text.trec -k 5
step retrieve-dense -- retrieve --index idx --queries questions.jsonl --retriever dense:minilm --out dense.trec -k 5
step retrieve-dense-notitle -- retrieve --index idx --queries questions-notitle.jsonl --retriever dense:minilm --out dense-notitle.trec -k 5
step retrieve-dense-exact -- retrieve --index idx --queries questions.jsonl --retriever dense:minilm --ann exact --out dense-exact.trec -k 5
step retrieve-fusion -- retrieve --index idx --queries questions.jsonl --retriever fusion --out fusion.trec -k 5
step retrieve-rrf -- retrieve --index idx --queries questions.jsonl --retriever fusion --fusion-method rrf --out rrf.trec -k 5
step retrieve-qvec -- retrieve --index idx-vec --queries questions.jsonl --retriever dense:pre --query-vectors pre=q.npy --out qvec.trec -k 5
step retrieve-qvec-num -- retrieve --index idx-vec --queries questions-num.jsonl --retriever dense:pre --query-vectors pre=qnum.npy --out qvec-num.trec -k 5
step retrieve-qvec16 -- retrieve --index idx-vec16 --queries questions.jsonl --retriever dense:pre --query-vectors pre=q.npy --out qvec16.trec -k 5
step retrieve-rerank -- retrieve --index idx --queries questions.jsonl --rerank "$FIX/rerank/tiny-bert" --rerank-depth 3 --out rerank-stage.trec -k 5
step search --stdout -- search --index idx --retriever fusion --json -k 3 "queue worker retries"
step fuse -- fuse bm25.trec dense.trec --out fused.trec
step fuse-rrf -- fuse bm25.trec dense.trec --method rrf --weights 2,1 --out fused-rrf.trec
step rerank -- rerank --run bm25.trec --queries questions.jsonl --corpus corpus.jsonl \
  --model "$FIX/rerank/tiny-bert" -k 3 --out reranked.trec
step rerank-num -- rerank --run bm25-num.trec --queries questions-num.jsonl --corpus corpus.jsonl \
  --model "$FIX/rerank/tiny-bert" -k 3 --out reranked-num.trec

# --- evaluation and reports -------------------------------------------------------------------
step eval --stdout -- eval --queries questions.jsonl --run bm25.trec --run dense.trec --run fusion.trec \
  --json --per-query per_query.jsonl
step eval-num --stdout -- eval --queries questions-num.jsonl --run bm25-num.trec --json
step eval-report --stdout -- eval --queries "$FIX/report/queries.jsonl" \
  --run "$FIX/report/runs/inference.question.bm25.trec" --run "$FIX/report/runs/inference.question.fusion.trec" \
  --k 5,10 --metrics alpha_ndcg,coverage,recall,ndcg,mrr,precision,hole,judged --json
step eval-parity --stdout -- eval --qrels <(printf 'q1 q1_0 d1 1\nq1 q1_0 d2 0\n') \
  --run <(printf 'q1 Q0 d1 1 2.0 r\nq1 Q0 d2 2 1.0 r\n') --json
cp -r "$FIX/report" report
step report --stdout -- report report --tokenizer cl100k_base
step benchmark --stdout -- benchmark --queries freshstack/queries-tiny:tiny --corpus freshstack/corpus-tiny \
  -k 10 --hf-cache "$FIX/benchmark/hf/hub" --out bench --paper "$ROOT/examples/paper-results.toml"

# --- LLM stages and a whole build -------------------------------------------------------------
# The native engine on SmolLM2 (greedy; the judge unconstrained: the native grammar does not
# compile its schema's uniqueItems yet), and a deterministic OpenAI-compatible mock server
# (scripts/golden_mock_llm.py) for the sharded stages, the judge and a whole build.
NATIVE=(--llm-gguf "$GGUF" --llm-max-tokens 96 --llm-concurrency 1 --no-cache)
step nuggets -- nuggets --questions questions-num.jsonl --out nuggets.jsonl --max-nuggets 2 "${NATIVE[@]}"
step variants -- query-variants --questions questions.jsonl --out variants.jsonl --max-sub-questions 2 "${NATIVE[@]}"
printf '{"query_id": "101", "doc_ids": ["acme/demo/docs/cache.md_0_209", "acme/demo/README.md_0_60"]}\n' >pool.jsonl
step judge -- judge --questions questions-num.jsonl --nuggets nuggets.jsonl --corpus corpus.jsonl \
  --pool pool.jsonl --out judgments.jsonl --docs-per-call 2 --llm-max-tokens 128 \
  --llm-gguf "$GGUF" --llm-concurrency 1 --no-cache --llm-structured-output off
coproc MOCK { exec python3 "$ROOT/scripts/golden_mock_llm.py"; }
MOCK_PID_SAVED=$MOCK_PID
trap 'kill "$MOCK_PID_SAVED" 2>/dev/null || true' EXIT
read -r PORT <&"${MOCK[0]}"
URL=http://127.0.0.1:$PORT/v1
MOCKED=(--llm-base-url "$URL" --llm-model mock --llm-concurrency 2 --llm-max-retries 0 --no-cache)
step mock-nuggets -- nuggets --questions questions.jsonl --out mock-nuggets.jsonl "${MOCKED[@]}"
step mock-nuggets-num -- nuggets --questions questions-num.jsonl --out mock-nuggets-num.jsonl "${MOCKED[@]}"
step mock-shard0 -- nuggets --questions questions.jsonl --out mock-nuggets.s0.jsonl --shard 0/2 "${MOCKED[@]}"
step mock-shard1 -- nuggets --questions questions.jsonl --out mock-nuggets.s1.jsonl --shard 1/2 "${MOCKED[@]}"
step merge-nuggets -- merge --out mock-nuggets.merged.jsonl mock-nuggets.s1.jsonl mock-nuggets.s0.jsonl
step mock-variants -- query-variants --questions questions-num.jsonl --out mock-variants.jsonl "${MOCKED[@]}"
printf '%s\n' '{"query_id": "q1", "doc_ids": ["acme/demo/docs/cache.md_0_209", "acme/demo/README.md_0_60", "acme/demo/docs/queue.md_0_244"]}' \
  '{"query_id": "q2", "doc_ids": ["acme/demo/docs/queue.md_0_244"]}' >mock-pool.jsonl
step mock-judge -- judge --questions questions.jsonl --nuggets mock-nuggets.jsonl --corpus corpus.jsonl \
  --pool mock-pool.jsonl --out mock-judgments.jsonl --docs-per-call 2 "${MOCKED[@]}"
build_config() {
  cat <<EOF
topic = "demo"
[questions]
file = "$1"
[corpus]
max_tokens = 64
[corpus.repositories]
"acme/demo" = "repo"
[retrieval]
bm25 = true
dense = ["$MINILM"]
fusion = true
pool_depth = 3
fusion_depth = 10
[llm]
base_url = "$URL"
model = "mock"
concurrency = 2
max_retries = 0
[judge]
docs_per_call = 2
[filter]
require_all_nuggets_supported = false
EOF
}
build_config questions.jsonl >build.toml
build_config questions-num.jsonl >build-num.toml
step build -- build --config build.toml --out build
step build-num -- build --config build-num.toml --out build-num
step report-build --stdout -- report build --out build-report.html
# The response caches are not outputs.
rm -f build*/work/llm-cache.sqlite*

# --- bad inputs: one-line errors --------------------------------------------------------------
printf 'not json\n' >bad.jsonl
printf '{"query_id": true, "query_title": "t", "query_text": "b"}\n' >bad-id.jsonl
head -c 100 docs.npy >truncated.npy
cp docs.ids truncated.ids
head -c -4 docs.s0.npy >cut.npy
cp docs.s0.ids cut.ids
printf 'NUMPY\x01\x00' >magic.npy
cp docs.ids magic.ids
step bad-retrieve --fails -- retrieve --index idx --queries bad.jsonl --out x.trec
step bad-retrieve-id --fails -- retrieve --index idx --queries bad-id.jsonl --out x.trec
step bad-embed --fails -- embed --model "$MINILM" --input bad-id.jsonl --out x.npy
step bad-nuggets --fails -- nuggets --questions bad-id.jsonl --out x.jsonl "${MOCKED[@]}"
step bad-dtype --fails -- embed --model "$MINILM" --input corpus.jsonl --out x.npy --dtype f64
step bad-npy-index --fails -- index --corpus corpus.jsonl --index idx-bad --vectors pre=truncated.npy
step bad-npy-qvec --fails -- retrieve --index idx-vec --queries questions.jsonl --retriever dense:pre \
  --query-vectors pre=truncated.npy --out x.trec
cp docs.s0.shard.json truncated.shard.json
cp docs.s0.shard.json cut.shard.json
step bad-npy-merge --fails -- merge --out x.npy truncated.npy docs.s1.npy
step bad-npy-merge-cut --fails -- merge --out x.npy cut.npy docs.s1.npy
step bad-npy-index-cut --fails -- index --corpus corpus.jsonl --index idx-bad --vectors pre=cut.npy
step bad-npy-qvec-magic --fails -- retrieve --index idx-vec --queries questions.jsonl --retriever dense:pre \
  --query-vectors pre=magic.npy --out x.trec

# --- what is not an output --------------------------------------------------------------------
# tantivy names its segment files with random ids and splits the documents among its segments
# as its threads go (the search results do not depend on it): each BM25 directory is replaced by
# the sorted extensions of its files, and the manifests that name or hash them (index manifests,
# the build's stage manifests) are kept with hex ids blanked, file sizes and CRC-32s left out
# (a segment's bytes, so its CRC, change with the split; the manifest's own checksum with them)
# and lines sorted: the files the CRCs cover are compared themselves, where they are outputs. The build configurations hold the mock server's port.
while IFS= read -r managed; do
  dir=$(dirname "$managed")
  (cd "$dir" && for f in *; do [ "$f" = meta.json ] || echo "${f##*.}"; done | sort) >"$dir.sizes"
  rm -rf "$dir"
done < <(find . -name .managed.json | sort)
while IFS= read -r manifest; do
  sed -E 's/[0-9a-f]{32,64}/HEX/g' "$manifest" | grep -v -E '"(bytes|crc32|checksum)":' | sort >"$manifest.normalized"
  rm "$manifest"
done < <(find . -path '*/work/stages/*.json' -o -name manifest.json -path '*idx*' \
  -o -name manifest.json -path '*/index/*' -o -name manifest.json -path '*/topics/*' | sort)
rm -f ../stderr/*.tmp build*.toml
echo "golden: $(wc -l <../rc) commands, outputs in $OUT" >&2
