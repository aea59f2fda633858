// matvec.cu - weights of every supported type against float activations: the decode matvec
// (one warp per row, up to 8 tokens per read of the weights), the experts' per-pair matvec, and
// dequantization to floats (the GEMM path of larger batches, the embedding gather). A block's
// arithmetic is dq.h's, which the CPU tests check against the reference dequantizers.
#include <cuda_fp16.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/dq.h"
#include "cuda/kernels.h"
#include "cuda/twins.h"
#include "quant/blocks.h"
#include "quant/types.h"

// the float formats are read one element per lane (coalesced, any length); the block formats
// one 32-value chunk per lane
#define HM_CU_FLOAT(T) ((T) == HM_TYPE_F32 || (T) == HM_TYPE_F16 || (T) == HM_TYPE_BF16)

template <int T> __device__ __forceinline__ float elem(const uint8_t *row, int64_t j) {
    if (T == HM_TYPE_F32) return ((const float *)row)[j];
    if (T == HM_TYPE_F16) return hm_hd_f16_to_f32(((const uint16_t *)row)[j]);
    return hm_hd_bf16_to_f32(((const uint16_t *)row)[j]);
}

// Activations are staged in shared memory when they fit (MV_SMEM): 33 floats per 32-value
// chunk, so that the lanes of a warp, each on its own chunk, read 32 different banks (unpadded,
// every lane would hit the same bank; from global memory every lane its own cache line).
// A warp computes rpw rows one after another (rows per block MV_WARPS * rpw): one where that
// still gives MV_BLOCKS blocks, so that a decode step's small matrices (a layer's k, v, router,
// an expert's rows) spread over every SM with as many loads in flight as there are rows; up to
// MV_RPW_MAX for large ones (the output head), whose blocks each stage the activations once.
enum { MV_WARPS = 8, MV_RPW_MAX = 4, MV_BLOCKS = 1024, MV_SMEM = 48 * 1024 };
// the most weight bytes of a launch whose blocks ask L2 for their rows before hm_pdl_start
#define MV_PF_MAX ((size_t)32 << 20)

