/* kernels_mm.c - the host GPU's (rt.h) launchers of selftest.cu, matvec.cu and mmq.cu: the
 * self-test's axpb, the dequantizing matvec and its experts' form, dequantization and the
 * embedding gather, the tile kernel (weights and activations rounded to IEEE half, products
 * summed in float, as the tensor cores do) and the experts' order. Each launcher checks its
 * arguments as the CUDA one does and enqueues a plain-C kernel over dq.h's blocks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/ops.h"
#include "cuda/dq.h"
#include "cuda/kernels.h"
#include "cuda/twins.h"
#include "quant/fp16.h"
#include "quant/types.h"

#define FLOAT_TYPE(T) ((T) == HM_TYPE_F32 || (T) == HM_TYPE_F16 || (T) == HM_TYPE_BF16)

enum { TN = 64, MAX_E = 4096 }; /* mmq.cu's tile width and its most experts */

/* ---- selftest.cu ----------------------------------------------------------------------------- */

typedef struct axpb_args {
    const float *x;
    float *y;
    float a, b;
    int n;
} axpb_args;

static void axpb_k(const void *p) {
    const axpb_args *g = p;
    for (int i = 0; i < g->n; i++) g->y[i] = fmaf(g->a, g->x[i], g->b);
}

cudaError_t hm_cuda_launch_axpb(const float *x, float *y, float a, float b, int n,
                                cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const axpb_args g = {x, y, a, b, n};
    return hm_host_launch(stream, axpb_k, &g, sizeof g);
}

/* ---- matvec.cu ------------------------------------------------------------------------------- */

static float elem(uint32_t type, const uint8_t *row, int64_t j) {
    if (type == HM_TYPE_F32) return ((const float *)row)[j];
    if (type == HM_TYPE_F16) return hm_hd_f16_to_f32(((const uint16_t *)row)[j]);
    return hm_hd_bf16_to_f32(((const uint16_t *)row)[j]);
}

/* row . x: 32-value chunks (each summed with fmaf, as a lane does), or element by element for
 * float rows whose length is not a multiple of 32 */
static float row_dot(uint32_t type, const uint8_t *row, int64_t cols, const float *x) {
    float acc = 0.0f;
    if (FLOAT_TYPE(type) && (cols & 31)) {
        for (int64_t j = 0; j < cols; j++) acc = fmaf(elem(type, row, j), x[j], acc);
        return acc;
    }
    for (int64_t c = 0; c < cols / 32; c++) {
        float v[32], s = 0.0f;
        hm_dq32(type, row, c, v);
        for (int e = 0; e < 32; e++) s = fmaf(v[e], x[c * 32 + e], s);
        acc += s;
    }
    return acc;
}

/* Q4_K experts on Q8_K activations where matvec.cu takes them (kernels.h's hm_cu_experts_i8),
 * each row as dq.h's hm_hd_q4k_q8k_row sums it */
static bool experts_i8(const hm_cu_w *w) {
    return hm_cu_experts_i8(w->type, w->cols);
}

/* row . x as the experts compute it: on xq (x as Q8_K) where experts_i8, else row_dot */
static float expert_dot(const hm_cu_w *w, const uint8_t *row, const float *x,
                        const hm_block_q8_K *xq) {
    return xq ? hm_hd_q4k_q8k_row((const hm_block_q4_K *)row, xq, (int)(w->cols / 256))
              : row_dot(w->type, row, w->cols, x);
}

/* the pair's activations x as Q8_K in buf (cols / 256 blocks), NULL without buf; *last: the x
 * buf holds, so that a token's k pairs quantize it once */
static const hm_block_q8_K *expert_x(hm_block_q8_K *buf, const float *x, int64_t cols,
                                     const float **last) {
    if (!buf) return NULL;
    if (*last != x) hm_quantize_row_q8_K_ref(x, buf, cols), *last = x;
    return buf;
}

