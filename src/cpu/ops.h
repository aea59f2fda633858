/* ops.h - the CPU kernel table: one entry per ISA variant, picked once from detected features
 * (HMOE_ISA forces one). Every entry point has a plain-C reference twin in ref.c. */
#ifndef HM_CPU_OPS_H
#define HM_CPU_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cpu.h"
#include "quant/blocks.h"
#include "quant/types.h"

/* Dot product of one weight row (n elements of the weight type) with one converted activation
 * vector (the type hm_act_type() names for that weight type). */
typedef float (*hm_vec_dot_fn)(int64_t n, const void *w_row, const void *x);

/* The same row against nt (1-4) activation vectors x[0..nt): out[t] = vec_dot(n, w_row, x[t]),
 * bit for bit (the weight row is read and unpacked once for all of them). */
typedef void (*hm_vec_dot_n_fn)(int64_t n, const void *w_row, const void *const *x, int nt,
                                float *out);

/* Four weight rows W_r = w + r * row_bytes times six activation vectors x[0..6):
 * out[t * 4 + r] = vec_dot(n, W_r, x[t]) bit for bit (each of the one-row kernel's accumulators
 * in its own pass, in the same order). Each weight vector is converted once for six tokens and
 * each activation vector serves four rows: about a third of vec_dot_n's loads per product. */
typedef void (*hm_vec_dot_46_fn)(int64_t n, const void *w, size_t row_bytes, const void *const *x,
                                 float *out);

/* The kinds of multiply-add a variant's peak is measured for (hm_cpu_ops.peak_ops) */
typedef enum { HM_PEAK_I8, HM_PEAK_BF16, HM_PEAK_F32 } hm_peak_kind;