// HMOE_MV_RPW=N fixes the rows per warp and HMOE_MV_SMEM=0 reads the activations from global
// memory instead of staging them: knobs for A/B runs of the launch shape, read once
static int mv_env(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static int mv_rpw(int64_t rows) {
    static int force = -1;
    if (force < 0) force = mv_env("HMOE_MV_RPW", 0);
    if (force > 0) return force > MV_RPW_MAX ? MV_RPW_MAX : force;
    const int64_t r = rows / ((int64_t)MV_WARPS * MV_BLOCKS);
    return r < 1 ? 1 : (r > MV_RPW_MAX ? MV_RPW_MAX : (int)r);
}

static bool mv_stage(size_t bytes) {
    static int on = -1;
    if (on < 0) on = mv_env("HMOE_MV_SMEM", 1) != 0;
    return on && bytes <= MV_SMEM;
}

// Tokens per read of the weights for rows of cols values: the most of 8, 4, 2 and 1 whose
// activations stage within MV_SMEM (8 where none do, or staging is off)
static int mv_group(int64_t cols) {
    for (int g = HM_CU_MATVEC_MAX; g > 1; g /= 2)
        if (mv_stage(sizeof(float) * (size_t)((cols + 31) / 32 * 33) * (size_t)g)) return g;
    return mv_stage(sizeof(float) * (size_t)((cols + 31) / 32 * 33)) ? 1 : HM_CU_MATVEC_MAX;
}

// element j of an activation row: padded in shared memory, plain in global
template <bool SH> __device__ __forceinline__ int64_t xi(int64_t j) {
    return SH ? (j >> 5) * 33 + (j & 31) : j;
}

// acc[t] = row . x[t] for t < n (n <= NT), by one warp; the sums are in every lane. Float rows
// whose length is a multiple of 32 take the chunk path as the block formats do.
template <int T, int NT, bool SH>
__device__ __forceinline__ void row_dot(const uint8_t *__restrict__ row, int64_t cols,
                                        const float *__restrict__ x, int64_t xs, int n,
                                        float acc[NT]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    if (HM_CU_FLOAT(T) && (cols & 31)) {
        /* one value per lane: rows of any length (a lane per 32-value chunk below issues its 32
         * loads at once, where this loop waits for each) */
        for (int64_t j = lane; j < cols; j += 32) {
            const float v = elem<T>(row, j);
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (t < n) acc[t] = fmaf(v, x[t * xs + xi<SH>(j)], acc[t]);
        }
    } else {
        const int64_t nch = cols / 32;
        for (int64_t c = lane; c < nch; c += 32) {
            float v[32];
            hm_dq32(T, row, c, v);
            const float *xc = x + c * (SH ? 33 : 32);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= n) break;
                float s = 0.0f;
#pragma unroll
                for (int e = 0; e < 32; e++) s = fmaf(v[e], xc[t * xs + e], s);
                acc[t] += s;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = hm_warp_sum(acc[t]);
}

// n rows of x (stride xs) into the block's shared memory, padded (xi<true>), rows xst apart
__device__ __forceinline__ void stage_x(float *xsh, int64_t xst, const float *__restrict__ x,
                                        int64_t xs, int n, int64_t cols) {
    const int64_t padded = (cols + 31) / 32 * 32;
    for (int t = 0; t < n; t++)
        for (int64_t j = threadIdx.x; j < padded; j += blockDim.x)
            xsh[t * xst + xi<true>(j)] = j < cols ? x[t * xs + j] : 0.0f;
    __syncthreads();
}

// rows [r0, r0 + nr) of a matrix of `rows` rows rb bytes apart into L2 (hm_prefetch_l2): a
// block's weights, asked for before hm_pdl_start
__device__ __forceinline__ void prefetch_rows(const uint8_t *data, int64_t rb, int64_t r0, int nr,
                                              int64_t rows) {
    if (r0 >= rows) return;
    const int64_t n = rows - r0 < nr ? rows - r0 : nr;
    hm_prefetch_l2(data + r0 * rb, (size_t)(n * rb));
}

// Up to HM_CU_MULTI_MAX matrices of one type and width against the same activations, each over
// its own run of blocks (a layer's q, k and v in one launch): matrix i takes blocks
// [b1[i - 1], b1[i]).
struct mv_set {
    hm_cu_w w[HM_CU_MULTI_MAX];
    float *y[HM_CU_MULTI_MAX];
    int64_t ys[HM_CU_MULTI_MAX];
    unsigned b1[HM_CU_MULTI_MAX];
    int nw;
};

// a field of matrix i of the set, selected rather than indexed (an indexed kernel parameter
// would be copied to local memory)
#define MV_SEL(m, i, f) ((i) == 0 ? (m).f[0] : ((i) == 1 ? (m).f[1] : (m).f[2]))

// MV_WARPS * rpw rows per block, rpw per warp (consecutive warps on consecutive rows). Batches
// of more than NT tokens run as ng groups of up to NT, block b taking group b % ng of row block
// b / ng: the groups of a row block run side by side, so that the weights come from DRAM once
// and from L2 for the other groups.
template <int T, int NT, bool SH>
__global__ void __launch_bounds__(MV_WARPS * 32)
    matvec_k(mv_set m, const float *__restrict__ x, int64_t xs, int n, int rpw, int ng, bool pf) {
    extern __shared__ float xsh[];
    const int64_t cols = m.w[0].cols;
    const int64_t xst = (cols + 31) / 32 * 33;
    const unsigned bx = blockIdx.x / (unsigned)ng;
    const int g0 = (int)(blockIdx.x % (unsigned)ng) * NT;
    const int i = m.nw > 1 && bx >= m.b1[0] ? (m.nw > 2 && bx >= m.b1[1] ? 2 : 1) : 0;
    const unsigned blk = bx - (i ? MV_SEL(m, i - 1, b1) : 0u);
    const uint8_t *data = (const uint8_t *)MV_SEL(m, i, w).data;
    const int64_t rows = MV_SEL(m, i, w).rows, rb = (int64_t)MV_SEL(m, i, w).row_bytes,
                  ys = MV_SEL(m, i, ys);
    if (pf) prefetch_rows(data, rb, (int64_t)blk * rpw * MV_WARPS, rpw * MV_WARPS, rows);
    hm_pdl_start();
    x += g0 * xs;
    n = n - g0 < NT ? n - g0 : NT;
    if (SH) stage_x(xsh, xst, x, xs, n, cols);
    float *y = MV_SEL(m, i, y) + g0 * ys;
    const int warp = threadIdx.x >> 5;
    for (int q = 0; q < rpw; q++) {
        const int64_t r = ((int64_t)blk * rpw + q) * MV_WARPS + warp;
        if (r >= rows) break;
        float acc[NT];
        row_dot<T, NT, SH>(data + r * rb, cols, SH ? xsh : x, SH ? xst : xs, n, acc);
        if ((threadIdx.x & 31) == 0)
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (t < n) y[t * ys + r] = acc[t];
    }
}

// The experts' weighted sum on the way out of down (hm_cu_matvec_experts_sum): with cnt, the
// last of a token's blocks (hm_last_block) writes out[t] = sum over its k pairs of w[p] y[p], as
// hm_cu_moe_combine computes it.
struct mv_sum {
    unsigned *cnt; // per token; NULL: no sum
    const float *w;
    int k;
    float *out;
    int64_t os;
};

__device__ __forceinline__ void moe_sum(const mv_sum &s, const float *__restrict__ y, int64_t ys,
                                        int64_t h, int p) {
    const int t = p / s.k;
    if (!hm_last_block(s.cnt + t, gridDim.x * (unsigned)s.k)) return;
    const float *w = s.w + (int64_t)t * s.k;
    const float *yt = y + (int64_t)t * s.k * ys;
    for (int64_t d = threadIdx.x; d < h; d += blockDim.x) {
        float a = 0.0f;
        for (int j = 0; j < s.k; j++) a = fmaf(w[j], __ldcg(yt + j * ys + d), a);
        s.out[t * s.os + d] = a;
    }
}

template <int T, bool SH>
__global__ void __launch_bounds__(MV_WARPS * 32)
    matvec_exp_k(hm_cu_w w, const int32_t *__restrict__ ids, const float *__restrict__ x,
                 int64_t xs, int x_div, float *__restrict__ y, int64_t ys, int rpw, mv_sum sum) {
    hm_pdl_start();
    extern __shared__ float xsh[];
    const int p = blockIdx.y;
    const int id = ids[p];
    const int warp = threadIdx.x >> 5;
    if (id < 0) { /* an expert on the CPU */
        for (int q = 0; q < rpw; q++) {
            const int64_t r = ((int64_t)blockIdx.x * rpw + q) * MV_WARPS + warp;
            if (r < w.rows && (threadIdx.x & 31) == 0) y[(int64_t)p * ys + r] = 0.0f;
        }
    } else {
        const float *xp = x + (int64_t)(p / x_div) * xs;
        if (SH) stage_x(xsh, 0, xp, 0, 1, w.cols);
        for (int q = 0; q < rpw; q++) {
            const int64_t r = ((int64_t)blockIdx.x * rpw + q) * MV_WARPS + warp;
            if (r >= w.rows) break;
            const uint8_t *row =
                (const uint8_t *)w.data + (size_t)id * w.estride + r * (int64_t)w.row_bytes;
            float acc[1];
            row_dot<T, 1, SH>(row, w.cols, SH ? xsh : xp, 0, 1, acc);
            if ((threadIdx.x & 31) == 0) y[(int64_t)p * ys + r] = acc[0];
        }
    }
    if (sum.cnt) moe_sum(sum, y, ys, w.rows, p);
}

// a dequantized value as the destination holds it: float, or IEEE half rounded to nearest even
__device__ __forceinline__ void dq_put(float *d, float v) {
    *d = v;
}
__device__ __forceinline__ void dq_put(__half *d, float v) {
    *d = __float2half_rn(v);
}

// 32 dequantized values as the destination holds them, in 16-byte stores where it is aligned
// (a lane's 32 scalar stores, 64 or 128 bytes apart across the warp, each touched a sector of
// their own)
__device__ __forceinline__ void dq_put32(float *d, const float v[32]) {
    if (((uintptr_t)d & 15) == 0) {
#pragma unroll
        for (int q = 0; q < 8; q++)
            ((float4 *)d)[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
        return;
    }
#pragma unroll
    for (int e = 0; e < 32; e++) dq_put(d + e, v[e]);
}
__device__ __forceinline__ void dq_put32(__half *d, const float v[32]) {
    if (((uintptr_t)d & 15) == 0) {
#pragma unroll
        for (int q = 0; q < 4; q++) {
            __half2 h[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                h[u] = __floats2half2_rn(v[8 * q + 2 * u], v[8 * q + 2 * u + 1]);
            ((uint4 *)d)[q] = make_uint4(*(const uint32_t *)&h[0], *(const uint32_t *)&h[1],
                                         *(const uint32_t *)&h[2], *(const uint32_t *)&h[3]);
        }
        return;
    }
#pragma unroll
    for (int e = 0; e < 32; e++) dq_put(d + e, v[e]);
}

// dst row i = W row (rows ? rows[i] : row0 + i), as floats or halves (O)
template <int T, typename O>
__global__ void __launch_bounds__(128)
    dequant_k(hm_cu_w w, const int32_t *__restrict__ rows, int64_t row0, O *__restrict__ dst) {
    hm_pdl_start();
    const int64_t i = blockIdx.x;
    const int64_t r = rows ? (int64_t)rows[i] : row0 + i;
    const uint8_t *row = (const uint8_t *)w.data + r * (int64_t)w.row_bytes;
    O *d = dst + i * w.cols;
    if (HM_CU_FLOAT(T)) {
        for (int64_t j = threadIdx.x; j < w.cols; j += blockDim.x) dq_put(d + j, elem<T>(row, j));
    } else {
        for (int64_t c = threadIdx.x; c < w.cols / 32; c += blockDim.x) {
            float v[32];
            hm_dq32(T, row, c, v);
            dq_put32(d + c * 32, v);
        }
    }
}

// Q4_K with the lanes across each super-block (HMOE_MV_Q4K=0 turns it off, for A/B):
// lane l takes code bytes 4l .. 4l + 3 of the 128, that is values 64j + o .. + 3 (low nibbles,
// scale 2j) and 64j + 32 + o .. + 3 (high nibbles, scale 2j + 1) with j = l / 8, o = 4 (l % 8);
// a warp reads a super-block's codes as one 128-byte line, its 16-byte head (d, dmin, the
// scales) as one load that every lane shares, and the activations as float4 straight from
// global memory, coalesced, so nothing is staged. A warp takes R rows at once, the activations
// loaded once for all of them, and issues the loads of Q4K_SB / R super-blocks of each row before
// it uses any: Q4K_SB super-blocks (a 2048-value row) in flight per warp, where one at a time
// waited for each.
enum { Q4K_SB = 8 };

// the code nibble in byte u of v (0..15) as a float: 2^23's exponent bits joined to it by one
// byte permute, less 2^23 (exact), where an integer conversion runs at a quarter of the rate
__device__ __forceinline__ float nib_f(uint32_t v, int u) {
    return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440u | (unsigned)u)) - 8388608.0f;
}

// hm_hd_k4_scale_min of sub-blocks 2j and 2j + 1 from the scale bytes as three words
__device__ __forceinline__ void k4_pair(uint32_t s0, uint32_t s1, uint32_t s2, int j, int sc[2],
                                        int m[2]) {
    const int sh = 16 * (j & 1);
    const uint32_t a = s0 >> sh, b = s1 >> sh, c = s2 >> sh;
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const uint32_t au = (a >> 8 * u) & 0xFF, bu = (b >> 8 * u) & 0xFF, cu = (c >> 8 * u) & 0xFF;
        sc[u] = j < 2 ? (int)(au & 63) : (int)((cu & 0xF) | (au >> 6) << 4);
        m[u] = j < 2 ? (int)(bu & 63) : (int)((cu >> 4) | (bu >> 6) << 4);
    }
}

// acc[r][t] = row r . x[t] for r < nr (<= R) rows rb bytes apart and t < n (<= NT) tokens; the
// sums are in every lane. Each value is d * q - m as one fma (within a rounding of the
// reference's product then difference).
template <int NT, int R>
__device__ __forceinline__ void q4k_dot(const uint8_t *__restrict__ row, int64_t rb, int nr,
                                        int64_t cols, const float *__restrict__ x, int64_t xs,
                                        int n, float acc[R][NT]) {
    enum { SB = Q4K_SB / R };
    const int lane = threadIdx.x & 31, j = lane >> 3, o = 4 * (lane & 7);
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    const int64_t nsb = cols / 256;
    for (int64_t s0 = 0; s0 < nsb; s0 += SB) {
        uint4 hd[R][SB];
        uint32_t qs[R][SB];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int u = 0; u < SB; u++) {
                hd[r][u] = make_uint4(0, 0, 0, 0), qs[r][u] = 0;
                if (r < nr && s0 + u < nsb) {
                    const uint8_t *b = row + r * rb + (s0 + u) * (int64_t)sizeof(hm_block_q4_K);
                    hd[r][u] = __ldg((const uint4 *)b);
                    qs[r][u] = __ldg((const uint32_t *)(b + 16) + lane);
                }
            }
#pragma unroll
        for (int u = 0; u < SB; u++) {
            if (s0 + u >= nsb) break;
            float w[R][8];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint4 h = hd[r][u];
                const float d = __half2float(__ushort_as_half((unsigned short)(h.x & 0xFFFF)));
                const float dm = __half2float(__ushort_as_half((unsigned short)(h.x >> 16)));
                int sc[2], m[2];
                k4_pair(h.y, h.z, h.w, j, sc, m);
                const float d0 = d * (float)sc[0], n0 = dm * (float)m[0];
                const float d1 = d * (float)sc[1], n1 = dm * (float)m[1];
                const uint32_t lo = qs[r][u] & 0x0F0F0F0Fu, hi = (qs[r][u] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    w[r][e] = fmaf(d0, nib_f(lo, e), -n0);
                    w[r][4 + e] = fmaf(d1, nib_f(hi, e), -n1);
                }
            }
            const int64_t c0 = (s0 + u) * 256 + 64 * j + o;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= n) break;
                const float4 xa = *(const float4 *)(x + t * xs + c0),
                             xb = *(const float4 *)(x + t * xs + c0 + 32);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float s = acc[r][t];
                    s = fmaf(w[r][0], xa.x, s), s = fmaf(w[r][1], xa.y, s);
                    s = fmaf(w[r][2], xa.z, s), s = fmaf(w[r][3], xa.w, s);
                    s = fmaf(w[r][4], xb.x, s), s = fmaf(w[r][5], xb.y, s);
                    s = fmaf(w[r][6], xb.z, s), s = fmaf(w[r][7], xb.w, s);
                    acc[r][t] = s;
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = hm_warp_sum(acc[r][t]);
}

// token groups as matvec_k's; R rows per warp
template <int NT, int R>
__global__ void __launch_bounds__(MV_WARPS * 32)
    matvec_q4k_k(hm_cu_w w, const float *__restrict__ x, int64_t xs, int n, float *__restrict__ y,
                 int64_t ys, int ng, bool pf) {
    if (pf)
        prefetch_rows((const uint8_t *)w.data, (int64_t)w.row_bytes,
                      (int64_t)(blockIdx.x / (unsigned)ng) * MV_WARPS * R, MV_WARPS * R, w.rows);
    hm_pdl_start();
    const int64_t r0 = ((int64_t)(blockIdx.x / (unsigned)ng) * MV_WARPS + (threadIdx.x >> 5)) * R;
    if (r0 >= w.rows) return;
    const int nr = w.rows - r0 < R ? (int)(w.rows - r0) : R;
    const int g0 = (int)(blockIdx.x % (unsigned)ng) * NT;
    x += g0 * xs, y += g0 * ys;
    n = n - g0 < NT ? n - g0 : NT;
    float acc[R][NT];
    q4k_dot<NT, R>((const uint8_t *)w.data + r0 * (int64_t)w.row_bytes, (int64_t)w.row_bytes, nr,
                   w.cols, x, xs, n, acc);
    if ((threadIdx.x & 31) == 0)
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (r < nr && t < n) y[t * ys + r0 + r] = acc[r][t];
}

