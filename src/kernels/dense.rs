//! A dense layer's weight laid out for the CPU fast paths (`bert_layer`, `decoder_layer`):
//! f32 through `gemm`, split for AMX tiles (`kernels::amx`, f32-grade), or, for a bf16 weight,
//! packed for the AVX512-BF16 / AMX bf16 kernels (`kernels::bf16`, one product per pair); a
//! GGUF file's quantized matrices stay as the file stores them, and each product dequantizes
//! them into bf16 panels for the AMX kernel (the GGUF engine's `kernels::quant::matmul_stacked`
//! without AMX), or a batch's products share one dequantization ([`Dense::stage`]). Every
//! product accumulates into an f32 destination that starts from the bias (and a residual),
//! and no sum is split across threads, so results do not depend on the thread count.

use candle_core::{CpuStorage, DType, Layout, Tensor};
use candle_nn::Linear;
use gemm::Parallelism;
use half::bf16;

use super::aligned::LineVec;
use super::amx::{self, AmxWeight};
use super::bf16::{Bf16Weight, PackedBf16Linear, bias_f32};
use super::quant::{QMatrix, matmul_stacked, pack_stacked_bf16};

thread_local! {
    /// A quantized weight's bf16 panels for the product under way (memory reused).
    static QUANTIZED_PANELS: std::cell::RefCell<LineVec<u32>> = const { std::cell::RefCell::new(LineVec::new()) };
}

/// Where a dense layer's weight comes from: a candle linear layer, or a matrix of a GGUF file
/// (block-quantized, kept so) with its bias in f32 (zeros where it has none).
#[derive(Clone)]
pub(crate) enum DenseSource {
    Linear(Linear),
    Quantized { weight: QMatrix, bias: Vec<f32> },
}

impl DenseSource {
    /// `(out, in)` features.
    pub(crate) fn dims(&self) -> candle_core::Result<(usize, usize)> {
        match self {
            DenseSource::Linear(linear) => linear.weight().dims2(),
            DenseSource::Quantized { weight, .. } => Ok((weight.rows, weight.cols)),
        }
    }

    /// The weight as a candle linear layer (a quantized matrix dequantized to f32).
    fn into_linear(self) -> candle_core::Result<Linear> {
        match self {
            DenseSource::Linear(linear) => Ok(linear),
            DenseSource::Quantized { weight, bias } => {
                let device = candle_core::Device::Cpu;
                let values =
                    Tensor::from_vec(weight.dequantize(), (weight.rows, weight.cols), &device)?;
                let bias = Tensor::from_vec(bias, weight.rows, &device)?;
                Ok(Linear::new(values, Some(bias)))
            }
        }
    }
}

impl From<&Linear> for DenseSource {
    fn from(linear: &Linear) -> Self {
        DenseSource::Linear(linear.clone())
    }
}

/// A dense layer's weight `[out, in]` and bias, laid out for the CPU.
pub(crate) struct Dense {
    weight: DenseWeight,
    pub(crate) bias: Vec<f32>,
    pub(crate) out_features: usize,
    pub(crate) in_features: usize,
}

/// How a [`Dense`] weight is multiplied: f32 through `gemm`, split and packed for the AMX
/// kernel where [`amx::available`] (the same sums to f32 grade; `kernels::amx` says how), or
/// kept in bf16 and packed for the bf16 kernels (inputs rounded to bf16), or quantized GGUF
/// matrices whose outputs lie side by side (dequantized to bf16 per product; inputs rounded
/// to bf16 where the CPU has AVX512-BF16, as the GGUF engine's prompts are).
enum DenseWeight {
    F32(Vec<f32>),
    Amx(AmxWeight),
    Bf16(Bf16Weight),
    Quantized(Vec<QMatrix>),
}

impl Dense {
    /// Lays out `weight` `[out, in]` with `bias`: a bf16 weight stays bf16 where the CPU has
    /// AVX512-BF16 ([`Dense::keeps_bf16`]); anything else is multiplied in f32.
    pub(crate) fn from_parts(weight: Tensor, bias: Vec<f32>) -> candle_core::Result<Self> {
        let (out_features, in_features) = weight.dims2()?;
        if bias.len() != out_features {
            candle_core::bail!("bias of {} for {out_features} outputs", bias.len());
        }
        let weight = if weight.dtype() == DType::BF16 && Self::keeps_bf16() {
            let values = weight.flatten_all()?.to_vec1::<bf16>()?;
            DenseWeight::Bf16(Bf16Weight::new(&values, out_features, in_features))
        } else {
            let values = weight
                .to_dtype(DType::F32)?
                .flatten_all()?
                .to_vec1::<f32>()?;
            if amx::available() {
                DenseWeight::Amx(AmxWeight::new(&values, out_features, in_features))
            } else {
                DenseWeight::F32(values)
            }
        };
        Ok(Self {
            weight,
            bias,
            out_features,
            in_features,
        })
    }

