//! Approximate nearest-neighbour search with an HNSW graph over unit vectors.
//!
//! The graph is built by our own batch insertion ([`construction`]: parallel, and the same
//! bytes whatever the thread count) and kept in a compact form ([`HnswGraph`]: per layer, the
//! neighbour rows as `u32` in one array with offsets) beside a contiguous f16 copy of the
//! vectors. Search: greedy descent through the upper layers, then a beam of width `ef` on layer
//! 0, a per-thread visited bitset, pipelined prefetching, AVX2 + F16C dot products against the
//! f32 query. The caller rescores the results exactly.
//!
//! The graph is a *cache* (`graph.bin`, our own little-endian format, without a copy of the
//! vectors): it is rebuilt whenever it is missing, unreadable or its key (a [`Fingerprint`] of
//! the corpus hash, model, parameters and construction version: see [`cache_key`]) differs.

mod construction;

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;
use std::path::Path;

use rayon::prelude::*;

use crate::dataset::{Fingerprint, VectorDtype, VectorMatrix};
use crate::error::{Error, Result, Setting};
use crate::index::manifest::HnswSettings;
use crate::kernels::dot::{
    F16_AVX2, F16_AVX512, F16_PORTABLE, F16Kernel, dot_f16_with, f16_kernel, prefetch_bytes,
};
use crate::progress::Progress;

/// Layers of the graph at most.
const MAX_LAYERS: usize = 16;
/// The frozen graph inside the cache directory.
const GRAPH_FILE: &str = "graph.bin";
/// File holding the key of the cached graph (its [`Fingerprint`] in hex).
const KEY_FILE: &str = "key";
/// Version of the construction: bumping it rebuilds every cached graph.
const CONSTRUCTION_VERSION: u64 = 4;
/// First bytes of [`GRAPH_FILE`] (format version in the last byte). Version 2 ends with the
/// CRC-32 of every byte before it (a graph is a cache outside the manifest's checksums).
const MAGIC: &[u8; 8] = b"FSHNSW\x00\x02";

/// Neighbour lists of one layer: `links[offsets[i]..offsets[i + 1]]` for the layer's `i`-th node.
#[derive(Debug, Default, PartialEq)]
struct Adjacency {
    offsets: Vec<u64>,
    links: Vec<u32>,
}

impl Adjacency {
    #[inline]
    fn of(&self, slot: usize) -> &[u32] {
        let (start, end) = (self.offsets[slot] as usize, self.offsets[slot + 1] as usize);
        &self.links[start..end]
    }
}

/// An upper layer: its rows (ascending) and their neighbours.
#[derive(Debug, Default, PartialEq)]
struct UpperLayer {
    rows: Vec<u32>,
    adjacency: Adjacency,
}

/// A frozen HNSW graph over the rows of a matrix (row index = data id), with the vectors.
pub struct HnswGraph {
    dim: usize,
    /// Row-major f16 copy of the matrix (`rows * dim`).
    vectors: Rows,
    entry: u32,
    /// Layer 0: every row.
    base: Adjacency,
    /// Layers 1.. (index 0 is layer 1).
    upper: Vec<UpperLayer>,
    /// `(first row, copy)` for every row whose f16 vector equals an earlier row's, sorted:
    /// copies are not in the graph, a search returns them beside their first row.
    copies: Vec<(u32, u32)>,
}

/// The cache key of a graph: changes whenever the vectors (the index's recorded corpus hash,
/// the model, the row count) or the construction (its version, the parameters) do.
pub fn cache_key(
    corpus_hash: &str,
    model: &str,
    rows: usize,
    settings: &HnswSettings,
) -> Fingerprint {
    Fingerprint::builder("hnsw graph")
        .number("construction", CONSTRUCTION_VERSION)
        .text("corpus", corpus_hash)
        .text("model", model)
        .number("rows", rows as u64)
        .number("m", settings.m as u64)
        .number("ef_construction", settings.ef_construction as u64)
        .finish()
}

/// Row-major vectors as f16 bits, the first row on a 64-byte boundary (so, when the dimension is
/// a multiple of 32, loads never straddle two cache lines). The traversal reads these: half the
/// memory traffic of f32; the stored f16 matrices (the default) convert back exactly.
struct Rows {
    data: Vec<u16>,
    start: usize,
    len: usize,
}

impl Rows {
    /// Row `row` of a `dim`-wide matrix.
    #[inline(always)]
    fn row(&self, row: u32, dim: usize) -> &[u16] {
        let at = self.start + row as usize * dim;
        &self.data[at..at + dim]
    }
}

