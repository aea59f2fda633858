// mmq.cu - batches above HM_CU_MATVEC_MAX tokens against quantized weights on the tensor cores:
// a 128-row x 64-token output tile per block, the weights dequantized (dq.h) and both they and
// the activations rounded to IEEE half into shared memory 64 columns at a time, multiplied with
// half WMMA fragments into float accumulators. Half, not bfloat16: its 11-bit significand keeps
// a dequantized Q8_0 weight to 2^-12 where bfloat16 would round it to 2^-9; activations past
// 65504 would become inf, which the logits' check reports. The same kernel runs a dense matrix over
// a batch and the routed experts over their tokens grouped by expert (hm_cu_moe_sort's tiles), so
// an expert's weights are read once per 64 of its tokens instead of once per token.
#include <cuda_fp16.h>
#include <mma.h>
#include <stdint.h>

#include "cuda/common.cuh"
#include "cuda/dq.h"
#include "cuda/kernels.h"
#include "quant/types.h"

using namespace nvcuda;

enum { TM = 128, TN = 64, TK = 64, LDS = TK + 8, LDC = TM + 4, MAX_E = 4096, MMQ_T = 256 };

struct smem_t {
    union {
        struct {
            __half w[TM][LDS];
            __half x[TN][LDS];
        } in;
        float c[TN][LDC]; // the tile transposed: [token][row]
    };
    int32_t xrow[TN];
};

// 8 warps as 4 (rows) x 2 (tokens), each 32 x 32 of the 128 x 64 tile in 2 x 2 fragments; per 64
// columns every thread dequantizes one 32-value chunk of the weights and converts 16 activations
template <int T> __global__ void __launch_bounds__(MMQ_T) mmq_k(hm_cu_w w, hm_cu_mmq_args a) {
    hm_pdl_start();
    __shared__ __align__(32) smem_t sm;
    const int tid = threadIdx.x, warp = tid >> 5;
    int e = 0, i0, ni;
    if (a.tile_e) {
        const int t = blockIdx.y;
        if (t >= *a.n_tiles) return;
        e = a.tile_e[t], i0 = a.tile_i0[t], ni = a.tile_n[t];
    } else {
        i0 = blockIdx.y * TN;
        ni = a.n_items - i0 < TN ? a.n_items - i0 : TN;
    }
    const int64_t r0 = (int64_t)blockIdx.x * TM;
    const uint8_t *wb = (const uint8_t *)w.data + (size_t)e * w.estride;
    if (tid < TN) sm.xrow[tid] = tid < ni ? (a.xrow ? a.xrow[i0 + tid] : i0 + tid) : -1;
    __syncthreads();
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);
    const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32; // this warp's 32 x 32 of the tile
    const int64_t nch = w.cols / 32;
    for (int64_t k0 = 0; k0 < w.cols; k0 += TK) {
        { // weights: row tid / 2, chunk k0 / 32 + tid % 2
            const int r = tid >> 1, h = tid & 1;
            const int64_t c = k0 / 32 + h;
            float v[32];
            if (r0 + r < w.rows && c < nch) {
                hm_dq32(T, wb + (r0 + r) * (int64_t)w.row_bytes, c, v);
            } else {
#pragma unroll
                for (int q = 0; q < 32; q++) v[q] = 0.0f;
            }
            __half2 *dst = (__half2 *)&sm.in.w[r][h * 32];
#pragma unroll
            for (int q = 0; q < 16; q++) dst[q] = __floats2half2_rn(v[2 * q], v[2 * q + 1]);
        }
        { // activations: token tid / 4, 16 values (float4 loads: rows 16-byte aligned)
            const int t = tid >> 2, qq = tid & 3;
            const int xr = sm.xrow[t];
            const int64_t kk = k0 + qq * 16;
            __half2 *dst = (__half2 *)&sm.in.x[t][qq * 16];
            if (xr >= 0 && kk < w.cols) {
                const float4 *xp = (const float4 *)(a.x + (int64_t)xr * a.xs + kk);
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const float4 f = xp[q];
                    dst[2 * q] = __floats2half2_rn(f.x, f.y);
                    dst[2 * q + 1] = __floats2half2_rn(f.z, f.w);
                }
            } else {
#pragma unroll
                for (int q = 0; q < 8; q++) dst[q] = __floats2half2_rn(0.0f, 0.0f);
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; i++)
                wmma::load_matrix_sync(fa[i], &sm.in.w[wm + 16 * i][kk], LDS);
#pragma unroll
            for (int j = 0; j < 2; j++)
                wmma::load_matrix_sync(fb[j], &sm.in.x[wn + 16 * j][kk], LDS);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }
    // C[row][token] as [token][row] (col-major store of the row-major tile), then out by token
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(&sm.c[wn + 16 * j][wm + 16 * i], acc[i][j], LDC,
                                    wmma::mem_col_major);
    __syncthreads();
    for (int q = tid; q < TN * TM; q += MMQ_T) {
        const int t = q / TM, r = q % TM;
        if (t < ni && r0 + r < w.rows) a.y[(int64_t)(i0 + t) * a.ys + r0 + r] = sm.c[t][r];
    }
}

