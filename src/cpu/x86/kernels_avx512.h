/* kernels_avx512.h - AVX-512 (BW/VL/VNNI) kernels shared by the avx512 and amx variants; include
 * only from files compiled with AVX-512 flags. */
#ifndef HM_CPU_X86_KERNELS_AVX512_H
#define HM_CPU_X86_KERNELS_AVX512_H

#include "cpu/x86/avx512_sum.h"
#include "cpu/x86/kernels_avx2.h"

/* A block's int32 sums of nt tokens into their float sums: acc[t] += x[t].d * wd * sumi[t] (wd:
 * the weight block's scale) */
static inline __attribute__((always_inline)) void
hm_kfold_avx512(__m512 *acc, const __m512i *sumi, const hm_block_q8_K *const *x, float wd, int nt) {
    for (int t = 0; t < nt; t++)
        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(x[t]->d * wd), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
}

/* Constants of the Q4_K kernel, loaded (one load each) rather than built per call.
 * pidx: hm_q4_K_rows_avx512's scale spreads (VPERMW indices into the block's 8 scales and 8 mins
 * widened to int16) for VPACKSSDW(p_j, p_k) of two sub-block pairs' 4-product
 * sums (p_j: int32 lanes 0-7 sub-block 2j, 8-15 sub-block 2j + 1): in each 128-bit lane L the
 * pack puts p_j's lanes 4L .. 4L + 3 at int16 8L .. 8L + 3 and p_k's at 8L + 4 .. 8L + 7, so
 * int16 8L + r takes the scale of sub-block 2 (r < 4 ? j : k) + (L >= 2); [0]: (j, k) = (0, 1),
 * [1]: (2, 3) */
#define HM_K4P(pr, pos) (2 * (2 * (pr) + ((pos) % 8 >= 4)) + ((pos) / 8 >= 2))
#define HM_K4P8(pr, l)                                                                             \
    HM_K4P(pr, 8 * (l)), HM_K4P(pr, 8 * (l) + 1), HM_K4P(pr, 8 * (l) + 2),                         \
        HM_K4P(pr, 8 * (l) + 3), HM_K4P(pr, 8 * (l) + 4), HM_K4P(pr, 8 * (l) + 5),                 \
        HM_K4P(pr, 8 * (l) + 6), HM_K4P(pr, 8 * (l) + 7)
static const int16_t hm_k4_pidx_avx512[2][32] __attribute__((aligned(64))) = {
    {HM_K4P8(0, 0), HM_K4P8(0, 1), HM_K4P8(0, 2), HM_K4P8(0, 3)},
    {HM_K4P8(1, 0), HM_K4P8(1, 1), HM_K4P8(1, 2), HM_K4P8(1, 3)},
};
#undef HM_K4P8
#undef HM_K4P
/* nib: GF(2) affine matrices, one per qword: the lower 256 bits keep each byte's low nibble, the
 * upper 256 bits move its high nibble down (VGF2P8AFFINEQB; bit i of a result byte is the parity
 * of the source byte AND matrix byte 7 - i) */
static const uint64_t hm_k4_nib_avx512[8] __attribute__((aligned(64))) = {
    0x0102040800000000ull, 0x0102040800000000ull, 0x0102040800000000ull, 0x0102040800000000ull,
    0x1020408000000000ull, 0x1020408000000000ull, 0x1020408000000000ull, 0x1020408000000000ull};

/* 64 codes of Q4_K sub-blocks 2j and 2j + 1 as bytes: qs's 32 bytes in both halves, low nibbles
 * kept in the lower half, high nibbles in the upper (one GF2P8AFFINEQB where the CPU has GFNI;
 * every AMX CPU has it) */
static inline __m512i hm_k4_codes_avx512(const uint8_t *qs, __m512i nib) {
    const __m512i q2 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qs));
#if defined(__GFNI__)
    return _mm512_gf2p8affine_epi64_epi8(q2, nib, 0);
#else
    (void)nib;
    /* both halves hold the same 32 code bytes: shift the upper half's 16-bit lanes by 4 */
    const __m512i sh = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    return _mm512_and_si512(_mm512_srlv_epi16(q2, sh), _mm512_set1_epi8(0x0F));
#endif
}

/* A block's d and the dmin right after it (two adjacent halves) as floats, in lanes 0 and 1: one
 * conversion */
static inline __m128 hm_dmin_f32(const hm_half *d) {
    int32_t bits;
    memcpy(&bits, d, sizeof bits);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
}

/* One token's share of a block start with d and dmin (Q4_K, Q2_K): dd = (d, dmin) as floats,
 * mins = the int16 multipliers of the Q8_K block's 16 partial sums (Q4_K: min j in lanes 2j and
 * 2j + 1; Q2_K: each 16 values' min). Returns d x.d broadcast; adds dmin x.d x (the mins times
 * the token's partial sums, pairs summed) to *accm. */
static inline __attribute__((always_inline)) __m512
hm_kdmin_token_avx512(__m128 dd, __m256i mins, const hm_block_q8_K *x, __m256 *accm) {
    const __m128 f = _mm_mul_ps(dd, _mm_set1_ps(x->d)); /* d x.d, dmin x.d */
    const __m256 fm = _mm256_permutexvar_ps(_mm256_set1_epi32(1), _mm256_castps128_ps256(f));
    const __m256i mp = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)x->bsums));
    *accm = _mm256_fmadd_ps(fm, _mm256_cvtepi32_ps(mp), *accm);
    return _mm512_broadcastss_ps(f);
}

/* sum(acc) - sum(accm): a row's result from its block sums and mins' term */
static inline float hm_kdmin_result_avx512(__m512 acc, __m256 accm) {
    const __m256 s = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    return hm_hsum256(_mm256_sub_ps(s, accm));
}

/* Q5_K's fifth bits (GFNI): one GF2P8AFFINEQB matrix per sub-block pair j that puts bit 2j of each
 * qh byte at bit 4 in the lower 256 bits (sub-block 2j) and bit 2j + 1 there in the upper (2j + 1):
 * result bit 4 is the parity of the source byte AND matrix byte 3 (hm_k4_nib_avx512) */
#define HM_K5H(b)  ((uint64_t)(1u << (b)) << 24)
#define HM_K5H4(b) HM_K5H(b), HM_K5H(b), HM_K5H(b), HM_K5H(b)
static const uint64_t hm_k5_hbit_avx512[4][8] __attribute__((aligned(64))) = {
    {HM_K5H4(0), HM_K5H4(1)},
    {HM_K5H4(2), HM_K5H4(3)},
    {HM_K5H4(4), HM_K5H4(5)},
    {HM_K5H4(6), HM_K5H4(7)},
};
#undef HM_K5H4
#undef HM_K5H

/* Q5_K sub-blocks 2j and 2j + 1's fifth bits as 16 (lower 256 bits: 2j, upper: 2j + 1), from qh's
 * 32 bytes in both halves */
static inline __m512i hm_k5_hbits_avx512(__m512i qh, int j) {
#if defined(__GFNI__)
    return _mm512_gf2p8affine_epi64_epi8(qh, _mm512_load_si512(hm_k5_hbit_avx512[j]), 0);
#else
    const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * j)),
                                          _mm256_set1_epi16((short)(2 * j + 1)), 1);
    return _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh), _mm512_set1_epi8(1)), 4);
#endif
}

/* Q4_K (q5 = 0) or Q5_K (q5 = 1) row times nt (1-4) Q8_KX activation rows: each weight block is
 * unpacked once for all of them; every token's result is the same float operations in the same
 * order whatever nt, so a token's output does not depend on how many tokens share the row.
 * Per block: the 12 scale bytes unpacked by vector ops, widened once and spread by VPERMW; d and
 * dmin converted together (one VCVTPH2PS); the mins as floats times dmin; the codes as bytes
 * (Q5_K: the fifth bits added, codes <= 31). Per token: d times its d (one multiply of
 * broadcasts), the mins' term one FMA with the activations' scaled 32-value sums (Q8_KX), and the
 * sub-block sums as VPDPBUSD sums of 4 products (|.| <= 4 x 31 x 128, an int16), packed to int16
 * two sub-block pairs at a time and times the scales by VPDPWSSD: 6 integer multiplies per token
 * and block where VPMADDUBSW pairs took 8 (port 0 bounds the 4-token kernel). */
static inline __attribute__((always_inline)) void hm_k45_rows_avx512(const int q5, int64_t n,
                                                                     const void *vw,
                                                                     const void *const *vx,
                                                                     const int nt, float *out) {
    const int64_t nb = n / HM_QK_K;
    const __m512i nib = _mm512_load_si512(hm_k4_nib_avx512);
    __m512 acc[4];
    __m256 accm[4];     /* the mins' term, lane j = sub-block j (subtracted at the end) */
    const float *xs[4]; /* the Q8_KX sums after the Q8_K blocks */
    for (int t = 0; t < nt; t++) {
        acc[t] = _mm512_setzero_ps(), accm[t] = _mm256_setzero_ps();
        xs[t] = (const float *)((const hm_block_q8_K *)vx[t] + nb);
    }
    for (int64_t i = 0; i < nb; i++) {
        /* d, dmin and scales sit at the same offsets in both formats */
        const hm_block_q4_K *w4 = (const hm_block_q4_K *)vw + i;
        const hm_block_q5_K *w5 = (const hm_block_q5_K *)vw + i;
        const char *blk = q5 ? (const char *)w5 : (const char *)w4;
        const hm_half *dp = q5 ? &w5->d : &w4->d;
        const uint8_t *scales = q5 ? w5->scales : w4->scales;
        const uint8_t *qs = q5 ? w5->qs : w4->qs;
        hm_prefetch_w(blk);
        hm_prefetch_w(blk + 64);
        hm_prefetch_w(blk + 128);
        /* scales 0-7 then mins 0-7 as bytes; lanes 0-7 the scales, 8-15 the mins, as int16 */
        const __m128i sm = hm_k4_scales_vec(scales);
        const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(sm));
        const __m128 dd = hm_dmin_f32(dp);
        /* dmin x min j in lane j */
        const __m256 mdm =
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))),
                          _mm256_broadcastss_ps(_mm_movehdup_ps(dd)));
        const __m512 d = _mm512_broadcastss_ps(dd);
        const hm_block_q8_K *x[4];
        __m512 fd[4];
        __m512i sumi[4];
        for (int t = 0; t < nt; t++) {
            x[t] = (const hm_block_q8_K *)vx[t] + i;
            fd[t] = _mm512_mul_ps(d, _mm512_set1_ps(x[t]->d));
            accm[t] = _mm256_fmadd_ps(mdm, _mm256_loadu_ps(xs[t] + HM_Q8_KX_SUMS * i), accm[t]);
            sumi[t] = _mm512_setzero_si512();
        }
        __m512i q[4];
        for (int j = 0; j < 4; j++) q[j] = hm_k4_codes_avx512(qs + 32 * j, nib);
        if (q5) {
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)w5->qh));
            for (int j = 0; j < 4; j++) q[j] = _mm512_or_si512(q[j], hm_k5_hbits_avx512(qh, j));
        }
        const __m512i s01 = _mm512_permutexvar_epi16(_mm512_load_si512(hm_k4_pidx_avx512[0]), sc);
        const __m512i s23 = _mm512_permutexvar_epi16(_mm512_load_si512(hm_k4_pidx_avx512[1]), sc);
        for (int t = 0; t < nt; t++) {
            /* VPDPBUSD: sums of 4 products, two sub-block pairs packed to int16, then VPDPWSSD:
             * times the scales, added */
            __m512i p[4];
            for (int j = 0; j < 4; j++)
                p[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[j],
                                           _mm512_loadu_si512(x[t]->qs + 64 * j));
            sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_packs_epi32(p[0], p[1]), s01);
            sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_packs_epi32(p[2], p[3]), s23);
        }
        for (int t = 0; t < nt; t++)
            acc[t] = _mm512_fmadd_ps(fd[t], _mm512_cvtepi32_ps(sumi[t]), acc[t]);
    }
    for (int t = 0; t < nt; t++) out[t] = hm_kdmin_result_avx512(acc[t], accm[t]);
}

