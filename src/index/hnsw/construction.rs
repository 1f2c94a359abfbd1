//! Graph construction: batch insertion in parallel, with a graph that depends only on the
//! vectors and the settings, never on the thread count.
//!
//! The rows are inserted in row order, in batches whose size doubles (1, 1, 2, 4, ...) up to
//! [`max_batch`]. Within a batch every point searches the graph *as it stood before the batch*
//! (read-only, so the points run in parallel with no locks). The points of a batch cannot find
//! each other that way, so each is also compared with its *peers*: the points of the batch whose
//! searches found some of the same nearest nodes (see [`Growing::peers`]). From both, each point
//! picks its neighbours on each of its layers with HNSW's pruning heuristic. Then the reverse
//! edges are added: they are grouped by target node and sorted by source row, each target's list
//! is extended, or, when that would exceed its capacity (`2M` on layer 0, `M` above), pruned
//! again over the old and the new neighbours by the same heuristic. Every step reads a fixed
//! state and writes in a fixed order, so one thread and sixteen give the same bytes (the scheme
//! of ParlayANN's batch HNSW, Manohar et al., PPoPP 2024, plus the peers).
//!
//! A row whose f16 vector equals an earlier row's is not inserted at all (see
//! [`super::duplicates`]); the search returns it beside that row.
//!
//! Levels come from a seeded hash of the row index: level >= l with probability `M^-l`
//! (HNSW's `mL = 1 / ln M`), by integer comparison, so no floating-point logarithm is involved.
//! Distances are the search's own: the f32 form of a point's f16 row against f16 rows with
//! [`dot_f16`](crate::kernels::dot::dot_f16) (or its AVX2 + F16C form, bit-identical), so every CPU builds the same graph.

use std::cell::RefCell;

use rayon::prelude::*;

use super::{Adjacency, MAX_LAYERS, Rows, Scored, UpperLayer, half_to_f32};
use crate::kernels::dot::{F16_AVX2, F16_AVX512, F16_PORTABLE, F16Kernel, dot_f16_with};
use crate::progress::Progress;

/// How many of the best nodes a point's search found are compared with those of the other
/// points of its batch to find its peers (see [`Growing::peers`]).
const PEER_KEYS: usize = 16;

/// Seed of the level hash (fixed: part of what makes the graph reproducible).
const LEVEL_SEED: u64 = 0x6873_6e77_4c65_7631;

/// The largest batch for a graph of `rows` rows: 1% of them, at least 64. Smaller batches are
/// closer to one-at-a-time insertion (on 20,000 random vectors, batches of 5% cost 0.015 of
/// recall@10 at ef 128, 1.3% nothing measurable); larger ones give more threads work. It depends
/// on the row count alone, never on the thread count.
fn max_batch(rows: usize) -> usize {
    (rows / 100).max(64)
}

/// A well-mixed 64-bit hash of `x`: the first output of SplitMix64 seeded with it.
fn mix(x: u64) -> u64 {
    crate::dataset::SplitMix64::new(x).next_u64()
}

/// The level of every row: the number of `l >= 1` with `hash(row) < 2^64 / M^l`, at most
/// `MAX_LAYERS - 1`.
fn levels(rows: usize, m: usize) -> Vec<u8> {
    let mut thresholds = Vec::new();
    let mut power: u128 = 1;
    for _ in 1..MAX_LAYERS {
        power = power.saturating_mul(m as u128);
        let t = (1u128 << 64) / power;
        if t == 0 {
            break;
        }
        thresholds.push(t.min(u128::from(u64::MAX)) as u64);
    }
    (0..rows)
        .map(|row| {
            let h = mix(LEVEL_SEED ^ row as u64);
            thresholds.iter().take_while(|&&t| h < t).count() as u8
        })
        .collect()
}

