// ops.cu - the per-token kernels of a layer: RMSNorm (with the residual add), SiLU-GLU, q/k
// norms + rotation + KV store, attention over the cache, softmax top-k routing, the experts'
// weighted sum. The arithmetic they share with the CPU is twins.h's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/kernels.h"
#include "cuda/twins.h"

static thread_local bool pdl_allowed = false;

extern "C" void hm_cu_pdl_allow(bool on) {
    pdl_allowed = on;
}

bool hm_cu_pdl() {
    static const bool on = [] {
        const char *v = getenv("HMOE_CUDA_PDL");
        int dev = 0, major = 0;
        return !(v && !strcmp(v, "0")) && cudaGetDevice(&dev) == cudaSuccess &&
               cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ==
                   cudaSuccess &&
               major >= 9;
    }();
    return on && pdl_allowed;
}

// One block of RN_T threads per token: a decode step's norms are one token each, so the block's
// width is what hides the loads' latency; the plain residual add (no weights) spreads over
// blocks of ADD_T values instead. Rows of up to RN_T * RN_V values stay in registers from the
// loads to the stores (one round of loads: the weights before hm_pdl_start, the row and its
// addend after), longer ones are walked three times.
enum { RN_T = 1024, RN_V = 8, ADD_T = 256 };

__global__ void __launch_bounds__(ADD_T) add_k(float *__restrict__ x, const float *__restrict__ add,
                                               const int32_t *__restrict__ rows, int64_t h) {
    hm_pdl_start();
    const int64_t r = rows ? (int64_t)rows[blockIdx.y] : (int64_t)blockIdx.y;
    const int64_t d = (int64_t)blockIdx.x * ADD_T + threadIdx.x;
    if (d < h) x[r * h + d] += add[r * h + d];
}

// the experts' outputs whose weighted sum is the addend (hm_cu_rmsnorm_moe; y NULL: none)
struct rn_moe {
    const float *y;
    int64_t ys;
    const float *w;
    int k;
};

// the weighted sum of token i's k expert rows at d, as moe_sum and hm_cu_moe_combine form it
__device__ __forceinline__ float rn_moe_sum(const rn_moe &m, int64_t i, int64_t d) {
    float a = 0.0f;
    for (int j = 0; j < m.k; j++) a = fmaf(m.w[i * m.k + j], m.y[(i * m.k + j) * m.ys + d], a);
    return a;
}

__global__ void __launch_bounds__(RN_T)
    rmsnorm_k(float *x, const float *__restrict__ add, const float *__restrict__ w, float *y,
              const int32_t *__restrict__ rows, int64_t h, float eps, rn_moe m) {
    __shared__ double sh[32];
    const int tid = threadIdx.x;
    const bool regs = h <= (int64_t)RN_T * RN_V;
    float wv[RN_V], xv[RN_V];
    if (w && regs)
#pragma unroll
        for (int j = 0; j < RN_V; j++)
            wv[j] = tid + j * RN_T < h ? __ldg(w + tid + j * RN_T) : 0.0f;
    hm_pdl_start();
    const int64_t i = blockIdx.x;
    const int64_t r = rows ? (int64_t)rows[i] : i;
    float *xr = x + r * h;
    if (regs) { /* the same sums in the same order as the loops below */
        double ss = 0;
#pragma unroll
        for (int j = 0; j < RN_V; j++) {
            const int64_t d = tid + j * RN_T;
            xv[j] = d < h ? xr[d] : 0.0f;
            if (add && d < h) xv[j] += add[r * h + d];
            if (m.y && d < h) xv[j] += rn_moe_sum(m, r, d);
        }
#pragma unroll
        for (int j = 0; j < RN_V; j++) {
            const int64_t d = tid + j * RN_T;
            if (d < h) {
                if (add || m.y) xr[d] = xv[j];
                ss += (double)xv[j] * xv[j];
            }
        }
        if (!w) return;
        ss = hm_block_sum_d(ss, sh);
        const float sc = hm_hd_rms_scale(ss, h, eps);
        float *yr = y + i * h;
#pragma unroll
        for (int j = 0; j < RN_V; j++) {
            const int64_t d = tid + j * RN_T;
            if (d < h) yr[d] = xv[j] * sc * wv[j];
        }
        return;
    }
    if (add) {
        const float *ar = add + r * h;
        for (int64_t d = tid; d < h; d += blockDim.x) xr[d] += ar[d];
    }
    if (m.y)
        for (int64_t d = tid; d < h; d += blockDim.x) xr[d] += rn_moe_sum(m, r, d);
    if (!w) return;
    double ss = 0;
    for (int64_t d = tid; d < h; d += blockDim.x) ss += (double)xr[d] * xr[d];
    ss = hm_block_sum_d(ss, sh);
    const float sc = hm_hd_rms_scale(ss, h, eps);
    float *yr = y + i * h;
    for (int64_t d = tid; d < h; d += blockDim.x) yr[d] = xr[d] * sc * w[d];
}

extern "C" cudaError_t hm_cu_rmsnorm(float *x, const float *add, const float *w, float *y,
                                     const int32_t *rows, int n, int64_t h, float eps,
                                     cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (!w) {
        if (!add) return cudaSuccess;
        hm_launch(add_k, dim3((unsigned)((h + ADD_T - 1) / ADD_T), (unsigned)n), ADD_T, 0, stream,
                  x, add, rows, h);
    } else {
        hm_launch(rmsnorm_k, (unsigned)n, RN_T, 0, stream, x, add, w, y, rows, h, eps, rn_moe{});
    }
    return cudaGetLastError();
}

extern "C" cudaError_t hm_cu_rmsnorm_moe(float *x, const float *ey, int64_t eys, const float *ew,
                                         int k, const float *w, float *y, int n, int64_t h,
                                         float eps, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (k < 1 || k > 64 || !ey || !ew) return cudaErrorInvalidValue;
    const rn_moe m = {ey, eys, ew, k};
    hm_launch(rmsnorm_k, (unsigned)n, RN_T, 0, stream, x, (const float *)NULL, w, y,
              (const int32_t *)NULL, h, eps, m);
    return cudaGetLastError();
}

__global__ void glu_k(float *__restrict__ g, int64_t gs, const float *__restrict__ u, int64_t us,
                      int64_t total, int64_t f, int act, float alpha, float limit) {
    hm_pdl_start();
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = idx / f, j = idx % f;
        g[t * gs + j] = hm_hd_glu(act, g[t * gs + j], u[t * us + j], alpha, limit);
    }
}

extern "C" cudaError_t hm_cu_glu(float *g, int64_t gs, const float *u, int64_t us, int n, int64_t f,
                                 int act, float alpha, float limit, cudaStream_t stream) {
    const int64_t total = (int64_t)n * f;
    if (total <= 0) return cudaSuccess;
    if (act < 0 || act > 2) return cudaErrorInvalidValue;
    int64_t blocks = (total + 255) / 256;
    if (blocks > 65536) blocks = 65536;
    hm_launch(glu_k, (unsigned)blocks, 256, 0, stream, g, gs, u, us, total, f, act, alpha, limit);
    return cudaGetLastError();
}

// rows of floats (x rows xs apart) to packed BF16 (H false) or IEEE half (H true) rows, rounded
// to nearest even
template <bool H>
__global__ void f32_to_16_k(const float *__restrict__ x, int64_t xs, int64_t total, int64_t cols,
                            uint16_t *__restrict__ y) {
    hm_pdl_start();
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const float v = x[idx / cols * xs + idx % cols];
        y[idx] =
            H ? __half_as_ushort(__float2half_rn(v)) : __bfloat16_as_ushort(__float2bfloat16_rn(v));
    }
}

template <bool H>
static cudaError_t f32_to_16(const float *x, int64_t xs, int n, int64_t cols, uint16_t *y,
                             cudaStream_t stream) {
    const int64_t total = (int64_t)n * cols;
    if (total <= 0) return cudaSuccess;
    int64_t blocks = (total + 255) / 256;
    if (blocks > 65536) blocks = 65536;
    hm_launch(f32_to_16_k<H>, (unsigned)blocks, 256, 0, stream, x, xs, total, cols, y);
    return cudaGetLastError();
}

extern "C" cudaError_t hm_cu_f32_to_bf16(const float *x, int64_t xs, int n, int64_t cols,
                                         uint16_t *y, cudaStream_t stream) {
    return f32_to_16<false>(x, xs, n, cols, y, stream);
}

extern "C" cudaError_t hm_cu_f32_to_f16(const float *x, int64_t xs, int n, int64_t cols,
                                        uint16_t *y, cudaStream_t stream) {
    return f32_to_16<true>(x, xs, n, cols, y, stream);
}

// one block per (token, expert) pair: its row of y gets its expert's bias
__global__ void expert_bias_k(float *__restrict__ y, int64_t ys, const int32_t *__restrict__ pos_of,
                              const int32_t *__restrict__ ids, const float *__restrict__ bias,
                              int64_t cols) {
    hm_pdl_start();
    const int p = blockIdx.x, e = ids[p];
    if (e < 0) return;
    float *yr = y + (int64_t)(pos_of ? pos_of[p] : p) * ys;
    const float *b = bias + (int64_t)e * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] += b[j];
}

