#!/usr/bin/env python3
"""A NumPy model of fs_select's radix select in kernels/topk.cu (order-preserving u32 keys of the
f32 scores, 4 passes of 8 bits from the top, the bin scan from 255 down): checks on random
scores, with ties and signed zeros, that it finds the k-th largest score, as sorting does.

    python3 scripts/radix_select_model.py      # needs numpy
"""
import numpy as np, random
def key(f):
    u = np.asarray(f, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return np.where(u & 0x80000000, (~u) & 0xffffffff, u | 0x80000000).astype(np.uint64)
def unkey(k):
    k = np.uint64(k)
    u = (k & 0x7fffffff) if (k & 0x80000000) else ((~k) & 0xffffffff)
    return np.array([u], dtype=np.uint32).view(np.float32)[0]
def kth(s, k):
    keys = key(s)
    prefix, mask, remaining = 0, 0, k
    for shift in (24, 16, 8, 0):
        sel = keys[(keys & mask) == prefix]
        hist = np.bincount(((sel >> shift) & 255).astype(np.int64), minlength=256)
        r = remaining; b = 255
        while b > 0:
            if hist[b] >= r: break
            r -= hist[b]; b -= 1
        prefix |= b << shift; remaining = r; mask |= 255 << shift
    return unkey(prefix)
rng = np.random.default_rng(0)
for trial in range(300):
    n = int(rng.integers(1, 3000))
    s = rng.standard_normal(n).astype(np.float32)
    if trial % 3 == 0: s = np.round(s, 1).astype(np.float32)  # ties
    if trial % 5 == 0: s[: n // 2] = 0.0; s[: n // 4] = -0.0
    k = int(rng.integers(1, n + 1))
    want = np.sort(s)[::-1][k - 1]
    got = kth(s, k)
    assert got == want, (trial, n, k, got, want)
print("radix select ok")
