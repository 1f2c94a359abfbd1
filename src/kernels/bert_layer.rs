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
use candle_nn::{LayerNorm, Linear};
use gemm::Parallelism;
use rayon::prelude::*;

use super::amx::{self, AmxWeight};
use super::bf16::bias_f32;
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
    half: usize,
    len: usize,
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
    fn rotate(&self, values: &mut [f32], pos: usize) {
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

/// A dense layer's weight `[out, in]` and bias, laid out for the CPU.
struct Dense {
    weight: DenseWeight,
    bias: Vec<f32>,
    out_features: usize,
    in_features: usize,
}

/// How a [`Dense`] weight is multiplied: f32 through `gemm`, or split and packed for the AMX
/// kernel where [`amx::available`] (the same sums to f32 grade; `kernels::amx` says how).
enum DenseWeight {
    F32(Vec<f32>),
    Amx(AmxWeight),
}

impl Dense {
    fn from_parts(weight: Tensor, bias: Vec<f32>) -> candle_core::Result<Self> {
        let (out_features, in_features) = weight.dims2()?;
        if bias.len() != out_features {
            candle_core::bail!("bias of {} for {out_features} outputs", bias.len());
        }
        let values = weight
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let weight = if amx::available() {
            DenseWeight::Amx(AmxWeight::new(&values, out_features, in_features))
        } else {
            DenseWeight::F32(values)
        };
        Ok(Self {
            weight,
            bias,
            out_features,
            in_features,
        })
    }

    fn from_linear(linear: &Linear) -> candle_core::Result<Self> {
        let (weight, bias) = linear_parts(linear)?;
        Self::from_parts(weight, bias)
    }

    /// `dst[m, out] += x[m, in] W^T`.
    fn multiply_add(&self, dst: &mut [f32], x: &[f32], m: usize) {
        match &self.weight {
            DenseWeight::F32(w) => {
                gemm_rows_times_weight_t(dst, x, w, m, self.out_features, self.in_features)
            }
            DenseWeight::Amx(packed) => packed.multiply_add(dst, x, m),
        }
    }
}

/// A linear layer's weight and its bias in f32 (zeros where it has none).
fn linear_parts(linear: &Linear) -> candle_core::Result<(Tensor, Vec<f32>)> {
    let bias = match bias_f32(linear)? {
        Some(bias) => bias,
        None => vec![0.0; linear.weight().dim(0)?],
    };
    Ok((linear.weight().clone(), bias))
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
    pub fn new(linears: [&Linear; 6], heads: usize, gelu: GeluKind) -> candle_core::Result<Self> {
        let [query, key, value, attn_out, up, down] = linears;
        let (q, k, v) = (
            linear_parts(query)?,
            linear_parts(key)?,
            linear_parts(value)?,
        );
        let h = q.0.dim(1)?;
        let weight = Tensor::cat(&[&q.0, &k.0, &v.0], 0)?;
        let qkv = Dense::from_parts(weight, [q.1, k.1, v.1].concat())?;
        if qkv.out_features != 3 * h || heads == 0 || !h.is_multiple_of(heads) {
            candle_core::bail!("query/key/value shapes do not match the hidden size");
        }
        Ok(Self {
            qkv,
            attn_out: Dense::from_linear(attn_out)?,
            up: Dense::from_linear(up)?,
            down: Dense::from_linear(down)?,
            heads,
            feed_forward: FeedForward::Gelu(gelu),
        })
    }

    /// Packs a nomic-bert layer: the fused `[3h, h]` Q|K|V projection, the attention output,
    /// and the SwiGLU `gate`, `up` and `down` projections (biases zero where absent).
    pub fn with_swiglu(
        qkv: &Linear,
        attn_out: &Linear,
        [gate, up, down]: [&Linear; 3],
        heads: usize,
    ) -> candle_core::Result<Self> {
        let qkv = Dense::from_linear(qkv)?;
        let (gate, up) = (linear_parts(gate)?, linear_parts(up)?);
        if gate.0.dims() != up.0.dims() {
            candle_core::bail!("gate and up projections differ in shape");
        }
        let h = qkv.in_features;
        if qkv.out_features != 3 * h || heads == 0 || !h.is_multiple_of(heads) {
            candle_core::bail!("the Q|K|V projection does not match the hidden size");
        }
        let weight = Tensor::cat(&[&gate.0, &up.0], 0)?;
        let bias = [gate.1, up.1].concat();
        Ok(Self {
            qkv,
            attn_out: Dense::from_linear(attn_out)?,
            up: Dense::from_parts(weight, bias)?,
            down: Dense::from_linear(down)?,
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
        // The destination starts as bias (+ residual); gemm accumulates x W^T into it.
        let mut dst: Vec<f32> = match residual {
            Some((storage, layout)) => {
                let (r, _) = f32_slice(storage, layout, "residual")?;
                if r.len() != m * n {
                    candle_core::bail!("projection: residual of {} for {m}x{n}", r.len());
                }
                let mut dst = Vec::with_capacity(m * n);
                for row in r.chunks_exact(n) {
                    dst.extend(row.iter().zip(self.dense.bias.iter()).map(|(r, b)| r + b));
                }
                dst
            }
            None => {
                let mut dst = Vec::with_capacity(m * n);
                for _ in 0..m {
                    dst.extend_from_slice(&self.dense.bias);
                }
                dst
            }
        };
        self.dense.multiply_add(&mut dst, x, m);
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
                        seq,
                        width,
                        h,
                        col,
                        head_dim,
                        scale,
                    };
                    attend(row, &geometry, bias, &mut scores, out);
                }
            });
        Ok((CpuStorage::F32(ctx), Shape::from((batch, seq, h))))
    }
}

