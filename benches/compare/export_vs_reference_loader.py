#!/usr/bin/env python3
"""Loads a `freshstack build` export with the reference's own DataLoader (freshstack==0.0.6)
and scores every exported run with its EvaluateRetrieval, then compares with our results.json.

The reference's DataLoader reads Hugging Face datasets (`load_dataset(repo, topic)[split]`); here
`load_dataset` is pointed at the export's JSONL files through `datasets.load_dataset("json", ...)`,
exactly how a user would publish and load them, so this checks both that the files load with the
reference's code and that our pooling numbers equal its metrics.

    source ~/.cache/freshstack-refenv/bin/activate   # scripts: ../shared/tools/reference-env.sh
    python benches/compare/export_vs_reference_loader.py BUILD_DIR
"""
from __future__ import annotations

import json
import pathlib
import sys


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = pathlib.Path(sys.argv[1])
    import datasets
    import freshstack.datasets.data_loader as data_loader
    from freshstack.retrieval.evaluation import EvaluateRetrieval
    from freshstack.util import load_runfile

    files = {"queries": {"test": str(out / "queries.jsonl")}, "corpus": {"train": str(out / "corpus.jsonl")}}

    def load_from_export(repo, subset=None, **_kwargs):
        return datasets.load_dataset("json", data_files=files[repo])

    data_loader.load_dataset = load_from_export
    loader = data_loader.DataLoader(queries_repo="queries", corpus_repo="corpus", topic="export")
    corpus, queries, nuggets = loader.load(split="test")
    qrels_nuggets, qrels_query, query_to_nuggets = loader.load_qrels(split="test")
    print(f"reference DataLoader: {len(corpus)} documents, {len(queries)} queries, {len(nuggets)} nuggets")
    missing = {d for n in qrels_nuggets.values() for d in n if d not in corpus}
    print(f"judged documents missing from the corpus: {len(missing)}")

    ours = json.loads((out / "results.json").read_text())
    mismatches = 0
    for row in ours["rows"]:
        results = load_runfile(str(out / row["run"]))
        a, c, r = EvaluateRetrieval(k_values=[10, 20, 50]).evaluate(
            qrels_nuggets, query_to_nuggets, qrels_query, results
        )
        theirs = (a["alpha-nDCG@10"], c["Coverage@20"], r["Recall@50"])
        mine = (row["alpha_ndcg@10"], row["coverage@20"], row["recall@50"])
        same = all(abs(x - y) < 1e-9 for x, y in zip(theirs, mine))
        mismatches += not same
        print(f"{row['run']:<56} ours {mine}  reference {theirs}  {'identical' if same else 'DIFFERENT'}")
    print(f"{len(ours['rows']) - mismatches}/{len(ours['rows'])} runs identical")
    return 1 if mismatches or missing else 0


if __name__ == "__main__":
    sys.exit(main())
