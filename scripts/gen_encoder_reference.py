#!/usr/bin/env python3
"""Writes tests/fixtures/embed/NAME_reference.json: sentence-transformers' embeddings of ~20
texts with a real model under models/ (scripts/setup.sh [--with-encoders] fetches them), the parity
reference for our native encoders. Needs torch + sentence-transformers in a venv outside the
repo, e.g.
    python3 -m venv /work/venv-enc && /work/venv-enc/bin/pip install torch sentence-transformers
    /work/venv-enc/bin/python scripts/gen_encoder_reference.py all-MiniLM-L6-v2
    /work/venv-enc/bin/python scripts/gen_encoder_reference.py all-mpnet-base-v2
"""
import json
import pathlib
import sys

from sentence_transformers import SentenceTransformer

ROOT = pathlib.Path(__file__).resolve().parent.parent
# models/ directory -> fixture name.
FIXTURES = {
    "all-MiniLM-L6-v2": "minilm",
    "all-mpnet-base-v2": "mpnet",
    "embeddinggemma-300m": "embeddinggemma",
}
# Texts also embedded as queries, for models whose prompts differ by kind.
QUERIES = 5

LONG = " ".join(
    f"Step {i}: run php artisan migrate --force and check the queue worker logs." for i in range(60)
)
TEXTS = [
    "How do I define a route with a parameter in Laravel?",
    "Route::get('/user/{id}', function (string $id) { return 'User '.$id; });",
    "a",
    "Eloquent relationships: hasMany, belongsTo and many-to-many pivot tables.",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
    "The queue worker stops after processing jobs; use Supervisor to keep it running.",
    "Ünïcödé text with accents: café, naïve, façade — and emoji 🚀.",
    "SELECT id, name FROM users WHERE email LIKE '%@example.com' ORDER BY created_at DESC;",
    "Blade templates use {{ $variable }} for escaped output and {!! $html !!} for raw HTML.",
    "Why does `npm run build` fail with 'Cannot find module vite'?",
    "   leading and trailing whitespace   ",
    "CSRF token mismatch after upgrading to Laravel 11",
    "中文文本的嵌入测试",
    "To configure the mail driver, set MAIL_MAILER=smtp in your .env file and restart.",
    "<?php\nnamespace App\\Http\\Controllers;\n\nclass UserController extends Controller {}\n",
    "Middleware can inspect and filter HTTP requests entering your application.",
    "x" * 40,
    "What is the difference between php artisan serve and valet?",
    LONG,
    "Testing: use RefreshDatabase to reset the database after each test.",
]


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in FIXTURES:
        sys.exit(f"usage: gen_encoder_reference.py {{{'|'.join(FIXTURES)}}}")
    name = sys.argv[1]
    model = SentenceTransformer(str(ROOT / "models" / name), device="cpu")
    out = ROOT / "tests" / "fixtures" / "embed" / f"{FIXTURES[name]}_reference.json"
    # A model with retrieval prompts embeds documents and queries with its own prompt for each.
    prompts = getattr(model, "prompts", {}) or {}
    document = "document" if "document" in prompts else None
    vectors = model.encode(TEXTS, batch_size=4, normalize_embeddings=True, convert_to_numpy=True,
                           prompt_name=document)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "model": f"sentence-transformers/{name}",
        "max_seq_length": model.max_seq_length,
        "texts": TEXTS,
        "vectors": [[round(float(v), 7) for v in row] for row in vectors],
    }
    if "query" in prompts:
        queries = model.encode(TEXTS[:QUERIES], batch_size=4, normalize_embeddings=True,
                               convert_to_numpy=True, prompt_name="query")
        payload["query_vectors"] = [[round(float(v), 7) for v in row] for row in queries]
    out.write_text(json.dumps(payload, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(TEXTS)} vectors of dim {vectors.shape[1]} to {out}")


if __name__ == "__main__":
    main()
