/* test_quant.c - reference (de)quantization: quantize -> dequantize error bounds per type, the FP8
 * E4M3 conversions exhaustively (all 256 codes, every rounding tie, saturation, NaN), FP8 tile and
 * channel scales, and argument errors. Bit-exactness against the gguf package is checked by
 * tests/quant_python.py through the modes below:
 *   --list                 the types we dequantize / quantize, one line each
 *   --dequant TYPE IN OUT  raw blocks -> float32
 *   --quant TYPE IN OUT    float32 -> raw blocks
 *   --fp8-decode OUT       the 256 codes as float32
 *   --fp8-encode IN OUT    float32 -> one code byte each */
#include <float.h>
#include <math.h>

#include "quant/ref.h"
#include "quant/synth.h"
#include "quant/types.h"
#include "test.h"

/* Relative RMSE (rmse / std) bounds on N(0, 1) data, about 15% above what the quantizers reach;
 * a bound that fails means a quantizer got worse, not noise (the data is fixed by the seed). */
#define TOL_Q8_0   0.0061
#define TOL_Q4_0   0.097
#define TOL_Q4_1   0.089
#define TOL_Q5_0   0.049
#define TOL_Q5_1   0.043
#define TOL_Q4_K   0.079
#define TOL_Q5_K   0.039
#define TOL_Q6_K   0.0193
#define TOL_IQ4_NL 0.084
#define TOL_IQ4_XS 0.084

#define N_ROUNDTRIP (64 * HM_QK_K)

