/* i8_units.h - the int8 weight units and packed activations that the AMX tile and the AVX-512
 * VNNI matmuls share (amx.c, vnni.c), and their driver over 32-row units; include only from files
 * compiled with AVX-512 flags. */
#ifndef HM_CPU_X86_I8_UNITS_H
#define HM_CPU_X86_I8_UNITS_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/ops.h"

#define AMX_G HM_AMX_GROUP /* scale group (values) */

typedef struct {
    int64_t kp;   /* cols rounded up to 64 (zero padded) */
    int64_t ngrp; /* scale groups per row */
    int tp;       /* 32-token pairs of tile groups */
    int8_t *q;    /* [tp * 2][kp / 4][16][4] */
    float *dx;    /* [tp * 2][ngrp][16] */
} amx_act;

static inline uintptr_t align64(uintptr_t p) {
    return (p + 63) & ~(uintptr_t)63;
}

static inline amx_act act_layout(int64_t cols, int n_tok, const void *packed) {
    amx_act a;
    a.kp = (cols + 63) / 64 * 64;
    a.ngrp = (cols + AMX_G - 1) / AMX_G;
    a.tp = (n_tok + 31) / 32;
    uintptr_t p = align64((uintptr_t)packed);
    a.q = (int8_t *)p;
    a.dx = (float *)(p + (size_t)a.tp * 32 * (size_t)a.kp);
    return a;
}

/* One 32-row weight unit, the layout hm_amx_wpack stores and the per-call path converts into:
 * A [2][kp / 64][16][64] int8 (each A tile one contiguous KiB: strided tile loads were 3x slower
 * on the device) then sw [ngrp][32] float scales. */
static inline size_t unit_bytes(int64_t cols) {
    const int64_t kp = (cols + 63) / 64 * 64, ngrp = (cols + AMX_G - 1) / AMX_G;
    return (size_t)(32 * kp) + (size_t)ngrp * 32 * sizeof(float);
}

/* Token pairs folded together per pass over a weight unit's 256-value chunk: the chunk (8 KiB)
 * then stays in L1 while AMX_TB pairs use it. */
#define AMX_TB 4

/* scratch: one unit (the per-call conversion), acc and acc2 [AMX_TB][32 rows][32 tokens] (acc2:
 * the up projection of the fused GLU), cbuf [4][16][16], wrow [cols] */
typedef struct {
    int8_t *A;
    float *sw, *acc, *acc2, *wrow;
    int32_t *cbuf;
} amx_scratch;

static inline amx_scratch scratch_layout(int64_t cols, void *base) {
    const int64_t kp = (cols + 63) / 64 * 64;
    amx_scratch s;
    uintptr_t p = align64((uintptr_t)base);
    s.A = (int8_t *)p;
    s.sw = (float *)(p + 32 * (size_t)kp);
    p = align64(p + unit_bytes(cols));
    s.acc = (float *)p;
    p += AMX_TB * 32 * 32 * sizeof(float);
    s.acc2 = (float *)p;
    p += AMX_TB * 32 * 32 * sizeof(float);
    s.cbuf = (int32_t *)p;
    p += 4 * 256 * sizeof(int32_t);
    s.wrow = (float *)p;
    return s;
}

/* rows rg..rg+nr-1 (nr <= 32) -> one unit (amx.c) */
void hm_amx_convert_rows(uint32_t type, const uint8_t *w, size_t row_bytes, int64_t cols, int nr,
                         int8_t *unit, float *wrow);

/* One unit's products for every token: y[t][r] (r < nr) (amx_unit on tiles, vnni_unit) */
typedef void (*i8_unit_fn)(const amx_act *a, const int8_t *A, const float *sw, int n_tok, int nr,
                           float *y, size_t y_stride, const amx_scratch *s);

/* The int8 matmul of rows [r0, r1) (clamped to rows) in 32-row units, on tiles or with VNNI
 * (unit_fn, a constant at each call): each unit converted per call from the weights (w,
 * row_bytes) into scratch, or read from the repacked units wp. */
static inline __attribute__((always_inline)) void
i8_matmul_units(i8_unit_fn unit_fn, uint32_t type, const void *w, size_t row_bytes, const void *wp,
                int64_t rows, int64_t cols, int64_t r0, int64_t r1, const void *packed, int n_tok,
                float *y, size_t y_stride, void *scratch) {
    const amx_act a = act_layout(cols, n_tok, packed);
    const amx_scratch s = scratch_layout(cols, scratch);
    const size_t ub = unit_bytes(cols);
    if (r1 > rows) r1 = rows;
    for (int64_t rg = r0; rg < r1; rg += 32) {
        const int nr = (int)(r1 - rg < 32 ? r1 - rg : 32);
        const int8_t *unit = s.A;
        if (wp)
            unit = (const int8_t *)wp + (size_t)(rg / 32) * ub;
        else
            hm_amx_convert_rows(type, (const uint8_t *)w + (size_t)rg * row_bytes, row_bytes, cols,
                                nr, s.A, s.wrow);
        const float *sw = (const float *)(unit + 32 * a.kp);
        unit_fn(&a, unit, sw, n_tok, nr, y + (rg - r0), y_stride, &s);
    }
}

#endif
