#!/usr/bin/env python3
"""Builds fuzz/corpus/TARGET/seed-* from real inputs: the test fixtures, the models' headers,
the bioinformatics Stack Exchange dump, an index made with the binary. Run from the repository
root; re-running rewrites the seed-* files only (found inputs, new-*, are kept).

usage: fuzz/seed-corpus.py [--dump /work/shared/corpora/bioinformatics-se-2017-Posts.xml.gz]
                           [--index DIR]   # extra index directories whose manifest.json to take
"""
import glob, gzip, html, json, os, re, struct, sys

args = sys.argv[1:]
dump = "/work/shared/corpora/bioinformatics-se-2017-Posts.xml.gz"
indexes = []
while args:
    flag, value, args = args[0], args[1], args[2:]
    if flag == "--dump":
        dump = value
    elif flag == "--index":
        indexes.append(value)
    else:
        sys.exit(f"unknown flag {flag}")

ROOT = "fuzz/corpus"
MAX = 16 << 10  # one seed's bytes


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def head_lines(path, limit=MAX):
    out = b""
    with open(path, "rb") as f:
        for line in f:
            if len(out) + len(line) > limit:
                break
            out += line
    return out


for t in glob.glob(ROOT + "/*/seed-*"):
    os.remove(t)

# Stack Exchange: the fixture, and windows of rows of the real dump.
put("so_xml", "fixture-Posts.xml", open("tests/fixtures/stackoverflow/Posts.xml", "rb").read())
rows = []
with gzip.open(dump, "rb") as f:
    prolog = b""
    for line in f:
        s = line.strip()
        if s.startswith(b"<row "):
            rows.append(s)
        elif not rows:
            prolog += line
        if len(rows) >= 4000:
            break
for i, start in enumerate([0, 37, 500, 1200, 2500, 3900]):
    body, n = b"", start
    while n < len(rows) and len(body) + len(rows[n]) < MAX - 200:
        body += b"  " + rows[n] + b"\r\n"
        n += 1
    put("so_xml", f"bioinformatics-{i}.xml", prolog + body + b"</posts>\n")

# HTML bodies of the dump, of growing size, and the fixture's.
bodies = []
for r in rows:
    m = re.search(rb' Body="([^"]*)"', r)
    if m:
        bodies.append(html.unescape(m.group(1).decode("utf-8", "replace")))
