#!/usr/bin/env bash
# The GPU checks, in two steps, because the GPU machine (the `device` tool: one H200, 16 cores,
# CUDA 13.0 driver 580, nvcc 13.0, PyTorch + transformers in python3) has no network and, as far
# as anyone has seen, no Rust toolchain; and what travels to it is the working tree plus at most
# 64 MiB of carried, git-ignored paths.
#
#   1. Here, on a machine with cargo and the network (no GPU needed):
#          scripts/gpu-check.sh prepare
#      sources scripts/setup-cuda.sh (the CUDA 13.0 wheels; see README "Building with CUDA"),
#      builds with `--features cuda` (dev profile: our crate unoptimised, dependencies at -O3)
#      the `freshstack` binary, the `gpu` test binary and the `gpu_topk` bench, strips them and
#      packs them into .gpu/bin.tar.xz (git-ignored by .gitignore; about 40 MiB: the
#      stripped `gpu` test binary packs to 6.4 MiB, a stripped CPU-only `freshstack` to 26 MiB).
#      Nothing else must be carried: the binaries load the driver's libcuda.so.1 and CUDA 13's
#      libnvrtc/libcublas/libcublasLt/libcurand/libcudart, which the GPU machine's image has
#      (PyTorch's nvidia-* wheels, /usr/local/cuda). No `cargo vendor` or wheels: nothing is
#      built there.
#   2. There, through the device tool, with carry [".gpu"] and timeout_s 600:
#          scripts/gpu-check.sh run
#      (about 4-6 minutes) unpacks the binaries, finds the CUDA libraries, and runs:
#        - the `gpu` tests: kernels compile with NVRTC; GPU top-k == CPU flat search, bit for
#          bit, on random data with ties, near-ties and a tie wider than the candidate buffer;
#          the engine's batch search on the GPU == on the CPU;
#        - the `gpu_topk` bench: 500,000 x 1024 f16 (1 GB), k = 100, batches of 16-1024 queries:
#          queries/s and the matrix's effective read bandwidth vs the HBM bound;
#        - E5-Mistral-7B's shapes (benches/compare/make_mistral7b_layers.py, random bf16
#          weights, 8 of 32 layers) embedding 512 texts of 512 tokens with `freshstack embed
#          --device cuda --model-dtype bf16`: tokens/s, and x 8/32 for the whole model;
#      and prints a summary (also written to $OUT/gpu-check.txt when $OUT is set, with the logs).
#
# Options (environment): GPU_CHECK_ROWS, GPU_CHECK_DIM, GPU_CHECK_K (bench size),
# GPU_CHECK_LAYERS (Mistral layers, default 8), GPU_CHECK_TEXTS (default 512).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
pack="$root/.gpu"

prepare() {
    # shellcheck source=/dev/null
    source "$root/scripts/setup-cuda.sh"
    rm -rf "$pack/bin" && mkdir -p "$pack/bin"
    local json exe
    json="$(mktemp)"
    cargo build --features cuda --bin freshstack --message-format=json >"$json"
    cargo test --features cuda --test gpu --no-run --message-format=json >>"$json"
    cargo bench --profile dev --features cuda --bench gpu_topk --no-run --message-format=json >>"$json"
    for target in freshstack gpu gpu_topk; do
        exe="$(python3 - "$json" "$target" <<'PY'
import json, sys
path = None
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[2] and m.get("executable"):
        path = m["executable"]
print(path or "")
PY
)"
        [[ -n "$exe" ]] || { echo "prepare: no executable for $target" >&2; exit 1; }
        cp "$exe" "$pack/bin/$target"
        strip "$pack/bin/$target"
    done
    rm -f "$json"
    tar -C "$pack" -cf - bin | xz -T0 -6 >"$pack/bin.tar.xz"
    rm -rf "$pack/bin"
    local size
    size=$(stat -c %s "$pack/bin.tar.xz")
    echo "prepare: $pack/bin.tar.xz, $((size / 1048576)) MiB (carry limit 64 MiB with the tree)"
}

