/* matvec.h - y = W x for a few tokens (decode) over a row range: the unit of work a thread takes.
 * Weights are read once per call whatever the token count (tokens are the inner loop). */
#ifndef HM_CPU_MATVEC_H
#define HM_CPU_MATVEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/ops.h"

/* A weight matrix as GGUF stores it: `rows` rows of `cols` elements (ne0 = cols contiguous). */
typedef struct hm_matrix {
    uint32_t type;
    const void *data;
    int64_t rows, cols;
    size_t row_bytes;
    const void *wpack; /* the int8 units of hm_nn_repack (prompt batches read them), or NULL */
} hm_matrix;

/* Fails (naming the type and cols) when cols is not a whole number of blocks. */
hm_status hm_matrix_init(hm_matrix *m, uint32_t type, const void *data, int64_t rows, int64_t cols);

/* HM_OK when weights of `type` can be multiplied; else HM_ERR_UNSUPPORTED naming the tensor and
 * its type (files with such tensors still open: the error comes when the tensor is used). */
hm_status hm_kernel_check(uint32_t type, const char *tensor_name);

/* Starts the reads of the first min(bytes, HM_PREFETCH_L2_BYTES) of a weight range a thread is
 * about to stream: the first HM_PREFETCH_BYTES into L1, the rest into L2. The dot kernels
 * prefetch those fixed distances ahead of the block they are on (cpu/ops.h), so without this the
 * start of every claimed unit of rows arrives one demand miss at a time; with the first 4 KiB
 * only into L1 the lines from 4 KiB on would be requested 1 KiB ahead of use. Device,
 * `bench moe --layers 16`, 8 interleaved rounds: 1 token 2.91 against 3.00 ms (means), 4 tokens
 * 10.08 against 10.28 (bench/RESULTS.md, 2026-12-01). */
static inline void hm_prefetch_start(const void *p, size_t bytes) {
    const char *c = p;
    size_t o = 0;
    for (; o < bytes && o < HM_PREFETCH_BYTES; o += 64) __builtin_prefetch(c + o, 0, 3);
    for (; o < bytes && o < HM_PREFETCH_L2_BYTES; o += 64) __builtin_prefetch(c + o, 0, 1);
}

/* 32-row units per claim when `units` units of tile matmuls are shared by nth threads through
 * hm_work_next: 2 (one call then fetches its second unit's weights during the first) while every
 * thread still gets 4 claims or more to balance with, else 1. */
static inline int hm_tile_claim_units(int64_t units, int nth) {
    return units >= 8 * (int64_t)nth ? 2 : 1;
}

/* Tokens per block of the tile matmuls over n tokens of cols values: all n while their packed
 * activations fit in HM_TILE_ACT_BYTES, else n split into even blocks of a multiple of 32 (at
 * least 64) within it. Each block is packed on its own and claims run block by block, so a
 * thread's claims of one block's units find its activations in L2 instead of streaming all of
 * them from L3 for every unit. HMOE_TILE_TOKENS=N (a multiple of 32) forces N-token blocks (A/B,
 * tests). */
#define HM_TILE_ACT_BYTES ((int64_t)1 << 20)
int hm_tile_token_block(int64_t cols, int n);
/* The even blocks of n tokens under a limit of t (a multiple of 32): n itself when n <= t
 * (hm_tile_token_block is this with t = hm_tile_token_cap; the limit read once serves many n). */
int hm_tile_split(int n, int t);
/* The most tokens a block may have: min(n, the block limit). Each block's packed buffer is sized
 * for this many tokens, so the blocks sit at one stride and the total (blocks x that) plainly
 * grows with n: a scratch sized for a batch serves every smaller one (test_kernels checks it). */
int hm_tile_token_cap(int64_t cols, int n);

