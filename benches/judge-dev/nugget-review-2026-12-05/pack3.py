"""Third blind round: does a larger nugget budget (max_nuggets 8 instead of the quickstart's 5)
raise the 1.5B model's recall? Three sets per question in a seeded random order (X-Z): the 1.5B
v3 nuggets at 5 and at 8, and the 0.5B v3 set as an anchor against the second round. Writes the
packet (argv[1]) and the key (blind-key-3.json)."""
import json, os, random, sys
HERE = os.path.dirname(os.path.abspath(__file__))
D = os.path.join(HERE, '../../../../shared/judge-dev/')
def jl(p): return [json.loads(l) for l in open(p)]
qs = jl(D + 'questions.jsonl')
ref = {r['query_id']: r['nuggets'] for r in jl(D + 'nuggets.jsonl')}
systems = {
    'v3-05': {r['query_id']: r['nuggets'] for r in jl(HERE + '/nuggets-0.5b-v3.jsonl')},
    'v3-15': {r['query_id']: r['nuggets'] for r in jl(HERE + '/nuggets-1.5b-v3.jsonl')},
    'v3-15-max8': {r['query_id']: r['nuggets'] for r in jl(HERE + '/nuggets-1.5b-v3-max8.jsonl')},
}
rng = random.Random(202612053)
key, out = {}, []
for q in qs:
    qid = q['query_id']
    names = list(systems)
    rng.shuffle(names)
    sets = {}
    for letter, name in zip('XYZ', names):
        key[f'{qid}|{letter}'] = name
        sets[letter] = [{'nugget_id': f'{qid}_{letter}{i}', 'text': n['text']}
                        for i, n in enumerate(systems[name].get(qid, []))]
    out.append({'query_id': qid, 'title': q['query_title'], 'body': q['query_text'],
                'accepted_answer': q['answer_text'], 'key_ideas': [n['text'] for n in ref[qid]],
                'sets': sets})
json.dump(out, open(sys.argv[1], 'w'), indent=1)
json.dump(key, open(HERE + '/blind-key-3.json', 'w'))
