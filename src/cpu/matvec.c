/* matvec.c - row-range matrix-vector driver over the per-variant dot products. */
#include "cpu/matvec.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

hm_status hm_matrix_init(hm_matrix *m, uint32_t type, const void *data, int64_t rows,
                         int64_t cols) {
    uint64_t rb;
    if (rows < 0 || cols <= 0 || !hm_type_row_bytes(type, (uint64_t)cols, &rb))
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "matrix: %lld x %lld of %s: columns must be a positive whole number of "
                         "blocks",
                         (long long)rows, (long long)cols, hm_type_name(type));
    m->type = type;
    m->data = data;
    m->rows = rows;
    m->cols = cols;
    m->row_bytes = (size_t)rb;
    m->wpack = NULL;
    return HM_OK;
}

hm_status hm_kernel_check(uint32_t type, const char *tensor_name) {
    if (hm_vec_dot_for(NULL, type)) return HM_OK;
    char list[512];
    size_t o = 0;
    list[0] = '\0';
    for (uint32_t t = 0; t < HM_TYPE_COUNT; t++)
        if (hm_ops_ref.vec_dot[t] && o + 16 < sizeof list)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", o ? " " : "", hm_type_name(t));
    return hm_errorf(HM_ERR_UNSUPPORTED,
                     "tensor '%s' has type %s, which hmoe cannot compute yet (supported: %s)",
                     tensor_name ? tensor_name : "?", hm_type_name(type), list);
}

int hm_tile_token_cap(int64_t cols, int n) {
    const char *e = getenv("HMOE_TILE_TOKENS"); /* per call: tile matmuls only, ~100 us each */
    const long v = e ? strtol(e, NULL, 10) : 0;
    int64_t t = v >= 32 && v <= (1L << 20) ? v / 32 * 32 : 0;
    if (!t) {
        t = HM_TILE_ACT_BYTES / ((cols + 63) / 64 * 64) / 32 * 32;
        if (t < 64) t = 64;
    }
    return n < t ? n : (int)t;
}

int hm_tile_token_block(int64_t cols, int n) {
    return hm_tile_split(n, hm_tile_token_cap(cols, n));
}

int hm_tile_split(int n, int t) {
    if (n <= t) return n;
    const int64_t nb = (n + t - 1) / t;
    return (int)(((n + nb - 1) / nb + 31) / 32 * 32);
}

/* the per-call crossovers of hm_tile_min_tokens */
static int hm_tile_min_tokens_per_call(uint32_t type, bool amx) {
    /* the crossovers measured on the device (16 threads, 768 x 2048 and 2048 x 768: the per-call
     * tile path's time at 8 tokens over the 4-token matvec's time per token, rounded over both
     * shapes), AMX / AVX-512 VNNI. The per-call conversion dequantizes (vector code for every
     * format) and re-quantizes each 32-row unit: ~28-45 us per 768 x 2048 matrix on AMX, ~50-70
     * on VNNI, against 2.3-3 us per token for the K-quants' matvec and 3-4.5 for the 32-blocks'
     * on their Q8_0X4 activations (5-9 before those, when Q8_0, Q4_0, IQ4_NL and MXFP4 crossed
     * at 6 / 11 and Q5_0 at 7 / 11). */
    static const struct {
        uint32_t type;
        uint8_t amx, vnni;
    } crossover[] = {
        {HM_TYPE_Q4_1, 5, 7},   {HM_TYPE_Q5_1, 5, 7},     {HM_TYPE_Q8_0, 10, 17},
        {HM_TYPE_Q4_0, 10, 17}, {HM_TYPE_IQ4_NL, 10, 17}, {HM_TYPE_MXFP4, 10, 17},
        {HM_TYPE_Q5_0, 11, 16}, {HM_TYPE_Q4_K, 11, 20},   {HM_TYPE_IQ4_XS, 12, 20},
        {HM_TYPE_Q5_K, 14, 22}, {HM_TYPE_Q6_K, 14, 22},   {HM_TYPE_Q3_K, 16, 26},
        {HM_TYPE_Q2_K, 16, 28},
    };
    for (size_t i = 0; i < sizeof crossover / sizeof crossover[0]; i++)
        if (crossover[i].type == type) return amx ? crossover[i].amx : crossover[i].vnni;
    return 32;
}

int hm_tile_min_forced(void) {
    const char *e = getenv("HMOE_TILE_MIN_TOKENS"); /* per call: ~100 ns, matmuls take 10+ us */
    const long v = e ? strtol(e, NULL, 10) : 0;
    return v >= 5 && v <= (1L << 20) ? (int)v : 0;
}

