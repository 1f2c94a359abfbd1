import json, random
import os, sys
HERE=os.path.dirname(os.path.abspath(__file__))
D=os.path.join(HERE, '../../../../shared/judge-dev/')
def jl(p): return [json.loads(l) for l in open(p)]
qs=jl(D+'questions.jsonl'); ref={r['query_id']:r['nuggets'] for r in jl(D+'nuggets.jsonl')}
systems={'old05':{r['query_id']:r['nuggets'] for r in jl(D+'system-nuggets.jsonl')},
         'new05':{r['query_id']:r['nuggets'] for r in jl(HERE+'/nuggets-0.5b.jsonl')},
         'new15':{r['query_id']:r['nuggets'] for r in jl(HERE+'/nuggets-1.5b.jsonl')}}
rng=random.Random(20261205)
key={}; out=[]
for q in qs:
    qid=q['query_id']; names=list(systems); rng.shuffle(names)
    sets={}
    for letter,name in zip('XYZ',names):
        key[(qid,letter)]=name
        sets[letter]=[{'nugget_id':f'{qid}_{letter}{i}','text':n['text']} for i,n in enumerate(systems[name].get(qid,[]))]
    out.append({'query_id':qid,'title':q['query_title'],'body':q['query_text'],'accepted_answer':q['answer_text'],
                'key_ideas':[n['text'] for n in ref[qid]],'sets':sets})
json.dump(out,open(sys.argv[1],'w'),indent=1)
json.dump({f'{k[0]}|{k[1]}':v for k,v in key.items()},open(HERE+'/blind-key.json','w'))
print(len(out))
