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
    matvec_k(mv_set m, const float *__restrict__ x, int64_t xs, int n, int rpw, int ng) {
    hm_pdl_start();
    extern __shared__ float xsh[];
    const int64_t cols = m.w[0].cols;
    const int64_t xst = (cols + 31) / 32 * 33;
    const unsigned bx = blockIdx.x / (unsigned)ng;
    const int g0 = (int)(blockIdx.x % (unsigned)ng) * NT;
    x += g0 * xs;
    n = n - g0 < NT ? n - g0 : NT;
    if (SH) stage_x(xsh, xst, x, xs, n, cols);
    const int i = m.nw > 1 && bx >= m.b1[0] ? (m.nw > 2 && bx >= m.b1[1] ? 2 : 1) : 0;
    const unsigned blk = bx - (i ? MV_SEL(m, i - 1, b1) : 0u);
    const uint8_t *data = (const uint8_t *)MV_SEL(m, i, w).data;
    const int64_t rows = MV_SEL(m, i, w).rows, rb = (int64_t)MV_SEL(m, i, w).row_bytes,
                  ys = MV_SEL(m, i, ys);
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

template <int T, bool SH>
__global__ void __launch_bounds__(MV_WARPS * 32)
    matvec_exp_k(hm_cu_w w, const int32_t *__restrict__ ids, const float *__restrict__ x,
                 int64_t xs, int x_div, float *__restrict__ y, int64_t ys, int rpw) {
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
        return;
    }
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

// a dequantized value as the destination holds it: float, or IEEE half rounded to nearest even
__device__ __forceinline__ void dq_put(float *d, float v) {
    *d = v;
}
__device__ __forceinline__ void dq_put(__half *d, float v) {
    *d = __float2half_rn(v);
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
#pragma unroll
            for (int e = 0; e < 32; e++) dq_put(d + c * 32 + e, v[e]);
        }
    }
}

// Q4_K with the lanes across each super-block (HMOE_MV_Q4K=0 turns it off, for A/B):
// lane l takes code bytes 4l .. 4l + 3 of the 128, that is values 64j + o .. + 3 (low nibbles,
// scale 2j) and 64j + 32 + o .. + 3 (high nibbles, scale 2j + 1) with j = l / 8, o = 4 (l % 8);
// a warp reads a super-block's codes as one 128-byte line and the activations as float4 straight
// from global memory, coalesced, so nothing is staged. One row per warp.
template <int NT>
__device__ __forceinline__ void q4k_dot(const uint8_t *__restrict__ row, int64_t cols,
                                        const float *__restrict__ x, int64_t xs, int n,
                                        float acc[NT]) {
    const int lane = threadIdx.x & 31, j = lane >> 3, o = 4 * (lane & 7);
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    const int64_t nsb = cols / 256;
#pragma unroll 2
    for (int64_t sb = 0; sb < nsb; sb++) {
        const hm_block_q4_K *b = (const hm_block_q4_K *)row + sb;
        const uint32_t q = *(const uint32_t *)(b->qs + 4 * lane);
        const float d = hm_hd_f16_to_f32(b->d), dmin = hm_hd_f16_to_f32(b->dmin);
        int sc0, m0, sc1, m1;
        hm_hd_k4_scale_min(b->scales, 2 * j, &sc0, &m0);
        hm_hd_k4_scale_min(b->scales, 2 * j + 1, &sc1, &m1);
        const float d0 = hm_hd_fmul(d, (float)sc0), n0 = hm_hd_fmul(dmin, (float)m0);
        const float d1 = hm_hd_fmul(d, (float)sc1), n1 = hm_hd_fmul(dmin, (float)m1);
        float lo[4], hi[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const uint32_t by = (q >> (8 * u)) & 0xFF;
            lo[u] = hm_hd_fsub(hm_hd_fmul(d0, (float)(by & 0xF)), n0);
            hi[u] = hm_hd_fsub(hm_hd_fmul(d1, (float)(by >> 4)), n1);
        }
        const int64_t c0 = sb * 256 + 64 * j + o;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= n) break;
            const float4 xa = *(const float4 *)(x + t * xs + c0),
                         xb = *(const float4 *)(x + t * xs + c0 + 32);
            float s = acc[t];
            s = fmaf(lo[0], xa.x, s), s = fmaf(lo[1], xa.y, s), s = fmaf(lo[2], xa.z, s);
            s = fmaf(lo[3], xa.w, s), s = fmaf(hi[0], xb.x, s), s = fmaf(hi[1], xb.y, s);
            s = fmaf(hi[2], xb.z, s), s = fmaf(hi[3], xb.w, s);
            acc[t] = s;
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = hm_warp_sum(acc[t]);
}