extern "C" cudaError_t hm_cu_expert_bias(float *y, int64_t ys, const int32_t *pos_of,
                                         const int32_t *ids, int n_pairs, const float *bias,
                                         int64_t cols, cudaStream_t stream) {
    if (n_pairs <= 0 || !bias) return cudaSuccess;
    hm_launch(expert_bias_k, (unsigned)n_pairs, 256, 0, stream, y, ys, pos_of, ids, bias, cols);
    return cudaGetLastError();
}

__global__ void add_bias_k(float *__restrict__ y, int64_t ys, const float *__restrict__ b,
                           int64_t total, int64_t cols) {
    hm_pdl_start();
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = idx / cols, j = idx % cols;
        y[t * ys + j] += b[j];
    }
}

extern "C" cudaError_t hm_cu_add_bias(float *y, int64_t ys, const float *b, int n, int64_t cols,
                                      cudaStream_t stream) {
    const int64_t total = (int64_t)n * cols;
    if (total <= 0 || !b) return cudaSuccess;
    int64_t blocks = (total + 255) / 256;
    if (blocks > 65536) blocks = 65536;
    hm_launch(add_bias_k, (unsigned)blocks, 256, 0, stream, y, ys, b, total, cols);
    return cudaGetLastError();
}

__global__ void gated_add_k(float *__restrict__ dst, int64_t ds, const float *__restrict__ src,
                            int64_t ss, const float *__restrict__ xn, int64_t xs,
                            const float *__restrict__ w, int64_t h) {
    hm_pdl_start();
    __shared__ float sh[32];
    const int64_t t = blockIdx.x;
    float g = 1.0f;
    if (w) {
        float dot = 0.0f;
        for (int64_t d = threadIdx.x; d < h; d += blockDim.x) dot += xn[t * xs + d] * w[d];
        g = hm_hd_sigmoid(hm_block_sum(dot, sh));
    }
    for (int64_t d = threadIdx.x; d < h; d += blockDim.x) dst[t * ds + d] += g * src[t * ss + d];
}

extern "C" cudaError_t hm_cu_gated_add(float *dst, int64_t ds, const float *src, int64_t ss,
                                       const float *xn, int64_t xs, const float *w, int n,
                                       int64_t h, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    hm_launch(gated_add_k, (unsigned)n, 256, 0, stream, dst, ds, src, ss, xn, xs, w, h);
    return cudaGetLastError();
}

__global__ void router_sigmoid_k(const float *__restrict__ rl, int64_t rs, int n, int e,
                                 const float *__restrict__ bias, int n_group, int topk_group, int k,
                                 bool renorm, float scale, int32_t *__restrict__ ids,
                                 float *__restrict__ w) {
    hm_pdl_start();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    hm_hd_router_sigmoid(rl + (int64_t)t * rs, bias, e, n_group, topk_group, k, renorm, scale,
                         ids + (int64_t)t * k, w + (int64_t)t * k);
}

extern "C" cudaError_t hm_cu_router_sigmoid(const float *rl, int64_t rs, int n, int e,
                                            const float *bias, int n_group, int topk_group, int k,
                                            bool renorm, float scale, int32_t *ids, float *w,
                                            cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (e > HM_HD_ROUTER_MAX || n_group < 1 || n_group > 64 || e % n_group)
        return cudaErrorInvalidValue;
    hm_launch(router_sigmoid_k, (unsigned)((n + 63) / 64), 64, 0, stream, rl, rs, n, e, bias,
              n_group, topk_group, k, renorm, scale, ids, w);
    return cudaGetLastError();
}

// one warp per (token, head) of q and k
template <bool F16> __global__ void qk_rope_kv_k(hm_cu_qkv a, hm_cu_kv kv) {
    hm_pdl_start();
    const int i = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
    const int hd = kv.head_dim;
    const bool isq = h < a.n_heads;
    const int hh = isq ? h : h - a.n_heads;
    float *x = isq ? a.q + (int64_t)i * a.q_stride + (int64_t)hh * hd
                   : a.k + (int64_t)i * a.kv_stride + (int64_t)hh * hd;
    const float *nw = isq ? a.qn : a.kn;
    if (nw) {
        double ss = 0;
        for (int d = lane; d < hd; d += 32) ss += (double)x[d] * x[d];
        ss = hm_warp_sum_d(ss);
        const float sc = hm_hd_rms_scale(ss, hd, a.eps);
        for (int d = lane; d < hd; d += 32) x[d] = x[d] * sc * nw[d];
        __syncwarp();
    }
    const int half = a.rope_dim / 2;
    const float *cs = a.cs + (int64_t)i * a.rope_dim;
    for (int j = lane; j < half; j += 32) {
        if (a.interleaved)
            hm_hd_rope_pair(&x[2 * j], &x[2 * j + 1], cs[j], cs[half + j]);
        else
            hm_hd_rope_pair(&x[j], &x[j + half], cs[j], cs[half + j]);
    }
    __syncwarp();
    if (isq) return;
    const size_t off = kv_head(kv, a.il, a.seq[i], hh) + (size_t)a.pos[i] * (size_t)hd;
    const float *v = a.v + (int64_t)i * a.kv_stride + (int64_t)hh * hd;
    for (int d = lane; d < hd; d += 32) {
        kv_put<F16>(kv.k, off + d, x[d]);
        kv_put<F16>(kv.v, off + d, v[d]);
    }
}

// The same with a head's values in registers, lane l holding dims l + 32 j (j < NJ, head dims
// 32 NJ), for rotations whose pairs a lane holds (NeoX halves of a multiple of 32 values) or its
// neighbour (interleaved, one shuffle): one round of loads (the norm weights and the rotation's
// factors before hm_pdl_start, the head and its values after) where qk_rope_kv_k reads the head
// back after each step. The sum of squares is qk_rope_kv_k's, in its order.
template <bool F16, int NJ> __global__ void qk_rope_kv_r_k(hm_cu_qkv a, hm_cu_kv kv) {
    const int i = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
    const bool isq = h < a.n_heads;
    const int hh = isq ? h : h - a.n_heads, half = a.rope_dim / 2;
    const float *nw = isq ? a.qn : a.kn, *cs = a.cs + (int64_t)i * a.rope_dim;
    float wv[NJ], c[NJ], sn[NJ], xv[NJ], vv[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int d = lane + 32 * j;
        wv[j] = nw ? __ldg(nw + d) : 1.0f;
        const int f = a.interleaved ? d / 2 : (d < half ? d : d - half);
        c[j] = d < a.rope_dim ? __ldg(cs + f) : 1.0f;
        sn[j] = d < a.rope_dim ? __ldg(cs + half + f) : 0.0f;
    }
    hm_pdl_start();
    float *x = isq ? a.q + (int64_t)i * a.q_stride + (int64_t)hh * 32 * NJ
                   : a.k + (int64_t)i * a.kv_stride + (int64_t)hh * 32 * NJ;
    const float *v = a.v + (int64_t)i * a.kv_stride + (int64_t)hh * 32 * NJ;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        xv[j] = x[lane + 32 * j];
        if (!isq) vv[j] = v[lane + 32 * j];
    }
    if (nw) {
        double ss = 0;
#pragma unroll
        for (int j = 0; j < NJ; j++) ss += (double)xv[j] * xv[j];
        ss = hm_warp_sum_d(ss);
        const float sc = hm_hd_rms_scale(ss, 32 * NJ, a.eps);
#pragma unroll
        for (int j = 0; j < NJ; j++) xv[j] = xv[j] * sc * wv[j];
    }
    if (a.interleaved) {
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const float o = __shfl_xor_sync(0xffffffffu, xv[j], 1);
            if (lane + 32 * j >= a.rope_dim) continue;
            float p0 = lane & 1 ? o : xv[j], p1 = lane & 1 ? xv[j] : o;
            hm_hd_rope_pair(&p0, &p1, c[j], sn[j]);
            xv[j] = lane & 1 ? p1 : p0;
        }
    } else {
        const int off = half / 32;
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int k = j + 1; k < NJ; k++)
                if (k == j + off && 32 * j < half) hm_hd_rope_pair(&xv[j], &xv[k], c[j], sn[j]);
    }
#pragma unroll
    for (int j = 0; j < NJ; j++) x[lane + 32 * j] = xv[j];
    if (isq) return;
    const size_t off = kv_head(kv, a.il, a.seq[i], hh) + (size_t)a.pos[i] * (size_t)(32 * NJ);
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        kv_put<F16>(kv.k, off + lane + 32 * j, xv[j]);
        kv_put<F16>(kv.v, off + lane + 32 * j, vv[j]);
    }
}