static inline __attribute__((always_inline)) void
hm_q4_K_rows_avx512(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    hm_k45_rows_avx512(0, n, vw, vx, nt, out);
}

static inline __attribute__((always_inline)) void
hm_q5_K_rows_avx512(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    hm_k45_rows_avx512(1, n, vw, vx, nt, out);
}

HM_DOT_ENTRIES(q4_K_q8_K_avx512, hm_q4_K_rows_avx512)
HM_DOT_ENTRIES(q5_K_q8_K_avx512, hm_q5_K_rows_avx512)

/* Sum of 16-bit pair products w x y into 32 int16 lanes for signed w and y (|w|, |y| <= 127). */
static inline __m512i hm_dot_s8_pairs_avx512(__m512i w, __m512i y) {
    const __m512i sy = _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(w), _mm512_setzero_si512(), y);
    return _mm512_maddubs_epi16(_mm512_abs_epi8(w), sy);
}

/* Q6_K row times nt (1-4) Q8_K activation rows, each weight block unpacked once for all of them
 * (same per-token operations whatever nt, as hm_q4_K_rows_avx512). */
static inline __attribute__((always_inline)) void
hm_q6_K_rows_avx512(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    const hm_block_q6_K *w = vw;
    const __m512i low4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(3);
    /* 64 ql bytes hold planes p and p + 1 (low nibbles: p = 0, 1; high: 2, 3); the 32 qh bytes,
     * broadcast to both halves, give plane p's two bits at shift 2p */
    const __m512i sh01 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i sh23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    /* byte b of 32 selects scale k + b / 8 */
    const __m256i sbase =
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m512 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        hm_prefetch_w((const char *)(w + i));
        hm_prefetch_w((const char *)(w + i) + 64);
        hm_prefetch_w((const char *)(w + i) + 128);
        hm_prefetch_w((const char *)(w + i) + 192);
        const float wd = hm_h2f(w[i].d);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)w[i].scales);
        const __m256i sc = _mm256_broadcastsi128_si256(sc8);
        /* codes are stored + 32: each token's sums start at -32 * sum(scale[k] * bsums[k]), one
         * VPMADDWD of the scales times -32 (|4096 x 4064 x 2| fits int32) */
        const __m256i nsc16 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(sc8), _mm256_set1_epi16(-32));
        const hm_block_q8_K *x[4];
        __m512i sumi[4];
        for (int t = 0; t < nt; t++) {
            x[t] = (const hm_block_q8_K *)vx[t] + i;
            sumi[t] = _mm512_zextsi256_si512(
                _mm256_madd_epi16(nsc16, _mm256_loadu_si256((const __m256i *)x[t]->bsums)));
        }
        for (int h = 0; h < 2; h++) {
            const __m512i ql = _mm512_loadu_si512(w[i].ql + 64 * h);
            const __m512i qh =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w[i].qh + 32 * h)));
            const __m512i u01 = _mm512_or_si512(
                _mm512_and_si512(ql, low4),
                _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh01), m3), 4));
            const __m512i u23 = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh23), m3), 4));
            const __m512i s01 = _mm512_cvtepi8_epi16(
                _mm256_shuffle_epi8(sc, _mm256_add_epi8(sbase, _mm256_set1_epi8((char)(8 * h)))));
            const __m512i s23 = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(
                sc, _mm256_add_epi8(sbase, _mm256_set1_epi8((char)(8 * h + 4)))));
            for (int t = 0; t < nt; t++) { /* |63 * 127 * 2| fits int16 */
                const __m512i y01 = _mm512_loadu_si512(x[t]->qs + 128 * h);
                const __m512i y23 = _mm512_loadu_si512(x[t]->qs + 128 * h + 64);
                sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(u01, y01), s01);
                sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(u23, y23), s23);
            }
        }
        hm_kfold_avx512(acc, sumi, x, wd, nt);
    }
    for (int t = 0; t < nt; t++) out[t] = _mm512_reduce_add_ps(acc[t]);
}

HM_DOT_ENTRIES(q6_K_q8_K_avx512, hm_q6_K_rows_avx512)

/* Q2_K / Q3_K (AVX-512): one 512-bit step covers 2-bit planes 2pp and 2pp + 1 of half h (the 32
 * qs bytes in both halves, shifted by 4pp and 4pp + 2): elements 128h + 64pp .. + 63, sub-blocks
 * (of 16) 8h + 4pp .. + 3.
 * k23_sidx[2h + pp]: int16 lane -> that sub-block's entry of the 16 scales widened to int16;
 * k23_shift[pp]: the planes' shifts per 16-bit lane;
 * k3_bit[2h + pp]: Q3_K's hmask bit of each byte's plane (bit 4h + 2pp, upper half + 1). */
static const int16_t hm_k23_sidx_avx512[4][32] __attribute__((aligned(64))) = {
#define HM_K23_SIDX(s)                                                                             \
    {                                                                                              \
        (s), (s), (s), (s), (s), (s), (s), (s), (s) + 1, (s) + 1, (s) + 1, (s) + 1, (s) + 1,       \
            (s) + 1, (s) + 1, (s) + 1, (s) + 2, (s) + 2, (s) + 2, (s) + 2, (s) + 2, (s) + 2,       \
            (s) + 2, (s) + 2, (s) + 3, (s) + 3, (s) + 3, (s) + 3, (s) + 3, (s) + 3, (s) + 3,       \
            (s) + 3                                                                                \
    }
    HM_K23_SIDX(0), HM_K23_SIDX(4), HM_K23_SIDX(8), HM_K23_SIDX(12)
#undef HM_K23_SIDX
};
static const int16_t hm_k23_shift_avx512[2][32]
    __attribute__((aligned(64))) = {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                     2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2},
                                    {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
                                     6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6}};
static const uint64_t hm_k3_bit_avx512[4][8] __attribute__((aligned(64))) = {
#define HM_K3_BIT(k)                                                                               \
    {                                                                                              \
        0x0101010101010101ull << (k), 0x0101010101010101ull << (k), 0x0101010101010101ull << (k),  \
            0x0101010101010101ull << (k), 0x0101010101010101ull << ((k) + 1),                      \
            0x0101010101010101ull << ((k) + 1), 0x0101010101010101ull << ((k) + 1),                \
            0x0101010101010101ull << ((k) + 1)                                                     \
    }
    HM_K3_BIT(0), HM_K3_BIT(2), HM_K3_BIT(4), HM_K3_BIT(6)
#undef HM_K3_BIT
};

/* Q2_K row times nt (1-4) Q8_K activation rows (layout: hm_q2_K_rows_avx2); d and dmin
 * converted together and scaled by each token's d as in hm_q4_K_rows_avx512. */
static inline __attribute__((always_inline)) void
hm_q2_K_rows_avx512(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    const hm_block_q2_K *w = vw;
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m128i m15 = _mm_set1_epi8(0x0F);
    __m512 acc[4];
    __m256 accm[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps(), accm[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        hm_prefetch_w((const char *)(w + i));
        hm_prefetch_w((const char *)(w + i) + 64);
        const __m128i sm = _mm_loadu_si128((const __m128i *)w[i].scales);
        const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sm, m15)));
        const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m15));
        const __m128 dd = hm_dmin_f32(&w[i].d);
        const hm_block_q8_K *x[4];
        __m512 fd[4];
        __m512i sumi[4];
        for (int t = 0; t < nt; t++) {
            x[t] = (const hm_block_q8_K *)vx[t] + i;
            fd[t] = hm_kdmin_token_avx512(dd, mn16, x[t], &accm[t]);
            sumi[t] = _mm512_setzero_si512();
        }
        for (int h = 0; h < 2; h++) {
            const __m512i qb =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * h)));
            for (int pp = 0; pp < 2; pp++) {
                const __m512i qp = _mm512_and_si512(
                    _mm512_srlv_epi16(qb, _mm512_load_si512(hm_k23_shift_avx512[pp])), m3);
                const __m512i s16 =
                    _mm512_permutexvar_epi16(_mm512_load_si512(hm_k23_sidx_avx512[2 * h + pp]), sc);
                for (int t = 0; t < nt; t++) {
                    const __m512i y = _mm512_loadu_si512(x[t]->qs + 128 * h + 64 * pp);
                    sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(qp, y), s16);
                }
            }
        }
        for (int t = 0; t < nt; t++)
            acc[t] = _mm512_fmadd_ps(fd[t], _mm512_cvtepi32_ps(sumi[t]), acc[t]);
    }
    for (int t = 0; t < nt; t++) out[t] = hm_kdmin_result_avx512(acc[t], accm[t]);
}

HM_DOT_ENTRIES(q2_K_q8_K_avx512, hm_q2_K_rows_avx512)

/* Q3_K row times nt (1-4) Q8_K activation rows (layout and the + 4 of the codes:
 * hm_q3_K_rows_avx2); a code's hmask bit picked by one VPTESTMB, the 4 added under that mask. */
