"""build / refresh from Python: a small benchmark built natively with SmolLM2 (skips loudly
without it), its progress on Python logging, resuming, Ctrl-C, and bad configs."""
from __future__ import annotations

import _thread
import json
import logging
import signal

import pytest

import freshstack_rs as fs

from conftest import ROOT

SMOLLM = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm():
    if not SMOLLM.is_file():
        pytest.skip(f"SKIPPED LOUDLY: {SMOLLM} is missing; run scripts/setup-llm.sh")
    return SMOLLM


def topic(tmp_path):
    """A two-question topic over a four-file repository, as a config dict."""
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "cache.md").write_text(
        "# Cache\n\nSet CACHE_DRIVER=redis in .env to keep entries in Redis.\n"
    )
    (repo / "docs" / "queue.md").write_text(
        "# Queue\n\nRun php artisan queue:work to start a worker that runs jobs.\n"
    )
    (repo / "README.md").write_text("# Demo\n\nA demo application with a cache and a queue.\n")
    rows = [
        ("11", "How do I keep the cache in Redis", "Entries vanish.", "Set CACHE_DRIVER=redis."),
        ("12", "Why do my queue jobs never run", "Jobs stay pending.", "Run queue:work."),
    ]
    with open(tmp_path / "questions.jsonl", "w") as f:
        for qid, title, body, answer in rows:
            f.write(json.dumps({
                "query_id": qid, "query_title": title, "query_text": body,
                "answer_id": qid + "0", "answer_text": answer,
                "metadata": {"date": "2024-05-01T10:00:00.000", "tags": ["demo"]},
            }) + "\n")
    return {
        "topic": "demo",
        "questions": {"file": str(tmp_path / "questions.jsonl")},
        "corpus": {"max_tokens": 64, "repositories": {"acme/demo": str(repo)}},
        "retrieval": {"pool_depth": 3, "fusion_depth": 10},
        "llm": {"gguf": str(smollm()), "concurrency": 1},
        "nuggets": {"max_nuggets": 2, "max_tokens": 128},
        "variants": {"max_sub_questions": 1, "max_tokens": 96},
        "judge": {"verdict": "terms"},
    }


class Lines(logging.Handler):
    def __init__(self, on_line=None):
        super().__init__()
        self.lines = []
        self.on_line = on_line

    def emit(self, record):
        self.lines.append(record.getMessage())
        if self.on_line:
            self.on_line(record.getMessage())


def test_build_logs_progress_and_resumes(tmp_path):
    config = topic(tmp_path)
    out = tmp_path / "build"
    logger = logging.getLogger("freshstack_rs.test_build")
    logger.setLevel(logging.INFO)
    handler = Lines()
    logger.addHandler(handler)
    try:
        summary = fs.build(config, out, logger=logger)
    finally:
        logger.removeHandler(handler)
    names = [s["stage"] for s in summary["stages"]]
    assert names[:3] == ["questions", "corpus", "index"], names
    assert "judge" in names and names[-1] == "report", names
    assert all(s["ran"] for s in summary["stages"])
    assert summary["documents"] > 0 and summary["out"] == str(out)
    assert (out / "queries.jsonl").is_file() and (out / "report.html").is_file()
    # Every stage's line and the LLM stages' progress reached Python logging.
    assert any(line.startswith("judge ") for line in handler.lines), handler.lines
    assert any(": done (" in line for line in handler.lines), handler.lines
    # The same settings as a TOML file: a rerun from it finds every stage up to date (but the
    # corpus stage, which always reads the checkouts and finds the same documents).
    toml = tmp_path / "demo.toml"
    toml.write_text(f"""topic = "demo"
[questions]
file = "questions.jsonl"
[corpus]
max_tokens = 64
[corpus.repositories]
"acme/demo" = "repo"
[retrieval]
pool_depth = 3
fusion_depth = 10
[llm]
gguf = "{SMOLLM}"
concurrency = 1
[nuggets]
max_nuggets = 2
max_tokens = 128
[variants]
max_sub_questions = 1
max_tokens = 96
[judge]
verdict = "terms"
""")
    again = fs.build(toml, out)
    ran = [s["stage"] for s in again["stages"] if s["ran"]]
    assert ran == ["corpus"], again["stages"]


def test_ctrl_c_stops_the_build_and_a_rerun_resumes(tmp_path):
    config = topic(tmp_path)
    out = tmp_path / "build"
    logger = logging.getLogger("freshstack_rs.test_interrupt")
    logger.setLevel(logging.INFO)
    pressed = []

    def press_once(line):
        # Ctrl-C as the first stage ends, from the build's own thread.
        if not pressed and line.startswith("questions "):
            pressed.append(line)
            _thread.interrupt_main()

    handler = Lines(press_once)
    logger.addHandler(handler)
    # Python's own Ctrl-C handler, as in an interactive session: a process started in the
    # background by a shell inherits SIGINT ignored, and interrupt_main() then does nothing.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            fs.build(config, out, logger=logger)
    finally:
        signal.signal(signal.SIGINT, previous)
        logger.removeHandler(handler)
    assert pressed
    assert not (out / "report.html").exists(), "the build stopped before its end"
    summary = fs.build(config, out)
    ran = {s["stage"]: s["ran"] for s in summary["stages"]}
    assert ran["questions"] is False, ran
    assert ran["judge"] is True, ran
    assert (out / "report.html").is_file()


def test_bad_configs_raise_the_library_message(tmp_path):
    with pytest.raises(fs.FreshstackError, match="unknown field"):
        fs.build({"topic": "x", "no_such_table": {}}, tmp_path / "b")
    with pytest.raises(fs.FreshstackError, match="missing.toml"):
        fs.build(tmp_path / "missing.toml", tmp_path / "b")
    with pytest.raises(TypeError, match="config"):
        fs.build(42, tmp_path / "b")