extern "C" cudaError_t hm_cu_qk_rope_kv(const hm_cu_qkv *a, const hm_cu_kv *kv, int n,
                                        cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const dim3 grid((unsigned)n, (unsigned)(a->n_heads + kv->n_kv_heads));
    const int hd = kv->head_dim, rd = a->rope_dim;
    const bool regs = (hd == 64 || hd == 128 || hd == 256) && rd <= hd && rd % 2 == 0 &&
                      (a->interleaved || rd % 64 == 0);
    if (regs) {
        void (*k)(hm_cu_qkv, hm_cu_kv) =
            hd == 64    ? (kv->f16 ? qk_rope_kv_r_k<true, 2> : qk_rope_kv_r_k<false, 2>)
            : hd == 128 ? (kv->f16 ? qk_rope_kv_r_k<true, 4> : qk_rope_kv_r_k<false, 4>)
                        : (kv->f16 ? qk_rope_kv_r_k<true, 8> : qk_rope_kv_r_k<false, 8>);
        hm_launch(k, grid, 32, 0, stream, *a, *kv);
    } else if (kv->f16) {
        hm_launch(qk_rope_kv_k<true>, grid, 32, 0, stream, *a, *kv);
    } else {
        hm_launch(qk_rope_kv_k<false>, grid, 32, 0, stream, *a, *kv);
    }
    return cudaGetLastError();
}

// One block per (token, query head) and range of positions: the positions in chunks of ATT_T,
// one per thread for the scores, an online softmax across chunks (twins.h), each thread
// accumulating head dims tid, tid + ATT_T, ... of the output. Decode splits each token's
// positions into gridDim.z ranges of att_split_len (whole ATT_SPLIT_MIN), so that a step's few
// (token, head) pairs fill the GPU at any context, and a context of a few hundred positions
// takes a block per 32 of them; splits past a token's positions exit at once.
enum { ATT_T = 128, ATT_MAX_HD = 5 * ATT_T, ATT_SPLIT_MIN = 32, ATT_ZMAX = 32, ATT_KU = 8 };

// the positions of one split of a token at P positions cut into z splits
__device__ __forceinline__ int att_split_len(int P, int z) {
    const int l = (P + z - 1) / z;
    return (l + ATT_SPLIT_MIN - 1) / ATT_SPLIT_MIN * ATT_SPLIT_MIN;
}

// token i's positions in split s of gridDim.z (1: all of them), from the sliding window's start:
// [*p0, *p1); false past the token's positions (the merge reads no such split)
__device__ __forceinline__ bool att_range(const hm_cu_attn &a, int i, int s, int *p0, int *p1) {
    const int P = a.pos[i] + 1, lo = a.window && P > a.window ? P - a.window : 0;
    int b = 0, e = P;
    if (gridDim.z > 1) {
        const int len = att_split_len(P, (int)gridDim.z);
        b = s * len;
        if (b >= P) return false;
        e = b + len < P ? b + len : P;
    }
    *p0 = b > lo ? b : lo, *p1 = e;
    return true;
}

// q (in shared memory) against positions [p0, p1) of one cache head: the running state and the
// unnormalized accumulators of this thread's dims
template <bool F16>
__device__ __forceinline__ void attn_range(const float *qs, float *pe, float *red,
                                           const hm_cu_kv &kv, size_t base, int p0, int p1,
                                           float scale, hm_osm *st, float acc[ATT_MAX_HD / ATT_T]) {
    const int tid = threadIdx.x, hd = kv.head_dim, warp = tid >> 5, lane = tid & 31;
    const int vd = kv.v_dim ? kv.v_dim : hd;
    for (int c0 = p0; c0 < p1; c0 += ATT_T) {
        // the chunk's scores: a warp per position, its lanes over the head dims (coalesced
        // reads of a key row), into pe. A warp takes ATT_KU positions at a time so that their
        // key reads are in flight together (positions past p1 read row p1 - 1 and are dropped).
        for (int pp0 = warp * ATT_KU; pp0 < ATT_T && c0 + pp0 < p1; pp0 += ATT_T / 32 * ATT_KU) {
            float dot[ATT_KU];
            size_t kr[ATT_KU];
#pragma unroll
            for (int u = 0; u < ATT_KU; u++) {
                const int p = c0 + pp0 + u;
                dot[u] = 0.0f;
                kr[u] = base + (size_t)(p < p1 ? p : p1 - 1) * hd;
            }
            for (int d = lane; d < hd; d += 32) {
                const float qd = qs[d];
#pragma unroll
                for (int u = 0; u < ATT_KU; u++)
                    dot[u] = fmaf(qd, kv_get<F16>(kv.k, kr[u] + d), dot[u]);
            }
#pragma unroll
            for (int u = 0; u < ATT_KU; u++) {
                const float v = hm_warp_sum(dot[u]);
                if (lane == 0) pe[pp0 + u] = c0 + pp0 + u < p1 ? v * scale : -INFINITY;
            }
        }
        __syncthreads();
        const int p = c0 + tid;
        const float sc = p < p1 ? pe[tid] : -INFINITY; /* past p1: no pass wrote it */
        const float cm = hm_block_max(sc, red);
        const float f = hm_osm_rescale(st, cm);
        const float e = p < p1 ? expf(sc - st->m) : 0.0f;
        st->l += hm_block_sum(e, red);
        pe[tid] = e;
        __syncthreads();
        const int np = p1 - c0 < ATT_T ? p1 - c0 : ATT_T;
#pragma unroll
        for (int j = 0; j < ATT_MAX_HD / ATT_T; j++) {
            const int d = tid + j * ATT_T;
            if (d >= vd) break;
            // four running sums over every fourth position: four chains of loads and fmas in
            // flight instead of one
            float v4[4] = {acc[j] * f, 0.0f, 0.0f, 0.0f};
            const size_t vr = base + (size_t)c0 * hd + d;
            int m = 0;
#pragma unroll 4
            for (; m + 4 <= np; m += 4)
#pragma unroll
                for (int u = 0; u < 4; u++)
                    v4[u] = fmaf(pe[m + u], kv_get<F16>(kv.v, vr + (size_t)(m + u) * hd), v4[u]);
            for (; m < np; m++) v4[0] = fmaf(pe[m], kv_get<F16>(kv.v, vr + (size_t)m * hd), v4[0]);
            acc[j] = (v4[0] + v4[1]) + (v4[2] + v4[3]);
        }
        __syncthreads(); // pe is rewritten by the next chunk
    }
}

// A merge of splits' partial states: each split's weight against the largest of their maxima M
// (0 for a split that saw no positions: before a sliding window). The sum l and the weighted
// values are then summed over the splits in order, by fmaf, so that the block's merge below and
// the warp kernel's, whose loads of every split are in flight together, give the same bits.
__device__ __forceinline__ float att_split_w(float m, float M) {
    return m == -INFINITY ? 0.0f : expf(m - M);
}

// the splits of token i's head h merged into a.out; the partial results are read from L2
// (another block may have written them just before)
__device__ __forceinline__ void attn_merge(const hm_cu_attn &a, int hd, int vd, int splits,
                                           const float *__restrict__ part, int i, int h) {
    const float *pp = part + ((int64_t)i * a.n_heads + h) * splits * (hd + 2);
    const int P = a.pos[i] + 1, len = att_split_len(P, splits);
    const int ns = (P + len - 1) / len; // splits that saw positions
    float M = -INFINITY;
    for (int s = 0; s < ns; s++) {
        const float m = __ldcg(pp + (int64_t)s * (hd + 2));
        M = m > M ? m : M; // a NaN never wins (its weight is NaN)
    }
    float L = 0.0f, acc[ATT_MAX_HD / ATT_T] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int s = 0; s < ns; s++) {
        const float *q = pp + (int64_t)s * (hd + 2);
        const float g = att_split_w(__ldcg(q), M);
        L = fmaf(__ldcg(q + 1), g, L);
#pragma unroll
        for (int j = 0; j < ATT_MAX_HD / ATT_T; j++) {
            const int d = threadIdx.x + j * ATT_T;
            if (d < vd) acc[j] = fmaf(__ldcg(q + 2 + d), g, acc[j]);
        }
    }
    hm_osm st = {M, L};
    const float f = a.sinks ? hm_osm_sink(&st, a.sinks[h]) : 1.0f;
    float *o = a.out + (int64_t)i * a.out_stride + (int64_t)h * vd;
#pragma unroll
    for (int j = 0; j < ATT_MAX_HD / ATT_T; j++) {
        const int d = threadIdx.x + j * ATT_T;
        if (d < vd) o[d] = acc[j] * f / st.l;
    }
}

