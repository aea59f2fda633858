/* test_kernels.c - every compiled kernel variant this CPU runs equals the plain-C reference on
 * random valid blocks: odd row counts, odd block counts, rows at 2-byte (not vector) alignment,
 * 1-4 tokens; and the reference dot products equal a float64 dot of the dequantized values. */
#include <float.h>
#include <stdatomic.h>
#include <math.h>

#include "core/alloc.h"
#include "core/pool.h"
#include "cpu/matvec.h"
#include "cpu/nn.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/ref.h"
#include "quant/synth.h"
#include "test.h"

/* dequantize one weight row / activation for the float64 oracle, through the reference
 * dequantizer (itself equal to the gguf package's bit for bit, tests/quant_python.py) */
static void deq_row(uint32_t type, const void *src, double *out, int64_t n) {
    float *f = malloc(sizeof(float) * (size_t)n);
    CHECK_OK(hm_dequantize_row(type, src, f, n));
    for (int64_t i = 0; i < n; i++) out[i] = f[i];
    free(f);
}

/* types every SIMD variant must have its own kernel for */
static const uint32_t simd_types[] = {
    HM_TYPE_Q4_K,     HM_TYPE_Q8_0, HM_TYPE_BF16, HM_TYPE_Q6_K,   HM_TYPE_MXFP4,
    HM_TYPE_IQ4_XS,   HM_TYPE_Q5_K, HM_TYPE_Q4_0, HM_TYPE_IQ4_NL, HM_TYPE_Q5_0,
    HM_TYPE_FP8_B128, HM_TYPE_Q2_K, HM_TYPE_Q3_K, HM_TYPE_Q4_1,   HM_TYPE_Q5_1};

static bool needs_simd(uint32_t type) {
    for (size_t i = 0; i < sizeof simd_types / sizeof *simd_types; i++)
        if (simd_types[i] == type) return true;
    return false;
}

static void test_type(uint32_t type, int64_t cols, int64_t rows, int offset) {
    uint64_t rb;
    CHECK(hm_type_row_bytes(type, (uint64_t)cols, &rb));
    uint8_t *wbuf = malloc(rb * (size_t)rows + 64);
    uint8_t *w = wbuf + offset; /* 2-byte aligned, not vector aligned */
    CHECK_OK(hm_synth_fill(type, w, (uint64_t)(cols * rows), 0.0f, 0.05f, 1234 + (uint64_t)cols));
    hm_matrix m;
    CHECK_OK(hm_matrix_init(&m, type, w, rows, cols));
    enum { T = 4 };
    /* the reference's activations; each variant gets its own below (the layouts may differ) */
    size_t xb = hm_act_bytes_for(&hm_ops_ref, type, cols);
    uint8_t *xq = malloc(xb * T + 64);
    float *x = malloc(sizeof(float) * (size_t)(cols * T));
    uint64_t s = 99;
    for (int t = 0; t < T; t++) {
        for (int64_t i = 0; i < cols; i++)
            x[t * cols + i] = (float)((int64_t)(hm_rng_next(&s) % 2001) - 1000) / 500.0f;
        CHECK_OK(hm_act_convert_for(&hm_ops_ref, type, x + t * cols, xq + (size_t)t * xb, cols));
    }
    float *yref = calloc((size_t)(rows * T), sizeof(float)),
          *y = calloc((size_t)(rows * T), sizeof(float));
    hm_matvec_rows(hm_vec_dot_for(&hm_ops_ref, type), NULL, NULL, &m, xq, xb, T, yref, (size_t)rows,
                   0, rows);

    /* reference vs float64 dot of dequantized operands */
    double *dw = malloc(sizeof(double) * (size_t)cols), *dx = malloc(sizeof(double) * (size_t)cols);
    double ymax = 1e-6;
    for (int64_t r = 0; r < rows; r++)
        for (int t = 0; t < T; t++) ymax = fmax(ymax, fabs(yref[t * rows + r]));
    for (int64_t r = 0; r < rows; r += 7) {
        deq_row(type, w + (size_t)r * rb, dw, cols);
        for (int t = 0; t < T; t++) {
            deq_row(hm_act_type_for(&hm_ops_ref, type), xq + (size_t)t * xb, dx, cols);
            double e = 0;
            for (int64_t i = 0; i < cols; i++) e += dw[i] * dx[i];
            CHECK_MSG(fabs(e - yref[t * rows + r]) <= 1e-4 * ymax, "%s ref row %lld: %g vs f64 %g",
                      hm_type_name(type), (long long)r, yref[t * rows + r], e);
        }
    }
    /* every variant vs reference */
    const hm_cpu_features *f = hm_cpu_features_get();
    for (int isa = 1; isa < HM_ISA_COUNT; isa++) {
        const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
        if (!ops || !hm_isa_supported(f, (hm_isa)isa)) continue;
        if (needs_simd(type))
            CHECK_MSG(ops->vec_dot[type] != NULL, "%s has no %s kernel", ops->name,
                      hm_type_name(type));
        const size_t xbv = hm_act_bytes_for(ops, type, cols);
        uint8_t *xv = malloc(xbv * T + 64);
        for (int t = 0; t < T; t++)
            CHECK_OK(hm_act_convert_for(ops, type, x + t * cols, xv + (size_t)t * xbv, cols));
        hm_matvec_rows(hm_vec_dot_for(ops, type), hm_vec_dot_n_for(ops, type),
                       hm_vec_dot_46_for(ops, type), &m, xv, xbv, T, y, (size_t)rows, 0, rows);
        free(xv);
        int bad = 0;
        for (int64_t k = 0; k < rows * T; k++)
            if (!(fabs((double)y[k] - yref[k]) <= 2e-5 * ymax)) bad++; /* NaN counts */
        CHECK_MSG(bad == 0, "%s %s cols %lld: %d of %lld outputs differ from ref (e.g. %g vs %g)",
                  ops->name, hm_type_name(type), (long long)cols, bad, (long long)(rows * T), y[0],
                  yref[0]);
    }
    free(dw);
    free(dx);
    free(y);
    free(yref);
    free(x);
    free(xq);
    free(wbuf);
}

/* MXFP4 with every E8M0 exponent (0-255, the denormal scales 2^-128 / 2^-127 of e 0 and 1 and
 * 2^127 of e 255 included) through every variant's one- and four-token kernels: activations of
 * 127 x 2^s with s chosen so that every product and sum is exact in float, so each kernel must
 * give the reference's value exactly. 7 blocks: a group of four, a pair and a lone block. */
static void test_mxfp4_exponents(void) {
    enum { NB = 7, COLS = 32 * NB };
    hm_block_mxfp4 w[NB];
    float x[COLS];
    uint64_t s = 31;
    const hm_cpu_features *f = hm_cpu_features_get();
    for (int e = 0; e < 256; e++) {
        for (int b = 0; b < NB; b++) {
            w[b].e = (uint8_t)e;
            /* from e 253 on, values of magnitude 2 or more (codes other than 0, 1, 8, 9)
             * dequantize to more than FLT_MAX */
            for (int i = 0; i < 16; i++)
                w[b].qs[i] = (uint8_t)(hm_rng_next(&s) & (e >= 253 ? 0x99 : 0xFF));
        }
        /* the activations' scales are halves: 2^-14 .. 2^15; codes up to 7 but one 127 per
         * block keep |sum| < 2^15, so e 255 (2^127 x 2^-14) does not overflow */
        const int sh = 128 - e < -14 ? -14 : 128 - e > 15 ? 15 : 128 - e;
        for (int i = 0; i < COLS; i++) /* each block's max |x| is 127 x 2^sh: its scale 2^sh */
            x[i] = ldexpf(i % 32 == 5 ? 127.0f : (float)((int)(hm_rng_next(&s) % 15) - 7), sh);
        uint8_t xr[2 * COLS];
        CHECK_OK(hm_act_convert_for(&hm_ops_ref, HM_TYPE_MXFP4, x, xr, COLS));
        const float ref = hm_vec_dot_for(&hm_ops_ref, HM_TYPE_MXFP4)(COLS, w, xr);
        CHECK_MSG(isfinite(ref) && ref != 0.0f, "e %d: reference %g", e, ref);
        for (int isa = 1; isa < HM_ISA_COUNT; isa++) {
            const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
            if (!ops || !hm_isa_supported(f, (hm_isa)isa)) continue;
            _Alignas(64) uint8_t xv[2 * COLS];
            CHECK(hm_act_bytes_for(ops, HM_TYPE_MXFP4, COLS) <= sizeof xv);
            CHECK_OK(hm_act_convert_for(ops, HM_TYPE_MXFP4, x, xv, COLS));
            const float y1 = hm_vec_dot_for(ops, HM_TYPE_MXFP4)(COLS, w, xv);
            CHECK_MSG(y1 == ref, "%s MXFP4 e %d: %.9g, reference %.9g", ops->name, e, y1, ref);
            const hm_vec_dot_n_fn dn = hm_vec_dot_n_for(ops, HM_TYPE_MXFP4);
            if (dn) {
                const void *xs[4] = {xv, xv, xv, xv};
                float y4[4];
                dn(COLS, w, xs, 4, y4);
                CHECK_MSG(y4[0] == ref && y4[3] == ref, "%s MXFP4 e %d, 4 tokens: %.9g, ref %.9g",
                          ops->name, e, y4[0], ref);
            }
        }
    }
}

/* The 4-row by 6-token kernels of the float types equal the one-row kernel bit for bit for every
 * row and token (rows at an odd row stride, not vector aligned; activations at unaligned
 * addresses, not in address order), and hm_matvec_rows with them equals it without them for
 * row and token counts that leave remainders on both sides (the driver takes them from
 * HM_D46_MIN_TOKENS tokens). */
static void test_dot46(uint32_t type, int64_t cols) {
    uint64_t rb0;
    CHECK(hm_type_row_bytes(type, (uint64_t)cols, &rb0));
    const size_t off = type == HM_TYPE_F32 ? 4 : 2, rb = (size_t)rb0 + off; /* row stride */
    enum { ROWS = 11, T = 23 };
    uint8_t *w = malloc(rb * ROWS + 64);
    for (int r = 0; r < ROWS; r++)
        CHECK_OK(hm_synth_fill(type, w + off + (size_t)r * rb, (uint64_t)cols, 0.0f, 0.05f,
                               17 + (uint64_t)(r * cols)));
    float *x = malloc(sizeof(float) * (size_t)(T * cols));
    uint64_t s = 77;
    for (int64_t i = 0; i < T * cols; i++)
        x[i] = (float)((int64_t)(hm_rng_next(&s) % 2001) - 1000) / 700.0f;
    hm_matrix m;
    CHECK_OK(hm_matrix_init(&m, type, w + off, ROWS, cols));
    m.row_bytes = rb;
    const hm_cpu_features *f = hm_cpu_features_get();
    for (int isa = 0; isa < HM_ISA_COUNT; isa++) {
        const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
        if (!ops || !hm_isa_supported(f, (hm_isa)isa)) continue;
        const hm_vec_dot_46_fn d46 = hm_vec_dot_46_for(ops, type);
        if (isa >= HM_ISA_AVX2)
            CHECK_MSG(d46 != NULL, "%s has no 4x6 %s kernel", ops->name, hm_type_name(type));
        if (!d46) continue;
        /* float activations at 4-byte offsets, the token order reversed */
        const size_t xb = sizeof(float) * (size_t)cols + 4 * 3;
        uint8_t *xbuf = malloc(xb * T + 64);
        const void *xs[T];
        for (int t = 0; t < T; t++) {
            uint8_t *xt = xbuf + (size_t)t * xb + 4 * (size_t)(t % 3 + 1);
            memcpy(xt, x + (size_t)t * (size_t)cols, sizeof(float) * (size_t)cols);
            xs[T - 1 - t] = xt;
        }
        const hm_vec_dot_fn dot = hm_vec_dot_for(ops, type);
        float out[24];
        d46(cols, w + off + rb, rb, xs + 2, out);
        int bad = 0;
        for (int r = 0; r < 4; r++)
            for (int t = 0; t < 6; t++) {
                const float one = dot(cols, w + off + (size_t)(1 + r) * rb, xs[2 + t]);
                bad += memcmp(&one, &out[t * 4 + r], sizeof one) != 0;
            }
        CHECK_MSG(bad == 0, "%s %s cols %lld: %d of 24 4x6 results differ from the one-row kernel",
                  ops->name, hm_type_name(type), (long long)cols, bad);
        /* the driver: strided activations (the first token's copy, 4 bytes past a line) */
        const size_t xs_stride = sizeof(float) * (size_t)cols + 4;
        uint8_t *xq = malloc(xs_stride * T + 64);
        for (int t = 0; t < T; t++)
            memcpy(xq + 4 + (size_t)t * xs_stride, x + (size_t)t * (size_t)cols,
                   sizeof(float) * (size_t)cols);
        float *y0 = calloc(ROWS * T, sizeof(float)), *y1 = calloc(ROWS * T, sizeof(float));
        const int nts[] = {5, HM_D46_MIN_TOKENS, HM_D46_MIN_TOKENS + 1, T};
        for (size_t k = 0; k < sizeof nts / sizeof *nts; k++)
            for (int64_t r0 = 0; r0 < 3; r0++) {
                /* every output a NaN first: one left unwritten stays one */
                memset(y0, 0xff, sizeof(float) * ROWS * T);
                memset(y1, 0xff, sizeof(float) * ROWS * T);
                hm_matvec_rows(dot, hm_vec_dot_n_for(ops, type), NULL, &m, xq + 4, xs_stride,
                               nts[k], y0, ROWS, r0, ROWS);
                hm_matvec_rows(dot, hm_vec_dot_n_for(ops, type), d46, &m, xq + 4, xs_stride, nts[k],
                               y1, ROWS, r0, ROWS);
                CHECK_MSG(!memcmp(y0, y1, sizeof(float) * ROWS * T),
                          "%s %s cols %lld: %d tokens, rows %lld..%d: with the 4x6 kernel the "
                          "results differ",
                          ops->name, hm_type_name(type), (long long)cols, nts[k], (long long)r0,
                          ROWS);
            }
        free(y0), free(y1), free(xq), free(xbuf);
    }
    free(w), free(x);
}