/* Q8_0 rows on Q8_0 activations where matvec.cu's q8_dot takes them (its mv_q8, at most
 * HM_CU_Q8_ROWS_MAX rows, the codes of a group of HM_CU_MATVEC_MAX tokens within HM_CU_SMEM_MAX)
 * and HMOE_MV_Q8_I8=1; each row as hm_hd_q8_0_q8_0_row sums it. The CUDA launcher counts the rows
 * of a set of matrices together; no model's set passes the limit. */
static bool dense_q8_i8(const hm_cu_w *w, int n) {
    return w->type == HM_TYPE_Q8_0 && w->cols % 32 == 0 && w->rows <= HM_CU_Q8_ROWS_MAX &&
           hm_cu_q80_smem(w->cols, n < HM_CU_MATVEC_MAX ? n : HM_CU_MATVEC_MAX) <= HM_CU_SMEM_MAX &&
           hm_cu_env_is("HMOE_MV_Q8_I8", "1");
}

typedef struct matvec_args {
    hm_cu_w w;
    const int32_t *ids; /* experts' form, else NULL */
    const float *x;
    int64_t xs;
    int n, x_div;
    float *y;
    int64_t ys;
    bool i8; /* experts_i8 or dense_q8_i8 at the launch */
} matvec_args;

static void matvec_k(const void *p) {
    const matvec_args *g = p;
    const hm_cu_w *w = &g->w;
    const bool i8 = g->i8;
    hm_block_q8_0 *xq =
        i8 && !g->ids ? malloc(sizeof(hm_block_q8_0) * (size_t)(w->cols / 32)) : NULL;
    if (xq) { /* dense Q8_0 on Q8_0 activations */
        for (int t = 0; t < g->n; t++) {
            hm_quantize_row_q8_0_ref(g->x + (int64_t)t * g->xs, xq, w->cols);
            for (int64_t r = 0; r < w->rows; r++)
                g->y[(int64_t)t * g->ys + r] = hm_hd_q8_0_q8_0_row(
                    (const hm_block_q8_0 *)((const uint8_t *)w->data + r * (int64_t)w->row_bytes),
                    xq, w->cols / 32);
        }
        free(xq);
        return;
    }
    hm_block_q8_K *buf =
        i8 && g->ids ? malloc(sizeof(hm_block_q8_K) * (size_t)(w->cols / 256)) : NULL;
    const float *last = NULL;
    for (int t = 0; t < g->n; t++) {
        const int id = g->ids ? g->ids[t] : 0;
        float *y = g->y + (int64_t)t * g->ys;
        if (id < 0) { /* an expert on the CPU */
            memset(y, 0, sizeof(float) * (size_t)w->rows);
            continue;
        }
        const float *x = g->x + (int64_t)(t / g->x_div) * g->xs;
        const hm_block_q8_K *xk = expert_x(buf, x, w->cols, &last);
        const uint8_t *base = (const uint8_t *)w->data + (size_t)id * w->estride;
        for (int64_t r = 0; r < w->rows; r++)
            y[r] = expert_dot(w, base + r * (int64_t)w->row_bytes, x, xk);
    }
    free(buf);
}

cudaError_t hm_cu_matvec(const hm_cu_w *w, const float *x, int64_t xs, int n, float *y, int64_t ys,
                         cudaStream_t stream) {
    if (n <= 0 || w->rows <= 0) return cudaSuccess;
    if (n > HM_CU_MATVEC_BATCH || (!FLOAT_TYPE(w->type) && w->cols % 32) || !hm_cu_type_ok(w->type))
        return cudaErrorInvalidValue;
    const matvec_args g = {*w, NULL, x, xs, n, 1, y, ys, dense_q8_i8(w, n)};
    return hm_host_launch(stream, matvec_k, &g, sizeof g);
}

