#!/usr/bin/env bash
# Rebuilds tests/fixtures/stackoverflow/posts*.7z from Posts.xml with real 7-Zip (`7zz`, Debian
# package 7zip; `7z` works too): LZMA2 (7-Zip's default), BZip2 and PPMd.
set -euo pipefail
cd "$(dirname "$0")/../tests/fixtures/stackoverflow"
SEVEN=$(command -v 7zz || command -v 7z)
rm -f posts.7z posts-bzip2.7z posts-ppmd.7z
"$SEVEN" a -t7z -m0=lzma2 -mx=9 posts.7z Posts.xml >/dev/null
"$SEVEN" a -t7z -m0=bzip2 posts-bzip2.7z Posts.xml >/dev/null
"$SEVEN" a -t7z -m0=ppmd posts-ppmd.7z Posts.xml >/dev/null
ls -l posts*.7z