# Directories holding CUDA 13 libraries on the GPU machine.
cuda_lib_path() {
    local dirs=() d
    for d in /usr/local/nvidia/lib64 /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
        [[ -d "$d" ]] && dirs+=("$d")
    done
    local site
    for site in $(python3 -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
        for d in "$site"/nvidia/cu13/lib "$site"/nvidia/*/lib; do
            [[ -d "$d" ]] && dirs+=("$d")
        done
    done
    local IFS=:
    echo "${dirs[*]}"
}

run() {
    local out="${OUT:-$(mktemp -d)}"
    local work
    work="$(mktemp -d)"
    [[ -s "$pack/bin.tar.xz" ]] || { echo "run: no $pack/bin.tar.xz; run 'prepare' first and carry .gpu" >&2; exit 1; }
    tar -C "$work" -xJf "$pack/bin.tar.xz"
    local bin="$work/bin"
    export LD_LIBRARY_PATH="$(cuda_lib_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    local missing
    missing="$(ldd "$bin/freshstack" "$bin/gpu" | grep 'not found' | sort -u || true)"
    if [[ -n "$missing" ]]; then
        echo "run: libraries not found:"$'\n'"$missing" >&2
        exit 1
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt" || true
    local summary="$out/gpu-check.txt"
    : >"$summary"

    echo "== gpu tests"
    local tests_rc=0
    (cd "$root" && FRESHSTACK_REQUIRE_GPU=1 "$bin/gpu" --test-threads 1 --nocapture) 2>&1 | tee "$out/tests.log" || tests_rc=$?
    {
        echo "tests: $(grep -E '^test result' "$out/tests.log" | tail -n1) (rc $tests_rc)"
        grep -E 'SKIPPED' "$out/tests.log" || true
    } >>"$summary"

    echo "== gpu_topk bench"
    local rows="${GPU_CHECK_ROWS:-500000}" dim="${GPU_CHECK_DIM:-1024}" k="${GPU_CHECK_K:-100}"
    "$bin/gpu_topk" "$rows" "$dim" "$k" 2>&1 | tee "$out/topk.log" || true
    grep -E '^(gpu_topk|SKIPPED)' "$out/topk.log" >>"$summary" || true

    echo "== E5-Mistral-7B shapes, embed on cuda"
    local layers="${GPU_CHECK_LAYERS:-8}" texts="${GPU_CHECK_TEXTS:-512}"
    local model="$work/mistral7b-${layers}l"
    python3 "$root/benches/compare/make_mistral7b_layers.py" "$model" "$layers" 2>&1 | tail -n1 || true
    python3 - "$work/texts.jsonl" "$texts" <<'PY'
import json, random, sys
random.seed(0)
words = "the of route cache queue driver config server request user model table index php laravel function return class".split()
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        text = " ".join(random.choice(words) for _ in range(700))
        f.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
PY
    local embed_rc=0
    "$bin/freshstack" embed --model "$model" --input "$work/texts.jsonl" --out "$work/v.npy" \
        --device cuda --model-dtype bf16 --max-length 512 --pooling last-token 2>&1 \
        | tee "$out/embed.log" || embed_rc=$?
    python3 - "$out/embed.log" "$layers" "$embed_rc" >>"$summary" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
layers, rc = int(sys.argv[2]), sys.argv[3]
m = re.search(r"(\d+) tokens, .*embed ([0-9.]+)s", text)
if m and rc == "0":
    tokens, seconds = int(m.group(1)), float(m.group(2))
    rate = tokens / max(seconds, 1e-9)
    print(f"embed: E5-Mistral-7B shapes, {layers} of 32 layers, bf16, cuda: {tokens} tokens in "
          f"{seconds:.1f}s = {rate:,.0f} tokens/s; whole model ~{rate * layers / 32:,.0f} tokens/s")
else:
    print(f"embed: FAILED (rc {rc}): " + " | ".join(text.strip().splitlines()[-3:]))
PY
    echo
    echo "== summary ($(date -u +%FT%TZ), $(head -n1 "$out/gpu.txt" 2>/dev/null))"
    cat "$summary"
    rm -rf "$work"
    [[ $tests_rc == 0 ]]
}

case "${1:-}" in
    prepare) prepare ;;
    run) run ;;
    *)
        echo "usage: scripts/gpu-check.sh prepare|run (see the header)" >&2
        exit 2
        ;;
esac
