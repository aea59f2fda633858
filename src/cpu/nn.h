/* nn.h - the dense transformer ops of a forward pass on the CPU: matrix multiply of any weight
 * type with float activations (threaded over a pool), RMSNorm, rotary embedding, causal attention
 * over a per-sequence KV cache, and small element-wise helpers.
 *
 * The plain functions are pure (no allocation, no threads); the hm_nn_* drivers split work over
 * a pool's participants and take caller-owned scratch sized by the matching *_scratch_bytes. */
#ifndef HM_CPU_NN_H
#define HM_CPU_NN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/pool.h"
#include "cpu/matvec.h"

/* y = x / sqrt(mean(x^2) + eps) * w  (w may be NULL: no scale). In-place (y == x) is fine. */
void hm_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps);

/* Rotary inverse frequencies of transformers' default rope: inv[i] = theta^(-2i/dim), i < dim/2 */
void hm_rope_inv_freq(float *inv, int dim, float theta);

/* cos and sin of position pos's rotary angles: cs[i] = cos, cs[rope_dim/2 + i] = sin. */
void hm_rope_cos_sin(int32_t pos, const float *inv_freq, int rope_dim, float *cs);

/* NeoX-style rotation (transformers' rotate_half) of the first rope_dim values of each of n_heads
 * heads of head_dim values, pairs (i, i + rope_dim/2), by the angles of hm_rope_cos_sin. */
void hm_rope_neox(float *x, int n_heads, int head_dim, int rope_dim, const float *cs);
/* The same angles on adjacent pairs (x[2i], x[2i + 1]) (llama.cpp's "normal" rotation of GGUFs
 * whose q/k rows were permuted for it). */
void hm_rope_interleaved(float *x, int n_heads, int head_dim, int rope_dim, const float *cs);
/* one of the two, as the model says */
static inline void hm_rope(bool interleaved, float *x, int n_heads, int head_dim, int rope_dim,
                           const float *cs) {
    (interleaved ? hm_rope_interleaved : hm_rope_neox)(x, n_heads, head_dim, rope_dim, cs);
}

/* ---- matrix multiply: y[t][r] = W[r] . x[t] for t < n, r < W.rows ---------------------------- */

/* Matmul flags: HM_NN_NO_AMX forces the exact per-row kernels for every type; HM_NN_BF16_TILES
 * lets BF16, F16 and FP8_B128 weights use AMX BF16 tiles (activations rounded to bf16, as a bf16
 * model computes them; off by default because float weights otherwise run exactly). */
enum { HM_NN_NO_AMX = 1u, HM_NN_BF16_TILES = 2u };

/* Scratch bytes of hm_nn_matmul for n tokens (activation conversion, AMX packing). */
size_t hm_nn_matmul_scratch_bytes(const hm_matrix *w, int n, int n_threads, unsigned flags);

/* Threads split W's rows. x: [n][w->cols] floats with row stride x_stride (floats); y: [n][rows]
 * with row stride y_stride. Integer-quantized weights use the int8 path (AMX tiles, or AVX-512
 * VNNI) for n >= 16 (about 0.5% relative error, see amx.c); float weights run the exact kernels
 * unless flags has HM_NN_BF16_TILES. */
void hm_nn_matmul(hm_pool *pool, const hm_matrix *w, const float *x, size_t x_stride, int n,
                  float *y, size_t y_stride, void *scratch, unsigned flags);

/* Load-time repacking for the int8 prompt path (AMX tiles or AVX-512 VNNI, 16+ tokens): the
 * conversion of each 32-row unit of w to int8 that hm_nn_matmul otherwise does on every call,
 * done once. hm_nn_repack_bytes: the bytes it takes (~1.02 per weight), 0 when w's batches never
 * take that path here (float weights, no VNNI); hm_nn_repack fills dst (64-byte aligned, that
 * many bytes) on the pool and points w->wpack at it. Matmuls then read the units and give the
 * same bits as the per-call conversion; decode (1-4 tokens) keeps reading w->data. */
size_t hm_nn_repack_bytes(const hm_matrix *w);
hm_status hm_nn_repack(hm_pool *pool, hm_matrix *w, void *dst);
/* The same for nw <= 8 matrices that share x (q, k and v projections): one job, one activation
 * conversion; y[m] has row stride y_stride[m]. */
void hm_nn_matmul_multi(hm_pool *pool, const hm_matrix *const *w, int nw, const float *x,
                        size_t x_stride, int n, float *const *y, const size_t *y_stride,
                        void *scratch, unsigned flags);

/* Work on groups of output rows inside the job (decode: q/k norms, rope and the KV cache store
 * per head, as soon as a head's rows are done, instead of on the calling thread after the job).
 * fn(arg, m, g) is called once per group g of group_rows rows of matrix m, by the thread that
 * finished the group's last rows for every token; the group's outputs, whoever wrote them, are
 * visible to it. Groups of different matrices may run concurrently on different threads. */