extern "C" cudaError_t hm_cu_mmq(const hm_cu_w *w, const hm_cu_mmq_args *a, int max_tiles,
                                 cudaStream_t stream) {
    if (w->rows <= 0) return cudaSuccess;
    /* the activation rows are read as float4 */
    if (w->cols % 32 || a->xs % 4 || ((uintptr_t)a->x & 15)) return cudaErrorInvalidValue;
    const int tiles = a->tile_e ? max_tiles : (a->n_items + TN - 1) / TN;
    if (tiles <= 0) return cudaSuccess;
    const dim3 grid((unsigned)((w->rows + TM - 1) / TM), (unsigned)tiles);
    switch (w->type) {
#define X(t)                                                                                       \
    case t:                                                                                        \
        hm_launch(mmq_k<t>, grid, MMQ_T, 0, stream, *w, *a);                                       \
        break;
        HM_MMQ_TYPES(X)
#undef X
    default:
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

// One block: counts per expert, their offsets, every pair's place in expert order, and the
// tiles of up to `tile` pairs of one expert.
__global__ void __launch_bounds__(1024) moe_sort_k(const int32_t *__restrict__ ids, int n_pairs,
                                                   int n_exp, int k, int tile, hm_cu_moe_order o) {
    hm_pdl_start();
    extern __shared__ int sh[]; // counts [n_exp], then offsets [n_exp]
    int *cnt = sh, *off = sh + n_exp;
    for (int e = threadIdx.x; e < n_exp; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int p = threadIdx.x; p < n_pairs; p += blockDim.x)
        if (ids[p] >= 0) atomicAdd(&cnt[ids[p]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int s = 0, nt = 0;
        for (int e = 0; e < n_exp; e++) {
            off[e] = s;
            for (int i = 0; i < cnt[e]; i += tile) {
                o.tile_e[nt] = e;
                o.tile_i0[nt] = s + i;
                o.tile_n[nt] = cnt[e] - i < tile ? cnt[e] - i : tile;
                nt++;
            }
            s += cnt[e];
        }
        *o.n_tiles = nt;
    }
    __syncthreads();
    // places: the order within an expert depends on the atomics, the values do not (every
    // output of the tile kernel is its own dot product, whatever the tile's other columns)
    for (int e = threadIdx.x; e < n_exp; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int p = threadIdx.x; p < n_pairs; p += blockDim.x) {
        const int e = ids[p];
        if (e < 0) { /* on the CPU */
            o.pos_of[p] = -1;
            continue;
        }
        const int at = off[e] + atomicAdd(&cnt[e], 1);
        o.pos_of[p] = at;
        o.xrow[at] = p / k;
    }
}

extern "C" cudaError_t hm_cu_moe_sort(const int32_t *ids, int n_pairs, int n_exp, int k, int tile,
                                      const hm_cu_moe_order *o, cudaStream_t stream) {
    if (n_pairs <= 0) return cudaSuccess;
    if (n_exp < 1 || n_exp > MAX_E || k < 1 || tile < 1 || tile > TN) return cudaErrorInvalidValue;
    hm_launch(moe_sort_k, 1, 1024, sizeof(int) * 2 * (size_t)n_exp, stream, ids, n_pairs, n_exp, k,
              tile, *o);
    return cudaGetLastError();
}

extern "C" int hm_cu_moe_max_tiles(int n_pairs, int n_exp, int tile) {
    return (n_pairs + tile - 1) / tile + n_exp;
}

__global__ void moe_gid_k(const int32_t *__restrict__ ids, int n, const int32_t *__restrict__ slot,
                          int32_t *__restrict__ gid) {
    hm_pdl_start();
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p < n) gid[p] = slot[ids[p]];
}

__global__ void moe_count_k(const int32_t *__restrict__ ids, int n, int n_exp,
                            uint32_t *__restrict__ counts) {
    hm_pdl_start();
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p < n && ids[p] >= 0 && ids[p] < n_exp) atomicAdd(&counts[ids[p]], 1u);
}

extern "C" cudaError_t hm_cu_moe_count(const int32_t *ids, int n_pairs, int n_exp, uint32_t *counts,
                                       cudaStream_t stream) {
    if (n_pairs <= 0) return cudaSuccess;
    hm_launch(moe_count_k, (unsigned)((n_pairs + 255) / 256), 256, 0, stream, ids, n_pairs, n_exp,
              counts);
    return cudaGetLastError();
}

extern "C" cudaError_t hm_cu_moe_gid(const int32_t *ids, int n_pairs, const int32_t *slot_of,
                                     int32_t *gid, cudaStream_t stream) {
    if (n_pairs <= 0) return cudaSuccess;
    hm_launch(moe_gid_k, (unsigned)((n_pairs + 255) / 256), 256, 0, stream, ids, n_pairs, slot_of,
              gid);
    return cudaGetLastError();
}