    /// Whether a bf16 weight is multiplied as bf16 here (the CPU has AVX512-BF16); elsewhere
    /// it would be widened to f32, twice its memory.
    pub(crate) fn keeps_bf16() -> bool {
        PackedBf16Linear::supported()
    }

    /// Whether a row's product is computed the same way whatever the other rows multiplied with
    /// it (the AMX and bf16 kernels: fixed-size row blocks, ragged ones padded); `gemm`'s
    /// blocking may depend on the row count, so the f32 path does not promise it.
    pub(crate) fn rows_independent(&self) -> bool {
        !matches!(self.weight, DenseWeight::F32(_))
    }

    /// Whether each product dequantizes the weight anew (a quantized GGUF matrix): such a
    /// product is cheapest over as many rows as possible at once.
    pub(crate) fn dequantizes_per_product(&self) -> bool {
        matches!(self.weight, DenseWeight::Quantized(_))
    }

    /// Whether this weight is bf16 multiplied on AMX tiles.
    pub(crate) fn bf16_on_tiles(&self) -> bool {
        matches!(&self.weight, DenseWeight::Bf16(w) if w.on_tiles())
    }

    /// Whether this weight is quantized and dequantized to bf16 for AMX tiles per product.
    pub(crate) fn quantized_on_tiles(&self) -> bool {
        self.dequantizes_per_product() && self.in_features.is_multiple_of(32) && amx::available()
    }

    /// One layer from `source`.
    pub(crate) fn from_source(source: &DenseSource) -> candle_core::Result<Self> {
        Self::stacked(std::slice::from_ref(source))
    }

    /// Stacks the outputs of `sources` (same input width) into one layer. Quantized matrices
    /// stay quantized when every source is one; mixed with float weights, they are dequantized.
    pub(crate) fn stacked(sources: &[DenseSource]) -> candle_core::Result<Self> {
        let in_features = match sources.first() {
            Some(first) => first.dims()?.1,
            None => candle_core::bail!("a dense layer of no weights"),
        };
        let mut quantized = Vec::new();
        let mut bias = Vec::new();
        for source in sources {
            if let DenseSource::Quantized { weight, bias: b } = source
                && weight.cols == in_features
                && b.len() == weight.rows
            {
                quantized.push(weight.clone());
                bias.extend_from_slice(b);
            }
        }
        if quantized.len() == sources.len() {
            let out_features = quantized.iter().map(|m| m.rows).sum();
            return Ok(Self {
                weight: DenseWeight::Quantized(quantized),
                bias,
                out_features,
                in_features,
            });
        }
        let linears = sources
            .iter()
            .map(|s| s.clone().into_linear())
            .collect::<candle_core::Result<Vec<_>>>()?;
        let parts = linears
            .iter()
            .map(linear_parts)
            .collect::<candle_core::Result<Vec<_>>>()?;
        let mut weights: Vec<Tensor> = parts.iter().map(|(w, _)| w.clone()).collect();
        // A dequantized matrix is f32: stacked with bf16 weights, all are multiplied in f32.
        if weights.iter().any(|w| w.dtype() != weights[0].dtype()) {
            weights = weights
                .iter()
                .map(|w| w.to_dtype(DType::F32))
                .collect::<candle_core::Result<_>>()?;
        }
        let bias = parts.iter().flat_map(|(_, b)| b.iter().copied()).collect();
        Self::from_parts(Tensor::cat(&weights, 0)?, bias)
    }

    /// `dst[m, out] += x[m, in] W^T`.
    pub(crate) fn multiply_add(&self, dst: &mut [f32], x: &[f32], m: usize) {
        self.stage_none().multiply_add(dst, x, m);
    }