// The experts' rows: a warp's registers hold at most eight super-blocks' loads at a time;
// launch bounds of two blocks per SM leave room for all of them to issue together (at 64
// registers the gate/up kernel issued the second to fourth only after the first one's
// arithmetic).
template <int R>
__global__ void __launch_bounds__(MV_WARPS * 32, 2)
    matvec_exp_q4k_k(hm_cu_w w, const int32_t *__restrict__ ids, const float *__restrict__ x,
                     int64_t xs, int x_div, float *__restrict__ y, int64_t ys, mv_sum sum) {
    hm_pdl_start();
    const int p = blockIdx.y, id = ids[p];
    const int64_t r0 = ((int64_t)blockIdx.x * MV_WARPS + (threadIdx.x >> 5)) * R;
    if (r0 < w.rows) {
        const int nr = w.rows - r0 < R ? (int)(w.rows - r0) : R;
        float acc[R][1] = {};
        if (id >= 0)
            q4k_dot<1, R>(
                (const uint8_t *)w.data + (size_t)id * w.estride + r0 * (int64_t)w.row_bytes,
                (int64_t)w.row_bytes, nr, w.cols, x + (int64_t)(p / x_div) * xs, 0, 1, acc);
        if ((threadIdx.x & 31) == 0)
#pragma unroll
            for (int r = 0; r < R; r++) /* 0: an expert on the CPU */
                if (r < nr) y[(int64_t)p * ys + r0 + r] = acc[r][0];
    }
    if (sum.cnt) moe_sum(sum, y, ys, w.rows, p);
}

// Q8_0 with a warp across eight 34-byte blocks at a time: lane l takes values 8 (l % 4) .. + 8
// of block l / 4 (four two-byte code loads and the block's scale), so each load instruction
// of the warp spans 272 contiguous bytes, where a lane per block spanned 1088; the activations
// come as float4 from global memory. Q8_U groups of eight blocks are loaded before any is used.
// A code byte becomes a float as nib_f's do (its sign bit flipped, then less 2^23 + 128); the
// block's sum of code x activation is scaled once.
enum { Q8_U = 4 };

__device__ __forceinline__ float i8_f(uint32_t v, int u) {
    return __uint_as_float(__byte_perm(v ^ 0x80808080u, 0x4B000000u, 0x7440u | (unsigned)u)) -
           8388736.0f;
}

template <int NT>
__device__ __forceinline__ void q8_dot(const uint8_t *__restrict__ row, int64_t cols,
                                       const float *__restrict__ x, int64_t xs, int n,
                                       float acc[NT]) {
    const int lane = threadIdx.x & 31, bl = lane >> 2, o = 8 * (lane & 3);
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    const int64_t nb = cols / 32;
    for (int64_t b0 = 0; b0 < nb; b0 += 8 * Q8_U) {
        uint32_t c[Q8_U][2];
        uint16_t dh[Q8_U];
#pragma unroll
        for (int u = 0; u < Q8_U; u++) {
            c[u][0] = c[u][1] = 0, dh[u] = 0;
            const int64_t b = b0 + 8 * u + bl;
            if (b < nb) {
                const uint16_t *q = (const uint16_t *)(row + b * 34);
                dh[u] = __ldg(q);
                const uint16_t *v = q + 1 + o / 2;
                c[u][0] = (uint32_t)__ldg(v) | (uint32_t)__ldg(v + 1) << 16;
                c[u][1] = (uint32_t)__ldg(v + 2) | (uint32_t)__ldg(v + 3) << 16;
            }
        }
#pragma unroll
        for (int u = 0; u < Q8_U; u++) {
            const int64_t b = b0 + 8 * u + bl;
            if (b >= nb)
                break; /* the lanes past the row's end (the blocks of a lane rise with u) */
            const float d = __half2float(__ushort_as_half(dh[u]));
            float v[8];
#pragma unroll
            for (int e = 0; e < 4; e++) v[e] = i8_f(c[u][0], e), v[4 + e] = i8_f(c[u][1], e);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= n) break;
                const float *xp = x + t * xs + b * 32 + o;
                const float4 xa = *(const float4 *)xp, xb = *(const float4 *)(xp + 4);
                float s = v[0] * xa.x;
                s = fmaf(v[1], xa.y, s), s = fmaf(v[2], xa.z, s), s = fmaf(v[3], xa.w, s);
                s = fmaf(v[4], xb.x, s), s = fmaf(v[5], xb.y, s), s = fmaf(v[6], xb.z, s);
                s = fmaf(v[7], xb.w, s);
                acc[t] = fmaf(d, s, acc[t]);
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = hm_warp_sum(acc[t]);
}

// matvec_k's sets and token groups on q8_dot, a row per warp
template <int NT>
__global__ void __launch_bounds__(MV_WARPS * 32)
    matvec_q8_k(mv_set m, const float *__restrict__ x, int64_t xs, int n, int ng, bool pf) {
    const unsigned bx = blockIdx.x / (unsigned)ng;
    const int g0 = (int)(blockIdx.x % (unsigned)ng) * NT;
    const int i = m.nw > 1 && bx >= m.b1[0] ? (m.nw > 2 && bx >= m.b1[1] ? 2 : 1) : 0;
    const unsigned blk = bx - (i ? MV_SEL(m, i - 1, b1) : 0u);
    if (pf)
        prefetch_rows((const uint8_t *)MV_SEL(m, i, w).data, (int64_t)MV_SEL(m, i, w).row_bytes,
                      (int64_t)blk * MV_WARPS, MV_WARPS, MV_SEL(m, i, w).rows);
    hm_pdl_start();
    x += g0 * xs;
    n = n - g0 < NT ? n - g0 : NT;
    const int64_t r = (int64_t)blk * MV_WARPS + (threadIdx.x >> 5);
    if (r >= MV_SEL(m, i, w).rows) return;
    const int64_t ys = MV_SEL(m, i, ys);
    float acc[NT];
    q8_dot<NT>((const uint8_t *)MV_SEL(m, i, w).data + r * (int64_t)MV_SEL(m, i, w).row_bytes,
               m.w[0].cols, x, xs, n, acc);
    float *y = MV_SEL(m, i, y) + g0 * ys;
    if ((threadIdx.x & 31) == 0)
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (t < n) y[t * ys + r] = acc[t];
}

// matvec_q8_k on Q8_0 activations, as the CPU multiplies Q8_0 rows (dq.h's Q8_0 x Q8_0
// section): each block quantizes its tokens' activations into shared memory (the CPU's codes
// and half-rounded scales), then a lane's eight code products are two dp4a, scaled once
// (hm_hd_q8_0_share); a row's sum has the bits of hm_hd_q8_0_q8_0_row.

// n rows of x (16-byte aligned, xs apart) as Q8_0 codes [n][cols] and scales [n][cols / 32]
// in shared memory: eight lanes a block, four values each (a block's largest magnitude over
// three exchanges), four blocks a warp at a time; ends at a barrier
__device__ __forceinline__ void q80_stage(uint8_t *sh, const float *__restrict__ x, int64_t xs,
                                          int n, int64_t cols) {
    int8_t *qs = (int8_t *)sh;
    float *d = (float *)(sh + (int64_t)n * cols);
    const int lane = threadIdx.x & 31;
    const int64_t nb = cols / 32, total = (int64_t)n * nb;
    for (int64_t b0 = (int64_t)(threadIdx.x >> 5) * 4; b0 < total; b0 += 4 * (blockDim.x >> 5)) {
        const int64_t b = b0 + (lane >> 3), t = b / nb, c = b - t * nb;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (b < total) v = *(const float4 *)(x + t * xs + c * 32 + 4 * (lane & 7));
        /* from 0, as the CPU's fmaxf chain: a NaN never becomes the maximum */
        float am = fmaxf(fmaxf(fmaxf(fmaxf(0.0f, fabsf(v.x)), fabsf(v.y)), fabsf(v.z)), fabsf(v.w));
#pragma unroll
        for (int o = 4; o; o >>= 1) am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
        const float dd = am / 127.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
        const uint32_t q = (uint32_t)(hm_hd_q8k_code(id, v.x) & 0xFF) |
                           (uint32_t)(hm_hd_q8k_code(id, v.y) & 0xFF) << 8 |
                           (uint32_t)(hm_hd_q8k_code(id, v.z) & 0xFF) << 16 |
                           (uint32_t)(hm_hd_q8k_code(id, v.w) & 0xFF) << 24;
        if (b < total) {
            *(uint32_t *)(qs + t * cols + c * 32 + 4 * (lane & 7)) = q;
            if (!(lane & 7)) d[b] = __half2float(__float2half_rn(dd));
        }
    }
    __syncthreads();
}

template <int NT>
__global__ void __launch_bounds__(MV_WARPS * 32)
    matvec_q8i_k(mv_set m, const float *__restrict__ x, int64_t xs, int n, int ng, bool pf) {
    extern __shared__ __align__(16) uint8_t q8s[];
    const unsigned bx = blockIdx.x / (unsigned)ng;
    const int g0 = (int)(blockIdx.x % (unsigned)ng) * NT;
    const int i = m.nw > 1 && bx >= m.b1[0] ? (m.nw > 2 && bx >= m.b1[1] ? 2 : 1) : 0;
    const unsigned blk = bx - (i ? MV_SEL(m, i - 1, b1) : 0u);
    if (pf)
        prefetch_rows((const uint8_t *)MV_SEL(m, i, w).data, (int64_t)MV_SEL(m, i, w).row_bytes,
                      (int64_t)blk * MV_WARPS, MV_WARPS, MV_SEL(m, i, w).rows);
    hm_pdl_start();
    x += g0 * xs;
    n = n - g0 < NT ? n - g0 : NT;
    const int64_t r = (int64_t)blk * MV_WARPS + (threadIdx.x >> 5), cols = m.w[0].cols;
    const bool has = r < MV_SEL(m, i, w).rows;
    const uint8_t *row =
        (const uint8_t *)MV_SEL(m, i, w).data + (has ? r : 0) * (int64_t)MV_SEL(m, i, w).row_bytes;
    const int lane = threadIdx.x & 31, bl = lane >> 2, o = 8 * (lane & 3);
    const int64_t nb = cols / 32;
    uint32_t c[Q8_U][2];
    uint16_t dh[Q8_U];
    // one round's codes and scales (four groups of eight blocks), as q8_dot loads them
    auto load = [&](int64_t b0) {
#pragma unroll
        for (int u = 0; u < Q8_U; u++) {
            c[u][0] = c[u][1] = 0, dh[u] = 0;
            const int64_t b = b0 + 8 * u + bl;
            if (has && b < nb) {
                const uint16_t *q = (const uint16_t *)(row + b * 34);
                dh[u] = __ldg(q);
                const uint16_t *v = q + 1 + o / 2;
                c[u][0] = (uint32_t)__ldg(v) | (uint32_t)__ldg(v + 1) << 16;
                c[u][1] = (uint32_t)__ldg(v + 2) | (uint32_t)__ldg(v + 3) << 16;
            }
        }
    };
    load(0);
    q80_stage(q8s, x, xs, n, cols);
    if (!has) return;
    const int8_t *xq = (const int8_t *)q8s;
    const float *xd = (const float *)(q8s + (int64_t)n * cols);
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    for (int64_t b0 = 0; b0 < nb; b0 += 8 * Q8_U) {
        if (b0) load(b0);
#pragma unroll
        for (int u = 0; u < Q8_U; u++) {
            const int64_t b = b0 + 8 * u + bl;
            if (b >= nb) break;
            const float dw = __half2float(__ushort_as_half(dh[u]));
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= n) break;
                const uint2 xv = *(const uint2 *)(xq + t * cols + b * 32 + o);
                acc[t] += hm_hd_q8_0_share(dw, xd[t * nb + b], c[u][0], c[u][1], xv.x, xv.y);
            }
        }
    }
    const int64_t ys = MV_SEL(m, i, ys);
    float *y = MV_SEL(m, i, y) + g0 * ys;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        acc[t] = hm_warp_sum(acc[t]);
        if (lane == 0 && t < n) y[t * ys + r] = acc[t];
    }
}