static float gauss(uint64_t *s) { /* Box-Muller, deterministic */
    const double u1 = ((double)(hm_rng_next(s) >> 11) + 1.0) / 9007199254740993.0;
    const double u2 = (double)(hm_rng_next(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

static size_t row_bytes(uint32_t type, int64_t n) {
    uint64_t b = 0;
    return hm_type_row_bytes(type, (uint64_t)n, &b) ? (size_t)b : 0;
}

/* ---- quantize -> dequantize ---- */

static double roundtrip_rel_rmse(uint32_t type, const float *x, int64_t n) {
    void *q = xmalloc(row_bytes(type, n));
    float *y = xmalloc((size_t)n * sizeof(float));
    CHECK_OK(hm_quantize_row(type, x, q, n));
    CHECK_OK(hm_dequantize_row(type, q, y, n));
    double se = 0, sx = 0;
    for (int64_t i = 0; i < n; i++) se += (double)(y[i] - x[i]) * (y[i] - x[i]), sx += x[i] * x[i];
    free(q);
    free(y);
    return sqrt(se / (sx > 0 ? sx : 1));
}

static void test_roundtrip(void) {
    static const struct {
        uint32_t type;
        double tol;
    } cases[] = {{HM_TYPE_Q8_0, TOL_Q8_0},     {HM_TYPE_Q4_0, TOL_Q4_0},
                 {HM_TYPE_Q4_1, TOL_Q4_1},     {HM_TYPE_Q5_0, TOL_Q5_0},
                 {HM_TYPE_Q5_1, TOL_Q5_1},     {HM_TYPE_Q4_K, TOL_Q4_K},
                 {HM_TYPE_Q5_K, TOL_Q5_K},     {HM_TYPE_Q6_K, TOL_Q6_K},
                 {HM_TYPE_IQ4_NL, TOL_IQ4_NL}, {HM_TYPE_IQ4_XS, TOL_IQ4_XS}};
    float *x = xmalloc(N_ROUNDTRIP * sizeof(float));
    uint64_t seed = 42;
    for (int i = 0; i < N_ROUNDTRIP; i++) x[i] = gauss(&seed);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const double r = roundtrip_rel_rmse(cases[c].type, x, N_ROUNDTRIP);
        printf("  %-7s relative rmse %.5f (bound %.4f)\n", hm_type_name(cases[c].type), r,
               cases[c].tol);
        CHECK_MSG(r <= cases[c].tol, "%s: relative rmse %.5f > %.4f", hm_type_name(cases[c].type),
                  r, cases[c].tol);
        /* scale invariance within f16 range: the same data x 1000 and / 1000 */
        for (int i = 0; i < N_ROUNDTRIP; i++) x[i] *= 1000.0f;
        const double big = roundtrip_rel_rmse(cases[c].type, x, N_ROUNDTRIP);
        for (int i = 0; i < N_ROUNDTRIP; i++) x[i] /= 1000.0f;
        CHECK_MSG(big <= cases[c].tol * 1.02, "%s x1000: relative rmse %.5f",
                  hm_type_name(cases[c].type), big);
    }
    free(x);
}

/* Zeros stay zeros, constants stay close, and the typed entry points equal the generic one. */
static void test_special_rows(void) {
    for (uint32_t t = 0; t < HM_TYPE_COUNT; t++) {
        if (!hm_quantize_supported(t)) continue;
        const int64_t n = 2 * HM_QK_K;
        float *x = xmalloc(n * sizeof(float)), *y = xmalloc(n * sizeof(float));
        void *q = xmalloc(row_bytes(t, n));
        memset(x, 0, n * sizeof(float));
        CHECK_OK(hm_quantize_row(t, x, q, n));
        CHECK_OK(hm_dequantize_row(t, q, y, n));
        int nonzero = 0;
        for (int64_t i = 0; i < n; i++) nonzero += y[i] != 0;
        CHECK_MSG(nonzero == 0, "%s: zeros dequantize to %d non-zeros", hm_type_name(t), nonzero);
        for (int64_t i = 0; i < n; i++) x[i] = i < n / 2 ? 0.75f : -3.0f;
        CHECK_OK(hm_quantize_row(t, x, q, n));
        CHECK_OK(hm_dequantize_row(t, q, y, n));
        double worst = 0;
        for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(y[i] - x[i]) / fabs(x[i]));
        /* constant blocks: only the f16 scale and the coarsest code step limit the error */
        CHECK_MSG(worst < 0.02, "%s: constant rows off by %.4f", hm_type_name(t), worst);
        free(x);
        free(y);
        free(q);
    }
}

/* Hand-made blocks with known values (layout and formula, independent of our quantizers). */
static void test_known_blocks(void) {
    hm_block_q8_0 b8 = {.d = hm_f32_to_f16(0.5f)};
    for (int j = 0; j < 32; j++) b8.qs[j] = (int8_t)(j - 16);
    float y[HM_QK_K];
    hm_dequantize_row_q8_0(&b8, y, 32);
    for (int j = 0; j < 32; j++) CHECK(y[j] == 0.5f * (float)(j - 16));

    hm_block_q4_0 b4 = {.d = hm_f32_to_f16(-2.0f)};
    for (int j = 0; j < 16; j++) b4.qs[j] = (uint8_t)(j | (15 - j) << 4);
    hm_dequantize_row_q4_0(&b4, y, 32);
    for (int j = 0; j < 16; j++)
        CHECK(y[j] == -2.0f * (float)(j - 8) && y[16 + j] == -2.0f * (7 - j));

    hm_block_mxfp4 bm = {.e = 128}; /* E8M0 128 = 2^1; values = 2 * E2M1 = hm_kvalues_mxfp4 */
    for (int j = 0; j < 16; j++) bm.qs[j] = (uint8_t)(j | j << 4);
    hm_dequantize_row_mxfp4(&bm, y, 32);
    for (int j = 0; j < 16; j++) CHECK(y[j] == hm_kvalues_mxfp4[j] && y[16 + j] == y[j]);
    CHECK(hm_e8m0_to_f32_half(0) == ldexpf(1, -128) && hm_e8m0_to_f32_half(1) == ldexpf(1, -127));
    CHECK(hm_e8m0_to_f32_half(254) == ldexpf(1, 126));

    hm_block_q8_K bk = {.d = 0.25f};
    for (int j = 0; j < HM_QK_K; j++) bk.qs[j] = (int8_t)(j - 128);
    hm_dequantize_row_q8_K(&bk, y, HM_QK_K);
    for (int j = 0; j < HM_QK_K; j++) CHECK(y[j] == 0.25f * (float)(j - 128));
}

/* Ties and truncation exactly as ggml's reference quantizers (and numpy in gguf-py). */
static void test_legacy_rounding(void) {
    float x[32] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 126.5f, -1.49999994f};
    hm_block_q8_0 b8;
    hm_quantize_row_q8_0(x, &b8, 32); /* d = 1: values round half away from zero */
    CHECK(b8.d == hm_f32_to_f16(1.0f));
    CHECK(b8.qs[0] == 127 && b8.qs[1] == 3 && b8.qs[2] == -3 && b8.qs[3] == 1 && b8.qs[4] == -1);
    CHECK(b8.qs[5] == 127 && b8.qs[6] == -1);

    float z[32] = {-8.0f, 1.0f, -1.0f, 7.0f, 7.5f, -0.5f, 0.4f}; /* d = 1, code = trunc(x + 8.5) */
    hm_block_q4_0 b4;
    hm_quantize_row_q4_0(z, &b4, 32);
    CHECK(b4.d == hm_f32_to_f16(1.0f));
    const int want[7] = {0, 9, 7, 15, 15, 8, 8};
    for (int j = 0; j < 7; j++) CHECK_MSG((b4.qs[j] & 0xF) == want[j], "q4_0 code %d", j);
    float n0[32] = {0}; /* all zero: d = 0 / -8 = -0.0, as numpy and ggml compute it */
    hm_quantize_row_q4_0(n0, &b4, 32);
    CHECK(b4.d == 0x8000 && b4.qs[0] == 0x88);
}