/// The graph while it grows.
struct Growing<'a> {
    dim: usize,
    vectors: &'a Rows,
    /// Layer-0 capacity per node (`2M`).
    m0: usize,
    /// Capacity above layer 0 and the number of neighbours a new point picks (`M`).
    m: usize,
    ef: usize,
    /// The traversal kernel (never wider than the CPU runs; all give the same bits).
    kernel: F16Kernel,
    levels: Vec<u8>,
    /// Rows whose vector is the same as an earlier row's (see [`super::duplicates`]): never
    /// inserted (no lists, no links to them); the search returns them with their first row.
    copy: Vec<bool>,
    /// Layer-0 lists: node `r`'s are `base[r * m0..r * m0 + base_len[r]]`.
    base: Vec<u32>,
    base_len: Vec<u32>,
    /// Per node, its lists on layers `1..=level` (index 0 is layer 1).
    upper: Vec<Vec<Vec<u32>>>,
    entry: u32,
    top: u8,
}

/// Per-thread buffers of the construction, reused across points and batches: the search's own
/// (visited rows, heaps) and two f32 rows.
#[derive(Default)]
struct Scratch {
    search: super::Scratch,
    /// The point being inserted, as f32.
    query: Vec<f32>,
    /// A candidate of the pruning heuristic, as f32.
    other: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// What one point of a batch found on layers `0..=level` (best first; empty above the graph's
/// top as it stood).
type Found = Vec<Vec<Scored>>;

/// What one point of a batch decided: its neighbours on layers `0..=level`.
type Plan = Vec<Vec<u32>>;

impl Growing<'_> {
    #[inline(always)]
    fn row(&self, row: u32) -> &[u16] {
        self.vectors.row(row, self.dim)
    }

    #[inline(always)]
    fn neighbours(&self, layer: usize, node: u32) -> &[u32] {
        let r = node as usize;
        if layer == 0 {
            &self.base[r * self.m0..r * self.m0 + self.base_len[r] as usize]
        } else {
            &self.upper[r][layer - 1]
        }
    }

    #[inline(always)]
    fn score<const K: u8>(&self, query: &[f32], row: u32) -> f32 {
        dot_f16_with::<K>(query, self.row(row))
    }

    /// Greedy walk on `layer` from `start` to a local best.
    #[inline(always)]
    fn greedy<const K: u8>(&self, query: &[f32], layer: usize, start: Scored) -> Scored {
        let mut best = start;
        loop {
            let mut moved = false;
            for &n in self.neighbours(layer, best.row()) {
                let s = Scored::new(self.score::<K>(query, n), n);
                if s > best {
                    best = s;
                    moved = true;
                }
            }
            if !moved {
                return best;
            }
        }
    }

    /// The beam search of width `ef` on `layer` from `start`: the found nodes, best first.
    #[inline(always)]
    fn beam<const K: u8>(
        &self,
        search: &mut super::Scratch,
        query: &[f32],
        layer: usize,
        start: Scored,
    ) -> Vec<Scored> {
        super::beam::<K>(
            search,
            self.levels.len(),
            query,
            start,
            self.ef,
            |row| self.neighbours(layer, row),
            |row| self.row(row),
        )
    }

    /// HNSW's neighbour heuristic: from `candidates` (best first, scored against the node being
    /// linked), keep a candidate unless it is closer to one already kept than to the node; stop
    /// at `keep`.
    #[inline(always)]
    fn select<const K: u8>(
        &self,
        other: &mut [f32],
        candidates: &[Scored],
        keep: usize,
    ) -> Vec<u32> {
        if candidates.len() <= keep {
            return candidates.iter().map(|c| c.row()).collect();
        }
        let mut kept: Vec<u32> = Vec::with_capacity(keep);
        for c in candidates {
            half_to_f32(self.row(c.row()), other);
            let to_node = c.value();
            let diverse = kept.iter().all(|&k| self.score::<K>(other, k) <= to_node);
            if diverse {
                kept.push(c.row());
                if kept.len() == keep {
                    break;
                }
            }
        }
        kept
    }

    /// Phase 1 for `point`: search the graph as it stands; per layer `0..=level` the nodes
    /// found, best first (empty above the graph's top as it stood).
    #[inline(always)]
    fn search<const K: u8>(&self, scratch: &mut Scratch, point: u32) -> Found {
        let Scratch { search, query, .. } = scratch;
        let level = usize::from(self.levels[point as usize]);
        let top = usize::from(self.top);
        query.resize(self.dim, 0.0);
        half_to_f32(self.row(point), query);
        let mut current = Scored::new(self.score::<K>(query, self.entry), self.entry);
        for layer in (level + 1..=top).rev() {
            current = self.greedy::<K>(query, layer, current);
        }
        let mut found: Found = vec![Vec::new(); level + 1];
        for layer in (0..=level.min(top)).rev() {
            found[layer] = self.beam::<K>(search, query, layer, current);
            current = found[layer][0];
        }
        found
    }

