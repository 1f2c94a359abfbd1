//! The CPU f32 fast path of a BERT layer. Profiling all-MiniLM-L6-v2 on two cores showed half
//! the time outside the matmuls: candle adds each bias and residual as its own parallel pass
//! (threads spinning at a barrier on a busy machine), allocates and page-faults a fresh
//! `[batch, heads, seq, seq]` buffer for the logits and again for the probabilities, copies Q, K
//! and V into head-major layout, and runs every (row, head) matmul as a separate parallel gemm
//! too small to split well.
//!
//! Here a layer is five steps over plain `f32` slices:
//! 1. one gemm for Q, K and V together (`[3h, h]` weight), bias folded in by starting the
//!    destination from it (gemm accumulates into it);
//! 2. attention per (batch row, head) in parallel: each task reads its Q/K/V columns in place
//!    through gemm strides, computes only the `len x len` real block (padding is skipped, not
//!    masked), softmaxes it in a task-local buffer and writes its context columns;
//! 3. the output projection with bias and residual folded into the destination;
//! 4. the up projection with bias, GELU applied in place;
//! 5. the down projection with bias and residual folded in.
//!
//! nomic-bert layers take the same path with two differences: Q and K are rotated (RoPE,
//! rotate-half) in place right after step 1, and step 4 projects gate and up together
//! (`[2i, h]`) and keeps `silu(gate) * up`.
//!
//! The projections (steps 1, 3, 4 and 5) run on AMX tiles where [`amx::available`] (three bf16
//! products per f32 one, f32-grade; `kernels::amx`), on `gemm`'s f32 kernel elsewhere.
//! LayerNorms stay candle's (already one fused pass). Each task and each gemm is computed the
//! same way whatever the thread count (gemm splits rows and columns, never the inner sum), so
//! outputs do not depend on it. Rows past a batch row's length are left at zero: nothing reads
//! them (keys past the length are never attended to, and pooling masks them).

use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Device, Layout, Shape};
use candle_core::{Module, Tensor};
use candle_nn::LayerNorm;
use gemm::Parallelism;
use rayon::prelude::*;

use super::dense::{Dense, DenseSource, f32_slice};
use super::ops::{GeluKind, gelu_in_place, softmax_row};

/// The feed-forward activation of a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedForward {
    /// `down(gelu(up(x)))` (BERT, MPNet).
    Gelu(GeluKind),
    /// `down(silu(gate(x)) * up(x))`, gate and up packed as one `[2i, h]` projection
    /// (nomic-bert).
    SwiGlu,
}

/// RoPE tables (rotate-half convention) for positions `0..len` of heads `head_dim` wide, as
/// `embed::models`' candle path computes them: `inv_freq` rounded to f32 from f64, each angle
/// one f32 product, its cosine and sine in f32.
pub struct RotaryTable {
    cos: Vec<f32>,
    sin: Vec<f32>,
    pub(super) half: usize,
    pub(super) len: usize,
}