/* Multi-token dot products equal the single-token kernel bit for bit for every count 1-4 (a token's
 * output must not depend on how many tokens share an expert), with activation rows at unaligned
 * addresses and a different row each. */
static void test_dot_n(uint32_t type, int64_t cols) {
    uint64_t rb;
    CHECK(hm_type_row_bytes(type, (uint64_t)cols, &rb));
    /* a row that is not vector aligned, as far as the block's scale allows (FP8_B128's is a float)
     */
    const size_t off = type == HM_TYPE_FP8_B128 || type == HM_TYPE_F32 ? 4 : 2;
    uint8_t *w = malloc(rb + off);
    CHECK_OK(hm_synth_fill(type, w + off, (uint64_t)cols, 0.0f, 0.05f, 7 + (uint64_t)cols));
    float *x = malloc(sizeof(float) * (size_t)(4 * cols));
    uint64_t s = 5;
    for (int64_t i = 0; i < 4 * cols; i++)
        x[i] = (float)((int64_t)(hm_rng_next(&s) % 2001) - 1000) / 700.0f;
    const hm_cpu_features *f = hm_cpu_features_get();
    for (int isa = 0; isa < HM_ISA_COUNT; isa++) {
        const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
        if (!ops || !hm_isa_supported(f, (hm_isa)isa)) continue;
        /* the variant's activations at offsets 0, 4, 8, 12: not vector aligned (Q8_K's float
         * scale needs 4 bytes) */
        const size_t xb = hm_act_bytes_for(ops, type, cols);
        uint8_t *xbuf = malloc(4 * (xb + 16));
        const void *xs[4];
        for (int t = 0; t < 4; t++) {
            uint8_t *xt = xbuf + (size_t)t * (xb + 16) + 4 * (size_t)t;
            CHECK_OK(hm_act_convert_for(ops, type, x + t * cols, xt, cols));
            xs[3 - t] = xt; /* not in address order */
        }
        const hm_vec_dot_n_fn dotn = hm_vec_dot_n_for(ops, type);
        const bool fl = type == HM_TYPE_F32 || type == HM_TYPE_BF16 || type == HM_TYPE_F16;
        if ((isa >= HM_ISA_AVX2 &&
             (type == HM_TYPE_Q4_K || type == HM_TYPE_Q8_0 || type == HM_TYPE_FP8_B128)) ||
            (isa >= HM_ISA_AVX2 && fl) ||
            (isa >= HM_ISA_AVX2 &&
             (type == HM_TYPE_Q6_K || type == HM_TYPE_IQ4_XS || type == HM_TYPE_Q5_K ||
              type == HM_TYPE_Q2_K || type == HM_TYPE_Q3_K)))
            CHECK_MSG(dotn != NULL, "%s has no multi-token %s kernel", ops->name,
                      hm_type_name(type));
        const hm_vec_dot_fn dot = hm_vec_dot_for(ops, type);
        for (int nt = 1; dotn && nt <= 4; nt++) {
            float out[4], one[4];
            dotn(cols, w + off, xs, nt, out);
            for (int t = 0; t < nt; t++) one[t] = dot(cols, w + off, xs[t]);
            CHECK_MSG(!memcmp(out, one, sizeof(float) * (size_t)nt),
                      "%s %s cols %lld: %d-token dot differs from the one-token kernel (%g vs %g)",
                      ops->name, hm_type_name(type), (long long)cols, nt, out[0], one[0]);
        }
        free(xbuf);
    }
    free(w), free(x);
}

/* FP8_B128 on every variant: every one of the 254 finite codes (subnormals, +-0, +-448) against
 * the reference, and a NaN code makes the dot product NaN, as it does in the reference. */
static void test_fp8_codes_all_variants(void) {
    enum { N = 512 };
    hm_block_fp8_b128 w[N / HM_FP8_TILE];
    float x[N];
    uint64_t s = 3;
    int k = 0;
    for (int b = 0; b < N / HM_FP8_TILE; b++) {
        w[b].d = 0.01f * (float)(b + 1);
        for (int j = 0; j < HM_FP8_TILE; j++, k++) {
            int c = k % 256;
            if ((c & 0x7f) == 0x7f) c ^= 1; /* 0x7e / 0xfe: +-448 instead of NaN */
            w[b].qs[j] = (uint8_t)c;
        }
    }
    for (int i = 0; i < N; i++) x[i] = (float)((int64_t)(hm_rng_next(&s) % 2001) - 1000) / 700.0f;
    const float ref = hm_ops_ref.vec_dot[HM_TYPE_FP8_B128](N, w, x);
    const uint8_t keep = w[2].qs[77];
    const hm_cpu_features *f = hm_cpu_features_get();
    for (int isa = 1; isa < HM_ISA_COUNT; isa++) {
        const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
        if (!ops || !hm_isa_supported(f, (hm_isa)isa) || !ops->vec_dot[HM_TYPE_FP8_B128]) continue;
        const float got = ops->vec_dot[HM_TYPE_FP8_B128](N, w, x);
        CHECK_MSG(fabsf(got - ref) <= 1e-5f * fabsf(ref) + 1e-6f, "%s FP8 codes: %g vs ref %g",
                  ops->name, got, ref);
        w[2].qs[77] = 0xff;
        CHECK_MSG(isnan(ops->vec_dot[HM_TYPE_FP8_B128](N, w, x)), "%s: FP8 NaN code not NaN",
                  ops->name);
        w[2].qs[77] = 0x7f;
        CHECK_MSG(isnan(ops->vec_dot[HM_TYPE_FP8_B128](N, w, x)), "%s: FP8 NaN code not NaN",
                  ops->name);
        w[2].qs[77] = keep;
    }
    w[2].qs[77] = 0x7f;
    CHECK(isnan(hm_ops_ref.vec_dot[HM_TYPE_FP8_B128](N, w, x)));
}

/* The int8 decomposition (sc * q + bi) equals the reference dequantization bit for bit. */
static void test_i8_split(uint32_t type, int64_t cols) {
    const int bs = hm_i8_block(type);
    CHECK(bs == 16 || bs == 32);
    uint64_t rb;
    hm_type_row_bytes(type, (uint64_t)cols, &rb);
    uint8_t *w = malloc(rb);
    int8_t *q = malloc((size_t)cols);
    float *ref = malloc(sizeof(float) * (size_t)cols), *sc = malloc(sizeof(float) * (size_t)cols),
          *bi = malloc(sizeof(float) * (size_t)cols);
    CHECK_OK(hm_synth_fill(type, w, (uint64_t)cols, 0.0f, 0.05f, 91 + type));
    CHECK_OK(hm_dequantize_row(type, w, ref, cols));
    for (int64_t b = 0; b < cols / bs; b++) bi[b] = 0.0f;
    hm_i8_split_row(type, w, cols, q, sc, 1, hm_i8_has_bias(type) ? bi : NULL);
    int bad = 0;
    for (int64_t i = 0; i < cols; i++) {
        float v = sc[i / bs] * (float)q[i]; /* + 0 would turn -0 into +0 */
        if (hm_i8_has_bias(type)) v = v + bi[i / bs];
        if (memcmp(&v, &ref[i], 4) != 0) bad++;
    }
    CHECK_MSG(bad == 0, "i8 split %s cols %lld: %d of %lld values differ from dequantize",
              hm_type_name(type), (long long)cols, bad, (long long)cols);
    free(w), free(q), free(ref), free(sc), free(bi);
}

/* The packed activations' codes checked against the layout from first principles: 16-token group
 * g's VNNI tile row k / 4 holds token g * 16 + j's codes k .. k + 3 at bytes 4 j .. 4 j + 3, or
 * (rt) its row tile k / 64 holds them in row j; zeros for tokens past n_tok. Token t's codes are
 * row idx[t] of the rows qr (qb bytes apart) quantized once. Returns the bytes out of place. */
static int misplaced_codes(const uint8_t *packed, const uint8_t *qr, size_t qb, const int32_t *idx,
                           int n_tok, int64_t cols, bool rt) {
    const int64_t kp = (cols + 63) / 64 * 64;
    int wrong = 0;
    for (int g = 0; g < (n_tok + 31) / 32 * 2; g++)
        for (int64_t k = 0; k < kp; k++)
            for (int j = 0; j < 16; j++) {
                const int t = g * 16 + j;
                const int8_t want = t < n_tok ? (int8_t)qr[(size_t)idx[t] * qb + (size_t)k] : 0;
                const size_t at = rt ? (size_t)(k / 64) * 1024 + (size_t)j * 64 + (size_t)(k % 64)
                                     : (size_t)(k / 4) * 64 + (size_t)j * 4 + (size_t)(k % 4);
                wrong += (int8_t)packed[(size_t)g * 16 * (size_t)kp + at] != want;
            }
    return wrong;
}

/* The swapped-operand kernels (AMX) against the tile kernels they replace, bit for bit: the
 * matmul, the SiLU-GLU (the two matmuls, then the table's silu_mul) and the down projection
 * (the matmul plus the two axpys), at rows not a multiple of 32 (a short last unit), cols with
 * padding and a short last scale group, token counts off the 16/32 grid, a bias, scattered
 * output rows; and the row-tile packers against each other (from floats, from rows quantized
 * once, and the layout from first principles). */