    /// Phase 2 for `point`: its neighbours per layer, picked by the heuristic from what its
    /// search found and from `peers`, the points of its own batch it is compared with (rows,
    /// ascending, per layer).
    #[inline(always)]
    fn choose<const K: u8>(
        &self,
        scratch: &mut Scratch,
        point: u32,
        mut found: Found,
        peers: &[Vec<u32>],
    ) -> Plan {
        scratch.query.resize(self.dim, 0.0);
        scratch.other.resize(self.dim, 0.0);
        half_to_f32(self.row(point), &mut scratch.query);
        found
            .iter_mut()
            .zip(peers)
            .map(|(candidates, peers)| {
                if !peers.is_empty() {
                    candidates.extend(
                        peers
                            .iter()
                            .map(|&p| Scored::new(self.score::<K>(&scratch.query, p), p)),
                    );
                    candidates.sort_unstable_by(|a, b| b.cmp(a));
                }
                self.select::<K>(&mut scratch.other, candidates, self.m)
            })
            .collect()
    }

    /// Phase 2 for `target` on `layer`: its list with the new `sources` (ascending rows, none
    /// already linked), pruned to capacity when it overflows.
    #[inline(always)]
    fn relink<const K: u8>(
        &self,
        scratch: &mut Scratch,
        layer: usize,
        target: u32,
        sources: &[u32],
    ) -> Vec<u32> {
        let old = self.neighbours(layer, target);
        let cap = if layer == 0 { self.m0 } else { self.m };
        if old.len() + sources.len() <= cap {
            return old.iter().chain(sources).copied().collect();
        }
        scratch.query.resize(self.dim, 0.0);
        scratch.other.resize(self.dim, 0.0);
        half_to_f32(self.row(target), &mut scratch.query);
        let mut candidates: Vec<Scored> = old
            .iter()
            .chain(sources)
            .map(|&n| Scored::new(self.score::<K>(&scratch.query, n), n))
            .collect();
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        // The heuristic over the union, except that two old neighbours are not compared again:
        // they already stood together in this list, so only pairs with a new node are checked.
        let mut kept: Vec<(u32, bool)> = Vec::with_capacity(cap);
        for c in &candidates {
            let fresh = sources.binary_search(&c.row()).is_ok();
            half_to_f32(self.row(c.row()), &mut scratch.other);
            let to_node = c.value();
            let diverse = kept
                .iter()
                .filter(|k| fresh || k.1)
                .all(|k| self.score::<K>(&scratch.other, k.0) <= to_node);
            if diverse {
                kept.push((c.row(), fresh));
                if kept.len() == cap {
                    break;
                }
            }
        }
        kept.into_iter().map(|k| k.0).collect()
    }