static inline __attribute__((always_inline)) void
hm_q3_K_rows_avx512(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    const hm_block_q3_K *w = vw;
    const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    __m512 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        hm_prefetch_w((const char *)(w + i));
        hm_prefetch_w((const char *)(w + i) + 64);
        const __m256i sc16 = _mm256_cvtepi8_epi16(hm_q3_K_scales_vec(w[i].scales));
        const __m512i sc = _mm512_castsi256_si512(sc16);
        const __m512i hmb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)w[i].hmask));
        const float wd = hm_h2f(w[i].d);
        const hm_block_q8_K *x[4];
        __m512i sumi[4];
        for (int t = 0; t < nt; t++) {
            x[t] = (const hm_block_q8_K *)vx[t] + i;
            const __m256i corr =
                _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)x[t]->bsums));
            sumi[t] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                       _mm512_zextsi256_si512(_mm256_slli_epi32(corr, 2)));
        }
        for (int h = 0; h < 2; h++) {
            const __m512i qb =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * h)));
            for (int pp = 0; pp < 2; pp++) {
                const __m512i lo = _mm512_and_si512(
                    _mm512_srlv_epi16(qb, _mm512_load_si512(hm_k23_shift_avx512[pp])), m3);
                const __mmask64 hb =
                    _mm512_test_epi8_mask(hmb, _mm512_load_si512(hm_k3_bit_avx512[2 * h + pp]));
                const __m512i qp = _mm512_mask_add_epi8(lo, hb, lo, four); /* q + 4 */
                const __m512i s16 =
                    _mm512_permutexvar_epi16(_mm512_load_si512(hm_k23_sidx_avx512[2 * h + pp]), sc);
                for (int t = 0; t < nt; t++) {
                    const __m512i y = _mm512_loadu_si512(x[t]->qs + 128 * h + 64 * pp);
                    sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(qp, y), s16);
                }
            }
        }
        hm_kfold_avx512(acc, sumi, x, wd, nt);
    }
    for (int t = 0; t < nt; t++) out[t] = _mm512_reduce_add_ps(acc[t]);
}

HM_DOT_ENTRIES(q3_K_q8_K_avx512, hm_q3_K_rows_avx512)

/* IQ4_XS row times nt (1-4) Q8_K activation rows, each weight block looked up once for all of
 * them (same per-token operations whatever nt, as hm_q4_K_rows_avx512). */
static inline __attribute__((always_inline)) void
hm_iq4_xs_rows_avx512(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    const hm_block_iq4_xs *w = vw;
    const __m512i table =
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)hm_kvalues_iq4nl));
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    /* 64 code bytes = 4 sub-blocks of 16 bytes (one per 128-bit lane); sub-block order is lane L's
     * low nibbles then its high nibbles */
    const __m512i perm01 = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i perm23 = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    const __m512i sidx0 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(1), 1);
    const __m512i two = _mm512_set1_epi16(2);
    __m512 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / HM_QK_K; i++) {
        hm_prefetch_w((const char *)(w + i));
        hm_prefetch_w((const char *)(w + i) + 64);
        hm_prefetch_w((const char *)(w + i) + 128);
        /* the 8 6-bit scales as bytes: the low nibbles (scales_l, 4 bits each in order) into bits
         * 0-3 and the high pairs (scales_h, 2 bits each) into bits 4-5 of consecutive bytes */
        uint32_t sl;
        memcpy(&sl, w[i].scales_l, sizeof sl);
        const uint64_t ls =
            _pdep_u64(sl, 0x0F0F0F0F0F0F0F0Full) | _pdep_u64(w[i].scales_h, 0x3030303030303030ull);
        const __m512i sc = _mm512_castsi128_si512(
            _mm_sub_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)ls)), _mm_set1_epi16(32)));
        const hm_block_q8_K *x[4];
        __m512i sumi[4];
        for (int t = 0; t < nt; t++)
            x[t] = (const hm_block_q8_K *)vx[t] + i, sumi[t] = _mm512_setzero_si512();
        __m512i sidx = sidx0;
        for (int k = 0; k < 2; k++) {
            const __m512i q = _mm512_loadu_si512(w[i].qs + 64 * k);
            const __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(q, low4));
            const __m512i hi =
                _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), low4));
            const __m512i w01 = _mm512_permutex2var_epi64(lo, perm01, hi);
            const __m512i w23 = _mm512_permutex2var_epi64(lo, perm23, hi);
            /* signed x signed through VPMADDUBSW: |w| once, y takes w's sign per token */
            const __m512i a01 = _mm512_abs_epi8(w01), a23 = _mm512_abs_epi8(w23);
            const __mmask64 n01 = _mm512_movepi8_mask(w01), n23 = _mm512_movepi8_mask(w23);
            const __m512i s01 = _mm512_permutexvar_epi16(sidx, sc);
            sidx = _mm512_add_epi16(sidx, two);
            const __m512i s23 = _mm512_permutexvar_epi16(sidx, sc);
            sidx = _mm512_add_epi16(sidx, two);
            for (int t = 0; t < nt; t++) {
                const __m512i y01 = _mm512_loadu_si512(x[t]->qs + 128 * k);
                const __m512i y23 = _mm512_loadu_si512(x[t]->qs + 128 * k + 64);
                const __m512i z = _mm512_setzero_si512();
                sumi[t] = _mm512_dpwssd_epi32(
                    sumi[t], _mm512_maddubs_epi16(a01, _mm512_mask_sub_epi8(y01, n01, z, y01)),
                    s01);
                sumi[t] = _mm512_dpwssd_epi32(
                    sumi[t], _mm512_maddubs_epi16(a23, _mm512_mask_sub_epi8(y23, n23, z, y23)),
                    s23);
            }
        }
        const float wd = hm_h2f(w[i].d);
        hm_kfold_avx512(acc, sumi, x, wd, nt);
    }
    for (int t = 0; t < nt; t++) out[t] = _mm512_reduce_add_ps(acc[t]);
}

HM_DOT_ENTRIES(iq4_xs_q8_K_avx512, hm_iq4_xs_rows_avx512)

/* The 4-bit codes of two 32-blocks (16 bytes each: low nibbles elements 0-15, high 16-31) as 64
 * bytes: block a in the lower half, b in the upper. */
static inline __m512i hm_nibbles64_avx512(const uint8_t *qa, const uint8_t *qb) {
    const __m256i ab =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)qa)),
                                _mm_loadu_si128((const __m128i *)qb), 1);
    const __m512i aabb =
        _mm512_shuffle_i64x2(_mm512_castsi256_si512(ab), _mm512_castsi256_si512(ab), 0x50);
    const long long k4 = 0x0004000400040004; /* 128-bit lanes shifted by 0, 4, 0, 4 */
    const __m512i shift = _mm512_set_epi64(k4, k4, 0, 0, k4, k4, 0, 0);
    return _mm512_and_si512(_mm512_srlv_epi16(aabb, shift), _mm512_set1_epi8(0x0F));
}

static const int8_t hm_q4_0_values[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

static inline __m512i hm_table16_avx512(const int8_t t[16]) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t));
}

/* Q5_0 codes of two blocks: nibble plus 16 where the 5th bit (bit j of qh = element j) is set. */
static inline __m512i hm_q5_0_pair_avx512(const hm_block_q5_0 *w) {
    uint32_t ha, hb;
    memcpy(&ha, w[0].qh, 4);
    memcpy(&hb, w[1].qh, 4);
    const __mmask64 hm = _cvtu64_mask64((uint64_t)ha | (uint64_t)hb << 32);
    const __m512i nib = hm_nibbles64_avx512(w[0].qs, w[1].qs);
    return _mm512_mask_add_epi8(nib, hm, nib, _mm512_set1_epi8(16));
}

/* Q8_0 weights against Q8_0X4 activations (blocks.h, src/quant/README.md). Per two blocks, the
 * weights' codes interleaved in 4-byte runs as the activations' are: VPDPBUSD lane 2m + q then
 * sums four products of block q, and the two scale products are d_w * d_x spread as
 * (d0, d1, d0, d1, ...), the activations' part one 64-bit broadcast from memory. */

/* The scales of two adjacent blocks (d0, d1) at p as (d0, d1) repeated over 16 lanes: one
 * VBROADCASTSD from memory */
static inline __m512 hm_pair_scales_avx512(const float *p) {
    double d;
    memcpy(&d, p, sizeof d);
    return _mm512_castpd_ps(_mm512_set1_pd(d));
}

/* One step of a Q8_0X4 dot: w (signed codes of two blocks, interleaved), nc (-128 times each
 * lane's sum of w: the unsigned activations' offset), the weights' scales spread as
 * hm_pair_scales_avx512's; xc / xd: the activations' 64 code bytes and their two float scales */
static inline __attribute__((always_inline)) __m512
hm_q8_0x4_step(__m512 acc, __m512i w, __m512i nc, __m512 wd, const uint8_t *xc, const float *xd) {
    const __m512i p = _mm512_dpbusd_epi32(nc, _mm512_loadu_si512(xc), w);
    return _mm512_fmadd_ps(_mm512_mul_ps(wd, hm_pair_scales_avx512(xd)), _mm512_cvtepi32_ps(p),
                           acc);
}

/* -128 x the sum of each lane's four weight codes */
static inline __m512i hm_q8_0x4_offset(__m512i w) {
    const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(-128), w);
    return _mm512_sub_epi32(_mm512_setzero_si512(), s);
}

/* dword m of blocks a, b (as zmm lower halves) to lanes 2m, 2m + 1 */
static const int32_t hm_q8_0_il_avx512[16]
    __attribute__((aligned(64))) = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};

/* The codes of Q8_0 blocks p[0], p[1], interleaved */
static inline __m512i hm_q8_0_pair_il_avx512(const hm_block_q8_0 *p, __m512i il) {
    return _mm512_permutex2var_epi32(
        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p[0].qs)), il,
        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p[1].qs)));
}

#if defined(__AVX512VBMI__)
/* Byte permutations of four Q8_0 blocks (136 bytes) read as three 64-byte loads: r0 = bytes 0-63,
 * r1 = 64-127, r2 = 72-135. q01 / q23: the codes of blocks 0-1 / 2-3, interleaved in 4-byte runs
 * (byte 8m + 4q + r = code 4m + r of block q), from (r0, r1) / (r1, r2); d: the four halves d at
 * 0, 34, 68, 102 from (r0, r1), in the low 8 bytes. */
static const uint8_t hm_q8_0_perm_avx512[3][64] __attribute__((aligned(64))) = {
#define HM_Q8_0_R(b0, b1, m)                                                                       \
    (b0) + 4 * (m), (b0) + 4 * (m) + 1, (b0) + 4 * (m) + 2, (b0) + 4 * (m) + 3, (b1) + 4 * (m),    \
        (b1) + 4 * (m) + 1, (b1) + 4 * (m) + 2, (b1) + 4 * (m) + 3
#define HM_Q8_0_QS(b0, b1)                                                                         \
    {                                                                                              \
        HM_Q8_0_R(b0, b1, 0), HM_Q8_0_R(b0, b1, 1), HM_Q8_0_R(b0, b1, 2), HM_Q8_0_R(b0, b1, 3),    \
            HM_Q8_0_R(b0, b1, 4), HM_Q8_0_R(b0, b1, 5), HM_Q8_0_R(b0, b1, 6), HM_Q8_0_R(b0, b1, 7) \
    }
    /* blocks 0-1: codes at 2-33 and 36-67 of (r0, r1) = indices 2.. and 36.. */
    HM_Q8_0_QS(2, 36),
    /* blocks 2-3: codes at 70-101 (r1 offset 6) and 104-135 (r2 offset 32 = index 96) */
    HM_Q8_0_QS(6, 96),
#undef HM_Q8_0_QS
#undef HM_Q8_0_R
    /* d of blocks 0-3: bytes 0-1, 34-35 of r0, 68-69 (r1 offset 4), 102-103 (r1 offset 38) */
    {0, 1, 34, 35, 68, 69, 102, 103}};

