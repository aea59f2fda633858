/* amx.c - AMX (TILE/INT8/BF16) kernel variant; streaming ops reuse the AVX-512 code. */
#include <immintrin.h>
#include <string.h>

#include "cpu/ops.h"
#include "cpu/x86/avx512_sum.h"
#include "cpu/x86/kq_avx512.h"

static uint64_t sum_u64_amx(const uint64_t *p, size_t n) {
    return hm_sum_u64_avx512(p, n);
}

const hm_cpu_ops hm_ops_amx = {
    .isa = HM_ISA_AMX,
    .name = "amx",
    .sum_u64 = sum_u64_amx,
    .vec_dot = {HM_VEC_DOTS_AVX512},
};

/* Palette-1 tile configuration (64 bytes, layout fixed by the ISA). */
typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

hm_status hm_amx_selftest(void) {
    const hm_cpu_features *f = hm_cpu_features_get();
    if (!hm_isa_supported(f, HM_ISA_AMX))
        return hm_errorf(HM_ERR_UNSUPPORTED, "AMX self-test: AMX not usable on this CPU/OS");
    enum { M = 16, N = 16, K = 64 };
    _Alignas(64) int8_t a[M][K];
    _Alignas(64) int8_t b[K][N];
    _Alignas(64) int8_t bv[K / 4][N][4]; /* VNNI layout: 4 consecutive k of one column */
    _Alignas(64) int32_t c[M][N];
    uint32_t s = 12345;
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) a[i][k] = (int8_t)((s = s * 1103515245u + 12345u) >> 24);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++) b[k][j] = (int8_t)((s = s * 1103515245u + 12345u) >> 24);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++) bv[k / 4][j][k % 4] = b[k][j];

    _Alignas(64) tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    cfg.rows[0] = M, cfg.colsb[0] = N * 4;     /* C: 16 x 16 int32 */
    cfg.rows[1] = M, cfg.colsb[1] = K;         /* A: 16 x 64 int8 */
    cfg.rows[2] = K / 4, cfg.colsb[2] = N * 4; /* B: 16 x (16 x 4) int8 */
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_loadd(1, a, K);
    _tile_loadd(2, bv, N * 4);
    _tile_dpbssd(0, 1, 2);
    _tile_stored(0, c, N * 4);
    _tile_release();

    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            int32_t ref = 0;
            for (int k = 0; k < K; k++) ref += (int32_t)a[i][k] * b[k][j];
            if (ref != c[i][j])
                return hm_errorf(HM_ERR_INTERNAL, "AMX self-test: C[%d][%d] = %d, expected %d", i,
                                 j, c[i][j], ref);
        }
    return HM_OK;
}

/* ---------------------------------------------------------------- AMX INT8 matmul, Q8_0 weights
 * Y[t][r] = sum_kb dx[t][kb] * dw[r][kb] * (X[t][kb] . W[r][kb]) for Q8_0 weights and Q8_0
 * activations. Each 32-value block pair is one TDPBSSD with K = 32 (the block scales forbid
 * accumulating across blocks in int32), scaled into float accumulators with AVX-512.
 * The caller packs the activations once (hm_amx_pack_act_q8_0) for all threads; each thread
 * repacks its 16-row weight groups into its own scratch. */

/* packed activations: A tiles [token group][kb][16 tokens][32 int8], then dx [token][kb] */
size_t hm_amx_q8_0_act_bytes(int64_t cols, int n_tok) {
    int64_t nb = cols / HM_QK8_0, tg = (n_tok + 15) / 16;
    return (size_t)(tg * 16 * nb * 32 + tg * 16 * nb * 4) + 64;
}

static int8_t *act_tiles(const void *packed) {
    return (int8_t *)(((uintptr_t)packed + 63) & ~(uintptr_t)63);
}