/// `matrix` as [`Rows`], in parallel: an f16 matrix copied bit for bit, an f32 one rounded to
/// nearest f16 (each row through a one-row f32 buffer).
fn to_half(matrix: &VectorMatrix) -> Rows {
    let dim = matrix.dim();
    let len = matrix.rows() * dim;
    let mut data = vec![0u16; len + 31];
    let start = data.as_ptr().align_offset(64).min(31);
    let rows = data[start..start + len]
        .par_chunks_mut(dim.max(1))
        .enumerate();
    if matrix.dtype() == VectorDtype::F16 {
        rows.for_each(|(i, out)| {
            for (o, b) in out.iter_mut().zip(matrix.row_bytes(i).chunks_exact(2)) {
                *o = u16::from_le_bytes([b[0], b[1]]);
            }
        });
    } else {
        rows.for_each_init(
            || vec![0f32; dim],
            |row, (i, out)| {
                matrix.row_into(i, row);
                for (o, v) in out.iter_mut().zip(row.iter()) {
                    *o = half::f16::from_f32(*v).to_bits();
                }
            },
        );
    }
    Rows { data, start, len }
}

/// `(first row, copy)` for every row of `vectors` whose f16 vector is bit for bit that of an
/// earlier row, sorted. Real corpora are full of them (several versions of a crate, licence
/// files: 6,425 of 20,000 code chunks in one sample, 340 copies of one vector). In the graph,
/// copies of one vector kept each other as neighbours (for the pruning heuristic, a copy is as
/// close to the node as to any other copy) and so formed islands without an edge out: a search
/// that entered one never left (recall@10 at ef 128 0.90 on that sample, 0.98 without them).
fn duplicates(vectors: &Rows, dim: usize) -> Vec<(u32, u32)> {
    let rows = vectors.len / dim.max(1);
    let mut first: std::collections::HashMap<&[u16], u32> =
        std::collections::HashMap::with_capacity(rows);
    let mut copies = Vec::new();
    for row in 0..rows as u32 {
        let first_row = *first.entry(vectors.row(row, dim)).or_insert(row);
        if first_row != row {
            copies.push((first_row, row));
        }
    }
    copies.sort_unstable();
    copies
}

/// `row` (f16 bits) as f32 into `out` (exact; `half` converts 8 or 16 lanes at a time with
/// F16C where the CPU has it, which element by element cost a third of the build).
#[inline(always)]
fn half_to_f32(row: &[u16], out: &mut [f32]) {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    let row: &[half::f16] = row.reinterpret_cast();
    row.convert_to_f32_slice(&mut out[..row.len()]);
}

impl HnswGraph {
    /// Builds the graph over every row of `matrix`, in parallel; the graph is the same whatever
    /// the thread count (batch insertion; see the module documentation).
    pub fn build(
        matrix: &VectorMatrix,
        settings: &HnswSettings,
        progress: &dyn Progress,
    ) -> Result<Self> {
        if settings.m < 2 || settings.ef_construction < 1 {
            return Err(Error::invalid(
                Setting::Hnsw,
                format!(
                    "m = {} and ef_construction = {}: need m >= 2, ef_construction >= 1",
                    settings.m, settings.ef_construction
                ),
            ));
        }
        let rows = matrix.rows();
        let dim = matrix.dim();
        if u32::try_from(rows).is_err() {
            return Err(Error::invalid(
                Setting::Hnsw,
                format!("{rows} rows: at most {} are supported", u32::MAX),
            ));
        }
        let vectors = to_half(matrix);
        let copies = duplicates(&vectors, dim);
        let (entry, base, upper) = construction::construct(
            &vectors,
            dim,
            settings.m,
            settings.ef_construction,
            f16_kernel(),
            &copies,
            progress,
        );
        Ok(Self {
            dim,
            vectors,
            entry,
            base,
            upper,
            copies,
        })
    }

    /// Writes the graph into `dir` (created; its parent must exist) with its `key`.
    pub fn save(&self, dir: &Path, key: &Fingerprint) -> Result<()> {
        crate::dataset::tempfiles::create_dir_inside(dir)?;
        let path = dir.join(GRAPH_FILE);
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        let put = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&v.to_le_bytes());
        put(&mut out, self.rows() as u64);
        put(&mut out, u64::from(self.entry));
        put(&mut out, self.upper.len() as u64);
        let put_adjacency = |out: &mut Vec<u8>, adjacency: &Adjacency| {
            put(out, adjacency.links.len() as u64);
            for &o in &adjacency.offsets {
                put(out, o);
            }
            for &l in &adjacency.links {
                out.extend_from_slice(&l.to_le_bytes());
            }
        };
        put_adjacency(&mut out, &self.base);
        for layer in &self.upper {
            put(&mut out, layer.rows.len() as u64);
            for &r in &layer.rows {
                out.extend_from_slice(&r.to_le_bytes());
            }
            put_adjacency(&mut out, &layer.adjacency);
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        let mut file = std::fs::File::create(&path).map_err(|e| Error::io(&path, e))?;
        file.write_all(&out).map_err(|e| Error::io(&path, e))?;
        std::fs::write(dir.join(KEY_FILE), key.to_string())
            .map_err(|e| Error::io(dir.join(KEY_FILE), e))
    }

