#!/usr/bin/env bash
# Reproduces the fuzzing campaign of docs/reliability.md: every target in turn, one process at a
# time (nice'd), each bounded by a number of runs and a wall time, memory capped.
#
#   fuzz/run-campaign.sh [libfuzzer|stable] [RUNS] [MAX_SECS] [TARGET...]
#
# libfuzzer (default): coverage-guided, `cargo fuzz` with libFuzzer and AddressSanitizer. It
#   needs a nightly toolchain; on stable, RUSTC_BOOTSTRAP=1 (set here) unlocks the flags.
#   The nightly command for one target is
#     cargo +nightly fuzz run --fuzz-dir fuzz -O so_xml fuzz/target/work/so_xml fuzz/corpus/so_xml \
#       -- -runs=1000000 -rss_limit_mb=2048 -malloc_limit_mb=512 -max_len=65536 -timeout=10
#   New coverage lands in fuzz/target/work/TARGET (ignored); `-merge=1` then adds the inputs
#   that bring new coverage to fuzz/corpus/TARGET (committed, run by `cargo test`).
# stable: examples/fuzz.rs, a blind mutation fuzzer with an allocation cap (no nightly flags).
#
# Findings: fuzz/artifacts/TARGET/ (crash-*, oom-*, timeout-* or panic-*); a fixed one is copied
# to fuzz/regressions/TARGET/ and replayed by tests/fuzz_corpus.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-libfuzzer}
runs=${2:-1000000}
secs=${3:-1200}
shift $(( $# < 3 ? $# : 3 ))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(so_xml so_html questions corpus nuggets judgments trec_run qrels llm_answer gguf
           safetensors npy manifest build_config annotations)
fi
max_len() { case $1 in safetensors) echo 131072;; gguf) echo 524288;; *) echo 65536;; esac; }
log=fuzz/target/campaign-$mode.log
mkdir -p fuzz/target
case $mode in
  libfuzzer)
    export RUSTC_BOOTSTRAP=1
    nice -n 10 cargo fuzz build --fuzz-dir fuzz -O
    for t in "${targets[@]}"; do
      work=fuzz/target/work/$t
      mkdir -p "$work" "fuzz/artifacts/$t"
      start=$(date +%s)
      nice -n 10 fuzz/target/x86_64-unknown-linux-gnu/release/"$t" "$work" "fuzz/corpus/$t" \
        -runs="$runs" -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=512 \
        -max_len="$(max_len "$t")" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="fuzz/artifacts/$t/" > "fuzz/target/$t.log" 2>&1 || true
      execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "fuzz/target/$t.log" | grep -o '[0-9]*$' || echo 0)
      cov=$(grep -o 'cov: [0-9]*' "fuzz/target/$t.log" | tail -1 || true)
      echo "$t execs=$execs secs=$(( $(date +%s) - start )) $cov findings=$(ls "fuzz/artifacts/$t" | wc -l)" | tee -a "$log"
      # Keep only the inputs that add coverage (a small set) in the committed corpus.
      nice -n 10 fuzz/target/x86_64-unknown-linux-gnu/release/"$t" -merge=1 \
        -max_len="$(max_len "$t")" "fuzz/corpus/$t" "$work" > /dev/null 2>&1 || true
    done
    ;;
  stable)
    nice -n 10 cargo build --example fuzz
    for t in "${targets[@]}"; do
      nice -n 10 target/debug/examples/fuzz "$t" --runs "$runs" --max-secs "$secs" \
        --save "fuzz/corpus/$t" --max-len "$(max_len "$t")" \
        --malloc-limit-mb 512 --rss-limit-mb 2048 | tee -a "$log" || true
    done
    ;;
  *) echo "mode: libfuzzer or stable" >&2; exit 2 ;;
esac
