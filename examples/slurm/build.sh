#!/usr/bin/env bash
# A FreshStack build on a Slurm cluster: embed a corpus across GPUs, generate nuggets and judge a
# pool across a fleet of vLLM servers, then merge. Every step is a plain `freshstack` command;
# Slurm does the scheduling (array jobs + dependencies), `freshstack merge` joins the shards into
# exactly the files one process would have written (byte for byte).
#
#   WORK=/scratch/$USER/laravel examples/slurm/build.sh
#
# Assumes: `freshstack` built with `cargo build --release --features cuda` on the GPU nodes'
# image; the model directories on a shared filesystem (models are never downloaded: copy them
# or point HF_HUB_CACHE at a pre-filled cache); corpus.jsonl, questions.jsonl already made with
# `freshstack corpus` and `freshstack stackoverflow import` (both CPU, minutes); a vLLM fleet
# already up (one server per GPU node, same model), e.g.
#   vllm serve Qwen/Qwen2.5-72B-Instruct --tensor-parallel-size 4 --port 8000
# Adjust partitions, GPU counts and times to your site.
set -euo pipefail

WORK=${WORK:?set WORK to a shared directory holding corpus.jsonl and questions.jsonl}
EMBED_SHARDS=${EMBED_SHARDS:-8}        # one GPU each
LLM_SHARDS=${LLM_SHARDS:-4}            # CPU-only clients, each spreading calls over the fleet
ENCODER=${ENCODER:-/models/e5-mistral-7b-instruct}
LLM_MODEL=${LLM_MODEL:-Qwen/Qwen2.5-72B-Instruct}
# The fleet: repeat --llm-base-url or separate by commas; calls go to the least busy server and
# move to another when one is unreachable. --llm-concurrency is per server.
LLM_URLS=${LLM_URLS:-http://gpu01:8000/v1,http://gpu02:8000/v1,http://gpu03:8000/v1}

mkdir -p "$WORK/logs" "$WORK/shards"
cd "$WORK"

# 1. Document embeddings: an array job, one GPU per task. Each task tokenizes the whole corpus
#    (cheap), plans the same length-sorted batches as a single process would, and computes only
#    the batches b with b % N == I; `--shard` writes shards/docs.I.npy + .ids + .shard.json.
embed_docs=$(sbatch --parsable --array=0-$((EMBED_SHARDS - 1)) --gres=gpu:1 --cpus-per-task=8 \
  --mem=64G --time=12:00:00 --output=logs/embed-%A_%a.log --wrap "
    freshstack embed --model $ENCODER --input corpus.jsonl --kind document \
      --device cuda --model-dtype bf16 --dtype f16 \
      --shard \$SLURM_ARRAY_TASK_ID/$EMBED_SHARDS \
      --out shards/docs.\$SLURM_ARRAY_TASK_ID.npy")

# 2. Merge the vectors (streams the shards, memory-mapped), embed the questions (small: one
#    task), build the index (BM25 + vectors + HNSW) on a CPU node with enough RAM.
index=$(sbatch --parsable --dependency=afterok:$embed_docs --gres=gpu:1 --cpus-per-task=16 \
  --mem=128G --time=4:00:00 --output=logs/index-%j.log --wrap "
    freshstack merge --out docs.npy shards/docs.*.npy &&
    freshstack embed --model $ENCODER --input questions.jsonl --kind query \
      --device cuda --model-dtype bf16 --out questions.npy &&
    freshstack index --corpus corpus.jsonl --index index --bm25 --vectors e5=docs.npy &&
    freshstack retrieve --index index --queries questions.jsonl --retriever bm25 -k 100 --out bm25.trec &&
    freshstack retrieve --index index --queries questions.jsonl --retriever dense:e5 \
      --query-vectors e5=questions.npy -k 100 --out e5.trec &&
    freshstack fuse bm25.trec e5.trec --out fused.trec")

# 3. Nuggets across the fleet, in LLM_SHARDS client tasks (questions sorted by id, question i to
#    shard i % N). Each task has its own response cache: a rerun of a failed task resumes.
nuggets=$(sbatch --parsable --array=0-$((LLM_SHARDS - 1)) --cpus-per-task=2 --mem=4G \
  --time=12:00:00 --output=logs/nuggets-%A_%a.log --wrap "
    freshstack nuggets --questions questions.jsonl \
      --llm-base-url $LLM_URLS --llm-model $LLM_MODEL --llm-concurrency 16 \
      --llm-cache shards/nuggets-cache.\$SLURM_ARRAY_TASK_ID.sqlite \
      --shard \$SLURM_ARRAY_TASK_ID/$LLM_SHARDS --out shards/nuggets.\$SLURM_ARRAY_TASK_ID.jsonl")
merge_nuggets=$(sbatch --parsable --dependency=afterok:$nuggets --time=0:30:00 \
  --output=logs/merge-nuggets-%j.log --wrap "
    freshstack merge --out nuggets.jsonl shards/nuggets.*.jsonl")

# 4. Judge the pool (here: built from the fused run's top 20 per question into pool.jsonl,
#    {"query_id", "doc_ids"} rows, as `freshstack build` pools on one machine) across the fleet.
judge=$(sbatch --parsable --dependency=afterok:$index:$merge_nuggets \
  --array=0-$((LLM_SHARDS - 1)) --cpus-per-task=2 --mem=8G --time=24:00:00 \
  --output=logs/judge-%A_%a.log --wrap "
    test -s pool.jsonl &&
    freshstack judge --questions questions.jsonl --nuggets nuggets.jsonl --corpus corpus.jsonl \
      --pool pool.jsonl --llm-base-url $LLM_URLS --llm-model $LLM_MODEL --llm-concurrency 16 \
      --llm-cache shards/judge-cache.\$SLURM_ARRAY_TASK_ID.sqlite \
      --shard \$SLURM_ARRAY_TASK_ID/$LLM_SHARDS --out shards/judgments.\$SLURM_ARRAY_TASK_ID.jsonl")
sbatch --dependency=afterok:$judge --time=0:30:00 --output=logs/merge-judgments-%j.log --wrap "
    freshstack merge --out judgments.jsonl shards/judgments.*.jsonl"

echo "submitted: embed $embed_docs, index $index, nuggets $nuggets, judge $judge"