/* The 4-bit 32-blocks (MXFP4, Q4_0, IQ4_NL) with VBMI, four blocks (68 or 72 bytes) from two
 * loads, r0 = bytes 0-63 and r1 = the last 64 (4 bb - 64 ..): per pair of blocks one VPERMT2B
 * puts the byte holding each value where the value goes (interleaved in 4-byte runs as Q8_0X4:
 * byte 8m + 4q + r is value 4m + r of block q, whose code is the low nibble of qs byte
 * 4 (m % 4) + r for m < 4 and its high nibble from m = 4 on), VPMULTISHIFTQB brings the low or
 * high nibble to bits 0-3, and VPERMB looks the value up in the 16-entry table repeated four
 * times (bits 4-5 of the index are the neighbour nibble's, and ignored that way). The indices:
 * byte k of the four blocks is r0's k below 64, else r1's k - (4 bb - 64), index 128 - 4 bb + k. */
#define HM_NIB4_K(bb, off, q, m, r) ((q) * (bb) + (off) + 4 * ((m) % 4) + (r))
#define HM_NIB4_I(bb, off, q, m, r)                                                                \
    (HM_NIB4_K(bb, off, q, m, r) < 64 ? HM_NIB4_K(bb, off, q, m, r)                                \
                                      : 128 - 4 * (bb) + HM_NIB4_K(bb, off, q, m, r))
#define HM_NIB4_R(bb, off, q0, m)                                                                  \
    HM_NIB4_I(bb, off, q0, m, 0), HM_NIB4_I(bb, off, q0, m, 1), HM_NIB4_I(bb, off, q0, m, 2),      \
        HM_NIB4_I(bb, off, q0, m, 3), HM_NIB4_I(bb, off, q0 + 1, m, 0),                            \
        HM_NIB4_I(bb, off, q0 + 1, m, 1), HM_NIB4_I(bb, off, q0 + 1, m, 2),                        \
        HM_NIB4_I(bb, off, q0 + 1, m, 3)
#define HM_NIB4_PAIR(bb, off, q0)                                                                  \
    {                                                                                              \
        HM_NIB4_R(bb, off, q0, 0), HM_NIB4_R(bb, off, q0, 1), HM_NIB4_R(bb, off, q0, 2),           \
            HM_NIB4_R(bb, off, q0, 3), HM_NIB4_R(bb, off, q0, 4), HM_NIB4_R(bb, off, q0, 5),       \
            HM_NIB4_R(bb, off, q0, 6), HM_NIB4_R(bb, off, q0, 7)                                   \
    }
/* [0]: MXFP4 (17-byte blocks, codes from byte 1); [1]: Q4_0, IQ4_NL (18 bytes, from byte 2);
 * [2]: Q5_0's low four bits (22 bytes, from byte 6); each the pairs of blocks 0-1 and 2-3 */
static const uint8_t hm_nib4_idx_avx512[3][2][64] __attribute__((aligned(64))) = {
    {HM_NIB4_PAIR(17, 1, 0), HM_NIB4_PAIR(17, 1, 2)},
    {HM_NIB4_PAIR(18, 2, 0), HM_NIB4_PAIR(18, 2, 2)},
    {HM_NIB4_PAIR(22, 6, 0), HM_NIB4_PAIR(22, 6, 2)},
};
#undef HM_NIB4_PAIR
#undef HM_NIB4_R
#undef HM_NIB4_I
#undef HM_NIB4_K
/* VPMULTISHIFTQB's bit offsets: each byte's own in the lower 32 bytes, plus 4 in the upper */
static const uint8_t hm_nib4_ctrl_avx512[64] __attribute__((aligned(64))) = {
    0,  8,  16, 24, 32, 40, 48, 56, 0,  8,  16, 24, 32, 40, 48, 56, 0,  8,  16, 24, 32, 40,
    48, 56, 0,  8,  16, 24, 32, 40, 48, 56, 4,  12, 20, 28, 36, 44, 52, 60, 4,  12, 20, 28,
    36, 44, 52, 60, 4,  12, 20, 28, 36, 44, 52, 60, 4,  12, 20, 28, 36, 44, 52, 60,
};
#endif

/* hm_e8m0_to_f32_half of four exponents (int32 lanes): 2^(e - 128) by one VSCALEFPS of 1.0, exact
 * for every e (e 0 and 1 give the denormals 2^-128 and 2^-127; nothing here sets FTZ) */
static inline __m128 hm_e8m0x4_f32_half_avx512(__m128i e) {
    return _mm_scalef_ps(_mm_set1_ps(1.0f), _mm_cvtepi32_ps(_mm_sub_epi32(e, _mm_set1_epi32(128))));
}

/* The 32-block formats (HM_B32_*, kernels_avx2.h) on AVX-512 */

/* the signed weights of blocks i and i + 1 (lanes 0-31 block i) */
static inline __attribute__((always_inline)) __m512i hm_b32_pair_avx512(int kind, const void *vw,
                                                                        int64_t i, __m512i table) {
    switch (kind) {
    case HM_B32_IQ4_NL: {
        const hm_block_iq4_nl *w = vw;
        return _mm512_shuffle_epi8(table, hm_nibbles64_avx512(w[i].qs, w[i + 1].qs));
    }
    case HM_B32_MXFP4: {
        const hm_block_mxfp4 *w = vw;
        return _mm512_shuffle_epi8(table, hm_nibbles64_avx512(w[i].qs, w[i + 1].qs));
    }
    case HM_B32_Q4_0: {
        const hm_block_q4_0 *w = vw;
        return _mm512_sub_epi8(hm_nibbles64_avx512(w[i].qs, w[i + 1].qs), _mm512_set1_epi8(8));
    }
    default: {
        const hm_block_q5_0 *w = vw;
        return _mm512_sub_epi8(hm_q5_0_pair_avx512(w + i), _mm512_set1_epi8(16));
    }
    }
}

/* Q8_0 among the kinds of the Q8_0X4 kernel below (not a kind of kernels_avx2.h's) */
enum { HM_X4_Q8_0 = 16 };

static inline size_t hm_x4_bytes(int kind) {
    return kind == HM_X4_Q8_0 ? sizeof(hm_block_q8_0) : hm_b32_bytes(kind);
}

/* The weight scales of blocks i .. i + cnt - 1 (cnt <= 4; the others 0) */
static inline __attribute__((always_inline)) __m128 hm_x4_d4(int kind, const void *vw, int64_t i,
                                                             int cnt) {
    if (kind != HM_X4_Q8_0) return hm_b32_d4(kind, vw, i, cnt);
    const hm_block_q8_0 *w = (const hm_block_q8_0 *)vw + i;
    if (cnt == 4) return hm_q8_0_d4(w);
    hm_half h[4] = {0, 0, 0, 0};
    for (int k = 0; k < cnt; k++) h[k] = w[k].d;
    return _mm_cvtph_ps(
        _mm_set_epi16(0, 0, 0, 0, (short)h[3], (short)h[2], (short)h[1], (short)h[0]));
}

/* dword 8q + m (block q's dword m in one register) to lane 2m + q */
static const int32_t hm_x4_il_avx512[16]
    __attribute__((aligned(64))) = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};

/* The signed codes of blocks i and i + 1, interleaved in 4-byte runs (lane 2m + q = codes
 * 4m .. 4m + 3 of block i + q) */
static inline __attribute__((always_inline)) __m512i
hm_x4_pair_avx512(int kind, const void *vw, int64_t i, __m512i table, __m512i il2, __m512i il1) {
    if (kind == HM_X4_Q8_0) return hm_q8_0_pair_il_avx512((const hm_block_q8_0 *)vw + i, il2);
    return _mm512_permutexvar_epi32(il1, hm_b32_pair_avx512(kind, vw, i, table));
}

/* The signed codes of block i alone, in lanes 0-7 (zeros above): from a copy of the block next
 * to a zero one, so nothing past the row is read */
static inline __attribute__((always_inline)) __m512i hm_x4_lone_avx512(int kind, const void *vw,
                                                                       int64_t i, __m512i table) {
    const size_t bb = hm_x4_bytes(kind);
    _Alignas(8) uint8_t two[2 * 34] = {0};
    memcpy(two, (const uint8_t *)vw + (size_t)i * bb, bb);
    const __m512i a = kind == HM_X4_Q8_0 ? _mm512_castsi256_si512(_mm256_loadu_si256(
                                               (const __m256i *)((hm_block_q8_0 *)two)->qs))
                                         : hm_b32_pair_avx512(kind, two, 0, table);
    return _mm512_inserti64x4(a, _mm256_setzero_si256(), 1);
}

/* A kind's row (Q8_0 or a 32-block format of kernels_avx2.h) times nt (1-4) Q8_0X4 activation rows,
 * each weight block read once for all of them (the same per-token operations whatever nt, as
 * hm_q4_K_rows_avx512). Per group of four blocks, once: the two pairs' signed codes interleaved
 * as the activations' (Q8_0 with VBMI, every AMX CPU: three loads and three byte permutations
 * for codes and scales), the four scales spread over the lanes, and the correction of the
 * activations' offset; then per token and pair one VPDPBUSD, one multiply of the scales (the
 * activations' part one broadcast from memory), one conversion and one FMA. The last group's
 * pair and lone block the same way. */
static inline __attribute__((always_inline)) void hm_x4_rows_avx512(int kind, int64_t n,
                                                                    const void *vw,
                                                                    const void *const *vx,
                                                                    const int nt, float *out) {
    const size_t bb = hm_x4_bytes(kind);
    const uint8_t *wb = vw;
    const __m512i table = hm_table16_avx512(kind == HM_B32_MXFP4  ? hm_kvalues_mxfp4
                                            : kind == HM_B32_Q4_0 ? hm_q4_0_values
                                                                  : hm_kvalues_iq4nl);
    const __m512i il2 = _mm512_load_si512(hm_q8_0_il_avx512);
    const __m512i il1 = _mm512_load_si512(hm_x4_il_avx512);
    /* lanes 2m take scale 0 (2), lanes 2m + 1 scale 1 (3) */
    const __m512i s01 = _mm512_set_epi32(1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0);
    const __m512i s23 = _mm512_add_epi32(s01, _mm512_set1_epi32(2));
#if defined(__AVX512VBMI__)
    const __m512i i01 = _mm512_load_si512(hm_q8_0_perm_avx512[0]);
    const __m512i i23 = _mm512_load_si512(hm_q8_0_perm_avx512[1]);
    const __m512i id = _mm512_load_si512(hm_q8_0_perm_avx512[2]);
    const bool nib4 = kind == HM_B32_MXFP4 || kind == HM_B32_Q4_0 || kind == HM_B32_IQ4_NL,
               q5 = kind == HM_B32_Q5_0;
    const int cls = kind == HM_B32_MXFP4 ? 0 : q5 ? 2 : 1;
    const __m512i ni01 = _mm512_load_si512(hm_nib4_idx_avx512[cls][0]);
    const __m512i ni23 = _mm512_load_si512(hm_nib4_idx_avx512[cls][1]);
    const __m512i nctl = _mm512_load_si512(hm_nib4_ctrl_avx512);
    /* the scales: MXFP4's exponent bytes (0, 17, 34, 51) to the low bytes of dwords 0-3, the
     * others' halves (at 0, 18, 36, 54) to bytes 0-7 */
    const __m512i se = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 51, 34, 17, 0);
    const __m512i sh = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0, 0, 0, 0, 0, 0, 0, 0, 0x3736, 0x2524, 0x1312, 0x0100);
    /* Q5_0's halves at 0, 22, 44 and 66 (byte 42 of the second load, at 24) */
    const __m512i s5 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0, 0, 0, 0, 0, 0, 0, 0, 0x6B6A, 0x2D2C, 0x1716, 0x0100);
