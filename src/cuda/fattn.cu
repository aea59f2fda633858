// fattn.cu - prefill attention on the tensor cores: a block takes 64 query rows of one head of a
// batch that is one sequence at consecutive positions (a prompt's chunk), and walks the cache in
// tiles of 64 keys. Queries, keys, values and the softmax weights are rounded to IEEE half and
// multiplied with half WMMA fragments into float accumulators. Two passes over the keys: the
// first takes each row's largest score, the second sums exp(score - max) and accumulates the
// weighted values in the fragments, so nothing accumulated ever needs rescaling. Causal, with
// the sliding window and the sinks of hm_cu_attention; head dims 64 and 128, no latent values.
#include <cuda_fp16.h>
#include <mma.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/kernels.h"
#include "cuda/twins.h"

using namespace nvcuda;

enum { FA_K = 64 };
// QB query rows a block, 16 a warp: 128 (8 warps) by default, which reads each key and value
// tile once for twice the rows of 64 (HMOE_CUDA_FA_Q=64: 64, for A/B)

// 32-byte aligned rows for the fragments (pads of 8 halves / 4 floats); o, the output tile as
// floats, reuses the key and value tiles once the last tile is done
template <int HD, int QB> struct fa_smem {
    union {
        struct {
            __half k[FA_K][HD + 8];
            __half v[FA_K][HD + 8];
        } kv;
        float o[QB][HD + 4];
    } u;
    __half q[QB][HD + 8];
    float s[QB][FA_K + 4];
    __half p[QB][FA_K + 8];
    float m[QB], l[QB];
};

template <int HD, bool F16, int QB>
__global__ void __launch_bounds__(2 * QB)
    fa_k(hm_cu_attn a, hm_cu_kv kv, int n, int seq, int pos0) {
    enum { FA_Q = QB, FA_T = 2 * QB };
    hm_pdl_start();
    extern __shared__ __align__(128) unsigned char fa_raw[];
    fa_smem<HD, QB> &sm = *reinterpret_cast<fa_smem<HD, QB> *>(fa_raw);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int i0 = blockIdx.x * FA_Q, h = blockIdx.y;
    const int nq = n - i0 < FA_Q ? n - i0 : FA_Q;
    const size_t base = kv_head(kv, a.il, seq, h / (a.n_heads / kv.n_kv_heads));
    for (int e = tid; e < FA_Q * HD; e += FA_T) {
        const int r = e / HD, d = e % HD;
        sm.q[r][d] = __float2half_rn(
            r < nq ? a.q[(int64_t)(i0 + r) * a.q_stride + (int64_t)h * HD + d] : 0.0f);
    }
    if (tid < FA_Q) sm.m[tid] = -INFINITY, sm.l[tid] = 0.0f;
    const int qfirst = pos0 + i0, qlast = pos0 + i0 + nq - 1;
    const int lo0 = a.window && qfirst + 1 > a.window ? qfirst + 1 - a.window : 0;
    // this lane's half of row r of the warp's 16: its position and lowest key
    const int r = 16 * warp + (lane >> 1), hf = lane & 1, qp = pos0 + i0 + r;
    const int lo = a.window && qp + 1 > a.window ? qp + 1 - a.window : 0;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> o[HD / 16];
    __syncthreads();
    for (int pass = 0; pass < 2; pass++) {
        if (pass)
#pragma unroll
            for (int c = 0; c < HD / 16; c++) wmma::fill_fragment(o[c], 0.0f);
        for (int k0 = lo0 / FA_K * FA_K; k0 <= qlast; k0 += FA_K) {
            // four values a thread and load (16 bytes of an f32 cache, 8 of an f16 one); rows
            // and the tiles' padded rows are multiples of 4 values, so every load is aligned
            for (int e = tid; e < FA_K * HD / 4; e += FA_T) {
                const int kr = e / (HD / 4), d = 4 * (e % (HD / 4)), p = k0 + kr;
                const size_t at = base + (size_t)(p <= qlast ? p : qlast) * HD + d;
                const uint2 zero = make_uint2(0u, 0u); // +0.0 halves
                *(uint2 *)&sm.u.kv.k[kr][d] = p <= qlast ? kv_get4h<F16>(kv.k, at) : zero;
                if (pass) *(uint2 *)&sm.u.kv.v[kr][d] = p <= qlast ? kv_get4h<F16>(kv.v, at) : zero;
            }
            __syncthreads();
            // this warp's 16 rows of scores against the tile's 64 keys
#pragma unroll
            for (int c = 0; c < FA_K / 16; c++) {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> sc;
                wmma::fill_fragment(sc, 0.0f);
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fq;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fk;
                    wmma::load_matrix_sync(fq, &sm.q[16 * warp][16 * kk], HD + 8);
                    wmma::load_matrix_sync(fk, &sm.u.kv.k[16 * c][16 * kk], HD + 8);
                    wmma::mma_sync(sc, fq, fk, sc);
                }
                wmma::store_matrix_sync(&sm.s[16 * warp][16 * c], sc, FA_K + 4,
                                        wmma::mem_row_major);
            }
            __syncwarp();
            // two lanes per row, 32 keys each: the row's maximum (pass 0), its weights (pass 1)
            if (!pass) {
                float cm = -INFINITY;
                for (int j = 32 * hf; j < 32 * hf + 32; j++) {
                    const int p = k0 + j;
                    if (p >= lo && p <= qp) cm = fmaxf(cm, sm.s[r][j] * a.scale);
                }
                cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, 1));
                if (!hf) sm.m[r] = fmaxf(sm.m[r], cm);
            } else {
                const float m = sm.m[r];
                float ls = 0.0f;
                for (int j = 32 * hf; j < 32 * hf + 32; j++) {
                    const int p = k0 + j;
                    const float e = p >= lo && p <= qp ? expf(sm.s[r][j] * a.scale - m) : 0.0f;
                    ls += e;
                    sm.p[r][j] = __float2half_rn(e);
                }
                ls += __shfl_xor_sync(0xffffffffu, ls, 1);
                if (!hf) sm.l[r] += ls;
                __syncwarp();
#pragma unroll
                for (int c = 0; c < HD / 16; c++)
#pragma unroll
                    for (int kk = 0; kk < FA_K / 16; kk++) {
                        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fp;
                        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fv;
                        wmma::load_matrix_sync(fp, &sm.p[16 * warp][16 * kk], FA_K + 8);
                        wmma::load_matrix_sync(fv, &sm.u.kv.v[16 * kk][16 * c], HD + 8);
                        wmma::mma_sync(o[c], fp, fv, o[c]);
                    }
            }
            __syncthreads(); // the next tile overwrites k and v
        }
    }