static void test_amx_swapped(uint32_t type, int64_t rows, int64_t cols, int n_tok) {
#if defined(__x86_64__)
    const hm_cpu_features *cf = hm_cpu_features_get();
    if (!hm_isa_supported(cf, HM_ISA_AMX)) return;
    uint64_t rb;
    hm_type_row_bytes(type, (uint64_t)cols, &rb);
    uint8_t *w = malloc(rb * (size_t)rows), *w2 = malloc(rb * (size_t)rows);
    CHECK_OK(hm_synth_fill(type, w, (uint64_t)(rows * cols), 0.0f, 0.05f, 91));
    CHECK_OK(hm_synth_fill(type, w2, (uint64_t)(rows * cols), 0.0f, 0.05f, 92));
    const int64_t units = (rows + 31) / 32;
    const size_t wb = (hm_amx_wpack_bytes(rows, cols) + 63) / 64 * 64;
    void *scratch = malloc(hm_amx_scratch_bytes(type, cols));
    uint8_t *wp = aligned_alloc(64, wb), *wv = aligned_alloc(64, wb), *wp2 = aligned_alloc(64, wb),
            *wv2 = aligned_alloc(64, wb);
    hm_amx_wpack(type, w, rb, rows, cols, 0, units, wp, scratch);
    hm_amx_wpack(type, w2, rb, rows, cols, 0, units, wp2, scratch);
    hm_amx_wpack_vnni(type, w, rb, rows, cols, 0, units / 2, wv, scratch); /* as two threads */
    hm_amx_wpack_vnni(type, w, rb, rows, cols, units / 2, units, wv, scratch);
    hm_amx_wpack_vnni(type, w2, rb, rows, cols, 0, units, wv2, scratch);
    float *x = malloc(sizeof(float) * (size_t)(cols * n_tok));
    uint64_t s = 13;
    for (int64_t i = 0; i < cols * n_tok; i++)
        x[i] = (float)((int64_t)(hm_rng_next(&s) % 2001) - 1000) / 500.0f;
    const size_t pb = hm_amx_act_bytes(type, cols, n_tok), qb = hm_amx_qrow_bytes(cols);
    void *pv = malloc(pb), *pr = malloc(pb), *pq = malloc(pb);
    uint8_t *qr = aligned_alloc(64, qb * (size_t)n_tok);
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)n_tok);
    for (int t = 0; t < n_tok; t++) {
        idx[t] = n_tok - 1 - t; /* gathered in reverse */
        hm_amx_quant_row(x + (size_t)t * (size_t)cols, cols, qr + (size_t)t * qb);
    }
    const int tg = (n_tok + 31) / 32 * 2;
    hm_amx_pack_act(type, x, (size_t)cols, NULL, n_tok, cols, pv, 0, tg);
    hm_amx_pack_act_rt(x, (size_t)cols, idx, n_tok, cols, pr, 0, tg);
    memset(pq, 0x5a, pb);
    hm_amx_pack_act_q_rt(qr, qb, idx, n_tok, cols, pq, 0, 1);
    hm_amx_pack_act_q_rt(qr, qb, idx, n_tok, cols, pq, 1, tg);
    const uint8_t *a1 = (const uint8_t *)(((uintptr_t)pr + 63) & ~(uintptr_t)63),
                  *a2 = (const uint8_t *)(((uintptr_t)pq + 63) & ~(uintptr_t)63);
    CHECK_MSG(!memcmp(a1, a2, pb - 64), "rt packing of %lld cols, %d tokens: q_rt != rt",
              (long long)cols, n_tok);
    const int wrong = misplaced_codes(a2, qr, qb, idx, n_tok, cols, true);
    CHECK_MSG(wrong == 0, "rt %lld cols, %d tokens: %d packed bytes not where the layout says",
              (long long)cols, n_tok, wrong);
    hm_amx_pack_act_rt(x, (size_t)cols, NULL, n_tok, cols, pr, 0, tg); /* in token order */
    const size_t ny = (size_t)n_tok * (size_t)rows;
    float *y = calloc(ny, sizeof(float)), *y2 = calloc(ny, sizeof(float)),
          *u = calloc(ny, sizeof(float)), *h = calloc(ny, sizeof(float));
    const int64_t r0 = 32; /* the first unit not asked for */
    hm_amx_matmul_packed(wp, rows, cols, r0, rows, pv, n_tok, y, (size_t)rows, scratch);
    hm_amx_matmul_packed_rt(wv, rows, cols, r0, rows + 3, pr, n_tok, y2, (size_t)rows, scratch);
    int64_t diff = 0;
    for (size_t i = 0; i < ny; i++) diff += memcmp(&y[i], &y2[i], 4) != 0;
    CHECK_MSG(diff == 0, "%s matmul_rt %lld x %lld, %d tokens: %lld of the outputs differ",
              hm_type_name(type), (long long)rows, (long long)cols, n_tok, (long long)diff);
    /* SiLU-GLU: y as the gate */
    hm_amx_matmul_packed(wp2, rows, cols, r0, rows, pv, n_tok, u, (size_t)rows, scratch);
    for (int t = 0; t < n_tok; t++)
        hm_ops_amx.silu_mul_f32(rows - r0, y2 + (size_t)t * (size_t)rows,
                                u + (size_t)t * (size_t)rows);
    hm_amx_glu_packed_rt(wv, wv2, rows, cols, r0, rows, pr, n_tok, h, (size_t)rows, scratch);
    diff = 0;
    for (size_t i = 0; i < ny; i++) diff += memcmp(&h[i], &y2[i], 4) != 0;
    CHECK_MSG(diff == 0, "%s glu_rt %lld x %lld, %d tokens: %lld of the outputs differ",
              hm_type_name(type), (long long)rows, (long long)cols, n_tok, (long long)diff);
    /* down: token t goes to row tok[t] of 2 n_tok (every other row), weight wt[t] */
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n_tok);
    float *wt = malloc(sizeof(float) * (size_t)n_tok), *bias = malloc(sizeof(float) * rows);
    for (int t = 0; t < n_tok; t++) tok[t] = 2 * (n_tok - 1 - t), wt[t] = 0.25f + 0.01f * t;
    for (int64_t r = 0; r < rows; r++) bias[r] = 0.001f * (float)r - 0.02f;
    const size_t os = (size_t)rows + 5;
    float *o1 = calloc(2 * (size_t)n_tok * os, sizeof(float)),
          *o2 = calloc(2 * (size_t)n_tok * os, sizeof(float));
    for (size_t i = 0; i < 2 * (size_t)n_tok * os; i++) o1[i] = o2[i] = 0.5f;
    const hm_cpu_ops *amx = hm_cpu_ops_for(HM_ISA_AMX);
    for (int t = 0; t < n_tok; t++) {
        float *o = o1 + (size_t)tok[t] * os + r0;
        amx->axpy_f32(rows - r0, wt[t], y + (size_t)t * rows, o);
        amx->axpy_f32(rows - r0, wt[t], bias + r0, o);
    }
    hm_amx_down_acc(wv, rows, cols, r0, rows, pr, n_tok, tok, wt, bias, o2, os, scratch);
    diff = 0;
    for (size_t i = 0; i < 2 * (size_t)n_tok * os; i++) diff += memcmp(&o1[i], &o2[i], 4) != 0;
    CHECK_MSG(diff == 0, "%s down_acc %lld x %lld, %d tokens: %lld of the outputs differ",
              hm_type_name(type), (long long)rows, (long long)cols, n_tok, (long long)diff);
    free(w), free(w2), free(scratch), free(wp), free(wv), free(wp2), free(wv2), free(x);
    free(pv), free(pr), free(pq), free(qr), free(idx), free(y), free(y2), free(u), free(h);
    free(tok), free(wt), free(bias), free(o1), free(o2);
#else
    (void)type, (void)rows, (void)cols, (void)n_tok;
#endif
}

/* AMX INT8 matmul vs float64 dot products of the dequantized weights with the float activations.
 * The AMX path quantizes activations to int8 per 256 values: the named tolerance is 1% of max|y|
 * (int8 rounding of x is ~0.4% per element and averages out over the dot product). Rows not a
 * multiple of 16, tokens not a multiple of 16, a row range that starts inside the matrix. */
static void test_amx_type(uint32_t type, int64_t rows, int64_t cols, int n_tok) {
#if defined(__x86_64__)
    const hm_cpu_features *cf = hm_cpu_features_get();
    const bool amx = hm_isa_supported(cf, HM_ISA_AMX),
               vnni = cf->avx512vnni && hm_isa_supported(cf, HM_ISA_AVX512);
    if (!amx && !vnni) return; /* without AMX, the VNNI kernels take the tile path's place */
    void (*mm)(uint32_t, const void *, size_t, int64_t, int64_t, int64_t, const void *, int,
               float *, size_t, void *) = amx ? hm_amx_matmul : hm_vnni_matmul;
    void (*mmp)(const void *, int64_t, int64_t, int64_t, int64_t, const void *, int, float *,
                size_t, void *) = amx ? hm_amx_matmul_packed : hm_vnni_matmul_packed;
    uint64_t rb;
    hm_type_row_bytes(type, (uint64_t)cols, &rb);
    uint8_t *w = malloc(rb * (size_t)rows);
    CHECK_OK(hm_synth_fill(type, w, (uint64_t)(rows * cols), 0.0f, 0.05f, 77 + type));
    float *x = malloc(sizeof(float) * (size_t)(cols * n_tok)),
          *wf = malloc(sizeof(float) * (size_t)cols);
    uint64_t s = 5;
    for (int64_t i = 0; i < cols * n_tok; i++)
        x[i] = (float)((int64_t)(hm_rng_next(&s) % 2001) - 1000) / 500.0f;
    double *yref = calloc((size_t)(rows * n_tok), sizeof(double));
    float *y = calloc((size_t)(rows * n_tok), sizeof(float));
    for (int64_t r = 0; r < rows; r++) {
        hm_dequantize_row(type, w + r * rb, wf, cols);
        for (int t = 0; t < n_tok; t++) {
            double acc = 0;
            for (int64_t i = 0; i < cols; i++) acc += (double)wf[i] * x[t * cols + i];
            yref[t * rows + r] = acc;
        }
    }
    const int64_t r0 = 3; /* rows 0..2 not asked for: must stay 0 */
    void *scratch = malloc(hm_amx_scratch_bytes(type, cols));
    void *packed = malloc(hm_amx_act_bytes(type, cols, n_tok));
    const int tg = (n_tok + 31) / 32 * 2;
    hm_amx_pack_act(type, x, (size_t)cols, NULL, n_tok, cols, packed, 0, 1);
    hm_amx_pack_act(type, x, (size_t)cols, NULL, n_tok, cols, packed, 1, tg);
    {
        /* rows quantized once, then gathered (reversed order through idx): the same bytes */
        const size_t qb = hm_amx_qrow_bytes(cols), pb = hm_amx_act_bytes(type, cols, n_tok);
        uint8_t *qr = aligned_alloc(64, qb * (size_t)n_tok);
        int32_t *idx = malloc(sizeof(int32_t) * (size_t)n_tok);
        float *xr = malloc(sizeof(float) * (size_t)(cols * n_tok));
        for (int t = 0; t < n_tok; t++) {
            idx[t] = n_tok - 1 - t;
            memcpy(xr + (size_t)idx[t] * cols, x + (size_t)t * cols, sizeof(float) * cols);
        }
        for (int t = 0; t < n_tok; t++) hm_amx_quant_row(xr + (size_t)t * cols, cols, qr + t * qb);
        void *p2 = malloc(pb);
        memset(p2, 0x5a, pb);
        hm_amx_pack_act_q(qr, qb, idx, n_tok, cols, p2, 0, tg);
        /* both layouts start at the first 64-byte boundary of their buffers */
        const uint8_t *a1 = (const uint8_t *)(((uintptr_t)packed + 63) & ~(uintptr_t)63),
                      *a2 = (const uint8_t *)(((uintptr_t)p2 + 63) & ~(uintptr_t)63);
        CHECK_MSG(!memcmp(a1, a2, pb - 64), "amx %s %lld cols, %d tokens: pack_act_q != pack_act",
                  hm_type_name(type), (long long)cols, n_tok);
        const int wrong = misplaced_codes(a2, qr, qb, idx, n_tok, cols, false);
        CHECK_MSG(wrong == 0, "amx %lld cols, %d tokens: %d packed bytes not where the layout says",
                  (long long)cols, n_tok, wrong);
        free(qr), free(idx), free(xr), free(p2);
    }
    mm(type, w, rb, cols, r0, rows, packed, n_tok, y + r0, (size_t)rows, scratch);
    double ymax = 1e-6;
    for (int64_t k = 0; k < rows * n_tok; k++) ymax = fmax(ymax, fabs(yref[k]));
    int bad = 0;
    double emax = 0;
    for (int t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < rows; r++) {
            double want = r < r0 ? 0.0 : yref[t * rows + r], e = fabs(y[t * rows + r] - want);
            emax = e > emax || e != e ? e : emax;                                  /* NaN-sticky */
            if (!(e <= 1e-2 * ymax) || (r < r0 && y[t * rows + r] != 0.0f)) bad++; /* NaN too */
        }
    CHECK_MSG(bad == 0, "amx %s %lldx%lld, %d tokens: %d outputs off (max err %.3g of %.3g)",
              hm_type_name(type), (long long)rows, (long long)cols, n_tok, bad, emax, ymax);

    /* weights repacked once: bit-identical to the per-call conversion, from unit 0 and from
     * unit 1 (rows 32..), the units packed in two calls as two threads would */
    const int64_t units = (rows + 31) / 32;
    void *wp = aligned_alloc(64, (hm_amx_wpack_bytes(rows, cols) + 63) / 64 * 64);
    hm_amx_wpack(type, w, rb, rows, cols, 0, units / 2, wp, scratch);
    hm_amx_wpack(type, w, rb, rows, cols, units / 2, units, wp, scratch);
    float *yp = calloc((size_t)(rows * n_tok), sizeof(float));
    for (int64_t from = 0; from <= 32 && from < rows; from += 32) {
        mmp(wp, rows, cols, from, rows + 5, packed, n_tok, yp + from, (size_t)rows, scratch);
        int diff = 0;
        for (int t = 0; t < n_tok; t++)
            for (int64_t r = from > r0 ? from : r0; r < rows; r++)
                diff += memcmp(&yp[t * rows + r], &y[t * rows + r], sizeof(float)) != 0;
        CHECK_MSG(diff == 0, "amx packed %s %lldx%lld, %d tokens, from row %lld: %d outputs differ",
                  hm_type_name(type), (long long)rows, (long long)cols, n_tok, (long long)from,
                  diff);
    }
    /* AVX-512 VNNI: the same products and folds, so the same bits as the tile path (and within
     * the same tolerance of the reference where there is no AMX to compare with) */
    if (amx && vnni) {
        float *yv = calloc((size_t)(rows * n_tok), sizeof(float));
        hm_vnni_matmul(type, w, rb, cols, r0, rows, packed, n_tok, yv + r0, (size_t)rows, scratch);
        hm_vnni_matmul_packed(wp, rows, cols, 32 < rows ? 32 : 0, rows, packed, n_tok,
                              yp + (32 < rows ? 32 : 0), (size_t)rows, scratch);
        int diff = 0, dp = 0;
        for (int t = 0; t < n_tok; t++)
            for (int64_t r = r0; r < rows; r++) {
                diff += memcmp(&yv[t * rows + r], &y[t * rows + r], sizeof(float)) != 0;
                if (r >= 32) dp += memcmp(&yp[t * rows + r], &y[t * rows + r], sizeof(float)) != 0;
            }
        CHECK_MSG(
            diff == 0 && dp == 0,
            "vnni %s %lldx%lld, %d tokens: %d (per call) / %d (packed) outputs differ from the "
            "tile path",
            hm_type_name(type), (long long)rows, (long long)cols, n_tok, diff, dp);
        free(yv);
    }
    free(wp), free(yp);
    free(packed), free(scratch), free(y), free(yref), free(x), free(wf), free(w);
#else
    (void)type, (void)rows, (void)cols, (void)n_tok;
#endif
}