    /// Loads the graph from `dir` when its key equals `key` and it fits `matrix` (whose rows
    /// become the vectors) and `settings` (built with them); `Ok(None)` when there is no usable
    /// cache (missing, stale, or unreadable: the caller rebuilds). Both files are read only
    /// when they are regular files within the size they can have (the key: one line; the
    /// graph: the most a graph of these rows and `m` can hold), so a cache linked to
    /// `/dev/zero` or a FIFO, or grown past any graph of these rows, is not read but rebuilt.
    pub fn load(
        dir: &Path,
        key: &Fingerprint,
        matrix: &VectorMatrix,
        settings: &HnswSettings,
    ) -> Result<Option<Self>> {
        use crate::dataset::bounded::{MAX_REF_BYTES, read_regular_bytes, read_regular_text};
        let key_path = dir.join(KEY_FILE);
        match read_regular_text(&key_path, MAX_REF_BYTES) {
            Ok(found) if found.parse::<Fingerprint>().ok().as_ref() == Some(key) => {}
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                tracing::warn!(
                    "{}: unreadable HNSW cache key ({e}); rebuilding",
                    key_path.display()
                );
                return Ok(None);
            }
        }
        let path = dir.join(GRAPH_FILE);
        let bytes = match read_regular_bytes(&path, max_graph_bytes(matrix.rows(), settings.m)) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                tracing::warn!(
                    "{}: unreadable HNSW cache ({e}); rebuilding",
                    path.display()
                );
                return Ok(None);
            }
        };
        let intact = bytes.len() >= 4 && {
            let (body, crc) = bytes.split_at(bytes.len() - 4);
            crc32fast::hash(body).to_le_bytes() == crc
        };
        let parsed = if intact {
            parse(&bytes[..bytes.len() - 4], matrix.rows())
        } else {
            Err("checksum differs (damaged, or an older version)".to_string())
        };
        match parsed {
            Ok((entry, base, upper)) => {
                let vectors = to_half(matrix);
                let copies = duplicates(&vectors, matrix.dim());
                Ok(Some(Self {
                    dim: matrix.dim(),
                    vectors,
                    entry,
                    base,
                    upper,
                    copies,
                }))
            }
            Err(why) => {
                tracing::warn!(
                    "{}: unreadable HNSW cache ({why}); rebuilding",
                    path.display()
                );
                Ok(None)
            }
        }
    }

    /// Number of points in the graph.
    pub fn len(&self) -> usize {
        self.rows()
    }

    fn rows(&self) -> usize {
        self.base.offsets.len().saturating_sub(1)
    }

    /// True when the graph is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `row` of the graph's f16 copy as f32 into `out` (`dim` long). For an f16 matrix this
    /// is the stored row bit for bit (and, just traversed, likely still in the cache); for an
    /// f32 one it is rounded.
    pub fn row_into(&self, row: u32, out: &mut [f32]) {
        half_to_f32(self.vector(row), out);
    }

    #[inline]
    fn vector(&self, row: u32) -> &[u16] {
        self.vectors.row(row, self.dim)
    }

    /// The approximate `k` nearest rows to `query` with search width `ef` (>= k), best first
    /// (ties by row); the caller rescores them exactly. Deterministic for a given graph.
    pub fn search(&self, query: &[f32], k: usize, ef: usize) -> Vec<u32> {
        if k == 0 || self.is_empty() || query.len() != self.dim {
            return Vec::new();
        }
        let ef = ef.max(k);
        match f16_kernel() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `kernel` found AVX-512 (F) on this CPU.
            F16Kernel::Avx512 => unsafe { self.search_avx512(query, k, ef) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `kernel` found AVX2 and F16C on this CPU.
            F16Kernel::Avx2 => unsafe { self.search_avx2(query, k, ef) },
            _ => self.search_with::<F16_PORTABLE>(query, k, ef),
        }
    }

    /// [`HnswGraph::search_with`] compiled for AVX2, with [`dot_f16_avx2`](crate::kernels::dot::dot_f16_avx2) inlined (the
    /// same arithmetic as [`dot_f16`](crate::kernels::dot::dot_f16), so the same results).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    fn search_avx2(&self, query: &[f32], k: usize, ef: usize) -> Vec<u32> {
        self.search_with::<F16_AVX2>(query, k, ef)
    }

    /// [`HnswGraph::search_with`] compiled for AVX-512, with [`dot_f16_avx512`](crate::kernels::dot::dot_f16_avx512) inlined.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    fn search_avx512(&self, query: &[f32], k: usize, ef: usize) -> Vec<u32> {
        self.search_with::<F16_AVX512>(query, k, ef)
    }

    /// The inner product of the search with the kernel `K`.
    #[inline(always)]
    fn score<const K: u8>(&self, query: &[f32], row: u32) -> f32 {
        dot_f16_with::<K>(query, self.vector(row))
    }

    #[inline(always)]
    fn search_with<const K: u8>(&self, query: &[f32], k: usize, ef: usize) -> Vec<u32> {
        // Greedy descent through the upper layers.
        let mut current = self.entry;
        let mut best = self.score::<K>(query, current);
        for layer in self.upper.iter().rev() {
            while let Ok(slot) = layer.rows.binary_search(&current) {
                let mut moved = false;
                for &n in layer.adjacency.of(slot) {
                    let score = self.score::<K>(query, n);
                    if score > best || (score == best && n < current) {
                        best = score;
                        current = n;
                        moved = true;
                    }
                }
                if !moved {
                    break;
                }
            }
        }
        // The buffers are taken out of the thread-local slot and put back, so that the search
        // itself runs here (a closure passed to `with` would not be compiled for the kernel).
        let mut scratch = SCRATCH.with(|slot| std::mem::take(&mut *slot.borrow_mut()));
        let found = self.search_base::<K>(&mut scratch, query, Scored::new(best, current), k, ef);
        SCRATCH.with(|slot| *slot.borrow_mut() = scratch);
        found
    }

    /// The beam search on layer 0 from `start`: the best `k` of width `ef`.
    #[inline(always)]
    fn search_base<const K: u8>(
        &self,
        scratch: &mut Scratch,
        query: &[f32],
        start: Scored,
        k: usize,
        ef: usize,
    ) -> Vec<u32> {
        let mut found = beam::<K>(
            scratch,
            self.rows(),
            query,
            start,
            ef,
            |row| self.base.of(row as usize),
            |row| self.vector(row),
        );
        if !self.copies.is_empty() {
            // Each copy scores what its first row does; they are ranked together.
            let mut with_copies = Vec::with_capacity(found.len());
            for s in found {
                with_copies.push(s);
                let from = self.copies.partition_point(|c| c.0 < s.row());
                with_copies.extend(
                    self.copies[from..]
                        .iter()
                        .take_while(|c| c.0 == s.row())
                        .map(|c| Scored::new(s.value(), c.1)),
                );
            }
            with_copies.sort_unstable_by(|a, b| b.cmp(a));
            found = with_copies;
        }
        found.truncate(k);
        found.into_iter().map(Scored::row).collect()
    }
}