#endif
    const uint8_t *x[4];
    __m512 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps(), x[t] = vx[t];
    const int64_t nb = n / 32, ng = nb / 4;
    for (int64_t g = 0; g < ng; g++) {
        const char *p = (const char *)(wb + (size_t)(4 * g) * bb);
        hm_prefetch_w(p);
        hm_prefetch_w(p + 64);
        if (bb * 4 > 128) hm_prefetch_w(p + 128);
        __m512i a01, a23;
        __m128 d4;
#if defined(__AVX512VBMI__)
        if (kind == HM_X4_Q8_0) {
            const __m512i r0 = _mm512_loadu_si512(p), r1 = _mm512_loadu_si512(p + 64);
            const __m512i r2 = _mm512_loadu_si512(p + 72);
            a01 = _mm512_permutex2var_epi8(r0, i01, r1);
            a23 = _mm512_permutex2var_epi8(r1, i23, r2);
            d4 = _mm_cvtph_ps(_mm512_castsi512_si128(_mm512_permutex2var_epi8(r0, id, r1)));
        } else if (nib4) {
            const __m512i r0 = _mm512_loadu_si512(p);
            const __m512i r1 = _mm512_loadu_si512(p + 4 * bb - 64);
            a01 = _mm512_permutexvar_epi8(
                _mm512_multishift_epi64_epi8(nctl, _mm512_permutex2var_epi8(r0, ni01, r1)), table);
            a23 = _mm512_permutexvar_epi8(
                _mm512_multishift_epi64_epi8(nctl, _mm512_permutex2var_epi8(r0, ni23, r1)), table);
            if (kind == HM_B32_MXFP4)
                d4 = hm_e8m0x4_f32_half_avx512(
                    _mm512_castsi512_si128(_mm512_maskz_permutexvar_epi8(0x1111, se, r0)));
            else
                d4 = _mm_cvtph_ps(
                    _mm512_castsi512_si128(_mm512_maskz_permutexvar_epi8(0xFF, sh, r0)));
        } else if (q5) {
            /* the low four bits as Q4_0's; the fifth (bit j of a block's qh is code j's) spread
             * to the interleaved lanes (code 4m + r of block q at byte 8m + 4q + r), and the
             * codes without it less 16 */
            const __m512i r0 = _mm512_loadu_si512(p), r1 = _mm512_loadu_si512(p + 24);
            const __m512i lo = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
            uint32_t qh[4];
            for (int q = 0; q < 4; q++) memcpy(&qh[q], p + 22 * q + 2, 4);
            const __mmask64 h01 = _cvtu64_mask64(_pdep_u64(qh[0], 0x0F0F0F0F0F0F0F0Full) |
                                                 _pdep_u64(qh[1], 0xF0F0F0F0F0F0F0F0ull));
            const __mmask64 h23 = _cvtu64_mask64(_pdep_u64(qh[2], 0x0F0F0F0F0F0F0F0Full) |
                                                 _pdep_u64(qh[3], 0xF0F0F0F0F0F0F0F0ull));
            const __m512i c01 = _mm512_and_si512(
                _mm512_multishift_epi64_epi8(nctl, _mm512_permutex2var_epi8(r0, ni01, r1)), lo);
            const __m512i c23 = _mm512_and_si512(
                _mm512_multishift_epi64_epi8(nctl, _mm512_permutex2var_epi8(r0, ni23, r1)), lo);
            a01 = _mm512_mask_sub_epi8(c01, _knot_mask64(h01), c01, sixteen);
            a23 = _mm512_mask_sub_epi8(c23, _knot_mask64(h23), c23, sixteen);
            d4 = _mm_cvtph_ps(
                _mm512_castsi512_si128(_mm512_maskz_permutex2var_epi8(0xFF, r0, s5, r1)));
        } else
#endif
        {
            a01 = hm_x4_pair_avx512(kind, vw, 4 * g, table, il2, il1);
            a23 = hm_x4_pair_avx512(kind, vw, 4 * g + 2, table, il2, il1);
            d4 = hm_x4_d4(kind, vw, 4 * g, 4);
        }
        const __m512 wd01 = _mm512_permutexvar_ps(s01, _mm512_castps128_ps512(d4));
        const __m512 wd23 = _mm512_permutexvar_ps(s23, _mm512_castps128_ps512(d4));
        const __m512i n01 = hm_q8_0x4_offset(a01), n23 = hm_q8_0x4_offset(a23);
        for (int t = 0; t < nt; t++) {
            const uint8_t *xg = x[t] + HM_Q8_0X4_GROUP * g;
            const float *xd = (const float *)(xg + 128);
            acc[t] = hm_q8_0x4_step(acc[t], a01, n01, wd01, xg, xd);
            acc[t] = hm_q8_0x4_step(acc[t], a23, n23, wd23, xg + 64, xd + 2);
        }
    }
    const int k = (int)(nb - 4 * ng); /* the last group's blocks (0-3) */
    if (k >= 2) {                     /* its pair */
        const __m512i a = hm_x4_pair_avx512(kind, vw, 4 * ng, table, il2, il1);
        const __m512 wd =
            _mm512_permutexvar_ps(s01, _mm512_castps128_ps512(hm_x4_d4(kind, vw, 4 * ng, 2)));
        const __m512i nc = hm_q8_0x4_offset(a);
        for (int t = 0; t < nt; t++) {
            const uint8_t *xg = x[t] + HM_Q8_0X4_GROUP * ng;
            acc[t] = hm_q8_0x4_step(acc[t], a, nc, wd, xg, (const float *)(xg + 32 * k));
        }
    }
    if (k % 2) { /* a lone block */
        const int64_t i = 4 * ng + k - 1;
        const __m512i a = hm_x4_lone_avx512(kind, vw, i, table);
        const __m512i nc = hm_q8_0x4_offset(a);
        const float wd = _mm_cvtss_f32(hm_x4_d4(kind, vw, i, 1));
        for (int t = 0; t < nt; t++) {
            const uint8_t *xg = x[t] + HM_Q8_0X4_GROUP * ng;
            /* its 32 codes (a masked load: nothing past them is touched) */
            const __m512i xc = _mm512_maskz_loadu_epi8(0xFFFFFFFFull, xg + 64 * (k / 2));
            float xd;
            memcpy(&xd, xg + 32 * k + 4 * (k - 1), sizeof xd);
            const __m512i pr = _mm512_dpbusd_epi32(nc, xc, a);
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(wd * xd), _mm512_cvtepi32_ps(pr), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) out[t] = _mm512_reduce_add_ps(acc[t]);
}

static inline __attribute__((always_inline)) void
hm_q8_0_rows_avx512(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    hm_x4_rows_avx512(HM_X4_Q8_0, n, vw, vx, nt, out);
}
HM_DOT_ENTRIES(q8_0_q8_0_avx512, hm_q8_0_rows_avx512)

#define HM_B32_ROWS(NAME, KIND)                                                                    \
    static inline __attribute__((always_inline)) void hm_##NAME##_rows_avx512(                     \
        int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {              \
        hm_x4_rows_avx512(KIND, n, vw, vx, nt, out);                                               \
    }                                                                                              \
    HM_DOT_ENTRIES(NAME##_q8_0_avx512, hm_##NAME##_rows_avx512)
HM_B32_ROWS(iq4_nl, HM_B32_IQ4_NL)
HM_B32_ROWS(mxfp4, HM_B32_MXFP4)
HM_B32_ROWS(q4_0, HM_B32_Q4_0)
HM_B32_ROWS(q5_0, HM_B32_Q5_0)
#undef HM_B32_ROWS

/* 32 FP8 E4M3 codes as halves of value fp8 / 256 (hm_fp8x8_avx2), in 16-bit lanes: the sign
 * from v << 8, the other 7 bits from (v & 0x7f) << 7 (one ternary-logic merge); NaN codes get
 * an all-ones exponent */
static inline __m512i hm_fp8x32_half_avx512(const uint8_t *q) {
    const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)q));
    const __m512i mag = _mm512_and_si512(v, _mm512_set1_epi16(0x7f));
    /* (sign & 0x8000) | magnitude: imm 0xEC is (A & C) | B with A = v << 8, B = mag << 7 */
    const __m512i h = _mm512_ternarylogic_epi32(_mm512_slli_epi16(v, 8), _mm512_slli_epi16(mag, 7),
                                                _mm512_set1_epi16((short)0x8000), 0xEC);
    const __mmask32 nan = _mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7f));
    return _mm512_mask_mov_epi16(h, nan, _mm512_set1_epi16(0x7e00));
}

/* FP8_B128 row times nt (1-4) float activation rows: the codes of each 64-value step converted
 * once for all of them (same per-token operations whatever nt, as hm_q4_K_rows_avx512) */
static inline __attribute__((always_inline)) void
hm_fp8_rows_avx512(int64_t n, const void *vw, const void *const *vx, const int nt, float *out) {
    const hm_block_fp8_b128 *w = vw;
    __m512 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / HM_FP8_TILE; i++) {
        hm_prefetch_w((const char *)(w + i));
        hm_prefetch_w((const char *)(w + i) + 64);
        hm_prefetch_w((const char *)(w + i) + 128);
        __m512 b[4][4];
        for (int t = 0; t < nt; t++) b[t][0] = b[t][1] = b[t][2] = b[t][3] = _mm512_setzero_ps();
        for (int j = 0; j < HM_FP8_TILE; j += 64) {
            const __m512i h0 = hm_fp8x32_half_avx512(w[i].qs + j),
                          h1 = hm_fp8x32_half_avx512(w[i].qs + j + 32);
            const __m512 f0 = _mm512_cvtph_ps(_mm512_castsi512_si256(h0)),
                         f1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h0, 1)),
                         f2 = _mm512_cvtph_ps(_mm512_castsi512_si256(h1)),
                         f3 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h1, 1));
            for (int t = 0; t < nt; t++) {
                const float *x = (const float *)vx[t] + i * HM_FP8_TILE + j;
                b[t][0] = _mm512_fmadd_ps(f0, _mm512_loadu_ps(x), b[t][0]);
                b[t][1] = _mm512_fmadd_ps(f1, _mm512_loadu_ps(x + 16), b[t][1]);
                b[t][2] = _mm512_fmadd_ps(f2, _mm512_loadu_ps(x + 32), b[t][2]);
                b[t][3] = _mm512_fmadd_ps(f3, _mm512_loadu_ps(x + 48), b[t][3]);
            }
        }
        const __m512 d = _mm512_set1_ps(w[i].d * 256.0f);
        for (int t = 0; t < nt; t++)
            acc[t] = _mm512_fmadd_ps(
                _mm512_add_ps(_mm512_add_ps(b[t][0], b[t][1]), _mm512_add_ps(b[t][2], b[t][3])), d,
                acc[t]);
    }
    for (int t = 0; t < nt; t++) out[t] = _mm512_reduce_add_ps(acc[t]);
}

