#!/usr/bin/env python3
"""Writes examples/quickstart/Posts.xml: a dozen questions about using freshstack, each with an
accepted answer, in the Stack Exchange dump format (`freshstack quickstart` builds a benchmark
from them over this repository). Rerun after editing the Q&A below; output is deterministic."""
import html
import pathlib

QA = [
    ("How do I make smaller corpus documents with freshstack corpus?",
     "<p>My repository chunks into documents of up to 2048 tokens, which is too long for my encoder. "
     "How do I get shorter documents, and which tokenizer counts the tokens?</p>",
     "<p>Pass <code>--max-tokens</code> to <code>freshstack corpus</code>, for example:</p>"
     "<pre><code>freshstack corpus --repo me/app=./app --out corpus.jsonl --max-tokens 512\n</code></pre>"
     "<p>Tokens are counted with the GPT tokenizer <code>cl100k_base</code> by default, as the reference does; "
     "<code>--tokenizer o200k_base</code> switches to the GPT-4o vocabulary. Chunks are cut at headings, "
     "then syntax nodes, then blank lines, then lines, and never overlap.</p>"),
    ("Which BM25 parameters does freshstack index use and can I change them?",
     "<p>I get different BM25 scores than with tantivy's defaults. What k1 and b does "
     "<code>freshstack index --bm25</code> use?</p>",
     "<p>freshstack scores BM25 itself over tantivy's postings with <code>k1 = 0.9</code> and <code>b = 0.4</code>, "
     "the Pyserini values the FreshStack paper used (tantivy alone fixes 1.2 and 0.75). Change them with "
     "<code>--k1</code> and <code>--b</code>:</p>"
     "<pre><code>freshstack index --corpus corpus.jsonl --index idx --bm25 --k1 1.2 --b 0.75\n</code></pre>"
     "<p>The analyzer is set with <code>--analyzer code</code> (default: splits camelCase and snake_case) or <code>plain</code>.</p>"),
    ("How do I evaluate a TREC run with alpha-nDCG, coverage and recall?",
     "<p>I have a run file from my retriever and the queries.jsonl of a FreshStack dataset. "
     "How do I get the paper's metrics?</p>",
     "<p>Use <code>freshstack eval</code>:</p>"
     "<pre><code>freshstack eval --queries queries.jsonl --run run.trec --json\n</code></pre>"
     "<p>The defaults are alpha_ndcg@10, coverage@20 and recall@50, the paper's metrics, computed exactly as the "
     "reference evaluator with alpha 0.5 and rounding to 4 decimals. Give several <code>--run</code> flags to compare runs "
     "with a paired t-test and a randomization test.</p>"),
    ("How do I fuse a BM25 run with a dense run?",
     "<p>I retrieved with BM25 and with a dense model and want the fusion the FreshStack paper uses for pooling.</p>",
     "<p>Run <code>freshstack fuse</code> on the TREC files:</p>"
     "<pre><code>freshstack fuse bm25.trec dense.trec --out fused.trec --depth 100\n</code></pre>"
     "<p>The default method is normalized-sum: each run's scores over its top 100 documents are min-max normalised "
     "and summed per document. <code>--method rrf</code> uses reciprocal rank fusion instead.</p>"),
    ("How do I run the nuggets stage against a vLLM server?",
     "<p>I have vLLM serving an instruct model on port 8000. How do I point freshstack nuggets at it, and where does the API key go?</p>",
     "<p>Give the server's OpenAI-compatible root and the model name:</p>"
     "<pre><code>freshstack nuggets --questions questions.jsonl --out nuggets.jsonl \\\n"
     "  --llm-base-url http://localhost:8000/v1 --llm-model my-model\n</code></pre>"
     "<p>A key, if the server needs one, is read from the environment variable <code>FRESHSTACK_LLM_API_KEY</code>; "
     "it is never a flag and never logged. <code>--llm-concurrency</code> bounds the requests in flight.</p>"),
    ("Does freshstack call the LLM again when I rerun a stage?",
     "<p>My judge stage was interrupted after an hour. If I run it again, does it pay for every call again?</p>",
     "<p>No. Every LLM call goes through a response cache in an SQLite database, <code>llm-cache.sqlite</code> next "
     "to the output by default (<code>--llm-cache FILE</code> to move it). The key is a hash of the backend, model, "
     "messages and parameters, so a rerun answers finished calls from the cache and resumes where it stopped. "
     "<code>--no-cache</code> bypasses it.</p>"),
    ("How do I import Stack Overflow questions for one tag and a date range?",
     "<p>I downloaded Posts.xml from the Stack Exchange archive. How do I keep only laravel questions from 2023 on?</p>",
     "<p>Use <code>freshstack stackoverflow import</code>:</p>"
     "<pre><code>freshstack stackoverflow import --posts Posts.xml.7z --tag laravel \\\n"
     "  --since 2023-01-01 --until 2024-10-31 --out questions.jsonl\n</code></pre>"
     "<p>It streams the dump (plain, gz, zst or 7z) and keeps questions with an accepted answer, converted from HTML "
     "to Markdown, in the reference query schema.</p>"),
    ("Which files does freshstack corpus skip?",
     "<p>My corpus has fewer files than the repository. What does the walker leave out?</p>",
     "<p>It honours <code>.gitignore</code> files and skips symlinks, hidden files and directories such as "
     "<code>.git</code>, binary extensions (images, archives, fonts, model weights), lock files, minified bundles, "
     "files larger than <code>--max-file-bytes</code> (1000000 by default), files with NUL bytes and invalid UTF-8. "
     "<code>--summary summary.json</code> counts the skipped files by reason.</p>"),
    ("What is the format of a freshstack document id?",
     "<p>I need to map document ids back to files. How are they built?</p>",
     "<p>A document id is <code>{owner/name}/{path}_{start_byte}_{end_byte}</code>, the repository name, the path "
     "inside the repository and the byte range of the chunk, as in the reference corpus. The metadata also holds the "
     "url, start_byte, end_byte and commit_id.</p>"),
    ("What does freshstack eval do with a query that has no judgments?",
     "<p>The Python reference crashes on my run because one query has no nuggets. What does freshstack do?</p>",
     "<p>freshstack eval scores such a query 0, prints one warning and goes on, where the reference crashes. "
     "It does the same for a query with an empty run. It also maps a nugget id to its query by the text before its "
     "last underscore, so q1 and q12 are never mixed.</p>"),
    ("How do I embed a corpus offline with a local model?",
     "<p>My machine has no internet. Can freshstack embed use a model I copied to disk?</p>",
     "<p>Yes. <code>freshstack embed --model DIR --input corpus.jsonl --out vectors.npy</code> loads config.json, "
     "tokenizer.json and the safetensors weights from the directory; a model id is looked up in the Hugging Face cache "
     "layout only, never on the network. Texts are sorted by length and batched by a token budget "
     "(<code>--max-batch-tokens</code>).</p>"),
    ("How does the judge stage fit long documents into the model context?",
     "<p>Some of my pooled documents are longer than my model's context. What does freshstack judge do with them?</p>",
     "<p>The judge stage truncates documents so that the prompt, the answer budget and the documents fit in the "
     "context (<code>--llm-context-tokens</code>), and no document gets more than <code>--max-doc-tokens</code>. It judges up "
     "to 20 documents per call (<code>--docs-per-call</code>) and counts the truncated documents in its summary.</p>"),
]