// token groups as matvec_k's
template <int NT>
__global__ void __launch_bounds__(MV_WARPS * 32)
    matvec_q4k_k(hm_cu_w w, const float *__restrict__ x, int64_t xs, int n, float *__restrict__ y,
                 int64_t ys, int ng) {
    hm_pdl_start();
    const int64_t r = (int64_t)(blockIdx.x / (unsigned)ng) * MV_WARPS + (threadIdx.x >> 5);
    if (r >= w.rows) return;
    const int g0 = (int)(blockIdx.x % (unsigned)ng) * NT;
    x += g0 * xs, y += g0 * ys;
    n = n - g0 < NT ? n - g0 : NT;
    float acc[NT];
    q4k_dot<NT>((const uint8_t *)w.data + r * (int64_t)w.row_bytes, w.cols, x, xs, n, acc);
    if ((threadIdx.x & 31) == 0)
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (t < n) y[t * ys + r] = acc[t];
}

__global__ void __launch_bounds__(MV_WARPS * 32)
    matvec_exp_q4k_k(hm_cu_w w, const int32_t *__restrict__ ids, const float *__restrict__ x,
                     int64_t xs, int x_div, float *__restrict__ y, int64_t ys) {
    hm_pdl_start();
    const int p = blockIdx.y, id = ids[p];
    const int64_t r = (int64_t)blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (r >= w.rows) return;
    float acc[1] = {0.0f};
    if (id >= 0)
        q4k_dot<1>((const uint8_t *)w.data + (size_t)id * w.estride + r * (int64_t)w.row_bytes,
                   w.cols, x + (int64_t)(p / x_div) * xs, 0, 1, acc);
    if ((threadIdx.x & 31) == 0) y[(int64_t)p * ys + r] = acc[0]; /* 0: an expert on the CPU */
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

template <int T, bool SH, bool Q4K>
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
        for (int j = threadIdx.x; j < GLU_ROWS * rpw; j += blockDim.x)
            if (r0 + j < rows) gp[r0 + j] = 0.0f;
        return;
    }
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
        if (Q4K)
            q4k_dot<1>(base + r * rb, a.w[0].cols, xp, 0, 1, acc);
        else
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

// The experts' tiles of up to HM_CU_MATVEC_MAX places of one expert (hm_cu_moe_sort): block
// (row block, tile t) takes expert tile_e[t]'s rows against items tile_i0[t] .. + tile_n[t], whose
// activations are consecutive rows of x. Each product is hm_cu_matvec's.
template <int T, bool SH, bool Q4K>
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
        if (Q4K)
            q4k_dot<HM_CU_MATVEC_MAX>(base + r * (int64_t)w.row_bytes, cols, x, a.xs, ni, acc);
        else
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
    const char *v = getenv("HMOE_MV_Q4K"); /* read per launch: a decode graph's at its capture */
    return !(v && !strcmp(v, "0"));
}

// shared bytes of n staged activation rows of cols values
static size_t mv_smem(int64_t cols, int n) {
    return sizeof(float) * (size_t)((cols + 31) / 32 * 33) * (size_t)n;
}

