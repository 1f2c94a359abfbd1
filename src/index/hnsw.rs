//! Approximate nearest-neighbour search with an HNSW graph (hnsw_rs) over unit vectors.
//!
//! The graph is a *cache*: it is rebuilt from the vectors whenever it is missing or its key
//! (corpus hash, model, parameters: see [`cache_key`]) differs, because hnsw_rs's dump format has
//! changed between versions and writes native-endian integers. Distances: hnsw_rs's `DistDot`
//! asserts `1 - dot >= 0`, which unit vectors break when their self dot product rounds above 1;
//! [`ClampedDot`] clamps at 0 instead. hnsw_rs reports errors with anyhow: they are converted to
//! [`Error::Index`] here, at the boundary.

use std::path::Path;

use hnsw_rs::api::AnnT;
use hnsw_rs::hnsw::Hnsw;
use hnsw_rs::hnswio::HnswIo;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::index::flat::dot;
use crate::index::manifest::HnswSettings;
use crate::index::vectors::VectorMatrix;
use crate::progress::Progress;

/// Layers of the graph (hnsw_rs caps at 16).
const MAX_LAYERS: usize = 16;
/// The dump's base name inside the cache directory.
const BASENAME: &str = "graph";
/// File holding the key of the cached graph.
const KEY_FILE: &str = "key";

/// `1 - dot(a, b)`, clamped at 0 so rounding on unit vectors never makes it negative.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClampedDot;

impl hnsw_rs::anndists::dist::Distance<f32> for ClampedDot {
    fn eval(&self, a: &[f32], b: &[f32]) -> f32 {
        (1.0 - dot(a, b)).max(0.0)
    }
}

/// An HNSW graph over the rows of a matrix (row index = data id).
pub struct HnswGraph {
    hnsw: Hnsw<'static, f32, ClampedDot>,
}

/// The cache key of a graph: changes whenever the vectors or parameters do.
pub fn cache_key(corpus_hash: &str, model: &str, rows: usize, settings: &HnswSettings) -> String {
    format!(
        "v1 corpus={corpus_hash} model={model} rows={rows} m={} ef_construction={}",
        settings.m, settings.ef_construction
    )
}

fn hnsw_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::index(path, format!("hnsw: {e}"))
}

impl HnswGraph {
    /// Builds the graph over every row of `matrix` (in parallel: the graph's shape depends on
    /// the thread interleaving, its search results barely).
    pub fn build(
        matrix: &VectorMatrix,
        settings: &HnswSettings,
        progress: &dyn Progress,
    ) -> Result<Self> {
        if settings.m < 2 || settings.ef_construction < 1 {
            return Err(Error::invalid(
                "hnsw",
                format!(
                    "m = {} and ef_construction = {}: need m >= 2, ef_construction >= 1",
                    settings.m, settings.ef_construction
                ),
            ));
        }
        let rows = matrix.rows();
        let hnsw = Hnsw::new(
            settings.m,
            rows.max(1),
            MAX_LAYERS,
            settings.ef_construction,
            ClampedDot,
        );
        progress.begin("hnsw", Some(rows as u64));
        const BATCH: usize = 8192;
        for start in (0..rows).step_by(BATCH) {
            let end = (start + BATCH).min(rows);
            let data: Vec<Vec<f32>> = (start..end)
                .into_par_iter()
                .map(|r| matrix.row(r))
                .collect();
            let refs: Vec<(&[f32], usize)> = data
                .iter()
                .enumerate()
                .map(|(i, v)| (v.as_slice(), start + i))
                .collect();
            hnsw.parallel_insert_slice(&refs);
            progress.advance((end - start) as u64);
        }
        progress.finish();
        Ok(Self { hnsw })
    }

    /// Writes the graph into `dir` (created; must not hold an older dump) with its `key`.
    pub fn save(&self, dir: &Path, key: &str) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let written = self
            .hnsw
            .file_dump(dir, BASENAME)
            .map_err(|e| hnsw_error(dir, e))?;
        if written != BASENAME {
            return Err(hnsw_error(dir, "an older dump is in the way"));
        }
        std::fs::write(dir.join(KEY_FILE), key).map_err(|e| Error::io(dir.join(KEY_FILE), e))
    }

    /// Loads the graph from `dir` when its key equals `key`; `Ok(None)` when there is no
    /// usable cache (missing, stale, or unreadable: the caller rebuilds).
    pub fn load(dir: &Path, key: &str) -> Result<Option<Self>> {
        match std::fs::read_to_string(dir.join(KEY_FILE)) {
            Ok(found) if found == key => {}
            _ => return Ok(None),
        }
        // hnsw_rs ties the graph's lifetime to its loader; the loader is small and lives as
        // long as the graph anyway, so it is leaked (once per open index and model).
        let io: &'static mut HnswIo = Box::leak(Box::new(HnswIo::new(dir, BASENAME)));
        match io.load_hnsw::<f32, ClampedDot>() {
            Ok(hnsw) => Ok(Some(Self { hnsw })),
            Err(e) => {
                tracing::warn!(
                    "{}: stale or unreadable HNSW cache ({e}); rebuilding",
                    dir.display()
                );
                Ok(None)
            }
        }
    }

    /// Number of points in the graph.
    pub fn len(&self) -> usize {
        self.hnsw.get_nb_point()
    }

    /// True when the graph is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The approximate `k` nearest rows to `query` with search width `ef` (>= k), as rows;
    /// the caller rescores them exactly.
    pub fn search(&self, query: &[f32], k: usize, ef: usize) -> Vec<u32> {
        if k == 0 || self.is_empty() {
            return Vec::new();
        }
        self.hnsw
            .search(query, k, ef.max(k))
            .into_iter()
            .map(|n| n.d_id as u32)
            .collect()
    }
}
