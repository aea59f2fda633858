/* nn.c - dense transformer ops on the CPU (see nn.h). */
#include "cpu/nn.h"

#include <float.h>
#include <stdatomic.h>
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/cpu.h"

void hm_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps) {
    const hm_cpu_ops *ops;
    if (hm_cpu_ops_get(&ops) != HM_OK || !ops->rmsnorm_f32) ops = &hm_ops_ref;
    ops->rmsnorm_f32(n, x, w, y, eps);
}

void hm_rope_inv_freq(float *inv, int dim, float theta) {
    /* transformers: 1 / theta ** (arange(0, dim, 2).float() / dim), in float32 */
    for (int i = 0; i < dim / 2; i++)
        inv[i] = (float)(1.0 / pow((double)theta, (double)(float)(2 * i) / (double)dim));
}

void hm_rope_cos_sin(int32_t pos, const float *inv_freq, int rope_dim, float *cs) {
    const int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        /* freqs = pos * inv_freq in float32, cos/sin of that float (as transformers does) */
        const float ang = (float)pos * inv_freq[i];
        cs[i] = cosf(ang), cs[half + i] = sinf(ang);
    }
}

void hm_rope_neox(float *x, int n_heads, int head_dim, int rope_dim, const float *cs) {
    const int half = rope_dim / 2;
    const float *c = cs, *s = cs + half;
    for (int h = 0; h < n_heads; h++) { /* contiguous over i: vectorizes */
        float *lo = x + (size_t)h * (size_t)head_dim, *hi = lo + half;
        for (int i = 0; i < half; i++) {
            const float a = lo[i], b = hi[i];
            lo[i] = a * c[i] - b * s[i];
            hi[i] = b * c[i] + a * s[i];
        }
    }
}

void hm_rope_interleaved(float *x, int n_heads, int head_dim, int rope_dim, const float *cs) {
    const int half = rope_dim / 2;
    const float *c = cs, *s = cs + half;
    for (int h = 0; h < n_heads; h++) {
        float *p = x + (size_t)h * (size_t)head_dim;
        for (int i = 0; i < half; i++) {
            const float a = p[2 * i], b = p[2 * i + 1];
            p[2 * i] = a * c[i] - b * s[i];
            p[2 * i + 1] = b * c[i] + a * s[i];
        }
    }
}