// lanes: the Q4_K lane layout (matvec_launch has asked mv_q4k)
template <int T, int NT>
static void matvec_nt(const mv_set *m, const float *x, int64_t xs, int n, bool lanes,
                      cudaStream_t s) {
    const hm_cu_w *w = &m->w[0];
    const int ng = (n + NT - 1) / NT;
    if (lanes) {
        hm_launch(matvec_q4k_k<NT>, (unsigned)((w->rows + MV_WARPS - 1) / MV_WARPS * ng),
                  MV_WARPS * 32, 0, s, *w, x, xs, n, m->y[0], m->ys[0], ng);
        return;
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
        hm_launch(matvec_k<T, NT, true>, blocks, MV_WARPS * 32, sm, s, set, x, xs, n, rpw, ng);
    else
        hm_launch(matvec_k<T, NT, false>, blocks, MV_WARPS * 32, 0, s, set, x, xs, n, rpw, ng);
}

template <int T>
static void matvec_launch(const mv_set *m, const float *x, int64_t xs, int n, cudaStream_t s) {
    const hm_cu_w *w = &m->w[0];
    const bool lanes = T == HM_TYPE_Q4_K && m->nw == 1 && mv_q4k(w, x, xs);
    /* unstaged, each lane reads its own chunk of every row: a line per lane */
    const int g = lanes ? HM_CU_MATVEC_MAX : mv_group(w->cols);
    const int nt = n <= 1 ? 1 : (n <= 2 ? 2 : (n <= 4 ? 4 : 8));
    switch (nt < g ? nt : g) {
    case 1:
        matvec_nt<T, 1>(m, x, xs, n, lanes, s);
        break;
    case 2:
        matvec_nt<T, 2>(m, x, xs, n, lanes, s);
        break;
    case 4:
        matvec_nt<T, 4>(m, x, xs, n, lanes, s);
        break;
    default:
        matvec_nt<T, 8>(m, x, xs, n, lanes, s);
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

extern "C" cudaError_t hm_cu_matvec_experts(const hm_cu_w *w, const int32_t *ids, int n_pairs,
                                            const float *x, int64_t xs, int x_div, float *y,
                                            int64_t ys, cudaStream_t stream) {
    if (n_pairs <= 0 || w->rows <= 0) return cudaSuccess;
    if (x_div < 1 || (!HM_CU_FLOAT(w->type) && w->cols % 32)) return cudaErrorInvalidValue;
    /* the pairs multiply the blocks: rows per warp as the matrix of all of them would have */
    const int rpw = mv_rpw(w->rows * (n_pairs < 64 ? n_pairs : 64)), per = MV_WARPS * rpw;
    const unsigned gx = (unsigned)((w->rows + per - 1) / per);
    const size_t sm = mv_smem(w->cols, 1);
    const bool sh = mv_stage(sm);
    if (!hm_cu_type_ok(w->type)) return cudaErrorInvalidValue;
    const bool q4k = mv_q4k(w, x, xs);
    pair_chunks(n_pairs, x_div, [&](int p0, int np) {
        const int32_t *id = ids + p0;
        const float *xp = x + (int64_t)(p0 / x_div) * xs;
        float *yp = y + (int64_t)p0 * ys;
        if (q4k) {
            const dim3 grid((unsigned)((w->rows + MV_WARPS - 1) / MV_WARPS), (unsigned)np);
            hm_launch(matvec_exp_q4k_k, grid, MV_WARPS * 32, 0, stream, *w, id, xp, xs, x_div, yp,
                      ys);
            return;
        }
        const dim3 grid(gx, (unsigned)np);
        switch (w->type) {
#define X(t)                                                                                       \
    case t:                                                                                        \
        if (sh)                                                                                    \
            hm_launch(matvec_exp_k<t, true>, grid, MV_WARPS * 32, sm, stream, *w, id, xp, xs,      \
                      x_div, yp, ys, rpw);                                                         \
        else                                                                                       \
            hm_launch(matvec_exp_k<t, false>, grid, MV_WARPS * 32, 0, stream, *w, id, xp, xs,      \
                      x_div, yp, ys, rpw);                                                         \
        break;
            HM_CU_TYPES(X)
#undef X
        }
    });
    return cudaGetLastError();
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
    mv_glu a = {};
    a.w[0] = *wg, a.w[1] = *wu, a.bias[0] = bg, a.bias[1] = bu;
    a.act = act, a.alpha = alpha, a.limit = limit;
    if (!hm_cu_type_ok(wg->type)) return cudaErrorInvalidValue;
    pair_chunks(n_pairs, x_div, [&](int p0, int np) {
        const dim3 grid(gx, (unsigned)np);
        const int32_t *id = ids + p0;
        const float *xp = x + (int64_t)(p0 / x_div) * xs;
        float *gp = g + (int64_t)p0 * gs;
        if (q4k) {
            hm_launch(matvec_exp_glu_k<HM_TYPE_Q4_K, false, true>, grid, MV_WARPS * 32, 0, stream,
                      a, id, xp, xs, x_div, gp, gs, rpw);
            return;
        }
        switch (wg->type) {
#define X(t)                                                                                       \
    case t:                                                                                        \
        if (sh)                                                                                    \
            hm_launch(matvec_exp_glu_k<t, true, false>, grid, MV_WARPS * 32, sm, stream, a, id,    \
                      xp, xs, x_div, gp, gs, rpw);                                                 \
        else                                                                                       \
            hm_launch(matvec_exp_glu_k<t, false, false>, grid, MV_WARPS * 32, 0, stream, a, id,    \
                      xp, xs, x_div, gp, gs, rpw);                                                 \
        break;
            HM_CU_TYPES(X)
#undef X
        }
    });
    return cudaGetLastError();
}

extern "C" int hm_cu_mmv_tile(const hm_cu_w *w, const float *x, int64_t xs) {
    return mv_q4k(w, x, xs) ? HM_CU_MATVEC_MAX : mv_group(w->cols);
}

extern "C" cudaError_t hm_cu_mmv_tiles(const hm_cu_w *w, const hm_cu_mmq_args *a, int tile,
                                       int max_tiles, cudaStream_t stream) {
    if (w->rows <= 0 || max_tiles <= 0) return cudaSuccess;
    if (!a->tile_e || a->xrow || max_tiles > 65535 || tile < 1 || tile > HM_CU_MATVEC_MAX ||
        (!HM_CU_FLOAT(w->type) && w->cols % 32) || !hm_cu_type_ok(w->type))
        return cudaErrorInvalidValue;
    const int rpw = mv_rpw(w->rows * (max_tiles < 64 ? max_tiles : 64)), per = MV_WARPS * rpw;
    const dim3 grid((unsigned)((w->rows + per - 1) / per), (unsigned)max_tiles);
    if (mv_q4k(w, a->x, a->xs)) {
        const dim3 g4((unsigned)((w->rows + MV_WARPS - 1) / MV_WARPS), (unsigned)max_tiles);
        hm_launch(mmv_tiles_k<HM_TYPE_Q4_K, false, true>, g4, MV_WARPS * 32, 0, stream, *w, *a, 1);
        return cudaGetLastError();
    }
    const size_t sm = mv_smem(w->cols, tile);
    const bool sh = mv_stage(sm);
    switch (w->type) {
#define X(t)                                                                                       \
    case t:                                                                                        \
        if (sh)                                                                                    \
            hm_launch(mmv_tiles_k<t, true, false>, grid, MV_WARPS * 32, sm, stream, *w, *a, rpw);  \
        else                                                                                       \
            hm_launch(mmv_tiles_k<t, false, false>, grid, MV_WARPS * 32, 0, stream, *w, *a, rpw);  \
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
    for (int64_t r = 0; r < nrows; r += 1 << 30) { // grid x holds 2^31 - 1 blocks
        const int64_t nr = nrows - r < (1 << 30) ? nrows - r : (1 << 30);
        const int32_t *rr = rows ? rows + r : NULL;
        O *d = dst + r * w->cols;
        switch (w->type) {
#define X(t)                                                                                       \
    case t:                                                                                        \
        hm_launch(dequant_k<t, O>, (unsigned)nr, 128, 0, stream, *w, rr, row0 + r, d);             \
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