/* ---- FP8 E4M3 ---- */

static void test_fp8_codes(void) {
    for (int c = 0; c < 256; c++) {
        const float f = hm_fp8_e4m3_to_f32((uint8_t)c);
        if ((c & 0x7f) == 0x7f) {
            CHECK_MSG(isnan(f), "code 0x%02x should be NaN", c);
            CHECK(hm_f32_to_fp8_e4m3(f) == (uint8_t)c); /* NaN keeps its sign */
            continue;
        }
        CHECK_MSG(hm_f32_to_fp8_e4m3(f) == c, "code 0x%02x -> %g -> 0x%02x", c, f,
                  hm_f32_to_fp8_e4m3(f));
        CHECK((signbit(f) != 0) == ((c & 0x80) != 0));
        if ((c & 0x7f) > 0 && (c & 0x7f) < 0x7e) { /* strictly increasing magnitudes */
            CHECK(fabsf(hm_fp8_e4m3_to_f32((uint8_t)(c + 1))) > fabsf(f));
        }
    }
    CHECK(hm_fp8_e4m3_to_f32(0x7e) == 448.0f && hm_fp8_e4m3_to_f32(0xfe) == -448.0f);
    CHECK(hm_fp8_e4m3_to_f32(0x38) == 1.0f && hm_fp8_e4m3_to_f32(0x01) == ldexpf(1, -9));
    CHECK(hm_fp8_e4m3_to_f32(0x07) == 7 * ldexpf(1, -9) &&
          hm_fp8_e4m3_to_f32(0x08) == ldexpf(1, -6));
}

/* Between each pair of neighbouring codes: the midpoint goes to the even code, one ulp either
 * side goes to the nearer one. */
static void test_fp8_ties(void) {
    for (int sign = 0; sign <= 0x80; sign += 0x80)
        for (int c = 0; c < 0x7e; c++) {
            const uint8_t lo = (uint8_t)(sign | c), hi = (uint8_t)(sign | (c + 1));
            const float a = hm_fp8_e4m3_to_f32(lo), b = hm_fp8_e4m3_to_f32(hi);
            const float mid = (a + b) / 2; /* exact: at most 5 significant bits */
            const uint8_t even = (c & 1) ? hi : lo;
            CHECK_MSG(hm_f32_to_fp8_e4m3(mid) == even, "tie %g between 0x%02x and 0x%02x", mid, lo,
                      hi);
            CHECK(hm_f32_to_fp8_e4m3(nextafterf(mid, b)) == hi);
            CHECK(hm_f32_to_fp8_e4m3(nextafterf(mid, a)) == lo);
        }
}

