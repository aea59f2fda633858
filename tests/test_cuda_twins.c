/* test_cuda_twins.c - the CUDA backend's twins run on the CPU. The dequantization twins
 * (src/cuda/dq.h) against the reference hm_dequantize_row, bit for bit, for every type they
 * handle: rows from the quantizers, from hm_synth_fill, from random bytes (with and without
 * finite scales), and every encoding of the scalar formats (all F16 / BF16 / FP8 codes, all
 * MXFP4 scales). The other kernels' arithmetic (src/cuda/twins.h) against the CPU backend's ops:
 * top-k routing, the NeoX rotation, RMSNorm's factor, the online softmax; the Q4_K experts'
 * integer products on Q8_K activations against the CPU's quantizer and dot product. */
#include <math.h>
#include <stddef.h>

#include "cpu/nn.h"
#include "cpu/ops.h"
#include "cuda/dq.h"
#include "cuda/twins.h"
#include "hmoe_moe.h"
#include "quant/ref.h"
#include "quant/synth.h"
#include "quant/types.h"
#include "test.h"

/* the types dq.h handles: exactly this list */
static const uint32_t g_types[] = {
    HM_TYPE_F32,  HM_TYPE_F16,    HM_TYPE_BF16,   HM_TYPE_Q4_0,  HM_TYPE_Q4_1,    HM_TYPE_Q5_0,
    HM_TYPE_Q5_1, HM_TYPE_Q8_0,   HM_TYPE_Q2_K,   HM_TYPE_Q3_K,  HM_TYPE_Q4_K,    HM_TYPE_Q5_K,
    HM_TYPE_Q6_K, HM_TYPE_IQ4_NL, HM_TYPE_IQ4_XS, HM_TYPE_MXFP4, HM_TYPE_FP8_B128};
#define N_TYPES (sizeof g_types / sizeof g_types[0])

/* Both-NaN mismatches seen (see compare_row); printed at the end. */
static long g_nan_payload_diffs;

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

