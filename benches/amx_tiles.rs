//! Why quantized GGUF weights are multiplied as bf16 tiles rather than int8 ones: one 32 x 32
//! block of sums over 1,536 inner values on one core, in cache, as `TDPBF16PS` steps (what
//! `kernels::amx` runs once a weight is dequantized) against `TDPBSSD` steps whose int32 sums
//! are stored, converted and scaled into f32 sums every `g` steps of 32 values. GGUF's block
//! types carry one scale per 32 values (Q8_0, Q4_0..Q5_1, the K-quants' sub-blocks), so an
//! integer product of them rescales every step (`g = 1`); `g = 2, 8` show what coarser scales
//! would allow. Throughput is multiply-adds. On a CPU without AMX nothing runs.

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::asm;

    use criterion::{Criterion, Throughput};

    /// Inner values per block product.
    const K: usize = 1536;
    /// Inner values per tile step (one bf16 A row; one int8 step of the per-32 scales).
    const STEP: usize = 32;

    /// 64-byte aligned storage for tile loads and stores.
    #[repr(C, align(64))]
    struct Lines<T, const N: usize>([T; N]);

    /// Loads palette 1 with C tiles tmm0..3 (16 x 64 bytes), A tiles tmm4, tmm5 (16 rows of
    /// `a_bytes`) and B tiles tmm6, tmm7 (`b_rows` x 64 bytes).
    fn configure(a_bytes: u16, b_rows: u8) {
        let mut config = Lines([0u8; 64]);
        config.0[0] = 1;
        for tile in 0..8 {
            let (bytes, rows) = match tile {
                4 | 5 => (a_bytes, 16),
                6 | 7 => (64, b_rows),
                _ => (64, 16),
            };
            config.0[16 + 2 * tile..18 + 2 * tile].copy_from_slice(&bytes.to_le_bytes());
            config.0[48 + tile] = rows;
        }
        // SAFETY: `freshstack::kernels::amx::available()` granted the tile state (checked by the
        // caller); the configuration is a valid palette-1 layout.
        unsafe { asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly)) };
    }

    fn release() {
        // SAFETY: releases the tile state `configure` set up.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }

    /// Four C tiles from zero, one product per step of `a` (32 rows, `a_bytes` per row per step,
    /// steps contiguous) and `b` (`b_rows` rows of 128 bytes per step), stored to `c` (32 x 32).
    ///
    /// # Safety
    /// `configure(a_bytes, b_rows)` is loaded; `a` and `b` hold `steps` steps; `c` is 4 KiB.
    #[inline(always)]
    unsafe fn tile_steps<const INT8: bool>(a: *const u8, b: *const u8, steps: usize, c: *mut u8) {
        let (a_bytes, b_rows) = if INT8 { (32, 8) } else { (64, 16) };
        // SAFETY: the caller's contract covers every address below.
        unsafe {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            );
            for step in 0..steps {
                let (a, b) = (a.add(step * 32 * a_bytes), b.add(step * b_rows * 128));
                if INT8 {
                    asm!(
                        "tileloadd tmm4, [{a} + {sa}*1]",
                        "tileloadd tmm6, [{b} + {sb}*1]",
                        "tdpbssd tmm0, tmm4, tmm6",
                        "tileloadd tmm7, [{b16} + {sb}*1]",
                        "tdpbssd tmm1, tmm4, tmm7",
                        "tileloadd tmm5, [{a2} + {sa}*1]",
                        "tdpbssd tmm2, tmm5, tmm6",
                        "tdpbssd tmm3, tmm5, tmm7",
                        a = in(reg) a, a2 = in(reg) a.add(16 * a_bytes), sa = in(reg) a_bytes,
                        b = in(reg) b, b16 = in(reg) b.add(64), sb = in(reg) 128usize,
                        options(nostack, readonly),
                    );
                } else {
                    // The bf16 kernel's own step: 32 rows of 32 values (64 bytes) per step,
                    // the second 16 rows 16 x 32 values on; 16 pairs x 32 columns.
                    freshstack::kernels::amx::tile_step(a.cast(), 16 * 32, 64, b.cast(), 128);
                }
            }
            asm!(
                "tilestored [{c00} + {sc}*1], tmm0",
                "tilestored [{c01} + {sc}*1], tmm1",
                "tilestored [{c10} + {sc}*1], tmm2",
                "tilestored [{c11} + {sc}*1], tmm3",
                c00 = in(reg) c, c01 = in(reg) c.add(64), c10 = in(reg) c.add(16 * 128),
                c11 = in(reg) c.add(16 * 128 + 64), sc = in(reg) 128usize,
                options(nostack),
            );
        }
    }

    /// `sums[r][c] += ints[r][c] * row_scale[r] * column_scales[c]`, 32 x 32, as a dequantizing
    /// integer kernel must after each group of steps sharing scales.
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    unsafe fn rescale(
        ints: &[i32; 1024],
        row_scale: &[f32],
        column_scales: &[f32],
        sums: &mut [f32],
    ) {
        use std::arch::x86_64::*;
        // SAFETY: every slice holds the 32 rows or columns read.
        unsafe {
            let halves = [
                _mm512_loadu_ps(column_scales.as_ptr()),
                _mm512_loadu_ps(column_scales.as_ptr().add(16)),
            ];
            for (r, &scale) in row_scale.iter().take(32).enumerate() {
                let scale = _mm512_set1_ps(scale);
                for (h, columns) in halves.into_iter().enumerate() {
                    let at = r * 32 + h * 16;
                    let ints = _mm512_loadu_si512(ints.as_ptr().add(at).cast());
                    let sum = _mm512_loadu_ps(sums.as_ptr().add(at));
                    let factor = _mm512_mul_ps(scale, columns);
                    let sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ints), factor, sum);
                    _mm512_storeu_ps(sums.as_mut_ptr().add(at), sum);
                }
            }
        }
    }

    pub fn tiles(c: &mut Criterion) {
        if !freshstack::kernels::amx::available() {
            eprintln!("amx_tiles: skipped (no AMX here)");
            return;
        }
        let mut group = c.benchmark_group("amx_tiles");
        group.throughput(Throughput::Elements((32 * 32 * K) as u64));
        // Operands: bf16 values 0.5 (0x3f00), int8 values 3 and 2; the speed does not depend on them.
        let a_bf16: Vec<u16> = vec![0x3f00; 32 * K];
        let b_bf16: Vec<u16> = vec![0x3f00; 32 * K];
        let a_int8 = vec![3u8; 32 * K];
        let b_int8 = vec![2u8; 32 * K];
        let row_scales = vec![0.01f32; 32 * (K / STEP)];
        let column_scales = vec![0.02f32; 32 * (K / STEP)];
        let mut out = Lines([0u8; 4096]);
        group.bench_function("bf16", |bench| {
            configure(64, 16);
            bench.iter(|| {
                // SAFETY: configured above; the operands hold K / 32 steps.
                unsafe {
                    tile_steps::<false>(
                        a_bf16.as_ptr().cast(),
                        b_bf16.as_ptr().cast(),
                        K / STEP,
                        out.0.as_mut_ptr(),
                    )
                }
            });
            release();
        });
        for every in [1, 2, 8] {
            let mut sums = vec![0f32; 1024];
            let mut ints = Lines([0i32; 1024]);
            group.bench_function(format!("int8_rescale_every_{every}"), |bench| {
                configure(32, 8);
                bench.iter(|| {
                    for group in (0..K / STEP).step_by(every) {
                        // SAFETY: configured above; `group + every <= K / 32` steps; the CPU has
                        // AVX-512 (every AMX CPU does).
                        unsafe {
                            tile_steps::<true>(
                                a_int8.as_ptr().add(group * 32 * 32),
                                b_int8.as_ptr().add(group * 8 * 128),
                                every,
                                ints.0.as_mut_ptr().cast(),
                            );
                            rescale(
                                &ints.0,
                                &row_scales[group * 32..],
                                &column_scales[group * 32..],
                                &mut sums,
                            );
                        }
                    }
                });
                release();
            });
        }
        group.finish();
    }
}

#[cfg(target_arch = "x86_64")]
criterion::criterion_group!(benches, x86::tiles);
#[cfg(target_arch = "x86_64")]
criterion::criterion_main!(benches);

#[cfg(not(target_arch = "x86_64"))]
fn main() {}
