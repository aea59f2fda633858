/* kernels.h - launchers of the *.cu kernels, callable from C (cuda.c, backend.c, the tests).
 * Every pointer is device memory unless said otherwise; every launcher enqueues on `stream` and
 * returns the launch's error (cudaGetLastError). Rows are tokens; strides count floats. */
#ifndef HM_CUDA_KERNELS_H
#define HM_CUDA_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/hd.h"
#include "quant/types.h"

#ifdef HM_CUDA_HOST
#include "cuda/host/rt.h" /* the host GPU (host/rt.h) */
#else
#include <cuda_runtime.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* the quantized types of the tensor-core tiles (mmq.cu); the float ones, FP8_B128 among them as
 * on the CPU, stay on the exact FP32 path: half would round an FP8 value times its block scale */
#define HM_MMQ_TYPES(X)                                                                            \
    X(HM_TYPE_Q4_0)                                                                                \
    X(HM_TYPE_Q4_1)                                                                                \
    X(HM_TYPE_Q5_0)                                                                                \
    X(HM_TYPE_Q5_1)                                                                                \
    X(HM_TYPE_Q8_0)                                                                                \
    X(HM_TYPE_Q2_K)                                                                                \
    X(HM_TYPE_Q3_K)                                                                                \
    X(HM_TYPE_Q4_K)                                                                                \
    X(HM_TYPE_Q5_K)                                                                                \
    X(HM_TYPE_Q6_K)                                                                                \
    X(HM_TYPE_IQ4_NL)                                                                              \
    X(HM_TYPE_IQ4_XS)                                                                              \
    X(HM_TYPE_MXFP4)

/* every type the matvec, dequantize and embedding kernels take (matvec.cu) */
#define HM_CU_TYPES(X)                                                                             \
    X(HM_TYPE_F32)                                                                                 \
    X(HM_TYPE_F16)                                                                                 \
    X(HM_TYPE_BF16)                                                                                \
    X(HM_TYPE_FP8_B128)                                                                            \
    HM_MMQ_TYPES(X)

/* A weight matrix on the GPU: rows of cols values of a ggml type (quant/types.h), rows
 * row_bytes apart. With `estride` set it is the first of several experts' matrices, estride
 * bytes apart. */
typedef struct hm_cu_w {
    uint32_t type;
    const void *data;
    int64_t rows, cols;
    size_t row_bytes;
    size_t estride;
} hm_cu_w;

/* y[i] = a * x[i] + b for i < n. */
cudaError_t hm_cuda_launch_axpb(const float *x, float *y, float a, float b, int n,
                                cudaStream_t stream);

/* true when the matvec, dequantize and embedding kernels take weights of this type */
static inline bool hm_cu_type_ok(uint32_t type) {
    switch (type) {
#define X(t) case t:
        HM_CU_TYPES(X)
#undef X
        return true;
    default:
        return false;
    }
}

/* Programmatic dependent launch (kernels launched ahead of their predecessor's end, sm_90 and
 * later, HMOE_CUDA_PDL=0 turns it off) for the kernels this thread launches from now on. */
void hm_cu_pdl_allow(bool on);

/* The most tokens hm_cu_matvec takes per read of the weights, and in one launch. */
#define HM_CU_MATVEC_MAX   8
#define HM_CU_MATVEC_BATCH 64

/* y[t][r] = W[r] . x[t] for n <= HM_CU_MATVEC_BATCH tokens (Q4_K launches of one or two tokens in
 * a lane layout of their own, whose sums take another order): the weights are dequantized in
 * registers (dq.h), the dot products in float, and read once per group of HM_CU_MATVEC_MAX
 * tokens (the groups of a row block run side by side: L2 serves all but the first). */
cudaError_t hm_cu_matvec(const hm_cu_w *w, const float *x, int64_t xs, int n, float *y, int64_t ys,
                         cudaStream_t stream);

/* The most matrices hm_cu_matvec_multi takes. */
#define HM_CU_MULTI_MAX 3