typedef struct hm_cpu_ops {
    hm_isa isa;
    const char *name;
    /* Streaming read: wrapping sum of p[0..n). p is 8-byte aligned, not necessarily vector aligned.
     * Used to measure the memory read bandwidth; the sum proves every byte was read. */
    uint64_t (*sum_u64)(const uint64_t *p, size_t n);
    /* vec_dot[weight type]; NULL where this variant has no kernel (the matvec driver then uses
     * the reference one, so every type runs on every variant) */
    hm_vec_dot_fn vec_dot[HM_TYPE_COUNT];
    /* vec_dot_n[weight type]: NULL where this variant has none (callers then loop vec_dot) */
    hm_vec_dot_n_fn vec_dot_n[HM_TYPE_COUNT];
    /* vec_dot_46[weight type]: NULL where this variant has none (the float types F32, BF16 and
     * F16 on avx2, avx512 and amx: the prompt's many-token products of float weights) */
    hm_vec_dot_46_fn vec_dot_46[HM_TYPE_COUNT];
    /* y[i] += a * x[i] for i < n (attention's weighted sum of V rows) */
    void (*axpy_f32)(int64_t n, float a, const float *x, float *y);
    /* the same with x in 16 bits: BF16 (bf16) or IEEE half, widened exactly (MLA's k_b / v_b
     * copies); every variant gives plain C's fmaf bits */
    void (*axpy_h)(int64_t n, float a, const uint16_t *x, bool bf16, float *y);
    /* y[c] = sum over r < rows of x[r] * w[r * cols + c] for c < cols, w in 16 bits as axpy_h's,
     * each sum by fmaf in increasing r (every variant gives plain C's bits): the transposed
     * product of MLA's absorbed query (q_nope against k_b) and of its values (v_b) */
    void (*gemv_t_h)(int64_t rows, int64_t cols, const float *x, const uint16_t *w, bool bf16,
                     float *y);
    /* Attention blocks of 16 keys (prefill). qk: s[i * s_stride + j] = scale * q_i . k_j for
     * i < nq, j < 16, with q_i = q + i * hd and the keys transposed: kt[d * 16 + j].
     * pv: o[i * o_stride + d] += sum_j p[i * p_stride + j] * v[j * v_stride + d] for i < nq,
     * d < hd. */
    void (*qk_block16)(const float *q, int nq, int hd, const float *kt, float scale, float *s,
                       size_t s_stride);
    void (*pv_block16)(const float *p, size_t p_stride, int nq, const float *v, size_t v_stride,
                       int hd, float *o, size_t o_stride);
    /* qk over keys in rows (MLA's latent cache, not transposed): s[i * s_stride + j] = scale *
     * q_i . k_j for i < nq, j < nk <= 16, with q_i = q + i * q_stride and k_j = k + j * k_stride,
     * hd values each. The variants sum in different orders (within float rounding). */
    void (*qk_rows16)(const float *q, size_t q_stride, int nq, const float *k, size_t k_stride,
                      int nk, int hd, float scale, float *s, size_t s_stride);
    /* g[i] = silu(g[i]) * u[i] = g / (1 + e^-g) * u for i < n (SiLU-GLU); the SIMD variants
     * compute e^-g with a degree-6 polynomial, within 4e-7 relative of the plain-C expf form */
    void (*silu_mul_f32)(int64_t n, float *g, const float *u);
    /* x[i] = e^(x[i] - m) for i < n, returning their sum (softmax numerators; m is the row's
     * max, so every argument is <= 0); same polynomial exp as silu_mul_f32 */
    float (*expsum_f32)(int64_t n, float *x, float m);
    /* max of x[0..n) and -FLT_MAX, or NaN when any x is NaN (softmax row maxima: a NaN score
     * must reach the output, not vanish in a clamped exp; exact, so every variant returns the
     * same value) */
    float (*max_f32)(int64_t n, const float *x);
    /* x[i] *= a for i < n */
    void (*scale_f32)(int64_t n, float a, float *x);
    /* RMSNorm: y[i] = x[i] * r * w[i] (w NULL: 1), r = 1 / sqrt(mean(x^2) + eps) with the sum of
     * squares in double (the variants sum in different orders: equal within double rounding);
     * y may be x */
    void (*rmsnorm_f32)(int64_t n, const float *x, const float *w, float *y, float eps);
    /* IEEE half <-> float for i < n (the f16 KV cache): exact widening; narrowing rounds to
     * nearest even, overflow to inf; every variant gives the same bits except NaN payloads (a
     * NaN stays a NaN) */
    void (*f16_to_f32)(int64_t n, const uint16_t *x, float *y);
    void (*f32_to_f16)(int64_t n, const float *x, uint16_t *y);
    /* Activation quantizers (hm_act_convert): n floats (a whole number of blocks) to Q8_0 / Q8_K
     * blocks, bit for bit hm_quantize_row_q8_0_ref / hm_quantize_row_q8_K_ref in every variant */
    void (*quant_q8_0)(const float *x, void *y, int64_t n);
    void (*quant_q8_K)(const float *x, void *y, int64_t n);
    /* The activation type this variant's kernels of a weight type consume, where it is not the
     * plain one (hm_act_type_for); NULL: none differs. A variant has kernels (vec_dot and
     * vec_dot_n) for every type it names a layout of its own for. */
    uint32_t (*act_type)(uint32_t weight_type);
    /* int8 matmul for more than 4 tokens over the packed activations (the contract of
     * hm_amx_matmul / hm_amx_matmul_packed below): AMX tiles, or AVX-512 VNNI; NULL elsewhere.
     * Ask hm_i8_matmul_ok before use. */
    void (*i8_matmul)(uint32_t type, const void *w, size_t row_bytes, int64_t cols, int64_t r0,
                      int64_t r1, const void *packed, int n_tok, float *y, size_t y_stride,
                      void *scratch);
    void (*i8_matmul_packed)(const void *wp, int64_t rows, int64_t cols, int64_t r0, int64_t r1,
                             const void *packed, int n_tok, float *y, size_t y_stride,
                             void *scratch);
    /* The swapped-operand kernels over weights repacked by hm_amx_wpack_vnni and activations
     * packed as row tiles (amx.c, "swapped operands"); NULL where there are none (the avx512
     * table). y[t][r] = W[r] . x_t (hm_amx_matmul_packed_rt), h[t][r] = silu(G[r] . x_t) *
     * (U[r] . x_t) (hm_amx_glu_packed_rt), and the down projection accumulated into the tokens'
     * output rows (hm_amx_down_acc). */
    void (*i8_matmul_packed_rt)(const void *wp, int64_t rows, int64_t cols, int64_t r0, int64_t r1,
                                const void *packed, int n_tok, float *y, size_t y_stride,
                                void *scratch);
    void (*i8_glu_packed_rt)(const void *wg, const void *wu, int64_t rows, int64_t cols, int64_t r0,
                             int64_t r1, const void *packed, int n_tok, float *h, size_t h_stride,
                             void *scratch);
    void (*i8_down_acc)(const void *wp, int64_t rows, int64_t cols, int64_t r0, int64_t r1,
                        const void *packed, int n_tok, const int32_t *tok, const float *wt,
                        const float *bias, float *out, size_t out_stride, void *scratch);
    /* The variant's peak for a kind of multiply-add, the roofline of bench kernels' matmuls:
     * `iters` rounds of the instruction its matmuls run (HM_PEAK_I8: AMX TDPBSSD on four tiles,
     * AVX-512 VPDPBUSD, AVX2 VPMADDUBSW + VPMADDWD + VPADDD; HM_PEAK_BF16: AMX TDPBF16PS, else as
     * HM_PEAK_F32; HM_PEAK_F32: FMA) on independent accumulators, no memory traffic, on the
     * calling thread. Returns the operations done (2 per multiply-add). NULL: none (the ref
     * table). */
    double (*peak_ops)(hm_peak_kind kind, int64_t iters);
    /* what peak_ops runs for each kind, for the benchmark's roofline line */
    const char *peak_names[3];
} hm_cpu_ops;