/* AMX BF16 tiles for BF16 and F16 weights against float64 sums of the exact weights times the
 * float activations: activations are rounded to bf16 (2^-9 relative), F16 weights to bf16 as
 * well; tolerance 1% of max |y| as for the int8 path. Odd shapes: rows not a multiple of 16,
 * cols not a multiple of 32, tokens not a multiple of 16, a row range inside the matrix. */
static void test_amx_bf16(uint32_t type, int64_t rows, int64_t cols, int n_tok) {
#if defined(__x86_64__)
    if (!hm_isa_supported(hm_cpu_features_get(), HM_ISA_AMX)) return;
    uint64_t rbu;
    CHECK(hm_type_row_bytes(type, (uint64_t)cols, &rbu));
    const size_t rb = (size_t)rbu;
    uint8_t *w = malloc(rb * (size_t)rows);
    float *x = malloc(sizeof(float) * (size_t)(cols * n_tok)),
          *wf = malloc(sizeof(float) * (size_t)(rows * cols));
    uint64_t s = 17 + (uint64_t)cols;
    CHECK_OK(hm_synth_fill(type, w, (uint64_t)(rows * cols), 0.0f, 0.03f, s));
    for (int64_t r = 0; r < rows; r++)
        CHECK_OK(hm_dequantize_row(type, w + (size_t)r * rb, wf + r * cols, cols));
    for (int64_t i = 0; i < cols * n_tok; i++)
        x[i] = (float)((int64_t)(hm_rng_next(&s) % 2001) - 1000) / 500.0f;
    double *yref = calloc((size_t)(rows * n_tok), sizeof(double));
    for (int64_t r = 0; r < rows; r++)
        for (int t = 0; t < n_tok; t++) {
            double acc = 0;
            for (int64_t i = 0; i < cols; i++) acc += (double)wf[r * cols + i] * x[t * cols + i];
            yref[t * rows + r] = acc;
        }
    const int64_t r0 = 5;
    float *y = calloc((size_t)(rows * n_tok), sizeof(float));
    void *packed = malloc(hm_amx_bf16_act_bytes(cols, n_tok)),
         *scr = malloc(hm_amx_bf16_scratch_bytes(cols));
    const int tg = (n_tok + 31) / 32 * 2;
    hm_amx_bf16_pack_act(x, (size_t)cols, NULL, n_tok, cols, packed, 0, 1);
    hm_amx_bf16_pack_act(x, (size_t)cols, NULL, n_tok, cols, packed, 1, tg);
    hm_amx_bf16_matmul(type, w, rb, cols, r0, rows, packed, n_tok, y + r0, (size_t)rows, scr);
    double ymax = 1e-9, emax = 0;
    int bad = 0;
    for (int64_t k = 0; k < rows * n_tok; k++) ymax = fmax(ymax, fabs(yref[k]));
    for (int t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < rows; r++) {
            const double want = r < r0 ? 0.0 : yref[t * rows + r], e = fabs(y[t * rows + r] - want);
            emax = e > emax || e != e ? e : emax;                              /* NaN-sticky */
            bad += !(e <= 1e-2 * ymax) || (r < r0 && y[t * rows + r] != 0.0f); /* NaN too */
        }
    CHECK_MSG(bad == 0, "amx bf16 tiles, %s %lldx%lld, %d tokens: %d off (max err %.3g of %.3g)",
              hm_type_name(type), (long long)rows, (long long)cols, n_tok, bad, emax, ymax);
    free(w), free(x), free(wf), free(yref), free(y), free(packed), free(scr);
#else
    (void)type, (void)rows, (void)cols, (void)n_tok;
#endif
}

/* axpy of every variant equals plain C, for lengths around the vector widths */
static void test_axpy(void) {
    const hm_cpu_features *f = hm_cpu_features_get();
    for (int isa = 0; isa < HM_ISA_COUNT; isa++) {
        const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
        if (!ops || !hm_isa_supported(f, (hm_isa)isa)) continue;
        CHECK_MSG(ops->axpy_f32 != NULL, "%s has no axpy", ops->name);
        if (!ops->axpy_f32) continue;
        for (int64_t n = 0; n <= 70; n++) {
            float x[71], y[72], want[72];
            for (int64_t i = 0; i < 72; i++) {
                if (i < 71) x[i] = (float)(i * 7 % 13) - 6.0f;
                y[i] = want[i] = (float)(i % 5) * 0.25f;
            }
            for (int64_t i = 0; i < n; i++) want[i] += 0.375f * x[i];
            ops->axpy_f32(n, 0.375f, x, y);
            CHECK_MSG(!memcmp(y, want, sizeof y), "%s axpy n=%lld", ops->name, (long long)n);
        }
        /* x in 16 bits: halves and BF16 of the same small values (exact in both) */
        CHECK_MSG(ops->axpy_h != NULL, "%s has no 16-bit axpy", ops->name);
        if (!ops->axpy_h) continue;
        for (int bf = 0; bf < 2; bf++)
            for (int64_t n = 0; n <= 70; n++) {
                uint16_t x[71];
                float y[72], want[72];
                for (int64_t i = 0; i < 72; i++) {
                    const float v = (float)(i * 7 % 13) - 6.0f + (i % 3) * 0.5f;
                    if (i < 71) x[i] = bf ? hm_f32_to_bf16(v) : hm_f32_to_f16(v);
                    y[i] = want[i] = (float)(i % 5) * 0.25f;
                }
                for (int64_t i = 0; i < n; i++)
                    want[i] += -1.625f * (bf ? hm_bf16_to_f32(x[i]) : hm_f16_to_f32(x[i]));
                ops->axpy_h(n, -1.625f, x, bf, y);
                CHECK_MSG(!memcmp(y, want, sizeof y), "%s 16-bit axpy (%s) n=%lld", ops->name,
                          bf ? "bf16" : "f16", (long long)n);
            }
        /* the transposed product: plain C's bits for widths around every block size */
        CHECK_MSG(ops->gemv_t_h != NULL, "%s has no transposed 16-bit product", ops->name);
        if (!ops->gemv_t_h) continue;
        static const int64_t widths[] = {1,  7,   8,   9,   16,  17,  63,  64,
                                         65, 127, 128, 129, 200, 512, 4104};
        uint64_t sd = 11;
        for (int bf = 0; bf < 2; bf++)
            for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++)
                for (int64_t rows = 1; rows <= 130; rows += 43) {
                    const int64_t cols = widths[wi];
                    uint16_t *w = malloc(sizeof(uint16_t) * (size_t)(rows * cols));
                    float *x = malloc(sizeof(float) * (size_t)rows),
                          *y = malloc(sizeof(float) * (size_t)(cols + 1)),
                          *want = malloc(sizeof(float) * (size_t)(cols + 1));
                    for (int64_t i = 0; i < rows * cols; i++) {
                        const float v = (float)((int64_t)(hm_rng_next(&sd) % 2001) - 1000) / 97.0f;
                        w[i] = bf ? hm_f32_to_bf16(v) : hm_f32_to_f16(v);
                    }
                    for (int64_t r = 0; r < rows; r++)
                        x[r] = (float)((int64_t)(hm_rng_next(&sd) % 2001) - 1000) / 89.0f;
                    y[cols] = want[cols] = 42.0f; /* past the end: untouched */
                    hm_ops_ref.gemv_t_h(rows, cols, x, w, bf, want);
                    ops->gemv_t_h(rows, cols, x, w, bf, y);
                    CHECK_MSG(!memcmp(y, want, sizeof(float) * (size_t)(cols + 1)),
                              "%s transposed 16-bit product (%s) %lldx%lld", ops->name,
                              bf ? "bf16" : "f16", (long long)rows, (long long)cols);
                    free(w), free(x), free(y), free(want);
                }
    }
}

/* hm_amx_quant_row against its definition, value by value: per 256-value group d = max |x| / 127
 * (0 for an all-zero group), codes rint(x * (1 / d)) (float multiply, nearest even), zero padding
 * up to a multiple of 64, then the ngrp scales. Full groups take the register-resident quantizer,
 * a short last group the masked one: both must give exactly these codes. */
static void test_amx_quant_row(void) {
#if defined(__x86_64__)
    if (!hm_isa_supported(hm_cpu_features_get(), HM_ISA_AVX512)) return;
    const int64_t cols_list[] = {2048, 1408, 300, 64, 256};
    for (size_t ci = 0; ci < sizeof cols_list / sizeof *cols_list; ci++) {
        const int64_t cols = cols_list[ci], kp = (cols + 63) / 64 * 64, ng = (cols + 255) / 256;
        float *x = malloc(sizeof(float) * (size_t)cols);
        uint8_t *q = aligned_alloc(64, hm_amx_qrow_bytes(cols));
        uint64_t s = 5 + (uint64_t)ci;
        for (int rep = 0; rep < 4; rep++) {
            for (int64_t i = 0; i < cols; i++) { /* rep 1: one group all zero; 3: outliers */
                const float v = (float)((int64_t)(hm_rng_next(&s) % 20001) - 10000) / 997.0f;
                x[i] = rep == 1 && i < 256 ? 0.0f : rep == 3 && i % 97 == 0 ? v * 300.0f : v;
            }
            memset(q, 0x5a, hm_amx_qrow_bytes(cols));
            hm_amx_quant_row(x, cols, q);
            int bad = 0;
            for (int64_t g = 0; g < ng; g++) {
                float mx = 0.0f;
                for (int64_t i = g * 256; i < cols && i < (g + 1) * 256; i++)
                    mx = fabsf(x[i]) > mx ? fabsf(x[i]) : mx;
                const float d = mx / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                float got;
                memcpy(&got, q + kp + 4 * g, 4);
                bad += memcmp(&got, &d, 4) != 0;
                for (int64_t i = g * 256; i < kp && i < (g + 1) * 256; i++) {
                    const int want = i < cols ? (int)nearbyintf(x[i] * id) : 0;
                    bad += (int8_t)q[i] != want;
                }
            }
            CHECK_MSG(bad == 0, "quant_row %lld cols, rep %d: %d codes or scales differ",
                      (long long)cols, rep, bad);
        }
        free(x), free(q);
    }
#endif
}

/* silu(g) * u of every variant against double precision, over the whole float range the
 * exponential clamps (and past it), for lengths around the vector widths */
static void test_silu(void) {
    const hm_cpu_features *f = hm_cpu_features_get();
    enum { N = 203 };
    float g[N], u[N], y[N];
    for (int isa = 0; isa < HM_ISA_COUNT; isa++) {
        const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
        if (!ops || !hm_isa_supported(f, (hm_isa)isa)) continue;
        CHECK_MSG(ops->silu_mul_f32 != NULL, "%s has no silu_mul", ops->name);
        if (!ops->silu_mul_f32) continue;
        for (int rep = 0; rep < 50; rep++) {
            const int n = rep < 40 ? rep : N;
            for (int i = 0; i < n; i++) {
                g[i] = y[i] =
                    (float)((i * 37 + rep * 101) % 2001 - 1000) * (rep % 3 ? 0.01f : 0.1f);
                u[i] = 0.5f + (float)(i % 7) * 0.25f;
            }
            if (rep == 45) g[0] = y[0] = -1000.0f, g[1] = y[1] = 1000.0f, g[2] = y[2] = 0.0f;
            ops->silu_mul_f32(n, y, u);
            int bad = 0;
            for (int i = 0; i < n; i++) {
                const double x = g[i], want = x / (1.0 + exp(-x)) * u[i];
                bad += !(fabs(y[i] - want) <= 1e-6 * fabs(want) + 1e-30); /* tiny: clamped */
            }
            CHECK_MSG(bad == 0, "%s silu_mul n=%d: %d values off", ops->name, n, bad);
            /* softmax numerators: e^(x - max) and their sum */
            if (!ops->expsum_f32) continue;
            float m = -1e30f;
            for (int i = 0; i < n; i++) m = g[i] > m ? g[i] : m;
            memcpy(y, g, sizeof(float) * (size_t)n);
            const float z = ops->expsum_f32(n, y, m);
            double zr = 0;
            bad = 0;
            for (int i = 0; i < n; i++) {
                const double e = exp((double)(g[i] - m)); /* the argument as float computes it */
                zr += e;
                bad += !(fabs(y[i] - e) <= 1e-6 * e + 1e-30);
            }
            CHECK_MSG(bad == 0 && fabs(z - zr) <= 1e-5 * zr + 1e-30,
                      "%s expsum n=%d: %d values off, sum %.9g vs %.9g", ops->name, n, bad, z, zr);
        }
    }
}