/* hm_cu_matvec of nw <= HM_CU_MULTI_MAX matrices against the same activations (a layer's q, k
 * and v): y[i][t][r] = W_i[r] . x[t], rows ys[i] apart. One launch where the matrices share a
 * type and width, else one each; the results are hm_cu_matvec's either way. */
cudaError_t hm_cu_matvec_multi(const hm_cu_w *w, int nw, const float *x, int64_t xs, int n,
                               float *const *y, const int64_t *ys, cudaStream_t stream);

/* Experts: for each of n_pairs (token, expert) pairs p, y[p][r] = W_{ids[p]}[r] . x[p / x_div]
 * (x_div = k for the gate and up projections of a token's k experts, 1 for down); 0 where
 * ids[p] < 0. Q4_K experts in whole super-blocks multiply x quantized to Q8_K as the CPU's
 * engine does (hm_cu_quant_q8_K's codes; each row's sum has the bits of dq.h's
 * hm_hd_q4k_q8k_row; HMOE_MV_Q4K_I8=0 or HMOE_MV_Q4K=0 keeps the float activations). */
cudaError_t hm_cu_matvec_experts(const hm_cu_w *w, const int32_t *ids, int n_pairs, const float *x,
                                 int64_t xs, int x_div, float *y, int64_t ys, cudaStream_t stream);

/* The integer-product paths' shapes and switches, which matvec.cu's launchers and the host
 * GPU's (host/kernels_mm.c) both apply. Shared bytes of the Q8_K form of cols activations (codes,
 * a float scale and 16 int sums a super-block) and of the Q8_0 form of n rows (codes, a float
 * scale a block); the experts take Q8_K within HM_CU_I8_SMEM, q8_dot's Q8_0 and
 * hm_cu_quant_q8_K within HM_CU_SMEM_MAX (a launch's dynamic shared memory without opting in). */
#define HM_CU_I8_SMEM     (32 * 1024)
#define HM_CU_SMEM_MAX    (48 * 1024)
#define HM_CU_Q8_ROWS_MAX 32768 /* q8_dot's rows in one launch (a set's sum) */
static inline size_t hm_cu_q8k_smem(int64_t cols) {
    return (size_t)(cols / 256) * (256 + sizeof(float) + 16 * sizeof(int));
}
static inline size_t hm_cu_q80_smem(int64_t cols, int n) {
    return (size_t)n * (size_t)(cols + cols / 32 * (int64_t)sizeof(float));
}
/* whether the variable is set to exactly v (the switches are read per launch: a decode graph's
 * at its capture) */
static inline bool hm_cu_env_is(const char *name, const char *v) {
    const char *e = getenv(name);
    return e && !strcmp(e, v);
}

/* Whether experts of this type and width multiply Q8_K activations (hm_cu_matvec_experts and
 * its GLU form; the GPU's launchers also need their aligned-load shapes): Q4_K in whole
 * super-blocks whose codes fit HM_CU_I8_SMEM, unless HMOE_MV_Q4K=0 or HMOE_MV_Q4K_I8=0 */
static inline bool hm_cu_experts_i8(uint32_t type, int64_t cols) {
    return type == HM_TYPE_Q4_K && cols % 256 == 0 && hm_cu_q8k_smem(cols) <= HM_CU_I8_SMEM &&
           !hm_cu_env_is("HMOE_MV_Q4K", "0") && !hm_cu_env_is("HMOE_MV_Q4K_I8", "0");
}

/* x's n rows (xs floats apart, 16-byte aligned; cols a multiple of 256, at most 38656) as Q8_K
 * blocks (hm_block_q8_K, cols / 256 a row) into out: bit for bit hm_quantize_row_q8_K_ref, as
 * the Q4_K experts quantize their activations. */
cudaError_t hm_cu_quant_q8_K(const float *x, int64_t xs, int n, int64_t cols, void *out,
                             cudaStream_t stream);

