"""Second blind round: four nugget sets per question in a seeded random order (W-Z), the old
0.5B nuggets of judge-dev beside the three sets of this session, for a reviewer who sees no
system name. Writes the packet (argv[1]) and the key (blind-key-2.json)."""
import json, os, random, sys
HERE = os.path.dirname(os.path.abspath(__file__))
D = os.path.join(HERE, '../../../../shared/judge-dev/')
def jl(p): return [json.loads(l) for l in open(p)]
def nuggets(path): return {r['query_id']: r['nuggets'] for r in jl(path)}


def pack(systems, seed, letters, round_, packet):
    """Writes the packet of `systems` ({name: {query_id: nuggets}}) to `packet` and the key to
    blind-key-{round_}.json: per question the sets under `letters`, shuffled by `seed`."""
    qs = jl(D + 'questions.jsonl')
    ref = nuggets(D + 'nuggets.jsonl')
    rng = random.Random(seed)
    key, out = {}, []
    for q in qs:
        qid = q['query_id']
        names = list(systems)
        rng.shuffle(names)
        sets = {}
        for letter, name in zip(letters, names):
            key[f'{qid}|{letter}'] = name
            sets[letter] = [{'nugget_id': f'{qid}_{letter}{i}', 'text': n['text']}
                            for i, n in enumerate(systems[name].get(qid, []))]
        out.append({'query_id': qid, 'title': q['query_title'], 'body': q['query_text'],
                    'accepted_answer': q['answer_text'], 'key_ideas': [n['text'] for n in ref[qid]],
                    'sets': sets})
    json.dump(out, open(packet, 'w'), indent=1)
    json.dump(key, open(f'{HERE}/blind-key-{round_}.json', 'w'))


if __name__ == '__main__':
    pack({
        'old05': nuggets(D + 'system-nuggets.jsonl'),
        'new05': nuggets(HERE + '/nuggets-0.5b.jsonl'),
        'v3-05': nuggets(HERE + '/nuggets-0.5b-v3.jsonl'),
        'v3-15': nuggets(HERE + '/nuggets-1.5b-v3.jsonl'),
    }, 202612052, 'WXYZ', 2, sys.argv[1])