/* row maxima (exact: every variant equals the plain loop, NaNs skipped, -FLT_MAX floor) and
 * scaling (one multiply each: exact) of every variant, for lengths around the vector widths */
/* Every variant with a peak loop names what it runs for each kind (the benchmark prints it), and
 * the loop counts the operations it was asked for (2 per multiply-add, a whole number per
 * iteration) */
static void test_peak_ops(void) {
    const hm_cpu_features *f = hm_cpu_features_get();
    for (int isa = 0; isa < HM_ISA_COUNT; isa++) {
        const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
        if (!ops || !hm_isa_supported(f, (hm_isa)isa) || !ops->peak_ops) continue;
        for (int k = HM_PEAK_I8; k <= HM_PEAK_F32; k++) {
            CHECK_MSG(ops->peak_names[k] && ops->peak_names[k][0], "%s: peak kind %d unnamed",
                      ops->name, k);
            const double one = ops->peak_ops((hm_peak_kind)k, 1000),
                         two = ops->peak_ops((hm_peak_kind)k, 2000);
            CHECK_MSG(one > 0 && two == 2 * one, "%s: peak kind %d counts %g then %g", ops->name, k,
                      one, two);
        }
    }
}

static void test_max_scale(void) {
    const hm_cpu_features *f = hm_cpu_features_get();
    enum { N = 300 };
    float x[N + 1], y[N + 1];
    for (int isa = 0; isa < HM_ISA_COUNT; isa++) {
        const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
        if (!ops || !hm_isa_supported(f, (hm_isa)isa)) continue;
        CHECK_MSG(ops->max_f32 && ops->scale_f32, "%s has no max_f32 / scale_f32", ops->name);
        if (!ops->max_f32 || !ops->scale_f32) continue;
        for (int rep = 0; rep < 60; rep++) {
            const int n = rep < 40 ? rep : N - rep;
            for (int i = 0; i <= n; i++) x[i] = (float)((i * 53 + rep * 17) % 997 - 600) * 0.37f;
            if (n > 0 && rep % 5 == 1) x[n - 1] = 5000.0f;           /* the max in the tail */
            if (n > 3 && rep % 5 == 2) x[rep % 3 ? 2 : n - 1] = NAN; /* propagates */
            if (n > 0 && rep % 5 == 3)                               /* all -inf: -FLT_MAX */
                for (int i = 0; i < n; i++) x[i] = -INFINITY;
            x[n] = 1e30f; /* past the end: must not be read as part of the row */
            float want = -FLT_MAX;
            for (int i = 0; i < n; i++) want = x[i] > want ? x[i] : want;
            for (int i = 0; i < n; i++)
                if (isnan(x[i])) want = NAN;
            const float got = ops->max_f32(n, x);
            CHECK_MSG(memcmp(&got, &want, sizeof got) == 0, "%s max_f32 n=%d: %.9g, want %.9g",
                      ops->name, n, got, want);
            memcpy(y, x, sizeof(float) * (size_t)(n + 1));
            ops->scale_f32(n, 0.3f, y);
            int bad = y[n] != x[n];
            for (int i = 0; i < n; i++) {
                const float w = x[i] * 0.3f;
                bad += memcmp(&y[i], &w, sizeof w) != 0 && !(isnan(y[i]) && isnan(w));
            }
            CHECK_MSG(bad == 0, "%s scale_f32 n=%d: %d values off", ops->name, n, bad);
        }
    }
}

/* IEEE half <-> float of every variant against the plain-C conversions (which the SIMD variants,
 * through the CPU's own F16C conversions, check in turn), and the branch-free scalar widening
 * against the plain one: every half; floats sampled over all
 * bit patterns (NaN, inf, overflow, subnormal results) plus exact ties; lengths 0-40 and the
 * element past the end left alone */
static void test_f16_convert(void) {
    const hm_cpu_features *f = hm_cpu_features_get();
    enum { NH = 65536, NF = 1 << 16 };
    static uint16_t h[NH], hr[NF + 1], hg[NF + 1];
    static float x[NF + 1], y[NH + 1], yr[NH];
    for (int i = 0; i < NH; i++) h[i] = (uint16_t)i;
    hm_ops_ref.f16_to_f32(NH, h, yr);
    int nb = 0; /* the branch-free scalar form (mla.c): the same bits, NaN payloads too */
    for (int i = 0; i < NH; i++) {
        const float a = hm_f16_to_f32_branchless(h[i]), r = hm_f16_to_f32(h[i]);
        nb += memcmp(&a, &r, sizeof a) != 0;
    }
    CHECK_MSG(nb == 0, "hm_f16_to_f32_branchless: %d of 65536 halves off", nb);
    for (int i = 0; i < NF; i++) {
        uint32_t b = (uint32_t)i * 65521u + 12345u; /* spread over all 2^32 patterns */
        if (i % 4 == 1) /* a tie: the 13 bits below the half's last one are 1000000000000 */
            b = (b & 0xffffe000u) | 0x1000u;
        if (i % 4 == 2) /* half-range exponents, rounding into subnormal halves and overflow */
            b = (b & 0x807fffffu) | (uint32_t)(100 + i % 48) << 23;
        memcpy(&x[i], &b, sizeof b);
    }
    hm_ops_ref.f32_to_f16(NF, x, hr);
    for (int isa = 0; isa < HM_ISA_COUNT; isa++) {
        const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
        if (!ops || !hm_isa_supported(f, (hm_isa)isa)) continue;
        CHECK_MSG(ops->f16_to_f32 && ops->f32_to_f16, "%s has no f16 conversions", ops->name);
        if (!ops->f16_to_f32 || !ops->f32_to_f16) continue;
        y[NH] = 7.0f;
        ops->f16_to_f32(NH, h, y);
        int bad = y[NH] != 7.0f;
        for (int i = 0; i < NH; i++)
            bad += memcmp(&y[i], &yr[i], sizeof y[i]) != 0 && !(isnan(y[i]) && isnan(yr[i]));
        CHECK_MSG(bad == 0, "%s f16_to_f32: %d of 65536 halves off", ops->name, bad);
        hg[NF] = 0x1234;
        ops->f32_to_f16(NF, x, hg);
        bad = hg[NF] != 0x1234;
        int first = -1;
        for (int i = 0; i < NF; i++) {
            const bool nan = (hg[i] & 0x7c00) == 0x7c00 && (hg[i] & 0x3ff) &&
                             (hr[i] & 0x7c00) == 0x7c00 && (hr[i] & 0x3ff);
            if (hg[i] != hr[i] && !nan) bad++, first = first < 0 ? i : first;
        }
        CHECK_MSG(bad == 0, "%s f32_to_f16: %d of %d values off (first %.9g: 0x%04x, want 0x%04x)",
                  ops->name, bad, NF, first >= 0 ? x[first] : 0.0, first >= 0 ? hg[first] : 0,
                  first >= 0 ? hr[first] : 0);
        for (int n = 0; n <= 40; n++) { /* tails: exactly n written */
            float yt[48];
            uint16_t ht[48];
            for (int i = 0; i < 48; i++) yt[i] = -1.0f, ht[i] = 0xffff;
            ops->f16_to_f32(n, h + 15360, yt); /* 1.0 onwards */
            ops->f32_to_f16(n, yr + 15360, ht);
            int off = 0;
            for (int i = 0; i < 48; i++) {
                off += i < n ? yt[i] != yr[15360 + i] : yt[i] != -1.0f;
                off += i < n ? ht[i] != h[15360 + i] : ht[i] != 0xffff;
            }
            CHECK_MSG(off == 0, "%s f16 conversions of %d values: %d off", ops->name, n, off);
        }
    }
}

static uint32_t act_type_x4(uint32_t weight_type) {
    return weight_type == HM_TYPE_Q8_0   ? HM_TYPE_Q8_0X4
           : weight_type == HM_TYPE_Q4_K ? HM_TYPE_Q8_KX
                                         : hm_act_type_for(NULL, weight_type);
}

/* The Q8_0X4 and Q8_KX activations (blocks.h) read back from first principles: every code and
 * scale of the reference Q8_0 blocks where the layout puts them, for rows whose last group has
 * 0-3 blocks; the reference Q8_K row followed by its scaled 32-value sums; and every variant that
 * converts some weight type's activations its own way has its own kernels for that type (the
 * reference ones read the plain layout). */
static void test_act_layouts(const float *x) {
    const hm_cpu_ops x4 = {.name = "x4", .act_type = act_type_x4};
    enum { NMAX = 4096 }; /* x's length */
    static hm_block_q8_0 want[NMAX / 32];
    static _Alignas(64) uint8_t got[NMAX / 32 * 36 + NMAX / 256 * 324 + 8];
    const int64_t ns[] = {32, 64, 96, 128, 160, 224, 4064, 4096};
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
        const int64_t n = ns[c], nb = n / 32;
        hm_quantize_row_q8_0_ref(x, want, n);
        CHECK(hm_act_bytes_for(&x4, HM_TYPE_Q8_0, n) == (size_t)nb * 36);
        memset(got, 0xA5, sizeof got);
        CHECK_OK(hm_act_convert_for(&x4, HM_TYPE_Q8_0, x, got, n));
        CHECK_MSG(got[nb * 36] == 0xA5, "q8_0x4 %lld: wrote past its row", (long long)n);
        int bad = 0;
        for (int64_t b = 0; b < nb; b++) {
            const int64_t g = b / 4, k = nb - 4 * g < 4 ? nb - 4 * g : 4, q = b % 4;
            const uint8_t *grp = got + 144 * g;
            const bool lone = q == k - 1 && k % 2 == 1;
            for (int j = 0; j < 32; j++) {
                const int pos = lone ? 64 * (int)(q / 2) + j
                                     : 64 * (int)(q / 2) + 8 * (j / 4) + 4 * (int)(q % 2) + j % 4;
                bad += grp[pos] != (uint8_t)(want[b].qs[j] + 128);
            }
            const float d = hm_f16_to_f32(want[b].d);
            bad += memcmp(grp + 32 * k + 4 * q, &d, sizeof d) != 0;
        }
        CHECK_MSG(bad == 0, "q8_0x4 %lld values: %d codes or scales misplaced", (long long)n, bad);
    }
    CHECK_STATUS(hm_act_convert_for(&x4, HM_TYPE_Q8_0, x, got, 40), HM_ERR_INVALID_ARG);
    static hm_block_q8_K kwant[NMAX / 256];
    for (int64_t n = 256; n <= NMAX; n *= 4) {
        const int64_t nb = n / 256;
        hm_quantize_row_q8_K_ref(x, kwant, n);
        CHECK(hm_act_bytes_for(&x4, HM_TYPE_Q4_K, n) == (size_t)nb * 324);
        memset(got, 0xA5, sizeof got);
        CHECK_OK(hm_act_convert_for(&x4, HM_TYPE_Q4_K, x, got, n));
        CHECK_MSG(!memcmp(got, kwant, sizeof(hm_block_q8_K) * (size_t)nb),
                  "q8_kx %lld: not the Q8_K blocks first", (long long)n);
        int bad = got[nb * 324] != 0xA5;
        for (int64_t i = 0; i < nb; i++)
            for (int j = 0; j < 8; j++) {
                const float s =
                    kwant[i].d * (float)(kwant[i].bsums[2 * j] + kwant[i].bsums[2 * j + 1]);
                bad += memcmp(got + nb * 292 + 4 * (8 * i + j), &s, sizeof s) != 0;
            }
        CHECK_MSG(bad == 0, "q8_kx %lld values: %d sums wrong or a write past the row",
                  (long long)n, bad);
    }
    for (int isa = 0; isa < HM_ISA_COUNT; isa++) {
        const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
        for (uint32_t t = 0; ops && t < HM_TYPE_COUNT; t++)
            if (hm_act_type_for(ops, t) != hm_act_type_for(&hm_ops_ref, t))
                CHECK_MSG(ops->vec_dot[t] && ops->vec_dot_n[t],
                          "%s converts %s activations its own way but lacks kernels", ops->name,
                          hm_type_name(t));
    }
}

/* The activation quantizers of every variant equal the reference bit for bit: random rows of
 * several magnitudes, a zero block, ties of +max and -max (the first one's sign wins in Q8_K),
 * values on rounding ties, huge and subnormal values, an inf and a NaN */