void hm_silu_mul(float *g, const float *u, int64_t n) {
    const hm_cpu_ops *ops;
    if (hm_cpu_ops_get(&ops) == HM_OK && ops->silu_mul_f32) {
        ops->silu_mul_f32(n, g, u);
        return;
    }
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* ---------------------------------------------------------------- matmul */

enum { MM_ROW_BLOCK = 16, MM_TOK_BLOCK = 4, MM_AMX_MIN_TOKENS = 16 };

/* float formats: exact per-row dot products unless BF16 tiles are asked for (FP8_B128 counts:
 * its kernels take float activations, and the tiles keep more of it than int8 would) */
static bool type_is_float(uint32_t t) {
    return t == HM_TYPE_F32 || t == HM_TYPE_F16 || t == HM_TYPE_BF16 || t == HM_TYPE_FP8_B128;
}

/* The matmul path of a weight matrix at n tokens: per-row dot products (exact for float
 * weights), int8 tiles / VNNI (quantized weights), or AMX BF16 tiles (BF16 and F16 weights: the
 * activations rounded to bf16, as a bf16 model computes them anyway; F32 weights stay exact). */
enum { MM_DOTS = 0, MM_I8 = 1, MM_BF16 = 2 };

static int use_amx(const hm_cpu_ops *ops, const hm_matrix *w, int n, unsigned flags) {
#if defined(__x86_64__)
    if (flags & HM_NN_NO_AMX) return MM_DOTS;
    /* 1-4 tokens never take a tile path (hm_tile_min_tokens and HMOE_TILE_MIN_TOKENS are 5 at
     * the least, MM_AMX_MIN_TOKENS more): decoding asks here for every matrix of every call, and
     * the answer needs no look at the environment */
    if (n <= 4) return MM_DOTS;
    if (!type_is_float(w->type)) {
        /* int8 tiles from MM_AMX_MIN_TOKENS, or from where they beat the matvec kernels when that
         * is later (most formats' per-call conversion: hm_tile_min_tokens). Not earlier: a
         * prompt's dense matrices keep the matvec kernels' precision up to 15 tokens (the tiles
         * re-quantize the weights; test_forward's KL bounds). HMOE_TILE_MIN_TOKENS overrides. */
        const int t = hm_tile_min_tokens(ops, w->type, w->wpack != NULL);
        const int from = hm_tile_min_forced() || t > MM_AMX_MIN_TOKENS ? t : MM_AMX_MIN_TOKENS;
        return n >= from ? MM_I8 : MM_DOTS;
    }
    if (n < MM_AMX_MIN_TOKENS) return MM_DOTS;
    return (flags & HM_NN_BF16_TILES) && ops->isa == HM_ISA_AMX &&
                   (w->type == HM_TYPE_BF16 || w->type == HM_TYPE_F16 ||
                    w->type == HM_TYPE_FP8_B128)
               ? MM_BF16
               : MM_DOTS;
#else
    (void)ops, (void)w, (void)n, (void)flags;
    return MM_DOTS;
#endif
}

static size_t align64(size_t b) {
    return (b + 63) & ~(size_t)63;
}

#if defined(__x86_64__)
/* The tile paths' scratch: packed activations (shared; one block of hm_tile_token_block tokens
 * per *blk bytes) and per-thread bytes; false for MM_DOTS */
static bool tile_bytes(int path, const hm_matrix *w, int n, size_t *act, size_t *per_thread,
                       size_t *blk) {
    if (path != MM_I8 && path != MM_BF16) return false;
    const int tb = hm_tile_token_block(w->cols, n), nb = (n + tb - 1) / tb,
              cap = hm_tile_token_cap(w->cols, n);
    if (path == MM_I8) {
        *blk = align64(hm_amx_act_bytes(w->type, w->cols, cap));
        *per_thread = align64(hm_amx_scratch_bytes(w->type, w->cols) + 64);
    } else {
        *blk = align64(hm_amx_bf16_act_bytes(w->cols, cap));
        *per_thread = align64(hm_amx_bf16_scratch_bytes(w->cols) + 64);
    }
    *act = *blk * (size_t)nb;
    return true;
}
#endif

size_t hm_nn_matmul_scratch_bytes(const hm_matrix *w, int n, int n_threads, unsigned flags) {
    const hm_cpu_ops *ops;
    if (hm_cpu_ops_get(&ops) != HM_OK) return 0;
    /* per-row dots: the threads' work ranges, then the converted activations */
    const size_t slots = (size_t)n_threads * sizeof(hm_work_slot);
    const size_t dots = hm_act_type(w->type) == HM_TYPE_F32
                            ? slots + 64
                            : slots + (size_t)n * hm_act_bytes(w->type, w->cols) + 64;
#if defined(__x86_64__)
    size_t act, per_thread, blk;
    if (tile_bytes(use_amx(ops, w, n, flags), w, n, &act, &per_thread, &blk)) {
        /* at least what the per-row dots of fewer tokens needed: a scratch sized for a batch
         * serves every smaller one, whichever path each takes */
        const size_t t =
            align64(act) + (size_t)n_threads * (per_thread + sizeof(hm_work_slot)) + 64;
        return t > dots ? t : dots;
    }
#endif
    return dots;
}

size_t hm_nn_repack_bytes(const hm_matrix *w) {
#if defined(__x86_64__)
    const hm_cpu_ops *ops;
    if (hm_cpu_ops_get(&ops) != HM_OK || !ops->i8_matmul_packed ||
        use_amx(ops, w, 1 << 20, 0) != MM_I8)
        return 0;
    return align64(hm_amx_wpack_bytes(w->rows, w->cols));
#else
    (void)w;
    return 0;
#endif
}

#if defined(__x86_64__)
typedef struct repack_job {
    hm_matrix *w;
    void *dst;
    uint8_t *scratch; /* per thread: per bytes */
    size_t per;
    atomic_llong next; /* the next 8 units */
} repack_job;

static void repack_task(int ith, int nth, void *arg) {
    (void)nth;
    repack_job *j = arg;
    const int64_t units = (j->w->rows + 31) / 32;
    for (int64_t u; (u = 8 * atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < units;)
        hm_amx_wpack(j->w->type, j->w->data, j->w->row_bytes, j->w->rows, j->w->cols, u,
                     u + 8 < units ? u + 8 : units, j->dst, j->scratch + (size_t)ith * j->per);
}
#endif

hm_status hm_nn_repack(hm_pool *pool, hm_matrix *w, void *dst) {
    if (!hm_nn_repack_bytes(w))
        return hm_errorf(HM_ERR_UNSUPPORTED, "repack: %s weights take no int8 path here",
                         hm_type_name(w->type));
    if ((uintptr_t)dst % 64)
        return hm_errorf(HM_ERR_INVALID_ARG, "repack: destination not 64-byte aligned");
#if defined(__x86_64__)
    const int nth = hm_pool_size(pool);
    repack_job j = {.w = w, .dst = dst, .per = align64(hm_amx_scratch_bytes(w->type, w->cols))};
    atomic_init(&j.next, 0);
    j.scratch = hm_malloc_aligned(j.per * (size_t)nth, 64, "repack scratch");
    if (!j.scratch) return hm_errorf(HM_ERR_NO_MEMORY, "repack: out of memory (scratch)");
    hm_pool_run(pool, repack_task, &j);
    hm_free(j.scratch);
    w->wpack = dst;
    return HM_OK;
#else
    (void)pool;
    return HM_ERR_UNSUPPORTED;
#endif
}

typedef struct mm_job {
    hm_pool *pool;
    const hm_matrix *const *w; /* nw matrices with the same cols and activation type */
    int nw;
    const float *x;
    size_t xs;
    int n;
    float *const *y;
    const size_t *ys;
    uint8_t *scratch;
    const hm_cpu_ops *ops;
    int amx;            /* MM_DOTS, MM_I8, MM_BF16 */
    hm_work_slot *work; /* the threads' unit ranges (in the scratch) */
    /* tile paths (set by mm_start): claims of cu 32-row units, tcl[m] of them in matrix m, cpb
     * per token block (tbt tokens each, packed blk bytes apart); claim c is block c / cpb */
    int cu;
    int64_t tcl[8], cpb;
    int tbt;
    size_t blk, act, per_thread; /* tile_bytes, computed once by mm_start */
    /* MM_DOTS units (set by mm_start): token blocks of tb (ntb of them), row blocks of rbs[m]
     * rows (nrb[m] of them) per matrix */
    int tb, ntb;
    int64_t rbs[8], nrb[8];
    uint8_t *xa;        /* MM_DOTS: the converted activations (in the scratch, after work) */
    bool pre_converted; /* MM_DOTS, 1-2 tokens: mm_start converted the activations already */
    /* in-job epilogue (MM_DOTS with one token block): units done per row group; matrix m's
     * groups start at ep_base[m] */
    const hm_nn_epilogue *ep;
    int ep_base[8];
    atomic_int *ep_done; /* [HM_NN_EP_MAX], on the caller's stack */
} mm_job;

/* Rows per work unit: 16, fewer when that would leave threads idle (small matrices). */
static int64_t row_block(int64_t rows, int nth) {
    int64_t rb = MM_ROW_BLOCK;
    while (rb > 4 && rows / rb < 2 * (int64_t)nth) rb /= 2;
    return rb;
}

/* The per-row path's units into the job; returns their count. */
static int64_t dots_units(mm_job *j, int nth) {
    /* token blocks of 16, or of 24 where the 6-token kernels serve every matrix (4 blocks of 6) */
    bool d46 = true;
    for (int m = 0; m < j->nw; m++) d46 = d46 && hm_vec_dot_46_for(j->ops, j->w[m]->type);
    j->tb = j->n <= MM_TOK_BLOCK ? j->n : (d46 ? 6 : MM_TOK_BLOCK) * 4;
    j->ntb = (j->n + j->tb - 1) / j->tb;
    int64_t total = 0;
    for (int m = 0; m < j->nw; m++) {
        j->rbs[m] = row_block(j->w[m]->rows * j->ntb, nth);
        j->nrb[m] = (j->w[m]->rows + j->rbs[m] - 1) / j->rbs[m];
        total += j->nrb[m] * j->ntb;
    }
    return total;
}

static void mm_task(int ith, int nth, void *arg) {
    mm_job *j = arg;
#if defined(__x86_64__)
    uint8_t *scr = (uint8_t *)(((uintptr_t)j->scratch + 63) & ~(uintptr_t)63);
    if (j->amx != MM_DOTS) {
        const size_t act = j->act, per_thread = j->per_thread, blk = j->blk;
        /* pack the activations (each token block's 16-token groups in turn, split over the
         * threads), then 32-row ranges */
        const hm_matrix *w = j->w[0];
        const int tbt = j->tbt, nb = (j->n + tbt - 1) / tbt;
        const int groups =
            2 * ((tbt + 31) / 32) * (nb - 1) + 2 * ((j->n - (nb - 1) * tbt + 31) / 32);
        const int q0 = groups * ith / nth, q1 = groups * (ith + 1) / nth;
        for (int b = 0, base = 0; b < nb && base < q1; b++) {
            const int t0 = b * tbt, nt = j->n - t0 < tbt ? j->n - t0 : tbt,
                      gb = 2 * ((nt + 31) / 32);
            const int g0 = q0 > base ? q0 - base : 0, g1 = q1 - base < gb ? q1 - base : gb;
            const float *xb = j->x + (size_t)t0 * j->xs;
            if (g0 < g1 && j->amx == MM_BF16)
                hm_amx_bf16_pack_act(xb, j->xs, NULL, nt, w->cols, scr + (size_t)b * blk, g0, g1);
            else if (g0 < g1)
                hm_amx_pack_act(w->type, xb, j->xs, NULL, nt, w->cols, scr + (size_t)b * blk, g0,
                                g1);
            base += gb;
        }
        hm_pool_barrier(j->pool);
        /* claims of the matrices' 32-row units (the packed activations serve every matrix):
         * each thread takes its own share in order, then relieves slower ones (vCPUs of one
         * machine can run at quite different speeds) */
        uint8_t *ts = scr + align64(act) + (size_t)ith * per_thread;
        for (int64_t g; (g = hm_work_next(j->work, nth, ith)) >= 0;) {
            const int b = (int)(g / j->cpb), t0 = b * tbt, nt = j->n - t0 < tbt ? j->n - t0 : tbt;
            const uint8_t *pk = scr + (size_t)b * blk;
            g %= j->cpb;
            int m = 0;
            while (g >= j->tcl[m]) g -= j->tcl[m], m++;
            const hm_matrix *wm = j->w[m];
            const int64_t r0 = g * j->cu * 32,
                          r1 = r0 + j->cu * 32 < wm->rows ? r0 + j->cu * 32 : wm->rows;
            float *y = j->y[m] + (size_t)t0 * j->ys[m] + r0;
            if (j->amx == MM_BF16)
                hm_amx_bf16_matmul(wm->type, wm->data, wm->row_bytes, wm->cols, r0, r1, pk, nt, y,
                                   j->ys[m], ts);
            else if (wm->wpack)
                j->ops->i8_matmul_packed(wm->wpack, wm->rows, wm->cols, r0, r1, pk, nt, y, j->ys[m],
                                         ts);
            else
                j->ops->i8_matmul(wm->type, wm->data, wm->row_bytes, wm->cols, r0, r1, pk, nt, y,
                                  j->ys[m], ts);
        }
        return;
    }
#endif
    const hm_matrix *w0 = j->w[0];
    const void *xq = j->x;
    size_t xq_stride = j->xs * sizeof(float);
    uint8_t *xa = j->xa;
    if (hm_act_type(w0->type) != HM_TYPE_F32) {
        size_t ab = hm_act_bytes(w0->type, w0->cols);
        if (!j->pre_converted) {
            for (int t = ith; t < j->n; t += nth)
                hm_act_convert(w0->type, j->x + (size_t)t * j->xs, xa + (size_t)t * ab, w0->cols);
            hm_pool_barrier(j->pool);
        }
        xq = xa;
        xq_stride = ab;
    }
    /* units: (matrix, row block, token block), row blocks outer so consecutive units share
     * weights; each thread walks its own contiguous share, then helps with the others' */
    const int tb = j->tb, ntb = j->ntb;
    const int64_t *nrb = j->nrb, *rbs = j->rbs;
    for (int64_t g; (g = hm_work_next(j->work, nth, ith)) >= 0;) {
        int m = 0;
        int64_t u = g;
        while (u >= nrb[m] * ntb) u -= nrb[m] * ntb, m++;
        const hm_matrix *w = j->w[m];
        int64_t rb = (u / ntb) * rbs[m], re = rb + rbs[m] < w->rows ? rb + rbs[m] : w->rows;
        int t0 = (int)(u % ntb) * tb, te = t0 + tb < j->n ? t0 + tb : j->n;
        hm_vec_dot_fn dot = hm_vec_dot_for(j->ops, w->type);
        hm_vec_dot_n_fn dotn = hm_vec_dot_n_for(j->ops, w->type);
        hm_vec_dot_46_fn d46 = hm_vec_dot_46_for(j->ops, w->type);
        if (t0 == 0)
            hm_prefetch_start((const uint8_t *)w->data + (size_t)rb * w->row_bytes,
                              (size_t)(re - rb) * w->row_bytes);
        if (d46 && te - t0 >= HM_D46_MIN_TOKENS) /* 6 tokens by 4 rows (the same bits) */
            hm_matvec_rows(dot, dotn, d46, w, (const uint8_t *)xq + (size_t)t0 * xq_stride,
                           xq_stride, te - t0, j->y[m] + (size_t)t0 * j->ys[m], j->ys[m], rb, re);
        else
            for (int t = t0; t < te; t += MM_TOK_BLOCK) {
                int nt = te - t < MM_TOK_BLOCK ? te - t : MM_TOK_BLOCK;
                hm_matvec_rows(dot, dotn, NULL, w, (const uint8_t *)xq + (size_t)t * xq_stride,
                               xq_stride, nt, j->y[m] + (size_t)t * j->ys[m], j->ys[m], rb, re);
            }
        if (j->ep) { /* the unit is whole rows of one group, for every token (one token block) */
            const int gr = j->ep->group_rows, grp = (int)(rb / gr);
            const int per = (int)(gr / rbs[m]);
            if (atomic_fetch_add_explicit(&j->ep_done[j->ep_base[m] + grp], 1,
                                          memory_order_acq_rel) == per - 1)
                j->ep->fn(j->ep->arg, m, grp);
        }
    }
}

enum { PF_STEP = 2048 };

bool hm_nn_prefetch_step(const hm_nn_prefetch *p, int ith, int nth, int step, const void **ptr,
                         size_t *len) {
    if (p->n_tok < 1 || p->n_tok > MM_TOK_BLOCK || p->nw < 1 || p->nw > 8) return false;
    mm_job j = {.w = p->w, .nw = p->nw, .n = p->n_tok};
    const int64_t total = dots_units(&j, nth); /* one token block: a unit is a row block */
    const int64_t u0 = total * ith / nth, u1 = total * (ith + 1) / nth;
    /* ith's own units in the order mm_task takes them, in steps of up to PF_STEP bytes each
     * within one unit; a matrix's row blocks are equal but its last, so the step is found per
     * matrix by division, not by walking the units */
    int64_t left = step, base = 0;
    for (int m = 0; m < j.nw; base += j.nrb[m], m++) {
        const hm_matrix *w = j.w[m];
        const int64_t a = u0 > base ? u0 - base : 0,
                      c = u1 - base < j.nrb[m] ? u1 - base : j.nrb[m];
        if (a >= c) continue;
        const int64_t full = j.rbs[m] * (int64_t)w->row_bytes, per = (full + PF_STEP - 1) / PF_STEP;
        const int64_t last_rows = w->rows - (j.nrb[m] - 1) * j.rbs[m];
        const bool has_last = c == j.nrb[m];
        const int64_t n_full = c - a - (has_last ? 1 : 0);
        const int64_t per_last = (last_rows * (int64_t)w->row_bytes + PF_STEP - 1) / PF_STEP;
        if (left >= n_full * per + (has_last ? per_last : 0)) {
            left -= n_full * per + (has_last ? per_last : 0);
            continue;
        }
        const int64_t unit = left < n_full * per ? a + left / per : j.nrb[m] - 1,
                      within = left < n_full * per ? left % per : left - n_full * per;
        const int64_t rows = unit == j.nrb[m] - 1 ? last_rows : j.rbs[m];
        const int64_t bytes = rows * (int64_t)w->row_bytes, skip = within * PF_STEP;
        *ptr = (const char *)w->data + (size_t)(unit * j.rbs[m]) * w->row_bytes + (size_t)skip;
        *len = (size_t)(bytes - skip < PF_STEP ? bytes - skip : PF_STEP);
        return true;
    }
    return false;
}

bool hm_nn_prefetch_idle(int ith, int nth, void *arg, int step) {
    const void *ptr;
    size_t len;
    if (!hm_nn_prefetch_step(arg, ith, nth, step, &ptr, &len)) return false;
    for (size_t o = 0; o < len; o += 64) __builtin_prefetch((const char *)ptr + o, 0, 2);
    return true;
}

/* Runs a matmul job, its work ranges set up first (the per-row path's at the scratch's start, the
 * tile paths' after the threads' scratch). */
static void mm_start(hm_pool *pool, mm_job *j) {
#if defined(__x86_64__)
    size_t act, per_thread, blk;
    if (tile_bytes(j->amx, j->w[0], j->n, &act, &per_thread, &blk)) {
        const int nth = hm_pool_size(pool);
        j->tbt = hm_tile_token_block(j->w[0]->cols, j->n);
        j->blk = blk, j->act = act, j->per_thread = per_thread;
        const int nb = (j->n + j->tbt - 1) / j->tbt;
        int64_t units = 0;
        for (int m = 0; m < j->nw; m++) units += (j->w[m]->rows + 31) / 32;
        j->cu = hm_tile_claim_units(units * nb, nth);
        j->cpb = 0;
        for (int m = 0; m < j->nw; m++) {
            j->tcl[m] = ((j->w[m]->rows + 31) / 32 + j->cu - 1) / j->cu;
            j->cpb += j->tcl[m];
        }
        const uintptr_t scr = ((uintptr_t)j->scratch + 63) & ~(uintptr_t)63;
        j->work = (hm_work_slot *)(scr + align64(act) + (size_t)nth * per_thread);
        hm_work_init(j->work, nth, j->cpb * nb);
    }
#endif
    if (j->amx == MM_DOTS) {
        const int nth = hm_pool_size(pool);
        j->work = (hm_work_slot *)(((uintptr_t)j->scratch + 63) & ~(uintptr_t)63);
        hm_work_init(j->work, nth, dots_units(j, nth));
        j->xa = (uint8_t *)(j->work + nth);
        /* one or two tokens: the caller converts them (about its share's cost anyway) and the
         * job needs no barrier before the rows start (decode: ~4 us per matmul) */
        const hm_matrix *w0 = j->w[0];
        j->pre_converted = j->n <= 2 && hm_act_type(w0->type) != HM_TYPE_F32;
        if (j->pre_converted) {
            const size_t ab = hm_act_bytes(w0->type, w0->cols);
            for (int t = 0; t < j->n; t++)
                hm_act_convert(w0->type, j->x + (size_t)t * j->xs, j->xa + (size_t)t * ab,
                               w0->cols);
        }
    }
    hm_pool_run(pool, mm_task, j);
}

/* Whether the job can run ep inside: the per-row path with one token block, every matrix whole
 * groups that its row blocks tile, at most HM_NN_EP_MAX groups; sets the counters up. */
static bool ep_setup(mm_job *j, const hm_nn_epilogue *ep, atomic_int *done) {
    if (!ep || j->amx != MM_DOTS || j->n > MM_TOK_BLOCK || ep->group_rows <= 0) return false;
    const int nth = hm_pool_size(j->pool);
    mm_job t = {.w = j->w, .nw = j->nw, .n = j->n};
    dots_units(&t, nth); /* the row blocks mm_start will use */
    int total = 0;
    for (int m = 0; m < j->nw; m++) {
        const int64_t rows = j->w[m]->rows;
        if (rows % ep->group_rows || ep->group_rows % t.rbs[m]) return false;
        j->ep_base[m] = total;
        total += (int)(rows / ep->group_rows);
        if (total > HM_NN_EP_MAX) return false;
    }
    for (int i = 0; i < total; i++) atomic_init(&done[i], 0);
    j->ep = ep, j->ep_done = done;
    return true;
}

static void ep_after(const hm_matrix *const *w, int nw, const hm_nn_epilogue *ep) {
    for (int m = 0; m < nw; m++)
        for (int64_t g = 0; g < w[m]->rows / ep->group_rows; g++) ep->fn(ep->arg, m, (int)g);
}

void hm_nn_matmul_multi_ep(hm_pool *pool, const hm_matrix *const *w, int nw, const float *x,
                           size_t x_stride, int n, float *const *y, const size_t *y_stride,
                           void *scratch, unsigned flags, const hm_nn_epilogue *ep) {
    const hm_cpu_ops *ops = NULL;
    if (n <= 0 || nw <= 0 || hm_cpu_ops_get(&ops) != HM_OK) return;
    if (ep && ep->group_rows <= 0) ep = NULL;
    bool same = nw <= 8;
    for (int m = 1; m < nw && same; m++)
        same = hm_act_type(w[m]->type) == hm_act_type(w[0]->type) && w[m]->cols == w[0]->cols;
    /* one job for all: the same activation type and columns, and the same path (the tile
     * paths then pack the activations once for every matrix) */
    const int path = use_amx(ops, w[0], n, flags);
    for (int m = 1; m < nw && same; m++)
        same = use_amx(ops, w[m], n, flags) == path &&
               (path != MM_I8 || w[m]->type == w[0]->type); /* the int8 packing is per type */
    if (!same) {
        for (int m = 0; m < nw; m++) {
            mm_job j = {.pool = pool,
                        .w = &w[m],
                        .nw = 1,
                        .x = x,
                        .xs = x_stride,
                        .n = n,
                        .y = &y[m],
                        .ys = &y_stride[m],
                        .scratch = scratch,
                        .ops = ops,
                        .amx = use_amx(ops, w[m], n, flags)};
            mm_start(pool, &j);
        }
        if (ep) ep_after(w, nw, ep);
        return;
    }
    mm_job j = {.pool = pool,
                .w = w,
                .nw = nw,
                .x = x,
                .xs = x_stride,
                .n = n,
                .y = y,
                .ys = y_stride,
                .scratch = scratch,
                .ops = ops,
                .amx = path};
    atomic_int done[HM_NN_EP_MAX];
    const bool inside = ep_setup(&j, ep, done);
    mm_start(pool, &j);
    if (ep && !inside) ep_after(w, nw, ep);
}

void hm_nn_matmul_multi(hm_pool *pool, const hm_matrix *const *w, int nw, const float *x,
                        size_t x_stride, int n, float *const *y, const size_t *y_stride,
                        void *scratch, unsigned flags) {
    hm_nn_matmul_multi_ep(pool, w, nw, x, x_stride, n, y, y_stride, scratch, flags, NULL);
}

void hm_nn_matmul(hm_pool *pool, const hm_matrix *w, const float *x, size_t x_stride, int n,
                  float *y, size_t y_stride, void *scratch, unsigned flags) {
    hm_nn_matmul_multi(pool, &w, 1, x, x_stride, n, &y, &y_stride, scratch, flags);
}

/* ---------------------------------------------------------------- attention */

/* Work units are (token, kv head, position chunk): the group of query heads sharing a kv head
 * runs together, so every K and V block is read once per unit for the whole group. Scores are
 * small GEMMs over blocks of 16 keys (qk_block16, straight from the transposed K blocks of the
 * cache), the probabilities times V likewise (pv_block16). When tokens x kv heads cannot keep the
 * threads busy (decode), positions are split into chunks of whole blocks whose partial softmax
 * results (max, sum, unnormalised output) are merged by the thread that finishes the last chunk of
 * each (token, kv head). */
enum { ATTN_MAX_UNITS_PER_THREAD = 4, ATTN_MIN_CHUNK = 64 };
/* Prefill (>= ATTN_BLOCK_MIN_TOKENS tokens): units of (kv head, up to ATTN_QROWS / group
 * consecutive tokens of one sequence), so each K/V block is loaded once per unit for all its
 * query rows. */
enum { ATTN_QROWS = 64, ATTN_BLOCK_MIN_TOKENS = 16 };

static size_t part_floats(int group, int hd) {
    return (size_t)group * ((size_t)hd + 2);
}

static const void *kv_at(const hm_nn_attn *a, const void *base, size_t elems) {
    return (const uint8_t *)base + elems * (a->kv_f16 ? 2 : 4);
}

typedef void (*f16_fn)(int64_t n, const uint16_t *x, float *y);

/* K block b of a head (16 positions, [hd][16]) as floats: in the cache, or converted into tmp */
static const float *k_block(const hm_nn_attn *a, f16_fn cvt, const void *head, size_t b,
                            float *tmp) {
    const size_t n = (size_t)HM_NN_KBLK * (size_t)a->head_dim;
    if (!a->kv_f16) return (const float *)head + b * n;
    cvt((int64_t)n, (const uint16_t *)head + b * n, tmp);
    return tmp;
}

/* V rows p0 .. p0 + 15 of a head as floats: in the cache when all nk <= 16 rows are there and
 * are floats, else converted/copied into tmp with the rows past nk zeroed (a 0 probability times
 * a stale non-finite value would still be NaN) */
static const float *v_block(const hm_nn_attn *a, f16_fn cvt, const void *head, size_t p0, int nk,
                            float *tmp) {
    const int hd = a->head_dim;
    if (!a->kv_f16 && nk == HM_NN_KBLK) return (const float *)head + p0 * (size_t)hd;
    /* the nk rows are contiguous in the cache */
    if (a->kv_f16)
        cvt((int64_t)nk * hd, (const uint16_t *)head + p0 * (size_t)hd, tmp);
    else
        memcpy(tmp, (const float *)head + p0 * (size_t)hd, (size_t)nk * hd * sizeof(float));
    memset(tmp + (size_t)nk * hd, 0, (size_t)(HM_NN_KBLK - nk) * (size_t)hd * sizeof(float));
    return tmp;
}

void hm_nn_kv_store(void *k_cache, void *v_cache, bool f16, size_t kv_head_stride, int n_kv_heads,
                    int head_dim, int32_t pos, const float *k, const float *v) {
    const size_t hd = (size_t)head_dim, p = (size_t)pos;
    if (!f16) {
        float *kc = k_cache, *vc = v_cache;
        for (int h = 0; h < n_kv_heads; h++) {
            const float *kh = k + (size_t)h * hd;
            float *kb = kc + (size_t)h * kv_head_stride;
            for (size_t d = 0; d < hd; d++) kb[hm_nn_k_index(p, d, hd)] = kh[d];
            memcpy(vc + (size_t)h * kv_head_stride + p * hd, v + (size_t)h * hd,
                   hd * sizeof(float));
        }
        return;
    }
    const hm_cpu_ops *ops;
    if (hm_cpu_ops_get(&ops) != HM_OK || !ops->f32_to_f16) ops = &hm_ops_ref;
    uint16_t *kc = k_cache, *vc = v_cache, t[256];
    for (int h = 0; h < n_kv_heads; h++) {
        const float *kh = k + (size_t)h * hd;
        uint16_t *kb = kc + (size_t)h * kv_head_stride;
        for (size_t d0 = 0; d0 < hd; d0 += 256) { /* K is transposed: convert, then scatter */
            const size_t nd = hd - d0 < 256 ? hd - d0 : 256;
            ops->f32_to_f16((int64_t)nd, kh + d0, t);
            for (size_t d = 0; d < nd; d++) kb[hm_nn_k_index(p, d0 + d, hd)] = t[d];
        }
        ops->f32_to_f16((int64_t)hd, v + (size_t)h * hd, vc + (size_t)h * kv_head_stride + p * hd);
    }
}

/* per thread: scores [ATTN_QROWS][max_ctx + 16], a K block and a V block [16][hd] each */
static size_t per_thread_floats(int group, int max_ctx, int hd) {
    const int rows = group > ATTN_QROWS ? group : ATTN_QROWS;
    const size_t f = (size_t)rows * ((size_t)max_ctx + 16) + (size_t)32 * (size_t)hd;
    return (f + 15) & ~(size_t)15;
}

size_t hm_nn_attn_scratch_floats(int max_ctx, int n_heads, int n_kv_heads, int head_dim,
                                 int n_threads) {
    const int group = n_heads / (n_kv_heads > 0 ? n_kv_heads : 1);
    size_t per_thread = per_thread_floats(group, max_ctx, head_dim);
    size_t parts =
        (size_t)ATTN_MAX_UNITS_PER_THREAD * (size_t)n_threads * part_floats(group, head_dim);
    /* + one chunk counter per (token, kv head) of a split decode: fewer than n_threads */
    return (size_t)n_threads * per_thread + parts + (size_t)n_threads + 16;
}

typedef struct attn_job {
    const hm_nn_attn *a;
    hm_pool *pool;
    void (*axpy)(int64_t n, float a, const float *x, float *y);
    int chunks; /* position chunks per (token, kv head) */
    float *parts;
    atomic_int *done; /* split decode: chunks finished per (token, kv head) */
    bool blocked;     /* prefill: blocked over query tokens */
    void (*qk)(const float *q, int nq, int hd, const float *kt, float scale, float *s,
               size_t s_stride);
    void (*pv)(const float *p, size_t p_stride, int nq, const float *v, size_t v_stride, int hd,
               float *o, size_t o_stride);
    float (*expsum)(int64_t n, float *x, float m);
    float (*max)(int64_t n, const float *x);
    void (*scale)(int64_t n, float a, float *x);
    f16_fn f16;      /* f16 cache blocks to floats */
    int units;       /* blocked: (kv head, token block) units */
    atomic_int next; /* blocked: claims so far */
} attn_job;

/* The block of consecutive tokens starting at t0 that share t0's sequence (cache), at most tb. */
static int token_block_end(const hm_nn_attn *a, int t0, int tb) {
    int t1 = t0 + 1;
    while (t1 < a->n_tok && t1 - t0 < tb && a->kv[t1].k == a->kv[t0].k) t1++;
    return t1;
}

/* The query rows of nt consecutive tokens (group rows of hd each, contiguous per token; token i
 * at q + i * q_ts) against positions [p0, p0 + len) of one kv head (p0 a multiple of 16); token i
 * sees the positions up to pos[i] of them. Scores go to S (row stride ss, row r = i * group + g);
 * with `norm` the rows are normalised and o = softmax . V (token i's rows at o + i * o_ts, rows
 * hd apart), else o is unnormalised and row r's max and sum go to mz[2 * r], mz[2 * r + 1]. */
static void attn_span(const attn_job *j, const float *q, size_t q_ts, int nt, int group,
                      const int32_t *pos, const void *kh, const void *vh, int p0, int len, float *S,
                      size_t ss, float *kt, float *vb, float *o, size_t o_ts, bool norm,
                      float *mz) {
    const hm_nn_attn *a = j->a;
    const int hd = a->head_dim, padded = (len + 15) & ~15;
    const size_t tok_rows = (size_t)group * ss; /* S floats per token */
    for (int b = 0; b < padded; b += 16) {
        const float *kb = k_block(a, j->f16, kh, (size_t)(p0 + b) / 16, kt);
        for (int i = 0; i < nt; i++)
            j->qk(q + (size_t)i * q_ts, group, hd, kb, a->scale, S + (size_t)i * tok_rows + b, ss);
    }
    for (int i = 0; i < nt; i++) {
        const int e = pos[i] + 1 < p0 + len ? pos[i] + 1 : p0 + len, n = e > p0 ? e - p0 : 0;
        for (int g = 0; g < group; g++) {
            const int r = i * group + g;
            float *si = S + (size_t)r * ss;
            const float m = j->max(n, si);
            /* a NaN score (NaN in q or K) makes the row NaN: the exp's clamp would hide it */
            const float z = m != m ? NAN : n > 0 ? j->expsum(n, si, m) : 0.0f;
            if (norm)
                j->scale(n, z > 0 ? 1.0f / z : z == 0 ? 0.0f : NAN, si);
            else
                mz[2 * r] = m, mz[2 * r + 1] = z;
            memset(si + n, 0, sizeof(float) * (size_t)(padded - n));
            memset(o + (size_t)i * o_ts + (size_t)g * hd, 0, (size_t)hd * sizeof(float));
        }
    }
    for (int b = 0; b < padded; b += 16) {
        const int nk = len - b < 16 ? len - b : 16;
        const float *vblk = v_block(a, j->f16, vh, (size_t)(p0 + b), nk, vb);
        for (int i = 0; i < nt; i++)
            j->pv(S + (size_t)i * tok_rows + b, ss, group, vblk, (size_t)hd, hd,
                  o + (size_t)i * o_ts, (size_t)hd);
    }
}

static void attn_blocked(attn_job *j, float *scr) {
    const hm_nn_attn *a = j->a;
    const int hd = a->head_dim, group = a->n_heads / a->n_kv_heads;
    const int tb = ATTN_QROWS / group > 0 ? ATTN_QROWS / group : 1;
    const size_t ss = (size_t)a->max_ctx + 16; /* score row stride */
    const int rows = group > ATTN_QROWS ? group : ATTN_QROWS;
    float *S = scr, *kt = S + (size_t)rows * ss, *vb = kt + (size_t)16 * hd;
    /* units: (kv head, token block), claimed one at a time: a head's blocks together (its K and
     * V stay in the caches of the cores working on it), the last blocks (the longest rows) first
     * so that cheap early blocks fill the gaps at the end */
    for (int c; (c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->units;) {
        const int nb = j->units / a->n_kv_heads, kvh = c / nb, bi = nb - 1 - c % nb;
        int t0 = 0, t1 = token_block_end(a, 0, tb);
        for (int b = 0; b < bi; b++) t0 = t1, t1 = token_block_end(a, t0, tb);
        int maxnp = 0;
        for (int t = t0; t < t1; t++) maxnp = a->pos[t] + 1 > maxnp ? a->pos[t] + 1 : maxnp;
        const size_t hoff = (size_t)kvh * group * hd;
        attn_span(j, a->q + (size_t)t0 * a->q_stride + hoff, a->q_stride, t1 - t0, group,
                  a->pos + t0, kv_at(a, a->kv[t0].k, (size_t)kvh * a->kv_head_stride),
                  kv_at(a, a->kv[t0].v, (size_t)kvh * a->kv_head_stride), 0, maxnp, S, ss, kt, vb,
                  a->out + (size_t)t0 * a->out_stride + hoff, a->out_stride, true, NULL);
    }
}

/* Row (token t, head h) of a split decode from its C chunks' partial results (max, sum,
 * unnormalised output). */
static void merge_row(const attn_job *j, int t, int h) {
    const hm_nn_attn *a = j->a;
    const int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, C = j->chunks;
    const int kvh = h / group, g = h % group;
    const size_t pf = part_floats(group, hd);
    const float *base = j->parts + ((size_t)t * a->n_kv_heads + (size_t)kvh) * C * pf;
    float M = -FLT_MAX, Z = 0;
    float *o = a->out + (size_t)t * a->out_stride + (size_t)h * hd;
    for (int ch = 0; ch < C; ch++) {
        const float *pp = base + (size_t)ch * pf + (size_t)group * hd + 2 * (size_t)g;
        if (pp[1] != pp[1]) { /* a chunk with NaN scores: the row is NaN */
            for (int i = 0; i < hd; i++) o[i] = NAN;
            return;
        }
        if (pp[1] > 0 && pp[0] > M) M = pp[0];
    }
    memset(o, 0, (size_t)hd * sizeof(float));
    for (int ch = 0; ch < C; ch++) {
        const float *pp = base + (size_t)ch * pf;
        const float *mz = pp + (size_t)group * hd + 2 * (size_t)g;
        if (!(mz[1] > 0)) continue;
        const float f = expf(mz[0] - M);
        Z += f * mz[1];
        j->axpy(hd, f, pp + (size_t)g * hd, o);
    }
    j->scale(hd, Z > 0 ? 1.0f / Z : 0.0f, o);
}

static void attn_task(int ith, int nth, void *arg) {
    attn_job *j = arg;
    const hm_nn_attn *a = j->a;
    const int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, C = j->chunks;
    const size_t pf = part_floats(group, hd);
    float *sc = a->scratch + (size_t)ith * per_thread_floats(group, a->max_ctx, hd);
    if (j->blocked) {
        attn_blocked(j, sc);
        return;
    }
    const int rows = group > ATTN_QROWS ? group : ATTN_QROWS;
    const size_t ss = (size_t)a->max_ctx + 16;
    float *kt = sc + (size_t)rows * ss, *vb = kt + (size_t)16 * hd;
    const int units = a->n_tok * a->n_kv_heads * C;
    for (int u = ith; u < units; u += nth) {
        const int t = u / (a->n_kv_heads * C), kvh = (u / C) % a->n_kv_heads, ch = u % C;
        const int np = a->pos[t] + 1, nb = (np + 15) / 16;
        const int p0 = (int)((int64_t)nb * ch / C) * 16,
                  p1e = (int)((int64_t)nb * (ch + 1) / C) * 16, p1 = p1e < np ? p1e : np;
        const float *q = a->q + (size_t)t * a->q_stride + (size_t)kvh * group * hd;
        float *part = C > 1 ? j->parts + (size_t)u * pf : NULL;
        float *o0 = part ? part : a->out + (size_t)t * a->out_stride + (size_t)kvh * group * hd;
        attn_span(j, q, 0, 1, group, a->pos + t,
                  kv_at(a, a->kv[t].k, (size_t)kvh * a->kv_head_stride),
                  kv_at(a, a->kv[t].v, (size_t)kvh * a->kv_head_stride), p0, p1 > p0 ? p1 - p0 : 0,
                  sc, (size_t)(p1e - p0), kt, vb, o0, (size_t)hd, !part,
                  part ? part + (size_t)group * hd : NULL);
        /* the unit that finishes a (token, kv head)'s last chunk merges its chunks (no barrier:
         * the others go home) */
        if (part && atomic_fetch_add_explicit(&j->done[u / C], 1, memory_order_acq_rel) == C - 1)
            for (int g = 0; g < group; g++) merge_row(j, t, kvh * group + g);
    }
}

void hm_nn_attention(hm_pool *pool, const hm_nn_attn *a) {
    const hm_cpu_ops *ops = NULL;
    if (hm_cpu_ops_get(&ops) != HM_OK) ops = &hm_ops_ref;
    const int nth = hm_pool_size(pool);
    const bool blocks = ops->qk_block16 && ops->pv_block16;
    attn_job j = {.a = a,
                  .pool = pool,
                  .axpy = ops->axpy_f32 ? ops->axpy_f32 : hm_ops_ref.axpy_f32,
                  .chunks = 1,
                  .blocked = a->n_tok >= ATTN_BLOCK_MIN_TOKENS,
                  .qk = blocks ? ops->qk_block16 : hm_ops_ref.qk_block16,
                  .pv = blocks ? ops->pv_block16 : hm_ops_ref.pv_block16,
                  .expsum = ops->expsum_f32 ? ops->expsum_f32 : hm_ops_ref.expsum_f32,
                  .max = ops->max_f32 ? ops->max_f32 : hm_ops_ref.max_f32,
                  .scale = ops->scale_f32 ? ops->scale_f32 : hm_ops_ref.scale_f32,
                  .f16 = ops->f16_to_f32 ? ops->f16_to_f32 : hm_ops_ref.f16_to_f32};
    const int base = a->n_tok * a->n_kv_heads;
    int min_np = a->max_ctx;
    for (int t = 0; t < a->n_tok; t++) min_np = a->pos[t] + 1 < min_np ? a->pos[t] + 1 : min_np;
    /* split positions while there are fewer units than threads and chunks stay long enough */
    if (!j.blocked)
        while (base * j.chunks * 2 <= nth &&
               base * j.chunks * 2 <= ATTN_MAX_UNITS_PER_THREAD * nth &&
               min_np / (j.chunks * 2) >= ATTN_MIN_CHUNK)
            j.chunks *= 2;
    const int group = a->n_heads / a->n_kv_heads;
    atomic_init(&j.next, 0);
    if (j.blocked) {
        const int tb = ATTN_QROWS / group > 0 ? ATTN_QROWS / group : 1;
        for (int t0 = 0; t0 < a->n_tok; t0 = token_block_end(a, t0, tb)) j.units += a->n_kv_heads;
    }
    j.parts = a->scratch + (size_t)nth * per_thread_floats(group, a->max_ctx, a->head_dim);
    if (j.chunks > 1) {
        j.done = (atomic_int *)(j.parts + (size_t)ATTN_MAX_UNITS_PER_THREAD * (size_t)nth *
                                              part_floats(group, a->head_dim));
        for (int i = 0; i < base; i++) atomic_init(&j.done[i], 0);
    }
    hm_pool_run(pool, attn_task, &j);
}
