//! Exact (flat) inner-product search on a CUDA GPU (feature `cuda`), with results identical to
//! [`flat_search`](crate::index::flat_search).
//!
//! The kernels (`kernels/topk.cu`, compiled at run time by NVRTC) score a batch of queries
//! against the f16 matrix, uploaded once, with f32 fused multiply-adds, then select per query
//! every row whose GPU score is at least `t - margin`, `t` being the k-th largest GPU score. The
//! host rescores those candidates with the CPU's own [`dot`] and ranks them with the same
//! [`TopK`], so the result is the CPU's by construction (the scores too, bit for bit):
//!
//! * a GPU score `G` and the CPU score `C` of the same row differ by at most
//!   `E = 2 * gamma(n) * |row| * |query| + tiny`, with `gamma(n) = n u / (1 - n u)`, `u = 2^-24`,
//!   `n = dim + 8` (the classic bound `gamma(n) * sum |a_i q_i|` on any summation order, for
//!   each side; Cauchy-Schwarz bounds the sum; `tiny` covers underflow);
//! * with `margin >= 2E`: a row left out has `G < t - 2E`, while k rows have `G >= t`, so their
//!   CPU scores are `>= t - E > G + E >= C`: k rows beat it strictly, and it is not in the CPU's
//!   top k either.
//!
//! A query whose candidates overflow the buffer, whose margin is not finite, or a matrix with a
//! non-finite value, is searched on the CPU instead (same result, slower).

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DriverError, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
use half::f16;

use crate::dataset::{VectorDtype, VectorMatrix};
use crate::error::{Error, Result, Setting};
use crate::index::docids::{DocIds, TopK};
use crate::index::flat::search as flat_search;
use crate::kernels::dot::dot;

/// The CUDA C source of the kernels (`kernels/topk.cu`).
pub const KERNEL_SOURCE: &str = include_str!("../../kernels/topk.cu");

/// Must match `FS_QB` and `FS_WARPS * FS_RPW` in the kernel source.
const QUERIES_PER_BLOCK: usize = 16;
const ROWS_PER_BLOCK: usize = 32;
const SCORE_THREADS: u32 = 256;
const SELECT_THREADS: u32 = 1024;
/// Scores of one batch (`queries x rows` f32) stay under this many bytes.
const SCORE_BUDGET_BYTES: usize = 1 << 30;
const MAX_BATCH: usize = 1024;
/// Rows uploaded per host-to-device copy.
const UPLOAD_ROWS_BYTES: usize = 64 << 20;

/// Compiles [`KERNEL_SOURCE`] to PTX with NVRTC for `arch` (e.g. `compute_90`; `None`: NVRTC's
/// default). Needs libnvrtc, not a GPU.
pub fn compile_kernels(arch: Option<&'static str>) -> Result<String> {
    let options = CompileOptions {
        arch,
        // No fast math: the error bound assumes IEEE f32 arithmetic.
        ftz: Some(false),
        name: Some("topk.cu".into()),
        ..CompileOptions::default()
    };
    compile_ptx_with_opts(KERNEL_SOURCE, options)
        .map(|ptx| ptx.to_src())
        .map_err(|e| gpu_error("NVRTC compile of kernels/topk.cu", format!("{e:?}")))
}

fn gpu_error(what: &str, message: impl Into<String>) -> Error {
    Error::Resource {
        what: format!("cuda: {what}"),
        message: message.into(),
    }
}

fn driver(what: &'static str) -> impl Fn(DriverError) -> Error {
    move |e| gpu_error(what, e.to_string())
}

/// An f16 matrix resident on one GPU, searched exactly in batches.
pub struct GpuFlat {
    stream: Arc<CudaStream>,
    scores_fn: CudaFunction,
    select_fn: CudaFunction,
    docs: CudaSlice<u16>,
    rows: usize,
    dim: usize,
    /// Largest row L2 norm (f64, rounded up a little); `None` when a value is not finite.
    max_norm: Option<f64>,
    device: String,
}

impl std::fmt::Debug for GpuFlat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuFlat")
            .field("device", &self.device)
            .field("rows", &self.rows)
            .field("dim", &self.dim)
            .finish()
    }
}