static void test_act_quant(void) {
    const hm_cpu_features *f = hm_cpu_features_get();
    enum { N = 4096 };
    static float x[N];
    static _Alignas(64) uint8_t want[N * 2], got[N * 2 + 64];
    uint64_t s = 99;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const float u = (float)(s >> 40) / (float)(1ull << 24) * 2.0f - 1.0f;
        x[i] = u * (i < 1024 ? 1.0f : i < 2048 ? 3e4f : i < 3072 ? 1e-3f : 1e-39f);
    }
    for (int i = 256; i < 512; i++) x[i] = 0.0f;  /* a zero Q8_K block (and 8 zero Q8_0 blocks) */
    x[600] = 2.0f, x[601] = -2.0f, x[610] = 2.0f; /* ties of |max| within one block */
    x[800] = -2.0f, x[805] = 2.0f;
    for (int i = 1088; i < 1120; i++) x[i] = (float)(i - 1104) + 0.5f; /* x.5 codes */
    x[1087] = 127.0f;
    x[1120 + 3] = 3e38f, x[1120 + 4] = -3e38f;
    x[2100] = INFINITY;
    x[2400] = NAN;
    x[3500] = -FLT_MIN / 4; /* subnormal */
    const struct {
        uint32_t wt;
        const char *name;
    } kinds[] = {{HM_TYPE_Q8_0, "q8_0"}, {HM_TYPE_Q4_K, "q8_K"}};
    for (size_t k = 0; k < 2; k++) {
        const size_t bytes = hm_act_bytes_for(&hm_ops_ref, kinds[k].wt, N);
        if (kinds[k].wt == HM_TYPE_Q8_0)
            hm_quantize_row_q8_0_ref(x, want, N);
        else
            hm_quantize_row_q8_K_ref(x, want, N);
        for (int isa = 0; isa < HM_ISA_COUNT; isa++) {
            const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
            if (!ops || !hm_isa_supported(f, (hm_isa)isa)) continue;
            void (*fn)(const float *, void *, int64_t) =
                kinds[k].wt == HM_TYPE_Q8_0 ? ops->quant_q8_0 : ops->quant_q8_K;
            CHECK_MSG(fn != NULL, "%s has no %s quantizer", ops->name, kinds[k].name);
            if (!fn) continue;
            memset(got, 0xA5, sizeof got);
            fn(x, got + 4, N); /* not vector aligned (blocks need 4-byte alignment at most) */
            size_t first = bytes;
            for (size_t b = 0; b < bytes && first == bytes; b++)
                if (got[4 + b] != want[b]) first = b;
            CHECK_MSG(first == bytes, "%s %s: byte %zu of %zu differs (0x%02x, want 0x%02x)",
                      ops->name, kinds[k].name, first, bytes, first < bytes ? got[4 + first] : 0,
                      first < bytes ? want[first] : 0);
            CHECK_MSG(got[3] == 0xA5 && got[4 + bytes] == 0xA5, "%s %s wrote outside its row",
                      ops->name, kinds[k].name);
        }
    }
    test_act_layouts(x);
    /* the tie rule itself: Q8_K's scale takes the sign of the first value of largest magnitude */
    hm_block_q8_K b;
    hm_quantize_row_q8_K_ref(x + 512, &b, 256);
    CHECK_MSG(b.qs[600 - 512] == -127 && b.qs[601 - 512] == 127, "q8_K tie: %d %d", b.qs[600 - 512],
              b.qs[601 - 512]);
}

/* RMSNorm of every variant against the reference (the sum of squares is double in both, summed
 * in other orders: within a few float roundings), with and without weights, in place */
static void test_rmsnorm(void) {
    const hm_cpu_features *f = hm_cpu_features_get();
    enum { N = 2049 };
    static float x[N], w[N], y[N], r[N];
    const int64_t ns[] = {1, 7, 8, 31, 32, 33, 128, 2048, 2049};
    for (int i = 0; i < N; i++)
        x[i] = (float)((i * 71) % 1999 - 1000) * 0.013f, w[i] = 0.5f + (float)(i % 9) * 0.125f;
    for (int isa = 0; isa < HM_ISA_COUNT; isa++) {
        const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
        if (!ops || !hm_isa_supported(f, (hm_isa)isa) || !ops->rmsnorm_f32) continue;
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
            for (int wi = 0; wi < 2; wi++) {
                const int64_t n = ns[k];
                hm_ops_ref.rmsnorm_f32(n, x, wi ? w : NULL, r, 1e-6f);
                ops->rmsnorm_f32(n, x, wi ? w : NULL, y, 1e-6f);
                int bad = 0;
                for (int64_t i = 0; i < n; i++) bad += !(fabsf(y[i] - r[i]) <= 3e-7f * fabsf(r[i]));
                float z[N];
                memcpy(z, x, sizeof(float) * (size_t)n);
                ops->rmsnorm_f32(n, z, wi ? w : NULL, z, 1e-6f); /* in place */
                bad += memcmp(z, y, sizeof(float) * (size_t)n) != 0;
                CHECK_MSG(bad == 0, "%s rmsnorm n=%lld%s: %d values off", ops->name, (long long)n,
                          wi ? " (weighted)" : "", bad);
            }
    }
}

/* attention block kernels of every variant against plain double sums: qk over transposed keys
 * and over key rows (odd counts of queries and keys, strides wider than the rows), pv with the
 * value rows' stride wider than the values summed (MLA's rotary tails) */
static void test_attn_blocks(void) {
    const hm_cpu_features *f = hm_cpu_features_get();
    const int hds[] = {8, 64, 72, 128, 200, 576};
    for (int isa = 0; isa < HM_ISA_COUNT; isa++) {
        const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
        if (!ops || !hm_isa_supported(f, (hm_isa)isa)) continue;
        CHECK_MSG(ops->qk_block16 && ops->pv_block16 && ops->qk_rows16,
                  "%s has no attention blocks", ops->name);
        if (!ops->qk_block16 || !ops->pv_block16 || !ops->qk_rows16) continue;
        for (size_t h = 0; h < sizeof hds / sizeof *hds; h++)
            for (int nq = 1; nq <= 17; nq += 4) {
                const int hd = hds[h], vs = hd + 5, qs = hd + 3;
                float *q = malloc(sizeof(float) * (size_t)nq * qs),
                      *kt = malloc(sizeof(float) * 16 * (size_t)hd);
                float *v = malloc(sizeof(float) * 16 * (size_t)vs),
                      *o = malloc(sizeof(float) * (size_t)nq * (hd + 3));
                float s[17 * 20], p[17 * 17];
                for (int i = 0; i < nq * qs; i++) q[i] = (float)((i * 7) % 11) * 0.125f - 0.5f;
                for (int i = 0; i < 16 * hd; i++) kt[i] = (float)((i * 5) % 13) * 0.0625f - 0.25f;
                for (int i = 0; i < 16 * vs; i++) v[i] = (float)((i * 3) % 7) * 0.25f - 0.75f;
                for (int i = 0; i < nq * 17; i++) p[i] = (float)((i * 9) % 17) / 16.0f;
                for (int i = 0; i < nq * (hd + 3); i++) o[i] = (float)(i % 3);
                /* qk_block16 reads q_i at i hd: the first nq rows of hd */
                ops->qk_block16(q, nq, hd, kt, 0.5f, s, 20);
                ops->pv_block16(p, 17, nq, v, (size_t)vs, hd, o, (size_t)hd + 3);
                int bad = 0;
                for (int i = 0; i < nq; i++) {
                    for (int j = 0; j < 16; j++) {
                        double e = 0;
                        for (int d = 0; d < hd; d++) e += (double)q[i * hd + d] * kt[d * 16 + j];
                        bad += fabs(s[i * 20 + j] - 0.5 * e) > 1e-4;
                    }
                    for (int d = 0; d < hd; d++) {
                        double e = (double)((i * (hd + 3) + d) % 3);
                        for (int j = 0; j < 16; j++) e += (double)p[i * 17 + j] * v[j * vs + d];
                        bad += fabs(o[i * (hd + 3) + d] - e) > 1e-4;
                    }
                }
                CHECK_MSG(bad == 0, "%s attention blocks hd %d nq %d: %d values off", ops->name, hd,
                          nq, bad);
                /* qk_rows16: keys in rows of stride vs, queries of stride qs, 1..16 keys */
                for (int nk = 1; nk <= 16; nk += 5) {
                    for (int i = 0; i < 17 * 20; i++) s[i] = -7.0f;
                    ops->qk_rows16(q, (size_t)qs, nq, v, (size_t)vs, nk, hd, 0.25f, s, 20);
                    bad = 0;
                    for (int i = 0; i < 17; i++)
                        for (int j = 0; j < 20; j++) {
                            if (i >= nq || j >= nk) { /* nothing written past the block */
                                bad += s[i * 20 + j] != -7.0f;
                                continue;
                            }
                            double e = 0, a = 0;
                            for (int d = 0; d < hd; d++) {
                                e += (double)q[i * qs + d] * v[j * vs + d];
                                a += fabs((double)q[i * qs + d] * v[j * vs + d]);
                            }
                            bad += fabs(s[i * 20 + j] - 0.25 * e) > 1e-6 * a + 1e-6;
                        }
                    CHECK_MSG(bad == 0, "%s qk_rows16 hd %d nq %d nk %d: %d values off", ops->name,
                              hd, nq, nk, bad);
                }
                free(q), free(kt), free(v), free(o);
            }
    }
}

/* hm_nn_matmul_multi (matrices sharing the activations: q, k, v) equals one hm_nn_matmul per
 * matrix bit for bit, on every path (per-row dots at 3 tokens; int8 or BF16 tiles at 40 where the
 * CPU has them), with row counts that are not multiples of the tile height; and the per-matrix
 * results are within the path's tolerance of a float64 reference. */
/* The in-job epilogue: every group once, and when it runs its rows hold the final results (the
 * same as a plain matmul's) for every token; groups the row blocks do not tile, rows that are not
 * whole groups and more than 4 tokens take the after-the-job path, with the same calls. */
typedef struct {
    const float *want[3];
    float *const *y;
    const size_t *ys;
    int n, group_rows;
    atomic_int calls[3][64];
    atomic_int stale;
} ep_check;

static void ep_check_fn(void *arg, int m, int g) {
    ep_check *e = arg;
    atomic_fetch_add(&e->calls[m][g], 1);
    for (int t = 0; t < e->n; t++)
        for (int r = g * e->group_rows; r < (g + 1) * e->group_rows; r++)
            if (memcmp(&e->y[m][(size_t)t * e->ys[m] + (size_t)r],
                       &e->want[m][(size_t)t * e->ys[m] + (size_t)r], sizeof(float)))
                atomic_fetch_add(&e->stale, 1);
}

static void test_nn_epilogue(void) {
    hm_pool_params pp = hm_pool_default_params();
    pp.n_threads = 4, pp.pin = false;
    hm_pool *pool = NULL;
    CHECK_OK(hm_pool_create(&pp, &pool));
    if (!pool) return;
    const int64_t rows[3] = {512, 128, 128}, cols = 256;
    uint64_t rb;
    CHECK(hm_type_row_bytes(HM_TYPE_Q8_0, (uint64_t)cols, &rb));
    hm_matrix w[3];
    uint8_t *data[3];
    float *want[3], *y[3];
    size_t ys[3];
    float *x = malloc(sizeof(float) * 8 * (size_t)cols);
    uint64_t s = 5;
    for (int64_t i = 0; i < 8 * cols; i++)
        x[i] = (float)((int64_t)(hm_rng_next(&s) % 2001) - 1000) / 1000.0f;
    size_t sb = 0;
    for (int m = 0; m < 3; m++) {
        data[m] = malloc(rb * (size_t)rows[m]);
        CHECK_OK(hm_synth_fill(HM_TYPE_Q8_0, data[m], (uint64_t)(rows[m] * cols), 0.0f, 0.05f,
                               71 + (uint64_t)m));
        CHECK_OK(hm_matrix_init(&w[m], HM_TYPE_Q8_0, data[m], rows[m], cols));
        ys[m] = (size_t)rows[m];
        want[m] = calloc(8 * ys[m], sizeof(float));
        y[m] = calloc(8 * ys[m], sizeof(float));
        const size_t b = hm_nn_matmul_scratch_bytes(&w[m], 8, 4, HM_NN_NO_AMX);
        sb = b > sb ? b : sb;
    }
    void *scr = malloc(sb + 64);
    const hm_matrix *wp[3] = {&w[0], &w[1], &w[2]};
    const int groups[] = {128, 64, 24, 512};
    for (int gi = 0; gi < 4; gi++)
        for (int n = 1; n <= 5; n += 2) {
            for (int m = 0; m < 3; m++) {
                hm_nn_matmul(pool, &w[m], x, (size_t)cols, n, want[m], ys[m], scr, HM_NN_NO_AMX);
                memset(y[m], 0, 8 * ys[m] * sizeof(float));
            }
            static ep_check e;
            memset(&e, 0, sizeof e);
            for (int m = 0; m < 3; m++) e.want[m] = want[m];
            e.y = y, e.ys = ys, e.n = n, e.group_rows = groups[gi];
            const hm_nn_epilogue ep = {groups[gi], ep_check_fn, &e};
            hm_nn_matmul_multi_ep(pool, wp, 3, x, (size_t)cols, n, y, ys, scr, HM_NN_NO_AMX, &ep);
            int bad = 0;
            for (int m = 0; m < 3; m++)
                for (int g = 0; g < 64; g++)
                    bad += atomic_load(&e.calls[m][g]) != (g < rows[m] / groups[gi] ? 1 : 0);
            CHECK_MSG(bad == 0 && atomic_load(&e.stale) == 0,
                      "epilogue of %d rows, %d tokens: %d groups called wrongly, %d values not "
                      "final when their group ran",
                      groups[gi], n, bad, atomic_load(&e.stale));
        }
    for (int m = 0; m < 3; m++) free(data[m]), free(want[m]), free(y[m]);
    free(x), free(scr);
    hm_pool_free(pool);
}

