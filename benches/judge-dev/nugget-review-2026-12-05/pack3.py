"""Third blind round: does a larger nugget budget (max_nuggets 8 instead of the quickstart's 5)
raise the 1.5B model's recall? Three sets per question in a seeded random order (X-Z): the 1.5B
v3 nuggets at 5 and at 8, and the 0.5B v3 set as an anchor against the second round. Writes the
packet (argv[1]) and the key (blind-key-3.json), as pack2.py does."""
import os, sys
from pack2 import HERE, nuggets, pack

pack({
    'v3-05': nuggets(HERE + '/nuggets-0.5b-v3.jsonl'),
    'v3-15': nuggets(HERE + '/nuggets-1.5b-v3.jsonl'),
    'v3-15-max8': nuggets(HERE + '/nuggets-1.5b-v3-max8.jsonl'),
}, 202612053, 'XYZ', 3, sys.argv[1])