HM_DOT_ENTRIES(fp8_b128_f32_avx512, hm_fp8_rows_avx512)

/* Float weights (F32, BF16, F16) against float activations, one row and NT (1-4) activation
 * rows: four accumulators per activation row over 64-element steps, then 16-element steps into
 * the first and a masked tail into the second; each weight vector is loaded and converted once
 * for all NT. One template for every NT, so a row's result does not depend on NT. */
#define HM_FLOAT_ROWS_AVX512(NAME, WT, LOADW, MLOADW)                                              \
    static inline __attribute__((always_inline)) void NAME(                                        \
        int64_t n, const void *vw, const void *const *vx, int nt, float *out) {                    \
        const WT *w = vw;                                                                          \
        const float *x[4];                                                                         \
        __m512 a[4][4];                                                                            \
        for (int t = 0; t < nt; t++) {                                                             \
            x[t] = vx[t];                                                                          \
            a[t][0] = a[t][1] = a[t][2] = a[t][3] = _mm512_setzero_ps();                           \
        }                                                                                          \
        int64_t i = 0;                                                                             \
        for (; i + 64 <= n; i += 64) {                                                             \
            hm_prefetch_w((const char *)(w + i));                                                  \
            hm_prefetch_w((const char *)(w + i) + 64);                                             \
            const __m512 w0 = LOADW(w + i), w1 = LOADW(w + i + 16), w2 = LOADW(w + i + 32),        \
                         w3 = LOADW(w + i + 48);                                                   \
            for (int t = 0; t < nt; t++) {                                                         \
                a[t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + i), a[t][0]);                 \
                a[t][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[t] + i + 16), a[t][1]);            \
                a[t][2] = _mm512_fmadd_ps(w2, _mm512_loadu_ps(x[t] + i + 32), a[t][2]);            \
                a[t][3] = _mm512_fmadd_ps(w3, _mm512_loadu_ps(x[t] + i + 48), a[t][3]);            \
            }                                                                                      \
        }                                                                                          \
        for (; i + 16 <= n; i += 16) {                                                             \
            const __m512 w0 = LOADW(w + i);                                                        \
            for (int t = 0; t < nt; t++)                                                           \
                a[t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + i), a[t][0]);                 \
        }                                                                                          \
        if (i < n) {                                                                               \
            const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                                  \
            const __m512 w0 = MLOADW(m, w + i);                                                    \
            for (int t = 0; t < nt; t++)                                                           \
                a[t][1] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, x[t] + i), a[t][1]);        \
        }                                                                                          \
        for (int t = 0; t < nt; t++)                                                               \
            out[t] = _mm512_reduce_add_ps(                                                         \
                _mm512_add_ps(_mm512_add_ps(a[t][0], a[t][1]), _mm512_add_ps(a[t][2], a[t][3])));  \
    }

#define HM_LOADW_F32(p)     _mm512_loadu_ps(p)
#define HM_MLOADW_F32(m, p) _mm512_maskz_loadu_ps(m, p)
#define HM_LOADW_BF16(p)                                                                           \
    _mm512_castsi512_ps(                                                                           \
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define HM_MLOADW_BF16(m, p)                                                                       \
    _mm512_castsi512_ps(                                                                           \
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16))
#define HM_LOADW_F16(p)     _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define HM_MLOADW_F16(m, p) _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p))

HM_FLOAT_ROWS_AVX512(hm_f32_rows_avx512, float, HM_LOADW_F32, HM_MLOADW_F32)
HM_FLOAT_ROWS_AVX512(hm_bf16_rows_avx512, uint16_t, HM_LOADW_BF16, HM_MLOADW_BF16)
HM_FLOAT_ROWS_AVX512(hm_f16_rows_avx512, uint16_t, HM_LOADW_F16, HM_MLOADW_F16)
#undef HM_FLOAT_ROWS_AVX512

/* Four rows by six tokens (hm_vec_dot_46_fn): the one-row kernel's accumulator j (j = 0..3: the
 * 16 values at 16 j of every 64-value step; then 0 takes the 16-value steps and 1 the masked
 * tail, as there) in pass j, 24 of them (4 rows x 6 tokens) at once in registers, then the same
 * sums and reduction per row and token. */
#define HM_FLOAT_46_AVX512(NAME, WT, LOADW, MLOADW)                                                \
    static inline void NAME(int64_t n, const void *vw, size_t row_bytes, const void *const *vx,    \
                            float *out) {                                                          \
        const WT *w[4];                                                                            \
        const float *x[6];                                                                         \
        for (int r = 0; r < 4; r++) w[r] = (const WT *)((const char *)vw + (size_t)r * row_bytes); \
        for (int t = 0; t < 6; t++) x[t] = vx[t];                                                  \
        _Alignas(64) float part[4][4][6][16]; /* [accumulator][row][token] */                      \
        const int64_t n64 = n / 64 * 64, n16 = n64 + (n - n64) / 16 * 16;                          \
        for (int j = 0; j < 4; j++) {                                                              \
            __m512 a[4][6];                                                                        \
            _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                                    \
                _Pragma("GCC unroll 6") for (int t = 0; t < 6; t++) a[r][t] = _mm512_setzero_ps(); \
            /* this accumulator's 16 values of each 64-value step, then (j = 0) the 16-value       \
             * steps */                                                                            \
            const int64_t lim = j == 0 ? n16 : n64;                                                \
            for (int64_t i = 16 * j; i < lim; i += i < n64 ? 64 : 16) {                            \
                __m512 wv[4];                                                                      \
                _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) wv[r] = LOADW(w[r] + i);       \
                _Pragma("GCC unroll 6") for (int t = 0; t < 6; t++) {                              \
                    const __m512 xv = _mm512_loadu_ps(x[t] + i);                                   \
                    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) a[r][t] =                  \
                        _mm512_fmadd_ps(wv[r], xv, a[r][t]);                                       \
                }                                                                                  \
            }                                                                                      \
            if (j == 1 && n16 < n) {                                                               \
                const __mmask16 m = (__mmask16)((1u << (n - n16)) - 1);                            \
                __m512 wv[4];                                                                      \
                _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) wv[r] = MLOADW(m, w[r] + n16); \
                _Pragma("GCC unroll 6") for (int t = 0; t < 6; t++) {                              \
                    const __m512 xv = _mm512_maskz_loadu_ps(m, x[t] + n16);                        \
                    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) a[r][t] =                  \
                        _mm512_fmadd_ps(wv[r], xv, a[r][t]);                                       \
                }                                                                                  \
            }                                                                                      \
            _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                                    \
                _Pragma("GCC unroll 6") for (int t = 0; t < 6; t++)                                \
                    _mm512_store_ps(part[j][r][t], a[r][t]);                                       \
        }                                                                                          \
        for (int r = 0; r < 4; r++)                                                                \
            for (int t = 0; t < 6; t++)                                                            \
                out[t * 4 + r] = _mm512_reduce_add_ps(_mm512_add_ps(                               \
                    _mm512_add_ps(_mm512_load_ps(part[0][r][t]), _mm512_load_ps(part[1][r][t])),   \
                    _mm512_add_ps(_mm512_load_ps(part[2][r][t]), _mm512_load_ps(part[3][r][t])))); \
    }

HM_FLOAT_46_AVX512(hm_dot46_f32_f32_avx512, float, HM_LOADW_F32, HM_MLOADW_F32)
HM_FLOAT_46_AVX512(hm_dot46_bf16_f32_avx512, uint16_t, HM_LOADW_BF16, HM_MLOADW_BF16)
HM_FLOAT_46_AVX512(hm_dot46_f16_f32_avx512, uint16_t, HM_LOADW_F16, HM_MLOADW_F16)
#undef HM_FLOAT_46_AVX512
#undef HM_LOADW_F32
#undef HM_MLOADW_F32
#undef HM_LOADW_BF16
#undef HM_MLOADW_BF16
#undef HM_LOADW_F16
#undef HM_MLOADW_F16

HM_DOT_ENTRIES(f32_f32_avx512, hm_f32_rows_avx512)
HM_DOT_ENTRIES(bf16_f32_avx512, hm_bf16_rows_avx512)
HM_DOT_ENTRIES(f16_f32_avx512, hm_f16_rows_avx512)

/* y += a * x */
static inline void hm_axpy_f32_avx512(int64_t n, float a, const float *x, float *y) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i,
                         _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(
            y + i, m,
            _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

/* e^x for x in [-87.3, 88.7] (clamped): x = k ln2 + r, |r| <= ln2 / 2, e^r by a degree-6
 * Taylor polynomial (relative error < 2e-7 on that interval), times 2^k by scalef */
static inline __m512 hm_exp_ps_avx512(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, k);
}

static inline void hm_silu_mul_f32_avx512(int64_t n, float *g, const float *u) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        const __m512 e = hm_exp_ps_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x));
        const __m512 y =
            _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_maskz_loadu_ps(m, u + i));
        _mm512_mask_storeu_ps(g + i, m, y);
    }
}

/* attention blocks of 16 keys (hm_cpu_ops.qk_block16 / pv_block16) */
static inline void hm_qk_block16_avx512(const float *q, int nq, int hd, const float *kt,
                                        float scale, float *s, size_t s_stride) {
    const __m512 sc = _mm512_set1_ps(scale);
    int i = 0;
    /* 8 query rows: 8 independent FMA chains hide the FMA latency, one key load feeds 8 */
    for (; i + 8 <= nq; i += 8) {
        const float *q0 = q + (size_t)i * hd;
        __m512 a[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) a[r] = _mm512_setzero_ps();
        for (int d = 0; d < hd; d++) {
            const __m512 k = _mm512_loadu_ps(kt + d * 16);
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++)
                a[r] = _mm512_fmadd_ps(_mm512_set1_ps(q0[(size_t)r * hd + d]), k, a[r]);
        }
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            _mm512_storeu_ps(s + (size_t)(i + r) * s_stride, _mm512_mul_ps(a[r], sc));
    }
    for (; i < nq; i++) {
        __m512 a = _mm512_setzero_ps();
        for (int d = 0; d < hd; d++)
            a = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)i * hd + d]), _mm512_loadu_ps(kt + d * 16),
                                a);
        _mm512_storeu_ps(s + (size_t)i * s_stride, _mm512_mul_ps(a, sc));
    }
}

