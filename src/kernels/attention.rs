//! The KV cache and causal attention over it.
//!
//! Keys are stored transposed in blocks of [`KEY_BLOCK`] positions per key/value head
//! (`[block][head_dim][KEY_BLOCK]`), so one query meets 16 keys with `head_dim` broadcast
//! multiply-adds and no horizontal sums; values stay row-major (`[position][kv_width]`) for the
//! weighted sum. Every sum runs in a fixed order (over the head's dimensions for a score, over
//! positions for the output) with fused multiply-adds, whatever the CPU, the thread count or how
//! a prompt was split into calls.

use std::cell::RefCell;

use rayon::prelude::*;

use crate::kernels::ops::softmax_row;

/// Positions per transposed key block.
pub const KEY_BLOCK: usize = 16;

/// Keys and values of the positions processed so far.
pub struct KvCache {
    /// Per layer, per key/value head: transposed key blocks.
    keys: Vec<Vec<Vec<f32>>>,
    /// Per layer: `[position][kv_width]`.
    values: Vec<Vec<f32>>,
    kv_heads: usize,
    head_dim: usize,
    len: usize,
}

impl KvCache {
    /// An empty cache.
    pub fn new(layers: usize, kv_heads: usize, head_dim: usize) -> Self {
        Self {
            keys: vec![vec![Vec::new(); kv_heads]; layers],
            values: vec![Vec::new(); layers],
            kv_heads,
            head_dim,
            len: 0,
        }
    }

    /// An empty cache of the same shape (no allocation).
    pub fn emptied(&self) -> Self {
        Self::new(self.keys.len(), self.kv_heads, self.head_dim)
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps the first `len` positions only.
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        let block = self.head_dim * KEY_BLOCK;
        for layer in &mut self.keys {
            for head in layer {
                head.truncate(len.div_ceil(KEY_BLOCK) * block);
            }
        }
        for layer in &mut self.values {
            layer.truncate(len * self.kv_heads * self.head_dim);
        }
        self.len = len;
    }

    /// Makes room for `positions` positions in all (exactly, where the capacity is short), so
    /// that appending up to there never reallocates.
    pub fn reserve(&mut self, positions: usize) {
        let keys = positions.div_ceil(KEY_BLOCK) * self.head_dim * KEY_BLOCK;
        for head in self.keys.iter_mut().flatten() {
            head.reserve_exact(keys.saturating_sub(head.len()));
        }
        let values = positions * self.kv_heads * self.head_dim;
        for layer in &mut self.values {
            layer.reserve_exact(values.saturating_sub(layer.len()));
        }
    }

    /// Bytes of keys and values held.
    pub fn bytes(&self) -> usize {
        let floats: usize = self
            .keys
            .iter()
            .flatten()
            .map(Vec::len)
            .chain(self.values.iter().map(Vec::len))
            .sum();
        floats * 4
    }

    /// Appends the keys and values (`[n][kv_width]` each) of `n` positions to `layer`; the
    /// last layer's append moves the cache length on.
    pub fn append(&mut self, layer: usize, keys: &[f32], values: &[f32]) {
        let (hd, kvw) = (self.head_dim, self.kv_heads * self.head_dim);
        let n = keys.len() / kvw;
        let block = hd * KEY_BLOCK;
        for t in 0..n {
            let pos = self.len + t;
            let (b, lane) = (pos / KEY_BLOCK, pos % KEY_BLOCK);
            for (h, head) in self.keys[layer].iter_mut().enumerate() {
                if head.len() < (b + 1) * block {
                    head.resize((b + 1) * block, 0.0);
                }
                let key = &keys[t * kvw + h * hd..t * kvw + (h + 1) * hd];
                for (d, &v) in key.iter().enumerate() {
                    head[b * block + d * KEY_BLOCK + lane] = v;
                }
            }
        }
        self.values[layer].extend_from_slice(values);
        if layer + 1 == self.keys.len() {
            self.len += n;
        }
    }
}

thread_local! {
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Query heads that share a key/value head are processed together, up to this many: each key
/// and value is loaded once for all of them.
const HEADS_AT_ONCE: usize = 4;

/// How a layer turns query x key products into attention weights.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scoring {
    /// The factor on every product (usually `1 / sqrt(head_dim)`).
    pub scale: f32,
    /// `Some(w)`: a query at position `i` sees the keys at `j` with `i - w < j <= i` only (a
    /// sliding-window layer); `None`: every earlier key.
    pub window: Option<usize>,
    /// `Some(c)`: scores become `c * tanh(score / c)` before the softmax (Gemma 2).
    pub softcap: Option<f32>,
}

