#!/usr/bin/env bash
# Builds with `--features cuda` without a system CUDA toolkit: NVIDIA's CUDA 13.0 wheels from
# PyPI carry nvcc (+ cicc, ptxas), the headers, NVRTC, cuBLAS, cuRAND and the runtime, all in one
# tree (site-packages/nvidia/cu13) that works as a CUDA_HOME.
#
# Usage (source it: it exports the variables into your shell):
#     source scripts/setup-cuda.sh            # venv at $CUDA_VENV (default /work/venv-cuda)
#     cargo check --features cuda
#     cargo test --features cuda --test tests gpu
#
# What it does, idempotently:
#   1. creates the venv and pip-installs the pinned wheels (about 1.2 GB installed);
#   2. adds the unversioned `libX.so` links the linker wants (`-lnvrtc`, `-lcublas`, ...);
#   3. builds a stub `lib/stubs/libcuda.so` (soname libcuda.so.1) from the driver functions
#      cudarc declares, because libcuda is the driver's, not the toolkit's. Every stub returns
#      CUDA_ERROR_NO_DEVICE (100), so on a machine without a GPU the binaries load, report "no
#      device" and the GPU tests skip; on a GPU machine the driver's real libcuda.so.1 must come
#      first on the library path (it does when the stub directory is not on LD_LIBRARY_PATH);
#   4. exports CUDA_HOME, PATH (nvcc), CUDA_COMPUTE_CAP (default 90, the H100/H200; candle's
#      kernels are compiled for it without asking nvidia-smi), LIBRARY_PATH (link time) and
#      LD_LIBRARY_PATH (run time: the toolkit libraries, plus the stub only with
#      FRESHSTACK_CUDA_STUB=1 or when no libcuda.so.1 is installed).
#
# CUDA 13.0 exactly: its PTX (ISA 9.0) loads on drivers >= 580, the driver the H200 machine has;
# a newer toolkit's PTX would be refused by that driver. Needs python3 (venv, pip), gcc, network.
# Not `set -e`: this file is sourced into an interactive shell.

_fs_setup_cuda() {
    local venv="${CUDA_VENV:-/work/venv-cuda}"
    local py="$venv/bin/python"
    if [[ ! -x "$py" ]]; then
        python3 -m venv "$venv" || return 1
    fi
    if ! "$py" -c 'import importlib.metadata as m; m.version("nvidia-cuda-nvcc")' >/dev/null 2>&1; then
        "$py" -m pip install --quiet \
            "nvidia-cuda-nvcc==13.0.88" "nvidia-cuda-crt==13.0.88" "nvidia-nvvm==13.0.88" \
            "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-nvrtc==13.0.88" \
            "nvidia-cublas==13.0.2.14" "nvidia-curand==10.4.0.35" \
            "nvidia-cuda-cccl==13.0.85" || return 1
    fi
    local home
    # A build-only machine short of disk may replace cuBLAS/cuRAND (~700 MB) by link-time stubs
    # (they only need the symbols to link); restore the real ones unless FRESHSTACK_CUDA_STUBS_OK=1.
    local lt
    lt="$("$py" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13/lib/libcublasLt.so.13"))')"
    if [[ "${FRESHSTACK_CUDA_STUBS_OK:-}" != 1 && ( ! -s "$lt" || $(stat -c %s "$lt") -lt 1000000 ) ]]; then
        "$py" -m pip install --quiet --force-reinstall --no-deps \
            "nvidia-cublas==13.0.2.14" "nvidia-curand==10.4.0.35" || return 1
    fi
    home="$("$py" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')" || return 1
    if [[ ! -x "$home/bin/nvcc" ]]; then
        echo "setup-cuda: no nvcc under $home" >&2
        return 1
    fi
    local lib="$home/lib"
    local name
    for name in nvrtc cublas cublasLt cudart curand; do
        local real
        real="$(ls "$lib"/lib$name.so.* 2>/dev/null | grep -v alt | head -n1)"
        if [[ -n "$real" && ! -e "$lib/lib$name.so" ]]; then
            ln -s "$(basename "$real")" "$lib/lib$name.so"
        fi
    done
    local stubs="$lib/stubs"
    if [[ ! -e "$stubs/libcuda.so" ]]; then
        mkdir -p "$stubs"
        local sys
        sys="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.10/src/driver/sys/mod.rs 2>/dev/null | head -n1)"
        if [[ -z "$sys" ]]; then
            echo "setup-cuda: cudarc 0.19.10 sources not found; run 'cargo fetch' first" >&2
            return 1
        fi
        grep -o 'fn cu[A-Za-z0-9_]*(' "$sys" | sort -u \
            | sed 's/^fn \(.*\)(/int \1(void) { return 100; }/' >"$stubs/libcuda_stub.c"
        gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$stubs/libcuda.so" "$stubs/libcuda_stub.c" \
            || return 1
        ln -sf libcuda.so "$stubs/libcuda.so.1"
    fi
    export CUDA_HOME="$home"
    export PATH="$home/bin:$PATH"
    export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
    export LIBRARY_PATH="$lib:$stubs${LIBRARY_PATH:+:$LIBRARY_PATH}"
    local run_path="$lib"
    local have_driver=0 dir
    if ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1 '; then
        have_driver=1
    fi
    for dir in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }} /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu; do
        if [[ -e "$dir/libcuda.so.1" && "$dir" != "$stubs" ]]; then
            have_driver=1
        fi
    done
    if [[ "${FRESHSTACK_CUDA_STUB:-}" == 1 || $have_driver == 0 ]]; then
        run_path="$lib:$stubs"
    fi
    export LD_LIBRARY_PATH="$run_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "setup-cuda: CUDA_HOME=$CUDA_HOME ($(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')), CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP"
}
_fs_setup_cuda