// The experts' gate and up in one launch, their activation on the way out: warps 0-3 take
// gate rows, warps 4-7 the same up rows (rpw each), and the block's shared memory joins them.
// Each product, its bias and the activation are computed as hm_cu_matvec_experts,
// hm_cu_expert_bias and hm_cu_glu compute them, so the result has their bits.
enum { GLU_ROWS = MV_WARPS / 2 };

struct mv_glu {
    hm_cu_w w[2];         // gate, up
    const float *bias[2]; // [places][rows] or NULL
    int act;
    float alpha, limit;
};

// a block's n rows from r0 of an expert on the CPU (its gate and up are 0, and so their act)
__device__ __forceinline__ void glu_zero(float *gp, int64_t r0, int n, int64_t rows) {
    for (int j = threadIdx.x; j < n; j += blockDim.x)
        if (r0 + j < rows) gp[r0 + j] = 0.0f;
}

// Once a block knows its pair's expert: its own gate and up rows [r0, r0 + nr) into L2, so that
// the warps' later super-blocks come from there.
__device__ __forceinline__ void glu_prefetch(const mv_glu &a, int id, int64_t r0, int64_t nr) {
    const int64_t rows = a.w[0].rows, n = rows - r0 < nr ? rows - r0 : nr;
    if (n > 0)
        for (int h = 0; h < 2; h++)
            hm_prefetch_l2((const uint8_t *)a.w[h].data + (size_t)id * a.w[h].estride +
                               r0 * (int64_t)a.w[h].row_bytes,
                           (size_t)(n * (int64_t)a.w[h].row_bytes));
}

template <int T, bool SH>
__global__ void __launch_bounds__(MV_WARPS * 32)
    matvec_exp_glu_k(mv_glu a, const int32_t *__restrict__ ids, const float *__restrict__ x,
                     int64_t xs, int x_div, float *__restrict__ g, int64_t gs, int rpw) {
    hm_pdl_start();
    extern __shared__ float xsh[];
    __shared__ float res[2][GLU_ROWS * MV_RPW_MAX];
    const int p = blockIdx.y, id = ids[p];
    const int warp = threadIdx.x >> 5, h = warp / GLU_ROWS, wr = warp % GLU_ROWS;
    const int64_t rows = a.w[0].rows, r0 = (int64_t)blockIdx.x * rpw * GLU_ROWS;
    float *gp = g + (int64_t)p * gs;
    if (id < 0) { /* an expert on the CPU: act(0, 0) = 0 */
        glu_zero(gp, r0, GLU_ROWS * rpw, rows);
        return;
    }
    glu_prefetch(a, id, r0, (int64_t)GLU_ROWS * rpw);
    const float *xp = x + (int64_t)(p / x_div) * xs;
    if (SH) stage_x(xsh, 0, xp, 0, 1, a.w[0].cols);
    const uint8_t *base = (const uint8_t *)(h ? a.w[1].data : a.w[0].data) +
                          (size_t)id * (h ? a.w[1].estride : a.w[0].estride);
    const int64_t rb = (int64_t)(h ? a.w[1].row_bytes : a.w[0].row_bytes);
    const float *bias = h ? a.bias[1] : a.bias[0];
    for (int q = 0; q < rpw; q++) {
        const int64_t r = r0 + q * GLU_ROWS + wr;
        if (r >= rows) break;
        float acc[1];
        row_dot<T, 1, SH>(base + r * rb, a.w[0].cols, SH ? xsh : xp, 0, 1, acc);
        if ((threadIdx.x & 31) == 0) {
            float v = acc[0];
            if (bias) v += bias[(int64_t)id * rows + r];
            res[h][q * GLU_ROWS + wr] = v;
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < GLU_ROWS * rpw; j += blockDim.x)
        if (r0 + j < rows) gp[r0 + j] = hm_hd_glu(a.act, res[0][j], res[1][j], a.alpha, a.limit);
}

// A warp's sums of rows rw .. rw + nr (in every lane) plus their biases into its place of the
// block's results (lane 0)
template <int R>
__device__ __forceinline__ void glu_put(const float v[R], const float *bias, int id, int64_t rows,
                                        int64_t rw, int nr, float *res) {
    if ((threadIdx.x & 31) == 0)
#pragma unroll
        for (int i = 0; i < R; i++) {
            if (i >= nr) break;
            res[i] = bias ? v[i] + bias[(int64_t)id * rows + rw + i] : v[i];
        }
}

// after the block's barrier: the activation of each of its rows' gate and up
template <int R>
__device__ __forceinline__ void glu_out(const mv_glu &a, const float (*res)[GLU_ROWS * R],
                                        int64_t r0, int64_t rows, float *gp) {
    __syncthreads();
    for (int j = threadIdx.x; j < GLU_ROWS * R; j += blockDim.x)
        if (r0 + j < rows) gp[r0 + j] = hm_hd_glu(a.act, res[0][j], res[1][j], a.alpha, a.limit);
}

// the same on the Q4_K lane layout (launch bounds as matvec_exp_q4k_k's): warp wr of each half
// takes rows r0 + R wr .. + R at once
template <int R>
__global__ void __launch_bounds__(MV_WARPS * 32, 2)
    matvec_exp_glu_q4k_k(mv_glu a, const int32_t *__restrict__ ids, const float *__restrict__ x,
                         int64_t xs, int x_div, float *__restrict__ g, int64_t gs) {
    __shared__ float res[2][GLU_ROWS * R];
    hm_pdl_start();
    const int p = blockIdx.y, id = ids[p];
    const int warp = threadIdx.x >> 5, h = warp / GLU_ROWS, wr = warp % GLU_ROWS;
    const int64_t rows = a.w[0].rows, r0 = (int64_t)blockIdx.x * R * GLU_ROWS;
    float *gp = g + (int64_t)p * gs;
    if (id < 0) { /* an expert on the CPU: act(0, 0) = 0 */
        glu_zero(gp, r0, GLU_ROWS * R, rows);
        return;
    }
    glu_prefetch(a, id, r0, (int64_t)GLU_ROWS * R);
    const int64_t rw = r0 + (int64_t)wr * R;
    if (rw < rows) {
        const int nr = rows - rw < R ? (int)(rows - rw) : R;
        const int64_t rb = (int64_t)(h ? a.w[1].row_bytes : a.w[0].row_bytes);
        const uint8_t *base = (const uint8_t *)(h ? a.w[1].data : a.w[0].data) +
                              (size_t)id * (h ? a.w[1].estride : a.w[0].estride);
        const float *bias = h ? a.bias[1] : a.bias[0];
        float acc[R][1], v[R];
        q4k_dot<1, R>(base + rw * rb, rb, nr, a.w[0].cols, x + (int64_t)(p / x_div) * xs, 0, 1,
                      acc);
#pragma unroll
        for (int i = 0; i < R; i++) v[i] = acc[i][0];
        glu_put<R>(v, bias, id, rows, rw, nr, res[h] + wr * R);
    }
    glu_out<R>(a, res, r0, rows, gp);
}

// ---- Q4_K experts on Q8_K activations ------------------------------------------------------
// The CPU's expert engine multiplies Q4_K rows by activations quantized to Q8_K (dq.h's
// Q4_K x Q8_K section); these kernels do the same. Each block first quantizes its pair's
// activations into shared memory, bit for bit the CPU's codes: every block of a pair does it
// again (a warp a super-block, in the shadow of its first weight loads), where quantizing
// once would cost a launch and a round trip through memory on the step's critical path. Then a lane
// takes 16 code bytes of a super-block in eight 4-byte integer products (dp4a) and scales them once
// (hm_hd_q4k_q8k_share): about a fifth of the float kernels' instructions a weight, whose
// dequantization kept one token's experts well below the memory's rate. A row's sum has the bits
// of hm_hd_q4k_q8k_row whatever the rows per warp.
struct q8k_sh {
    const int8_t *qs; // [nsb][256] codes
    const float *d;   // [nsb]
    const int *bs;    // [nsb][16] sums of 16 codes
};

// x (nsb super-blocks, 16-byte aligned) as Q8_K codes in shared memory: warp w quantizes
// super-blocks w, w + warps, .., lane l its values 8 l .. 8 l + 7; the block must reach it
// together (it ends at a barrier)
__device__ __forceinline__ q8k_sh q8k_stage(uint8_t *sh, const float *__restrict__ x, int nsb) {
    int8_t *qs = (int8_t *)sh;
    float *d = (float *)(sh + 256 * nsb);
    int *bs = (int *)(d + nsb);
    const int lane = threadIdx.x & 31;
    for (int s = threadIdx.x >> 5; s < nsb; s += blockDim.x >> 5) {
        const float4 a = *(const float4 *)(x + 256 * s + 8 * lane),
                     b = *(const float4 *)(x + 256 * s + 8 * lane + 4);
        const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        float am = 0.0f, mx = 0.0f; /* the largest magnitude, the first value of it */
        int ai = 256;
#pragma unroll
        for (int e = 0; e < 8; e++)
            if (fabsf(v[e]) > am) am = fabsf(v[e]), mx = v[e], ai = 8 * lane + e;
#pragma unroll
        for (int o = 16; o; o >>= 1) {
            const float oa = __shfl_xor_sync(0xffffffffu, am, o),
                        om = __shfl_xor_sync(0xffffffffu, mx, o);
            const int oi = __shfl_xor_sync(0xffffffffu, ai, o);
            if (oa > am || (oa == am && oi < ai)) am = oa, mx = om, ai = oi;
        }
        const float is = am == 0.0f ? 0.0f : -127.0f / mx;
        uint32_t c[2] = {0, 0};
        int sum = 0;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const int q = hm_hd_q8k_code(is, v[e]);
            c[e >> 2] |= (uint32_t)(q & 0xFF) << 8 * (e & 3);
            sum += q;
        }
        *(uint2 *)(qs + 256 * s + 8 * lane) = make_uint2(c[0], c[1]);
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        if (!(lane & 1)) bs[16 * s + lane / 2] = sum;
        if (!lane) d[s] = am == 0.0f ? 0.0f : 1.0f / is;
    }
    __syncthreads();
    return q8k_sh{qs, d, bs};
}

