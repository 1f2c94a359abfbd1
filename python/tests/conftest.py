"""Shared fixtures: the repository root, the freshstack binary, and models fetched by
scripts/setup.sh (tests that need one skip loudly when it is absent)."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def model_dir(name: str) -> pathlib.Path:
    path = ROOT / "models" / name
    if not (path / "config.json").is_file():
        pytest.skip(f"SKIPPED LOUDLY: {path} is missing; run scripts/setup.sh")
    return path


@pytest.fixture(scope="session")
def freshstack_bin() -> pathlib.Path:
    """The CLI (to build indexes the tests search): $FRESHSTACK_BIN, else target/debug or
    target/release of this checkout."""
    env = os.environ.get("FRESHSTACK_BIN")
    candidates = [pathlib.Path(env)] if env else []
    candidates += [ROOT / "target" / "debug" / "freshstack", ROOT / "target" / "release" / "freshstack"]
    for c in candidates:
        if c.is_file():
            return c
    found = shutil.which("freshstack")
    if found:
        return pathlib.Path(found)
    pytest.skip("SKIPPED LOUDLY: no freshstack binary; run cargo build")


def run(args, **kw):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True, **kw)