impl RotaryTable {
    /// Tables of base `theta` for `len` positions.
    pub fn new(head_dim: usize, theta: f64, len: usize) -> Self {
        let half = head_dim / 2;
        let inv_freq: Vec<f32> = (0..half)
            .map(|i| (1.0 / theta.powf(2.0 * i as f64 / head_dim as f64)) as f32)
            .collect();
        let mut cos = Vec::with_capacity(len * half);
        let mut sin = Vec::with_capacity(len * half);
        for pos in 0..len {
            for &f in &inv_freq {
                let angle = pos as f32 * f;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        Self {
            cos,
            sin,
            half,
            len,
        }
    }

    /// Rotates the heads in `values` (`heads` of `2 half` values each) as position `pos`.
    pub(super) fn rotate(&self, values: &mut [f32], pos: usize) {
        let cos = &self.cos[pos * self.half..(pos + 1) * self.half];
        let sin = &self.sin[pos * self.half..(pos + 1) * self.half];
        for head in values.chunks_exact_mut(2 * self.half) {
            let (first, second) = head.split_at_mut(self.half);
            for (((a, b), c), s) in first.iter_mut().zip(second.iter_mut()).zip(cos).zip(sin) {
                let (x1, x2) = (*a, *b);
                *a = x1 * c - x2 * s;
                *b = x1 * s + x2 * c;
            }
        }
    }
}

/// One BERT layer's weights laid out for the fast path.
pub struct CpuBertLayer {
    qkv: Dense,
    attn_out: Dense,
    up: Dense,
    down: Dense,
    heads: usize,
    feed_forward: FeedForward,
}

impl CpuBertLayer {
    /// Packs a layer's linears `[query, key, value, attention output, up, down]` (Q, K and V
    /// stacked into one `[3h, h]` weight).
    pub fn new(
        linears: [DenseSource; 6],
        heads: usize,
        gelu: GeluKind,
    ) -> candle_core::Result<Self> {
        let [query, key, value, attn_out, up, down] = linears;
        let qkv = Dense::stacked(&[query, key, value])?;
        let h = qkv.in_features;
        if qkv.out_features != 3 * h || heads == 0 || !h.is_multiple_of(heads) {
            candle_core::bail!("query/key/value shapes do not match the hidden size");
        }
        Ok(Self {
            qkv,
            attn_out: Dense::from_source(&attn_out)?,
            up: Dense::from_source(&up)?,
            down: Dense::from_source(&down)?,
            heads,
            feed_forward: FeedForward::Gelu(gelu),
        })
    }

    /// Packs a nomic-bert layer: the fused `[3h, h]` Q|K|V projection, the attention output,
    /// and the SwiGLU `gate`, `up` and `down` projections (biases zero where absent).
    pub fn with_swiglu(
        qkv: DenseSource,
        attn_out: DenseSource,
        [gate, up, down]: [DenseSource; 3],
        heads: usize,
    ) -> candle_core::Result<Self> {
        let qkv = Dense::from_source(&qkv)?;
        if gate.dims()? != up.dims()? {
            candle_core::bail!("gate and up projections differ in shape");
        }
        let h = qkv.in_features;
        if qkv.out_features != 3 * h || heads == 0 || !h.is_multiple_of(heads) {
            candle_core::bail!("the Q|K|V projection does not match the hidden size");
        }
        Ok(Self {
            qkv,
            attn_out: Dense::from_source(&attn_out)?,
            up: Dense::stacked(&[gate, up])?,
            down: Dense::from_source(&down)?,
            heads,
            feed_forward: FeedForward::SwiGlu,
        })
    }

    /// Whether `x` can take this path (CPU, f32).
    pub fn accepts(x: &Tensor) -> bool {
        matches!(x.device(), Device::Cpu) && x.dtype() == DType::F32
    }

    /// The layer on right-padded `x` `[batch, seq, h]` whose row `i` has `lengths[i]` tokens.
    /// `relative_bias` (MPNet), `[heads, 2 seq - 1]`: head `h`'s logit bias for
    /// `key - query = d` at `h (2 seq - 1) + d + seq - 1`. `rotary` (nomic-bert): the RoPE
    /// tables Q and K are rotated with, covering at least `seq` positions.
    pub fn forward(
        &self,
        x: &Tensor,
        lengths: &[usize],
        relative_bias: Option<&[f32]>,
        rotary: Option<&RotaryTable>,
        [attn_norm, out_norm]: [&LayerNorm; 2],
    ) -> candle_core::Result<Tensor> {
        let x = x.contiguous()?;
        let (_, seq, h) = x.dims3()?;
        let mut project_qkv = Project::new(&self.qkv, None);
        if let Some(table) = rotary {
            if table.len < seq || table.half * 2 * self.heads != h {
                candle_core::bail!("rotary tables do not cover {seq} positions of this layer");
            }
            project_qkv.rotary = Some((table, seq, 2 * h));
        }
        let qkv = x.apply_op1_no_bwd(&project_qkv)?;
        let ctx = qkv.apply_op1_no_bwd(&Attention {
            heads: self.heads,
            lengths,
            relative_bias,
        })?;
        let attended = ctx.apply_op2_no_bwd(&x, &Project::new(&self.attn_out, None))?;
        let x = attn_norm.forward(&attended)?;
        let up = x.apply_op1_no_bwd(&Project::new(&self.up, Some(self.feed_forward)))?;
        let out = up.apply_op2_no_bwd(&x, &Project::new(&self.down, None))?;
        out_norm.forward(&out)
    }
}

/// `x W^T + bias` (+ a residual, as the third operand), then an optional activation, or RoPE
/// on the leading columns.
struct Project<'a> {
    dense: &'a Dense,
    activation: Option<FeedForward>,
    /// The tables, the sequence length (a row's position is its index modulo it) and how many
    /// leading columns of each row are rotated (Q and K).
    rotary: Option<(&'a RotaryTable, usize, usize)>,
}

impl<'a> Project<'a> {
    fn new(dense: &'a Dense, activation: Option<FeedForward>) -> Self {
        Self {
            dense,
            activation,
            rotary: None,
        }
    }

    fn run(
        &self,
        x: (&CpuStorage, &Layout),
        residual: Option<(&CpuStorage, &Layout)>,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, x_layout) = f32_slice(x.0, x.1, "input")?;
        let (n, k) = (self.dense.out_features, self.dense.in_features);
        let dims = x_layout.shape().dims();
        if dims.last() != Some(&k) {
            candle_core::bail!("projection: input {dims:?} does not fit a [{n}, {k}] weight");
        }
        let m = x.len() / k;
        let mut out_dims = dims.to_vec();
        if let Some(last) = out_dims.last_mut() {
            *last = n;
        }
        // The destination starts as bias (+ residual); the product accumulates into it.
        let residual = match residual {
            Some((storage, layout)) => {
                let (r, _) = f32_slice(storage, layout, "residual")?;
                if r.len() != m * n {
                    candle_core::bail!("projection: residual of {} for {m}x{n}", r.len());
                }
                Some(r)
            }
            None => None,
        };
        let mut dst = self.dense.forward(x, m, residual);
        if let Some((table, seq, rotated)) = self.rotary {
            dst.par_chunks_mut(n).enumerate().for_each(|(row, values)| {
                table.rotate(&mut values[..rotated], row % seq);
            });
        }
        match self.activation {
            Some(FeedForward::Gelu(gelu)) => {
                dst.par_chunks_mut(4096)
                    .for_each(|chunk| gelu_in_place(chunk, gelu));
            }
            Some(FeedForward::SwiGlu) => {
                let inner = n / 2;
                let mut gated = vec![0f32; m * inner];
                gated
                    .par_chunks_mut(inner)
                    .zip(dst.par_chunks(n))
                    .for_each(|(out, row)| silu_times(out, row.split_at(inner)));
                if let Some(last) = out_dims.last_mut() {
                    *last = inner;
                }
                return Ok((CpuStorage::F32(gated), Shape::from(out_dims)));
            }
            None => {}
        }
        Ok((CpuStorage::F32(dst), Shape::from(out_dims)))
    }
}

impl CustomOp1 for Project<'_> {
    fn name(&self) -> &'static str {
        "freshstack-project"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        self.run((s1, l1), None)
    }
}