impl Scoring {
    /// `1 / sqrt(head_dim)`, every earlier key, no soft-capping.
    pub fn standard(head_dim: usize) -> Self {
        Self {
            scale: 1.0 / (head_dim as f32).sqrt(),
            window: None,
            softcap: None,
        }
    }
}

/// Causal attention of `n` queries (`q` `[n][heads * head_dim]`) at positions
/// `start..start + n` of `layer`, whose keys and values `cache` already holds; writes
/// `[n][heads * head_dim]` to `out`. Each (position, key/value head, tile of its query heads)
/// is one task; a query's result does not depend on the others in its tile.
pub fn attention(
    cache: &KvCache,
    layer: usize,
    heads: usize,
    q: &[f32],
    start: usize,
    scoring: Scoring,
    out: &mut [f32],
) {
    let (hd, kvh) = (cache.head_dim, cache.kv_heads);
    let qw = heads * hd;
    let group = heads / kvh;
    let tiles_per_kv = group.div_ceil(HEADS_AT_ONCE);
    let keys = &cache.keys[layer];
    let values = &cache.values[layer];
    let n = q.len() / qw;
    // Tasks own disjoint column ranges of `out` (a tile's heads are adjacent).
    let mut tasks: Vec<(usize, usize, usize, &mut [f32])> =
        Vec::with_capacity(n * kvh * tiles_per_kv);
    for (t, row) in out.chunks_mut(qw).enumerate() {
        let mut rest = row;
        for kv in 0..kvh {
            for tile in 0..tiles_per_kv {
                let first = kv * group + tile * HEADS_AT_ONCE;
                let count = HEADS_AT_ONCE.min((kv + 1) * group - first);
                let (mine, tail) = rest.split_at_mut(count * hd);
                rest = tail;
                tasks.push((t, kv, first, mine));
            }
        }
    }
    tasks.into_par_iter().for_each(|(t, kv, first, out)| {
        let count = out.len() / hd;
        let queries = &q[t * qw + first * hd..t * qw + (first + count) * hd];
        let visible = start + t + 1;
        let first = scoring.window.map_or(0, |w| visible.saturating_sub(w));
        SCORES.with(|scores| {
            let mut scores = scores.borrow_mut();
            scores.resize(HEADS_AT_ONCE * visible.div_ceil(KEY_BLOCK) * KEY_BLOCK, 0.0);
            let tile = Tile {
                queries,
                head_dim: hd,
                keys: &keys[kv],
                values,
                value_offset: kv * hd,
                kv_width: kvh * hd,
                first,
                visible,
                scale: scoring.scale,
                softcap: scoring.softcap,
            };
            tile.run(&mut scores, out);
        });
    });
}

/// Up to [`HEADS_AT_ONCE`] queries that share one key/value head and one position.
struct Tile<'a> {
    /// `[count][head_dim]`.
    queries: &'a [f32],
    head_dim: usize,
    keys: &'a [f32],
    values: &'a [f32],
    value_offset: usize,
    kv_width: usize,
    /// The first key position the queries see (the window's start).
    first: usize,
    /// One past the last key position they see.
    visible: usize,
    scale: f32,
    softcap: Option<f32>,
}