/// Where one head's operands lie in a batch row: `len` real positions of `seq`, each `width`
/// wide (Q at column `col`, K at `h + col`, V at `2h + col`, `head_dim` each).
struct HeadGeometry {
    len: usize,
    seq: usize,
    width: usize,
    h: usize,
    col: usize,
    head_dim: usize,
    scale: f32,
}

/// One (batch row, head): softmax(Q K^T * scale + bias) V over the first `len` positions of
/// `row` (`[seq, width]`), written to columns `col .. col + head_dim` of the first `len` rows of
/// `out` (`[seq, h]`). `bias`: `2 seq - 1` values by `key - query + seq - 1`. `scores` holds
/// `len x len` values.
fn attend(
    row: &[f32],
    geometry: &HeadGeometry,
    bias: Option<&[f32]>,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let &HeadGeometry {
        len,
        seq,
        width,
        h,
        col,
        head_dim,
        scale,
    } = geometry;
    if len == 0 {
        return;
    }
    assert!(scores.len() == len * len && (len - 1) * h + col + head_dim <= out.len());
    // The last element either gemm reads: row len-1, column 2h + col + head_dim - 1.
    assert!((len - 1) * width + 2 * h + col + head_dim <= row.len());
    // SAFETY: every index read is (i < len) * width + (column < 3h), inside `row` by the assert;
    // `scores` is len x len; `out` is written at rows < len (stride h), columns col..col +
    // head_dim, inside it by the second assert.
    unsafe {
        gemm::gemm(
            len,
            len,
            head_dim,
            scores.as_mut_ptr(),
            1,
            len as isize,
            false,
            row.as_ptr().add(col),
            1,
            width as isize,
            row.as_ptr().add(h + col),
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
    if let Some(bias) = bias {
        for (q, logits) in scores.chunks_exact_mut(len).enumerate() {
            let row_bias = &bias[seq - 1 - q..][..len];
            for (logit, b) in logits.iter_mut().zip(row_bias) {
                *logit += b;
            }
        }
    }
    for probs in scores.chunks_exact_mut(len) {
        softmax_row(probs);
    }
    // SAFETY: as above; V is read at rows < len, columns 2h + col .. 2h + col + head_dim.
    unsafe {
        gemm::gemm(
            len,
            head_dim,
            len,
            out.as_mut_ptr().add(col),
            1,
            h as isize,
            false,
            scores.as_ptr(),
            1,
            len as isize,
            row.as_ptr().add(2 * h + col),
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

/// `dst[m, n] += x[m, k] * w[n, k]^T`, all row-major, parallel over rayon's threads.
fn gemm_rows_times_weight_t(dst: &mut [f32], x: &[f32], w: &[f32], m: usize, n: usize, k: usize) {
    assert!(dst.len() == m * n && x.len() == m * k && w.len() == n * k);
    if m == 0 || n == 0 {
        return;
    }
    let threads = rayon::current_num_threads();
    let parallelism = if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    // SAFETY: the assert bounds every access: x is m x k (row stride k), w^T is read as k x n
    // with element (kk, nn) at w[nn * k + kk], dst is m x n (row stride n).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            true,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// `out = silu(gate) * up`, `silu(x) = x / (1 + exp(-x))` as candle computes it.
fn silu_times(out: &mut [f32], (gate, up): (&[f32], &[f32])) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + (-g).exp()) * u;
    }
}

/// The contiguous f32 data of a CPU storage.
fn f32_slice<'a>(
    storage: &'a CpuStorage,
    layout: &'a Layout,
    what: &str,
) -> candle_core::Result<(&'a [f32], &'a Layout)> {
    let CpuStorage::F32(data) = storage else {
        candle_core::bail!("{what}: expected f32");
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{what}: expected a contiguous tensor");
    };
    Ok((&data[start..end], layout))
}