/* Whether ops has an int8 matmul (the amx and avx512 tables: the avx512 variant requires VNNI,
 * so AVX-512 CPUs without it, Skylake-SP, run the avx2 variant). */
bool hm_i8_matmul_ok(const hm_cpu_ops *ops);

/* Activation format a variant's kernels of a weight type consume: Q8_K (K-quants, IQ4_XS), Q8_0
 * (32-blocks, MXFP4), F32 (float weights); the avx512 and amx variants take the same values in
 * layouts of their own (blocks.h): Q8_0X4 for Q8_0, Q4_0, Q5_0, IQ4_NL and MXFP4, Q8_KX for the
 * K-quants. The activations handed to a variant's kernels must be converted for that variant,
 * into buffers aligned to 4 bytes (the float scales). */
uint32_t hm_act_type_for(const hm_cpu_ops *ops, uint32_t weight_type);
/* Bytes of one converted activation vector of n elements. */
size_t hm_act_bytes_for(const hm_cpu_ops *ops, uint32_t weight_type, int64_t n);
/* Converts one activation vector; n must be a whole number of the activation type's blocks.
 * Always the quantizers of the variant in use (hm_cpu_ops_or_ref), which equal the reference bit
 * for bit, so the values do not depend on the variant: only the layout does. */
hm_status hm_act_convert_for(const hm_cpu_ops *ops, uint32_t weight_type, const float *x, void *out,
                             int64_t n);
/* The same for the variant in use (hm_cpu_ops_or_ref): what the engine's kernels consume. */
uint32_t hm_act_type(uint32_t weight_type);
size_t hm_act_bytes(uint32_t weight_type, int64_t n);
hm_status hm_act_convert(uint32_t weight_type, const float *x, void *out, int64_t n);

/* Reference (plain C) activation quantizers (ref.c). */
void hm_quantize_row_q8_K_ref(const float *x, void *y, int64_t n);
void hm_quantize_row_q8_0_ref(const float *x, void *y, int64_t n);
/* The plain activation type of a weight type (ref.c: the reference kernels' and the avx2
 * variant's); hm_act_type_for gives it for a variant without act_type. */
