"""Table 5 (paper §5.2) of each system in the second blind round, from blind-review-2.jsonl and
blind-key-2.json: precision = kept / nuggets, recall = kept / (kept + missing), groundedness =
not hallucinated / nuggets, where kept = neither hallucinated nor minor; macro over questions
(a question whose ratio is 0/0 is left out of that average), and micro."""
import collections, json, os
HERE = os.path.dirname(os.path.abspath(__file__))
def score(round_):
    key = json.load(open(f'{HERE}/blind-key-{round_}.json'))
    by = collections.defaultdict(list)
    for line in open(f'{HERE}/blind-review-{round_}.jsonl'):
        r = json.loads(line)
        by[key[f"{r['query_id']}|{r['set']}"]].append(r)
    avg = lambda a: sum(a) / len(a) if a else float('nan')
    for name in sorted(by):
        P, R, G = [], [], []
        kept_all = total = missing_all = 0
        for r in by[name]:
            n = r['nuggets']
            kept = sum(not x['hallucinated'] and not x['minor_or_redundant'] for x in n)
            grounded = sum(not x['hallucinated'] for x in n)
            if n:
                P.append(kept / len(n)); G.append(grounded / len(n))
            if kept + r['missing_nuggets']:
                R.append(kept / (kept + r['missing_nuggets']))
            kept_all += kept; total += len(n); missing_all += r['missing_nuggets']
        print(f"{name}: {total} nuggets; macro precision {avg(P):.3f}, recall {avg(R):.3f}, "
              f"groundedness {avg(G):.3f}; micro precision {kept_all / total:.3f}, "
              f"recall {kept_all / (kept_all + missing_all):.3f}")


if __name__ == '__main__':
    score(2)