impl GpuFlat {
    /// Opens CUDA device `ordinal`, compiles the kernels for it and uploads `matrix` (f16 only:
    /// an f32 matrix is an error, search it on the CPU).
    pub fn new(matrix: &VectorMatrix, ordinal: usize) -> Result<Self> {
        if matrix.dtype() != VectorDtype::F16 {
            return Err(Error::invalid(
                Setting::GpuExactSearch,
                format!(
                    "{}: {} vectors; the GPU search takes f16 (store the vectors as f16)",
                    matrix.path().display(),
                    matrix.dtype().name()
                ),
            ));
        }
        let ctx = CudaContext::new(ordinal).map_err(driver("open device"))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(driver("compute capability"))?;
        let device = format!(
            "cuda:{ordinal} ({}, sm_{major}{minor})",
            ctx.name().unwrap_or_default()
        );
        let arch = compute_arch(major, minor);
        let ptx = compile_kernels(arch)?;
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(driver("load kernels"))?;
        let scores_fn = module
            .load_function("fs_scores")
            .map_err(driver("fs_scores"))?;
        let select_fn = module
            .load_function("fs_select")
            .map_err(driver("fs_select"))?;
        let stream = ctx.default_stream();
        let (rows, dim) = (matrix.rows(), matrix.dim());
        let total = rows.checked_mul(dim).ok_or_else(|| {
            Error::invalid(Setting::GpuExactSearch, format!("{rows} x {dim} overflows"))
        })?;
        // SAFETY: every element is written by the uploads below before any kernel reads it.
        let mut docs = unsafe { stream.alloc::<u16>(total.max(1)) }.map_err(driver("alloc"))?;
        let chunk_rows = (UPLOAD_ROWS_BYTES / (2 * dim)).max(1);
        let mut max_sq = 0f64;
        let mut finite = true;
        let mut host: Vec<u16> = Vec::with_capacity(chunk_rows.min(rows.max(1)) * dim);
        let mut start = 0;
        while start < rows {
            let end = (start + chunk_rows).min(rows);
            host.clear();
            for row in start..end {
                let bytes = matrix.row_bytes(row);
                let mut sq = 0f64;
                for c in bytes.chunks_exact(2) {
                    let bits = u16::from_le_bytes([c[0], c[1]]);
                    let v = f64::from(f16::from_bits(bits).to_f32());
                    finite &= v.is_finite();
                    sq += v * v;
                    host.push(bits);
                }
                max_sq = max_sq.max(sq);
            }
            let mut view = docs.slice_mut(start * dim..end * dim);
            stream
                .memcpy_htod(&host, &mut view)
                .map_err(driver("upload"))?;
            start = end;
        }
        stream.synchronize().map_err(driver("upload"))?;
        // The f64 sum of squares and sqrt are each off by a few ulps; 1e-9 covers them.
        let max_norm = finite.then(|| max_sq.sqrt() * (1.0 + 1e-9));
        if !finite {
            tracing::warn!(
                "{}: non-finite vector values; GPU exact search falls back to the CPU",
                matrix.path().display()
            );
        }
        Ok(Self {
            stream,
            scores_fn,
            select_fn,
            docs,
            rows,
            dim,
            max_norm,
            device,
        })
    }

    /// The device, e.g. `cuda:0 (NVIDIA H200, sm_90)`.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Queries per kernel launch for this matrix.
    pub fn batch_size(&self) -> usize {
        (SCORE_BUDGET_BYTES / (4 * self.rows.max(1))).clamp(1, MAX_BATCH)
    }

    /// The top `k` rows of `matrix` (the one uploaded) for each query, best first, ties by id:
    /// equal to [`flat_search`] per query. Every query must have `dim` finite values.
    pub fn search(
        &self,
        matrix: &VectorMatrix,
        ids: &DocIds,
        queries: &[&[f32]],
        k: usize,
    ) -> Result<Vec<Vec<(u32, f32)>>> {
        if matrix.rows() != self.rows || matrix.dim() != self.dim {
            return Err(Error::invalid(
                Setting::GpuExactSearch,
                format!(
                    "matrix {} x {} is not the uploaded {} x {}",
                    matrix.rows(),
                    matrix.dim(),
                    self.rows,
                    self.dim
                ),
            ));
        }
        if let Some(q) = queries.iter().find(|q| q.len() != self.dim) {
            return Err(Error::invalid(
                Setting::QueryVector,
                format!(
                    "dimension {} for a matrix of dimension {}",
                    q.len(),
                    self.dim
                ),
            ));
        }
        let k = k.min(self.rows);
        if k == 0 {
            return Ok(vec![Vec::new(); queries.len()]);
        }
        let mut out = Vec::with_capacity(queries.len());
        for batch in queries.chunks(self.batch_size()) {
            out.extend(self.search_batch(matrix, ids, batch, k)?);
        }
        Ok(out)
    }

    /// The margin `2E` of the module docs for a query, as an f32 rounded up; `None` when it is
    /// not finite (the query is then searched on the CPU).
    fn margin(&self, query: &[f32]) -> Option<f32> {
        let max_norm = self.max_norm?;
        let q_norm = query
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt()
            * (1.0 + 1e-9);
        let u = 2f64.powi(-24);
        let n = (self.dim + 8) as f64;
        if n * u >= 0.5 {
            return None;
        }
        let gamma = n * u / (1.0 - n * u);
        let tiny = 2.0 * n * 2f64.powi(-126);
        let e = 2.0 * gamma * max_norm * q_norm + tiny;
        let margin = 2.0 * e * 1.0001;
        if !margin.is_finite() || max_norm * q_norm > 1e37 {
            return None;
        }
        let mut m = margin as f32;
        if f64::from(m) < margin {
            m = f32::from_bits(m.to_bits() + 1);
        }
        m.is_finite().then_some(m)
    }

