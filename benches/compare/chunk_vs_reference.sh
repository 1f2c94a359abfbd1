#!/usr/bin/env bash
# Chunk the same real tree with the reference chunker (freshstack==0.0.6, Python) and with
# `freshstack corpus`, and print both times and the ratio.
#
# usage: benches/compare/chunk_vs_reference.sh [TREE]    (default: the PHP manual sources from
#        ../shared/corpora/php-doc-en.tar.gz). Needs the reference venv:
#        ../shared/tools/reference-env.sh (built once; this script calls it if missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
REFENV=${REFENV:-$HOME/.cache/freshstack-refenv}
[ -f "$REFENV/env.sh" ] || ../shared/tools/reference-env.sh "$REFENV"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ $# -ge 1 ]; then
  tree=$(realpath "$1")
else
  tar xzf ../shared/corpora/php-doc-en.tar.gz -C "$work"
  tree="$work/php-doc-en"
fi
# The reference wants the checkout at LOCAL_DIR/OWNER/NAME.
mkdir -p "$work/ref/bench"
ln -s "$tree" "$work/ref/bench/tree"
cargo build --release --quiet
bytes=$(find "$tree" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')
echo "tree: $tree ($bytes bytes, $(find "$tree" -type f | wc -l) files), max 2048 tokens, $(nproc) cores"

timed() { # prints wall seconds of "$@"
  local start end
  start=$(date +%s.%N); "$@" >/dev/null 2>&1; end=$(date +%s.%N)
  echo "$end - $start" | bc -l
}
ours1=$(timed ./target/release/freshstack corpus --repo bench/tree="$tree" --out "$work/ours.jsonl" --threads 1)
oursn=$(timed ./target/release/freshstack corpus --repo bench/tree="$tree" --out "$work/ours.jsonl")
ref=$( (source "$REFENV/env.sh"; timed python ../shared/tools/ref_chunk.py "$work/ref" bench/tree "$work/refout" 2048) )
printf 'reference (freshstack 0.0.6): %8.2f s  %6.2f MB/s  %s documents\n' "$ref" "$(echo "$bytes/$ref/1000000" | bc -l)" "$(wc -l < "$work/refout/corpus.jsonl")"
printf 'freshstack, 1 thread:         %8.2f s  %6.2f MB/s  %s documents\n' "$ours1" "$(echo "$bytes/$ours1/1000000" | bc -l)" "$(wc -l < "$work/ours.jsonl")"
printf 'freshstack, %s threads:        %8.2f s  %6.2f MB/s\n' "$(nproc)" "$oursn" "$(echo "$bytes/$oursn/1000000" | bc -l)"
printf 'ratio (reference / ours, all threads): %.1fx\n' "$(echo "$ref/$oursn" | bc -l)"