    fn search_dispatch(&self, point: u32) -> Found {
        let mut scratch = SCRATCH.with(|slot| std::mem::take(&mut *slot.borrow_mut()));
        let found = match self.kernel {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `kernel` is never wider than what `super::kernel` found on this CPU.
            F16Kernel::Avx512 => unsafe { self.search_avx512(&mut scratch, point) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            F16Kernel::Avx2 => unsafe { self.search_avx2(&mut scratch, point) },
            _ => self.search::<F16_PORTABLE>(&mut scratch, point),
        };
        SCRATCH.with(|slot| *slot.borrow_mut() = scratch);
        found
    }

    fn choose_dispatch(&self, point: u32, found: Found, peers: &[Vec<u32>]) -> Plan {
        let mut scratch = SCRATCH.with(|slot| std::mem::take(&mut *slot.borrow_mut()));
        let s = &mut scratch;
        let plan = match self.kernel {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `kernel` is never wider than what `super::kernel` found on this CPU.
            F16Kernel::Avx512 => unsafe { self.choose_avx512(s, point, found, peers) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            F16Kernel::Avx2 => unsafe { self.choose_avx2(s, point, found, peers) },
            _ => self.choose::<F16_PORTABLE>(s, point, found, peers),
        };
        SCRATCH.with(|slot| *slot.borrow_mut() = scratch);
        plan
    }

    fn relink_dispatch(&self, layer: usize, target: u32, sources: &[u32]) -> Vec<u32> {
        let mut scratch = SCRATCH.with(|slot| std::mem::take(&mut *slot.borrow_mut()));
        let s = &mut scratch;
        let list = match self.kernel {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `kernel` is never wider than what `super::kernel` found on this CPU.
            F16Kernel::Avx512 => unsafe { self.relink_avx512(s, layer, target, sources) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            F16Kernel::Avx2 => unsafe { self.relink_avx2(s, layer, target, sources) },
            _ => self.relink::<F16_PORTABLE>(s, layer, target, sources),
        };
        SCRATCH.with(|slot| *slot.borrow_mut() = scratch);
        list
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    fn search_avx2(&self, scratch: &mut Scratch, point: u32) -> Found {
        self.search::<F16_AVX2>(scratch, point)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    fn search_avx512(&self, scratch: &mut Scratch, point: u32) -> Found {
        self.search::<F16_AVX512>(scratch, point)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    fn choose_avx2(&self, s: &mut Scratch, point: u32, found: Found, peers: &[Vec<u32>]) -> Plan {
        self.choose::<F16_AVX2>(s, point, found, peers)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    fn choose_avx512(&self, s: &mut Scratch, point: u32, found: Found, peers: &[Vec<u32>]) -> Plan {
        self.choose::<F16_AVX512>(s, point, found, peers)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    fn relink_avx2(&self, s: &mut Scratch, layer: usize, target: u32, from: &[u32]) -> Vec<u32> {
        self.relink::<F16_AVX2>(s, layer, target, from)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    fn relink_avx512(&self, s: &mut Scratch, layer: usize, target: u32, from: &[u32]) -> Vec<u32> {
        self.relink::<F16_AVX512>(s, layer, target, from)
    }

    fn set(&mut self, layer: usize, node: u32, list: &[u32]) {
        let r = node as usize;
        if layer == 0 {
            self.base[r * self.m0..r * self.m0 + list.len()].copy_from_slice(list);
            self.base_len[r] = list.len() as u32;
        } else {
            let slot = &mut self.upper[r][layer - 1];
            slot.clear();
            slot.extend_from_slice(list);
        }
    }

    /// Inserts rows `start..end` as one batch (but for copies, which stay out of the graph).
    fn insert_batch(&mut self, start: usize, end: usize) {
        let points: Vec<u32> = (start as u32..end as u32)
            .filter(|&p| !self.copy[p as usize])
            .collect();
        let found: Vec<Found> = points
            .par_iter()
            .map(|&p| self.search_dispatch(p))
            .collect();
        let peers = self.peers(&points, &found);
        let plans: Vec<Plan> = found
            .into_par_iter()
            .zip(peers.par_iter())
            .enumerate()
            .map(|(i, (found, peers))| self.choose_dispatch(points[i], found, peers))
            .collect();
        // The batch's own lists first: a point of the batch chosen by another gets that edge
        // back below, over its own choice.
        for (i, plan) in plans.iter().enumerate() {
            let point = points[i];
            for (layer, list) in plan.iter().enumerate() {
                self.set(layer, point, list);
            }
        }
        // Reverse edges (layer, target, source), in a fixed order; none already present.
        let mut edges: Vec<(u8, u32, u32)> = Vec::new();
        for (i, plan) in plans.iter().enumerate() {
            let source = points[i];
            for (layer, list) in plan.iter().enumerate() {
                edges.extend(
                    list.iter()
                        .filter(|&&t| !self.neighbours(layer, t).contains(&source))
                        .map(|&t| (layer as u8, t, source)),
                );
            }
        }
        edges.sort_unstable();
        let groups: Vec<&[(u8, u32, u32)]> =
            edges.chunk_by(|a, b| a.0 == b.0 && a.1 == b.1).collect();
        let relinked: Vec<Vec<u32>> = groups
            .par_iter()
            .map(|group| {
                let sources: Vec<u32> = group.iter().map(|e| e.2).collect();
                self.relink_dispatch(usize::from(group[0].0), group[0].1, &sources)
            })
            .collect();
        for (group, list) in groups.iter().zip(&relinked) {
            self.set(usize::from(group[0].0), group[0].1, list);
        }
        // A new top level: its first point becomes the entry.
        for point in start..end {
            if self.levels[point] > self.top {
                self.top = self.levels[point];
                self.entry = point as u32;
            }
        }
    }

    /// Per point of the batch (`points`, ascending) and per layer, the other points of the batch
    /// it is compared with: those whose search found one of the same [`PEER_KEYS`] best nodes
    /// on that layer, nearest shared node first, at most `ef` of them. Points of one batch never
    /// see each other in the graph, so without this two near points (or exact duplicates, common
    /// in real corpora) inserted together would link only through older nodes, whose pruning
    /// keeps at most one of a group of duplicates: the others became unreachable.
    fn peers(&self, points: &[u32], found: &[Found]) -> Vec<Vec<Vec<u32>>> {
        let layers = found.iter().map(Vec::len).max().unwrap_or(0);
        let mut peers: Vec<Vec<Vec<u32>>> =
            found.iter().map(|f| vec![Vec::new(); f.len()]).collect();
        for layer in 0..layers {
            // (shared node, batch point), sorted: the batch points that found each node.
            let mut by_node: Vec<(u32, u32)> = Vec::new();
            for (i, f) in found.iter().enumerate() {
                if let Some(list) = f.get(layer) {
                    by_node.extend(list.iter().take(PEER_KEYS).map(|s| (s.row(), i as u32)));
                }
            }
            if by_node.is_empty() {
                continue;
            }
            by_node.sort_unstable();
            let lists: Vec<(usize, Vec<u32>)> = (0..found.len())
                .into_par_iter()
                .filter(|&i| found[i].get(layer).is_some_and(|l| !l.is_empty()))
                .map(|i| {
                    let mut picked: Vec<u32> = Vec::new();
                    for s in found[i][layer].iter().take(PEER_KEYS) {
                        let from = by_node.partition_point(|e| e.0 < s.row());
                        for e in by_node[from..].iter().take_while(|e| e.0 == s.row()) {
                            let row = points[e.1 as usize];
                            if e.1 != i as u32 && !picked.contains(&row) {
                                picked.push(row);
                            }
                            if picked.len() == self.ef {
                                break;
                            }
                        }
                        if picked.len() == self.ef {
                            break;
                        }
                    }
                    picked.sort_unstable();
                    (i, picked)
                })
                .collect();
            for (i, list) in lists {
                peers[i][layer] = list;
            }
        }
        peers
    }
}

/// The graph over every row of `vectors` (`dim` wide) but the copies (`(first row, copy)`
/// pairs, from [`super::duplicates`]): entry point, layer 0 and the upper layers, as
/// [`super::HnswGraph`] holds them. `m >= 2`, `ef_construction >= 1`.
pub(super) fn construct(
    vectors: &Rows,
    dim: usize,
    m: usize,
    ef_construction: usize,
    kernel: F16Kernel,
    copies: &[(u32, u32)],
    progress: &dyn Progress,
) -> (u32, Adjacency, Vec<UpperLayer>) {
    let rows = vectors.len / dim.max(1);
    let mut levels = levels(rows, m);
    let mut copy = vec![false; rows];
    for &(_, c) in copies {
        copy[c as usize] = true;
        levels[c as usize] = 0;
    }
    let m0 = 2 * m;
    let mut graph = Growing {
        dim,
        vectors,
        m0,
        m,
        ef: ef_construction,
        kernel,
        upper: levels
            .iter()
            .map(|&l| vec![Vec::new(); usize::from(l)])
            .collect(),
        levels,
        copy,
        base: vec![0; rows * m0],
        base_len: vec![0; rows],
        entry: 0,
        top: 0,
    };
    progress.begin("hnsw", Some(rows as u64));
    if rows > 0 {
        graph.top = graph.levels[0];
        progress.advance(1);
    }
    let largest = max_batch(rows);
    let mut start = 1;
    while start < rows {
        let end = (start + start.min(largest)).min(rows);
        graph.insert_batch(start, end);
        progress.advance((end - start) as u64);
        start = end;
    }
    progress.finish();
    freeze(graph)
}

/// The grown graph in the compact form searched.
fn freeze(graph: Growing<'_>) -> (u32, Adjacency, Vec<UpperLayer>) {
    let rows = graph.levels.len();
    let mut base = Adjacency {
        offsets: Vec::with_capacity(rows + 1),
        links: Vec::with_capacity(graph.base_len.iter().map(|&l| l as usize).sum()),
    };
    base.offsets.push(0);
    for row in 0..rows {
        base.links
            .extend_from_slice(graph.neighbours(0, row as u32));
        base.offsets.push(base.links.len() as u64);
    }
    let mut upper: Vec<UpperLayer> = (1..=usize::from(graph.top))
        .map(|_| UpperLayer {
            rows: Vec::new(),
            adjacency: Adjacency {
                offsets: vec![0],
                links: Vec::new(),
            },
        })
        .collect();
    for (row, lists) in graph.upper.iter().enumerate() {
        for (layer, list) in upper.iter_mut().zip(lists) {
            layer.rows.push(row as u32);
            layer.adjacency.links.extend_from_slice(list);
            layer
                .adjacency
                .offsets
                .push(layer.adjacency.links.len() as u64);
        }
    }
    (graph.entry, base, upper)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_m_to_the_minus_l() {
        let levels = levels(200_000, 16);
        let at_least = |l: u8| levels.iter().filter(|&&x| x >= l).count() as f64 / 200_000.0;
        assert!((at_least(1) - 1.0 / 16.0).abs() < 0.003, "{}", at_least(1));
        assert!(
            (at_least(2) - 1.0 / 256.0).abs() < 0.0008,
            "{}",
            at_least(2)
        );
        assert_eq!(levels, super::levels(200_000, 16));
        assert!(levels.iter().all(|&l| usize::from(l) < MAX_LAYERS));
    }

    fn rows(n: usize, dim: usize) -> Rows {
        let mut rng = fastrand::Rng::with_seed(11);
        let mut data = Vec::with_capacity(n * dim);
        for _ in 0..n {
            let v: Vec<f32> = (0..dim).map(|_| rng.f32() - 0.5).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            data.extend(v.iter().map(|x| half::f16::from_f32(x / norm).to_bits()));
        }
        Rows {
            len: data.len(),
            data,
            start: 0,
        }
    }

    #[test]
    fn same_graph_whatever_the_threads_and_the_kernel() {
        let vectors = rows(3000, 40);
        let build = |threads: usize, kernel: F16Kernel| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| {
                    construct(
                        &vectors,
                        40,
                        6,
                        40,
                        kernel,
                        &[],
                        &crate::progress::NoProgress,
                    )
                })
        };
        let reference = build(1, F16Kernel::Portable);
        assert!(!reference.2.is_empty(), "no upper layer");
        for kernel in [F16Kernel::Portable, crate::kernels::dot::f16_kernel()] {
            for threads in [1, 2, 5] {
                let other = build(threads, kernel);
                assert_eq!(reference.0, other.0, "{kernel:?} {threads}");
                assert_eq!(reference.1, other.1, "{kernel:?} {threads}");
                assert_eq!(reference.2, other.2, "{kernel:?} {threads}");
            }
        }
        // Every node is linked and no list exceeds its capacity.
        let (_, base, upper) = reference;
        for node in 0..3000 {
            let links = base.of(node);
            assert!(!links.is_empty() && links.len() <= 12, "{node}: {links:?}");
            assert!(!links.contains(&(node as u32)));
        }
        for layer in &upper {
            for slot in 0..layer.rows.len() {
                assert!(layer.adjacency.of(slot).len() <= 6);
            }
        }
    }

    #[test]
    fn batches_double_then_stay_at_the_cap() {
        let mut sizes = Vec::new();
        let mut start = 1;
        while start < 5000 {
            let end = (start + start.min(max_batch(5000))).min(5000);
            sizes.push(end - start);
            start = end;
        }
        assert_eq!(&sizes[..4], &[1, 2, 4, 8]);
        assert!(sizes.iter().all(|&s| s <= 64));
        assert_eq!(sizes.iter().sum::<usize>(), 4999);
    }
}