/* The experts' down projection and their weighted sum in one launch, for a decode batch of
 * n <= HM_CU_MATVEC_MAX tokens of k pairs each: hm_cu_matvec_experts (x_div 1) into y, then
 * out[t] = sum_j w[t k + j] y[t k + j] as hm_cu_moe_combine (pos_of NULL) computes it, by the
 * last of the token's blocks; cnt: n counters as hm_cu_attn.cnt's. Else
 * cudaErrorInvalidValue, for the caller to launch the two. */
cudaError_t hm_cu_matvec_experts_sum(const hm_cu_w *w, const int32_t *ids, int n, int k,
                                     const float *x, int64_t xs, float *y, int64_t ys,
                                     const float *wts, float *out, int64_t os, unsigned *cnt,
                                     cudaStream_t stream);
/* The experts' gate and up projections and their activation in one launch, for each pair p:
 * g[p][r] = act(Wg_e[r] . x[p / x_div] + bg[e][r], Wu_e[r] . x[p / x_div] + bu[e][r]) with
 * e = ids[p] (biases [places][rows] or NULL; act as hm_cu_glu's), 0 where ids[p] < 0. Gate and
 * up share a type and shape. The bits are those of hm_cu_matvec_experts, hm_cu_expert_bias and
 * hm_cu_glu in turn. */
cudaError_t hm_cu_matvec_experts_glu(const hm_cu_w *wg, const hm_cu_w *wu, const float *bg,
                                     const float *bu, const int32_t *ids, int n_pairs,
                                     const float *x, int64_t xs, int x_div, int act, float alpha,
                                     float limit, float *g, int64_t gs, cudaStream_t stream);

/* rows [row0, row0 + nrows) of W as floats, [nrows][cols] at dst */
cudaError_t hm_cu_dequant_f32(const hm_cu_w *w, int64_t row0, int64_t nrows, float *dst,
                              cudaStream_t stream);

/* the same rows as IEEE half (each dequantized value rounded to nearest even): the weights of a
 * batch's GEMM on the tensor cores (cuBLAS, half inputs, float sums) */
cudaError_t hm_cu_dequant_f16(const hm_cu_w *w, int64_t row0, int64_t nrows, uint16_t *dst,
                              cudaStream_t stream);

/* x[i] = the embedding row of token tok[i] (tok in device memory), as floats; over an F32 view
 * of activations (row_bytes their stride) it gathers rows of floats, bit for bit */
cudaError_t hm_cu_embed(const hm_cu_w *e, const int32_t *tok, int n, float *x, cudaStream_t stream);

/* For i < n: with add, x[i] += add[i] first; then, with w, y[i] = rmsnorm(x[r]) * w where r = i, or
 * rows[i] when rows is given (the output head's wanted rows). Rows are h floats. */
cudaError_t hm_cu_rmsnorm(float *x, const float *add, const float *w, float *y, const int32_t *rows,
                          int n, int64_t h, float eps, cudaStream_t stream);

/* hm_cu_rmsnorm whose addend is the experts' weighted sum: for token i < n, x[i] += s[i] with
 * s[i] = sum over j < k of ew[i k + j] ey[i k + j] (ey rows eys floats apart), formed as
 * hm_cu_moe_combine (pos_of NULL) forms it, so that x takes the bits of that sum's add; then,
 * with w, y[i] = rmsnorm(x[i]) * w. */
cudaError_t hm_cu_rmsnorm_moe(float *x, const float *ey, int64_t eys, const float *ew, int k,
                              const float *w, float *y, int n, int64_t h, float eps,
                              cudaStream_t stream);

/* y[t][0..cols) += b over n tokens (row stride ys): a matmul's bias */
cudaError_t hm_cu_add_bias(float *y, int64_t ys, const float *b, int n, int64_t cols,
                           cudaStream_t stream);

/* dst[t] += sigmoid(xn[t] . w) * src[t] over n tokens of h values (w NULL: dst[t] += src[t]);
 * one block per token. The shared expert's gated output (qwen2moe). */