/// How many rows ahead of the one being scored the beam search prefetches whole rows (their
/// first lines are all prefetched at once, as soon as they are found unvisited). Measured on
/// 100,000 clustered 384-d rows: 2 is best, 1, 3 and 4 within noise below it, and prefetching
/// every line of every row at once much slower (it floods the line-fill buffers).
const PREFETCH_AHEAD: usize = 2;

/// HNSW's beam search of width `ef` from `start` over a graph of `rows` rows whose lists are
/// `links(row)` and vectors `vector(row)`, scored against `query` with kernel `K`: the found
/// rows, best first. Layer 0 of the search and every layer of the construction run this.
///
/// The traversal is bound by memory, not arithmetic (a 384-d f16 row is 12 cache lines, and a
/// graph of 100,000 rows is far larger than the caches), so it keeps several loads in flight:
/// the neighbour list of the next candidate is prefetched when the current one is taken, the
/// first lines of every unvisited neighbour as soon as it is found, and the rest of each row
/// [`PREFETCH_AHEAD`] rows before it is scored.
#[inline(always)]
fn beam<'g, const K: u8>(
    scratch: &mut Scratch,
    rows: usize,
    query: &[f32],
    start: Scored,
    ef: usize,
    links: impl Fn(u32) -> &'g [u32],
    vector: impl Fn(u32) -> &'g [u16],
) -> Vec<Scored> {
    scratch.open(rows, start);
    while scratch.expand(ef, &links, &vector) {
        scratch.score::<K>(query, ef, &vector);
    }
    scratch.close()
}

