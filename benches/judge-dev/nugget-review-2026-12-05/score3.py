"""Table 5 of each system in the third blind round (blind-review-3.jsonl, blind-key-3.json),
scored as score2.py scores the second."""
from score2 import score

score(3)