impl CustomOp2 for Project<'_> {
    fn name(&self) -> &'static str {
        "freshstack-project-residual"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.run((s1, l1), Some((s2, l2)))
    }
}

/// Self-attention over a packed `[batch, seq, 3h]` Q|K|V tensor, giving the `[batch, seq, h]`
/// context.
struct Attention<'a> {
    heads: usize,
    lengths: &'a [usize],
    /// See [`CpuBertLayer::forward`].
    relative_bias: Option<&'a [f32]>,
}

impl CustomOp1 for Attention<'_> {
    fn name(&self) -> &'static str {
        "freshstack-bert-attention"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (qkv, layout) = f32_slice(storage, layout, "qkv")?;
        let (batch, seq, width) = layout.shape().dims3()?;
        if !width.is_multiple_of(3) || !(width / 3).is_multiple_of(self.heads) {
            candle_core::bail!("attention: width {width} is not 3 x heads x head size");
        }
        if self.lengths.len() != batch {
            candle_core::bail!("attention: {} lengths for {batch} rows", self.lengths.len());
        }
        let h = width / 3;
        let head_dim = h / self.heads;
        let bias_width = (2 * seq).saturating_sub(1);
        if let Some(bias) = self.relative_bias
            && bias.len() != self.heads * bias_width
        {
            candle_core::bail!(
                "attention: relative bias of {} for {} heads x {bias_width} offsets",
                bias.len(),
                self.heads
            );
        }
        let scale = 1.0 / (head_dim as f32).sqrt();
        let mut ctx = vec![0f32; batch * seq * h];
        // One task per batch row; its heads run in turn, each writing its own columns of the
        // row's context directly, and share one scores buffer.
        ctx.par_chunks_mut(seq * h)
            .enumerate()
            .for_each(|(b, out)| {
                let len = self.lengths[b].min(seq);
                let row = &qkv[b * seq * width..(b + 1) * seq * width];
                let mut scores = vec![0f32; len * len];
                for head in 0..self.heads {
                    let col = head * head_dim;
                    let bias = self
                        .relative_bias
                        .map(|b| &b[head * bias_width..(head + 1) * bias_width]);
                    let geometry = HeadGeometry {
                        len,
                        width,
                        columns: [col, h + col, 2 * h + col],
                        out_stride: h,
                        out_col: col,
                        head_dim,
                        scale,
                    };
                    attend(row, &geometry, &mut scores, out, |q, logits| {
                        if let Some(bias) = bias {
                            let row_bias = &bias[seq - 1 - q..][..len];
                            for (logit, b) in logits.iter_mut().zip(row_bias) {
                                *logit += b;
                            }
                        }
                        (0, len)
                    });
                }
            });
        Ok((CpuStorage::F32(ctx), Shape::from((batch, seq, h))))
    }
}