    /// This layer for one batch's products, as it is (a quantized weight dequantized anew by
    /// every product).
    fn stage_none(&self) -> Staged<'_> {
        Staged {
            dense: self,
            panels: None,
        }
    }

    /// This layer for the products of one batch: a quantized weight on AMX tiles
    /// ([`Dense::quantized_on_tiles`]) is dequantized into bf16 panels in `buffer` once (its
    /// memory reused), so that blocks of the batch's rows can be multiplied one after another
    /// without dequantizing it again. Any other weight is used as it is. The products are the
    /// same as [`Dense`]'s own, bit for bit.
    pub(crate) fn stage<'a>(&'a self, buffer: &'a mut LineVec<u32>) -> Staged<'a> {
        let panels = match &self.weight {
            DenseWeight::Quantized(parts) if self.quantized_on_tiles() => {
                let parts: Vec<&QMatrix> = parts.iter().collect();
                pack_stacked_bf16(&parts, buffer);
                Some(&buffer[..])
            }
            _ => None,
        };
        Staged {
            dense: self,
            panels,
        }
    }

    /// `x W^T + bias` for `m` rows, plus `residual` (`[m, out]`) where given.
    pub(crate) fn forward(&self, x: &[f32], m: usize, residual: Option<&[f32]>) -> Vec<f32> {
        let mut dst = vec![0f32; m * self.out_features];
        self.start_rows(&mut dst, residual);
        self.multiply_add(&mut dst, x, m);
        dst
    }

    /// Sets every row of `dst` to the bias, plus the residual's row where given.
    fn start_rows(&self, dst: &mut [f32], residual: Option<&[f32]>) {
        let n = self.out_features;
        match residual {
            Some(r) => {
                assert_eq!(
                    r.len(),
                    dst.len(),
                    "residual of {} for {}",
                    r.len(),
                    dst.len()
                );
                for (row, r) in dst.chunks_exact_mut(n).zip(r.chunks_exact(n)) {
                    for ((d, r), b) in row.iter_mut().zip(r).zip(&self.bias) {
                        *d = r + b;
                    }
                }
            }
            None => {
                for row in dst.chunks_exact_mut(n) {
                    row.copy_from_slice(&self.bias);
                }
            }
        }
    }
}

/// A [`Dense`] layer ready for one batch's products ([`Dense::stage`]).
pub(crate) struct Staged<'a> {
    dense: &'a Dense,
    /// A quantized weight's bf16 panels, dequantized for this batch.
    panels: Option<&'a [u32]>,
}

impl Staged<'_> {
    /// Whether a row's product does not depend on the rows beside it ([`Dense::rows_independent`]).
    pub(crate) fn rows_independent(&self) -> bool {
        self.dense.rows_independent()
    }

    /// Whether each product still dequantizes the weight anew (a quantized weight off the
    /// tiles): such a product is cheapest over as many rows as possible at once.
    pub(crate) fn dequantizes_per_product(&self) -> bool {
        self.dense.dequantizes_per_product() && self.panels.is_none()
    }

    /// The weight's bf16 panels for the tile kernel, where it has them as they are needed:
    /// a bf16 weight on tiles, or a quantized weight staged.
    fn tile_panels(&self) -> Option<&[u32]> {
        match &self.dense.weight {
            DenseWeight::Bf16(w) if w.on_tiles() => Some(w.panels()),
            _ => self.panels,
        }
    }

    /// `dst[m, out] += x[m, in] W^T`.
    fn multiply_add(&self, dst: &mut [f32], x: &[f32], m: usize) {
        let dense = self.dense;
        if let Some(panels) = self.panels {
            let shape = (m, dense.out_features, dense.in_features);
            amx::bf16_product(panels, x, shape, amx::Start::Dst, dst);
            return;
        }
        match &dense.weight {
            DenseWeight::F32(w) => {
                gemm_rows_times_weight_t(dst, x, w, m, dense.out_features, dense.in_features)
            }
            DenseWeight::Amx(packed) => packed.multiply_add(dst, x, m),
            DenseWeight::Bf16(packed) => packed.multiply_add(dst, x, m),
            DenseWeight::Quantized(_) if dense.quantized_on_tiles() => {
                // Staged for this product alone: the whole weight as bf16 panels in the
                // thread's buffer, then the tile kernel of the bf16 weights, which keeps a
                // block of rows in cache across panels.
                QUANTIZED_PANELS.with(|panels| {
                    dense
                        .stage(&mut panels.borrow_mut())
                        .multiply_add(dst, x, m);
                });
            }
            DenseWeight::Quantized(parts) => {
                let parts: Vec<&QMatrix> = parts.iter().collect();
                matmul_stacked(&parts, x, m, dst, true);
            }
        }
    }

    /// `dst[m, out] += x[m, in] W^T + bias` in place: the sums of [`Dense::forward`] with `dst`
    /// as its residual, without the copy.
    pub(crate) fn add_product(&self, dst: &mut [f32], x: &[f32], m: usize) {
        let dense = self.dense;
        assert_eq!(
            dst.len(),
            m * dense.out_features,
            "destination of {} for {m} rows",
            dst.len()
        );
        if dense.bias.iter().any(|&b| b != 0.0) {
            for row in dst.chunks_exact_mut(dense.out_features) {
                row.iter_mut().zip(&dense.bias).for_each(|(d, b)| *d += b);
            }
        }
        self.multiply_add(dst, x, m);
    }

    /// [`Dense::forward`] into `dst` (its old contents replaced, its memory reused; its rows
    /// start cache lines, which lets the tile kernel work on it in place).
    pub(crate) fn forward_into(
        &self,
        x: &[f32],
        m: usize,
        residual: Option<&[f32]>,
        dst: &mut LineVec<f32>,
    ) {
        let dense = self.dense;
        let (n, k) = (dense.out_features, dense.in_features);
        dst.resize_zeroed(m * n);
        if let Some(panels) = self.tile_panels()
            && dense.bias.iter().all(|&b| b == 0.0)
        {
            // The tiles start from zero or from the residual: `dst` is only written.
            let start = residual.map_or(amx::Start::Zero, amx::Start::From);
            amx::bf16_product(panels, x, (m, n, k), start, dst);
            return;
        }
        dense.start_rows(dst, residual);
        self.multiply_add(dst, x, m);
    }
}