bodies.sort(key=len)
picked = [b for b in bodies if len(b) < MAX]
for i, b in enumerate(picked[:: max(1, len(picked) // 24)][:24]):
    put("so_html", f"bioinformatics-{i}.html", b)
for i, b in enumerate(x for x in bodies if "<pre" in x and "<table" not in x and len(x) < MAX):
    if i >= 4:
        break
    put("so_html", f"bioinformatics-code-{i}.html", b)

# JSONL readers.
put("questions", "report-queries.jsonl", head_lines("tests/fixtures/report/queries.jsonl"))
put("judgments", "report-queries.jsonl", head_lines("tests/fixtures/report/queries.jsonl"))
put("corpus", "report-corpus.jsonl", head_lines("tests/fixtures/report/corpus.jsonl"))
cases = [json.loads(l) for l in open("tests/fixtures/eval/parity.jsonl")]
n_q = n_j = n_n = n_r = 0
for c in cases:
    if c.get("queries") and n_q < 6:
        text = "".join(json.dumps(q) + "\n" for q in c["queries"])
        if len(text) < MAX:
            put("questions", f"parity-{n_q}.jsonl", text)
            put("judgments", f"parity-{n_q}.jsonl", text)
            nuggets = "".join(
                json.dumps({"query_id": q["query_id"],
                            "nuggets": [{"_id": n["_id"], "text": n.get("text", "")}
                                        for n in q.get("nuggets", [])]}) + "\n"
                for q in c["queries"])
            put("nuggets", f"parity-{n_q}.jsonl", nuggets)
            rec = []
            for q in c["queries"]:
                for n in q.get("nuggets", []):
                    for d in n.get("relevant_corpus_ids", [])[:2]:
                        rec.append(json.dumps({"query_id": q["query_id"], "nugget_id": n["_id"],
                                               "doc_id": d, "supported": True,
                                               "rationale": "stated"}) + "\n")
            put("judgments", f"parity-rows-{n_q}.jsonl", "".join(rec)[:MAX])
            n_q += 1
    if c.get("ndeval") and n_j < 6 and len(c["ndeval"]) < MAX:
        put("qrels", f"parity-{n_j}.qrels", c["ndeval"])
        n_j += 1
    if c.get("run") and n_r < 4 and isinstance(c["run"], str) and len(c["run"]) < MAX:
        put("trec_run", f"parity-{n_r}.trec", c["run"])
        n_r += 1
put("nuggets", "error-row.jsonl",
    json.dumps({"query_id": "q1", "nuggets": [], "error": "no list", "raw": "I think"}) + "\n")
for p in sorted(glob.glob("tests/fixtures/fusion/*.trec") + glob.glob("tests/fixtures/report/runs/*.trec")):
    put("trec_run", os.path.basename(p), head_lines(p))

# LLM answers: the shapes the stages' tests and real models produce.
answers = {
    "judgments.txt": '{"judgments": [{"doc": "D1", "reasoning": "a", "supported": {"N1": true, "N2": false, "N3": "yes", "N4": "no"}}, {"doc": 2, "supported": {"N1": false, "N2": false, "N3": false, "N4": true}}, {"doc": "D3", "supported": {"1": true, "2": false, "3": false, "4": false}}]}',
    "judgments-thinking.txt": "<think>D1 covers N1...</think>\nHere is my answer:\n```json\n{\"judgments\": [{\"doc\": \"D1\", \"supported\": {\"N1\": true}}]}\n```",
    "judgments-array.txt": '[{"document": "D2", "supported": {"N1": true}}, {"id": "3", "supported": {}}]',
    "nuggets.txt": '{"nuggets": ["Routes are defined with Route::get.", "Routes live in routes/web.php."]}',
    "nuggets-python.txt": "The nuggets are:\n['Use samtools view -b', \"Index with samtools index\", 'BAM is binary']",
    "nuggets-markdown.txt": "1. Use samtools view -b.\n2. Index the BAM file.\n- A bullet too\n* and a star",
    "variants.txt": '{"closed_book_answer": "Use the Route facade.", "sub_questions": ["How are routes defined?", "Where do routes live?"]}',
    "variants-fenced.txt": "Sure!\n~~~json\n{\"answer\": \"x\", \"questions\": [\"a\", \"b\",],}\n~~~\ntrailing prose",
    "unfinished.txt": "<think>I should answer {\"nuggets\": [\"draft\"",
}
for name, text in answers.items():
    put("llm_answer", name, text)

# GGUF: the tiny test models whole (175-380 KiB: tokenizer and weights, so inputs reach the
# tokenizer and model builds; a truncated head stops at the tensor bounds check), the real
# models' first 64 KiB (real headers and vocabularies).
for p in sorted(glob.glob("tests/fixtures/gguf/*.gguf")):
    put("gguf", os.path.basename(p), open(p, "rb").read())
for p in sorted(glob.glob("models/*.gguf")):
    put("gguf", os.path.basename(p) + ".head", open(p, "rb").read(64 << 10))

# safetensors: tiny test models whole; MiniLM's header plus the first bytes of its data.
for p in sorted(glob.glob("tests/fixtures/*/tiny-*/model.safetensors")):
    put("safetensors", p.split("/")[-2] + ".safetensors", open(p, "rb").read())
p = "models/all-MiniLM-L6-v2/model.safetensors"
if os.path.exists(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        f.seek(0)
        put("safetensors", "all-MiniLM-L6-v2.head", f.read(8 + n + 4096))

# .npy: the index fixture's, and small ones of each dtype and header version.
put("npy", "index-v1-onehot.npy", open("tests/fixtures/index-v1/dense/onehot/vectors.npy", "rb").read())
def npy(version, descr, rows, dim, elem):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }" % (descr, rows, dim)
    pre = 10 if version == 1 else 12
    header += " " * ((64 - (pre + len(header) + 1) % 64) % 64) + "\n"
    size = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + size + header.encode() + bytes(rows * dim * elem)
put("npy", "v1-f32.npy", npy(1, "<f4", 3, 4, 4))
put("npy", "v2-f16.npy", npy(2, "<f2", 2, 8, 2))
put("npy", "v1-empty.npy", npy(1, "<f4", 0, 4, 4))

# Index manifests: the fixtures and any index given.
put("manifest", "index-v1.json", open("tests/fixtures/index-v1/manifest.json", "rb").read())
put("manifest", "index-manifest-v1.json", open("tests/fixtures/index-manifest-v1.json", "rb").read())
for i, d in enumerate(indexes):
    put("manifest", f"built-{i}.json", open(os.path.join(d, "manifest.json"), "rb").read()[:MAX])

# Build configs: the examples, the docs' TOML blocks, and one naming every section.
for p in sorted(glob.glob("examples/*.toml")):
    if "paper-results" not in p:
        put("build_config", os.path.basename(p), open(p, "rb").read())
for p in sorted(glob.glob("docs/*.md")):
    blocks = re.findall(r"```toml\n(.*?)```", open(p).read(), re.S)
    for i, block in enumerate(blocks):
        put("build_config", f"{os.path.basename(p)}-{i}.toml", block)
put("build_config", "every-section.toml", """topic = "demo"
[questions]
file = "questions.jsonl"
since = "2023-01-01"
until = "2024-12-31"
tag_match = "any"
[corpus]
max_tokens = 2048
exclude = ["*.lock", "vendor/**"]
[corpus.repositories]
"me/repo" = "checkout"
[retrieval]
pool_depth = 20
fusion_depth = 100
bm25 = true
fusion = true
dense = ["models/all-MiniLM-L6-v2"]
[llm]
base_url = "http://localhost:8000/v1"
model = "m"
temperature = 0.0
timeout_seconds = 600
cache = "work/llm-cache.sqlite"
[judge]
docs_per_call = 20
context_tokens = 8192
verdict = "quote"
[rerank]
model = "models/bge-reranker-base"
depth = 100
max_length = 512
[nuggets]
max_nuggets = 8
[variants]
max_sub_questions = 3
[filter]
require_all_nuggets_supported = true
""")

# Calibration annotations: one annotator's file of each shape the review page exports.
put("annotations", "one-question.json", json.dumps({
    "annotator": "a",
    "questions": [{"query_id": "q1", "missing_nuggets": 1, "nuggets": [
        {"nugget_id": "q1_0", "hallucinated": False, "minor_or_redundant": True},
        {"nugget_id": "q1_1", "hallucinated": True, "minor_or_redundant": False}]}],
    "pairs": [{"query_id": "q1", "nugget_id": "q1_0", "doc_id": "d1", "label": "relevant"},
              {"query_id": "q1", "nugget_id": "q1_1", "doc_id": "d2", "label": "non_relevant"}]},
    indent=1))
put("annotations", "two-questions.json", json.dumps({
    "annotator": "b",
    "questions": [{"query_id": q, "missing_nuggets": 0, "nuggets": [
        {"nugget_id": q + "_0", "hallucinated": False, "minor_or_redundant": False}]}
        for q in ("q1", "q2")],
    "pairs": [{"query_id": q, "nugget_id": q + "_0", "doc_id": d, "label": label}
              for q in ("q1", "q2") for d, label in (("d1", "relevant"), ("d2", "partially_relevant"))]}))