cudaError_t hm_cu_matvec_experts(const hm_cu_w *w, const int32_t *ids, int n_pairs, const float *x,
                                 int64_t xs, int x_div, float *y, int64_t ys, cudaStream_t stream) {
    if (n_pairs <= 0 || w->rows <= 0) return cudaSuccess;
    if (x_div < 1 || (!FLOAT_TYPE(w->type) && w->cols % 32) || !hm_cu_type_ok(w->type))
        return cudaErrorInvalidValue;
    const matvec_args g = {*w, ids, x, xs, n_pairs, x_div, y, ys, experts_i8(w)};
    return hm_host_launch(stream, matvec_k, &g, sizeof g);
}

cudaError_t hm_cu_matvec_multi(const hm_cu_w *w, int nw, const float *x, int64_t xs, int n,
                               float *const *y, const int64_t *ys, cudaStream_t stream) {
    if (nw < 1 || nw > HM_CU_MULTI_MAX) return cudaErrorInvalidValue;
    for (int i = 0; i < nw; i++) {
        const cudaError_t e = hm_cu_matvec(&w[i], x, xs, n, y[i], ys[i], stream);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

typedef struct glu_mv_args {
    hm_cu_w w[2];
    const float *bias[2];
    const int32_t *ids;
    const float *x;
    int64_t xs;
    int n, x_div, act;
    float alpha, limit;
    float *g;
    int64_t gs;
    bool i8; /* experts_i8 at the launch */
} glu_mv_args;

static void matvec_glu_k(const void *p) {
    const glu_mv_args *a = p;
    const int64_t rows = a->w[0].rows, cols = a->w[0].cols;
    const bool i8 = a->i8;
    hm_block_q8_K *buf = i8 ? malloc(sizeof(hm_block_q8_K) * (size_t)(cols / 256)) : NULL;
    const float *last = NULL;
    for (int t = 0; t < a->n; t++) {
        const int id = a->ids[t];
        float *g = a->g + (int64_t)t * a->gs;
        if (id < 0) {
            memset(g, 0, sizeof(float) * (size_t)rows);
            continue;
        }
        const float *x = a->x + (int64_t)(t / a->x_div) * a->xs;
        const hm_block_q8_K *xq = expert_x(buf, x, cols, &last);
        for (int64_t r = 0; r < rows; r++) {
            float v[2];
            for (int h = 0; h < 2; h++) {
                const hm_cu_w *w = &a->w[h];
                const uint8_t *row =
                    (const uint8_t *)w->data + (size_t)id * w->estride + r * (int64_t)w->row_bytes;
                v[h] = expert_dot(w, row, x, xq);
                if (a->bias[h]) v[h] += a->bias[h][(int64_t)id * rows + r];
            }
            g[r] = hm_hd_glu(a->act, v[0], v[1], a->alpha, a->limit);
        }
    }
    free(buf);
}

cudaError_t hm_cu_matvec_experts_glu(const hm_cu_w *wg, const hm_cu_w *wu, const float *bg,
                                     const float *bu, const int32_t *ids, int n_pairs,
                                     const float *x, int64_t xs, int x_div, int act, float alpha,
                                     float limit, float *g, int64_t gs, cudaStream_t stream) {
    if (n_pairs <= 0 || wg->rows <= 0) return cudaSuccess;
    if (x_div < 1 || act < 0 || act > 2 || wu->type != wg->type || wu->rows != wg->rows ||
        wu->cols != wg->cols || (!FLOAT_TYPE(wg->type) && wg->cols % 32) ||
        !hm_cu_type_ok(wg->type))
        return cudaErrorInvalidValue;
    const glu_mv_args a = {{*wg, *wu}, {bg, bu}, ids,   x, xs, n_pairs,       x_div,
                           act,        alpha,    limit, g, gs, experts_i8(wg)};
    return hm_host_launch(stream, matvec_glu_k, &a, sizeof a);
}

typedef struct quant_args {
    const float *x;
    int64_t xs, cols;
    int n;
    hm_block_q8_K *out;
} quant_args;

static void quant_k(const void *p) {
    const quant_args *a = p;
    for (int t = 0; t < a->n; t++)
        hm_quantize_row_q8_K_ref(a->x + (int64_t)t * a->xs, a->out + (int64_t)t * (a->cols / 256),
                                 a->cols);
}

cudaError_t hm_cu_quant_q8_K(const float *x, int64_t xs, int n, int64_t cols, void *out,
                             cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (cols <= 0 || cols % 256 || hm_cu_q8k_smem(cols) > HM_CU_SMEM_MAX || ((uintptr_t)x & 15) ||
        xs % 4 || xs < cols || ((uintptr_t)out & 3))
        return cudaErrorInvalidValue;
    const quant_args a = {x, xs, cols, n, out};
    return hm_host_launch(stream, quant_k, &a, sizeof a);
}

typedef struct dequant_args {
    hm_cu_w w;
    const int32_t *rows;
    int64_t row0, nrows;
    float *dst;     /* floats, or */
    uint16_t *dsth; /* IEEE halves rounded to nearest even */
} dequant_args;

static void dequant_k(const void *p) {
    const dequant_args *g = p;
    const hm_cu_w *w = &g->w;
    float v[32];
    for (int64_t i = 0; i < g->nrows; i++) {
        const int64_t r = g->rows ? (int64_t)g->rows[i] : g->row0 + i;
        const uint8_t *row = (const uint8_t *)w->data + r * (int64_t)w->row_bytes;
        for (int64_t c = 0; c * 32 < w->cols; c++) {
            const int64_t nv = w->cols - c * 32 < 32 ? w->cols - c * 32 : 32;
            if (FLOAT_TYPE(w->type))
                for (int e = 0; e < nv; e++) v[e] = elem(w->type, row, c * 32 + e);
            else
                hm_dq32(w->type, row, c, v);
            for (int e = 0; e < nv; e++) {
                const int64_t j = i * w->cols + c * 32 + e;
                if (g->dsth)
                    g->dsth[j] = hm_f32_to_f16(v[e]);
                else
                    g->dst[j] = v[e];
            }
        }
    }
}

static cudaError_t dequant_launch(const hm_cu_w *w, const int32_t *rows, int64_t row0,
                                  int64_t nrows, float *dst, uint16_t *dsth, cudaStream_t stream) {
    if (nrows <= 0) return cudaSuccess;
    if ((!FLOAT_TYPE(w->type) && w->cols % 32) || !hm_cu_type_ok(w->type) || (dsth && w->cols % 2))
        return cudaErrorInvalidValue;
    const dequant_args g = {*w, rows, row0, nrows, dst, dsth};
    return hm_host_launch(stream, dequant_k, &g, sizeof g);
}

cudaError_t hm_cu_dequant_f16(const hm_cu_w *w, int64_t row0, int64_t nrows, uint16_t *dst,
                              cudaStream_t stream) {
    return dequant_launch(w, NULL, row0, nrows, NULL, dst, stream);
}

cudaError_t hm_cu_dequant_f32(const hm_cu_w *w, int64_t row0, int64_t nrows, float *dst,
                              cudaStream_t stream) {
    return dequant_launch(w, NULL, row0, nrows, dst, NULL, stream);
}

cudaError_t hm_cu_embed(const hm_cu_w *e, const int32_t *tok, int n, float *x,
                        cudaStream_t stream) {
    return dequant_launch(e, tok, 0, n, x, NULL, stream);
}

/* ---- mmq.cu ---------------------------------------------------------------------------------- */

static float half_round(float v) {
    return hm_f16_to_f32(hm_f32_to_f16(v));
}

typedef struct mmq_args {
    hm_cu_w w;
    hm_cu_mmq_args a;
} mmq_args;

/* items i0 .. i0 + ni of expert e: y[i] = W_e . x[xrow[i]], both rounded to half */
static void mmq_tile(const hm_cu_w *w, const hm_cu_mmq_args *a, int e, int i0, int ni, float *wr,
                     float *xr) {
    const uint8_t *wb = (const uint8_t *)w->data + (size_t)e * w->estride;
    for (int64_t r = 0; r < w->rows; r++) {
        for (int64_t c = 0; c < w->cols / 32; c++)
            hm_dq32(w->type, wb + r * (int64_t)w->row_bytes, c, wr + c * 32);
        for (int64_t j = 0; j < w->cols; j++) wr[j] = half_round(wr[j]);
        for (int i = i0; i < i0 + ni; i++) {
            const int64_t row = a->xrow ? a->xrow[i] : i;
            const float *x = a->x + row * a->xs;
            for (int64_t j = 0; j < w->cols; j++) xr[j] = half_round(x[j]);
            float acc = 0.0f;
            for (int64_t j = 0; j < w->cols; j++) acc = fmaf(wr[j], xr[j], acc);
            a->y[(int64_t)i * a->ys + r] = acc;
        }
    }
}

static void mmq_k(const void *p) {
    const mmq_args *g = p;
    const hm_cu_w *w = &g->w;
    const hm_cu_mmq_args *a = &g->a;
    float *wr = malloc(sizeof(float) * 2 * (size_t)w->cols);
    if (!wr) abort(); /* a kernel cannot report; the host GPU's scratch is tiny */
    float *xr = wr + w->cols;
    if (a->tile_e) {
        for (int t = 0; t < *a->n_tiles; t++)
            mmq_tile(w, a, a->tile_e[t], a->tile_i0[t], a->tile_n[t], wr, xr);
    } else {
        mmq_tile(w, a, 0, 0, a->n_items, wr, xr);
    }
    free(wr);
}

cudaError_t hm_cu_mmq(const hm_cu_w *w, const hm_cu_mmq_args *a, int max_tiles,
                      cudaStream_t stream) {
    if (w->rows <= 0) return cudaSuccess;
    if (w->cols % 32 || a->xs % 4 || ((uintptr_t)a->x & 15)) return cudaErrorInvalidValue;
    const int tiles = a->tile_e ? max_tiles : (a->n_items + TN - 1) / TN;
    if (tiles <= 0) return cudaSuccess;
    if (!hm_cu_mmq_type_ok(w->type)) return cudaErrorInvalidValue;
    const mmq_args g = {*w, *a};
    return hm_host_launch(stream, mmq_k, &g, sizeof g);
}

typedef struct mmv_args {
    hm_cu_w w;
    hm_cu_mmq_args a;
} mmv_args;

static void mmv_tiles_k(const void *p) {
    const mmv_args *g = p;
    const hm_cu_w *w = &g->w;
    const hm_cu_mmq_args *a = &g->a;
    for (int t = 0; t < *a->n_tiles; t++) {
        const uint8_t *base = (const uint8_t *)w->data + (size_t)a->tile_e[t] * w->estride;
        for (int i = a->tile_i0[t]; i < a->tile_i0[t] + a->tile_n[t]; i++)
            for (int64_t r = 0; r < w->rows; r++)
                a->y[(int64_t)i * a->ys + r] = row_dot(w->type, base + r * (int64_t)w->row_bytes,
                                                       w->cols, a->x + (int64_t)i * a->xs);
    }
}

/* shared memory is no limit here: every tile size runs at the same speed */
int hm_cu_mmv_tile(const hm_cu_w *w) {
    (void)w;
    return HM_CU_MATVEC_MAX;
}

cudaError_t hm_cu_mmv_tiles(const hm_cu_w *w, const hm_cu_mmq_args *a, int tile, int max_tiles,
                            cudaStream_t stream) {
    if (w->rows <= 0 || max_tiles <= 0) return cudaSuccess;
    if (!a->tile_e || a->xrow || max_tiles > 65535 || tile < 1 || tile > HM_CU_MATVEC_MAX ||
        (!FLOAT_TYPE(w->type) && w->cols % 32) || !hm_cu_type_ok(w->type))
        return cudaErrorInvalidValue;
    const mmv_args g = {*w, *a};
    return hm_host_launch(stream, mmv_tiles_k, &g, sizeof g);
}

typedef struct sort_args {
    const int32_t *ids;
    int n_pairs, n_exp, k, tile;
    hm_cu_moe_order o;
} sort_args;

/* counts, offsets, tiles of up to `tile` places of one expert, then each pair's place (in pair
 * order within an expert: the CUDA kernel's atomics give some order, and the values do not
 * depend on it) */
static void sort_k(const void *p) {
    const sort_args *g = p;
    const hm_cu_moe_order *o = &g->o;
    int *cnt = calloc(2 * (size_t)g->n_exp, sizeof(int));
    if (!cnt) abort();
    int *off = cnt + g->n_exp;
    for (int q = 0; q < g->n_pairs; q++)
        if (g->ids[q] >= 0) cnt[g->ids[q]]++;
    int s = 0, nt = 0;
    for (int e = 0; e < g->n_exp; e++) {
        off[e] = s;
        for (int i = 0; i < cnt[e]; i += g->tile) {
            o->tile_e[nt] = e;
            o->tile_i0[nt] = s + i;
            o->tile_n[nt] = cnt[e] - i < g->tile ? cnt[e] - i : g->tile;
            nt++;
        }
        s += cnt[e];
    }
    *o->n_tiles = nt;
    for (int e = 0; e < g->n_exp; e++) cnt[e] = 0;
    for (int q = 0; q < g->n_pairs; q++) {
        const int e = g->ids[q];
        if (e < 0) {
            o->pos_of[q] = -1;
            continue;
        }
        const int at = off[e] + cnt[e]++;
        o->pos_of[q] = at;
        o->xrow[at] = q / g->k;
    }
    free(cnt);
}

cudaError_t hm_cu_moe_sort(const int32_t *ids, int n_pairs, int n_exp, int k, int tile,
                           const hm_cu_moe_order *o, cudaStream_t stream) {
    if (n_pairs <= 0) return cudaSuccess;
    if (n_exp < 1 || n_exp > MAX_E || k < 1 || tile < 1 || tile > TN) return cudaErrorInvalidValue;
    const sort_args g = {ids, n_pairs, n_exp, k, tile, *o};
    return hm_host_launch(stream, sort_k, &g, sizeof g);
}

int hm_cu_moe_max_tiles(int n_pairs, int n_exp, int tile) {
    return (n_pairs + tile - 1) / tile + n_exp;
}

typedef struct ids_args {
    const int32_t *ids;
    int n, n_exp;
    const int32_t *slot;
    int32_t *gid;
    uint32_t *counts;
} ids_args;

static void count_k(const void *p) {
    const ids_args *g = p;
    for (int q = 0; q < g->n; q++)
        if (g->ids[q] >= 0 && g->ids[q] < g->n_exp) g->counts[g->ids[q]]++;
}

static void gid_k(const void *p) {
    const ids_args *g = p;
    for (int q = 0; q < g->n; q++) g->gid[q] = g->slot[g->ids[q]];
}

cudaError_t hm_cu_moe_count(const int32_t *ids, int n_pairs, int n_exp, uint32_t *counts,
                            cudaStream_t stream) {
    if (n_pairs <= 0) return cudaSuccess;
    const ids_args g = {ids, n_pairs, n_exp, NULL, NULL, counts};
    return hm_host_launch(stream, count_k, &g, sizeof g);
}

cudaError_t hm_cu_moe_gid(const int32_t *ids, int n_pairs, const int32_t *slot_of, int32_t *gid,
                          cudaStream_t stream) {
    if (n_pairs <= 0) return cudaSuccess;
    const ids_args g = {ids, n_pairs, 0, slot_of, gid, NULL};
    return hm_host_launch(stream, gid_k, &g, sizeof g);
}
