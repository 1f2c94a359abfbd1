#!/usr/bin/env bash
# Rebuilds tests/fixtures/stackoverflow/posts.7z from Posts.xml with real 7-Zip (`7zz`, Debian
# package 7zip; `7z` works too), LZMA2 as the Stack Exchange dumps use by default.
set -euo pipefail
cd "$(dirname "$0")/../tests/fixtures/stackoverflow"
SEVEN=$(command -v 7zz || command -v 7z)
rm -f posts.7z
"$SEVEN" a -t7z -m0=lzma2 -mx=9 posts.7z Posts.xml >/dev/null
ls -l posts.7z