static void test_fp8_saturation(void) {
    const float big[] = {448.0f, 449.0f, 464.0f, 479.9f, 480.0f, 1e6f, FLT_MAX, INFINITY};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        CHECK_MSG(hm_f32_to_fp8_e4m3(big[i]) == 0x7e, "%g", big[i]);
        CHECK_MSG(hm_f32_to_fp8_e4m3(-big[i]) == 0xfe, "-%g", big[i]);
    }
    CHECK(hm_f32_to_fp8_e4m3(NAN) == 0x7f && hm_f32_to_fp8_e4m3(-NAN) == 0xff);
    CHECK(hm_f32_to_fp8_e4m3(ldexpf(1, -10)) == 0x00);    /* tie 0 / 2^-9 -> even 0 */
    CHECK(hm_f32_to_fp8_e4m3(ldexpf(1.5f, -10)) == 0x01); /* above the tie */
    CHECK(hm_f32_to_fp8_e4m3(1e-30f) == 0x00 && hm_f32_to_fp8_e4m3(-1e-30f) == 0x80);
    CHECK(hm_f32_to_fp8_e4m3(ldexpf(15, -10)) == 0x08); /* 7.5 * 2^-9 -> 2^-6 (even) */
    CHECK(hm_f32_to_fp8_e4m3(0.0f) == 0x00 && hm_f32_to_fp8_e4m3(-0.0f) == 0x80);
}

/* FP8 checkpoints (tile and channel scales) as FP8_B128 rows dequantize to exactly what the
 * checkpoint's own dequantization gives; shapes that are not whole blocks are refused. */
static void test_fp8_b128(void) {
    const int64_t rows = 300, cols = 384, nb = cols / 128;
    uint8_t *w = xmalloc(rows * cols);
    float *want = xmalloc(rows * cols * sizeof(float)), *got = xmalloc(rows * cols * sizeof(float));
    float scale[3 * 3], ch[300];
    void *b128 = xmalloc((size_t)(rows * nb) * sizeof(hm_block_fp8_b128));
    uint64_t s = 11;
    for (int64_t i = 0; i < rows * cols; i++) w[i] = (uint8_t)(hm_rng_next(&s) & 0xff);
    for (int i = 0; i < 9; i++) scale[i] = ldexpf(1.0f + (float)i / 8, 2 - i);
    for (int i = 0; i < rows; i++) ch[i] = 0.003f * (float)(i + 1);
    for (int kind = 0; kind < 2; kind++) {
        if (kind == 0) {
            CHECK_OK(hm_dequantize_fp8_tiles(w, scale, rows, cols, 128, want));
            CHECK_OK(hm_fp8_to_b128_tiles(w, scale, rows, cols, b128));
        } else {
            CHECK_OK(hm_dequantize_fp8_channel(w, ch, rows, cols, want));
            CHECK_OK(hm_fp8_to_b128_channel(w, ch, rows, cols, b128));
        }
        CHECK_OK(hm_dequantize_row(HM_TYPE_FP8_B128, b128, got, rows * cols));
        int bad = 0;
        for (int64_t i = 0; i < rows * cols; i++)
            bad +=
                memcmp(&got[i], &want[i], sizeof(float)) != 0 && !(isnan(got[i]) && isnan(want[i]));
        CHECK_MSG(bad == 0, "FP8_B128 from %s scales: %d values differ", kind ? "channel" : "tile",
                  bad);
    }
    CHECK_STATUS(hm_fp8_to_b128_tiles(w, scale, rows, 200, b128), HM_ERR_INVALID_ARG);
    CHECK_STATUS(hm_fp8_to_b128_channel(w, ch, rows, 100, b128), HM_ERR_INVALID_ARG);
    CHECK_STATUS(hm_fp8_to_b128_channel(w, ch, -1, cols, b128), HM_ERR_INVALID_ARG);
    free(w), free(want), free(got), free(b128);
}