impl Scratch {
    /// Starts a beam search from `start` over `rows` rows.
    #[inline(always)]
    fn open(&mut self, rows: usize, start: Scored) {
        self.visited.begin(rows);
        self.candidates.clear();
        self.results.clear();
        self.visited.insert(start.row());
        self.candidates.push(start);
        self.results.push(Reverse(start));
    }

    /// Takes the next candidate and collects its unvisited neighbours into `fresh`, starting
    /// their loads; false when the search is over (no candidate, or none that can improve the
    /// `ef` found).
    #[inline(always)]
    fn expand<'g>(
        &mut self,
        ef: usize,
        links: &impl Fn(u32) -> &'g [u32],
        vector: &impl Fn(u32) -> &'g [u16],
    ) -> bool {
        let Some(c) = self.candidates.pop() else {
            return false;
        };
        let worst = self.results.peek().map_or(0, |w| w.0.score());
        if self.results.len() >= ef && c.score() < worst {
            return false;
        }
        if let Some(next) = self.candidates.peek() {
            prefetch_lines(links(next.row()), 1);
        }
        self.fresh.clear();
        for &n in links(c.row()) {
            if self.visited.insert(n) {
                self.fresh.push(n);
                prefetch_lines(vector(n), HEAD_LINES);
            }
        }
        for &n in self.fresh.iter().take(PREFETCH_AHEAD) {
            prefetch_rest(vector(n));
        }
        true
    }

    /// Scores the rows of `fresh` against `query`: each that can join the `ef` best found so
    /// far becomes a candidate.
    #[inline(always)]
    fn score<'g, const K: u8>(
        &mut self,
        query: &[f32],
        ef: usize,
        vector: &impl Fn(u32) -> &'g [u16],
    ) {
        let Self {
            candidates,
            results,
            fresh,
            ..
        } = self;
        for (i, &n) in fresh.iter().enumerate() {
            if let Some(&ahead) = fresh.get(i + PREFETCH_AHEAD) {
                prefetch_rest(vector(ahead));
            }
            let s = Scored::new(dot_f16_with::<K>(query, vector(n)), n);
            let worst = results.peek().map_or(0, |w| w.0.score());
            if results.len() < ef || s.score() > worst {
                candidates.push(s);
                results.push(Reverse(s));
                if results.len() > ef {
                    results.pop();
                }
            }
        }
    }

    /// Ends the search: the found rows, best first.
    #[inline(always)]
    fn close(&mut self) -> Vec<Scored> {
        self.candidates.clear();
        let mut found: Vec<Scored> = self.results.drain().map(|r| r.0).collect();
        found.sort_unstable_by(|a, b| b.cmp(a));
        found
    }
}

/// Cache lines of a row prefetched as soon as it is found unvisited (the rest follow
/// [`PREFETCH_AHEAD`] rows before it is scored).
const HEAD_LINES: usize = 2;

/// Hints the CPU to start loading the first `lines` cache lines of `v` (at most all of it).
#[inline(always)]
fn prefetch_lines<T>(v: &[T], lines: usize) {
    let bytes = std::mem::size_of_val(v).min(lines * 64);
    prefetch_bytes(v.as_ptr().cast::<u8>(), 0, bytes);
}

/// Hints the CPU to load the cache lines of `v` after the first [`HEAD_LINES`].
#[inline(always)]
fn prefetch_rest(v: &[u16]) {
    prefetch_bytes(
        v.as_ptr().cast::<u8>(),
        HEAD_LINES * 64,
        std::mem::size_of_val(v),
    );
}

/// A row and its score packed in one integer that orders like the score (`total_cmp`), then
/// the lower row first (as the greater): the heaps compare plain integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Scored(u64);

impl Scored {
    fn new(score: f32, row: u32) -> Self {
        let bits = score.to_bits();
        let ordered = if bits >> 31 == 1 {
            !bits
        } else {
            bits | 1 << 31
        };
        Self(u64::from(ordered) << 32 | u64::from(u32::MAX - row))
    }

    /// The score's position in the order (comparing these compares the scores).
    fn score(self) -> u32 {
        (self.0 >> 32) as u32
    }

    fn row(self) -> u32 {
        u32::MAX - self.0 as u32
    }

    /// The score itself (the inverse of the packing in [`Scored::new`]).
    fn value(self) -> f32 {
        let ordered = self.score();
        f32::from_bits(if ordered >> 31 == 1 {
            ordered & !(1 << 31)
        } else {
            !ordered
        })
    }
}