// Lane (j, h)'s activations of super-block s for hm_hd_q4k_q8k_share: its 16 code bytes of
// sub-blocks 2j and 2j + 1, their 16-value sums and the block's scale. Lanes of j >= 2 read the
// high half first, so that each of a group's two 16-byte shared loads falls on 32 distinct banks.
struct i8_xs {
    uint32_t xl[4], xh[4];
    int bl, bh;
    float d;
};

__device__ __forceinline__ i8_xs i8_x(const q8k_sh &x, int s, int lane) {
    const int j = (lane >> 1) & 3, h = lane & 1;
    const int8_t *xq = x.qs + 256 * s + 64 * j + 16 * h;
    const uint4 xa = *(const uint4 *)(xq + (j >= 2 ? 32 : 0)),
                xb = *(const uint4 *)(xq + (j >= 2 ? 0 : 32));
    const uint4 l4 = j >= 2 ? xb : xa, h4 = j >= 2 ? xa : xb;
    return i8_xs{{l4.x, l4.y, l4.z, l4.w},
                 {h4.x, h4.y, h4.z, h4.w},
                 x.bs[16 * s + 4 * j + h],
                 x.bs[16 * s + 4 * j + 2 + h],
                 x.d[s]};
}

// lane (j, h)'s share of a super-block whose first 16 bytes are w and whose code bytes
// 32 j + 16 h .. + 16 are q, times the activations xs (i8_x)
__device__ __forceinline__ float i8_share(const uint4 &w, const uint4 &q, const i8_xs &xs,
                                          int lane) {
    const int j = (lane >> 1) & 3;
    int sc[2], m[2];
    k4_pair(w.y, w.z, w.w, j, sc, m);
    const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
    return hm_hd_q4k_q8k_share(__half2float(__ushort_as_half((unsigned short)(w.x & 0xFFFF))),
                               __half2float(__ushort_as_half((unsigned short)(w.x >> 16))), sc[0],
                               m[0], sc[1], m[1], qw, xs.xl, xs.xh, xs.bl, xs.bh, xs.d);
}

// A warp's nr (<= R) rows rb bytes apart of nsb super-blocks times x: lane (j, h) of group g
// takes super-blocks g, g + 4, .. of each row, U of a row at a time for all rows together
// (load, then add). The kernels issue the first round's loads before they quantize the
// activations.
template <int R, int U> struct q4k_i8 {
    uint4 hd[R][U], q[R][U];
    float acc[R];

    __device__ __forceinline__ void load(const uint8_t *__restrict__ row, int64_t rb, int nr,
                                         int nsb, int s0) {
        const int lane = threadIdx.x & 31, g = lane >> 3, j = (lane >> 1) & 3, h = lane & 1;
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int s = s0 + 4 * u + g;
                hd[r][u] = q[r][u] = make_uint4(0, 0, 0, 0);
                if (r < nr && s < nsb) {
                    const uint8_t *b = row + r * rb + (int64_t)s * (int64_t)sizeof(hm_block_q4_K);
                    hd[r][u] = __ldg((const uint4 *)b);
                    q[r][u] = __ldg((const uint4 *)(b + 16 + 32 * j + 16 * h));
                }
            }
    }

    __device__ __forceinline__ void add(int nr, int nsb, int s0, const q8k_sh &x) {
        const int lane = threadIdx.x & 31, g = lane >> 3;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int s = s0 + 4 * u + g;
            if (s >= nsb) break;
            const i8_xs xs = i8_x(x, s, lane);
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r >= nr) break;
                acc[r] += i8_share(hd[r][u], q[r][u], xs, lane);
            }
        }
    }

    // after the first round's load: every round's sums, then acc[r] = row r . x in every lane
    __device__ __forceinline__ void finish(const uint8_t *__restrict__ row, int64_t rb, int nr,
                                           int nsb, const q8k_sh &x) {
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = 0.0f;
        add(nr, nsb, 0, x);
        for (int s0 = 4 * U; s0 < nsb; s0 += 4 * U) {
            load(row, rb, nr, nsb, s0);
            add(nr, nsb, s0, x);
        }
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = hm_warp_sum(acc[r]);
    }
};

// Rows of at most three super-blocks (the experts' down at 768 columns), where q4k_i8 leaves
// group 3 without one: a warp's nr (<= R) consecutive rows are nr nsb consecutive super-blocks,
// item i = r nsb + s, and group g takes items g, g + 4, .. (K of them at most), so that the
// warp's loads and shares spread over all four groups. A row's items fall in distinct groups and
// its super-blocks 0 and 2 in groups two apart, which hm_warp_sum's first exchange pairs: each
// row's sum adds the same terms in the same pairs as q4k_i8's, with the bits of
// hm_hd_q4k_q8k_row (the other groups add +0, as q4k_i8's group 3 does).
template <int R> struct q4k_i8_flat {
    static constexpr int K = (3 * R + 3) / 4;
    uint4 hd[K], q[K];
    float acc[R];

    __device__ __forceinline__ void load(const uint8_t *__restrict__ row, int nr, int nsb) {
        const int lane = threadIdx.x & 31, g = lane >> 3, j = (lane >> 1) & 3, h = lane & 1;
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int i = g + 4 * k;
            hd[k] = q[k] = make_uint4(0, 0, 0, 0);
            if (i < nr * nsb) {
                const uint8_t *b = row + (int64_t)i * (int64_t)sizeof(hm_block_q4_K);
                hd[k] = __ldg((const uint4 *)b);
                q[k] = __ldg((const uint4 *)(b + 16 + 32 * j + 16 * h));
            }
        }
    }

    // after load: acc[r] = row r . x in every lane
    __device__ __forceinline__ void finish(int nr, int nsb, const q8k_sh &x) {
        const int lane = threadIdx.x & 31, g = lane >> 3;
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = 0.0f;
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int i = g + 4 * k;
            if (i >= nr * nsb) break;
            const int ri = i / nsb;
            const float v = i8_share(hd[k], q[k], i8_x(x, i - ri * nsb, lane), lane);
#pragma unroll
            for (int r = 0; r < R; r++)
                if (r == ri) acc[r] += v;
        }
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = hm_warp_sum(acc[r]);
    }
};

// The experts' gate and up with their activation as matvec_exp_glu_q4k_k (warp wr of each half
// takes rows r0 + R wr .. + R), on Q8_K activations
template <int R>
__global__ void __launch_bounds__(MV_WARPS * 32, 2)
    matvec_exp_glu_i8_k(mv_glu a, const int32_t *__restrict__ ids, const float *__restrict__ x,
                        int64_t xs, int x_div, float *__restrict__ g, int64_t gs) {
    extern __shared__ __align__(16) uint8_t q8s[];
    __shared__ float res[2][GLU_ROWS * R];
    hm_pdl_start();
    const int p = blockIdx.y, id = ids[p];
    const int warp = threadIdx.x >> 5, h = warp / GLU_ROWS, wr = warp % GLU_ROWS;
    const int64_t rows = a.w[0].rows, r0 = (int64_t)blockIdx.x * R * GLU_ROWS;
    float *gp = g + (int64_t)p * gs;
    if (id < 0) { /* an expert on the CPU: act(0, 0) = 0 */
        glu_zero(gp, r0, GLU_ROWS * R, rows);
        return;
    }
    glu_prefetch(a, id, r0, (int64_t)GLU_ROWS * R);
    const int nsb = (int)(a.w[0].cols / 256);
    const int64_t rw = r0 + (int64_t)wr * R;
    const int nr = rw >= rows ? 0 : (rows - rw < R ? (int)(rows - rw) : R);
    const int64_t rb = (int64_t)(h ? a.w[1].row_bytes : a.w[0].row_bytes);
    const uint8_t *row = (const uint8_t *)(h ? a.w[1].data : a.w[0].data) +
                         (size_t)id * (h ? a.w[1].estride : a.w[0].estride) + rw * rb;
    q4k_i8<R, 2> k;
    k.load(row, rb, nr, nsb, 0);
    const q8k_sh xq = q8k_stage(q8s, x + (int64_t)(p / x_div) * xs, nsb);
    if (nr > 0) {
        const float *bias = h ? a.bias[1] : a.bias[0];
        k.finish(row, rb, nr, nsb, xq);
        glu_put<R>(k.acc, bias, id, rows, rw, nr, res[h] + wr * R);
    }
    glu_out<R>(a, res, r0, rows, gp);
}