static void test_fp8_scales(void) {
    const int64_t rows = 300, cols = 200;
    const int tile = 128, tr = 3, tc = 2;
    uint8_t *w = xmalloc(rows * cols);
    float *out = xmalloc(rows * cols * sizeof(float)), scale[3 * 2], ch[300];
    uint64_t s = 7;
    for (int64_t i = 0; i < rows * cols; i++) w[i] = (uint8_t)(hm_rng_next(&s) & 0xff);
    for (int i = 0; i < tr * tc; i++) scale[i] = ldexpf(1.0f + (float)i / 8, i - 3);
    for (int i = 0; i < rows; i++) ch[i] = 0.001f * (float)(i + 1);
    CHECK_OK(hm_dequantize_fp8_tiles(w, scale, rows, cols, tile, out));
    int bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            const float want =
                hm_fp8_e4m3_to_f32(w[r * cols + c]) * scale[(r / tile) * tc + c / tile];
            const float got = out[r * cols + c];
            bad += !(got == want || (isnan(got) && isnan(want)));
        }
    CHECK_MSG(bad == 0, "fp8 tiles: %d wrong elements", bad);
    CHECK_OK(hm_dequantize_fp8_channel(w, ch, rows, cols, out));
    bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            const float want = hm_fp8_e4m3_to_f32(w[r * cols + c]) * ch[r];
            bad += !(out[r * cols + c] == want || (isnan(want) && isnan(out[r * cols + c])));
        }
    CHECK_MSG(bad == 0, "fp8 channel: %d wrong elements", bad);
    CHECK_STATUS(hm_dequantize_fp8_tiles(w, scale, rows, cols, 0, out), HM_ERR_INVALID_ARG);
    CHECK_STATUS(hm_dequantize_fp8_tiles(w, scale, -1, cols, tile, out), HM_ERR_INVALID_ARG);
    CHECK_STATUS(hm_dequantize_fp8_channel(w, ch, rows, -5, out), HM_ERR_INVALID_ARG);
    CHECK_OK(hm_dequantize_fp8_tiles(w, scale, 0, 0, tile, out)); /* empty is fine */
    free(w);
    free(out);
}

/* ---- argument errors ---- */

static void test_errors(void) {
    float x[HM_QK_K] = {0}, y[HM_QK_K];
    uint8_t q[sizeof(hm_block_q8_K)] = {0};
    CHECK_STATUS(hm_dequantize_row(HM_TYPE_Q4_K, q, y, 100), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "Q4_K");
    CHECK_CONTAINS(hm_last_error(), "100");
    CHECK_STATUS(hm_dequantize_row(HM_TYPE_Q8_0, q, y, 33), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "Q8_0");
    CHECK_STATUS(hm_dequantize_row(HM_TYPE_Q8_0, q, y, -32), HM_ERR_INVALID_ARG);
    CHECK_STATUS(hm_dequantize_row(HM_TYPE_IQ2_XXS, q, y, 256), HM_ERR_UNSUPPORTED);
    CHECK_CONTAINS(hm_last_error(), "IQ2_XXS");
    CHECK_STATUS(hm_dequantize_row(4, q, y, 32), HM_ERR_UNSUPPORTED); /* removed Q4_2 */
    CHECK_CONTAINS(hm_last_error(), "4");
    CHECK_STATUS(hm_dequantize_row(999, q, y, 32), HM_ERR_UNSUPPORTED);
    CHECK_CONTAINS(hm_last_error(), "999");
    CHECK_OK(hm_dequantize_row(HM_TYPE_Q4_K, q, y, 0));
    CHECK_STATUS(hm_quantize_row(HM_TYPE_Q6_K, x, q, 255), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "Q6_K");
    CHECK_CONTAINS(hm_last_error(), "255");
    CHECK_STATUS(hm_quantize_row(HM_TYPE_Q8_K, x, q, 256), HM_ERR_UNSUPPORTED);
    CHECK_CONTAINS(hm_last_error(), "Q8_K");
    CHECK_STATUS(hm_quantize_row(HM_TYPE_Q2_K, x, q, 256), HM_ERR_UNSUPPORTED);
    CHECK_CONTAINS(hm_last_error(), "Q2_K");
    x[17] = NAN;
    CHECK_STATUS(hm_quantize_row(HM_TYPE_Q8_0, x, q, 32), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "value 17");
    x[17] = -INFINITY;
    CHECK_STATUS(hm_quantize_row(HM_TYPE_Q4_K, x, q, 256), HM_ERR_INVALID_ARG);
}

