"""Writes the `freshstack benchmark` test fixtures: a tiny FreshStack-style dataset in the exact
Hugging Face hub cache layout (Parquet with the reference columns, nested nuggets and metadata
structs), plus a Parquet file with a missing column for the bad-input test.

Run with the reference venv (it has pyarrow):
    source ~/.cache/freshstack-refenv/bin/activate
    python scripts/gen_benchmark_fixtures.py
Output: tests/fixtures/benchmark/ (committed).
"""

import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "benchmark")
REVISION = "0123456789abcdef0123456789abcdef01234567"

DOCS = [
    ("acme/lib/README.md_0_120", "Install the widget library with pip install widget. The widget renders charts."),
    ("acme/lib/docs/config.md_0_150", "Configure the widget cache: set WIDGET_CACHE_DIR to a writable directory before import."),
    ("acme/lib/src/cache.py_0_200", "def cache_dir():\n    return os.environ.get('WIDGET_CACHE_DIR', '~/.widget')"),
    ("acme/lib/src/render.py_0_180", "def render_chart(data, width=640, height=480):\n    # draws a bar chart with matplotlib"),
    ("acme/lib/docs/charts.md_0_160", "Bar charts and line charts: pass width and height to render_chart to resize the figure."),
    ("acme/lib/src/auth.py_0_140", "def login(token):\n    # OAuth token refresh for the widget cloud service"),
    ("acme/lib/docs/auth.md_0_170", "Authentication: call login with an API token; tokens expire after one hour and refresh automatically."),
    ("acme/lib/CHANGELOG.md_0_90", "Version 2.0 renamed render to render_chart and dropped Python 3.7."),
    ("acme/server/app.js_0_150", "const express = require('express'); app.get('/health', (req, res) => res.send('ok'));"),
    ("acme/server/docs/deploy.md_0_130", "Deploy the server with docker compose up; the health endpoint answers on port 8080."),
    ("acme/server/src/db.js_0_110", "Database connection pool: max 10 connections, idle timeout 30 seconds."),
    ("acme/server/docs/db.md_0_140", "Tune the database pool size with DB_POOL_MAX when requests time out under load."),
]

QUERIES = [
    {
        "query_id": "101",
        "query_title": "Widget cache directory permission error",
        "query_text": "How do I change where the widget cache is stored? The default directory is not writable.",
        "answer_id": "201",
        "answer_text": "Set WIDGET_CACHE_DIR before importing widget.",
        "metadata": {"date": "2024-03-14T10:11:12.880", "tags": ["python", "widget"]},
        "nuggets": [
            {"_id": "101_0", "text": "WIDGET_CACHE_DIR sets the cache directory.",
             "relevant_corpus_ids": ["acme/lib/docs/config.md_0_150", "acme/lib/src/cache.py_0_200"],
             "non_relevant_corpus_ids": ["acme/lib/README.md_0_120"]},
            {"_id": "101_1", "text": "It must be set before import.",
             "relevant_corpus_ids": ["acme/lib/docs/config.md_0_150"],
             "non_relevant_corpus_ids": []},
        ],
    },
    {
        "query_id": "102",
        "query_title": "Resize a bar chart",
        "query_text": "render_chart draws my bar chart too small; how can I set the width and height of the figure?",
        "answer_id": "202",
        "answer_text": "Pass width and height to render_chart (renamed from render in 2.0).",
        "metadata": {"date": "2024-04-01T08:00:00.000", "tags": ["python", "widget", "charts"]},
        "nuggets": [
            {"_id": "102_0", "text": "render_chart takes width and height.",
             "relevant_corpus_ids": ["acme/lib/src/render.py_0_180", "acme/lib/docs/charts.md_0_160"],
             "non_relevant_corpus_ids": []},
            {"_id": "102_1", "text": "render was renamed render_chart in version 2.0.",
             # The second id is not in the corpus: the loader counts and warns.
             "relevant_corpus_ids": ["acme/lib/CHANGELOG.md_0_90", "acme/lib/docs/missing.md_0_10"],
             "non_relevant_corpus_ids": ["acme/lib/README.md_0_120"]},
        ],
    },
    {
        "query_id": "103",
        "query_title": "Server requests time out",
        "query_text": "Under load the express server times out on database queries. Which setting controls the connection pool?",
        "answer_id": "203",
        "answer_text": "Raise DB_POOL_MAX; the default pool has 10 connections.",
        "metadata": {"date": "2024-05-20T12:30:00.000", "tags": ["node.js", "express"]},
        "nuggets": [
            {"_id": "103_0", "text": "DB_POOL_MAX sets the pool size.",
             "relevant_corpus_ids": ["acme/server/docs/db.md_0_140"],
             "non_relevant_corpus_ids": ["acme/server/app.js_0_150"]},
            {"_id": "103_1", "text": "The default pool has 10 connections.",
             "relevant_corpus_ids": ["acme/server/src/db.js_0_110"],
             "non_relevant_corpus_ids": []},
            {"_id": "103_2", "text": "Requests time out when the pool is exhausted.",
             "relevant_corpus_ids": ["acme/server/docs/db.md_0_140", "acme/server/src/db.js_0_110"],
             "non_relevant_corpus_ids": []},
        ],
    },
]