// a warp's nr rows' sums (in every lane) into y[0 .. nr), by lane 0
template <int R> __device__ __forceinline__ void i8_put(const float (&acc)[R], int nr, float *y) {
    if ((threadIdx.x & 31) == 0)
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r < nr) y[r] = acc[r];
}

// The experts' rows as matvec_exp_q4k_k's (R a warp), on Q8_K activations; the block's rows
// asked of L2 and each warp's first loads issued before the activations are quantized. FL: rows
// of at most three super-blocks, nsb 144 bytes each, in q4k_i8_flat's layout.
template <int R, bool FL>
__global__ void __launch_bounds__(MV_WARPS * 32, 2)
    matvec_exp_i8_k(hm_cu_w w, const int32_t *__restrict__ ids, const float *__restrict__ x,
                    int64_t xs, int x_div, float *__restrict__ y, int64_t ys, mv_sum sum) {
    extern __shared__ __align__(16) uint8_t q8s[];
    hm_pdl_start();
    const int p = blockIdx.y, id = ids[p];
    const int64_t rb0 = (int64_t)blockIdx.x * MV_WARPS * R;
    const int64_t r0 = rb0 + (int64_t)(threadIdx.x >> 5) * R;
    const int nsb = (int)(w.cols / 256);
    if (id >= 0) {
        const uint8_t *base = (const uint8_t *)w.data + (size_t)id * w.estride;
        const int64_t nb = w.rows - rb0 < MV_WARPS * R ? w.rows - rb0 : MV_WARPS * R;
        hm_prefetch_l2(base + rb0 * (int64_t)w.row_bytes, (size_t)(nb * (int64_t)w.row_bytes));
        const int nr = r0 >= w.rows ? 0 : (w.rows - r0 < R ? (int)(w.rows - r0) : R);
        const uint8_t *row = base + r0 * (int64_t)w.row_bytes;
        float *yr = y + (int64_t)p * ys + r0;
        if constexpr (FL) {
            q4k_i8_flat<R> k;
            k.load(row, nr, nsb);
            const q8k_sh xq = q8k_stage(q8s, x + (int64_t)(p / x_div) * xs, nsb);
            if (nr > 0) k.finish(nr, nsb, xq), i8_put<R>(k.acc, nr, yr);
        } else {
            q4k_i8<R, 1> k;
            k.load(row, (int64_t)w.row_bytes, nr, nsb, 0);
            const q8k_sh xq = q8k_stage(q8s, x + (int64_t)(p / x_div) * xs, nsb);
            if (nr > 0) k.finish(row, (int64_t)w.row_bytes, nr, nsb, xq), i8_put<R>(k.acc, nr, yr);
        }
    } else if (r0 < w.rows && (threadIdx.x & 31) == 0) { /* an expert on the CPU */
        for (int r = 0; r < R && r0 + r < w.rows; r++) y[(int64_t)p * ys + r0 + r] = 0.0f;
    }
    if (sum.cnt) moe_sum(sum, y, ys, w.rows, p);
}

// x's rows as Q8_K blocks (hm_block_q8_K), one block of 256 threads per row: q8k_stage's codes
__global__ void __launch_bounds__(256) quant_q8k_k(const float *__restrict__ x, int64_t xs,
                                                   int64_t cols, hm_block_q8_K *__restrict__ out) {
    extern __shared__ __align__(16) uint8_t q8s[];
    hm_pdl_start();
    const int nsb = (int)(cols / 256);
    const q8k_sh q = q8k_stage(q8s, x + (int64_t)blockIdx.x * xs, nsb);
    hm_block_q8_K *o = out + (int64_t)blockIdx.x * nsb;
    for (int i = threadIdx.x; i < nsb * 256; i += blockDim.x) o[i / 256].qs[i % 256] = q.qs[i];
    for (int i = threadIdx.x; i < nsb * 16; i += blockDim.x)
        o[i / 16].bsums[i % 16] = (int16_t)q.bs[i];
    for (int i = threadIdx.x; i < nsb; i += blockDim.x) o[i].d = q.d[i];
}

// The experts' tiles of up to HM_CU_MATVEC_MAX places of one expert (hm_cu_moe_sort): block
// (row block, tile t) takes expert tile_e[t]'s rows against items tile_i0[t] .. + tile_n[t], whose
// activations are consecutive rows of x. Each product is hm_cu_matvec's for more than two tokens.
template <int T, bool SH>
__global__ void __launch_bounds__(MV_WARPS * 32) mmv_tiles_k(hm_cu_w w, hm_cu_mmq_args a, int rpw) {
    hm_pdl_start();
    extern __shared__ float xsh[];
    const int t = blockIdx.y;
    if (t >= *a.n_tiles) return;
    const int i0 = a.tile_i0[t], ni = a.tile_n[t];
    const int64_t cols = w.cols, xst = (cols + 31) / 32 * 33;
    const float *x = a.x + (int64_t)i0 * a.xs;
    if (SH) stage_x(xsh, xst, x, a.xs, ni, cols);
    const uint8_t *base = (const uint8_t *)w.data + (size_t)a.tile_e[t] * w.estride;
    float *y = a.y + (int64_t)i0 * a.ys;
    const int warp = threadIdx.x >> 5;
    for (int q = 0; q < rpw; q++) {
        const int64_t r = ((int64_t)blockIdx.x * rpw + q) * MV_WARPS + warp;
        if (r >= w.rows) break;
        float acc[HM_CU_MATVEC_MAX];
        row_dot<T, HM_CU_MATVEC_MAX, SH>(base + r * (int64_t)w.row_bytes, cols, SH ? xsh : x,
                                         SH ? xst : a.xs, ni, acc);
        if ((threadIdx.x & 31) == 0)
#pragma unroll
            for (int j = 0; j < HM_CU_MATVEC_MAX; j++)
                if (j < ni) y[j * a.ys + r] = acc[j];
    }
}

// the lane layout above where asked for and the shapes allow it (whole super-blocks, 16-byte
// aligned rows and activations)
static bool mv_q4k(const hm_cu_w *w, const float *x, int64_t xs) {
    if (w->type != HM_TYPE_Q4_K || w->cols % 256 || ((uintptr_t)w->data & 15) ||
        w->row_bytes % 16 || w->estride % 16 || ((uintptr_t)x & 15) || xs % 4)
        return false;
    return !hm_cu_env_is("HMOE_MV_Q4K", "0"); /* read per launch */
}

// q8_dot where the shapes allow it (2-byte aligned blocks, 16-byte aligned activations);
// HMOE_MV_Q8=0 keeps the chunk per lane (A/B)
static bool mv_q8(const hm_cu_w *w, const float *x, int64_t xs) {
    if (w->type != HM_TYPE_Q8_0 || ((uintptr_t)w->data & 1) || w->row_bytes % 2 ||
        ((uintptr_t)x & 15) || xs % 4)
        return false;
    return !hm_cu_env_is("HMOE_MV_Q8", "0");
}

// q8_dot's rows on Q8_0 activations (matvec_q8i_k) where HMOE_MV_Q8_I8=1 (read per launch)
static bool mv_q8_i8(void) {
    return hm_cu_env_is("HMOE_MV_Q8_I8", "1");
}

// rows per warp of the Q4_K lane layout for single tokens: 2 (HMOE_MV_Q4K_R=1|4 fixes it, for
// A/B; read per launch as mv_q4k's knob); two tokens always take 2
static int q4k_rows(void) {
    const int force = mv_env("HMOE_MV_Q4K_R", 0);
    return force == 1 || force == 4 ? force : 2;
}

// The Q4_K lane layout's experts on Q8_K activations (matvec_exp_i8_k, matvec_exp_glu_i8_k)
// where mv_q4k takes the shapes and kernels.h's hm_cu_experts_i8 holds (the codes fit in shared
// memory; HMOE_MV_Q4K_I8=0 turns it off, read per launch). HMOE_MV_I8_RG / HMOE_MV_I8_RD = 1, 2
// or 4 fix the rows per warp of gate/up (default 2) and down (default 4).
static bool mv_i8(const hm_cu_w *w) {
    return hm_cu_experts_i8(w->type, w->cols);
}

// down's rows in q4k_i8_flat's layout (HMOE_MV_I8_FLAT=0 turns it off, read per launch): at most
// three super-blocks a row, with no gap between rows
static bool mv_i8_flat(const hm_cu_w *w) {
    return w->cols <= 3 * 256 && w->row_bytes == (size_t)(w->cols / 256) * sizeof(hm_block_q4_K) &&
           !hm_cu_env_is("HMOE_MV_I8_FLAT", "0");
}

// the grid of matvec_exp_i8_k: blocks of MV_WARPS warps of R rows, one row of blocks a pair
static dim3 grid_i8(const hm_cu_w *w, int R, int np) {
    return dim3((unsigned)((w->rows + MV_WARPS * R - 1) / (MV_WARPS * R)), (unsigned)np);
}

#define I8_ROWS(F, ENV, DEF)                                                                       \
    switch (mv_env(ENV, DEF)) {                                                                    \
    case 4:                                                                                        \
        F(4);                                                                                      \
        break;                                                                                     \
    case 1:                                                                                        \
        F(1);                                                                                      \
        break;                                                                                     \
    default:                                                                                       \
        F(2);                                                                                      \
    }

