"""Fusion: the reference's util.fusion (freshstack==0.0.6) vs `freshstack fuse` on the same runs.

1,000 questions x 4 runs x 100 documents, depth 100. Prints the fusion time of each (in process:
Python timing `util.fusion` on loaded dicts; freshstack reporting its own fusion step), the whole
process times (loading and writing included), and the ratios; checks the fused rankings agree.

usage: source ~/.cache/freshstack-refenv/env.sh && python benches/compare/fusion_vs_reference.py [REPEAT]
       (builds the release binary first; best of REPEAT runs on each side, default 3)
"""
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from freshstack.util import fusion

root = Path(__file__).resolve().parents[2]
subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=root, check=True)
binary = root / "target" / "release" / "freshstack"
repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 3
rng = random.Random(7)
tmp = Path(tempfile.mkdtemp())
files = []
for r in range(4):
    path = tmp / f"run{r}.trec"
    with open(path, "w") as f:
        for q in range(1000):
            docs = rng.sample(range(400), 100)
            for rank, d in enumerate(docs, 1):
                f.write(f"q{q} Q0 repo/file{d}.md_0_100 {rank} {100 - rank + rng.random():.6f} r{r}\n")
    files.append(path)


def load(path):
    run = {}
    with open(path) as f:
        for line in f:
            qid, _, doc, _, score, _ = line.split()
            run.setdefault(qid, {})[doc] = float(score)
    return run


start = time.perf_counter()
runs = [load(p) for p in files]
fused = None
best = float("inf")
for _ in range(repeat):
    t = time.perf_counter()
    fused = fusion(runs, method="normalized_sum", depth=100)
    best = min(best, time.perf_counter() - t)
ref_whole = time.perf_counter() - start
ref_ms = best * 1e3

out = tmp / "fused.trec"
ours_ms = float("inf")
ours_whole = float("inf")
for _ in range(repeat):
    t = time.perf_counter()
    p = subprocess.run([binary, "fuse", *map(str, files), "--out", str(out), "--depth", "100",
                        "--round", "3"], capture_output=True, text=True, check=True)
    ours_whole = min(ours_whole, time.perf_counter() - t)
    ours_ms = min(ours_ms, float(re.search(r"in ([0-9.]+) ms", p.stderr).group(1)))

agree = 0
ours = {}
with open(out) as f:
    for line in f:
        qid, _, doc, _, score, _ = line.split()
        ours.setdefault(qid, []).append((doc, float(score)))
for qid, ranking in fused.items():
    agree += list(ranking.items()) == ours.get(qid)
print(f"fusion step:   reference {ref_ms:8.1f} ms   freshstack {ours_ms:8.1f} ms   ratio {ref_ms / ours_ms:6.1f}x")
print(f"whole process: reference {ref_whole:8.2f} s    freshstack {ours_whole:8.2f} s    (reference: load + {repeat} fusions)")
print(f"identical fused rankings (--round 3): {agree}/{len(fused)} questions")
sys.exit(0 if agree == len(fused) else 1)