uint32_t hm_act_type_ref(uint32_t weight_type);

/* Variant table entry for isa; NULL when that variant is not compiled into this binary. */
const hm_cpu_ops *hm_cpu_ops_for(hm_isa isa);

/* The variant in use (hm_isa_select: best supported, or HMOE_ISA). The choice is logged once at
 * info level. */
hm_status hm_cpu_ops_get(const hm_cpu_ops **out);

/* The variant in use, or the reference table when none could be selected (no error is set: for
 * helpers such as hm_act_convert whose callers have checked hm_cpu_ops_get already). */
const hm_cpu_ops *hm_cpu_ops_or_ref(void);

/* Per-variant tables (defined in ref.c and x86/<isa>.c). */
extern const hm_cpu_ops hm_ops_ref;
#if defined(__x86_64__)
extern const hm_cpu_ops hm_ops_avx2;
extern const hm_cpu_ops hm_ops_avx512;
extern const hm_cpu_ops hm_ops_amx;

/* AMX self-check: one 16x16x64 INT8 tile product (TDPBSSD) against plain C. Needs AMX and the
 * tile permission (hm_cpu_request_amx). HM_OK when the result is exact. */
hm_status hm_amx_selftest(void);
hm_status hm_amx_selftest_tiles(void); /* the check itself (x86/amx.c): AMX CPUs only */

/* AMX INT8 matmul for every weight type with a dequantizer: y[t * y_stride + r - r0] = W[r] . x_t
 * for rows r0 <= r < r1 (any count) and t < n_tok, x_t = x + t * x_stride floats. Needs AMX and the
 * tile permission. Weights and activations are both re-quantized to int8 with one scale per 256
 * values, so results carry ~0.5% relative error (amx.c); the decode path (vec_dot) is exact.
 * The activations are packed once per call site by hm_amx_pack_act into
 * hm_amx_act_bytes(type, cols, n_tok) bytes (any alignment), shared read-only by all threads;
 * packing is split by 16-token groups [g0, g1) so threads can share that work too (all of
 * [0, 2 * ((n_tok + 31) / 32)) must be packed before any matmul). Each thread passes its own
 * scratch of hm_amx_scratch_bytes(type, cols) bytes. */
size_t hm_amx_act_bytes(uint32_t type, int64_t cols, int n_tok);
void hm_amx_pack_act(uint32_t type, const float *x, size_t x_stride, const int32_t *idx, int n_tok,
                     int64_t cols, void *packed, int g0, int g1);
size_t hm_amx_scratch_bytes(uint32_t type, int64_t cols);
/* One row of a weight type to floats as the per-call conversion dequantizes it (AVX-512: CPUs
 * with it only): hm_dequantize_row's values bit for bit (test_kernels). */
void hm_amx_dequant_row(uint32_t type, const void *row, int64_t cols, float *w);
/* The scale groups of the packing: HM_AMX_GROUP values of each row share one scale. */
#define HM_AMX_GROUP 256
/* One scale group gi (values [gi * HM_AMX_GROUP, ...) of every row) of all n_tok rows into the
 * layout of hm_amx_pack_act, from the group's values only: xg[t * x_stride + i] is value
 * gi * HM_AMX_GROUP + i of token t (i < min(HM_AMX_GROUP, cols - gi * HM_AMX_GROUP)). The same
 * codes and scales, bit for bit; calls for every group of [0, ceil(cols / HM_AMX_GROUP))
 * together pack what one hm_amx_pack_act of all token groups does (the expert engine packs each
 * 256 rows of hidden values as soon as they are computed). */
void hm_amx_pack_act_group(const float *xg, size_t x_stride, int n_tok, int64_t cols, void *packed,
                           int64_t gi);
