//! Pooling of token states into one vector per text, and L2 normalisation. Works on candle
//! tensors; the masks say which positions are real tokens (right padding).

use candle_core::{D, DType, Tensor};

use super::manifest::Pooling;

/// Pools `hidden` `[batch, seq, dim]` with `mask` `[batch, seq]` (1 = token, 0 = padding; real
/// tokens first) and `lengths` (real tokens per row) into `[batch, dim]` f32.
pub fn pool(
    hidden: &Tensor,
    mask: &Tensor,
    lengths: &[usize],
    pooling: Pooling,
) -> candle_core::Result<Tensor> {
    let hidden = hidden.to_dtype(DType::F32)?;
    match pooling {
        Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1),
        Pooling::Mean => {
            let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
            let counts = mask.sum(1)?.clamp(1e-9f32, f32::MAX)?;
            summed.broadcast_div(&counts)
        }
        Pooling::LastToken => {
            let rows = lengths
                .iter()
                .enumerate()
                .map(|(row, &len)| hidden.get(row)?.get(len.max(1) - 1))
                .collect::<candle_core::Result<Vec<_>>>()?;
            Tensor::stack(&rows, 0)
        }
    }
}

/// Divides each row of `[batch, dim]` by its L2 norm (a zero row stays zero).
pub fn l2_normalize(x: &Tensor) -> candle_core::Result<Tensor> {
    let norm = x
        .sqr()?
        .sum_keepdim(D::Minus1)?
        .sqrt()?
        .clamp(1e-12f32, f32::MAX)?;
    x.broadcast_div(&norm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn pools_ignore_padding() {
        let dev = Device::Cpu;
        // Two rows, three positions, dim 2; row 1 has one padding position.
        let hidden = Tensor::new(
            &[
                [[1f32, 2.], [3., 4.], [5., 6.]],
                [[7., 8.], [9., 10.], [100., 100.]],
            ],
            &dev,
        )
        .unwrap();
        let mask = Tensor::new(&[[1u32, 1, 1], [1, 1, 0]], &dev).unwrap();
        let lengths = [3, 2];
        let mean = pool(&hidden, &mask, &lengths, Pooling::Mean)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        assert_eq!(mean, vec![vec![3., 4.], vec![8., 9.]]);
        let cls = pool(&hidden, &mask, &lengths, Pooling::Cls)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        assert_eq!(cls, vec![vec![1., 2.], vec![7., 8.]]);
        let last = pool(&hidden, &mask, &lengths, Pooling::LastToken)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        assert_eq!(last, vec![vec![5., 6.], vec![9., 10.]]);
        let unit = l2_normalize(&Tensor::new(&[[3f32, 4.], [0., 0.]], &dev).unwrap()).unwrap();
        assert_eq!(
            unit.to_vec2::<f32>().unwrap(),
            vec![vec![0.6, 0.8], vec![0., 0.]]
        );
    }
}