/// A linear layer's weight and its bias in f32 (zeros where it has none).
pub(crate) fn linear_parts(linear: &Linear) -> candle_core::Result<(Tensor, Vec<f32>)> {
    let bias = match bias_f32(linear)? {
        Some(bias) => bias,
        None => vec![0.0; linear.weight().dim(0)?],
    };
    Ok((linear.weight().clone(), bias))
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

/// The contiguous f32 data of a CPU storage.
pub(crate) fn f32_slice<'a>(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::bf16::tests::random;
    use crate::kernels::quant::tests::quantized;
    use candle_core::quantized::GgmlDType;

    /// A staged quantized weight (dequantized once) gives, block of rows by block of rows, the
    /// bits of the unstaged product over the whole batch: with a bias or none (the tiles then
    /// start from zero or from the residual), from zero, from a residual, and added in place.
    #[test]
    fn staged_blocks_give_the_bits_of_the_whole_batch() {
        let (n, k) = (80, 96);
        let (weight, _file) = quantized(&random(n * k, 1), n, k, GgmlDType::Q8_0);
        for bias in [random(n, 2), vec![0.0; n]] {
            let dense = Dense::from_source(&DenseSource::Quantized {
                weight: weight.clone(),
                bias,
            })
            .unwrap();
            staged_blocks_match(&dense);
        }
    }

    fn staged_blocks_match(dense: &Dense) {
        let (n, k, m, block) = (dense.out_features, dense.in_features, 300, 128);
        let x = random(m * k, 3);
        let residual = random(m * n, 4);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        let whole = dense.forward(&x, m, None);
        let whole_residual = dense.forward(&x, m, Some(&residual));
        let mut buffer = LineVec::new();
        let staged = dense.stage(&mut buffer);
        let (mut plain, mut from_residual, mut added) = (Vec::new(), Vec::new(), residual.clone());
        let mut dst = LineVec::new();
        for (first, rows) in (0..m).step_by(block).map(|f| (f, block.min(m - f))) {
            let xs = &x[first * k..(first + rows) * k];
            let rs = &residual[first * n..(first + rows) * n];
            staged.forward_into(xs, rows, None, &mut dst);
            plain.extend_from_slice(&dst);
            staged.forward_into(xs, rows, Some(rs), &mut dst);
            from_residual.extend_from_slice(&dst);
            staged.add_product(&mut added[first * n..(first + rows) * n], xs, rows);
        }
        assert_eq!(bits(&plain), bits(&whole));
        assert_eq!(bits(&from_residual), bits(&whole_residual));
        assert_eq!(bits(&added), bits(&whole_residual));
    }
}