/* The same packing from activation rows quantized once each (a token that goes to 8 experts is
 * then quantized once, not 8 times): hm_amx_quant_row writes one row of hm_amx_qrow_bytes(cols)
 * bytes (64-byte aligned size); hm_amx_pack_act_q gathers rows idx[t] (or t) of qrows, which
 * must total < 2 GiB, into the layout of hm_amx_pack_act, bit for bit. */
size_t hm_amx_qrow_bytes(int64_t cols);
void hm_amx_quant_row(const float *x, int64_t cols, void *qrow);
void hm_amx_pack_act_q(const void *qrows, size_t qrow_bytes, const int32_t *idx, int n_tok,
                       int64_t cols, void *packed, int g0, int g1);
void hm_amx_matmul(uint32_t type, const void *w, size_t row_bytes, int64_t cols, int64_t r0,
                   int64_t r1, const void *packed, int n_tok, float *y, size_t y_stride,
                   void *scratch);

/* Load-time repacking for the AMX matmul: the per-call path above converts each 32-row unit of
 * the weights to int8 tiles on every call (about one cycle per weight, which dominates when an
 * expert gets few tokens); hm_amx_wpack stores that conversion once, in
 * hm_amx_wpack_bytes(rows, cols) bytes at a 64-byte aligned dst, ~1.02 bytes per weight. Units
 * [u0, u1) of 32 rows each (threads split the units); scratch as for hm_amx_matmul.
 * hm_amx_matmul_packed then equals hm_amx_matmul bit for bit, for r0 a multiple of 32 (rows
 * r0..r1-1, clamped to rows). Layout: src/quant/README.md ("AMX int8 units"). */
/* The AVX-512 VNNI twins (no tiles; AVX-512BW + VNNI): same inputs, same results bit for bit. */
void hm_vnni_matmul(uint32_t type, const void *w, size_t row_bytes, int64_t cols, int64_t r0,
                    int64_t r1, const void *packed, int n_tok, float *y, size_t y_stride,
                    void *scratch);
void hm_vnni_matmul_packed(const void *wp, int64_t rows, int64_t cols, int64_t r0, int64_t r1,
                           const void *packed, int n_tok, float *y, size_t y_stride, void *scratch);
/* AMX BF16 tiles for BF16 weights (exact) and F16 weights (rounded to BF16): activations rounded
 * to BF16 (~0.2% per value), products summed in float32 over all of K (TDPBF16PS). Same call
 * pattern as the int8 path: pack the activations once (16-token groups [g0, g1) of
 * 2 * ((n_tok + 31) / 32), idx as there), then any row range per thread with its own scratch of
 * hm_amx_bf16_scratch_bytes(cols). */
size_t hm_amx_bf16_act_bytes(int64_t cols, int n_tok);
void hm_amx_bf16_pack_act(const float *x, size_t x_stride, const int32_t *idx, int n_tok,
                          int64_t cols, void *packed, int g0, int g1);
size_t hm_amx_bf16_scratch_bytes(int64_t cols);
void hm_amx_bf16_matmul(uint32_t type, const void *w, size_t row_bytes, int64_t cols, int64_t r0,
                        int64_t r1, const void *packed, int n_tok, float *y, size_t y_stride,
                        void *scratch);
size_t hm_amx_wpack_bytes(int64_t rows, int64_t cols);
void hm_amx_wpack(uint32_t type, const void *w, size_t row_bytes, int64_t rows, int64_t cols,
                  int64_t u0, int64_t u1, void *dst, void *scratch);
void hm_amx_matmul_packed(const void *wp, int64_t rows, int64_t cols, int64_t r0, int64_t r1,
                          const void *packed, int n_tok, float *y, size_t y_stride, void *scratch);
