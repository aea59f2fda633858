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
