#!/usr/bin/env bash
# A FreshStack build on a Slurm cluster: embed a corpus across GPUs, generate nuggets and judge a
# pool across a fleet of LLM servers, then merge. Every step is a plain `freshstack` command;
# Slurm does the scheduling (array jobs + `afterok` dependencies), `freshstack merge` joins the
# shards into exactly the files one process would have written (byte for byte). The script
# submits, then waits for its own jobs and exits non-zero, naming the task and its log, when any
# task failed.
#
#   WORK=/scratch/$USER/laravel examples/slurm/build.sh
#
# Rerunning it resubmits only what did not finish: each task writes WORK/status/STEP.I.ok when
# its command succeeded; a step runs again for its tasks without a marker, and entirely when a
# step it depends on runs again (rm -r WORK/status to start over). The LLM stages also resume
# from their response caches (one per task), so a rerun makes no call twice.
#
# Assumes: `freshstack` built with `cargo build --release --features cuda` on the GPU nodes'
# image; the model directories on a shared filesystem (models are never downloaded: copy them
# or point HF_HUB_CACHE at a pre-filled cache); corpus.jsonl, questions.jsonl already in WORK
# (made with `freshstack corpus` and `freshstack stackoverflow import`, both CPU, minutes); an
# OpenAI-compatible fleet already up (one server per GPU node, same model), e.g.
#   vllm serve Qwen/Qwen2.5-72B-Instruct --tensor-parallel-size 4 --port 8000
#
# Everything site-specific is an environment variable (defaults: a GPU site). On a CPU-only
# cluster (tests/slurm.rs runs it on a one-node cluster from scripts/slurm-local.sh):
#   GPU_GRES= DEVICE=cpu MODEL_DTYPE= ENCODER=models/all-MiniLM-L6-v2 EMBED_CPUS=1 ...
set -euo pipefail

