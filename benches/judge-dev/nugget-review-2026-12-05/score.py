import json, collections, sys
import os
HERE=os.path.dirname(os.path.abspath(__file__))
key=json.load(open(HERE+'/blind-key.json'))
rows=[json.loads(l) for l in open(HERE+'/blind-review.jsonl')]
by=collections.defaultdict(list)
for r in rows:
    by[key[f"{r['query_id']}|{r['set']}"]].append(r)
import os
os.makedirs(sys.argv[1],exist_ok=True)
for sysname, rs in by.items():
    P=[];R=[];G=[];K=T=M=0
    with open(os.path.join(sys.argv[1], sysname+'.jsonl'),'w') as f:
        for r in sorted(rs,key=lambda r:r['query_id']):
            n=r['nuggets']; kept=sum(not x['hallucinated'] and not x['minor_or_redundant'] for x in n)
            grounded=sum(not x['hallucinated'] for x in n)
            if n: P.append(kept/len(n)); G.append(grounded/len(n))
            if kept+r['missing_nuggets']>0: R.append(kept/(kept+r['missing_nuggets']))
            K+=kept;T+=len(n);M+=r['missing_nuggets']
            f.write(json.dumps({'query_id':r['query_id'],'missing_nuggets':r['missing_nuggets'],'nuggets':[{'nugget_id':x['nugget_id'],'hallucinated':x['hallucinated'],'minor_or_redundant':x['minor_or_redundant']} for x in n]})+'\n')
    avg=lambda a: sum(a)/len(a) if a else float('nan')
    print(f"{sysname}: nuggets {T}, macro precision {avg(P):.3f} recall {avg(R):.3f} groundedness {avg(G):.3f}; micro precision {K/T:.3f} recall {K/(K+M):.3f}")