// blockIdx.z = split s of att_split_len positions (gridDim.z 1: every position); with splits the
// partial state (m, l, acc) goes to part, merged by the last split (a.cnt) or by attn_merge_k
template <bool F16>
__global__ void __launch_bounds__(ATT_T) attn_k(hm_cu_attn a, hm_cu_kv kv, float *part) {
    extern __shared__ float smem[]; // q [hd], then the chunk's exp(score - m) [ATT_T]
    __shared__ float red[32];
    const int i = blockIdx.x, h = blockIdx.y, s = blockIdx.z, tid = threadIdx.x;
    const int hd = kv.head_dim, vd = kv.v_dim ? kv.v_dim : hd;
    /* positions and sequences come from the host before the step's first kernel */
    const int P = a.pos[i] + 1;
    int p0, p1;
    if (!att_range(a, i, s, &p0, &p1)) return;
    const int grp = a.n_heads / kv.n_kv_heads;
    if (p0 < p1 && h % grp == 0) {
        /* the range's keys and values into L2 while the kernel before ends (only the newest
         * position is its output: L2 takes that write over the prefetched line) */
        const size_t es = kv.f16 ? 2 : 4, b0 = kv_head(kv, a.il, a.seq[i], h / grp);
        const size_t off = (b0 + (size_t)p0 * hd) * es, len = (size_t)(p1 - p0) * hd * es;
        hm_prefetch_l2((const char *)kv.k + off, len);
        hm_prefetch_l2((const char *)kv.v + off, len);
    }
    hm_pdl_start();
    float acc[ATT_MAX_HD / ATT_T] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    hm_osm st = {-INFINITY, 0.0f};
    if (p0 < p1) {
        float *qs = smem, *pe = smem + hd;
        const float *q = a.q + (int64_t)i * a.q_stride + (int64_t)h * hd;
        for (int d = tid; d < hd; d += ATT_T) qs[d] = q[d];
        __syncthreads();
        const size_t base = kv_head(kv, a.il, a.seq[i], h / (a.n_heads / kv.n_kv_heads));
        attn_range<F16>(qs, pe, red, kv, base, p0, p1, a.scale, &st, acc);
    }
    if (gridDim.z > 1) {
        float *o = part + (((int64_t)i * a.n_heads + h) * gridDim.z + s) * (hd + 2);
        if (tid == 0) o[0] = st.m, o[1] = st.l;
#pragma unroll
        for (int j = 0; j < ATT_MAX_HD / ATT_T; j++) {
            const int d = tid + j * ATT_T;
            if (d < vd) o[2 + d] = acc[j];
        }
        /* with counters the last of the token's splits merges them (else attn_merge_k) */
        const int ns =
            (P + att_split_len(P, (int)gridDim.z) - 1) / att_split_len(P, (int)gridDim.z);
        if (a.cnt && hm_last_block(a.cnt + (int64_t)i * a.n_heads + h, (unsigned)ns))
            attn_merge(a, hd, vd, (int)gridDim.z, part, i, h);
        return;
    }
    const float f = a.sinks ? hm_osm_sink(&st, a.sinks[h]) : 1.0f;
    float *o = a.out + (int64_t)i * a.out_stride + (int64_t)h * vd;
#pragma unroll
    for (int j = 0; j < ATT_MAX_HD / ATT_T; j++) {
        const int d = tid + j * ATT_T;
        if (d < vd) o[d] = acc[j] * f / st.l;
    }
}

// D consecutive values of a cache row from element off (16- or 8-byte aligned for D 4)
template <bool F16, int D>
__device__ __forceinline__ void kv_getd(const void *c, size_t off, float *v) {
    if (F16) {
        const __half2 *p = (const __half2 *)((const __half *)c + off);
#pragma unroll
        for (int k = 0; k < D / 2; k++) {
            const float2 f = __half22float2(p[k]);
            v[2 * k] = f.x, v[2 * k + 1] = f.y;
        }
    } else if (D == 4) {
        const float4 f = *(const float4 *)((const float *)c + off);
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    } else {
        const float2 f = *(const float2 *)((const float *)c + off);
        v[0] = f.x, v[1] = f.y;
    }
}

// Decode attention for head dims of 32 * D (D 2 or 4, values as wide): a warp per (token, query
// head, split), so that no step waits for a whole block. A chunk of 32 positions: each lane
// takes D dims of the query and of every key row (coalesced), its 32 partial dot products are
// summed across the lanes by halving exchanges (31 shuffles; lane j ends with position j's
// score), an online softmax over the chunks (twins.h), and each lane accumulates its D dims of
// the values. A block's ATT_WH warps are consecutive query heads, which share a cache head where
// the group allows, so that its rows meet in L1; where splits are long (WC 4), one head's,
// taking every fourth chunk and merging their states at the end. The splits' partial states and
// their merge are attn_k's (the last warp of a (token, head) merges where there are counters).
enum { ATT_WH = 4 };

// one halving exchange: of each pair (j, j + O) of a lane's partial sums it keeps the one its bit
// O picks and adds the partner lane's; after O = 16, 8, .. 1, v[0] is position lane's whole sum
template <int O> __device__ __forceinline__ void att_halve(float *v, int lane) {
    const bool up = lane & O;
#pragma unroll
    for (int j = 0; j < O; j++) {
        const float send = up ? v[j] : v[j + O], keep = up ? v[j + O] : v[j];
        v[j] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
}

template <bool F16, int D, int WC>
__global__ void __launch_bounds__(ATT_WH * 32) attn_w_k(hm_cu_attn a, hm_cu_kv kv, float *part) {
    __shared__ float cm_[ATT_WH], cl_[ATT_WH], ca_[WC > 1 ? ATT_WH * 32 * D : 1];
    const int lane = threadIdx.x & 31, i = blockIdx.x, s = blockIdx.z, w = threadIdx.x >> 5;
    const int h = blockIdx.y * (ATT_WH / WC) + w / WC, cw = w % WC, hd = 32 * D;
    const int P = a.pos[i] + 1;
    int p0, p1;
    if (!att_range(a, i, s, &p0, &p1)) return;
    const int grp = a.n_heads / kv.n_kv_heads;
    if (h >= a.n_heads) return;
    const size_t base = kv_head(kv, a.il, a.seq[i], h / grp);
    if (p0 < p1 && h % grp == 0 && cw == 0) { /* into L2 meanwhile, a line per lane at a time */
        const size_t es = kv.f16 ? 2 : 4, off = (base + (size_t)p0 * hd) * es,
                     len = (size_t)(p1 - p0) * hd * es;
        for (size_t o = 128 * (size_t)lane; o < len; o += 128 * 32) {
            asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)kv.k + off + o));
            asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)kv.v + off + o));
        }
    }
    hm_pdl_start();
    float q[D], acc[D];
    const float *qp = a.q + (int64_t)i * a.q_stride + (int64_t)h * hd + lane * D;
#pragma unroll
    for (int k = 0; k < D; k++) q[k] = qp[k], acc[k] = 0.0f;
    hm_osm st = {-INFINITY, 0.0f};
    for (int c0 = p0 + 32 * cw; c0 < p1; c0 += 32 * WC) {
        float v[32];
#pragma unroll
        for (int j = 0; j < 32; j++) {
            const int p = c0 + j < p1 ? c0 + j : p1 - 1;
            float kr[D];
            kv_getd<F16, D>(kv.k, base + (size_t)p * hd + lane * D, kr);
            v[j] = 0.0f;
#pragma unroll
            for (int k = 0; k < D; k++) v[j] = fmaf(q[k], kr[k], v[j]);
        }
        att_halve<16>(v, lane);
        att_halve<8>(v, lane);
        att_halve<4>(v, lane);
        att_halve<2>(v, lane);
        att_halve<1>(v, lane);
        const float sc = c0 + lane < p1 ? v[0] * a.scale : -INFINITY;
        const float cm = hm_warp_reduce(sc, hm_op_max());
        const float f = hm_osm_rescale(&st, cm);
        const float e = c0 + lane < p1 ? expf(sc - st.m) : 0.0f;
        st.l += hm_warp_sum(e);
        const int np = p1 - c0 < 32 ? p1 - c0 : 32;
#pragma unroll
        for (int k = 0; k < D; k++) acc[k] *= f;
        /* a whole chunk: the value rows 16 at a time, their loads issued together */
        if (np == 32) {
#pragma unroll
            for (int j0 = 0; j0 < 32; j0 += 16) {
                float vr[16][D];
#pragma unroll
                for (int u = 0; u < 16; u++)
                    kv_getd<F16, D>(kv.v, base + (size_t)(c0 + j0 + u) * hd + lane * D, vr[u]);
#pragma unroll
                for (int u = 0; u < 16; u++) {
                    const float pj = __shfl_sync(0xffffffffu, e, j0 + u);
#pragma unroll
                    for (int k = 0; k < D; k++) acc[k] = fmaf(pj, vr[u][k], acc[k]);
                }
            }
        } else {
#pragma unroll 8
            for (int j = 0; j < np; j++) {
                const float pj = __shfl_sync(0xffffffffu, e, j);
                float vr[D];
                kv_getd<F16, D>(kv.v, base + (size_t)(c0 + j) * hd + lane * D, vr);
#pragma unroll
                for (int k = 0; k < D; k++) acc[k] = fmaf(pj, vr[k], acc[k]);
            }
        }
    }
    if (WC > 1) { /* the head's warps' states into the first's */
        if (lane == 0) cm_[w] = st.m, cl_[w] = st.l;
#pragma unroll
        for (int k = 0; k < D; k++) ca_[w * 32 * D + lane * D + k] = acc[k];
        __syncthreads();
        if (cw) return;
        for (int u = 1; u < WC; u++) {
            const float um = cm_[w + u];
            if (um == -INFINITY) continue; /* no chunk */
            const float fr = hm_osm_rescale(&st, um), g = expf(um - st.m);
            st.l += cl_[w + u] * g;
#pragma unroll
            for (int k = 0; k < D; k++)
                acc[k] = fmaf(ca_[(w + u) * 32 * D + lane * D + k], g, acc[k] * fr);
        }
    }
    if (gridDim.z > 1) {
        float *o = part + (((int64_t)i * a.n_heads + h) * gridDim.z + s) * (hd + 2);
        if (lane == 0) o[0] = st.m, o[1] = st.l;
#pragma unroll
        for (int k = 0; k < D; k++) o[2 + lane * D + k] = acc[k];
        if (!a.cnt) return; /* attn_merge_k merges */
        const int len = att_split_len(P, (int)gridDim.z), ns = (P + len - 1) / len;
        unsigned *cnt = a.cnt + (int64_t)i * a.n_heads + h;
        int last = 0;
        __threadfence();
        __syncwarp();
        if (lane == 0) {
            last = atomicAdd(cnt, 1u) == (unsigned)ns - 1;
            if (last) atomicExch(cnt, 0u);
        }
        if (!__shfl_sync(0xffffffffu, last, 0)) return;
        __threadfence();
        /* attn_merge's arithmetic: lane t reads split t's maximum and sum (ns <= ATT_ZMAX), and
         * the splits' values are read eight splits at a time, where one split after another
         * waited for L2 each */
        const float *pp = part + ((int64_t)i * a.n_heads + h) * gridDim.z * (hd + 2);
        const float mt = lane < ns ? __ldcg(pp + (int64_t)lane * (hd + 2)) : -INFINITY;
        const float lt = lane < ns ? __ldcg(pp + (int64_t)lane * (hd + 2) + 1) : 0.0f;
        const float M = hm_warp_reduce(mt == mt ? mt : -INFINITY, hm_op_max());
        const float gt = att_split_w(mt, M);
        float L = 0.0f;
#pragma unroll
        for (int k = 0; k < D; k++) acc[k] = 0.0f;
#pragma unroll 8
        for (int t = 0; t < ns; t++) {
            const float g = __shfl_sync(0xffffffffu, gt, t);
            L = fmaf(__shfl_sync(0xffffffffu, lt, t), g, L);
            const float *qq = pp + (int64_t)t * (hd + 2) + 2 + lane * D;
#pragma unroll
            for (int k = 0; k < D; k++) acc[k] = fmaf(__ldcg(qq + k), g, acc[k]);
        }
        st = {M, L};
    }
    const float f = a.sinks ? hm_osm_sink(&st, a.sinks[h]) : 1.0f;
    float *o = a.out + (int64_t)i * a.out_stride + (int64_t)h * hd + lane * D;