/// Per-thread search state, reused across queries.
#[derive(Default)]
struct Scratch {
    visited: Visited,
    candidates: BinaryHeap<Scored>,
    results: BinaryHeap<Reverse<Scored>>,
    fresh: Vec<u32>,
}

/// The rows seen in one search: one bit per row (12.5 KiB for 100,000 rows, so the test stays
/// in the L1 cache, where an array of stamps would not), cleared word by word from the list of
/// the rows set when they are few, else all at once.
#[derive(Default)]
struct Visited {
    words: Vec<u64>,
    set: Vec<u32>,
}

impl Visited {
    /// Clears the rows of the last search and makes room for `rows` rows.
    fn begin(&mut self, rows: usize) {
        if self.set.len() < self.words.len() / 8 {
            for &row in &self.set {
                self.words[row as usize / 64] = 0;
            }
        } else {
            self.words.fill(0);
        }
        self.set.clear();
        let words = rows.div_ceil(64);
        if self.words.len() < words {
            self.words.resize(words, 0);
        }
    }

    /// Marks `row` seen; true when it was not seen before in this search.
    #[inline(always)]
    fn insert(&mut self, row: u32) -> bool {
        let word = &mut self.words[row as usize / 64];
        let bit = 1u64 << (row % 64);
        if *word & bit != 0 {
            return false;
        }
        *word |= bit;
        self.set.push(row);
        true
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// A cursor over a [`GRAPH_FILE`]'s bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or("truncated")?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u64(&mut self) -> std::result::Result<u64, String> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes([
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
        ]))
    }

    fn count(&mut self, limit: usize) -> std::result::Result<usize, String> {
        let n = self.u64()?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= limit)
            .ok_or_else(|| format!("count {n} out of range"))
    }

    fn u32s(&mut self, n: usize) -> std::result::Result<Vec<u32>, String> {
        let bytes = self.take(n.checked_mul(4).ok_or("overflow")?)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// The neighbour lists of `nodes` nodes, every link below `rows`.
    fn adjacency(&mut self, nodes: usize, rows: usize) -> std::result::Result<Adjacency, String> {
        let links_len = self.count(self.bytes.len() / 4)?;
        let offsets = (0..=nodes)
            .map(|_| self.u64())
            .collect::<std::result::Result<Vec<u64>, String>>()?;
        let ordered = offsets.first() == Some(&0)
            && offsets.last() == Some(&(links_len as u64))
            && offsets.windows(2).all(|w| w[0] <= w[1]);
        if !ordered {
            return Err("bad offsets".into());
        }
        let links = self.u32s(links_len)?;
        if links.iter().any(|&l| l as usize >= rows) {
            return Err("a link outside the rows".into());
        }
        Ok(Adjacency { offsets, links })
    }
}

/// The most bytes a [`GRAPH_FILE`] of `rows` rows built with `m` can hold (what [`save`]
/// writes with every list full: `2 m` links a node on layer 0, `m` on each of at most
/// `MAX_LAYERS - 1` upper layers holding every row), the bound its read is held to.
///
/// [`save`]: HnswGraph::save
fn max_graph_bytes(rows: usize, m: usize) -> u64 {
    let (rows, m) = (rows as u64, m as u64);
    let offsets = rows.saturating_add(1).saturating_mul(8);
    let links = |per_node: u64| rows.saturating_mul(per_node).saturating_mul(4);
    let base = 8u64
        .saturating_add(offsets)
        .saturating_add(links(m.saturating_mul(2)));
    let upper = 8u64
        .saturating_add(rows.saturating_mul(4))
        .saturating_add(8)
        .saturating_add(offsets)
        .saturating_add(links(m));
    (MAGIC.len() as u64 + 3 * 8 + 4)
        .saturating_add(base)
        .saturating_add(upper.saturating_mul(MAX_LAYERS as u64 - 1))
}