// F(R) for the rows per warp R of q4k_rows
#define Q4K_ROWS(F)                                                                                \
    switch (q4k_rows()) {                                                                          \
    case 4:                                                                                        \
        F(4);                                                                                      \
        break;                                                                                     \
    case 2:                                                                                        \
        F(2);                                                                                      \
        break;                                                                                     \
    default:                                                                                       \
        F(1);                                                                                      \
    }

// shared bytes of n staged activation rows of cols values
static size_t mv_smem(int64_t cols, int n) {
    return sizeof(float) * (size_t)((cols + 31) / 32 * 33) * (size_t)n;
}

// lanes: the Q4_K lane layout, q8: q8_dot (matvec_launch has asked mv_q4k, mv_q8)
template <int T, int NT>
static void matvec_nt(const mv_set *m, const float *x, int64_t xs, int n, bool lanes, bool q8,
                      cudaStream_t s) {
    const hm_cu_w *w = &m->w[0];
    const int ng = (n + NT - 1) / NT;
    /* the weights asked of L2 before the wait where they fit well within it: a layer's
     * matrices; the output head's requests would only double its traffic */
    size_t bytes = 0;
    for (int i = 0; i < m->nw; i++) bytes += (size_t)m->w[i].rows * m->w[i].row_bytes;
    const bool pf = bytes <= MV_PF_MAX;
    if constexpr (T == HM_TYPE_Q8_0) {
        if (q8) {
            mv_set set = *m;
            unsigned blocks = 0;
            for (int i = 0; i < m->nw; i++)
                set.b1[i] = blocks += (unsigned)((m->w[i].rows + MV_WARPS - 1) / MV_WARPS);
            const size_t qsm = hm_cu_q80_smem(w->cols, NT < n ? NT : n);
            if (mv_q8_i8() && qsm <= HM_CU_SMEM_MAX)
                hm_launch(matvec_q8i_k<NT>, blocks * (unsigned)ng, MV_WARPS * 32, qsm, s, set, x,
                          xs, n, ng, pf);
            else
                hm_launch(matvec_q8_k<NT>, blocks * (unsigned)ng, MV_WARPS * 32, 0, s, set, x, xs,
                          n, ng, pf);
            return;
        }
    }
    if constexpr (NT <= 2) { /* matvec_launch takes the lanes for one or two tokens only */
        if (lanes) {
#define L(R)                                                                                       \
    hm_launch(matvec_q4k_k<NT, R>, (unsigned)((w->rows + MV_WARPS * R - 1) / (MV_WARPS * R) * ng), \
              MV_WARPS * 32, 0, s, *w, x, xs, n, m->y[0], m->ys[0], ng, pf)
            if constexpr (NT == 1) {
                Q4K_ROWS(L)
            } else {
                L(2);
            }
#undef L
            return;
        }
    }
    int64_t rows = 0;
    for (int i = 0; i < m->nw; i++) rows += m->w[i].rows;
    const int rpw = mv_rpw(rows * ng), per = MV_WARPS * rpw;
    mv_set set = *m;
    unsigned blocks = 0;
    for (int i = 0; i < m->nw; i++)
        set.b1[i] = blocks += (unsigned)((m->w[i].rows + per - 1) / per);
    const size_t sm = mv_smem(w->cols, NT < n ? NT : n); /* within MV_SMEM where mv_group can */
    blocks *= (unsigned)ng;
    if (mv_stage(sm))
        hm_launch(matvec_k<T, NT, true>, blocks, MV_WARPS * 32, sm, s, set, x, xs, n, rpw, ng, pf);
    else
        hm_launch(matvec_k<T, NT, false>, blocks, MV_WARPS * 32, 0, s, set, x, xs, n, rpw, ng, pf);
}

template <int T>
static void matvec_launch(const mv_set *m, const float *x, int64_t xs, int n, cudaStream_t s) {
    const hm_cu_w *w = &m->w[0];
    /* the Q4_K lanes for one or two tokens; more share the staged activations better (32
     * sequences on the H100: 680 tok/s on the staged path, 489 on the lanes) */
    const bool lanes = T == HM_TYPE_Q4_K && m->nw == 1 && n <= 2 && mv_q4k(w, x, xs);
    /* q8_dot for a layer's matrices; the output head's many rows run faster staged, 4 a warp */
    bool q8 = T == HM_TYPE_Q8_0;
    int64_t rows = 0;
    for (int i = 0; i < m->nw && q8; i++) q8 = mv_q8(&m->w[i], x, xs), rows += m->w[i].rows;
    q8 = q8 && rows <= HM_CU_Q8_ROWS_MAX;
    /* unstaged, each lane reads its own chunk of every row: a line per lane */
    const int g = lanes || q8 ? HM_CU_MATVEC_MAX : mv_group(w->cols);
    const int nt = n <= 1 ? 1 : (n <= 2 ? 2 : (n <= 4 ? 4 : 8));
    switch (nt < g ? nt : g) {
    case 1:
        matvec_nt<T, 1>(m, x, xs, n, lanes, q8, s);
        break;
    case 2:
        matvec_nt<T, 2>(m, x, xs, n, lanes, q8, s);
        break;
    case 4:
        matvec_nt<T, 4>(m, x, xs, n, lanes, q8, s);
        break;
    default:
        matvec_nt<T, 8>(m, x, xs, n, lanes, q8, s);
    }
}