#pragma unroll
    for (int k = 0; k < D; k++) o[k] = acc[k] * f / st.l;
}

__global__ void __launch_bounds__(ATT_T)
    attn_merge_k(hm_cu_attn a, int hd, int vd, int splits, const float *__restrict__ part) {
    hm_pdl_start();
    attn_merge(a, hd, vd, splits, part, blockIdx.x, blockIdx.y);
}

// the warp kernel for head dims 64 and 128 unless HMOE_CUDA_ATT_WARP=0 (read on each launch: a
// graph reads it once, at capture; test_cuda checks both kernels)
static bool att_warp() {
    const char *e = getenv("HMOE_CUDA_ATT_WARP");
    return !(e && !strcmp(e, "0"));
}

extern "C" cudaError_t hm_cu_attention(const hm_cu_attn *a, const hm_cu_kv *kv, int n, float *part,
                                       int splits, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (kv->head_dim > ATT_MAX_HD || kv->n_kv_heads < 1 || a->n_heads % kv->n_kv_heads)
        return cudaErrorInvalidValue;
    const int z = part && splits > 1 ? splits : 1;
    const int vd = kv->v_dim ? kv->v_dim : kv->head_dim;
    if (vd == kv->head_dim && (vd == 64 || vd == 128) && att_warp()) {
        /* a warp per head where a split is at most two chunks at the cache's length, else a
         * block's warps share a head's split, so that long contexts keep as many warps */
        const int64_t per = (kv->kv_ctx + z - 1) / z;
        const bool wide = per > 64, f = kv->f16, d2 = vd == 64;
        const int hb = wide ? 1 : ATT_WH;
        const dim3 g((unsigned)n, (unsigned)((a->n_heads + hb - 1) / hb), (unsigned)z);
        void (*k)(hm_cu_attn, hm_cu_kv, float *) =
            wide ? (f ? (d2 ? attn_w_k<true, 2, 4> : attn_w_k<true, 4, 4>)
                      : (d2 ? attn_w_k<false, 2, 4> : attn_w_k<false, 4, 4>))
                 : (f ? (d2 ? attn_w_k<true, 2, 1> : attn_w_k<true, 4, 1>)
                      : (d2 ? attn_w_k<false, 2, 1> : attn_w_k<false, 4, 1>));
        hm_launch(k, g, ATT_WH * 32, 0, stream, *a, *kv, part);
        if (z > 1 && !a->cnt)
            hm_launch(attn_merge_k, dim3((unsigned)n, (unsigned)a->n_heads), ATT_T, 0, stream, *a,
                      kv->head_dim, vd, z, part);
        return cudaGetLastError();
    }
    const dim3 grid((unsigned)n, (unsigned)a->n_heads, (unsigned)z);
    const size_t sm = sizeof(float) * (size_t)(kv->head_dim + ATT_T);
    if (kv->f16)
        hm_launch(attn_k<true>, grid, ATT_T, sm, stream, *a, *kv, part);
    else
        hm_launch(attn_k<false>, grid, ATT_T, sm, stream, *a, *kv, part);
    if (z > 1 && !a->cnt)
        hm_launch(attn_merge_k, dim3((unsigned)n, (unsigned)a->n_heads), ATT_T, 0, stream, *a,
                  kv->head_dim, kv->v_dim ? kv->v_dim : kv->head_dim, z, part);
    return cudaGetLastError();
}

extern "C" int hm_cu_attention_splits(int64_t kv_ctx) {
    const int64_t z = (kv_ctx + ATT_SPLIT_MIN - 1) / ATT_SPLIT_MIN;
    return (int)(z < 1 ? 1 : (z > (int64_t)ATT_ZMAX ? (int64_t)ATT_ZMAX : z));
}

// the larger of two logits; a NaN never wins (v > mx, as the CPU's router takes the maximum)
struct router_op_max {
    __device__ __forceinline__ float operator()(float a, float b) const { return b > a ? b : a; }
};

// A block of ROUTER_T threads per token, its logits in shared memory. Each logit's rank in the
// router's order (hm_hd_rank_before: larger first, ties to the lower index) is the number of
// logits before it, counted by its own thread; a rank below k is that pick's place. No round
// waits for the one before, so a decode step's token costs a pass over the logits per thread
// instead of k warp-wide arg-max rounds. A NaN is never picked (no logit comes after it, and it
// comes before none), as hm_hd_pick_after skips it; places left without a pick get id -1. The
// weights are hm_hd_router_weight's (the double sum of exp taken in another order than the
// CPU's), renormalised by their double sum in pick order, as the CPU's.
#define ROUTER_T 128
__device__ __forceinline__ void router_pick(const float *__restrict__ x, int e, int k, bool renorm,
                                            int32_t *__restrict__ ids, float *__restrict__ w) {
    __shared__ float v[HM_HD_ROUTER_MAX], pv[32], fred[32];
    __shared__ int pi[32];
    __shared__ double dred[32];
    const int tid = threadIdx.x;
    float mx = -INFINITY;
    for (int j = tid; j < e; j += ROUTER_T) {
        const float t = __ldcg(x + j); /* written by other blocks of a fused router */
        v[j] = t;
        mx = t > mx ? t : mx;
    }
    if (tid < k) pv[tid] = -INFINITY, pi[tid] = -1;
    mx = hm_block_reduce(mx, -INFINITY, router_op_max(), fred); /* syncs: v is written */
    double s = 0;
    for (int j = tid; j < e; j += ROUTER_T) {
        const float a = v[j];
        s += exp((double)a - mx);
        if (a != a) continue;
        const int r = hm_hd_router_rank(v, e, j);
        if (r < k) pv[r] = a, pi[r] = j;
    }
    const double sum = hm_block_sum_d(s, dred); /* syncs: the picks are written */
    if (tid >= 32) return;
    const float wk = tid < k ? hm_hd_router_weight(pv[tid], mx, sum) : 0.0f;
    if (tid < k) pv[tid] = wk;
    __syncwarp();
    double sel = 0;
    if (renorm)
        for (int r = 0; r < k; r++) sel += pv[r];
    if (tid < k) {
        ids[tid] = pi[tid];
        w[tid] = renorm ? (float)(wk / sel) : wk;
    }
}

__global__ void __launch_bounds__(ROUTER_T)
    router_k(const float *__restrict__ rl, int64_t rs, int e, int k, bool renorm,
             int32_t *__restrict__ ids, float *__restrict__ w) {
    hm_pdl_start();
    const int64_t i = blockIdx.x;
    router_pick(rl + i * rs, e, k, renorm, ids + i * k, w + i * k);
}