/// Reads a [`GRAPH_FILE`] for a matrix of `rows` rows: (entry, layer 0, upper layers).
fn parse(
    bytes: &[u8],
    rows: usize,
) -> std::result::Result<(u32, Adjacency, Vec<UpperLayer>), String> {
    let mut r = Reader { bytes, at: 0 };
    if r.take(8)? != MAGIC {
        return Err("not a freshstack HNSW graph of this version".into());
    }
    let found_rows = r.u64()?;
    if found_rows != rows as u64 {
        return Err(format!("{found_rows} rows, the vectors have {rows}"));
    }
    let entry = r.u64()?;
    let layers = r.u64()?;
    if (rows > 0 && entry >= rows as u64) || layers >= MAX_LAYERS as u64 {
        return Err(format!("entry {entry}, {layers} upper layers"));
    }
    // Nothing can have more nodes than the file has bytes.
    if rows > bytes.len() {
        return Err("truncated".into());
    }
    let base = r.adjacency(rows, rows)?;
    let mut upper = Vec::new();
    for _ in 0..layers {
        let nodes = r.count(rows)?;
        let layer_rows = r.u32s(nodes)?;
        let sorted = layer_rows.windows(2).all(|w| w[0] < w[1])
            && layer_rows.last().is_none_or(|&x| (x as usize) < rows);
        if !sorted {
            return Err("bad layer rows".into());
        }
        let adjacency = r.adjacency(nodes, rows)?;
        upper.push(UpperLayer {
            rows: layer_rows,
            adjacency,
        });
    }
    if r.at != bytes.len() {
        return Err("trailing bytes".into());
    }
    Ok((entry as u32, base, upper))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::{VectorDtype, write_npy};
    use crate::kernels::dot::dot;
    use crate::kernels::dot::tests::unit_rows;
    use crate::progress::NoProgress;

    fn matrix(dir: &Path, rows: &[Vec<f32>]) -> VectorMatrix {
        let path = dir.join("v.npy");
        write_npy(
            &path,
            rows.len(),
            rows[0].len(),
            VectorDtype::F32,
            |i, out| out.copy_from_slice(&rows[i]),
        )
        .unwrap();
        VectorMatrix::open(&path).unwrap()
    }

    #[test]
    fn build_is_reproducible_and_saves_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let rows = unit_rows(600, 16, 3);
        let m = matrix(dir.path(), &rows);
        let settings = HnswSettings {
            m: 8,
            ef_construction: 64,
        };
        let a = HnswGraph::build(&m, &settings, &NoProgress).unwrap();
        let b = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap()
            .install(|| HnswGraph::build(&m, &settings, &NoProgress).unwrap());
        assert_eq!(a.base, b.base);
        assert_eq!(a.upper, b.upper);
        assert_eq!(a.entry, b.entry);
        assert!(!a.upper.is_empty());
        let key = cache_key("c", "m", 100, &settings);
        a.save(&dir.path().join("g"), &key).unwrap();
        let c = HnswGraph::load(&dir.path().join("g"), &key, &m, &settings)
            .unwrap()
            .unwrap();
        assert_eq!(a.base, c.base);
        assert_eq!(a.upper, c.upper);
        assert_eq!(a.entry, c.entry);
        assert!(
            HnswGraph::load(
                &dir.path().join("g"),
                &cache_key("c", "m", 101, &settings),
                &m,
                &settings
            )
            .unwrap()
            .is_none()
        );
        // A damaged file is not an error: the caller rebuilds.
        let file = dir.path().join("g").join(GRAPH_FILE);
        let bytes = std::fs::read(&file).unwrap();
        std::fs::write(&file, &bytes[..bytes.len() - 3]).unwrap();
        assert!(
            HnswGraph::load(&dir.path().join("g"), &key, &m, &settings)
                .unwrap()
                .is_none()
        );
    }

    /// Issue 34, item 15: `hnsw/key` and `graph.bin` were read with unbounded `fs::read`: a
    /// cache linked to `/dev/zero` grew a buffer until the allocator aborted, and a FIFO
    /// blocked the search forever. Each is now refused unread (a regular file within the size
    /// a graph of these rows can have), and the caller rebuilds.
    #[test]
    fn hnsw_cache_linked_to_dev_zero_or_oversized_is_rebuilt_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let rows = unit_rows(300, 16, 4);
        let m = matrix(dir.path(), &rows);
        let settings = HnswSettings {
            m: 8,
            ef_construction: 32,
        };
        let graph = HnswGraph::build(&m, &settings, &NoProgress).unwrap();
        let key = cache_key("c", "m", rows.len(), &settings);
        let g = dir.path().join("g");
        graph.save(&g, &key).unwrap();
        let size = std::fs::metadata(g.join(GRAPH_FILE)).unwrap().len();
        let bound = max_graph_bytes(rows.len(), settings.m);
        assert!(size <= bound && bound < 64 * size, "{size} of {bound}");
        let load = || HnswGraph::load(&g, &key, &m, &settings).unwrap();
        assert!(load().is_some());
        let graph_bytes = std::fs::read(g.join(GRAPH_FILE)).unwrap();
        let key_bytes = std::fs::read(g.join(KEY_FILE)).unwrap();
        let restore = || {
            for file in [GRAPH_FILE, KEY_FILE] {
                let _ = std::fs::remove_file(g.join(file));
            }
            std::fs::write(g.join(GRAPH_FILE), &graph_bytes).unwrap();
            std::fs::write(g.join(KEY_FILE), &key_bytes).unwrap();
        };
        // Grown past any graph of these rows (sparse: nothing is written, nothing is read).
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(g.join(GRAPH_FILE))
            .unwrap();
        file.set_len(bound + 1).unwrap();
        assert!(load().is_none());
        restore();
        // A key file far longer than a key.
        let key_file = std::fs::OpenOptions::new()
            .write(true)
            .open(g.join(KEY_FILE))
            .unwrap();
        key_file
            .set_len(crate::dataset::bounded::MAX_REF_BYTES + 1)
            .unwrap();
        assert!(load().is_none());
        restore();
        assert!(load().is_some());
        #[cfg(unix)]
        {
            let zero = Path::new("/dev/zero");
            for file in [GRAPH_FILE, KEY_FILE] {
                if zero.exists() {
                    std::fs::remove_file(g.join(file)).unwrap();
                    std::os::unix::fs::symlink(zero, g.join(file)).unwrap();
                    assert!(load().is_none(), "{file} -> /dev/zero");
                    restore();
                }
                std::fs::remove_file(g.join(file)).unwrap();
                let made = std::process::Command::new("mkfifo")
                    .arg(g.join(file))
                    .status();
                if made.is_ok_and(|s| s.success()) {
                    assert!(load().is_none(), "{file} is a FIFO");
                }
                restore();
            }
        }
        assert!(load().is_some());
    }

    #[test]
    fn search_finds_near_neighbours() {
        let dir = tempfile::tempdir().unwrap();
        let rows = unit_rows(2000, 24, 5);
        let m = matrix(dir.path(), &rows);
        let g = HnswGraph::build(&m, &HnswSettings::default(), &NoProgress).unwrap();
        let mut found = 0;
        for q in rows.iter().step_by(40) {
            let mut exact: Vec<(f32, u32)> = rows
                .iter()
                .enumerate()
                .map(|(i, r)| (dot(q, r), i as u32))
                .collect();
            exact.sort_by(|a, b| b.0.total_cmp(&a.0));
            let truth: Vec<u32> = exact[..10].iter().map(|e| e.1).collect();
            let got = g.search(q, 10, 64);
            assert_eq!(got.len(), 10);
            assert_eq!(got, g.search(q, 10, 64));
            found += got.iter().filter(|r| truth.contains(r)).count();
        }
        assert!(found >= 490, "{found} of 500");
        assert!(g.search(&rows[0], 0, 64).is_empty());
        assert!(g.search(&rows[0][..3], 10, 64).is_empty());
    }

    #[test]
    fn visited_rows_are_cleared_between_searches() {
        let mut visited = Visited::default();
        for rows in [1000, 200, 5000] {
            // A few rows (cleared one word at a time next search), then every row (cleared at
            // once): each search starts with nothing seen.
            for stride in [97, 1] {
                visited.begin(rows);
                let marked: Vec<u32> = (0..rows as u32).step_by(stride).collect();
                assert!(marked.iter().all(|&r| visited.insert(r)), "{rows} {stride}");
                assert!(
                    marked.iter().all(|&r| !visited.insert(r)),
                    "{rows} {stride}"
                );
            }
        }
    }

    /// Every vector three times in a row (rows `3i..3i + 3`), as the chunks of several versions
    /// of one crate are in a real corpus: the first of each is in the graph and reachable, the
    /// copies are not in it (no lists, no links to them), and a search for the vector returns
    /// all three, first row first.
    #[test]
    fn copies_stay_out_of_the_graph_and_are_all_found() {
        let dir = tempfile::tempdir().unwrap();
        let distinct = unit_rows(2000, 16, 8);
        let rows: Vec<Vec<f32>> = distinct
            .iter()
            .flat_map(|r| std::iter::repeat_n(r.clone(), 3))
            .collect();
        let m = matrix(dir.path(), &rows);
        let g = HnswGraph::build(&m, &HnswSettings::default(), &NoProgress).unwrap();
        assert_eq!(g.copies.len(), 2 * distinct.len());
        let mut linked = vec![false; rows.len()];
        linked[g.entry as usize] = true;
        for &n in &g.base.links {
            linked[n as usize] = true;
        }
        for (row, &is_linked) in linked.iter().enumerate() {
            assert_eq!(is_linked, row % 3 == 0, "{row}");
            assert_eq!(g.base.of(row).is_empty(), row % 3 != 0, "{row}");
        }
        for (i, q) in distinct.iter().enumerate() {
            let first = 3 * i as u32;
            assert_eq!(g.search(q, 3, 64), [first, first + 1, first + 2], "{i}");
        }
    }
}
