"""Generate fusion parity fixtures with the reference's util.fusion (freshstack==0.0.6).

usage: source ~/.cache/freshstack-refenv/env.sh && python scripts/gen_fusion_fixtures.py
Writes tests/fixtures/fusion/run{0,1,2}.trec (sorted by score desc, doc id asc: the reference
assumes sorted input) and expected.json: per question, the reference's fused (doc, score) list in
its order, for depth 10 (rounded to 3 decimals, as the reference always does).
"""
import json
import random
from pathlib import Path

from freshstack.util import fusion

out = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "fusion"
out.mkdir(parents=True, exist_ok=True)
rng = random.Random(20261130)
docs = [f"doc{i:02d}" for i in range(40)] + ["repo/path with space.md_0_10"]
runs = []
for r in range(3):
    run = {}
    for q in range(25):
        qid = f"q{q}"
        if rng.random() < 0.15:
            continue  # question missing from this run
        n = rng.randint(1, 18)
        chosen = rng.sample(docs, n)
        if rng.random() < 0.2:
            scores = [1.5] * n  # all equal: normalises to 0
        else:
            scores = [round(rng.uniform(-2, 30), rng.choice([0, 1, 3, 6])) for _ in range(n)]
        pairs = sorted(zip(chosen, scores), key=lambda p: (-p[1], p[0]))
        run[qid] = {d: s for d, s in pairs}
    runs.append(run)
    with open(out / f"run{r}.trec", "w") as f:
        for qid, ranking in run.items():
            for rank, (d, s) in enumerate(ranking.items(), 1):
                f.write(f"{qid} Q0 {d} {rank} {s!r} r{r}\n")
fused = fusion(runs, method="normalized_sum", depth=10)
expected = {qid: [[d, s] for d, s in ranking.items()] for qid, ranking in fused.items()}
(out / "expected.json").write_text(json.dumps(expected, indent=0) + "\n")
print(f"wrote {len(expected)} fused questions to {out}")