cudaError_t hm_cu_gated_add(float *dst, int64_t ds, const float *src, int64_t ss, const float *xn,
                            int64_t xs, const float *w, int n, int64_t h, cudaStream_t stream);

/* g[i] = act(g[i], u[i]) over n tokens of f values (row strides gs, us): hm_hd_glu's
 * activation act (0 SiLU, 1 GELU, 2 clamped SwiGLU with alpha and limit) */
cudaError_t hm_cu_glu(float *g, int64_t gs, const float *u, int64_t us, int n, int64_t f, int act,
                      float alpha, float limit, cudaStream_t stream);

/* y [n][cols] (packed) = x's n rows of cols floats (rows xs apart) as BF16, rounded to nearest
 * even (hm_f32_to_bf16) */
cudaError_t hm_cu_f32_to_bf16(const float *x, int64_t xs, int n, int64_t cols, uint16_t *y,
                              cudaStream_t stream);

/* the same as IEEE half, rounded to nearest even (hm_f32_to_f16); 65504 and beyond become inf */
cudaError_t hm_cu_f32_to_f16(const float *x, int64_t xs, int n, int64_t cols, uint16_t *y,
                             cudaStream_t stream);

/* The experts' biases: for each of n_pairs (token, expert) pairs p with ids[p] >= 0 (the
 * expert's place among the layer's GPU experts), row pos_of[p] of y (pos_of NULL: row p) +=
 * bias[ids[p]] ([places][cols]); bias NULL: nothing */
cudaError_t hm_cu_expert_bias(float *y, int64_t ys, const int32_t *pos_of, const int32_t *ids,
                              int n_pairs, const float *bias, int64_t cols, cudaStream_t stream);

/* The attention block's per-token work after the projections, for n tokens: per-head RMSNorm
 * of q and k (by qn / kn, when given), NeoX rotation of the first rope_dim values of every head
 * by the token's cos/sin (cs: [n][rope_dim], cosines then sines), and k, v into the cache of the
 * token's sequence at its position. */
typedef struct hm_cu_kv {
    void *k, *v;    /* [n_layers][n_seq][n_kv_heads][kv_ctx][head_dim] */
    bool f16;       /* IEEE half elements, else float */
    int64_t kv_ctx; /* positions per (layer, sequence, head) */
    int n_seq;      /* sequences per layer */
    int n_kv_heads;
    int head_dim;
    int v_dim; /* values read from each row's first v_dim elements (0: head_dim) */
} hm_cu_kv;

typedef struct hm_cu_qkv {
    float *q, *k;
    const float *v;
    int64_t q_stride, kv_stride;
    const float *qn, *kn; /* [head_dim] or NULL */
    const float *cs;
    int rope_dim;
    bool interleaved; /* pairs (2i, 2i + 1), else NeoX halves (i, i + rope_dim / 2) */
    int n_heads;
    float eps;
    const int32_t *pos, *seq; /* [n] */
    int il;                   /* the layer */
} hm_cu_qkv;

cudaError_t hm_cu_qk_rope_kv(const hm_cu_qkv *a, const hm_cu_kv *kv, int n, cudaStream_t stream);

/* out[i] = softmax(q_i K^T * scale) V over positions 0..pos[i] of sequence seq[i]'s cache of
 * layer il (GQA: n_heads / n_kv_heads query heads per kv head); with window, over the last
 * window positions only; with sinks, head h's sinks[h] joins the softmax's denominator. */
typedef struct hm_cu_attn {
    const float *q;
    int64_t q_stride;
    float *out;
    int64_t out_stride;
    int n_heads;
    float scale;
    const int32_t *pos, *seq;
    int il;
    const float *sinks; /* [n_heads] or NULL */
    int window;         /* 0: every position */
    /* with splits: n * n_heads counters (device memory, 0 before the first launch and left 0 by
     * each, not used by another kernel in flight) with which the last split of each (token,
     * head) merges them, in the same launch; NULL: a merge launch of its own */
    unsigned *cnt;
} hm_cu_attn;

