#!/usr/bin/env bash
# Measures judge protocols against judge-dev's reference labels (../shared/judge-dev): for each
# variant, `freshstack judge` on the 12 questions' 1,155 (question, reference nugget, pooled
# document) pairs, then `freshstack calibrate agreement`, and one summary line: support rate,
# precision / recall of "supported", Cohen's kappa with its bootstrap interval, wall time.
#
#   scripts/judge-dev.sh [--gguf MODEL.gguf] [--pool POOL.jsonl] [--out DIR] VARIANT...
#
# A VARIANT is the judge flags after a name, separated by ':' for spaces, e.g.
#   terms40:--verdict:terms:--min-term-coverage:0.4
#   prob:--verdict:probability:--threshold:0.5
#   batch10:--verdict:generate:--docs-per-call:10:--llm-max-tokens:768
# Outputs (judgments, agreement JSON, log) go to DIR (default $TMPDIR/freshstack-judge-dev, outside the checkout: the quickstart chunks the checkout); each variant has
# its own response cache there, so a rerun replays the answers. Needs a release build.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dev="$root/../shared/judge-dev"
gguf="$root/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
pool="$dev/pool.jsonl"
out="${TMPDIR:-/tmp}/freshstack-judge-dev"
variants=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --gguf) gguf="$2"; shift 2 ;;
        --pool) pool="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -*) echo "judge-dev.sh: unknown option $1" >&2; exit 2 ;;
        *) variants+=("$1"); shift ;;
    esac
done
[[ -d "$dev" ]] || { echo "judge-dev.sh: $dev is absent" >&2; exit 1; }
[[ ${#variants[@]} -gt 0 ]] || { echo "judge-dev.sh: give at least one VARIANT" >&2; exit 2; }
# FRESHSTACK_BIN: another build of the binary (the dev profile's runs the same arithmetic, so
# the same labels, only slower).
bin="${FRESHSTACK_BIN:-$root/target/release/freshstack}"
[[ -x "$bin" ]] || { echo "judge-dev.sh: build first: cargo build --release" >&2; exit 1; }
mkdir -p "$out"

for variant in "${variants[@]}"; do
    name="${variant%%:*}"
    IFS=':' read -r -a flags <<< "${variant#*:}"
    [[ "$variant" == *:* ]] || flags=()
    start=$SECONDS
    "$bin" judge --questions "$dev/questions.jsonl" --nuggets "$dev/nuggets.jsonl" \
        --corpus "$dev/corpus.jsonl" --pool "$pool" --out "$out/$name.jsonl" \
        --llm-gguf "$gguf" --llm-cache "$out/$name.cache.sqlite" --max-doc-tokens 256 \
        --llm-context-tokens 16384 "${flags[@]}" 2> "$out/$name.log"
    seconds=$((SECONDS - start))
    position=()
    for ((i = 0; i < ${#flags[@]}; i++)); do
        if [[ "${flags[$i]}" == --docs-per-call ]]; then
            position=(--pool "$pool" --docs-per-call "${flags[$((i + 1))]}")
        fi
    done
    "$bin" calibrate agreement --judgments "$out/$name.jsonl" --labels "$dev/labels.jsonl" \
        "${position[@]}" --json > "$out/$name.agreement.json"
    python3 - "$out/$name.agreement.json" "$name" "$seconds" <<'PY'
import json, sys
report, name, seconds = json.load(open(sys.argv[1])), sys.argv[2], float(sys.argv[3])
a = report["overall"]
lo, hi = report["kappa_ci95"] or (float("nan"), float("nan"))
f = lambda v: "n/a" if v is None else f"{v:.3f}"
print(f"{name}: {a['pairs']} pairs, supported {100 * a['judge_support_rate']:.1f}% "
      f"(reference {100 * a['reference_support_rate']:.1f}%), precision {f(a['precision'])}, "
      f"recall {f(a['recall'])}, kappa {f(a['kappa'])} [{lo:.3f}, {hi:.3f}], {seconds:.0f} s")
PY
done