/* The expert engine's matmuls with the operands swapped (amx.c, "swapped operands"): weights
 * repacked with hm_amx_wpack_vnni (hm_amx_wpack's units, each KiB tile transposed to the VNNI
 * layout; the same size), activations packed as row tiles by the _rt packers (the same size as
 * hm_amx_act_bytes, the same codes and scales as the VNNI packers). Rows r0 <= r < r1 (r0 a
 * multiple of 32, r1 clamped to rows), tokens t < n_tok, each the same bits as the per-call
 * path:
 *   hm_amx_matmul_packed_rt: y[t * y_stride + r - r0] = W[r] . x_t (hm_amx_matmul_packed);
 *   hm_amx_glu_packed_rt: h[t * h_stride + r - r0] = silu(G[r] . x_t) * (U[r] . x_t) (both
 *     matmuls, then silu_mul_f32 of the AMX table; the up products never leave the scratch);
 *   hm_amx_down_acc: out[tok[t] * out_stride + r] += wt[t] * (W[r] . x_t), then
 *     += wt[t] * bias[r] when bias is not NULL (the matmul, then those two axpys). */
void hm_amx_wpack_vnni(uint32_t type, const void *w, size_t row_bytes, int64_t rows, int64_t cols,
                       int64_t u0, int64_t u1, void *dst, void *scratch);
void hm_amx_pack_act_rt(const float *x, size_t x_stride, const int32_t *idx, int n_tok,
                        int64_t cols, void *packed, int g0, int g1);
/* hm_amx_pack_act_group into row tiles */
void hm_amx_pack_act_group_rt(const float *xg, size_t x_stride, int n_tok, int64_t cols,
                              void *packed, int64_t gi);
/* hm_amx_pack_act_q into row tiles */
void hm_amx_pack_act_q_rt(const void *qrows, size_t qrow_bytes, const int32_t *idx, int n_tok,
                          int64_t cols, void *packed, int g0, int g1);
void hm_amx_matmul_packed_rt(const void *wp, int64_t rows, int64_t cols, int64_t r0, int64_t r1,
                             const void *packed, int n_tok, float *y, size_t y_stride,
                             void *scratch);
void hm_amx_glu_packed_rt(const void *wg, const void *wu, int64_t rows, int64_t cols, int64_t r0,
                          int64_t r1, const void *packed, int n_tok, float *h, size_t h_stride,
                          void *scratch);
void hm_amx_down_acc(const void *wp, int64_t rows, int64_t cols, int64_t r0, int64_t r1,
                     const void *packed, int n_tok, const int32_t *tok, const float *wt,
                     const float *bias, float *out, size_t out_stride, void *scratch);
/* hm_cpu_ops.peak_ops of the amx table: TDPBSSD / TDPBF16PS on four C tiles (as the matmuls'
 * 2 x 2 blocks); HM_PEAK_F32 runs the avx512 FMA loop */
double hm_amx_peak_ops(hm_peak_kind kind, int64_t iters);
#endif

/* Software prefetch of weight streams, two levels: into L1 HM_PREFETCH_BYTES ahead and into L2
 * HM_PREFETCH_L2_BYTES ahead. The L2 requests keep more of a core's reads in flight than L1's
 * fill buffers alone allow. Device, 16 threads, against one T0 stream at 4 KiB (bench/RESULTS.md,
 * 2026-11-30): BF16 matvec ~+11%, Q4_K ~+5%. L2 distance (2026-12-01, L1 at 1 KiB,
 * with the paired "% of read" of bench kernels): 16 KiB and 2-3 KiB lose 3-10 points on every
 * kernel; 6 KiB reads 1-3 points below 8 KiB in bench kernels, but the expert engine (bench moe,
 * 48 layers: 1 token 9.58 against 10.48 ms, means of 3 alternating rounds; 2 of 3 earlier
 * pairs at 32 layers) and a whole model's decode (bench e2e tg64 38.5 against 35.7 tok/s, 3 of 3
 * pairs) run faster with 6 KiB: their claims are short streams (gate and up side by side), where
 * a shorter run-ahead wastes less past each claim's end. Both can be set at build time. */
#ifndef HM_PREFETCH_BYTES
#define HM_PREFETCH_BYTES 1024
#endif
#ifndef HM_PREFETCH_L2_BYTES
#define HM_PREFETCH_L2_BYTES 6144
#endif

#endif