static cudaError_t matvec_set(const mv_set *m, const float *x, int64_t xs, int n,
                              cudaStream_t stream) {
    switch (m->w[0].type) {
#define X(t)                                                                                       \
    case t:                                                                                        \
        matvec_launch<t>(m, x, xs, n, stream);                                                     \
        break;
        HM_CU_TYPES(X)
#undef X
    default:
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t hm_cu_matvec(const hm_cu_w *w, const float *x, int64_t xs, int n, float *y,
                                    int64_t ys, cudaStream_t stream) {
    if (n <= 0 || w->rows <= 0) return cudaSuccess;
    if (n > HM_CU_MATVEC_BATCH || (!HM_CU_FLOAT(w->type) && w->cols % 32))
        return cudaErrorInvalidValue;
    mv_set m = {};
    m.w[0] = *w, m.y[0] = y, m.ys[0] = ys, m.nw = 1;
    return matvec_set(&m, x, xs, n, stream);
}

extern "C" cudaError_t hm_cu_matvec_multi(const hm_cu_w *w, int nw, const float *x, int64_t xs,
                                          int n, float *const *y, const int64_t *ys,
                                          cudaStream_t stream) {
    if (nw < 1 || nw > HM_CU_MULTI_MAX) return cudaErrorInvalidValue;
    bool one = true; /* one launch: one type and width, no empty matrix, no Q4_K lane layout */
    for (int i = 0; i < nw; i++)
        one = one && w[i].type == w[0].type && w[i].cols == w[0].cols && w[i].rows > 0 &&
              !mv_q4k(&w[i], x, xs);
    if (!one || nw == 1 || n <= 0) {
        for (int i = 0; i < nw; i++) {
            const cudaError_t e = hm_cu_matvec(&w[i], x, xs, n, y[i], ys[i], stream);
            if (e != cudaSuccess) return e;
        }
        return cudaSuccess;
    }
    if (n > HM_CU_MATVEC_BATCH || (!HM_CU_FLOAT(w[0].type) && w[0].cols % 32))
        return cudaErrorInvalidValue;
    mv_set m = {};
    for (int i = 0; i < nw; i++) m.w[i] = w[i], m.y[i] = y[i], m.ys[i] = ys[i];
    m.nw = nw;
    return matvec_set(&m, x, xs, n, stream);
}

// f(p0, np) over the pairs in launches of at most 65535 (grid y), each a multiple of x_div so
// that a token's pairs stay in one
template <typename F> static void pair_chunks(int n_pairs, int x_div, F f) {
    const int step = 65535 / x_div * x_div;
    for (int p0 = 0; p0 < n_pairs; p0 += step) f(p0, n_pairs - p0 < step ? n_pairs - p0 : step);
}

static cudaError_t experts_launch(const hm_cu_w *w, const int32_t *ids, int n_pairs, const float *x,
                                  int64_t xs, int x_div, float *y, int64_t ys, const mv_sum &sum,
                                  cudaStream_t stream) {
    if (n_pairs <= 0 || w->rows <= 0) return cudaSuccess;
    if (x_div < 1 || (!HM_CU_FLOAT(w->type) && w->cols % 32)) return cudaErrorInvalidValue;
    /* the pairs multiply the blocks: rows per warp as the matrix of all of them would have */
    const int rpw = mv_rpw(w->rows * (n_pairs < 64 ? n_pairs : 64)), per = MV_WARPS * rpw;
    const unsigned gx = (unsigned)((w->rows + per - 1) / per);
    const size_t sm = mv_smem(w->cols, 1);
    const bool sh = mv_stage(sm);
    if (!hm_cu_type_ok(w->type)) return cudaErrorInvalidValue;
    const bool q4k = mv_q4k(w, x, xs), i8 = q4k && mv_i8(w), flat = i8 && mv_i8_flat(w);
    pair_chunks(n_pairs, x_div, [&](int p0, int np) {
        const int32_t *id = ids + p0;
        const float *xp = x + (int64_t)(p0 / x_div) * xs;
        float *yp = y + (int64_t)p0 * ys;
        if (q4k && i8) {
#define L(R)                                                                                       \
    (flat ? hm_launch(matvec_exp_i8_k<R, true>, grid_i8(w, R, np), MV_WARPS * 32,                  \
                      hm_cu_q8k_smem(w->cols), stream, *w, id, xp, xs, x_div, yp, ys, sum)         \
          : hm_launch(matvec_exp_i8_k<R, false>, grid_i8(w, R, np), MV_WARPS * 32,                 \
                      hm_cu_q8k_smem(w->cols), stream, *w, id, xp, xs, x_div, yp, ys, sum))
            I8_ROWS(L, "HMOE_MV_I8_RD", 4)
#undef L
            return;
        }
        if (q4k) {
#define L(R)                                                                                       \
    hm_launch(matvec_exp_q4k_k<R>,                                                                 \
              dim3((unsigned)((w->rows + MV_WARPS * R - 1) / (MV_WARPS * R)), (unsigned)np),       \
              MV_WARPS * 32, 0, stream, *w, id, xp, xs, x_div, yp, ys, sum)
            Q4K_ROWS(L)
#undef L
            return;
        }
        const dim3 grid(gx, (unsigned)np);
        switch (w->type) {
#define X(t)                                                                                       \
    case t:                                                                                        \
        if (sh)                                                                                    \
            hm_launch(matvec_exp_k<t, true>, grid, MV_WARPS * 32, sm, stream, *w, id, xp, xs,      \
                      x_div, yp, ys, rpw, sum);                                                    \
        else                                                                                       \
            hm_launch(matvec_exp_k<t, false>, grid, MV_WARPS * 32, 0, stream, *w, id, xp, xs,      \
                      x_div, yp, ys, rpw, sum);                                                    \
        break;
            HM_CU_TYPES(X)
#undef X
        }
    });
    return cudaGetLastError();
}

extern "C" cudaError_t hm_cu_matvec_experts(const hm_cu_w *w, const int32_t *ids, int n_pairs,
                                            const float *x, int64_t xs, int x_div, float *y,
                                            int64_t ys, cudaStream_t stream) {
    return experts_launch(w, ids, n_pairs, x, xs, x_div, y, ys, mv_sum{}, stream);
}

extern "C" cudaError_t hm_cu_matvec_experts_sum(const hm_cu_w *w, const int32_t *ids, int n, int k,
                                                const float *x, int64_t xs, float *y, int64_t ys,
                                                const float *wts, float *out, int64_t os,
                                                unsigned *cnt, cudaStream_t stream) {
    if (n <= 0 || w->rows <= 0) return cudaSuccess;
    if (n > HM_CU_MATVEC_MAX || k < 1 || k > 64 || !cnt) return cudaErrorInvalidValue;
    const mv_sum sum = {cnt, wts, k, out, os};
    return experts_launch(w, ids, n * k, x, xs, 1, y, ys, sum, stream);
}

extern "C" cudaError_t hm_cu_matvec_experts_glu(const hm_cu_w *wg, const hm_cu_w *wu,
                                                const float *bg, const float *bu,
                                                const int32_t *ids, int n_pairs, const float *x,
                                                int64_t xs, int x_div, int act, float alpha,
                                                float limit, float *g, int64_t gs,
                                                cudaStream_t stream) {
    if (n_pairs <= 0 || wg->rows <= 0) return cudaSuccess;
    if (x_div < 1 || act < 0 || act > 2 || wu->type != wg->type || wu->rows != wg->rows ||
        wu->cols != wg->cols || (!HM_CU_FLOAT(wg->type) && wg->cols % 32))
        return cudaErrorInvalidValue;
    const int rpw = mv_rpw(wg->rows * 2 * (n_pairs < 64 ? n_pairs : 64)), per = GLU_ROWS * rpw;
    const unsigned gx = (unsigned)((wg->rows + per - 1) / per);
    const size_t sm = mv_smem(wg->cols, 1);
    const bool sh = mv_stage(sm), q4k = mv_q4k(wg, x, xs) && mv_q4k(wu, x, xs);
    const bool i8 = q4k && mv_i8(wg);
    mv_glu a = {};
    a.w[0] = *wg, a.w[1] = *wu, a.bias[0] = bg, a.bias[1] = bu;
    a.act = act, a.alpha = alpha, a.limit = limit;
    if (!hm_cu_type_ok(wg->type)) return cudaErrorInvalidValue;
    pair_chunks(n_pairs, x_div, [&](int p0, int np) {
        const dim3 grid(gx, (unsigned)np);
        const int32_t *id = ids + p0;
        const float *xp = x + (int64_t)(p0 / x_div) * xs;
        float *gp = g + (int64_t)p0 * gs;
        if (q4k && i8) {
#define L(R)                                                                                       \
    hm_launch(matvec_exp_glu_i8_k<R>,                                                              \
              dim3((unsigned)((wg->rows + GLU_ROWS * R - 1) / (GLU_ROWS * R)), (unsigned)np),      \
              MV_WARPS * 32, hm_cu_q8k_smem(wg->cols), stream, a, id, xp, xs, x_div, gp, gs)
            I8_ROWS(L, "HMOE_MV_I8_RG", 2)
#undef L
            return;
        }
        if (q4k) {
#define L(R)                                                                                       \
    hm_launch(matvec_exp_glu_q4k_k<R>,                                                             \
              dim3((unsigned)((wg->rows + GLU_ROWS * R - 1) / (GLU_ROWS * R)), (unsigned)np),      \
              MV_WARPS * 32, 0, stream, a, id, xp, xs, x_div, gp, gs)
            Q4K_ROWS(L)
#undef L
            return;
        }
        switch (wg->type) {
#define X(t)                                                                                       \
    case t:                                                                                        \
        if (sh)                                                                                    \
            hm_launch(matvec_exp_glu_k<t, true>, grid, MV_WARPS * 32, sm, stream, a, id, xp, xs,   \
                      x_div, gp, gs, rpw);                                                         \
        else                                                                                       \
            hm_launch(matvec_exp_glu_k<t, false>, grid, MV_WARPS * 32, 0, stream, a, id, xp, xs,   \
                      x_div, gp, gs, rpw);                                                         \
        break;
            HM_CU_TYPES(X)
#undef X
        }
    });
    return cudaGetLastError();
}

extern "C" cudaError_t hm_cu_quant_q8_K(const float *x, int64_t xs, int n, int64_t cols, void *out,
                                        cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (cols <= 0 || cols % 256 || hm_cu_q8k_smem(cols) > HM_CU_SMEM_MAX || ((uintptr_t)x & 15) ||
        xs % 4 || xs < cols || ((uintptr_t)out & 3))
        return cudaErrorInvalidValue;
    hm_launch(quant_q8k_k, (unsigned)n, 256, hm_cu_q8k_smem(cols), stream, x, xs, cols,
              (hm_block_q8_K *)out);
    return cudaGetLastError();
}

extern "C" int hm_cu_mmv_tile(const hm_cu_w *w) {
    return mv_group(w->cols);
}

extern "C" cudaError_t hm_cu_mmv_tiles(const hm_cu_w *w, const hm_cu_mmq_args *a, int tile,
                                       int max_tiles, cudaStream_t stream) {
    if (w->rows <= 0 || max_tiles <= 0) return cudaSuccess;
    if (!a->tile_e || a->xrow || max_tiles > 65535 || tile < 1 || tile > HM_CU_MATVEC_MAX ||
        (!HM_CU_FLOAT(w->type) && w->cols % 32) || !hm_cu_type_ok(w->type))
        return cudaErrorInvalidValue;
    const int rpw = mv_rpw(w->rows * (max_tiles < 64 ? max_tiles : 64)), per = MV_WARPS * rpw;
    const dim3 grid((unsigned)((w->rows + per - 1) / per), (unsigned)max_tiles);
    const size_t sm = mv_smem(w->cols, tile);
    const bool sh = mv_stage(sm);
    switch (w->type) {
#define X(t)                                                                                       \
    case t:                                                                                        \
        if (sh)                                                                                    \
            hm_launch(mmv_tiles_k<t, true>, grid, MV_WARPS * 32, sm, stream, *w, *a, rpw);         \
        else                                                                                       \
            hm_launch(mmv_tiles_k<t, false>, grid, MV_WARPS * 32, 0, stream, *w, *a, rpw);         \
        break;
        HM_CU_TYPES(X)
#undef X
    }
    return cudaGetLastError();
}

template <typename O>
static cudaError_t dequant_launch(const hm_cu_w *w, const int32_t *rows, int64_t row0,
                                  int64_t nrows, O *dst, cudaStream_t stream) {
    if (nrows <= 0) return cudaSuccess;
    if (!HM_CU_FLOAT(w->type) && w->cols % 32) return cudaErrorInvalidValue;
    /* a thread per 32-value chunk of a row (whole warps, at most 128): no idle warps where rows
     * are short (2048 columns: 64 chunks) */
    const int64_t per = HM_CU_FLOAT(w->type) ? w->cols : w->cols / 32;
    const int nt = per >= 128 ? 128 : (int)((per + 31) / 32 * 32);
    for (int64_t r = 0; r < nrows; r += 1 << 30) { // grid x holds 2^31 - 1 blocks
        const int64_t nr = nrows - r < (1 << 30) ? nrows - r : (1 << 30);
        const int32_t *rr = rows ? rows + r : NULL;
        O *d = dst + r * w->cols;
        switch (w->type) {
#define X(t)                                                                                       \
    case t:                                                                                        \
        hm_launch(dequant_k<t, O>, (unsigned)nr, nt, 0, stream, *w, rr, row0 + r, d);              \
        break;
            HM_CU_TYPES(X)
#undef X
        default:
            return cudaErrorInvalidValue;
        }
    }
    return cudaGetLastError();
}

extern "C" cudaError_t hm_cu_dequant_f32(const hm_cu_w *w, int64_t row0, int64_t nrows, float *dst,
                                         cudaStream_t stream) {
    return dequant_launch(w, NULL, row0, nrows, dst, stream);
}

extern "C" cudaError_t hm_cu_dequant_f16(const hm_cu_w *w, int64_t row0, int64_t nrows,
                                         uint16_t *dst, cudaStream_t stream) {
    if (nrows > 0 && w->cols % 2) return cudaErrorInvalidValue;
    return dequant_launch(w, NULL, row0, nrows, (__half *)dst, stream);
}

extern "C" cudaError_t hm_cu_embed(const hm_cu_w *e, const int32_t *tok, int n, float *x,
                                   cudaStream_t stream) {
    return dequant_launch(e, tok, 0, n, x, stream);
}
