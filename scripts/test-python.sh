#!/usr/bin/env bash
# The Python package's tests (python/tests, pytest): builds freshstack_rs into a virtual
# environment with maturin (dev profile, so the crates `cargo test` compiled are reused) and
# runs the suite, the evaluation against the reference package freshstack==0.0.6 included.
#
# usage: scripts/test-python.sh [PYTEST ARGS...]
#
# The environment lives in target/python-venv (made once; PyPI through pip): maturin, numpy,
# pytest, and the reference evaluator with its two metric libraries (pyndeval,
# pytrec-eval-terrier; the reference's own `datasets` dependency is not needed for its
# evaluator and not installed). No torch.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
venv=target/python-venv
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import maturin, numpy, pytest, pyndeval, pytrec_eval, tqdm, freshstack" 2>/dev/null; then
  "$venv/bin/pip" install -q --disable-pip-version-check \
    "maturin>=1.5,<2" numpy pytest tqdm pyndeval pytrec-eval-terrier
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps freshstack==0.0.6
fi
VIRTUAL_ENV="$PWD/$venv" PATH="$PWD/$venv/bin:$PATH" \
  "$venv/bin/maturin" develop --quiet -m python/Cargo.toml --profile dev
exec "$venv/bin/python" -m pytest -q -rs python/tests "$@"