static float gauss(uint64_t *s) { /* Box-Muller, deterministic */
    const double u1 = ((double)(hm_rng_next(s) >> 11) + 1.0) / 9007199254740993.0;
    const double u2 = (double)(hm_rng_next(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void rand_bytes(uint8_t *p, size_t n, uint64_t *s) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(hm_rng_next(s) >> 56);
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static bool same_bits(float a, float b) {
    return f32_bits(a) == f32_bits(b);
}

/* Dequantizes the row (n values of `type`) chunk by chunk with hm_dq32 and compares each chunk
 * with the reference's bits. A NaN against a NaN of another payload is counted, not failed: when
 * both operands of one multiply or add are NaN (random bytes: a NaN scale and a NaN min, or an
 * FP8 NaN code and a NaN scale), x86 keeps the payload of the first operand, and which one is
 * first is the compiler's choice for a commutative operation, made separately in ref.c and here.
 * Every other mismatch, a NaN against a number included, fails. */
static void compare_row(uint32_t type, const void *row, int64_t n, const char *what) {
    float *ref = xmalloc((size_t)n * sizeof(float));
    CHECK_OK(hm_dequantize_row(type, row, ref, n));
    int reported = 0;
    for (int64_t c = 0; c < n / 32; c++) {
        float out[32];
        CHECK(hm_dq32(type, row, c, out));
        if (!memcmp(out, ref + 32 * c, sizeof out)) {
            t_checks++;
            continue;
        }
        for (int l = 0; l < 32; l++) {
            const float want = ref[32 * c + l];
            if (same_bits(out[l], want)) continue;
            if (isnan(out[l]) && isnan(want)) {
                g_nan_payload_diffs++;
                continue;
            }
            if (reported++ < 4)
                CHECK_MSG(0, "%s %s: chunk %lld value %d: %.9g (0x%08x), want %.9g (0x%08x)",
                          hm_type_name(type), what, (long long)c, l, (double)out[l],
                          f32_bits(out[l]), (double)want, f32_bits(want));
            else
                t_failures++;
        }
    }
    free(ref);
}

static size_t row_bytes(uint32_t type, int64_t n) {
    uint64_t b = 0;
    CHECK(hm_type_row_bytes(type, (uint64_t)n, &b));
    return (size_t)b;
}

/* Offsets of a block's float16 scales (-1: none), or of FP8_B128's float scale. */
typedef struct {
    uint32_t type;
    int half[2];
    int f32;
} scale_fields;

static const scale_fields g_scales[] = {
    {HM_TYPE_Q4_0, {offsetof(hm_block_q4_0, d), -1}, -1},
    {HM_TYPE_Q4_1, {offsetof(hm_block_q4_1, d), offsetof(hm_block_q4_1, m)}, -1},
    {HM_TYPE_Q5_0, {offsetof(hm_block_q5_0, d), -1}, -1},
    {HM_TYPE_Q5_1, {offsetof(hm_block_q5_1, d), offsetof(hm_block_q5_1, m)}, -1},
    {HM_TYPE_Q8_0, {offsetof(hm_block_q8_0, d), -1}, -1},
    {HM_TYPE_Q2_K, {offsetof(hm_block_q2_K, d), offsetof(hm_block_q2_K, dmin)}, -1},
    {HM_TYPE_Q3_K, {offsetof(hm_block_q3_K, d), -1}, -1},
    {HM_TYPE_Q4_K, {offsetof(hm_block_q4_K, d), offsetof(hm_block_q4_K, dmin)}, -1},
    {HM_TYPE_Q5_K, {offsetof(hm_block_q5_K, d), offsetof(hm_block_q5_K, dmin)}, -1},
    {HM_TYPE_Q6_K, {offsetof(hm_block_q6_K, d), -1}, -1},
    {HM_TYPE_IQ4_NL, {offsetof(hm_block_iq4_nl, d), -1}, -1},
    {HM_TYPE_IQ4_XS, {offsetof(hm_block_iq4_xs, d), -1}, -1},
    {HM_TYPE_FP8_B128, {-1, -1}, offsetof(hm_block_fp8_b128, d)},
};

/* Random bytes with every scale made finite: a half's exponent 31 becomes 15, a float scale is
 * N(0, 1). MXFP4's E8M0 scale is finite whatever its byte; plain float types are left alone. */
static void finite_scales(uint32_t type, uint8_t *row, int64_t n, uint64_t *s) {
    const hm_type_info *ti = hm_type_get(type);
    for (size_t k = 0; k < sizeof g_scales / sizeof g_scales[0]; k++) {
        if (g_scales[k].type != type) continue;
        for (int64_t b = 0; b < n / ti->block; b++) {
            uint8_t *blk = row + (size_t)b * ti->bytes;
            for (int j = 0; j < 2; j++) {
                if (g_scales[k].half[j] < 0) continue;
                uint16_t h;
                memcpy(&h, blk + g_scales[k].half[j], 2);
                if ((h & 0x7c00) == 0x7c00) h ^= 0x4000;
                memcpy(blk + g_scales[k].half[j], &h, 2);
            }
            if (g_scales[k].f32 >= 0) {
                const float d = gauss(s);
                memcpy(blk + g_scales[k].f32, &d, 4);
            }
        }
    }
}

/* Row lengths in blocks: one, odd counts, several. */
static const int g_nblocks[] = {1, 3, 5, 8};

static void test_type(uint32_t type, uint64_t *s) {
    const hm_type_info *ti = hm_type_get(type);
    for (size_t r = 0; r < sizeof g_nblocks / sizeof g_nblocks[0]; r++) {
        const int64_t n = (int64_t)g_nblocks[r] * ti->block;
        const size_t bytes = row_bytes(type, n);
        uint8_t *row = xmalloc(bytes); /* exact size: an over-read is an ASan error */
        float *x = xmalloc((size_t)n * sizeof(float));
        char what[64];

        /* quantized N(0, std) values; the tiny std gives subnormal float16 scales, and a zero
         * block and a constant block test the degenerate scales */
        static const float stds[] = {1.0f, 3e-3f, 1e-6f, 2e3f};
        if (hm_quantize_supported(type))
            for (size_t k = 0; k < sizeof stds / sizeof stds[0]; k++) {
                for (int64_t i = 0; i < n; i++) x[i] = stds[k] * gauss(s);
                if (n >= 3 * (int64_t)ti->block) {
                    memset(x, 0, ti->block * sizeof(float));
                    for (uint32_t i = 0; i < ti->block; i++) x[ti->block + i] = stds[k];
                }
                CHECK_OK(hm_quantize_row(type, x, row, n));
                snprintf(what, sizeof what, "quantized std %g, %d blocks", (double)stds[k],
                         g_nblocks[r]);
                compare_row(type, row, n, what);
            }

        /* valid random blocks */
        CHECK_OK(hm_synth_fill(type, row, (uint64_t)n, 0.5f, 0.02f, hm_rng_next(s)));
        snprintf(what, sizeof what, "synth, %d blocks", g_nblocks[r]);
        compare_row(type, row, n, what);

        /* random bytes: as they are (NaN / inf scales and values included), then with finite
         * scales */
        for (int rep = 0; rep < 3; rep++) {
            rand_bytes(row, bytes, s);
            snprintf(what, sizeof what, "random bytes, %d blocks", g_nblocks[r]);
            compare_row(type, row, n, what);
            finite_scales(type, row, n, s);
            snprintf(what, sizeof what, "random bytes, finite scales, %d blocks", g_nblocks[r]);
            compare_row(type, row, n, what);
        }
        free(row);
        free(x);
    }
}

/* F16 and BF16: all 65536 codes in one row, also from an odd address (the host twins, like the
 * reference, read 2-byte values at any offset). */
static void test_all_16bit_codes(void) {
    const int64_t n = 65536;
    uint8_t *buf = xmalloc(2 * (size_t)n + 1);
    for (int odd = 0; odd < 2; odd++) {
        for (int64_t i = 0; i < n; i++) {
            const uint16_t h = (uint16_t)i;
            memcpy(buf + odd + 2 * i, &h, 2);
        }
        compare_row(HM_TYPE_F16, buf + odd, n, odd ? "all codes, odd address" : "all codes");
        compare_row(HM_TYPE_BF16, buf + odd, n, odd ? "all codes, odd address" : "all codes");
    }
    free(buf);

    /* F32 from an odd address, NaN payloads and signalling NaNs included: copied, not converted */
    const int64_t nf = 96;
    uint8_t *fb = xmalloc(4 * (size_t)nf + 1);
    uint64_t s = 7;
    rand_bytes(fb, 4 * (size_t)nf + 1, &s);
    const uint32_t special[] = {0x7f800001u, 0xffbfffffu, 0x7fc00000u, 0x00000001u, 0x80000000u};
    for (size_t k = 0; k < sizeof special / sizeof special[0]; k++)
        memcpy(fb + 1 + 4 * k, &special[k], 4);
    compare_row(HM_TYPE_F32, fb + 1, nf, "random bits, odd address");
    free(fb);
}

/* FP8_B128: all 256 codes (two blocks) under each of the scales: ordinary, negative, zero,
 * subnormal, huge, infinite and NaN. */
static void test_fp8_b128_codes(void) {
    static const uint32_t scale_bits[] = {0x3f800000u, 0xbe4ccccdu, 0x00000000u, 0x80000000u,
                                          0x00000003u, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
                                          0x7fc00000u, 0xffc12345u, 0x3a83126fu};
    const int nb = (int)(sizeof scale_bits / sizeof scale_bits[0]) * 2;
    const int64_t n = (int64_t)nb * HM_FP8_TILE;
    hm_block_fp8_b128 *row = xmalloc(row_bytes(HM_TYPE_FP8_B128, n));
    for (int b = 0; b < nb; b++) {
        memcpy(&row[b].d, &scale_bits[b / 2], 4);
        for (int j = 0; j < HM_FP8_TILE; j++) row[b].qs[j] = (uint8_t)(128 * (b % 2) + j);
    }
    compare_row(HM_TYPE_FP8_B128, row, n, "all codes, special scales");
    free(row);
}

/* MXFP4: every E8M0 scale (0 and 1 give subnormal floats, 255 the largest) with all 16 codes. */
static void test_mxfp4_scales(void) {
    const int64_t n = 256 * HM_QK_MXFP4;
    hm_block_mxfp4 *row = xmalloc(row_bytes(HM_TYPE_MXFP4, n));
    for (int b = 0; b < 256; b++) {
        row[b].e = (uint8_t)b;
        for (int j = 0; j < 16; j++) row[b].qs[j] = (uint8_t)(j | (15 - (j + b) % 16) << 4);
    }
    compare_row(HM_TYPE_MXFP4, row, n, "every scale");
    free(row);
}

/* The scalar helpers against theirs in quant/, every input. */
static void test_scalars(void) {
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        bad += !same_bits(hm_hd_f16_to_f32((uint16_t)i), hm_f16_to_f32((uint16_t)i));
        bad += !same_bits(hm_hd_bf16_to_f32((uint16_t)i), hm_bf16_to_f32((uint16_t)i));
    }
    for (uint32_t i = 0; i < 256; i++) {
        bad += !same_bits(hm_hd_fp8_e4m3_to_f32((uint8_t)i), hm_fp8_e4m3_to_f32((uint8_t)i));
        bad += !same_bits(hm_hd_e8m0_to_f32_half((uint8_t)i), hm_e8m0_to_f32_half((uint8_t)i));
    }
    for (int i = 0; i < 16; i++) {
        bad += hm_hd_iq4nl_value(i) != hm_kvalues_iq4nl[i];
        bad += hm_hd_mxfp4_value(i) != hm_kvalues_mxfp4[i];
    }
    CHECK_MSG(bad == 0, "%d scalar conversions differ from quant/", bad);
    CHECK(isnan(hm_hd_fp8_e4m3_to_f32(0x7f)) && isnan(hm_hd_fp8_e4m3_to_f32(0xff)));
}

/* hm_dq32_supported is exactly g_types, each of them dequantizable by the reference; others
 * (Q8_K, IQ2_XXS, ids past the table) give false and leave out alone. */
static void test_supported(void) {
    for (uint32_t t = 0; t < HM_TYPE_COUNT + 8; t++) {
        bool listed = false;
        for (size_t k = 0; k < N_TYPES; k++) listed |= g_types[k] == t;
        CHECK_MSG(hm_dq32_supported(t) == listed, "type %u (%s)", t, hm_type_name(t));
        if (listed) CHECK_MSG(hm_dequantize_supported(t), "type %s", hm_type_name(t));
    }
    static const uint32_t others[] = {HM_TYPE_Q8_K, HM_TYPE_IQ2_XXS, HM_TYPE_Q8_1, HM_TYPE_COUNT,
                                      1000,         UINT32_MAX};
    uint8_t row[512] = {0};
    for (size_t k = 0; k < sizeof others / sizeof others[0]; k++) {
        float out[32];
        for (int l = 0; l < 32; l++) out[l] = -1.0f;
        CHECK_MSG(!hm_dq32_supported(others[k]), "type %u", others[k]);
        CHECK_MSG(!hm_dq32(others[k], row, 0, out), "type %u", others[k]);
        bool untouched = true;
        for (int l = 0; l < 32; l++) untouched &= out[l] == -1.0f;
        CHECK_MSG(untouched, "type %u: out written", others[k]);
    }
}

/* The GPU router's steps (twins.h) over all n logits: each logit's place in the router's order,
 * the weights from the maximum and the double sum in index order, renormalised over the k in pick
 * order; false for k outside [1, n]. */
static bool twin_topk(const float *lg, int n, int k, bool renorm, int32_t *ids, float *w) {
    if (n < 1 || k < 1 || k > n || k > 64) return false;
    float mx = lg[0], pv[64];
    for (int i = 1; i < n; i++) mx = lg[i] > mx ? lg[i] : mx;
    double sum = 0, sel = 0;
    for (int i = 0; i < n; i++) sum += exp((double)lg[i] - mx);
    for (int j = 0; j < k; j++) ids[j] = -1, pv[j] = -INFINITY;
    for (int i = 0; i < n; i++) {
        const int r = lg[i] == lg[i] ? hm_hd_router_rank(lg, n, i) : k;
        if (r < k) ids[r] = i, pv[r] = lg[i];
    }
    for (int j = 0; j < k; j++) {
        w[j] = hm_hd_router_weight(pv[j], mx, sum);
        sel += w[j];
    }
    if (renorm)
        for (int j = 0; j < k; j++) w[j] = (float)(w[j] / sel);
    return true;
}

/* The places hm_hd_router_rank gives, against k calls of hm_hd_pick_after, with ties, infinities
 * and NaNs (never picked: the places past the last number stay -1 in both) */
static void test_router_rank(void) {
    uint64_t s = 11;
    for (int it = 0; it < 100; it++) {
        const int n = 1 + (int)(it * 53 % 200);
        float v[200];
        for (int i = 0; i < n; i++) {
            const int c = (int)(hm_rng_next(&s) % 16);
            v[i] = c == 0   ? NAN
                   : c == 1 ? INFINITY
                   : c == 2 ? -INFINITY
                   : c == 3 ? 0.5f
                            : gauss(&s);
        }
        int32_t by_rank[200], by_pick[200];
        for (int i = 0; i < n; i++) by_rank[i] = -1;
        for (int i = 0; i < n; i++)
            if (v[i] == v[i]) by_rank[hm_hd_router_rank(v, n, i)] = i;
        float pv = INFINITY;
        int pi = -1;
        for (int r = 0; r < n; r++) {
            if (r == 0 || by_pick[r - 1] >= 0) hm_hd_pick_after(v, 0, n, 1, pv, pi, &pv, &pi);
            by_pick[r] = r == 0 || by_pick[r - 1] >= 0 ? pi : -1; /* nothing left: stays so */
        }
        CHECK_MSG(memcmp(by_rank, by_pick, sizeof(int32_t) * (size_t)n) == 0, "n %d", n);
    }
}

/* twins.h against the CPU backend's own ops */
static void test_op_twins(void) {
    uint64_t s = 7;
    /* softmax top-k: hm_router_softmax_topk's ids and weights exactly (ties included) */
    for (int it = 0; it < 200; it++) {
        const int n = 1 + (int)(it * 37 % 300), k = 1 + it % (n < 9 ? n : 9);
        float lg[300], w1[9], w2[9];
        int32_t i1[9], i2[9];
        for (int i = 0; i < n; i++) lg[i] = gauss(&s) * (it % 3 ? 1.0f : 20.0f);
        if (n > 4) lg[3] = lg[1], lg[4] = lg[1]; /* ties: lower index first */
        const bool renorm = it & 1;
        CHECK(hm_router_softmax_topk(lg, n, k, renorm, i1, w1) == HM_OK);
        CHECK(twin_topk(lg, n, k, renorm, i2, w2));
        CHECK(memcmp(i1, i2, sizeof(int32_t) * (size_t)k) == 0);
        CHECK(memcmp(w1, w2, sizeof(float) * (size_t)k) == 0);
    }
    float w[4];
    int32_t ids[4];
    CHECK(!twin_topk(w, 3, 4, false, ids, w) && !twin_topk(w, 3, 0, false, ids, w));
    /* DeepSeek-V2's group-limited softmax: against a direct reading of transformers'
     * group_limited_greedy (groups ranked by their best score, the rest of the scores zeroed,
     * torch.topk's order), ties included */
    for (int it = 0; it < 200; it++) {
        const int ng = it % 3 == 0 ? 8 : it % 3 == 1 ? 16 : 1, n = ng == 16 ? 64 : 160;
        const int tg = ng == 1 ? 1 : 1 + it % 3, k = 6;
        float lg[160], gw[8];
        int32_t gid[8];
        for (int i = 0; i < n; i++) lg[i] = (float)gauss(&s) * 2;
        if (it % 5 == 0) lg[7] = lg[3]; /* a tie: the lower index first */
        const bool renorm = it & 1;
        hm_hd_router_softmax_group(lg, n, ng, tg, k, renorm, 2.5f, gid, gw);
        double p[160], mx = lg[0], sum = 0;
        for (int i = 1; i < n; i++) mx = fmax(mx, lg[i]);
        for (int i = 0; i < n; i++) sum += exp(lg[i] - mx);
        for (int i = 0; i < n; i++) p[i] = (float)(exp(lg[i] - mx) / sum);
        const int per = n / ng;
        bool keep[16] = {false};
        for (int r = 0; r < tg; r++) {
            int bg = -1;
            double bv = -1;
            for (int g = 0; g < ng; g++) {
                double gv = 0;
                for (int i = 0; i < per; i++) gv = fmax(gv, p[g * per + i]);
                if (!keep[g] && gv > bv) bv = gv, bg = g;
            }
            keep[bg] = true;
        }
        for (int i = 0; i < n; i++)
            if (!keep[i / per]) p[i] = 0;
        bool taken[160] = {false};
        double sel = 0;
        int want[8];
        for (int j = 0; j < k; j++) {
            int b = -1;
            for (int i = 0; i < n; i++)
                if (!taken[i] && (b < 0 || p[i] > p[b])) b = i;
            taken[b] = true, want[j] = b, sel += p[b];
        }
        for (int j = 0; j < k; j++) {
            CHECK_MSG(gid[j] == want[j], "softmax group router %d: pick %d is %d, want %d", it, j,
                      gid[j], want[j]);
            const double wv = (renorm ? p[want[j]] / sel : p[want[j]]) * 2.5;
            CHECK(fabs(gw[j] - wv) <= 1e-6 * wv + 1e-12);
        }
    }
    /* the sigmoid router (DeepSeek-V3, GLM-4.5): hm_router_sigmoid_group_topk's ids and weights
     * exactly, with and without groups, bias, renormalisation and scale; ties included */
    static const int shapes[][4] = {/* n, n_group, topk_group, k */
                                    {8, 1, 1, 2},   {16, 4, 2, 4},  {64, 8, 3, 6},  {256, 8, 4, 8},
                                    {160, 1, 1, 8}, {384, 1, 1, 8}, {12, 6, 6, 12}, {10, 10, 3, 3}};
    for (int it = 0; it < 400; it++) {
        const int *sh = shapes[it % 8];
        const int n = sh[0], ng = sh[1], tg = sh[2], k = sh[3];
        float lg[384], bias[384], w1[12], w2[12];
        int32_t i1[12], i2[12];
        for (int i = 0; i < n; i++) {
            lg[i] = gauss(&s) * (it % 3 ? 1.0f : 8.0f);
            bias[i] = gauss(&s) * 0.1f;
        }
        if (it % 5 == 0) /* ties of whole groups' and experts' choices */
            for (int i = 0; i < n; i++) lg[i] = (float)(i % 3), bias[i] = 0;
        const bool renorm = it & 1, with_bias = it & 2;
        const float scale = it & 4 ? 2.5f : 1.0f;
        CHECK(hm_router_sigmoid_group_topk(lg, with_bias ? bias : NULL, n, ng, tg, k, renorm, scale,
                                           i1, w1) == HM_OK);
        hm_hd_router_sigmoid(lg, with_bias ? bias : NULL, n, ng, tg, k, renorm, scale, i2, w2);
        CHECK_MSG(memcmp(i1, i2, sizeof(int32_t) * (size_t)k) == 0,
                  "sigmoid router %d (n %d, %d groups, top %d, k %d): ids differ", it, n, ng, tg,
                  k);
        CHECK(memcmp(w1, w2, sizeof(float) * (size_t)k) == 0);
    }
    /* the rotation: hm_rope_neox bit for bit */
    enum { HD = 24, RD = 16 };
    float x[HD], y[HD], cs[RD];
    for (int i = 0; i < HD; i++) x[i] = y[i] = gauss(&s);
    for (int i = 0; i < RD; i++) cs[i] = gauss(&s);
    hm_rope_neox(x, 1, HD, RD, cs);
    for (int j = 0; j < RD / 2; j++) hm_hd_rope_pair(&y[j], &y[j + RD / 2], cs[j], cs[RD / 2 + j]);
    CHECK(memcmp(x, y, sizeof x) == 0);
    /* RMSNorm's factor from a double sum of squares: hm_rmsnorm's output */
    float v[100], nw[100], o1[100];
    double ss = 0;
    for (int i = 0; i < 100; i++)
        v[i] = gauss(&s), nw[i] = 1 + gauss(&s) * 0.1f, ss += (double)v[i] * v[i];
    hm_rmsnorm(v, nw, o1, 100, 1e-6f);
    const float r = hm_hd_rms_scale(ss, 100, 1e-6f);
    int close = 0;
    for (int i = 0; i < 100; i++) close += fabsf(o1[i] - v[i] * r * nw[i]) <= 1e-6f * fabsf(o1[i]);
    CHECK(close == 100);
    /* the online softmax over chunks: the direct softmax-weighted sum */
    for (int it = 0; it < 20; it++) {
        const int n = 1 + it * 53, chunk = 1 + it % 7 * 16;
        double sc[1100], val[1100], mx = -INFINITY, den = 0, num = 0;
        for (int i = 0; i < n; i++) sc[i] = gauss(&s) * 8, val[i] = gauss(&s), mx = fmax(mx, sc[i]);
        for (int i = 0; i < n; i++) den += exp(sc[i] - mx), num += exp(sc[i] - mx) * val[i];
        hm_osm st = {-INFINITY, 0.0f};
        float acc = 0;
        for (int c0 = 0; c0 < n; c0 += chunk) {
            float cm = -INFINITY;
            for (int i = c0; i < n && i < c0 + chunk; i++)
                cm = (float)sc[i] > cm ? (float)sc[i] : cm;
            acc *= hm_osm_rescale(&st, cm);
            for (int i = c0; i < n && i < c0 + chunk; i++) {
                const float e = expf((float)sc[i] - st.m);
                st.l += e, acc += e * (float)val[i];
            }
        }
        CHECK_MSG(fabs(acc / st.l - num / den) <= 1e-5 * (1 + fabs(num / den)), "osm %d: %g vs %g",
                  n, (double)(acc / st.l), num / den);
    }
    /* a sink (gpt-oss) joins the denominator only: against a double softmax with the sink's
     * term, the sink below, among and above the scores */
    for (int it = 0; it < 30; it++) {
        const int n = 1 + it * 17;
        const float sink = (float)(it % 3 == 0 ? -20 : it % 3 == 1 ? 0 : 30) + (float)gauss(&s);
        double sc[600], val[600], mx = sink, den = 0, num = 0;
        for (int i = 0; i < n; i++) sc[i] = gauss(&s) * 8, val[i] = gauss(&s), mx = fmax(mx, sc[i]);
        den = exp((double)sink - mx);
        for (int i = 0; i < n; i++) den += exp(sc[i] - mx), num += exp(sc[i] - mx) * val[i];
        hm_osm st = {-INFINITY, 0.0f};
        float cm = -INFINITY, acc = 0;
        for (int i = 0; i < n; i++) cm = (float)sc[i] > cm ? (float)sc[i] : cm;
        (void)hm_osm_rescale(&st, cm);
        for (int i = 0; i < n; i++) {
            const float e = expf((float)sc[i] - st.m);
            st.l += e, acc += e * (float)val[i];
        }
        acc *= hm_osm_sink(&st, sink);
        CHECK_MSG(fabs(acc / st.l - num / den) <= 1e-5 * (1 + fabs(num / den)),
                  "osm with sink %g, %d scores: %g vs %g", (double)sink, n, (double)(acc / st.l),
                  num / den);
    }
    /* the GLU of each activation against its formula in double (gpt-oss: alpha 1.702, limit 7,
     * both clamps reached) */
    for (float g = -12.0f; g <= 12.0f; g += 0.173f)
        for (float u = -10.0f; u <= 10.0f; u += 1.37f) {
            const double gd = g, ud = u;
            const double r0 = gd / (1.0 + exp(-gd)) * ud;
            const double r1 = 0.5 * gd * (1.0 + erf(gd / sqrt(2.0))) * ud;
            const double gc = fmin(gd, 7.0), uc = fmax(-7.0, fmin(ud, 7.0));
            const double r2 = (uc + 1.0) * gc / (1.0 + exp(-1.702 * gc));
            const double want[3] = {r0, r1, r2};
            for (int act = 0; act < 3; act++)
                CHECK_MSG(fabs(hm_hd_glu(act, g, u, 1.702f, 7.0f) - want[act]) <=
                              2e-6 * (1.0 + fabs(want[act])),
                          "glu act %d (%g, %g): %g vs %g", act, (double)g, (double)u,
                          (double)hm_hd_glu(act, g, u, 1.702f, 7.0f), want[act]);
        }
    /* a NaN score reaches the result */
    hm_osm st = {-INFINITY, 0.0f};
    (void)hm_osm_rescale(&st, 1.0f);
    (void)hm_osm_rescale(&st, NAN);
    st.l += expf(NAN - st.m);
    CHECK(isnan(st.l));
    /* the shared expert's gate: the CPU's expression, and sigmoid's values */
    for (float sv = -30.0f; sv <= 30.0f; sv += 0.37f) {
        CHECK(hm_hd_sigmoid(sv) == 1.0f / (1.0f + expf(-sv)));
        CHECK(fabs(hm_hd_sigmoid(sv) - 1.0 / (1.0 + exp(-(double)sv))) <= 1e-6);
    }
    CHECK(hm_hd_silu_mul(0.0f, 5.0f) == 0.0f &&
          fabsf(hm_hd_silu_mul(2.0f, 3.0f) - 2.0f / (1.0f + expf(-2.0f)) * 3.0f) == 0.0f);
}

/* Q4_K rows times Q8_K activations and Q8_0 rows times Q8_0 (dq.h): hm_hd_q8k_code at a block's
 * inverse scale gives the CPU quantizer's codes; hm_hd_dp4a sums signed bytes; a row's sum in the
 * GPU's lane order (hm_hd_q4k_q8k_row) equals the CPU's dot_q4_K_ref within float rounding, on
 * quantized rows of 1..11 super-blocks and on activations with a zero block. */
static void test_q4k_q8k(void) {
    uint64_t s = 77;
    enum { NSB = 11, N = NSB * 256 };
    float *x = xmalloc(sizeof(float) * N), *wf = xmalloc(sizeof(float) * N);
    hm_block_q8_K *xq = xmalloc(sizeof(hm_block_q8_K) * NSB);
    hm_block_q4_K *w = xmalloc(sizeof(hm_block_q4_K) * NSB);
    for (int rep = 0; rep < 40; rep++) {
        for (int i = 0; i < N; i++)
            x[i] = gauss(&s) * (float)(1 + rep % 5), wf[i] = gauss(&s) * 0.02f;
        if (rep % 4 == 1)
            for (int i = 256; i < 512; i++) x[i] = 0.0f;
        hm_quantize_row_q8_K_ref(x, xq, N);
        CHECK_OK(hm_quantize_row(HM_TYPE_Q4_K, wf, w, N));
        /* the codes: the block's first value of largest magnitude maps to -127 */
        int bad = 0;
        for (int b = 0; b < NSB; b++) {
            float amax = 0, mx = 0;
            for (int j = 0; j < 256; j++)
                if (fabsf(x[256 * b + j]) > amax) amax = fabsf(x[256 * b + j]), mx = x[256 * b + j];
            const float is = amax == 0 ? 0 : -127.0f / mx;
            for (int j = 0; j < 256; j++) bad += hm_hd_q8k_code(is, x[256 * b + j]) != xq[b].qs[j];
        }
        CHECK_MSG(bad == 0, "Q8_K codes: %d differ from the CPU quantizer's", bad);
        for (int nsb = 1 + rep % NSB; nsb <= NSB; nsb += 5) {
            const double c = hm_ops_ref.vec_dot[HM_TYPE_Q4_K](256 * (int64_t)nsb, w, xq);
            const float g = hm_hd_q4k_q8k_row(w, xq, nsb);
            double a = 0; /* the size of the terms: |w| . |x| */
            for (int i = 0; i < 256 * nsb; i++) a += fabs((double)wf[i] * x[i]);
            CHECK_MSG(fabs(g - c) <= 1e-5 * a + 1e-30,
                      "Q4_K x Q8_K, %d super-blocks: %.9g against the CPU's %.9g (terms %.3g)", nsb,
                      (double)g, c, a);
        }
        /* the down kernel's flat layout (rows of 1-3 super-blocks, 1-4 rows a warp): each
         * row's sum has hm_hd_q4k_q8k_row's bits; rep 2's first row all zero weights */
        if (rep % 4 == 2) memset(w, 0, sizeof *w * 3);
        for (int nsb = 1; nsb <= 3; nsb++)
            for (int nr = 1; nr <= 4 && nr * nsb <= NSB; nr++) {
                float f[4];
                hm_hd_q4k_q8k_rows_flat(w, xq, nsb, nr, f);
                for (int r = 0; r < nr; r++) {
                    const float g = hm_hd_q4k_q8k_row(w + r * nsb, xq, nsb);
                    CHECK_MSG(memcmp(&f[r], &g, sizeof g) == 0,
                              "Q4_K x Q8_K flat, %d super-blocks, row %d of %d: %.9g against "
                              "the row's %.9g",
                              nsb, r, nr, (double)f[r], (double)g);
                }
            }
    }
    /* Q8_0 rows on Q8_0 activations: the codes at 1 / (amax / 127), the row's sum in the lanes'
     * order against dot_q8_0_ref */
    {
        enum { NB = 77 };
        hm_block_q8_0 *x8 = xmalloc(sizeof(hm_block_q8_0) * NB),
                      *w8 = xmalloc(sizeof(hm_block_q8_0) * NB);
        for (int rep = 0; rep < 20; rep++) {
            for (int i = 0; i < NB * 32; i++) x[i] = gauss(&s) * (float)(1 + rep % 3);
            if (rep % 3 == 1)
                for (int i = 64; i < 96; i++) x[i] = 0.0f;
            hm_quantize_row_q8_0_ref(x, x8, NB * 32);
            hm_quantize_row_q8_0_ref(wf, w8, NB * 32);
            int bad = 0;
            for (int b = 0; b < NB; b++) {
                float amax = 0;
                for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
                const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                for (int j = 0; j < 32; j++)
                    bad += hm_hd_q8k_code(id, x[32 * b + j]) != x8[b].qs[j];
            }
            CHECK_MSG(bad == 0, "Q8_0 codes: %d differ from the CPU quantizer's", bad);
            for (int nb = 1 + rep % 9; nb <= NB; nb += 19) {
                const double c = hm_ops_ref.vec_dot[HM_TYPE_Q8_0](32 * (int64_t)nb, w8, x8);
                const float g = hm_hd_q8_0_q8_0_row(w8, x8, nb);
                double a = 0;
                for (int i = 0; i < 32 * nb; i++) a += fabs((double)wf[i] * x[i]);
                CHECK_MSG(fabs(g - c) <= 1e-5 * a + 1e-30,
                          "Q8_0 x Q8_0, %d blocks: %.9g against the CPU's %.9g", nb, (double)g, c);
            }
        }
        free(x8), free(w8);
    }
    const uint32_t a = 0x0F00080Fu, b = 0x80FF7F01u; /* bytes 15, 8, 0, 15 by 1, 127, -1, -128 */
    CHECK(hm_hd_dp4a(a, b, 5) == 5 + 15 * 1 + 8 * 127 + 0 * -1 + 15 * -128);
    CHECK(hm_hd_q8k_code(-1.0f, NAN) == 0 && hm_hd_q8k_code(-0.0f, INFINITY) == 0 &&
          hm_hd_q8k_code(1.0f, 127.5f) == 127 && hm_hd_q8k_code(1.0f, -200.0f) == -128 &&
          hm_hd_q8k_code(1.0f, 2.5f) == 2 && hm_hd_q8k_code(1.0f, -3.5f) == -4);
    free(x), free(wf), free(xq), free(w);
}

int main(void) {
    test_supported();
    test_scalars();
    uint64_t s = 20250611;
    for (size_t k = 0; k < N_TYPES; k++) test_type(g_types[k], &s);
    test_all_16bit_codes();
    test_fp8_b128_codes();
    test_mxfp4_scales();
    printf("  %ld NaN values with a payload other than the reference's (NaN both)\n",
           g_nan_payload_diffs);
    test_op_twins();
    test_router_rank();
    test_q4k_q8k();
    return test_done("cuda_twins");
}