/* part (or NULL): scratch of n * n_heads * splits * (head_dim + 2) floats; with splits > 1 each
 * token's positions are cut into `splits` ranges (whole 32s; hm_cu_attention_splits of the
 * cache's positions: one per 32, at most 32), each its own block, so that a decode step fills
 * the GPU at any context, and merged after (flash-decoding). */
cudaError_t hm_cu_attention(const hm_cu_attn *a, const hm_cu_kv *kv, int n, float *part, int splits,
                            cudaStream_t stream);
int hm_cu_attention_splits(int64_t kv_ctx);

/* hm_cu_attention on the tensor cores (fattn.cu) for n tokens of one sequence seq at the
 * consecutive positions pos0, pos0 + 1, ... (a prompt's chunk; a.pos and a.seq are not read):
 * queries, keys, values and the softmax weights rounded to IEEE half, products summed in float.
 * Head dims 64 and 128 without latent values (v_dim 0); anything else: cudaErrorInvalidValue,
 * for the caller to fall back on hm_cu_attention. */
cudaError_t hm_cu_attention_tc(const hm_cu_attn *a, const hm_cu_kv *kv, int n, int seq, int pos0,
                               cudaStream_t stream);

/* DeepSeek-V2's group-limited softmax router of n tokens: hm_hd_router_softmax_group per token
 * (one thread each) */
cudaError_t hm_cu_router_softmax_group(const float *rl, int64_t rs, int n, int e, int n_group,
                                       int topk_group, int k, bool renorm, float scale,
                                       int32_t *ids, float *w, cudaStream_t stream);

/* Multi-head latent attention (model/mla.c) in three launches around hm_cu_attention:
 *   hm_cu_mla_store: per token, kv [kvl + rope] (wkv_a's output) gets its latent RMS-normed by
 *     kv_norm and its k_pe rotated, every head's q_pe (q: [n_heads][nope + rope]) is rotated
 *     (interleaved pairs by cs) and written to the rotary part of qa [n][n_heads][kvl + rope],
 *     and the row goes into the cache (n_kv_heads 1, head_dim kvl + rope) at the token's
 *     position;
 *   hm_cu_mla_absorb: the latent part of qa = q_nope . k_b[h] (k_b: [n_heads][nope][kvl] of
 *     type kt);
 *   hm_cu_attention of qa over the cache with v = k and v_dim = kvl, into o [n][n_heads][kvl];
 *   hm_cu_mla_values: out[t][h] = o[t][h] . v_b[h] (v_b: [n_heads][kvl][vd] of type vt).
 * Copies of type HM_TYPE_F32, F16 or BF16. */
typedef struct hm_cu_mla {
    float *q;
    int64_t q_stride;
    float *kv;
    int64_t kv_stride;
    const float *kv_norm, *cs;
    float *qa, *o, *out;
    int64_t out_stride;
    const void *k_b, *v_b;
    int kt, vt;
    int n_heads, nope, rope, kvl, vd;
    float eps;
    const int32_t *pos, *seq;
    int il;
} hm_cu_mla;

cudaError_t hm_cu_mla_store(const hm_cu_mla *a, const hm_cu_kv *kv, int n, cudaStream_t stream);
cudaError_t hm_cu_mla_absorb(const hm_cu_mla *a, int n, cudaStream_t stream);
cudaError_t hm_cu_mla_values(const hm_cu_mla *a, int n, cudaStream_t stream);

/* The hybrid decode step's hand-off through host memory the GPU reads and writes directly
 * (pinned), with a flag word per direction and layer instead of host functions:
 *   hm_cu_handoff_out: the n rows of x (h values, rows xs apart), the np ids and weights into
 *     hx, hids, hw (host), then *flag = *epoch, visible to the CPU after the data;
 *   hm_cu_handoff_in: waits until *flag (host, written by the CPU after hout) equals *epoch,
 *     then out[t] (+)= hout[t] over n rows of h values (add: +=, else =). A wait past 30 s
 *     writes 1 to *err (host) and goes on, so that a CPU side that never answers cannot hang
 *     the GPU.
 * epoch: device memory, set per step (a captured graph's launches keep their arguments). */