WORK=${WORK:?set WORK to a shared directory holding corpus.jsonl and questions.jsonl}
export FRESHSTACK=${FRESHSTACK:-freshstack}   # the binary, as the compute nodes see it
export EMBED_SHARDS=${EMBED_SHARDS:-8}        # document embedding tasks (one GPU each)
export LLM_SHARDS=${LLM_SHARDS:-4}            # nuggets/judge client tasks (CPU), each using the fleet
export ENCODER=${ENCODER:-/models/e5-mistral-7b-instruct}
export ENCODER_NAME=${ENCODER_NAME:-e5}       # the index's dense retriever is dense:$ENCODER_NAME
export DEVICE=${DEVICE:-cuda}                 # cuda, cuda:N or cpu
export MODEL_DTYPE=${MODEL_DTYPE-bf16}        # empty: the model's own dtype
export VECTOR_DTYPE=${VECTOR_DTYPE:-f16}      # of the written document vectors
export LLM_MODEL=${LLM_MODEL:-Qwen/Qwen2.5-72B-Instruct}
# The fleet: comma-separated; calls go to the least busy server and move to another when one is
# unreachable. LLM_CONCURRENCY is per server and per task.
export LLM_URLS=${LLM_URLS:-http://gpu01:8000/v1,http://gpu02:8000/v1,http://gpu03:8000/v1}
export LLM_CONCURRENCY=${LLM_CONCURRENCY:-16}
export NUGGETS_FLAGS=${NUGGETS_FLAGS:-}       # extra flags, e.g. "--max-nuggets 5 --llm-seed 0"
export JUDGE_FLAGS=${JUDGE_FLAGS:-}           # e.g. "--docs-per-call 5 --llm-context-tokens 8192"
export RETRIEVE_K=${RETRIEVE_K:-100}          # depth of the bm25, dense and fused runs
export POOL_DEPTH=${POOL_DEPTH:-20}           # fused documents per question judged
# Scheduling: empty partitions use the cluster's default; empty GPU_GRES asks for no --gres.
GPU_PARTITION=${GPU_PARTITION:-}
CPU_PARTITION=${CPU_PARTITION:-}
GPU_GRES=${GPU_GRES-gpu:1}
EMBED_CPUS=${EMBED_CPUS:-8} EMBED_MEM=${EMBED_MEM:-64G} EMBED_TIME=${EMBED_TIME:-12:00:00}
INDEX_CPUS=${INDEX_CPUS:-16} INDEX_MEM=${INDEX_MEM:-128G} INDEX_TIME=${INDEX_TIME:-4:00:00}
LLM_CPUS=${LLM_CPUS:-2}
NUGGETS_MEM=${NUGGETS_MEM:-4G} NUGGETS_TIME=${NUGGETS_TIME:-12:00:00}
JUDGE_MEM=${JUDGE_MEM:-8G} JUDGE_TIME=${JUDGE_TIME:-24:00:00}
MERGE_MEM=${MERGE_MEM:-4G} MERGE_TIME=${MERGE_TIME:-0:30:00}
read -r -a SBATCH_FLAGS <<<"${SBATCH_FLAGS:-}"   # e.g. "--account=proj --qos=normal"
POLL_S=${POLL_S:-10}                              # seconds between squeue polls

for input in corpus.jsonl questions.jsonl; do
  [[ -s "$WORK/$input" ]] || { echo "build.sh: $WORK/$input is missing or empty" >&2; exit 2; }
done
cd "$WORK"
mkdir -p logs shards status jobs
export WORK=$PWD
name_prefix="freshstack.$$"
declare -A job_of=()   # step -> job id, for the steps submitted by this invocation
submitted=()           # "step:indices" for the final check

# pending STEP COUNT UPSTREAM...: the task indices (comma-separated) of STEP to run: all of them
# when an upstream step runs in this invocation (its markers are then stale), else those
# without a marker.
pending() {
  local step=$1 count=$2 up i list=()
  shift 2
  for up in "$@"; do
    if [[ -n ${job_of[$up]:-} ]]; then
      rm -f status/"$step".*.ok
      break
    fi
  done
  for ((i = 0; i < count; i++)); do
    [[ -e status/$step.$i.ok ]] || list+=("$i")
  done
  (IFS=,; echo "${list[*]}")
}

# submit STEP COUNT "UPSTREAM..." SBATCH-FLAGS... <<<BODY: writes jobs/STEP.sh (BODY between a
# header and the marker), submits the pending tasks of STEP as an array job depending on the
# upstream steps submitted now, and records its id. Job scripts read the exported variables
# above at run time (--export=ALL) and their task index as $I.
submit() {
  local step=$1 count=$2 upstream=$3
  shift 3
  local indices deps=() up
  # shellcheck disable=SC2086 # upstream is a list of step names
  indices=$(pending "$step" "$count" $upstream)
  {
    printf '#!/bin/bash\nset -euo pipefail\ncd "$WORK"\nI=${SLURM_ARRAY_TASK_ID:-0}\n'
    printf 'rm -f "status/%s.$I.ok"\n' "$step"
    cat
    printf 'touch "status/%s.$I.ok"\n' "$step"
  } >"jobs/$step.sh"
  if [[ -z $indices ]]; then
    echo "build.sh: $step: done before (status/$step.*.ok), not resubmitted"
    return
  fi
  for up in $upstream; do
    [[ -n ${job_of[$up]:-} ]] && deps+=("afterok:${job_of[$up]}")
  done
  local flags=(--parsable --export=ALL --job-name="$name_prefix.$step" --array="$indices"
    --output="logs/$step-%A_%a.log" "${SBATCH_FLAGS[@]}" "$@")
  if ((${#deps[@]})); then
    # A failed upstream task cancels the dependants at once instead of leaving them pending.
    flags+=(--dependency="$(IFS=,; echo "${deps[*]}")" --kill-on-invalid-dep=yes)
  fi
  job_of[$step]=$(sbatch "${flags[@]}" "jobs/$step.sh" | cut -d';' -f1)
  submitted+=("$step:$indices")
  echo "build.sh: $step: job ${job_of[$step]}, tasks $indices"
}

gpu=(${GPU_PARTITION:+--partition="$GPU_PARTITION"} ${GPU_GRES:+--gres="$GPU_GRES"})
cpu=(${CPU_PARTITION:+--partition="$CPU_PARTITION"})

# 1. Document embeddings: an array job, one GPU per task. Each task tokenizes the whole corpus
#    (cheap), plans the same length-sorted batches as a single process would, and computes only
#    the batches b with b % N == I; `--shard` writes shards/docs.I.npy + .ids + .shard.json.
submit embed "$EMBED_SHARDS" "" "${gpu[@]}" --cpus-per-task="$EMBED_CPUS" --mem="$EMBED_MEM" \
  --time="$EMBED_TIME" <<'EOF'
"$FRESHSTACK" --threads "${SLURM_CPUS_PER_TASK:-1}" embed --model "$ENCODER" \
  --input corpus.jsonl --kind document --device "$DEVICE" ${MODEL_DTYPE:+--model-dtype "$MODEL_DTYPE"} \
  --dtype "$VECTOR_DTYPE" --shard "$I/$EMBED_SHARDS" --out "shards/docs.$I.npy"
EOF

# 2. Merge the vectors (streams the shards, memory-mapped), embed the questions (small: one
#    task), build the index (BM25 + vectors + HNSW), retrieve, fuse, and pool the fused run's top
#    POOL_DEPTH per question into pool.jsonl ({"query_id", "doc_ids"} rows, in rank order; a
#    TREC run is "qid Q0 docid rank score tag", written in rank order per question).
submit index 1 "embed" "${gpu[@]}" --cpus-per-task="$INDEX_CPUS" --mem="$INDEX_MEM" \
  --time="$INDEX_TIME" <<'EOF'
threads=${SLURM_CPUS_PER_TASK:-1}
"$FRESHSTACK" merge --out docs.npy shards/docs.*.npy
"$FRESHSTACK" --threads "$threads" embed --model "$ENCODER" --input questions.jsonl --kind query \
  --device "$DEVICE" ${MODEL_DTYPE:+--model-dtype "$MODEL_DTYPE"} --out questions.npy
rm -rf index
"$FRESHSTACK" --threads "$threads" index --corpus corpus.jsonl --index index --bm25 \
  --vectors "$ENCODER_NAME=docs.npy"
"$FRESHSTACK" retrieve --index index --queries questions.jsonl --retriever bm25 \
  -k "$RETRIEVE_K" --out bm25.trec
"$FRESHSTACK" retrieve --index index --queries questions.jsonl --retriever "dense:$ENCODER_NAME" \
  --query-vectors "$ENCODER_NAME=questions.npy" -k "$RETRIEVE_K" --out dense.trec
"$FRESHSTACK" fuse bm25.trec dense.trec --depth "$RETRIEVE_K" --out fused.trec
awk -v depth="$POOL_DEPTH" '
  function flush() { if (q != "") printf "{\"query_id\":\"%s\",\"doc_ids\":[%s]}\n", q, docs }
  function esc(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return s }
  $1 != q { flush(); q = $1; docs = ""; n = 0 }
  n < depth { docs = docs (n ? "," : "") "\"" esc($3) "\""; n++ }
  END { flush() }' fused.trec >pool.jsonl.tmp
mv pool.jsonl.tmp pool.jsonl
EOF

# 3. Nuggets across the fleet, in LLM_SHARDS client tasks (questions sorted by id, question i to
#    shard i % N), each with its own response cache, then merged.
submit nuggets "$LLM_SHARDS" "" "${cpu[@]}" --cpus-per-task="$LLM_CPUS" --mem="$NUGGETS_MEM" \
  --time="$NUGGETS_TIME" <<'EOF'
# shellcheck disable=SC2086 # NUGGETS_FLAGS is a list of flags
"$FRESHSTACK" nuggets --questions questions.jsonl $NUGGETS_FLAGS \
  --llm-base-url "$LLM_URLS" --llm-model "$LLM_MODEL" --llm-concurrency "$LLM_CONCURRENCY" \
  --llm-cache "shards/nuggets-cache.$I.sqlite" \
  --shard "$I/$LLM_SHARDS" --out "shards/nuggets.$I.jsonl"
EOF
submit merge-nuggets 1 "nuggets" "${cpu[@]}" --mem="$MERGE_MEM" --time="$MERGE_TIME" <<'EOF'
"$FRESHSTACK" merge --out nuggets.jsonl shards/nuggets.*.jsonl
EOF

# 4. Judge the pool across the fleet, in LLM_SHARDS client tasks, then merge.
submit judge "$LLM_SHARDS" "index merge-nuggets" "${cpu[@]}" --cpus-per-task="$LLM_CPUS" \
  --mem="$JUDGE_MEM" --time="$JUDGE_TIME" <<'EOF'
# shellcheck disable=SC2086 # JUDGE_FLAGS is a list of flags
"$FRESHSTACK" judge --questions questions.jsonl --nuggets nuggets.jsonl --corpus corpus.jsonl \
  --pool pool.jsonl $JUDGE_FLAGS \
  --llm-base-url "$LLM_URLS" --llm-model "$LLM_MODEL" --llm-concurrency "$LLM_CONCURRENCY" \
  --llm-cache "shards/judge-cache.$I.sqlite" \
  --shard "$I/$LLM_SHARDS" --out "shards/judgments.$I.jsonl"
EOF
submit merge-judgments 1 "judge" "${cpu[@]}" --mem="$MERGE_MEM" --time="$MERGE_TIME" <<'EOF'
"$FRESHSTACK" merge --out judgments.jsonl shards/judgments.*.jsonl
EOF

# Wait for every job of this invocation to leave the queue (jobs are found by name, so a job
# already purged from squeue's memory is simply gone), then check each task's marker: the
# marker is written only after the task's commands succeeded, so this needs no accounting
# database (sacct) and catches failed, cancelled, timed-out and never-started tasks alike.
if ((${#submitted[@]})); then
  names=$(for step in "${!job_of[@]}"; do printf '%s,' "$name_prefix.$step"; done)
  errors=0
  while true; do
    if queued=$(squeue -h -u "$(id -un)" -n "${names%,}" -o %i 2>&1); then
      errors=0
      [[ -z $queued ]] && break
    else
      ((++errors <= 30)) || { echo "build.sh: squeue keeps failing: $queued" >&2; exit 1; }
    fi
    sleep "$POLL_S"
  done
fi
failed=0
for entry in "${submitted[@]}"; do
  step=${entry%%:*}
  IFS=, read -r -a indices <<<"${entry#*:}"
  for i in "${indices[@]}"; do
    if [[ ! -e status/$step.$i.ok ]]; then
      echo "build.sh: task $step $i (job ${job_of[$step]}_$i) did not finish; its log:" \
        "$WORK/logs/$step-${job_of[$step]}_$i.log; rerun build.sh to resubmit what is missing" >&2
      failed=1
    fi
  done
done
if ((failed)); then
  exit 1
fi
echo "build.sh: done: $WORK/docs.npy, index/, fused.trec, pool.jsonl, nuggets.jsonl, judgments.jsonl"