// The router's F32 matvec and its top-k in one launch (a decode batch's): block (b, t) computes
// logits RMV_ROWS b .. + RMV_ROWS of token t, RMV_SEG warps per row over consecutive column
// segments of nq float4 each, a lane's float4 lane, lane + 32, ... (up to RMV_V) loaded before
// hm_pdl_start (the weights do not depend on the kernel before); the last block of token t
// (hm_last_block) picks as router_k.
enum { RMV_SEG = 2, RMV_ROWS = ROUTER_T / 32 / RMV_SEG, RMV_V = 16 };

__global__ void __launch_bounds__(ROUTER_T)
    router_mv_k(const float *__restrict__ wr, int64_t wrs, int nq, const float *__restrict__ x,
                int64_t xs, int e, int k, bool renorm, float *__restrict__ rl, int64_t rs,
                int32_t *__restrict__ ids, float *__restrict__ w, unsigned *__restrict__ cnt) {
    __shared__ float part[ROUTER_T / 32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = blockIdx.y;
    const int r = blockIdx.x * RMV_ROWS + warp / RMV_SEG, sg = warp % RMV_SEG;
    float4 wv[RMV_V];
    if (r < e) {
        const float4 *wp = (const float4 *)(wr + r * wrs) + (int64_t)sg * nq;
#pragma unroll
        for (int u = 0; u < RMV_V; u++)
            if (lane + 32 * u < nq) wv[u] = __ldg(wp + lane + 32 * u);
    }
    hm_pdl_start();
    float acc = 0.0f;
    if (r < e) {
        const float4 *xp = (const float4 *)(x + t * xs) + (int64_t)sg * nq;
#pragma unroll
        for (int u = 0; u < RMV_V; u++) {
            if (lane + 32 * u >= nq) break;
            const float4 a = xp[lane + 32 * u];
            acc = fmaf(wv[u].x, a.x, acc), acc = fmaf(wv[u].y, a.y, acc);
            acc = fmaf(wv[u].z, a.z, acc), acc = fmaf(wv[u].w, a.w, acc);
        }
    }
    acc = hm_warp_sum(acc);
    if (lane == 0) part[warp] = acc;
    __syncthreads();
    if (threadIdx.x < RMV_ROWS) {
        const int rr = blockIdx.x * RMV_ROWS + threadIdx.x;
        float sum = 0.0f;
#pragma unroll
        for (int q = 0; q < RMV_SEG; q++) sum += part[threadIdx.x * RMV_SEG + q];
        if (rr < e) rl[t * rs + rr] = sum;
    }
    if (!hm_last_block(cnt + t, gridDim.x)) return;
    router_pick(rl + t * rs, e, k, renorm, ids + (int64_t)t * k, w + (int64_t)t * k);
}

extern "C" cudaError_t hm_cu_router_fused(const hm_cu_w *wr, const float *x, int64_t xs, int n,
                                          int k, bool renorm, float *rl, int64_t rs, int32_t *ids,
                                          float *w, unsigned *cnt, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    static_assert(RMV_SEG * 4 == 8 && RMV_SEG * 4 * 32 * RMV_V == 4096,
                  "hm_cu_router_fused_ok's limits are the kernel's");
    if (!cnt || !hm_cu_router_fused_ok(wr, x, xs, n, k)) return cudaErrorInvalidValue;
    const int e = (int)wr->rows;
    const int64_t nq = wr->cols / (4 * RMV_SEG); /* float4 per segment */
    const dim3 grid((unsigned)((e + RMV_ROWS - 1) / RMV_ROWS), (unsigned)n);
    hm_launch(router_mv_k, grid, ROUTER_T, 0, stream, (const float *)wr->data,
              (int64_t)(wr->row_bytes / sizeof(float)), (int)nq, x, xs, e, k, renorm, rl, rs, ids,
              w, cnt);
    return cudaGetLastError();
}

extern "C" cudaError_t hm_cu_router_topk(const float *rl, int64_t rs, int n, int e, int k,
                                         bool renorm, int32_t *ids, float *w, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (k < 1 || k > e || k > 32 || e > HM_HD_ROUTER_MAX) return cudaErrorInvalidValue;
    hm_launch(router_k, (unsigned)n, ROUTER_T, 0, stream, rl, rs, e, k, renorm, ids, w);
    return cudaGetLastError();
}

// blocks of 256 values of a token (grid: values, tokens), so that a decode step's one token
// still spreads over the SMs; a token's k places and weights are read once per block
__global__ void __launch_bounds__(256)
    combine_k(const float *__restrict__ y, int64_t ys, const int32_t *__restrict__ pos_of,
              const float *__restrict__ w, int k, int64_t h, float *__restrict__ out, int64_t os) {
    hm_pdl_start();
    __shared__ int64_t at[64];
    __shared__ float wt[64];
    const int64_t t = blockIdx.y;
    if ((int)threadIdx.x < k) {
        const int64_t p = t * k + threadIdx.x;
        at[threadIdx.x] = pos_of ? (int64_t)pos_of[p] : p;
        wt[threadIdx.x] = w[p];
    }
    __syncthreads();
    const int64_t d = (int64_t)blockIdx.x * 256 + threadIdx.x;
    if (d >= h) return;
    float s = 0.0f;
    for (int j = 0; j < k; j++)
        if (at[j] >= 0) s = fmaf(wt[j], y[at[j] * ys + d], s); /* -1: on the CPU */
    out[t * os + d] = s;
}

extern "C" cudaError_t hm_cu_moe_combine(const float *y, int64_t ys, const int32_t *pos_of,
                                         const float *w, int n, int k, int64_t h, float *out,
                                         int64_t os, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (k < 1 || k > 64) return cudaErrorInvalidValue;
    hm_launch(combine_k, dim3((unsigned)((h + 255) / 256), (unsigned)n), 256, 0, stream, y, ys,
              pos_of, w, k, h, out, os);
    return cudaGetLastError();
}

// ---- multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): model/mla.c's steps on the GPU ----

__global__ void router_softmax_group_k(const float *__restrict__ rl, int64_t rs, int n, int e,
                                       int n_group, int topk_group, int k, bool renorm, float scale,
                                       int32_t *__restrict__ ids, float *__restrict__ w) {
    hm_pdl_start();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    hm_hd_router_softmax_group(rl + (int64_t)t * rs, e, n_group, topk_group, k, renorm, scale,
                               ids + (int64_t)t * k, w + (int64_t)t * k);
}

extern "C" cudaError_t hm_cu_router_softmax_group(const float *rl, int64_t rs, int n, int e,
                                                  int n_group, int topk_group, int k, bool renorm,
                                                  float scale, int32_t *ids, float *w,
                                                  cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (e > HM_HD_ROUTER_MAX || n_group < 1 || n_group > 64 || e % n_group || topk_group < 1 ||
        topk_group > n_group || k > e / n_group * topk_group)
        return cudaErrorInvalidValue;
    hm_launch(router_softmax_group_k, (unsigned)((n + 63) / 64), 64, 0, stream, rl, rs, n, e,
              n_group, topk_group, k, renorm, scale, ids, w);
    return cudaGetLastError();
}

// element i of an absorbed matrix's copy of type t (HM_TYPE_F32, F16 or BF16)
__device__ __forceinline__ float mla_w(const void *p, int t, size_t i) {
    if (t == HM_TYPE_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (t == HM_TYPE_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

// one block per token: the latent normed, k_pe and every head's q_pe rotated (interleaved
// pairs), [c, k_pe] into the cache at the token's position
template <bool F16> __global__ void __launch_bounds__(256) mla_store_k(hm_cu_mla a, hm_cu_kv kv) {
    hm_pdl_start();
    __shared__ double sh[32];
    const int i = blockIdx.x, tid = threadIdx.x, kvl = a.kvl, rope = a.rope, half = rope / 2;
    float *x = a.kv + (int64_t)i * a.kv_stride;
    double ss = 0;
    for (int d = tid; d < kvl; d += blockDim.x) ss += (double)x[d] * x[d];
    ss = hm_block_sum_d(ss, sh);
    const float sc = hm_hd_rms_scale(ss, kvl, a.eps);
    const float *cs = a.cs + (int64_t)i * rope;
    const int qhd = a.nope + rope;
    for (int j = tid; j < half * (a.n_heads + 1); j += blockDim.x) {
        const int h = j / half - 1, jj = j % half;
        float *y = h < 0 ? x + kvl : a.q + (int64_t)i * a.q_stride + (int64_t)h * qhd + a.nope;
        hm_hd_rope_pair(&y[2 * jj], &y[2 * jj + 1], cs[jj], cs[half + jj]);
        if (h >= 0) { /* the absorbed query's rotary part */
            float *qa = a.qa + ((int64_t)i * a.n_heads + h) * (kvl + rope) + kvl;
            qa[2 * jj] = y[2 * jj], qa[2 * jj + 1] = y[2 * jj + 1];
        }
    }
    for (int d = tid; d < kvl; d += blockDim.x) x[d] = x[d] * sc * a.kv_norm[d];
    __syncthreads();
    const size_t off = kv_head(kv, a.il, a.seq[i], 0) + (size_t)a.pos[i] * (size_t)kv.head_dim;
    for (int d = tid; d < kvl + rope; d += blockDim.x) kv_put<F16>(kv.k, off + d, x[d]);
}

enum { MLA_TOK = 8 }; // tokens per block of the absorption kernels: each matrix row read once

// block (head h, tokens t0 .. t0 + 8): y[t][h][0, J) = x[t][h][0, K) . W[h] ([K][J] of type wt),
// the 8 tokens' rows staged so that each row of W is read once per block
__global__ void __launch_bounds__(256)
    mla_heads_k(const float *__restrict__ x, int64_t xt, int64_t xh, int K, const void *W, int wt,
                int J, float *__restrict__ y, int64_t yt, int64_t yh, int n) {
    hm_pdl_start();
    extern __shared__ float xs[]; // [MLA_TOK][K]
    const int h = blockIdx.x, t0 = blockIdx.y * MLA_TOK, tid = threadIdx.x;
    const int nt = n - t0 < MLA_TOK ? n - t0 : MLA_TOK;
    for (int j = tid; j < MLA_TOK * K; j += blockDim.x) {
        const int tt = j / K, r = j % K;
        xs[j] = tt < nt ? x[(int64_t)(t0 + tt) * xt + (int64_t)h * xh + r] : 0.0f;
    }
    __syncthreads();
    for (int c = tid; c < J; c += blockDim.x) {
        float acc[MLA_TOK] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        for (int r = 0; r < K; r++) {
            const float w = mla_w(W, wt, ((size_t)h * K + r) * (size_t)J + c);
#pragma unroll
            for (int tt = 0; tt < MLA_TOK; tt++) acc[tt] = fmaf(xs[tt * K + r], w, acc[tt]);
        }
        for (int tt = 0; tt < nt; tt++) y[(int64_t)(t0 + tt) * yt + (int64_t)h * yh + c] = acc[tt];
    }
}

static bool mla_ok(const hm_cu_mla *a) {
    return a->kvl > 0 && a->rope > 0 && a->rope % 2 == 0 && a->nope > 0 && a->vd > 0 &&
           a->n_heads > 0 && a->nope <= 1024 && a->kvl <= 4096 &&
           (a->kt == HM_TYPE_F32 || a->kt == HM_TYPE_F16 || a->kt == HM_TYPE_BF16) &&
           (a->vt == HM_TYPE_F32 || a->vt == HM_TYPE_F16 || a->vt == HM_TYPE_BF16);
}

extern "C" cudaError_t hm_cu_mla_store(const hm_cu_mla *a, const hm_cu_kv *kv, int n,
                                       cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (!mla_ok(a) || kv->head_dim != a->kvl + a->rope || kv->n_kv_heads != 1)
        return cudaErrorInvalidValue;
    if (kv->f16)
        hm_launch(mla_store_k<true>, (unsigned)n, 256, 0, stream, *a, *kv);
    else
        hm_launch(mla_store_k<false>, (unsigned)n, 256, 0, stream, *a, *kv);
    return cudaGetLastError();
}

extern "C" cudaError_t hm_cu_mla_absorb(const hm_cu_mla *a, int n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (!mla_ok(a)) return cudaErrorInvalidValue;
    const dim3 grid((unsigned)a->n_heads, (unsigned)((n + MLA_TOK - 1) / MLA_TOK));
    const int64_t qhd = a->nope + a->rope, ahd = a->kvl + a->rope;
    hm_launch(mla_heads_k, grid, 256, sizeof(float) * MLA_TOK * (size_t)a->nope, stream, a->q,
              a->q_stride, qhd, a->nope, a->k_b, a->kt, a->kvl, a->qa, a->n_heads * ahd, ahd, n);
    return cudaGetLastError();
}

extern "C" cudaError_t hm_cu_mla_values(const hm_cu_mla *a, int n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (!mla_ok(a)) return cudaErrorInvalidValue;
    const dim3 grid((unsigned)a->n_heads, (unsigned)((n + MLA_TOK - 1) / MLA_TOK));
    const size_t sm = sizeof(float) * MLA_TOK * (size_t)a->kvl;
    if (sm > 48 * 1024) return cudaErrorInvalidValue;
    hm_launch(mla_heads_k, grid, 256, sm, stream, a->o, (int64_t)a->n_heads * a->kvl, a->kvl,
              a->kvl, a->v_b, a->vt, a->vd, a->out, a->out_stride, a->vd, n);
    return cudaGetLastError();
}

// ---- the hybrid step's hand-off through pinned host memory (hm_cu_handoff_out / _in) ----

enum { HO_T = 1024 };

__device__ __forceinline__ uint32_t ho_load_acquire(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void ho_store_release(uint32_t *p, uint32_t v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint64_t ho_clock_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void __launch_bounds__(HO_T)
    handoff_out_k(const float *__restrict__ x, int64_t xs, int n, int64_t h,
                  const int32_t *__restrict__ ids, const float *__restrict__ w, int np, float *hx,
                  int32_t *hids, float *hw, uint32_t *flag, const uint32_t *__restrict__ epoch) {
    hm_pdl_start();
    if (h % 4 == 0 && xs % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)hx % 16 == 0) {
        // four floats a store: a warp's 512 bytes one write over PCIe
        const int64_t h4 = h / 4;
        for (int64_t i = threadIdx.x; i < (int64_t)n * h4; i += HO_T)
            ((float4 *)hx)[i] = ((const float4 *)(x + (i / h4) * xs))[i % h4];
    } else {
        for (int64_t i = threadIdx.x; i < (int64_t)n * h; i += HO_T)
            hx[i] = x[(i / h) * xs + i % h];
    }
    for (int i = threadIdx.x; i < np; i += HO_T) hids[i] = ids[i], hw[i] = w[i];
    __threadfence_system(); // each thread's writes before the block's barrier, then the flag
    __syncthreads();
    if (threadIdx.x == 0) ho_store_release(flag, *epoch);
}

// The in side: one thread waits for the flag (the only one polling the host: many pollers'
// PCIe reads would snoop the CPU's caches while its experts run), then blocks of HI_T threads
// over the rows read the host's sum, four floats a load where rows, strides and pointers allow.
// Each read over PCIe waits a round trip: one block of one-float loads (32 warps' 128 bytes in
// flight) took ~64 of them for a batch of 32 2048-value rows.
enum { HI_T = 256, HI_MAX_BLOCKS = 256 };

__global__ void __launch_bounds__(32)
    handoff_wait_k(const uint32_t *flag, const uint32_t *__restrict__ epoch, uint32_t *err) {
    hm_pdl_start();
    if (threadIdx.x == 0) {
        const uint32_t want = *epoch;
        const uint64_t t0 = ho_clock_ns();
        while (ho_load_acquire(flag) != want)
            if (ho_clock_ns() - t0 > 30000000000ull) {
                *(volatile uint32_t *)err = 1;
                break;
            }
        __threadfence_system();
    }
}

__global__ void __launch_bounds__(HI_T)
    handoff_in_k(const float *hout, int n, int64_t h, bool add, float *__restrict__ out, int64_t os,
                 bool vec) {
    hm_pdl_start(); // after handoff_wait_k: the flag seen, the sum written before it
    const int64_t step = (int64_t)gridDim.x * HI_T,
                  first = (int64_t)blockIdx.x * HI_T + threadIdx.x;
    if (vec) { // h, os and both pointers whole float4s
        const int64_t h4 = h / 4, n4 = (int64_t)n * h4;
        for (int64_t i = first; i < n4; i += step) {
            const float4 v = __ldcv((const float4 *)hout + i);
            float4 *o = (float4 *)(out + (i / h4) * os) + i % h4;
            if (add) {
                const float4 a = *o;
                *o = make_float4(a.x + v.x, a.y + v.y, a.z + v.z, a.w + v.w);
            } else {
                *o = v;
            }
        }
        return;
    }
    for (int64_t i = first; i < (int64_t)n * h; i += step) {
        const float v = __ldcv(hout + i);
        float *o = out + (i / h) * os + i % h;
        *o = add ? *o + v : v;
    }
}

extern "C" cudaError_t hm_cu_handoff_out(const float *x, int64_t xs, int n, int64_t h,
                                         const int32_t *ids, const float *w, int np, float *hx,
                                         int32_t *hids, float *hw, uint32_t *flag,
                                         const uint32_t *epoch, cudaStream_t stream) {
    if (n < 0 || np < 0 || h <= 0) return cudaErrorInvalidValue;
    hm_launch(handoff_out_k, 1, HO_T, 0, stream, x, xs, n, h, ids, w, np, hx, hids, hw, flag,
              epoch);
    return cudaGetLastError();
}

extern "C" cudaError_t hm_cu_handoff_in(const uint32_t *flag, const uint32_t *epoch,
                                        const float *hout, int n, int64_t h, bool add, float *out,
                                        int64_t os, uint32_t *err, cudaStream_t stream) {
    if (n < 0 || h <= 0) return cudaErrorInvalidValue;
    const bool vec =
        h % 4 == 0 && os % 4 == 0 && (uintptr_t)hout % 16 == 0 && (uintptr_t)out % 16 == 0;
    const int64_t loads = (int64_t)n * (vec ? h / 4 : h);
    const int64_t nb = loads < 1 ? 1 : (loads + HI_T - 1) / HI_T, most = HI_MAX_BLOCKS;
    hm_launch(handoff_wait_k, 1, 32, 0, stream, flag, epoch, err);
    hm_launch(handoff_in_k, (unsigned)(nb < most ? nb : most), HI_T, 0, stream, hout, n, h, add,
              out, os, vec);
    return cudaGetLastError();
}

// ---- the sampler's candidates: each row's k largest logits (ties to the lower token), in token
// order, as hm_sampler's top-k leaves them (hm_sampler_sample_candidates) ----

enum { TOP_T = 1024, TOP_SEGS = 32 };

// the sampler's sort key: the order of the floats as unsigned integers (-0 made +0 first)
__device__ __forceinline__ uint32_t top_key(float x) {
    const uint32_t u = __float_as_uint(x + 0.0f);
    return u ^ ((uint32_t)((int32_t)u >> 31) | 0x80000000u);
}

// exclusive prefix sums over the block of two counts (a, b), and the block's totals
__device__ __forceinline__ void top_scan(int *a, int *b, int *ta, int *tb, int2 *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int x = *a, y = *b;
    for (int o = 1; o < 32; o <<= 1) {
        const int u = __shfl_up_sync(0xffffffffu, x, o), v = __shfl_up_sync(0xffffffffu, y, o);
        if (lane >= o) x += u, y += v;
    }
    if (lane == 31) sh[warp] = make_int2(x, y);
    __syncthreads();
    if (warp == 0) {
        int2 s = lane < TOP_T / 32 ? sh[lane] : make_int2(0, 0);
        for (int o = 1; o < 32; o <<= 1) {
            const int u = __shfl_up_sync(0xffffffffu, s.x, o);
            const int v = __shfl_up_sync(0xffffffffu, s.y, o);
            if (lane >= o) s.x += u, s.y += v;
        }
        if (lane < TOP_T / 32) sh[lane] = s; // inclusive over warps
    }
    __syncthreads();
    const int2 before = warp ? sh[warp - 1] : make_int2(0, 0);
    *ta = sh[TOP_T / 32 - 1].x, *tb = sh[TOP_T / 32 - 1].y;
    *a = before.x + x - *a, *b = before.y + y - *b;
}

// One block per (segment, row): the k-th largest key of the segment by four 8-bit radix passes
// (per-warp histograms), then each thread's contiguous share walked in token order. Row r's
// segment s is logits [s * seg, s * seg + len) of row r (len = min(seg, V - s * seg)); its k
// picks go to ids / vals + (r * gridDim.x + s) * k, its first NaN or +inf to bad[r * gridDim.x
// + s]. A second pass (CAND) runs over those picks as its row: cid maps a pick back to its
// token, and its bad is the least of the first pass's (pbad, nseg per row), so every pick is a
// token index and the ties still go to the lower token: each segment's picks are in token order
// and the segments are in order.
template <bool CAND>
__global__ void __launch_bounds__(TOP_T)
    top_k_k(const float *__restrict__ lg, int64_t ls, int V, int seg, int k,
            const int32_t *__restrict__ cid, const int32_t *__restrict__ pbad, int nseg,
            int32_t *__restrict__ ids, float *__restrict__ vals, int32_t *__restrict__ bad) {
    hm_pdl_start();
    __shared__ unsigned hist[TOP_T / 32][256];
    __shared__ unsigned s_prefix;
    __shared__ int s_rem, s_bad;
    __shared__ int2 sh[TOP_T / 32];
    const int row = blockIdx.y, sg = blockIdx.x, tid = threadIdx.x, warp = tid >> 5;
    const int i0s = sg * seg, len = V - i0s < seg ? V - i0s : seg;
    const float *x = lg + (int64_t)row * ls + i0s;
    if (tid == 0) s_bad = INT_MAX;
    __syncthreads();
    int first_bad = INT_MAX;
    if (CAND) {
        for (int j = tid; j < nseg; j += TOP_T) {
            const int b = pbad[(int64_t)row * nseg + j];
            if (b >= 0 && b < first_bad) first_bad = b;
        }
    } else {
        for (int i = tid; i < len; i += TOP_T)
            if (!(x[i] < INFINITY) && i < first_bad) first_bad = i; // NaN or +inf
        if (first_bad < INT_MAX) first_bad += i0s;
    }
    if (first_bad < INT_MAX) atomicMin(&s_bad, first_bad);
    uint32_t prefix = 0, mask = 0;
    int rem = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int j = tid; j < TOP_T / 32 * 256; j += TOP_T) (&hist[0][0])[j] = 0;
        __syncthreads();
        for (int i = tid; i < len; i += TOP_T) {
            const uint32_t key = top_key(x[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[warp][(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid < 256) {
            unsigned t = 0;
            for (int w = 0; w < TOP_T / 32; w++) t += hist[w][tid];
            hist[0][tid] = t;
        }
        __syncthreads();
        if (tid == 0) {
            int above = 0, b = 255;
            for (; b > 0; b--) {
                if (above + (int)hist[0][b] >= rem) break;
                above += (int)hist[0][b];
            }
            s_prefix = prefix | ((uint32_t)b << shift);
            s_rem = rem - above;
        }
        __syncthreads();
        prefix = s_prefix, rem = s_rem, mask |= 255u << shift;
    }
    // prefix: the k-th largest key; rem: how many entries equal to it are taken (the first ones)
    const int per = (len + TOP_T - 1) / TOP_T, i0 = tid * per < len ? tid * per : len,
              i1 = i0 + per < len ? i0 + per : len;
    int above = 0, ties = 0, ta, tb;
    for (int i = i0; i < i1; i++) {
        const uint32_t key = top_key(x[i]);
        above += key > prefix, ties += key == prefix;
    }
    top_scan(&above, &ties, &ta, &tb, sh);
    const int64_t out = ((int64_t)row * gridDim.x + sg) * k;
    int32_t *oi = ids + out;
    float *ov = vals + out;
    const int32_t *ci = CAND ? cid + (int64_t)row * ls : NULL;
    for (int i = i0; i < i1; i++) {
        const uint32_t key = top_key(x[i]);
        const int32_t tok = CAND ? ci[i] : i0s + i;
        if (key > prefix) {
            const int at = above + (ties < rem ? ties : rem);
            oi[at] = tok, ov[at] = x[i] + 0.0f;
            above++;
        } else if (key == prefix) {
            if (ties < rem) oi[above + ties] = tok, ov[above + ties] = x[i] + 0.0f;
            ties++;
        }
    }
    if (tid == 0) bad[(int64_t)row * gridDim.x + sg] = s_bad == INT_MAX ? -1 : s_bad;
}

// the first pass's segments of a row of V logits for k picks: each at least k long (up to
// TOP_SEGS of them), so that every segment yields k picks; 1 where a row is too short to split
static int top_segs(int V, int k) {
    int s = V / (k + TOP_SEGS);
    return s < 1 ? 1 : (s > TOP_SEGS ? TOP_SEGS : s);
}

extern "C" size_t hm_cu_top_scratch(int rows, int V) {
    if (rows <= 0 || top_segs(V, 1) < 2) return 0;
    return (size_t)rows * TOP_SEGS *
           (HM_CU_TOP_MAX * (sizeof(int32_t) + sizeof(float)) + sizeof(int32_t));
}

extern "C" cudaError_t hm_cu_top_candidates(const float *logits, int64_t ls, int rows, int V, int k,
                                            int32_t *ids, float *vals, int32_t *bad, void *scratch,
                                            cudaStream_t stream) {
    if (rows <= 0) return cudaSuccess;
    if (k < 1 || k > HM_CU_TOP_MAX || k > V) return cudaErrorInvalidValue;
    const int segs = scratch ? top_segs(V, k) : 1;
    if (segs < 2) {
        hm_launch(top_k_k<false>, dim3(1, (unsigned)rows), TOP_T, 0, stream, logits, ls, V, V, k,
                  (const int32_t *)NULL, (const int32_t *)NULL, 0, ids, vals, bad);
        return cudaGetLastError();
    }
    // scratch: the picks' values [rows][segs * k], their tokens, each segment's bad
    const int seg = (V + segs - 1) / segs, nc = segs * k;
    float *cv = (float *)scratch;
    int32_t *ci = (int32_t *)(cv + (size_t)rows * (size_t)nc);
    int32_t *cb = ci + (size_t)rows * (size_t)nc;
    hm_launch(top_k_k<false>, dim3((unsigned)segs, (unsigned)rows), TOP_T, 0, stream, logits, ls, V,
              seg, k, (const int32_t *)NULL, (const int32_t *)NULL, 0, ci, cv, cb);
    hm_launch(top_k_k<true>, dim3(1, (unsigned)rows), TOP_T, 0, stream, (const float *)cv,
              (int64_t)nc, nc, nc, k, (const int32_t *)ci, (const int32_t *)cb, segs, ids, vals,
              bad);
    return cudaGetLastError();
}