cudaError_t hm_cu_handoff_out(const float *x, int64_t xs, int n, int64_t h, const int32_t *ids,
                              const float *w, int np, float *hx, int32_t *hids, float *hw,
                              uint32_t *flag, const uint32_t *epoch, cudaStream_t stream);
cudaError_t hm_cu_handoff_in(const uint32_t *flag, const uint32_t *epoch, const float *hout, int n,
                             int64_t h, bool add, float *out, int64_t os, uint32_t *err,
                             cudaStream_t stream);

#define HM_CU_TOP_MAX 256

/* The sampler's candidates of rows of V logits (rows ls floats apart): row r's k (<= 256)
 * largest logits, ties to the lower token, in ascending token order, into ids[r][k], vals[r][k]
 * (-0 made +0); bad[r] = the first index holding NaN or +inf, or -1. With scratch (device
 * memory of hm_cu_top_scratch(rows, V) bytes, when that is not 0) each row is cut into
 * segments picked by blocks of their own, and the segments' picks picked again: the same
 * result, without one block per row walking the whole vocabulary. */
cudaError_t hm_cu_top_candidates(const float *logits, int64_t ls, int rows, int V, int k,
                                 int32_t *ids, float *vals, int32_t *bad, void *scratch,
                                 cudaStream_t stream);
size_t hm_cu_top_scratch(int rows, int V);

/* Softmax top-k of each token's e router logits: ids [n][k], w [n][k] (hm_router_softmax_topk) */
cudaError_t hm_cu_router_topk(const float *rl, int64_t rs, int n, int e, int k, bool renorm,
                              int32_t *ids, float *w, cudaStream_t stream);

/* The router's F32 matvec and its softmax top-k in one launch, for a decode batch (n <=
 * HM_CU_MATVEC_MAX): rl[t][r] = row r of wr (e rows) . x[t], then hm_cu_router_topk's ids and
 * weights, picked by the last block of each token. cnt: n counters of hm_last_block's, zero.
 * cudaErrorInvalidValue, launching nothing, where the kernel does not take the shape (wr not F32,
 * cols not a multiple of 8 or above 4096, rows or x not 16-byte aligned, or the top-k's own
 * limits): the caller then runs hm_cu_matvec and hm_cu_router_topk. */
cudaError_t hm_cu_router_fused(const hm_cu_w *wr, const float *x, int64_t xs, int n, int k,
                               bool renorm, float *rl, int64_t rs, int32_t *ids, float *w,
                               unsigned *cnt, cudaStream_t stream);

/* whether hm_cu_router_fused takes the shape (its CUDA kernel and the host GPU alike): two warps
 * per row over halves of at most 16 float4 a lane */
static inline bool hm_cu_router_fused_ok(const hm_cu_w *wr, const float *x, int64_t xs, int n,
                                         int k) {
    const int64_t e = wr->rows;
    return wr->type == HM_TYPE_F32 && n <= HM_CU_MATVEC_MAX && k >= 1 && k <= e && k <= 32 &&
           e <= HM_HD_ROUTER_MAX && wr->cols % 8 == 0 && wr->cols <= 4096 &&
           wr->row_bytes % 16 == 0 && ((uintptr_t)wr->data & 15) == 0 && ((uintptr_t)x & 15) == 0 &&
           xs % 4 == 0;
}

/* The sigmoid router (DeepSeek-V3, GLM-4.5) of n tokens: hm_hd_router_sigmoid per token (one
 * thread each); bias [e] or NULL. */
cudaError_t hm_cu_router_sigmoid(const float *rl, int64_t rs, int n, int e, const float *bias,
                                 int n_group, int topk_group, int k, bool renorm, float scale,
                                 int32_t *ids, float *w, cudaStream_t stream);