    fn search_batch(
        &self,
        matrix: &VectorMatrix,
        ids: &DocIds,
        queries: &[&[f32]],
        k: usize,
    ) -> Result<Vec<Vec<(u32, f32)>>> {
        let nq = queries.len();
        let margins: Vec<Option<f32>> = queries.iter().map(|q| self.margin(q)).collect();
        // A query the GPU cannot bound gets a margin of 0 here and is redone on the CPU below.
        let margins_f32: Vec<f32> = margins.iter().map(|m| m.unwrap_or(0.0)).collect();
        let cap = self.rows.min((2 * k).max(k + 1024));
        let mut flat_queries = Vec::with_capacity(nq * self.dim);
        for q in queries {
            flat_queries.extend_from_slice(q);
        }
        let s = &self.stream;
        let queries_dev = s.clone_htod(&flat_queries).map_err(driver("upload"))?;
        let margins_dev = s.clone_htod(&margins_f32).map_err(driver("upload"))?;
        // SAFETY: fs_scores writes every (query, row) score before fs_select reads it.
        let mut scores = unsafe { s.alloc::<f32>(nq * self.rows) }.map_err(driver("alloc"))?;
        let mut counts = s.alloc_zeros::<u32>(nq).map_err(driver("alloc"))?;
        let mut cands = s.alloc_zeros::<u32>(nq * cap).map_err(driver("alloc"))?;
        let mut kth = s.alloc_zeros::<f32>(nq).map_err(driver("alloc"))?;
        let (rows_u32, dim_u32, nq_u32) = (
            u32::try_from(self.rows).map_err(|_| Error::invalid(Setting::Rows, "over 2^32"))?,
            u32::try_from(self.dim).map_err(|_| Error::invalid(Setting::Dim, "over 2^32"))?,
            nq as u32,
        );
        let (k_u32, cap_u32) = (k as u32, cap as u32);
        let tiles = self.rows.div_ceil(ROWS_PER_BLOCK).clamp(1, 65535) as u32;
        let score_cfg = LaunchConfig {
            grid_dim: (nq.div_ceil(QUERIES_PER_BLOCK) as u32, tiles, 1),
            block_dim: (SCORE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let select_cfg = LaunchConfig {
            grid_dim: (nq_u32, 1, 1),
            block_dim: (SELECT_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the argument lists match the kernels' signatures in kernels/topk.cu; every
        // buffer has the size those kernels index (docs rows*dim, queries nq*dim, scores
        // nq*rows, counts/kth nq, cands nq*cap).
        unsafe {
            s.launch_builder(&self.scores_fn)
                .arg(&self.docs)
                .arg(&queries_dev)
                .arg(&mut scores)
                .arg(&rows_u32)
                .arg(&dim_u32)
                .arg(&nq_u32)
                .launch(score_cfg)
                .map_err(driver("fs_scores"))?;
            s.launch_builder(&self.select_fn)
                .arg(&scores)
                .arg(&margins_dev)
                .arg(&rows_u32)
                .arg(&nq_u32)
                .arg(&k_u32)
                .arg(&cap_u32)
                .arg(&mut counts)
                .arg(&mut cands)
                .arg(&mut kth)
                .launch(select_cfg)
                .map_err(driver("fs_select"))?;
        }
        // A fault in either kernel surfaces here.
        s.synchronize().map_err(driver("kernels"))?;
        let counts = s.clone_dtoh(&counts).map_err(driver("download"))?;
        let cands = s.clone_dtoh(&cands).map_err(driver("download"))?;
        let mut buf = vec![0f32; self.dim];
        let mut out = Vec::with_capacity(nq);
        for (q, query) in queries.iter().enumerate() {
            let count = counts[q] as usize;
            if margins[q].is_none() || count > cap || count < k {
                if count > cap {
                    tracing::debug!("GPU candidates {count} > {cap}; query {q} on the CPU");
                }
                out.push(flat_search(matrix, ids, query, k));
                continue;
            }
            let mut top = TopK::new(k, ids);
            for &row in &cands[q * cap..q * cap + count] {
                matrix.row_into(row as usize, &mut buf);
                top.push(row, dot(&buf, query));
            }
            out.push(top.into_sorted());
        }
        Ok(out)
    }
}

/// NVRTC's virtual architecture for a device, capped at what CUDA 13's NVRTC knows.
fn compute_arch(major: i32, minor: i32) -> Option<&'static str> {
    Some(match (major, minor) {
        (7, 5) => "compute_75",
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 7) => "compute_87",
        (8, 9) => "compute_89",
        (9, _) => "compute_90",
        (10, _) => "compute_100",
        (12, _) => "compute_120",
        (m, _) if m > 12 => "compute_120",
        _ => return None,
    })
}