/* hm_nn_repack refuses what it cannot do, with the reason */
static void test_nn_repack_errors(void) {
    hm_pool_params pp = hm_pool_default_params();
    pp.n_threads = 2, pp.pin = false;
    hm_pool *pool = NULL;
    CHECK_OK(hm_pool_create(&pp, &pool));
    if (!pool) return;
    float fw[64 * 32];
    for (int i = 0; i < 64 * 32; i++) fw[i] = (float)i;
    hm_matrix m;
    CHECK_OK(hm_matrix_init(&m, HM_TYPE_F32, fw, 32, 64));
    CHECK(m.wpack == NULL);
    CHECK(hm_nn_repack_bytes(&m) == 0); /* float weights keep the exact kernels */
    CHECK_STATUS(hm_nn_repack(pool, &m, fw), HM_ERR_UNSUPPORTED);
    CHECK_CONTAINS(hm_last_error(), "F32");
    uint8_t q[34 * 2 * 32];
    CHECK_OK(hm_synth_fill(HM_TYPE_Q8_0, q, 64 * 32, 0.0f, 0.05f, 3));
    CHECK_OK(hm_matrix_init(&m, HM_TYPE_Q8_0, q, 32, 64));
    const size_t b = hm_nn_repack_bytes(&m);
    if (b) { /* a machine with an int8 prompt path */
        uint8_t *dst = hm_malloc_aligned(b + 64, 64, "test");
        CHECK_STATUS(hm_nn_repack(pool, &m, dst + 1), HM_ERR_INVALID_ARG);
        CHECK_CONTAINS(hm_last_error(), "aligned");
        CHECK(m.wpack == NULL);
        CHECK_OK(hm_nn_repack(pool, &m, dst));
        CHECK(m.wpack == dst);
        hm_free(dst);
    } else {
        CHECK_STATUS(hm_nn_repack(pool, &m, q), HM_ERR_UNSUPPORTED);
    }
    hm_pool_free(pool);
}

static void test_nn_matmul_multi(void) {
    hm_pool_params pp = hm_pool_default_params();
    pp.n_threads = 3, pp.pin = false;
    hm_pool *pool = NULL, *pool1 = NULL;
    CHECK_OK(hm_pool_create(&pp, &pool));
    pp.n_threads = 1; /* 8 units on one thread: the tile paths' claims of 2 units */
    CHECK_OK(hm_pool_create(&pp, &pool1));
    if (!pool || !pool1) return;
    const uint32_t types[] = {HM_TYPE_Q8_0, HM_TYPE_Q4_K, HM_TYPE_BF16, HM_TYPE_F32};
    const int64_t rows[3] = {100, 33, 64}, cols = 256;
    const unsigned flag_sets[] = {0, HM_NN_BF16_TILES, HM_NN_NO_AMX};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t type = types[ti];
        uint64_t rb;
        CHECK(hm_type_row_bytes(type, (uint64_t)cols, &rb));
        hm_matrix w[3];
        uint8_t *data[3];
        for (int m = 0; m < 3; m++) {
            data[m] = malloc(rb * (size_t)rows[m]);
            CHECK_OK(hm_synth_fill(type, data[m], (uint64_t)(rows[m] * cols), 0.0f, 0.05f,
                                   31 + (uint64_t)m));
            CHECK_OK(hm_matrix_init(&w[m], type, data[m], rows[m], cols));
        }
        const hm_matrix *wp[3] = {&w[0], &w[1], &w[2]};
        for (int ni = 0; ni < 4; ni++) {
            const int n = ni == 0 ? 1 : ni == 1 ? 2 : ni == 2 ? 3 : 40;
            const int nx = n > 3 ? n : 3; /* 1-2 tokens are also checked against 3 */
            float *x = malloc(sizeof(float) * (size_t)(nx * cols));
            uint64_t s = 9 + (uint64_t)n;
            for (int64_t i = 0; i < nx * cols; i++)
                x[i] = (float)((int64_t)(hm_rng_next(&s) % 2001) - 1000) / 1000.0f;
            for (size_t fi = 0; fi < sizeof flag_sets / sizeof flag_sets[0]; fi++) {
                const unsigned fl = flag_sets[fi];
                size_t sb = 0;
                for (int m = 0; m < 3; m++) {
                    const size_t b = hm_nn_matmul_scratch_bytes(&w[m], n, 3, fl);
                    sb = b > sb ? b : sb;
                }
                void *scr = malloc(sb + 64);
                float *y1[3], *y2[3];
                size_t ys[3];
                for (int m = 0; m < 3; m++) {
                    ys[m] = (size_t)rows[m] + 3; /* a row stride wider than the rows */
                    y1[m] = calloc((size_t)n * ys[m], sizeof(float));
                    y2[m] = calloc((size_t)n * ys[m], sizeof(float));
                    hm_nn_matmul(pool, &w[m], x, (size_t)cols, n, y1[m], ys[m], scr, fl);
                }
                hm_nn_matmul_multi(pool, wp, 3, x, (size_t)cols, n, y2, ys, scr, fl);
                { /* one thread: the same bits (rows do not depend on how they are shared) */
                    float *y4[3];
                    for (int m = 0; m < 3; m++) y4[m] = calloc((size_t)n * ys[m], sizeof(float));
                    hm_nn_matmul_multi(pool1, wp, 3, x, (size_t)cols, n, y4, ys, scr, fl);
                    for (int m = 0; m < 3; m++) {
                        CHECK_MSG(!memcmp(y4[m], y2[m], sizeof(float) * (size_t)n * ys[m]),
                                  "%s, %d tokens, flags %u, matrix %d: 1 thread differs from 3",
                                  hm_type_name(type), n, fl, m);
                        free(y4[m]);
                    }
                }
                if (n > 32 && fi == 0 && ti == 0) { /* a scratch sized for a batch serves every
                                                     * smaller one, token blocks or not */
                    setenv("HMOE_TILE_TOKENS", "64", 1);
                    size_t prev = 0;
                    int bad = 0;
                    for (int k = 1; k <= 700; k++) {
                        const size_t b = hm_nn_matmul_scratch_bytes(&w[0], k, 3, 0);
                        bad += b < prev;
                        prev = b;
                    }
                    unsetenv("HMOE_TILE_TOKENS");
                    CHECK_MSG(bad == 0, "matmul scratch shrinks as tokens grow (%d times)", bad);
                }
                if (n > 32) { /* token blocks (forced to 32: 40 = 32 + 8), each packed on its
                               * own: the same bits */
                    setenv("HMOE_TILE_TOKENS", "32", 1);
                    size_t sb6 = 0;
                    for (int m = 0; m < 3; m++) {
                        const size_t b = hm_nn_matmul_scratch_bytes(&w[m], n, 3, fl);
                        sb6 = b > sb6 ? b : sb6;
                    }
                    void *scr6 = malloc(sb6 + 64);
                    float *y6[3];
                    for (int m = 0; m < 3; m++) y6[m] = calloc((size_t)n * ys[m], sizeof(float));
                    hm_nn_matmul_multi(pool, wp, 3, x, (size_t)cols, n, y6, ys, scr6, fl);
                    unsetenv("HMOE_TILE_TOKENS");
                    for (int m = 0; m < 3; m++) {
                        CHECK_MSG(!memcmp(y6[m], y2[m], sizeof(float) * (size_t)n * ys[m]),
                                  "%s, %d tokens, flags %u, matrix %d: token blocks differ",
                                  hm_type_name(type), n, fl, m);
                        free(y6[m]);
                    }
                    free(scr6);
                }
                if (fl == 0 && hm_nn_repack_bytes(&w[0])) {
                    /* repacked once (hm_nn_repack): the same bits as the per-call conversion */
                    hm_matrix wr[3];
                    void *pk[3];
                    const hm_matrix *wrp[3] = {&wr[0], &wr[1], &wr[2]};
                    float *y5[3];
                    for (int m = 0; m < 3; m++) {
                        wr[m] = w[m];
                        pk[m] = hm_malloc_aligned(hm_nn_repack_bytes(&w[m]), 64, "test");
                        CHECK_OK(hm_nn_repack(pool, &wr[m], pk[m]));
                        CHECK(wr[m].wpack == pk[m]);
                        y5[m] = calloc((size_t)n * ys[m], sizeof(float));
                    }
                    hm_nn_matmul_multi(pool, wrp, 3, x, (size_t)cols, n, y5, ys, scr, fl);
                    for (int m = 0; m < 3; m++) {
                        CHECK_MSG(!memcmp(y5[m], y2[m], sizeof(float) * (size_t)n * ys[m]),
                                  "%s, %d tokens, matrix %d: repacked differs from per call",
                                  hm_type_name(type), n, m);
                        free(y5[m]), hm_free(pk[m]);
                    }
                }
                if (n < 3) { /* 1-2 tokens (activations converted before the job): each token
                              * equals its result in a batch of 3, bit for bit */
                    for (int m = 0; m < 3; m++) {
                        const size_t nb = hm_nn_matmul_scratch_bytes(&w[m], 3, 3, fl);
                        void *s3 = malloc(nb + 64);
                        float *y3 = calloc((size_t)3 * ys[m], sizeof(float));
                        hm_nn_matmul(pool, &w[m], x, (size_t)cols, 3, y3, ys[m], s3, fl);
                        CHECK_MSG(!memcmp(y3, y2[m], sizeof(float) * (size_t)n * ys[m]),
                                  "%s, %d tokens, matrix %d: differs from the same tokens in a "
                                  "batch of 3",
                                  hm_type_name(type), n, m);
                        free(y3), free(s3);
                    }
                }
                for (int m = 0; m < 3; m++) {
                    CHECK_MSG(!memcmp(y1[m], y2[m], sizeof(float) * (size_t)n * ys[m]),
                              "%s, %d tokens, flags %u, matrix %d: multi differs from single",
                              hm_type_name(type), n, fl, m);
                    /* against float64 (tiles re-quantize to int8 / round to bf16) */
                    double *wr = malloc(sizeof(double) * (size_t)cols), worst = 0, big = 0;
                    for (int64_t r = 0; r < rows[m]; r++) {
                        deq_row(type, data[m] + (size_t)r * rb, wr, cols);
                        for (int t = 0; t < n; t++) {
                            double want = 0;
                            for (int64_t i = 0; i < cols; i++) want += wr[i] * x[t * cols + i];
                            const double e = fabs(y2[m][(size_t)t * ys[m] + (size_t)r] - want);
                            worst = e > worst || isnan(e) ? e : worst;
                            big = fabs(want) > big ? fabs(want) : big;
                        }
                    }
                    CHECK_MSG(worst <= 2e-2 * big,
                              "%s, %d tokens, flags %u, matrix %d: error %g of %g",
                              hm_type_name(type), n, fl, m, worst, big);
                    free(wr);
                    free(y1[m]), free(y2[m]);
                }
                free(scr);
            }
            free(x);
        }
        for (int m = 0; m < 3; m++) free(data[m]);
    }
    hm_pool_free(pool);
    hm_pool_free(pool1);
}

/* Decode's idle prefetch: over all workers and steps, every byte of the next matmul's matrices
 * is covered exactly once, each worker's bytes lie in the rows of its own share of the units
 * (row blocks split as the matmul splits them: contiguous and in order), and more than 4 tokens
 * (not the per-row kernels) get nothing. */