impl Tile<'_> {
    fn run(&self, scores: &mut [f32], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            if self.head_dim.is_multiple_of(16) && std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU supports AVX512F (checked just above); the head width is a
                // multiple of 16.
                return unsafe { self.run_avx512(scores, out) };
            }
        }
        self.run_portable(scores, out);
    }

    /// Scores with 16 keys per vector (two accumulators per query over even and odd
    /// dimensions), softmax, then the weighted values 64 dimensions at a time.
    ///
    /// # Safety
    /// The CPU must support AVX512F; `head_dim` must be a multiple of 16.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn run_avx512(&self, scores: &mut [f32], out: &mut [f32]) {
        // One copy per tile size, so the accumulators stay in registers.
        // SAFETY: forwarded.
        unsafe {
            match self.queries.len() / self.head_dim {
                1 => self.tile_avx512::<1>(scores, out),
                2 => self.tile_avx512::<2>(scores, out),
                3 => self.tile_avx512::<3>(scores, out),
                _ => self.tile_avx512::<4>(scores, out),
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    // Index loops over the register arrays: each unrolls into independent accumulator chains.
    #[allow(clippy::needless_range_loop)]
    unsafe fn tile_avx512<const C: usize>(&self, scores: &mut [f32], out: &mut [f32]) {
        use std::arch::x86_64::*;
        let hd = self.head_dim;
        assert!(C <= HEADS_AT_ONCE && self.queries.len() == C * hd && out.len() == C * hd);
        assert!(hd.is_multiple_of(16));
        let blocks = self.visible.div_ceil(KEY_BLOCK);
        let stride = blocks * KEY_BLOCK;
        assert!(scores.len() >= C * stride && self.keys.len() >= blocks * hd * KEY_BLOCK);
        assert!(self.values.len() >= (self.visible - 1) * self.kv_width + self.value_offset + hd);
        // SAFETY: AVX512F is enabled by the caller; every pointer offset below stays inside the
        // slices bounded by the asserts above.
        unsafe {
            let scale = _mm512_set1_ps(self.scale);
            let q = self.queries.as_ptr();
            for b in self.first / KEY_BLOCK..blocks {
                let keys = self.keys.as_ptr().add(b * hd * KEY_BLOCK);
                let mut even = [_mm512_setzero_ps(); C];
                let mut odd = [_mm512_setzero_ps(); C];
                for d in (0..hd).step_by(2) {
                    let c0 = _mm512_loadu_ps(keys.add(d * KEY_BLOCK));
                    let c1 = _mm512_loadu_ps(keys.add((d + 1) * KEY_BLOCK));
                    for i in 0..C {
                        even[i] = _mm512_fmadd_ps(_mm512_set1_ps(*q.add(i * hd + d)), c0, even[i]);
                        odd[i] =
                            _mm512_fmadd_ps(_mm512_set1_ps(*q.add(i * hd + d + 1)), c1, odd[i]);
                    }
                }
                for i in 0..C {
                    let v = _mm512_mul_ps(_mm512_add_ps(even[i], odd[i]), scale);
                    _mm512_storeu_ps(scores.as_mut_ptr().add(i * stride + b * KEY_BLOCK), v);
                }
            }
            for i in 0..C {
                self.weights(&mut scores[i * stride..i * stride + self.visible]);
            }
            let s = scores.as_ptr();
            let values = self.values.as_ptr();
            // 64 dimensions (4 vectors) per pass over the positions; a narrower tail 16 at a time.
            let mut chunk = 0;
            while chunk + 64 <= hd {
                let mut acc = [[_mm512_setzero_ps(); 4]; C];
                for j in self.first..self.visible {
                    let at = values.add(j * self.kv_width + self.value_offset + chunk);
                    let v = [
                        _mm512_loadu_ps(at),
                        _mm512_loadu_ps(at.add(16)),
                        _mm512_loadu_ps(at.add(32)),
                        _mm512_loadu_ps(at.add(48)),
                    ];
                    for i in 0..C {
                        let p = _mm512_set1_ps(*s.add(i * stride + j));
                        for k in 0..4 {
                            acc[i][k] = _mm512_fmadd_ps(p, v[k], acc[i][k]);
                        }
                    }
                }
                for i in 0..C {
                    for k in 0..4 {
                        _mm512_storeu_ps(out.as_mut_ptr().add(i * hd + chunk + 16 * k), acc[i][k]);
                    }
                }
                chunk += 64;
            }
            while chunk < hd {
                let mut acc = [_mm512_setzero_ps(); C];
                for j in self.first..self.visible {
                    let v =
                        _mm512_loadu_ps(values.add(j * self.kv_width + self.value_offset + chunk));
                    for i in 0..C {
                        acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(*s.add(i * stride + j)), v, acc[i]);
                    }
                }
                for i in 0..C {
                    _mm512_storeu_ps(out.as_mut_ptr().add(i * hd + chunk), acc[i]);
                }
                chunk += 16;
            }
        }
    }

    /// Turns one query's scores (`row[..visible]`) into attention weights over the keys it
    /// sees (`row[first..visible]`): soft-capping if any, then the softmax. The cells before
    /// `first` are left as they are and never read.
    fn weights(&self, row: &mut [f32]) {
        let seen = &mut row[self.first..self.visible];
        if let Some(cap) = self.softcap {
            for s in seen.iter_mut() {
                *s = cap * (*s / cap).tanh();
            }
        }
        softmax_row(seen);
    }

    /// Any CPU, any head width: one query at a time.
    fn run_portable(&self, scores: &mut [f32], out: &mut [f32]) {
        let hd = self.head_dim;
        let block = hd * KEY_BLOCK;
        let stride = self.visible.div_ceil(KEY_BLOCK) * KEY_BLOCK;
        for (i, query) in self.queries.chunks_exact(hd).enumerate() {
            let scores = &mut scores[i * stride..(i + 1) * stride];
            for (b, chunk) in scores
                .chunks_exact_mut(KEY_BLOCK)
                .enumerate()
                .skip(self.first / KEY_BLOCK)
            {
                let keys = &self.keys[b * block..(b + 1) * block];
                let mut acc = [0f32; KEY_BLOCK];
                for (d, &qd) in query.iter().enumerate() {
                    let column = &keys[d * KEY_BLOCK..(d + 1) * KEY_BLOCK];
                    for l in 0..KEY_BLOCK {
                        acc[l] = qd.mul_add(column[l], acc[l]);
                    }
                }
                for l in 0..KEY_BLOCK {
                    chunk[l] = acc[l] * self.scale;
                }
            }
            self.weights(&mut scores[..self.visible]);
            let out = &mut out[i * hd..(i + 1) * hd];
            out.fill(0.0);
            for (j, &p) in scores
                .iter()
                .enumerate()
                .take(self.visible)
                .skip(self.first)
            {
                let at = j * self.kv_width + self.value_offset;
                for (o, &v) in out.iter_mut().zip(&self.values[at..at + hd]) {
                    *o = p.mul_add(v, *o);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a plain f64 attention, with several batch splits giving the same bits: the
    /// standard scoring, and a sliding window (shorter than the sequence, not a multiple of a
    /// key block) with soft-capping and another scale.
    #[test]
    fn attention_matches_the_definition_and_ignores_batching() {
        let capped = |hd: usize| Scoring {
            scale: 2.0 / (hd as f32).sqrt(),
            window: Some(21),
            softcap: Some(0.7),
        };
        for (hd, scoring) in [8, 64]
            .into_iter()
            .flat_map(|hd| [(hd, Scoring::standard(hd)), (hd, capped(hd))])
        {
            let (heads, kvh, n) = (4, 2, 37);
            let mut state = 7u64;
            let mut rand = || {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            };
            let q: Vec<f32> = (0..n * heads * hd).map(|_| rand()).collect();
            let k: Vec<f32> = (0..n * kvh * hd).map(|_| rand()).collect();
            let v: Vec<f32> = (0..n * kvh * hd).map(|_| rand()).collect();
            let run = |splits: &[usize]| {
                let mut cache = KvCache::new(1, kvh, hd);
                let mut out = vec![0f32; n * heads * hd];
                let mut start = 0;
                for &end in splits {
                    let (kvw, qw) = (kvh * hd, heads * hd);
                    cache.append(0, &k[start * kvw..end * kvw], &v[start * kvw..end * kvw]);
                    attention(
                        &cache,
                        0,
                        heads,
                        &q[start * qw..end * qw],
                        start,
                        scoring,
                        &mut out[start * qw..end * qw],
                    );
                    start = end;
                }
                out
            };
            let whole = run(&[n]);
            assert!(run(&[5, 16, 17, n]) == whole);
            assert!(run(&(1..=n).collect::<Vec<_>>()) == whole);
            for t in 0..n {
                for h in 0..heads {
                    let kv = h / (heads / kvh);
                    let qv = &q[(t * heads + h) * hd..(t * heads + h + 1) * hd];
                    let first = scoring.window.map_or(0, |w| (t + 1).saturating_sub(w));
                    let s: Vec<f64> = (first..=t)
                        .map(|j| {
                            let kj = &k[(j * kvh + kv) * hd..(j * kvh + kv + 1) * hd];
                            let s = qv
                                .iter()
                                .zip(kj)
                                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                                .sum::<f64>()
                                * f64::from(scoring.scale);
                            match scoring.softcap.map(f64::from) {
                                Some(cap) => cap * (s / cap).tanh(),
                                None => s,
                            }
                        })
                        .collect();
                    let max = s.iter().cloned().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for d in 0..hd {
                        let want: f64 = (first..=t)
                            .map(|j| e[j - first] / z * f64::from(v[(j * kvh + kv) * hd + d]))
                            .sum();
                        let got = whole[(t * heads + h) * hd + d];
                        assert!(
                            (f64::from(got) - want).abs() < 1e-5,
                            "[{t},{h},{d}] {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