void hm_amx_pack_act_q8_0(const void *xq, size_t x_stride, int n_tok, int64_t cols, void *packed) {
    const int64_t nb = cols / HM_QK8_0;
    const int tg = (n_tok + 15) / 16;
    int8_t *A = act_tiles(packed);
    float *dx = (float *)(A + (size_t)tg * 16 * nb * 32);
    for (int t = 0; t < tg * 16; t++) { /* zero rows pad the last token group */
        const hm_block_q8_0 *xb =
            t < n_tok ? (const hm_block_q8_0 *)((const uint8_t *)xq + (size_t)t * x_stride) : NULL;
        for (int64_t kb = 0; kb < nb; kb++) {
            int8_t *dst = A + (((size_t)(t / 16) * nb + kb) * 16 + t % 16) * 32;
            if (xb)
                memcpy(dst, xb[kb].qs, 32);
            else
                memset(dst, 0, 32);
            dx[(size_t)t * nb + kb] = xb ? hm_h2f(xb[kb].d) : 0.0f;
        }
    }
}

/* per-thread weight tiles of one 16-row group: B [kb][8][16][4] int8 (VNNI), dw [kb][16] */
size_t hm_amx_q8_0_scratch_bytes(int64_t cols) {
    return (size_t)(cols / HM_QK8_0) * (512 + 64) + 64;
}

static void amx_config_q8_0(void) {
    _Alignas(64) tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    cfg.rows[0] = 16, cfg.colsb[0] = 64; /* C: 16 tokens x 16 rows int32 */
    cfg.rows[1] = 16, cfg.colsb[1] = 32; /* A: 16 tokens x 32 int8 */
    cfg.rows[2] = 8, cfg.colsb[2] = 64;  /* B: 8 x (16 rows x 4 int8) */
    _tile_loadconfig(&cfg);
}

void hm_amx_matmul_q8_0(const hm_block_q8_0 *w, size_t row_bytes, int64_t cols, int64_t r0,
                        int64_t r1, const void *packed_act, int n_tok, float *y, size_t y_stride,
                        void *scratch) {
    const int64_t nb = cols / HM_QK8_0;
    const int tg = (n_tok + 15) / 16;
    const int8_t *A = act_tiles(packed_act);
    const float *dx = (const float *)(A + (size_t)tg * 16 * nb * 32);
    int8_t *B = act_tiles(scratch);
    float *dw = (float *)(B + nb * 512);
    amx_config_q8_0();
    _Alignas(64) int32_t c[16][16];
    for (int64_t rg = r0; rg < r1; rg += 16) {
        /* weights of rows rg..rg+15 -> VNNI B tiles: B[kb][k/4][n][k%4] */
        for (int n = 0; n < 16; n++) {
            const hm_block_q8_0 *wr =
                (const hm_block_q8_0 *)((const uint8_t *)w + (size_t)(rg + n) * row_bytes);
            for (int64_t kb = 0; kb < nb; kb++) {
                dw[kb * 16 + n] = hm_h2f(wr[kb].d);
                const uint32_t *q = (const uint32_t *)(const void *)wr[kb].qs;
                uint32_t *bt = (uint32_t *)(void *)(B + kb * 512);
                for (int k4 = 0; k4 < 8; k4++) {
                    uint32_t v;
                    memcpy(&v, q + k4, 4);
                    memcpy(bt + k4 * 16 + n, &v, 4);
                }
            }
        }
        for (int g = 0; g < tg; g++) {
            __m512 acc[16];
            for (int m = 0; m < 16; m++) acc[m] = _mm512_setzero_ps();
            for (int64_t kb = 0; kb < nb; kb++) {
                _tile_zero(0);
                _tile_loadd(1, A + ((size_t)g * nb + kb) * 512, 32);
                _tile_loadd(2, B + kb * 512, 64);
                _tile_dpbssd(0, 1, 2);
                _tile_stored(0, c, 64);
                const __m512 dwv = _mm512_loadu_ps(dw + kb * 16);
                const float *dxg = dx + (size_t)g * 16 * nb + kb;
                for (int m = 0; m < 16; m++)
                    acc[m] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(_mm512_load_si512(c[m])),
                        _mm512_mul_ps(dwv, _mm512_set1_ps(dxg[(size_t)m * nb])), acc[m]);
            }
            for (int m = 0; m < 16 && g * 16 + m < n_tok; m++)
                _mm512_storeu_ps(y + (size_t)(g * 16 + m) * y_stride + rg, acc[m]);
        }
    }
    _tile_release();
}