/// Where one head's operands lie in a batch row: `len` real positions, each `width` wide, with
/// Q, K and V at `columns` (`head_dim` each); the context goes to columns `out_col ..` of rows
/// `out_stride` apart.
pub(super) struct HeadGeometry {
    pub(super) len: usize,
    pub(super) width: usize,
    pub(super) columns: [usize; 3],
    pub(super) out_stride: usize,
    pub(super) out_col: usize,
    pub(super) head_dim: usize,
    pub(super) scale: f32,
}

/// One (batch row, head): `softmax(shape(Q K^T * scale)) V` over the first `len` positions of
/// `row`, written to the first `len` rows of `out`. `shape(query, logits)` adjusts one query's
/// `len` scaled logits in place and returns the range of keys it sees; the others get weight
/// 0. `scores` holds `len x len` values.
pub(super) fn attend(
    row: &[f32],
    geometry: &HeadGeometry,
    scores: &mut [f32],
    out: &mut [f32],
    mut shape: impl FnMut(usize, &mut [f32]) -> (usize, usize),
) {
    let &HeadGeometry {
        len,
        width,
        columns: [q_col, k_col, v_col],
        out_stride,
        out_col,
        head_dim,
        scale,
    } = geometry;
    if len == 0 {
        return;
    }
    assert!(scores.len() == len * len && (len - 1) * out_stride + out_col + head_dim <= out.len());
    // The last element gemm reads: row len-1, the largest column + head_dim - 1.
    let last_col = q_col.max(k_col).max(v_col) + head_dim;
    assert!((len - 1) * width + last_col <= row.len());
    // SAFETY: every index read is (i < len) * width + (column < last_col), inside `row` by the
    // assert; `scores` is len x len.
    unsafe {
        gemm::gemm(
            len,
            len,
            head_dim,
            scores.as_mut_ptr(),
            1,
            len as isize,
            false,
            row.as_ptr().add(q_col),
            1,
            width as isize,
            row.as_ptr().add(k_col),
            width as isize,
            1,
            0.0,
            scale,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
    for (q, probs) in scores.chunks_exact_mut(len).enumerate() {
        let (lo, hi) = shape(q, probs);
        let (lo, hi) = (lo.min(hi).min(len), hi.min(len));
        probs[..lo].fill(0.0);
        probs[hi..].fill(0.0);
        if lo < hi {
            softmax_row(&mut probs[lo..hi]);
        }
    }
    // SAFETY: as above; V is read at rows < len, columns v_col .. v_col + head_dim; `out` is
    // written at rows < len (stride out_stride), columns out_col .. out_col + head_dim, inside
    // it by the first assert.
    unsafe {
        gemm::gemm(
            len,
            head_dim,
            len,
            out.as_mut_ptr().add(out_col),
            1,
            out_stride as isize,
            false,
            scores.as_ptr(),
            1,
            len as isize,
            row.as_ptr().add(v_col),
            1,
            width as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}

/// `out = silu(gate) * up`, `silu(x) = x / (1 + exp(-x))` as candle computes it.
fn silu_times(out: &mut [f32], (gate, up): (&[f32], &[f32])) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + (-g).exp()) * u;
    }
}