int hm_tile_min_tokens(const hm_cpu_ops *ops, uint32_t type, bool packed) {
    if (!ops || !hm_i8_matmul_ok(ops) || hm_act_type_for(ops, type) == HM_TYPE_F32) return INT_MAX;
    const int forced = hm_tile_min_forced();
    if (forced) return forced;
    const bool amx = ops->isa == HM_ISA_AMX;
    if (packed) { /* no later than per call (VNNI Q4_1 / Q5_1: 7) */
        const int pc = hm_tile_min_tokens_per_call(type, amx), pk = amx ? 5 : 8;
        return pc < pk ? pc : pk;
    }
    return hm_tile_min_tokens_per_call(type, amx);
}

hm_vec_dot_fn hm_vec_dot_for(const hm_cpu_ops *ops, uint32_t type) {
    if (type >= HM_TYPE_COUNT) return NULL;
    if (ops && ops->vec_dot[type]) return ops->vec_dot[type];
    /* the reference kernel reads the plain activations: not when ops converts for its own */
    if (hm_act_type_for(ops, type) != hm_act_type_for(&hm_ops_ref, type)) return NULL;
    return hm_ops_ref.vec_dot[type];
}

hm_vec_dot_n_fn hm_vec_dot_n_for(const hm_cpu_ops *ops, uint32_t type) {
    if (!ops || type >= HM_TYPE_COUNT || !ops->vec_dot[type]) return NULL;
    return ops->vec_dot_n[type];
}

hm_vec_dot_46_fn hm_vec_dot_46_for(const hm_cpu_ops *ops, uint32_t type) {
    if (!ops || type >= HM_TYPE_COUNT || !ops->vec_dot[type]) return NULL;
    return ops->vec_dot_46[type];
}

void hm_matvec_rows(hm_vec_dot_fn dot, hm_vec_dot_n_fn dotn, hm_vec_dot_46_fn d46,
                    const hm_matrix *w, const void *xq, size_t x_stride, int n_tok, float *y,
                    size_t y_stride, int64_t r0, int64_t r1) {
    if (d46 && n_tok >= HM_D46_MIN_TOKENS && r1 - r0 >= 4) {
        /* chunks of 32 rows, so the chunk's weights come from memory once and stay in L2: the
         * 6-token blocks of its whole 4-row groups, then the tokens left over and the last 1-3
         * rows by the kernels below (every result the same bits) */
        const int n6 = n_tok / 6 * 6;
        for (int64_t rc = r0; rc < r1; rc += 32) {
            const int64_t re = r1 - rc < 32 ? r1 : rc + 32, r4 = rc + (re - rc) / 4 * 4;
            for (int t0 = 0; t0 < n6; t0 += 6) {
                const void *x[6];
                for (int t = 0; t < 6; t++)
                    x[t] = (const uint8_t *)xq + (size_t)(t0 + t) * x_stride;
                float *yt = y + (size_t)t0 * y_stride;
                for (int64_t r = rc; r < r4; r += 4) {
                    float out[24];
                    d46(w->cols, (const uint8_t *)w->data + (size_t)r * w->row_bytes, w->row_bytes,
                        x, out);
                    for (int t = 0; t < 6; t++)
                        for (int i = 0; i < 4; i++)
                            yt[(size_t)t * y_stride + (size_t)(r + i)] = out[t * 4 + i];
                }
            }
            if (n6 < n_tok)
                hm_matvec_rows(dot, dotn, NULL, w, (const uint8_t *)xq + (size_t)n6 * x_stride,
                               x_stride, n_tok - n6, y + (size_t)n6 * y_stride, y_stride, rc, r4);
            if (r4 < re)
                hm_matvec_rows(dot, dotn, NULL, w, xq, x_stride, n_tok, y, y_stride, r4, re);
        }
        return;
    }
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    if (!dotn || n_tok == 1) {
        for (int64_t r = r0; r < r1; r++, row += w->row_bytes)
            for (int t = 0; t < n_tok; t++)
                y[(size_t)t * y_stride + (size_t)r] =
                    dot(w->cols, row, (const uint8_t *)xq + (size_t)t * x_stride);
        return;
    }
    for (int t0 = 0; t0 < n_tok; t0 += 4) {
        const int nt = n_tok - t0 < 4 ? n_tok - t0 : 4;
        const void *x[4];
        for (int t = 0; t < nt; t++) x[t] = (const uint8_t *)xq + (size_t)(t0 + t) * x_stride;
        row = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
        for (int64_t r = r0; r < r1; r++, row += w->row_bytes) {
            float out[4];
            dotn(w->cols, row, x, nt, out);
            for (int t = 0; t < nt; t++) y[(size_t)(t0 + t) * y_stride + (size_t)r] = out[t];
        }
    }
}