/* ---- modes for tests/quant_python.py ---- */

static void *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = xmalloc(len > 0 ? (size_t)len : 1);
    *n = fread(p, 1, (size_t)(len > 0 ? len : 0), f);
    fclose(f);
    return p;
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    const int ok = f && fwrite(p, 1, n, f) == n;
    if (f) fclose(f);
    return ok ? 0 : 1;
}

static int fail(const char *what) {
    fprintf(stderr, "test_quant: %s: %s\n", what, hm_last_error());
    return 1;
}

static int mode_dequant(const char *name, const char *in, const char *out) {
    const int t = hm_type_from_name(name);
    const hm_type_info *ti = hm_type_get((uint32_t)(t < 0 ? HM_TYPE_COUNT : t));
    size_t n = 0;
    void *src = read_file(in, &n);
    if (!ti || !src) return fail(!ti ? name : in);
    const int64_t elems = (int64_t)(n / ti->bytes * ti->block);
    float *dst = xmalloc((size_t)elems * sizeof(float));
    int rc = n % ti->bytes ? fail("input is not whole blocks") : 0;
    if (!rc && hm_dequantize_row((uint32_t)t, src, dst, elems)) rc = fail("dequantize");
    if (!rc) rc = write_file(out, dst, (size_t)elems * sizeof(float));
    free(src);
    free(dst);
    return rc;
}

static int mode_quant(const char *name, const char *in, const char *out) {
    const int t = hm_type_from_name(name);
    size_t n = 0;
    float *src = read_file(in, &n);
    if (t < 0 || !src) return fail(t < 0 ? name : in);
    const int64_t elems = (int64_t)(n / sizeof(float));
    const size_t bytes = row_bytes((uint32_t)t, elems);
    void *dst = xmalloc(bytes);
    int rc = hm_quantize_row((uint32_t)t, src, dst, elems) ? fail("quantize") : 0;
    if (!rc) rc = write_file(out, dst, bytes);
    free(src);
    free(dst);
    return rc;
}

static int mode_fp8(bool decode, const char *in, const char *out) {
    if (decode) {
        float v[256];
        for (int c = 0; c < 256; c++) v[c] = hm_fp8_e4m3_to_f32((uint8_t)c);
        return write_file(out, v, sizeof v);
    }
    size_t n = 0;
    float *src = read_file(in, &n);
    if (!src) return fail(in);
    n /= sizeof(float);
    uint8_t *dst = xmalloc(n);
    for (size_t i = 0; i < n; i++) dst[i] = hm_f32_to_fp8_e4m3(src[i]);
    const int rc = write_file(out, dst, n);
    free(src);
    free(dst);
    return rc;
}

static int mode_list(void) {
    printf("dequant");
    for (uint32_t t = 0; t < HM_TYPE_COUNT; t++)
        if (hm_dequantize_supported(t)) printf(" %s", hm_type_name(t));
    printf("\nquant");
    for (uint32_t t = 0; t < HM_TYPE_COUNT; t++)
        if (hm_quantize_supported(t)) printf(" %s", hm_type_name(t));
    printf("\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--list")) return mode_list();
    if (argc == 5 && !strcmp(argv[1], "--dequant")) return mode_dequant(argv[2], argv[3], argv[4]);
    if (argc == 5 && !strcmp(argv[1], "--quant")) return mode_quant(argv[2], argv[3], argv[4]);
    if (argc == 3 && !strcmp(argv[1], "--fp8-decode")) return mode_fp8(true, NULL, argv[2]);
    if (argc == 4 && !strcmp(argv[1], "--fp8-encode")) return mode_fp8(false, argv[2], argv[3]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_quant [--list | --dequant|--quant TYPE IN OUT | "
                        "--fp8-decode OUT | --fp8-encode IN OUT]\n");
        return 2;
    }
    test_known_blocks();
    test_legacy_rounding();
    test_roundtrip();
    test_special_rows();
    test_fp8_codes();
    test_fp8_ties();
    test_fp8_saturation();
    test_fp8_scales();
    test_fp8_b128();
    test_errors();
    return test_done("quant");
}