NUGGET = pa.struct([
    ("_id", pa.string()),
    ("text", pa.string()),
    ("relevant_corpus_ids", pa.list_(pa.string())),
    ("non_relevant_corpus_ids", pa.list_(pa.string())),
])
QUERY_SCHEMA = pa.schema([
    ("query_id", pa.string()),
    ("query_title", pa.string()),
    ("query_text", pa.string()),
    ("answer_id", pa.string()),
    ("answer_text", pa.string()),
    ("metadata", pa.struct([("date", pa.string()), ("tags", pa.list_(pa.string()))])),
    ("nuggets", pa.list_(NUGGET)),
])
CORPUS_SCHEMA = pa.schema([
    ("_id", pa.string()),
    ("title", pa.string()),
    ("text", pa.string()),
    ("metadata", pa.struct([
        ("url", pa.string()),
        ("start_byte", pa.int64()),
        ("end_byte", pa.int64()),
        ("commit_id", pa.string()),
    ])),
])


def corpus_rows():
    rows = []
    for doc_id, text in DOCS:
        repo_path, start, end = doc_id.rsplit("_", 2)
        owner, name, path = repo_path.split("/", 2)
        rows.append({
            "_id": doc_id,
            "title": "",
            "text": text,
            "metadata": {
                "url": f"https://github.com/{owner}/{name}/blob/abc/{path}",
                "start_byte": int(start),
                "end_byte": int(end),
                "commit_id": "abc",
            },
        })
    return rows


def snapshot(hub, repo):
    base = os.path.join(hub, f"datasets--{repo.replace('/', '--')}")
    os.makedirs(os.path.join(base, "refs"), exist_ok=True)
    with open(os.path.join(base, "refs", "main"), "w") as f:
        f.write(REVISION)
    return os.path.join(base, "snapshots", REVISION)


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    hub = os.path.join(ROOT, "hf", "hub")
    queries = snapshot(hub, "freshstack/queries-tiny")
    corpus = snapshot(hub, "freshstack/corpus-tiny")
    os.makedirs(os.path.join(queries, "tiny"))
    os.makedirs(os.path.join(corpus, "tiny"))
    # Queries in two files (as a large split would be) with snappy, the corpus with zstd.
    table = pa.Table.from_pylist(QUERIES, schema=QUERY_SCHEMA)
    pq.write_table(table.slice(0, 2), os.path.join(queries, "tiny", "test-00000-of-00002.parquet"),
                   compression="snappy")
    pq.write_table(table.slice(2), os.path.join(queries, "tiny", "test-00001-of-00002.parquet"),
                   compression="snappy")
    pq.write_table(pa.Table.from_pylist(corpus_rows(), schema=CORPUS_SCHEMA),
                   os.path.join(corpus, "tiny", "train-00000-of-00001.parquet"), compression="zstd")
    # A corpus file without its `text` column.
    bad = pa.Table.from_pylist([{"_id": d, "title": ""} for d, _ in DOCS],
                               schema=pa.schema([("_id", pa.string()), ("title", pa.string())]))
    pq.write_table(bad, os.path.join(ROOT, "corpus-no-text.parquet"))


if __name__ == "__main__":
    main()