#pragma unroll
    for (int c = 0; c < HD / 16; c++)
        wmma::store_matrix_sync(&sm.u.o[16 * warp][16 * c], o[c], HD + 4, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 16 * HD; e += 32) {
        const int rr = 16 * warp + e / HD, d = e % HD;
        if (rr >= nq) continue;
        hm_osm st = {sm.m[rr], sm.l[rr]};
        const float f = a.sinks ? hm_osm_sink(&st, a.sinks[h]) : 1.0f;
        a.out[(int64_t)(i0 + rr) * a.out_stride + (int64_t)h * HD + d] = sm.u.o[rr][d] * f / st.l;
    }
}

template <int HD, bool F16, int QB>
static cudaError_t fa_launch(const hm_cu_attn *a, const hm_cu_kv *kv, int n, int seq, int pos0,
                             cudaStream_t stream) {
    const int bytes = (int)sizeof(fa_smem<HD, QB>);
    const cudaError_t e =
        cudaFuncSetAttribute(fa_k<HD, F16, QB>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)((n + QB - 1) / QB), (unsigned)a->n_heads);
    hm_launch(fa_k<HD, F16, QB>, grid, 2 * QB, bytes, stream, *a, *kv, n, seq, pos0);
    return cudaGetLastError();
}

template <int HD, bool F16>
static cudaError_t fa_pick(const hm_cu_attn *a, const hm_cu_kv *kv, int n, int seq, int pos0,
                           cudaStream_t stream) {
    static int q64 = -1; /* HMOE_CUDA_FA_Q=64, read once */
    if (q64 < 0) {
        const char *v = getenv("HMOE_CUDA_FA_Q");
        q64 = v && !strcmp(v, "64");
    }
    return q64 ? fa_launch<HD, F16, 64>(a, kv, n, seq, pos0, stream)
               : fa_launch<HD, F16, 128>(a, kv, n, seq, pos0, stream);
}

extern "C" cudaError_t hm_cu_attention_tc(const hm_cu_attn *a, const hm_cu_kv *kv, int n, int seq,
                                          int pos0, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const int hd = kv->head_dim;
    if ((hd != 64 && hd != 128) || kv->v_dim || kv->n_kv_heads < 1 || a->n_heads % kv->n_kv_heads ||
        seq < 0 || seq >= kv->n_seq || pos0 < 0 || (int64_t)pos0 + n > kv->kv_ctx)
        return cudaErrorInvalidValue;
    if (hd == 64)
        return kv->f16 ? fa_pick<64, true>(a, kv, n, seq, pos0, stream)
                       : fa_pick<64, false>(a, kv, n, seq, pos0, stream);
    return kv->f16 ? fa_pick<128, true>(a, kv, n, seq, pos0, stream)
                   : fa_pick<128, false>(a, kv, n, seq, pos0, stream);
}