/* out[t][d] = sum over j < k of w[t][j] * y[place(t * k + j)][d], over n tokens of h values;
 * place(p) = pos_of[p], or p when pos_of is NULL (k <= 64) */
cudaError_t hm_cu_moe_combine(const float *y, int64_t ys, const int32_t *pos_of, const float *w,
                              int n, int k, int64_t h, float *out, int64_t os, cudaStream_t stream);

/* Batches against quantized weights on the tensor cores (mmq.cu): y[i] = W_e . x[xrow[i]] for
 * items i in tiles of up to 64. Dense (tile_e NULL): items 0..n_items, expert 0. Experts: the
 * tiles of hm_cu_moe_sort, expert tile_e[t] for items tile_i0[t] .. + tile_n[t]. Weights and
 * activations are rounded to IEEE half, products summed in float. */
typedef struct hm_cu_mmq {
    const float *x;
    int64_t xs;
    const int32_t *xrow; /* [items] the x row of each item, or NULL: the item itself */
    float *y;
    int64_t ys;
    const int32_t *tile_e, *tile_i0, *tile_n, *n_tiles;
    int n_items;
} hm_cu_mmq_args;

static inline bool hm_cu_mmq_type_ok(uint32_t type) {
    switch (type) {
#define X(t) case t:
        HM_MMQ_TYPES(X)
#undef X
        return true;
    default:
        return false;
    }
}
/* max_tiles: the grid's tiles in expert mode (hm_cu_moe_max_tiles); the device count says how
 * many are real */
cudaError_t hm_cu_mmq(const hm_cu_w *w, const hm_cu_mmq_args *a, int max_tiles,
                      cudaStream_t stream);

/* The experts' order of n_pairs (token, expert) pairs (ids: [n_tokens][k]): pos_of[p] = the
 * pair's place in expert order, xrow[place] = its token, and the tiles (at most
 * hm_cu_moe_max_tiles) of up to `tile` (1..64) places of one expert: 64 for hm_cu_mmq,
 * HM_CU_MATVEC_MAX for hm_cu_mmv_tiles. n_exp <= 4096. */
typedef struct hm_cu_moe_order {
    int32_t *pos_of, *xrow;
    int32_t *tile_e, *tile_i0, *tile_n, *n_tiles;
} hm_cu_moe_order;

cudaError_t hm_cu_moe_sort(const int32_t *ids, int n_pairs, int n_exp, int k, int tile,
                           const hm_cu_moe_order *o, cudaStream_t stream);
int hm_cu_moe_max_tiles(int n_pairs, int n_exp, int tile);

/* The experts' tiles of hm_cu_moe_sort with tile <= HM_CU_MATVEC_MAX on the matvec kernels:
 * y[i] = W_e . x[i] for the items of each tile (x rows in place order: a->xrow must be NULL;
 * gather them first with hm_cu_embed over a float view), each product as hm_cu_matvec computes it
 * for more than two tokens (the staged path, whatever the tile's tokens). For batches whose
 * experts get a few tokens each, where a tile of 64 would be mostly empty. hm_cu_mmv_tile: the
 * largest tile the kernel takes at full speed for these weights (their rows staged in shared
 * memory). */
int hm_cu_mmv_tile(const hm_cu_w *w);
cudaError_t hm_cu_mmv_tiles(const hm_cu_w *w, const hm_cu_mmq_args *a, int tile, int max_tiles,
                            cudaStream_t stream);

/* counts[ids[p]] += 1 for the n_pairs pairs whose id is in [0, n_exp) (--dynamic-experts) */
cudaError_t hm_cu_moe_count(const int32_t *ids, int n_pairs, int n_exp, uint32_t *counts,
                            cudaStream_t stream);

/* gid[p] = slot_of[ids[p]]: the pairs' experts as places among a layer's GPU experts (-1: on
 * the CPU; the expert kernels skip such pairs: their rows are zero, they take no place in the
 * experts' order) */
cudaError_t hm_cu_moe_gid(const int32_t *ids, int n_pairs, const int32_t *slot_of, int32_t *gid,
                          cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