typedef struct hm_nn_epilogue {
    int group_rows;
    void (*fn)(void *arg, int m, int g);
    void *arg;
} hm_nn_epilogue;

/* hm_nn_matmul_multi with an epilogue. It runs inside the job on the per-row path (n <= 4
 * tokens) when every matrix's rows are whole groups and there are at most HM_NN_EP_MAX groups in
 * all; otherwise the calling thread runs fn for every group after the job (the same result). */
enum { HM_NN_EP_MAX = 512 };
void hm_nn_matmul_multi_ep(hm_pool *pool, const hm_matrix *const *w, int nw, const float *x,
                           size_t x_stride, int n, float *const *y, const size_t *y_stride,
                           void *scratch, unsigned flags, const hm_nn_epilogue *ep);

/* The weights a decode matmul (n_tok <= 4 tokens) over w[0..nw) will read, as pool idle work
 * (hm_pool_set_idle(pool, hm_nn_prefetch_idle, &p)): worker ith prefetches towards its L2 the
 * rows of its own share of that job's units (hm_nn_matmul's split), 2 KiB per step, so that the
 * memory streams between jobs instead of idling. Returns false when the share is done (or the
 * job would not run the per-row kernels). */
typedef struct hm_nn_prefetch {
    const hm_matrix *w[8];
    int nw;
    int n_tok;
} hm_nn_prefetch;
bool hm_nn_prefetch_idle(int ith, int nth, void *arg, int step);
/* The bytes step `step` of worker ith covers: [*ptr, *ptr + *len); false when none are left. */
bool hm_nn_prefetch_step(const hm_nn_prefetch *p, int ith, int nth, int step, const void **ptr,
                         size_t *len);

/* ---- attention ---------------------------------------------------------------------------- */

/* One layer's KV cache of one sequence. V: kv head h's position p is the head_dim values at
 * v + h * kv_head_stride + p * head_dim. K is kept in blocks of HM_NN_KBLK positions, each block
 * transposed ([head_dim][16]), so the scores of 16 keys are one small GEMM straight from the
 * cache: element d of position p is at k + h * kv_head_stride + hm_nn_k_index(p, d, head_dim).
 * kv_head_stride is a multiple of HM_NN_KBLK * head_dim (the context rounded up to 16). Blocks
 * past a sequence's last position may hold anything (stale or non-finite values are never
 * used). */
enum { HM_NN_KBLK = 16 };
static inline size_t hm_nn_k_index(size_t p, size_t d, size_t hd) {
    return (p / HM_NN_KBLK) * HM_NN_KBLK * hd + d * HM_NN_KBLK + p % HM_NN_KBLK;
}

typedef struct hm_nn_kv {
    const void *k, *v; /* float, or IEEE half when hm_nn_attn.kv_f16 */
} hm_nn_kv;

/* Stores one token's K and V (n_kv_heads heads of head_dim floats each, heads contiguous) at
 * position pos of a cache in the layout above (floats, or IEEE halves rounded to nearest even
 * when f16). */
void hm_nn_kv_store(void *k_cache, void *v_cache, bool f16, size_t kv_head_stride, int n_kv_heads,
                    int head_dim, int32_t pos, const float *k, const float *v);

typedef struct hm_nn_attn {
    int n_tok;
    int n_heads, n_kv_heads, head_dim;
    float scale;           /* softmax scale, usually head_dim^-0.5 */
    const float *q;        /* [n_tok][n_heads * head_dim] */
    size_t q_stride;       /* floats */
    const hm_nn_kv *kv;    /* [n_tok]: the cache of each token's sequence (already holds its K/V) */
    size_t kv_head_stride; /* elements between kv heads in the cache (a multiple of 16 * hd) */
    bool kv_f16;           /* the cache holds IEEE halves instead of floats */
    const int32_t *pos;    /* [n_tok]: token t attends to positions 0..pos[t] of its sequence */
    float *out;            /* [n_tok][n_heads * head_dim] */
    size_t out_stride;     /* floats */
    float *scratch;        /* hm_nn_attn_scratch_floats(max_ctx, n_heads, n_kv_heads, head_dim,
                              n_threads of the pool) floats */
    int max_ctx;           /* positions the scratch was sized for (every pos[t] < max_ctx) */
} hm_nn_attn;

size_t hm_nn_attn_scratch_floats(int max_ctx, int n_heads, int n_kv_heads, int head_dim,
                                 int n_threads);
void hm_nn_attention(hm_pool *pool, const hm_nn_attn *a);

/* silu(g) * u over n values, into g (the kernel table's silu_mul_f32). */
void hm_silu_mul(float *g, const float *u, int64_t n);

#endif