static void test_nn_prefetch(void) {
    const int64_t rows[3] = {4096, 512, 40}, cols = 2048;
    size_t total = 0, off[3];
    for (int m = 0; m < 3; m++) off[m] = total, total += (size_t)rows[m] * 2176; /* Q8_0 rows */
    uint8_t *buf = malloc(total), *seen = malloc(total);
    hm_matrix w[3];
    hm_nn_prefetch p = {.nw = 3};
    for (int m = 0; m < 3; m++) {
        CHECK_OK(hm_matrix_init(&w[m], HM_TYPE_Q8_0, buf + off[m], rows[m], cols));
        p.w[m] = &w[m];
    }
    const int nths[] = {1, 3, 16};
    for (int a = 0; a < 3; a++)
        for (int nt = 1; nt <= 5; nt++) {
            const int nth = nths[a];
            p.n_tok = nt;
            memset(seen, 0, total);
            int bad = 0;
            size_t last_end = 0;
            for (int ith = 0; ith < nth; ith++)
                for (int step = 0;; step++) {
                    const void *ptr;
                    size_t len;
                    if (!hm_nn_prefetch_step(&p, ith, nth, step, &ptr, &len)) break;
                    const size_t o = (size_t)((const uint8_t *)ptr - buf);
                    bad += o < last_end || len == 0 || len > 2048 || o + len > total;
                    last_end = o + len; /* workers' shares follow each other in order */
                    for (size_t b = o; b < o + len && b < total; b++) seen[b]++;
                }
            size_t once = 0;
            for (size_t b = 0; b < total; b++) once += seen[b] == 1;
            if (nt > 4)
                CHECK_MSG(once == 0 && bad == 0, "%d tokens: %zu bytes prefetched", nt, once);
            else
                CHECK_MSG(once == total && bad == 0,
                          "%d workers, %d tokens: %zu of %zu bytes covered once, %d bad steps", nth,
                          nt, once, total, bad);
        }
    free(buf);
    free(seen);
}

/* The per-call tile conversion's dequantizers (AVX-512) equal the reference ones bit for bit, for
 * every weight type, on rows of several blocks. */
static void test_amx_dequant(void) {
#if defined(__x86_64__)
    if (!hm_isa_supported(hm_cpu_features_get(), HM_ISA_AVX512)) return;
    for (uint32_t t = 0; t < HM_TYPE_COUNT; t++) {
        const hm_type_info *ti = hm_type_get(t);
        if (!ti || !hm_synth_supported(t)) continue;
        const int64_t cols =
            ti->block >= 256 ? 3 * (int64_t)ti->block : 96 * (int64_t)ti->block / 32;
        uint64_t rb;
        if (!hm_type_row_bytes(t, (uint64_t)cols, &rb)) continue;
        uint8_t *w = malloc(rb);
        float *a = malloc(sizeof(float) * (size_t)cols), *b = malloc(sizeof(float) * (size_t)cols);
        CHECK_OK(hm_synth_fill(t, w, (uint64_t)cols, 0.0f, 0.05f, 3 + t));
        CHECK_OK(hm_dequantize_row(t, w, a, cols));
        hm_amx_dequant_row(t, w, cols, b);
        CHECK_MSG(!memcmp(a, b, sizeof(float) * (size_t)cols),
                  "%s: the tile conversion's dequantizer differs from the reference",
                  hm_type_name(t));
        free(w), free(a), free(b);
    }
#endif
}

int main(void) {
    TILES_OR_SKIP();
    test_amx_dequant();
    test_nn_prefetch();
    test_nn_epilogue();
    test_amx_swapped(HM_TYPE_Q8_0, 45, 96, 5);
    test_amx_swapped(HM_TYPE_Q8_0, 70, 1408, 37);
    test_amx_swapped(HM_TYPE_Q4_K, 64, 256, 33);
    test_amx_swapped(HM_TYPE_Q4_K, 96, 768, 150);
    /* many tokens (a busy expert, a prompt's dense matmul): more token chunks per unit than L2
     * holds the activations of */
    test_amx_swapped(HM_TYPE_Q4_K, 64, 2048, 600);
    test_amx_swapped(HM_TYPE_Q8_0, 40, 768, 1300);
    test_nn_matmul_multi();
    test_nn_repack_errors();
    test_amx_quant_row();
    test_axpy();
    test_silu();
    test_max_scale();
    test_peak_ops();
    test_f16_convert();
    test_act_quant();
    test_rmsnorm();
    test_fp8_codes_all_variants();
    test_dot_n(HM_TYPE_FP8_B128, 128);
    test_dot_n(HM_TYPE_FP8_B128, 2048);
    /* float weights: 64-element steps, 16-element steps and a masked tail */
    const int64_t float_cols[] = {2048, 100, 7, 16, 65};
    for (size_t i = 0; i < sizeof float_cols / sizeof float_cols[0]; i++) {
        test_dot_n(HM_TYPE_F32, float_cols[i]);
        test_dot_n(HM_TYPE_BF16, float_cols[i]);
        test_dot_n(HM_TYPE_F16, float_cols[i]);
    }
    /* the 4 x 6 kernels: every split of the steps (64 / 16 values on AVX-512, 16 / 8 on AVX2,
     * masked and scalar tails) */
    const int64_t c46[] = {1, 7, 8, 15, 16, 17, 24, 31, 63, 64, 65, 100, 255, 256, 300, 2049};
    for (size_t i = 0; i < sizeof c46 / sizeof c46[0]; i++) {
        test_dot46(HM_TYPE_F32, c46[i]);
        test_dot46(HM_TYPE_BF16, c46[i]);
        test_dot46(HM_TYPE_F16, c46[i]);
    }
    for (int ty = 0; ty < 2; ty++) {
        const uint32_t t = ty ? HM_TYPE_F16 : HM_TYPE_BF16;
        test_amx_bf16(t, 45, 96, 5);
        test_amx_bf16(t, 64, 2048, 37);
        test_amx_bf16(t, 33, 72, 70);
        test_amx_bf16(t, 70, 200, 16);
    }
    /* FP8_B128 on the same tiles: each value times its block scale, rounded to bf16 */
    {
        test_amx_bf16(HM_TYPE_FP8_B128, 45, 128, 5);
        test_amx_bf16(HM_TYPE_FP8_B128, 64, 2048, 37);
        test_amx_bf16(HM_TYPE_FP8_B128, 70, 384, 16);
    }
    test_attn_blocks();
    test_mxfp4_exponents();
    const uint32_t i8_types[] = {HM_TYPE_Q8_0, HM_TYPE_Q4_0,   HM_TYPE_Q4_1,  HM_TYPE_Q5_0,
                                 HM_TYPE_Q5_1, HM_TYPE_IQ4_NL, HM_TYPE_MXFP4, HM_TYPE_Q4_K,
                                 HM_TYPE_Q5_K, HM_TYPE_IQ4_XS, HM_TYPE_Q2_K,  HM_TYPE_Q3_K,
                                 HM_TYPE_Q6_K};
    const int amx_tok[] = {1, 5, 16, 37};
    for (size_t k = 0; k < sizeof i8_types / sizeof *i8_types; k++) {
        const uint32_t ty = i8_types[k];
        const int64_t c1 = hm_i8_block(ty) == 16 || ty == HM_TYPE_Q4_K || ty == HM_TYPE_Q5_K ||
                                   ty == HM_TYPE_IQ4_XS
                               ? 256
                               : 96;
        test_i8_split(ty, c1);
        test_i8_split(ty, 2304);
        for (size_t i = 0; i < 4; i++) test_amx_type(ty, 45, c1 == 256 ? 768 : 96, amx_tok[i]);
        test_amx_type(ty, 64, 2304, 37);
        if (ty == HM_TYPE_Q4_K || ty == HM_TYPE_Q8_0) /* more token pairs than one pass takes */
            test_amx_type(ty, 70, 512, 150);
    }
    CHECK(hm_i8_block(HM_TYPE_BF16) == 0 && hm_i8_block(HM_TYPE_Q8_K) == 0);
    /* FP8_B128 through the int8 tiles too (any format with a dequantizer) */
    for (size_t i = 1; i < 4; i++) test_amx_type(HM_TYPE_FP8_B128, 45, 256, amx_tok[i]);
    test_amx_type(HM_TYPE_FP8_B128, 64, 2304, 37);
    const int64_t q4k_cols[] = {256, 512, 768, 2048, 2304};
    const int64_t q8_cols[] = {32, 64, 96, 768, 2048, 2080};
    const int64_t bf_cols[] = {8, 15, 16, 33, 768, 2048, 2049};
    for (size_t i = 0; i < sizeof q4k_cols / sizeof *q4k_cols; i++) {
        test_type(HM_TYPE_Q4_K, q4k_cols[i], 37, 0);
        test_dot_n(HM_TYPE_Q4_K, q4k_cols[i]);
    }
    for (size_t i = 0; i < 4; i++) test_dot_n(HM_TYPE_Q6_K, q4k_cols[i]);
    for (size_t i = 0; i < 4; i++) test_dot_n(HM_TYPE_IQ4_XS, q4k_cols[i]);
    for (size_t i = 0; i < 4; i++) test_dot_n(HM_TYPE_Q5_K, q4k_cols[i]);
    for (size_t i = 0; i < 4; i++) test_dot_n(HM_TYPE_Q2_K, q4k_cols[i]);
    for (size_t i = 0; i < 4; i++) test_dot_n(HM_TYPE_Q3_K, q4k_cols[i]);
    /* 32-blocks: four per step and a tail of 0-3 (AVX-512 multi-token kernels) */
    const uint32_t b32_types[] = {HM_TYPE_IQ4_NL, HM_TYPE_MXFP4, HM_TYPE_Q4_0,
                                  HM_TYPE_Q5_0,   HM_TYPE_Q4_1,  HM_TYPE_Q5_1};
    const int64_t b32_dot_cols[] = {32, 96, 128, 224, 2048, 2080};
    for (size_t k = 0; k < 6; k++)
        for (size_t i = 0; i < 6; i++) test_dot_n(b32_types[k], b32_dot_cols[i]);
    for (size_t i = 0; i < sizeof q8_cols / sizeof *q8_cols; i++) {
        test_type(HM_TYPE_Q8_0, q8_cols[i], 37, 2);
        test_dot_n(HM_TYPE_Q8_0, q8_cols[i]);
    }
    for (size_t i = 0; i < sizeof bf_cols / sizeof *bf_cols; i++) {
        test_type(HM_TYPE_BF16, bf_cols[i], 19, 2);
        test_type(HM_TYPE_F16, bf_cols[i], 19, 2);
        test_type(HM_TYPE_F32, bf_cols[i], 19, (int)(i % 2) * 4); /* tails of 16 / 64 lanes */
    }
    /* every other format runs on every variant (reference dot where a variant has no kernel) */
    const uint32_t others[] = {HM_TYPE_Q4_0,   HM_TYPE_Q4_1,   HM_TYPE_Q5_0,  HM_TYPE_Q5_1,
                               HM_TYPE_Q2_K,   HM_TYPE_Q3_K,   HM_TYPE_Q5_K,  HM_TYPE_Q6_K,
                               HM_TYPE_IQ4_NL, HM_TYPE_IQ4_XS, HM_TYPE_MXFP4, HM_TYPE_F16,
                               HM_TYPE_F32};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        const hm_type_info *ti = hm_type_get(others[i]);
        test_type(others[i], ti->block == 256 ? 512 : 96, 11, others[i] == HM_TYPE_F32 ? 0 : 2);
    }
    /* the other SIMD kernels: more shapes, odd and even block counts (AVX-512 pairs 32-blocks) */
    const int64_t k_cols[] = {256, 768, 2304};
    const int64_t b32_cols[] = {32, 64, 2080}, b128_cols[] = {128, 384, 2048};
    for (size_t i = 3; i < sizeof simd_types / sizeof *simd_types; i++) {
        const uint32_t bl = hm_type_get(simd_types[i])->block;
        const int64_t *cs = bl == 256 ? k_cols : bl == 128 ? b128_cols : b32_cols;
        /* unaligned rows, as far as the block's scale allows (FP8_B128's is a float) */
        const int step = simd_types[i] == HM_TYPE_FP8_B128 ? 4 : 2;
        for (size_t j = 0; j < 3; j++)
            test_type(simd_types[i], cs[j], 13, (int)(step * (int)(j % 2)));
    }
    /* types we cannot compute open fine but are named when used */
    CHECK_OK(hm_kernel_check(HM_TYPE_Q4_K, "blk.0.ffn_up_exps.weight"));
    CHECK_STATUS(hm_kernel_check(HM_TYPE_IQ2_XXS, "blk.3.ffn_down_exps.weight"),
                 HM_ERR_UNSUPPORTED);
    CHECK_CONTAINS(hm_last_error(), "tensor 'blk.3.ffn_down_exps.weight' has type IQ2_XXS");
    CHECK_CONTAINS(hm_last_error(), "Q4_K");
    /* bad shapes are refused with the reason */
    hm_matrix m;
    CHECK_STATUS(hm_matrix_init(&m, HM_TYPE_Q4_K, NULL, 4, 100), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "100 of Q4_K");
    float x[40];
    uint8_t out[64];
    CHECK_STATUS(hm_act_convert(HM_TYPE_Q8_0, x, out, 40), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "Q8_0");
    return test_done("kernels");
}