/* o_i[d0 .. d0 + 16 NC) += sum_j p_i[j] v_j for NC 16-wide chunks of one row: NC independent
 * accumulators, j in order (each output element sums exactly as the one-chunk loop did) */
#define HM_PV_CHUNKS(NC)                                                                           \
    do {                                                                                           \
        __m512 acc[NC];                                                                            \
        _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) acc[c] =                              \
            _mm512_loadu_ps(oi + d0 + 16 * c);                                                     \
        for (int j = 0; j < 16; j++) {                                                             \
            const __m512 pb = _mm512_set1_ps(pi[j]);                                               \
            const float *vj = v + (size_t)j * v_stride + d0;                                       \
            _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) acc[c] =                          \
                _mm512_fmadd_ps(pb, _mm512_loadu_ps(vj + 16 * c), acc[c]);                         \
        }                                                                                          \
        _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++)                                       \
            _mm512_storeu_ps(oi + d0 + 16 * c, acc[c]);                                            \
    } while (0)

static inline void hm_pv_block16_avx512(const float *p, size_t p_stride, int nq, const float *v,
                                        size_t v_stride, int hd, float *o, size_t o_stride) {
    for (int i = 0; i < nq; i++) {
        const float *pi = p + (size_t)i * p_stride;
        float *oi = o + (size_t)i * o_stride;
        int d0 = 0;
        for (; d0 + 128 <= hd; d0 += 128) HM_PV_CHUNKS(8);
        for (; d0 + 64 <= hd; d0 += 64) HM_PV_CHUNKS(4);
        for (; d0 + 16 <= hd; d0 += 16) HM_PV_CHUNKS(1);
        if (d0 < hd) {
            const __mmask16 m = (__mmask16)((1u << (hd - d0)) - 1);
            __m512 acc = _mm512_maskz_loadu_ps(m, oi + d0);
            for (int j = 0; j < 16; j++)
                acc = _mm512_fmadd_ps(_mm512_set1_ps(pi[j]),
                                      _mm512_maskz_loadu_ps(m, v + (size_t)j * v_stride + d0), acc);
            _mm512_mask_storeu_ps(oi + d0, m, acc);
        }
    }
}
#undef HM_PV_CHUNKS

/* sixteen vectors' sums in one: lane 4 h + b holds the sum of a[4 b + h]'s lanes (halves, then
 * quarters, then pairs and single lanes of pairs of vectors added: 30 shuffles and 15 adds, where
 * sixteen reductions take about 64 of each) */
static inline __m512 hm_sum16_avx512(const __m512 *a) {
    __m512 b[8], c[4], d[2];
    for (int i = 0; i < 8; i++) {
        const __m512 x = a[2 * i], y = a[2 * i + 1];
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xee));
    }
    for (int i = 0; i < 4; i++) {
        const __m512 x = b[2 * i], y = b[2 * i + 1];
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xdd));
    }
    for (int i = 0; i < 2; i++) {
        const __m512 x = c[2 * i], y = c[2 * i + 1];
        d[i] = _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x44), _mm512_shuffle_ps(x, y, 0xee));
    }
    return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xdd));
}

/* hm_cpu_ops.qk_rows16: tiles of 4 keys x 4 queries, 16 accumulators fed by 8 loads a 16-value
 * step (the one-row kernel with 4 queries takes 20 loads for its 16), summed by hm_sum16_avx512.
 * Short tiles repeat their last key or query and store only the real ones. */
static inline void hm_qk_rows16_avx512(const float *q, size_t q_stride, int nq, const float *k,
                                       size_t k_stride, int nk, int hd, float scale, float *s,
                                       size_t s_stride) {
    const __m512 sc = _mm512_set1_ps(scale);
    const int n16 = hd / 16 * 16;
    const __mmask16 tail = (__mmask16)((1u << (hd - n16)) - 1);
    for (int j0 = 0; j0 < nk; j0 += 4) {
        const int kn = nk - j0 < 4 ? nk - j0 : 4;
        const float *kr[4];
        for (int b = 0; b < 4; b++) kr[b] = k + (size_t)(j0 + (b < kn ? b : kn - 1)) * k_stride;
        for (int i0 = 0; i0 < nq; i0 += 4) {
            const int qn = nq - i0 < 4 ? nq - i0 : 4;
            const float *qr[4];
            for (int h = 0; h < 4; h++) qr[h] = q + (size_t)(i0 + (h < qn ? h : qn - 1)) * q_stride;
            __m512 a[16];
#pragma GCC unroll 16
            for (int u = 0; u < 16; u++) a[u] = _mm512_setzero_ps();
            for (int d = 0; d < n16; d += 16) {
                __m512 kv[4], qv[4];
#pragma GCC unroll 4
                for (int b = 0; b < 4; b++) kv[b] = _mm512_loadu_ps(kr[b] + d);
#pragma GCC unroll 4
                for (int h = 0; h < 4; h++) qv[h] = _mm512_loadu_ps(qr[h] + d);
#pragma GCC unroll 4
                for (int b = 0; b < 4; b++)
#pragma GCC unroll 4
                    for (int h = 0; h < 4; h++)
                        a[4 * b + h] = _mm512_fmadd_ps(qv[h], kv[b], a[4 * b + h]);
            }
            if (tail) {
                __m512 kv[4], qv[4];
                for (int b = 0; b < 4; b++) kv[b] = _mm512_maskz_loadu_ps(tail, kr[b] + n16);
                for (int h = 0; h < 4; h++) qv[h] = _mm512_maskz_loadu_ps(tail, qr[h] + n16);
                for (int b = 0; b < 4; b++)
                    for (int h = 0; h < 4; h++)
                        a[4 * b + h] = _mm512_fmadd_ps(qv[h], kv[b], a[4 * b + h]);
            }
            /* lane 4 h + b: query i0 + h against key j0 + b */
            const __m512 r = _mm512_mul_ps(hm_sum16_avx512(a), sc);
            const __mmask8 m = (__mmask8)((1u << kn) - 1);
            float *o = s + (size_t)i0 * s_stride + j0;
            _mm_mask_storeu_ps(o, m, _mm512_extractf32x4_ps(r, 0));
            if (qn > 1) _mm_mask_storeu_ps(o + s_stride, m, _mm512_extractf32x4_ps(r, 1));
            if (qn > 2) _mm_mask_storeu_ps(o + 2 * s_stride, m, _mm512_extractf32x4_ps(r, 2));
            if (qn > 3) _mm_mask_storeu_ps(o + 3 * s_stride, m, _mm512_extractf32x4_ps(r, 3));
        }
    }
}

/* x[i] = e^(x[i] - m) for i < n; returns their sum (softmax numerators) */
static inline float hm_expsum_f32_avx512(int64_t n, float *x, float m) {
    const __m512 vm = _mm512_set1_ps(m);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 e = hm_exp_ps_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm));
        _mm512_mask_storeu_ps(x + i, k, e);
        sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(k, e));
    }
    return _mm512_reduce_add_ps(sum);
}

/* max of x[0..n) and -FLT_MAX, NaNs skipped (max_ps returns its second operand when the first
 * is NaN) */
static inline float hm_max_f32_avx512(int64_t n, const float *x) {
    __m512 m = _mm512_set1_ps(-FLT_MAX);
    __mmask16 nan = 0;
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        m = _mm512_mask_max_ps(m, k, v, m); /* a NaN in v leaves m: tracked apart */
        nan |= _mm512_mask_cmp_ps_mask(k, v, v, _CMP_UNORD_Q);
    }
    return nan ? NAN : _mm512_reduce_max_ps(m);
}

static inline void hm_scale_f32_avx512(int64_t n, float a, float *x) {
    const __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), va));
    }
}

/* a 16-bit vector (BF16 or IEEE half, the lanes of k) widened to floats */
static inline __m512 hm_load_h16_avx512(__mmask16 k, const uint16_t *p, bool bf16) {
    const __m256i h = _mm256_maskz_loadu_epi16(k, p);
    return bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                : _mm512_cvtph_ps(h);
}

static inline void hm_axpy_h_avx512(int64_t n, float a, const uint16_t *x, bool bf16, float *y) {
    const __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, k,
                              _mm512_fmadd_ps(va, hm_load_h16_avx512(k, x + i, bf16),
                                              _mm512_maskz_loadu_ps(k, y + i)));
    }
}

/* ops.h's gemv_t_h: 128 columns at a time in eight accumulators, then 16 (the last masked); every
 * column's sum in increasing r, as plain C's */
static inline void hm_gemv_t_h_avx512(int64_t rows, int64_t cols, const float *x, const uint16_t *w,
                                      bool bf16, float *y) {
    int64_t c0 = 0;
    for (; c0 + 128 <= cols; c0 += 128) {
        __m512 acc[8];
        for (int v = 0; v < 8; v++) acc[v] = _mm512_setzero_ps();
        for (int64_t r = 0; r < rows; r++) {
            const __m512 xv = _mm512_set1_ps(x[r]);
            const uint16_t *wr = w + r * cols + c0;
            for (int v = 0; v < 8; v++)
                acc[v] = _mm512_fmadd_ps(xv, hm_load_h16_avx512(0xFFFF, wr + 16 * v, bf16), acc[v]);
        }
        for (int v = 0; v < 8; v++) _mm512_storeu_ps(y + c0 + 16 * v, acc[v]);
    }
    for (; c0 < cols; c0 += 16) {
        const __mmask16 k =
            cols - c0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cols - c0)) - 1);
        __m512 acc = _mm512_setzero_ps();
        for (int64_t r = 0; r < rows; r++)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(x[r]),
                                  hm_load_h16_avx512(k, w + r * cols + c0, bf16), acc);
        _mm512_mask_storeu_ps(y + c0, k, acc);
    }
}

/* IEEE half <-> float, 16 at a time, masked tails */
static inline void hm_f16_to_f32_avx512(int64_t n, const uint16_t *x, float *y) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, k, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, x + i)));
    }
}