def attr(s):
    return html.escape(s, quote=True).replace("\n", "&#xA;")


def main():
    rows = []
    for i, (title, question, answer) in enumerate(QA):
        qid = 1001 + 2 * i
        aid = qid + 1
        day = f"2026-{1 + i % 9:02d}-{10 + i:02d}"
        rows.append(
            f'  <row Id="{qid}" PostTypeId="1" AcceptedAnswerId="{aid}" CreationDate="{day}T10:00:00.000" '
            f'Score="{3 + i % 4}" ViewCount="{40 + 7 * i}" Body="{attr(question)}" OwnerUserId="7" '
            f'Title="{attr(title)}" Tags="&lt;freshstack&gt;&lt;information-retrieval&gt;" AnswerCount="1" '
            f'CommentCount="0" ContentLicense="CC BY-SA 4.0" />'
        )
        rows.append(
            f'  <row Id="{aid}" PostTypeId="2" ParentId="{qid}" CreationDate="{day}T12:00:00.000" '
            f'Score="{2 + i % 3}" Body="{attr(answer)}" OwnerUserId="8" CommentCount="0" '
            f'ContentLicense="CC BY-SA 4.0" />'
        )
    out = pathlib.Path(__file__).resolve().parent.parent / "examples" / "quickstart" / "Posts.xml"
    out.write_text('<?xml version="1.0" encoding="utf-8"?>\n<posts>\n' + "\n".join(rows) + "\n</posts>\n")
    print(f"wrote {out} ({len(QA)} questions)")


if __name__ == "__main__":
    main()
