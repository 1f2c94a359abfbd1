// Exact top-k inner-product search of a batch of f32 queries against an f16 row-major document
// matrix (the index's `vectors.npy`), for src/index/gpu.rs. Compiled at run time by NVRTC; it
// includes no header (the f16 -> f32 conversion is one PTX instruction), so NVRTC needs no
// include path.
//
// Two kernels per batch:
//   fs_scores  fused dot products: f16 loads, f32 fused multiply-adds, one score per
//              (query, row) into `scores` (nq x rows, f32);
//   fs_select  one block per query: the k-th largest score t by a 4-pass radix select (8 bits a
//              pass) over order-preserving u32 keys, then every row with score >= t - margin
//              (rounded down) into that query's candidate list.
// The host rescores the candidates with the CPU flat search's own `dot` and ranks them with the
// same TopK, so results equal the CPU's exactly: `margin` bounds how far a GPU score (another
// summation order, fused multiply-adds) and a CPU score of the same row can differ, so no row of
// the CPU's top k is left out (src/index/gpu.rs has the argument).

#define FS_QB 16        // queries per block of fs_scores
#define FS_RPW 4        // rows per warp
#define FS_WARPS 8      // warps per block
#define FS_CHUNK 256    // query elements staged in shared memory per step
#define FS_SEL_THREADS 1024

__device__ __forceinline__ float fs_h2f(unsigned short bits) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
}

// Larger float -> larger key (finite values and infinities; NaN never reaches here).
__device__ __forceinline__ unsigned int fs_key(float f) {
    const unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float fs_unkey(unsigned int key) {
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// Grid: x = query group (FS_QB queries), y = row tiles (FS_WARPS * FS_RPW rows), striding when
// there are more tiles than gridDim.y. Query groups are the fastest-varying block index, so the
// blocks that read the same rows run together and all but the first read them from L2.
extern "C" __global__ void __launch_bounds__(FS_WARPS * 32)
fs_scores(const unsigned short* __restrict__ docs, const float* __restrict__ queries,
          float* __restrict__ scores, unsigned int rows, unsigned int dim, unsigned int nq) {
    __shared__ float qs[FS_QB][FS_CHUNK];
    const unsigned int warp = threadIdx.x >> 5;
    const unsigned int lane = threadIdx.x & 31u;
    const unsigned int q0 = blockIdx.x * FS_QB;
    const unsigned int tiles = (rows + FS_WARPS * FS_RPW - 1) / (FS_WARPS * FS_RPW);
    for (unsigned int tile = blockIdx.y; tile < tiles; tile += gridDim.y) {
        const unsigned int row0 = (tile * FS_WARPS + warp) * FS_RPW;
        float acc[FS_RPW][FS_QB];
#pragma unroll
        for (int r = 0; r < FS_RPW; ++r) {
#pragma unroll
            for (int q = 0; q < FS_QB; ++q) {
                acc[r][q] = 0.0f;
            }
        }
        for (unsigned int c0 = 0; c0 < dim; c0 += FS_CHUNK) {
            const unsigned int len = min((unsigned int)FS_CHUNK, dim - c0);
            __syncthreads();  // the previous chunk is no longer read
            for (unsigned int i = threadIdx.x; i < FS_QB * FS_CHUNK; i += blockDim.x) {
                const unsigned int q = i / FS_CHUNK;
                const unsigned int e = i % FS_CHUNK;
                qs[q][e] = (q0 + q < nq && e < len)
                               ? queries[(size_t)(q0 + q) * dim + c0 + e]
                               : 0.0f;
            }
            __syncthreads();
            // The FS_RPW row loads are issued together, so each lane has several in flight.
            for (unsigned int e = lane; e < len; e += 32) {
                float x[FS_RPW];
#pragma unroll
                for (int r = 0; r < FS_RPW; ++r) {
                    const unsigned int row = row0 + r;
                    x[r] = row < rows ? fs_h2f(docs[(size_t)row * dim + c0 + e]) : 0.0f;
                }
#pragma unroll
                for (int q = 0; q < FS_QB; ++q) {
                    const float v = qs[q][e];
#pragma unroll
                    for (int r = 0; r < FS_RPW; ++r) {
                        acc[r][q] = fmaf(x[r], v, acc[r][q]);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < FS_RPW; ++r) {
            const unsigned int row = row0 + r;
#pragma unroll
            for (int q = 0; q < FS_QB; ++q) {
                float v = acc[r][q];
#pragma unroll
                for (int offset = 16; offset > 0; offset >>= 1) {
                    v += __shfl_xor_sync(0xffffffffu, v, offset);
                }
                if (lane == (unsigned int)q && row < rows && q0 + q < nq) {
                    scores[(size_t)(q0 + q) * rows + row] = v;
                }
            }
        }
    }
}

// One block per query. `k` is in 1..=rows. Writes counts[q] (candidates found, possibly more
// than `cap`: the host then searches that query on the CPU), the first min(count, cap)
// candidate rows in any order, and kth[q] (t, for diagnostics).
extern "C" __global__ void __launch_bounds__(FS_SEL_THREADS)
fs_select(const float* __restrict__ scores, const float* __restrict__ margins, unsigned int rows,
          unsigned int nq, unsigned int k, unsigned int cap, unsigned int* __restrict__ counts,
          unsigned int* __restrict__ cands, float* __restrict__ kth) {
    __shared__ unsigned int hist[256];
    __shared__ unsigned int s_prefix;
    __shared__ unsigned int s_remaining;
    __shared__ unsigned int s_count;
    const unsigned int q = blockIdx.x;
    if (q >= nq) {
        return;
    }
    const float* s = scores + (size_t)q * rows;
    unsigned int prefix = 0;
    unsigned int mask = 0;
    unsigned int remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (unsigned int i = threadIdx.x; i < 256; i += blockDim.x) {
            hist[i] = 0;
        }
        __syncthreads();
        for (unsigned int i = threadIdx.x; i < rows; i += blockDim.x) {
            const unsigned int key = fs_key(s[i]);
            if ((key & mask) == prefix) {
                atomicAdd(&hist[(key >> shift) & 255u], 1u);
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            // The bin holding the remaining-th largest key, counting from the top.
            unsigned int r = remaining;
            int bin = 255;
            for (; bin > 0; --bin) {
                if (hist[bin] >= r) {
                    break;
                }
                r -= hist[bin];
            }
            s_prefix = prefix | ((unsigned int)bin << shift);
            s_remaining = r;
        }
        __syncthreads();
        prefix = s_prefix;
        remaining = s_remaining;
        mask |= 255u << shift;
        __syncthreads();  // everyone has read s_prefix before the next pass writes hist
    }
    const float t = fs_unkey(prefix);
    const float threshold = __fsub_rd(t, margins[q]);
    if (threadIdx.x == 0) {
        s_count = 0;
    }
    __syncthreads();
    for (unsigned int i = threadIdx.x; i < rows; i += blockDim.x) {
        if (s[i] >= threshold) {
            const unsigned int slot = atomicAdd(&s_count, 1u);
            if (slot < cap) {
                cands[(size_t)q * cap + slot] = i;
            }
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        counts[q] = s_count;
        kth[q] = t;
    }
}