static inline void hm_f32_to_f16_avx512(int64_t n, const float *x, uint16_t *y) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(
            y + i, k, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, x + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

/* RMSNorm with the sum of squares in double: 4 chains of 8 doubles, a masked tail */
static inline void hm_rmsnorm_f32_avx512(int64_t n, const float *x, const float *w, float *y,
                                         float eps) {
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 u = _mm512_loadu_ps(x + i), v = _mm512_loadu_ps(x + i + 16);
        const __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(u)),
                      d1 = _mm512_cvtps_pd(
                          _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(u), 1))),
                      d2 = _mm512_cvtps_pd(_mm512_castps512_ps256(v)),
                      d3 = _mm512_cvtps_pd(
                          _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        a0 = _mm512_fmadd_pd(d0, d0, a0);
        a1 = _mm512_fmadd_pd(d1, d1, a1);
        a2 = _mm512_fmadd_pd(d2, d2, a2);
        a3 = _mm512_fmadd_pd(d3, d3, a3);
    }
    for (; i < n; i += 8) {
        const __mmask8 k = n - i >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - i)) - 1);
        const __m512d d = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, x + i));
        a0 = _mm512_fmadd_pd(d, d, a0);
    }
    const double ss =
        _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
    const __m512 r = _mm512_set1_ps((float)(1.0 / sqrt(ss / (double)n + (double)eps)));
    for (i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), r);
        if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, w + i));
        _mm512_mask_storeu_ps(y + i, k, v);
    }
}

/* Activation quantizers, the contract of the AVX2 ones (bit for bit the reference): 16 values
 * per vector, the clamp through the saturating narrowing; a NaN product codes 0 */
static inline __m512i hm_quant16_avx512(__m512 x, __m512 s) {
    const __m512 v = _mm512_mul_ps(x, s);
    return _mm512_maskz_cvtps_epi32(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
}

static inline void hm_quant_q8_0_avx512(const float *x, void *vy, int64_t n) {
    hm_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / HM_QK8_0; i++, x += HM_QK8_0) {
        const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
        /* NaNs skipped: MAXPS returns its second operand for a NaN */
        const __m512 m =
            _mm512_max_ps(_mm512_abs_ps(b), _mm512_max_ps(_mm512_abs_ps(a), _mm512_setzero_ps()));
        const float d = _mm512_reduce_max_ps(m) / 127.0f, id = d ? 1.0f / d : 0.0f;
        const __m512 s = _mm512_set1_ps(id);
        y[i].d = hm_f32_to_f16(d);
        _mm_storeu_si128((__m128i *)y[i].qs, _mm512_cvtsepi32_epi8(hm_quant16_avx512(a, s)));
        _mm_storeu_si128((__m128i *)(y[i].qs + 16), _mm512_cvtsepi32_epi8(hm_quant16_avx512(b, s)));
    }
}

static inline void hm_quant_q8_K_avx512(const float *x, void *vy, int64_t n) {
    hm_block_q8_K *y = vy;
    const __m512i lo = _mm512_set1_epi32(-128), hi = _mm512_set1_epi32(127);
    for (int64_t i = 0; i < n / HM_QK_K; i++, x += HM_QK_K) {
        __m512 m = _mm512_setzero_ps();
        for (int j = 0; j < HM_QK_K / 16; j++)
            m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * j)), m);
        const float amax = _mm512_reduce_max_ps(m);
        if (amax == 0) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float max = amax; /* the first value of largest magnitude, with its sign */
        const __m512 va = _mm512_set1_ps(amax);
        for (int j = 0; j < HM_QK_K / 16; j++) {
            const __mmask16 k =
                _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * j)), va, _CMP_EQ_OQ);
            if (k) {
                max = x[16 * j + __builtin_ctz((unsigned)k)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m512 s = _mm512_set1_ps(iscale);
        for (int j = 0; j < HM_QK_K / 16; j++) {
            const __m512i q = _mm512_min_epi32(
                _mm512_max_epi32(hm_quant16_avx512(_mm512_loadu_ps(x + 16 * j), s), lo), hi);
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * j), _mm512_cvtepi32_epi8(q));
            y[i].bsums[j] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        y[i].d = 1.0f / iscale;
    }
}

/* kernel table entries of this ISA (hm_cpu_ops.vec_dot), shared by the variants using it */
#define HM_VEC_DOTS_AVX512                                                                         \
    [HM_TYPE_F32] = hm_dot_f32_f32_avx512, [HM_TYPE_F16] = hm_dot_f16_f32_avx512,                  \
    [HM_TYPE_Q4_K] = hm_dot_q4_K_q8_K_avx512, [HM_TYPE_Q8_0] = hm_dot_q8_0_q8_0_avx512,            \
    [HM_TYPE_BF16] = hm_dot_bf16_f32_avx512, [HM_TYPE_Q6_K] = hm_dot_q6_K_q8_K_avx512,             \
    [HM_TYPE_MXFP4] = hm_dot_mxfp4_q8_0_avx512, [HM_TYPE_IQ4_XS] = hm_dot_iq4_xs_q8_K_avx512,      \
    [HM_TYPE_Q5_K] = hm_dot_q5_K_q8_K_avx512, [HM_TYPE_Q4_0] = hm_dot_q4_0_q8_0_avx512,            \
    [HM_TYPE_IQ4_NL] = hm_dot_iq4_nl_q8_0_avx512, [HM_TYPE_Q5_0] = hm_dot_q5_0_q8_0_avx512,        \
    [HM_TYPE_FP8_B128] = hm_dot_fp8_b128_f32_avx512, [HM_TYPE_Q2_K] = hm_dot_q2_K_q8_K_avx512,     \
    [HM_TYPE_Q3_K] = hm_dot_q3_K_q8_K_avx512, [HM_TYPE_Q4_1] = hm_dot_q4_1_q8_0_avx2,              \
    [HM_TYPE_Q5_1] = hm_dot_q5_1_q8_0_avx2

/* multi-token dot products (hm_cpu_ops.vec_dot_n) of the AVX-512 kernels */
#define HM_VEC_DOTNS_AVX512                                                                        \
    [HM_TYPE_Q4_K] = hm_dotn_q4_K_q8_K_avx512, [HM_TYPE_Q8_0] = hm_dotn_q8_0_q8_0_avx512,          \
    [HM_TYPE_Q6_K] = hm_dotn_q6_K_q8_K_avx512, [HM_TYPE_FP8_B128] = hm_dotn_fp8_b128_f32_avx512,   \
    [HM_TYPE_IQ4_XS] = hm_dotn_iq4_xs_q8_K_avx512, [HM_TYPE_Q5_K] = hm_dotn_q5_K_q8_K_avx512,      \
    [HM_TYPE_F32] = hm_dotn_f32_f32_avx512, [HM_TYPE_BF16] = hm_dotn_bf16_f32_avx512,              \
    [HM_TYPE_F16] = hm_dotn_f16_f32_avx512, [HM_TYPE_Q2_K] = hm_dotn_q2_K_q8_K_avx512,             \
    [HM_TYPE_IQ4_NL] = hm_dotn_iq4_nl_q8_0_avx512, [HM_TYPE_MXFP4] = hm_dotn_mxfp4_q8_0_avx512,    \
    [HM_TYPE_Q4_0] = hm_dotn_q4_0_q8_0_avx512, [HM_TYPE_Q5_0] = hm_dotn_q5_0_q8_0_avx512,          \
    [HM_TYPE_Q3_K] = hm_dotn_q3_K_q8_K_avx512, [HM_TYPE_Q4_1] = hm_dotn_q4_1_q8_0_avx2,            \
    [HM_TYPE_Q5_1] = hm_dotn_q5_1_q8_0_avx2

/* Every K-quant kernel here takes Q8_KX activations (the sums serve hm_q4_K_rows_avx512 and
 * hm_q5_K_rows_avx512; the others read the Q8_K part), the 32-block kernels of hm_x4_rows_avx512
 * Q8_0X4; Q4_1 and Q5_1 run the AVX2 kernels on plain Q8_0. */
static inline uint32_t hm_act_type_avx512(uint32_t weight_type) {
    const uint32_t plain = hm_act_type_for(NULL, weight_type);
    if (plain == HM_TYPE_Q8_K) return HM_TYPE_Q8_KX;
    if (plain == HM_TYPE_Q8_0 && weight_type != HM_TYPE_Q4_1 && weight_type != HM_TYPE_Q5_1)
        return HM_TYPE_Q8_0X4;
    return plain;
}

/* hm_cpu_ops.peak_ops of the avx512 table (and the amx table's float kind): VPDPBUSD on 12
 * chains (latency 5, one per cycle at 512 bits), or FMA on 12 */
static inline double hm_peak_ops_avx512(hm_peak_kind kind, int64_t iters) {
    if (kind == HM_PEAK_I8) {
        const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
        __m512i c[12];
        for (int j = 0; j < 12; j++) c[j] = _mm512_set1_epi32(j);
        for (int64_t i = 0; i < iters; i++)
            for (int j = 0; j < 12; j++) c[j] = _mm512_dpbusd_epi32(c[j], a, b);
        __m512i s = c[0];
        for (int j = 1; j < 12; j++) s = _mm512_add_epi32(s, c[j]);
        volatile int sink = _mm512_reduce_add_epi32(s);
        (void)sink;
        return 2.0 * 12 * 64 * (double)iters;
    }
    const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-3f);
    __m512 c[12];
    for (int j = 0; j < 12; j++) c[j] = _mm512_set1_ps((float)j);
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 12; j++) c[j] = _mm512_fmadd_ps(c[j], x, y);
    __m512 s = c[0];
    for (int j = 1; j < 12; j++) s = _mm512_add_ps(s, c[j]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return 2.0 * 12 * 16 * (double)iters;
}

/* hm_cpu_ops.vec_dot_46 of the avx512 and amx variants */
#define HM_VEC_DOT46S_AVX512                                                                       \
    [HM_TYPE_F32] = hm_dot46_f32_f32_avx512, [HM_TYPE_BF16] = hm_dot46_bf16_f32_avx512,            \
    [HM_TYPE_F16] = hm_dot46_f16_f32_avx512

/* the hm_cpu_ops entries the avx512 and amx variants share */
#define HM_OPS_AVX512_COMMON                                                                       \
    .sum_u64 = hm_sum_u64_avx512, .vec_dot = {HM_VEC_DOTS_AVX512},                                 \
    .vec_dot_n = {HM_VEC_DOTNS_AVX512}, .vec_dot_46 = {HM_VEC_DOT46S_AVX512},                      \
    .axpy_f32 = hm_axpy_f32_avx512, .axpy_h = hm_axpy_h_avx512, .gemv_t_h = hm_gemv_t_h_avx512,    \
    .silu_mul_f32 = hm_silu_mul_f32_avx512, .expsum_f32 = hm_expsum_f32_avx512,                    \
    .max_f32 = hm_max_f32_avx512, .scale_f32 = hm_scale_f32_avx512,                                \
    .f16_to_f32 = hm_f16_to_f32_avx512, .f32_to_f16 = hm_f32_to_f16_avx512,                        \
    .quant_q8_0 = hm_quant_q8_0_avx512, .quant_q8_K = hm_quant_q8_K_avx512,                        \
    .rmsnorm_f32 = hm_rmsnorm_f32_avx512, .qk_block16 = hm_qk_block16_avx512,                      \
    .pv_block16 = hm_pv_block16_avx512, .qk_rows16 = hm_qk_rows16_avx512,                          \
    .act_type = hm_act_type_avx512

#endif