/* The smallest token count from which a matrix of `type` is multiplied faster by the int8 tile
 * path (AMX, or AVX-512 VNNI where there is no AMX) than by the matvec kernels (4 tokens per weight
 * read), for weights converted per call (packed false) or repacked once into int8 units (packed
 * true); INT_MAX where ops has no int8 matmul or type is a float format. The per-call conversion
 * costs 1-4x a 4-token matvec of the same matrix, so its crossover runs from 5 tokens (Q4_1) to 16
 * (Q2_K, Q3_K) on AMX and 7-28 on VNNI; a packed matrix reads int8 units at about the matvec's
 * speed, so 5 (bench/RESULTS.md, 2026-11-30, has the measurements). Never below 5: 1-4
 * tokens always
 * take the matvec kernels, whose results do not depend on the batch. The expert engine uses it
 * as is; hm_nn_matmul (dense matrices) from 16 tokens at the earliest. HMOE_TILE_MIN_TOKENS=N
 * (N >= 5) forces N for every type and both (A/B, tests of the tile paths at small batches). */
int hm_tile_min_tokens(const hm_cpu_ops *ops, uint32_t type, bool packed);
/* HMOE_TILE_MIN_TOKENS when set to a valid N (>= 5), else 0 */
int hm_tile_min_forced(void);

/* The variant's kernel for type, else the reference one (when the variant converts activations
 * for type as the reference does); NULL if no kernel exists at all. */
hm_vec_dot_fn hm_vec_dot_for(const hm_cpu_ops *ops, uint32_t type);

/* The variant's multi-token kernel for type, or NULL (none, or the variant has no single-token
 * kernel for type either: then hm_vec_dot_for's fallback is used one token at a time). */
hm_vec_dot_n_fn hm_vec_dot_n_for(const hm_cpu_ops *ops, uint32_t type);

/* out[t] = dot(n, w_row, x[t]) for t < nt (any count): dotn (may be NULL) 4 tokens at a time.
 * Inline: the one-token case is a plain call of dot, as before there were multi-token kernels. */
static inline void hm_dot_rows(hm_vec_dot_fn dot, hm_vec_dot_n_fn dotn, int64_t n,
                               const void *w_row, const void *const *x, int nt, float *out) {
    if (!dotn || nt == 1) {
        for (int t = 0; t < nt; t++) out[t] = dot(n, w_row, x[t]);
        return;
    }
    for (int t = 0; t < nt; t += 4) dotn(n, w_row, x + t, nt - t < 4 ? nt - t : 4, out + t);
}

/* The variant's four-rows-by-six-tokens kernel for type, or NULL (none, or no single-token
 * kernel of the variant's own either). Used from HM_D46_MIN_TOKENS tokens: device (AVX-512, 16
 * threads, bench kernels BF16 / F32): 64 tokens 1.4-1.9x and 512 tokens 1.3-2.5x the 4-token
 * kernels' GOP/s, 8 tokens (one block of 6 and 2 left over) 0.7-0.9x. */
#define HM_D46_MIN_TOKENS 16
hm_vec_dot_46_fn hm_vec_dot_46_for(const hm_cpu_ops *ops, uint32_t type);

/* y[t * y_stride + r] = W[r] . x_t for r in [r0, r1) and t < n_tok, where x_t starts at
 * xq + t * x_stride bytes (activations converted with hm_act_convert for W's type). dotn (may be
 * NULL): the multi-token twin of dot, which then reads each row once for up to 4 tokens. d46 (may
 * be NULL; from HM_D46_MIN_TOKENS tokens): blocks of 6 tokens by 4 rows, each row read once per 6
 * tokens and each token's vectors once per 4 rows (the same bits as dot). */
void hm_matvec_rows(hm_vec_dot_fn dot, hm_vec_dot_n_fn dotn, hm_vec_dot_46_fn d46,
                    const hm_matrix *w, const void *xq, size_t x_stride, int n_tok, float *y,
                    size_t y_stride, int64_t r0, int64_t r1);

#endif
