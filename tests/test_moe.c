/* test_moe.c - the CPU expert engine against a per-token dense reference in float64 computed from
 * the dequantized weights (the reference dequantizers are bit-exact with gguf-py, test_quant).
 * Tolerance: the engine quantizes activations (Q8_K / Q8_0 per block for matvec, int8 per 256
 * values for AMX, and the hidden state again for down), so outputs may differ by up to 3% of
 * max |out| for quantized weights; float weights with float activations by 1e-4. */
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/pool.h"
#include "cpu/matvec.h"
#include "cpu/ops.h"
#include "hmoe_moe.h"
#include "quant/fp16.h"
#include "quant/ref.h"
#include "quant/synth.h"
#include "quant/types.h"
#include "test.h"

#define NSETS 5

typedef struct {
    uint32_t tg, td;
    int64_t H, I;
    int E, k;
    hm_moe_act act;
    bool bias;
    uint8_t *wg[NSETS], *wu[NSETS], *wd[NSETS];
    float *fg[NSETS], *fu[NSETS], *fd[NSETS]; /* dequantized */
    float *bg, *bu, *bd;                      /* biases (shared by all experts) */
    hm_moe_expert *ex;
} model;

static int set_of(int e) {
    return (e * 3 + 1) % NSETS;
}

static void model_init(model *m, uint32_t tg, uint32_t td, int64_t H, int64_t I, int E, int k,
                       hm_moe_act act, bool bias, uint64_t seed) {
    memset(m, 0, sizeof *m);
    m->tg = tg, m->td = td, m->H = H, m->I = I, m->E = E, m->k = k, m->act = act, m->bias = bias;
    uint64_t rg, rd;
    hm_type_row_bytes(tg, (uint64_t)H, &rg);
    hm_type_row_bytes(td, (uint64_t)I, &rd);
    for (int s = 0; s < NSETS; s++) {
        m->wg[s] = malloc(rg * (size_t)I);
        m->wu[s] = malloc(rg * (size_t)I);
        m->wd[s] = malloc(rd * (size_t)H);
        m->fg[s] = malloc(sizeof(float) * (size_t)(I * H));
        m->fu[s] = malloc(sizeof(float) * (size_t)(I * H));
        m->fd[s] = malloc(sizeof(float) * (size_t)(I * H));
        CHECK_OK(hm_synth_fill(tg, m->wg[s], (uint64_t)(I * H), 0.0f, 0.05f, seed + 10 * s + 1));
        CHECK_OK(hm_synth_fill(tg, m->wu[s], (uint64_t)(I * H), 0.0f, 0.05f, seed + 10 * s + 2));
        CHECK_OK(hm_synth_fill(td, m->wd[s], (uint64_t)(I * H), 0.0f, 0.05f, seed + 10 * s + 3));
        for (int64_t r = 0; r < I; r++) {
            CHECK_OK(hm_dequantize_row(tg, m->wg[s] + r * rg, m->fg[s] + r * H, H));
            CHECK_OK(hm_dequantize_row(tg, m->wu[s] + r * rg, m->fu[s] + r * H, H));
        }
        for (int64_t r = 0; r < H; r++)
            CHECK_OK(hm_dequantize_row(td, m->wd[s] + r * rd, m->fd[s] + r * I, I));
    }
    if (bias) {
        m->bg = malloc(sizeof(float) * (size_t)I), m->bu = malloc(sizeof(float) * (size_t)I);
        m->bd = malloc(sizeof(float) * (size_t)H);
        for (int64_t i = 0; i < I; i++)
            m->bg[i] = 0.1f * sinf((float)i), m->bu[i] = 0.1f * cosf((float)i);
        for (int64_t i = 0; i < H; i++) m->bd[i] = 0.05f * sinf(0.3f * (float)i);
    }
    m->ex = calloc((size_t)E, sizeof *m->ex);
    for (int e = 0; e < E; e++) {
        const int s = set_of(e);
        m->ex[e].gate = (hm_moe_matrix){tg, m->wg[s], 0};
        m->ex[e].up = (hm_moe_matrix){tg, m->wu[s], 0};
        m->ex[e].down = (hm_moe_matrix){td, m->wd[s], 0};
        m->ex[e].gate_bias = m->bg, m->ex[e].up_bias = m->bu, m->ex[e].down_bias = m->bd;
    }
}

static void model_free(model *m) {
    for (int s = 0; s < NSETS; s++) {
        free(m->wg[s]), free(m->wu[s]), free(m->wd[s]);
        free(m->fg[s]), free(m->fu[s]), free(m->fd[s]);
    }
    free(m->bg), free(m->bu), free(m->bd), free(m->ex);
}

static double act_ref(hm_moe_act a, double g, double u) {
    if (a == HM_MOE_GELU) return 0.5 * g * (1.0 + erf(g / sqrt(2.0))) * u;
    if (a == HM_MOE_SWIGLU_OAI) {
        g = g < 7.0 ? g : 7.0;
        u = u < -7.0 ? -7.0 : (u > 7.0 ? 7.0 : u);
        return (u + 1.0) * g / (1.0 + exp(-1.702 * g));
    }
    return g / (1.0 + exp(-g)) * u;
}

/* out[t] = sum over unmasked slots of w * expert(x[t]) */
static void reference(const model *m, const float *x, const int32_t *ids, const float *w, int n,
                      const uint8_t *mask, double *out) {
    const int64_t H = m->H, I = m->I;
    double *h = malloc(sizeof(double) * (size_t)I);
    memset(out, 0, sizeof(double) * (size_t)(n * H));
    for (int t = 0; t < n; t++)
        for (int j = 0; j < m->k; j++) {
            const int e = ids[t * m->k + j];
            if (e < 0 || (mask && mask[e])) continue;
            const int s = set_of(e);
            const float *xt = x + t * H;
            for (int64_t r = 0; r < I; r++) {
                double g = m->bias ? m->bg[r] : 0, u = m->bias ? m->bu[r] : 0;
                for (int64_t c = 0; c < H; c++) {
                    g += (double)m->fg[s][r * H + c] * xt[c];
                    u += (double)m->fu[s][r * H + c] * xt[c];
                }
                h[r] = act_ref(m->act, g, u);
            }
            for (int64_t r = 0; r < H; r++) {
                double y = m->bias ? m->bd[r] : 0;
                for (int64_t c = 0; c < I; c++) y += (double)m->fd[s][r * I + c] * h[c];
                out[t * H + r] += w[t * m->k + j] * y;
            }
        }
    free(h);
}

static double max_err(const float *got, const double *want, int64_t n, double *scale) {
    double mx = 1e-9, e = 0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) e = fmax(e, fabs(got[i] - want[i]));
    *scale = mx;
    return e / mx;
}

/* n floats, 64-byte aligned (as a model's buffers: the engine sums straight into such an
 * output); free() releases it */
static float *fbuf64(size_t n) {
    return aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
}

/* random routing: k distinct experts per token, softmax-like weights */
static void route(int n, int E, int k, uint64_t seed, int32_t *ids, float *w) {
    for (int t = 0; t < n; t++) {
        for (int j = 0; j < k; j++) {
            int e;
            bool dup;
            do {
                e = (int)(hm_rng_next(&seed) % (uint64_t)E);
                dup = false;
                for (int q = 0; q < j; q++) dup |= ids[t * k + q] == e;
            } while (dup);
            ids[t * k + j] = e;
            w[t * k + j] = 0.2f + (float)(hm_rng_next(&seed) % 1000) / 1250.0f;
        }
    }
}

/* n tokens' inputs: activations uniform in [-1, 1] from xseed, routing from rseed (route) */
typedef struct inputs {
    float *x, *w;
    int32_t *ids;
} inputs;

static inputs inputs_make(const model *m, int n, uint64_t xseed, uint64_t rseed) {
    inputs in = {malloc(sizeof(float) * (size_t)(n * m->H)),
                 malloc(sizeof(float) * (size_t)(n * m->k)),
                 malloc(sizeof(int32_t) * (size_t)(n * m->k))};
    for (int64_t i = 0; i < n * m->H; i++)
        in.x[i] = (float)((int64_t)(hm_rng_next(&xseed) % 2001) - 1000) / 1000.0f;
    route(n, m->E, m->k, rseed, in.ids, in.w);
    return in;
}

static void inputs_free(inputs *in) {
    free(in->x), free(in->w), free(in->ids);
}

/* NUMA emulation: when set, run_case and test_repack build engines with this many slices (of
 * the pool's participants), copying their weights where g_slice_copy is set */
static int g_n_slices;
static bool g_slice_copy;

static void run_case(hm_pool *pool, const model *m, int n, double tol, const char *name,
                     bool no_amx) {
    hm_moe_params p = hm_moe_default_params();
    p.n_experts = m->E, p.hidden = m->H, p.inter = m->I, p.experts = m->ex, p.act = m->act;
    p.pool = pool, p.no_amx = no_amx, p.max_tokens = 48; /* small: several chunks at 513 tokens */
    p.n_slices = g_n_slices, p.slice_copy = g_slice_copy;
    hm_moe *moe;
    CHECK_OK(hm_moe_create(&p, &moe));
    if (!moe) return;
    float *out = fbuf64((size_t)(n * m->H));
    double *ref = malloc(sizeof(double) * (size_t)(n * m->H));
    inputs in = inputs_make(m, n, 99 + (uint64_t)n, 1234 + (uint64_t)n);
    const float *x = in.x, *w = in.w;
    const int32_t *ids = in.ids;
    CHECK_OK(hm_moe_submit(moe, x, HM_MOE_F32, ids, w, n, m->k, out, HM_MOE_F32, false));
    hm_moe_wait(moe);
    reference(m, x, ids, w, n, NULL, ref);
    double sc, err = max_err(out, ref, n * m->H, &sc);
    CHECK_MSG(err <= tol, "%s, %d tokens%s: max error %.3g of max |out| %.3g (tolerance %.3g)",
              name, n, no_amx ? " (no amx)" : "", err, sc, tol);

    if (n <= 7 || n == 64) {
        /* a mask: experts 0..E/2 live elsewhere */
        uint8_t *mask = calloc((size_t)m->E, 1);
        for (int e = 0; e < m->E / 2; e++) mask[e] = 1;
        CHECK_OK(hm_moe_set_mask(moe, mask));
        CHECK_OK(hm_moe_submit(moe, x, HM_MOE_F32, ids, w, n, m->k, out, HM_MOE_F32, false));
        hm_moe_wait(moe);
        reference(m, x, ids, w, n, mask, ref);
        err = max_err(out, ref, n * m->H, &sc);
        CHECK_MSG(err <= tol, "%s masked, %d tokens: max error %.3g", name, n, err);
        CHECK_OK(hm_moe_set_mask(moe, NULL));
        free(mask);
        /* deferral: the first k-1 slots now, the last one added afterwards == all at once */
        float *full = malloc(sizeof(float) * (size_t)(n * m->H));
        CHECK_OK(hm_moe_submit(moe, x, HM_MOE_F32, ids, w, n, m->k, full, HM_MOE_F32, false));
        hm_moe_wait(moe);
        int32_t *ia = malloc(sizeof(int32_t) * (size_t)(n * m->k)),
                *ib = malloc(sizeof(int32_t) * (size_t)(n * m->k));
        for (int i = 0; i < n * m->k; i++) {
            const bool last = i % m->k == m->k - 1;
            ia[i] = last ? -1 : ids[i];
            ib[i] = last ? ids[i] : -1;
        }
        CHECK_OK(hm_moe_submit(moe, x, HM_MOE_F32, ia, w, n, m->k, out, HM_MOE_F32, false));
        hm_moe_wait(moe);
        CHECK_OK(hm_moe_submit(moe, x, HM_MOE_F32, ib, w, n, m->k, out, HM_MOE_F32, true));
        hm_moe_wait(moe);
        /* the split changes experts' token counts and so maybe their path (matvec / AMX): both
         * must match the reference; with the matvec path only, they agree to rounding */
        reference(m, x, ids, w, n, NULL, ref);
        err = max_err(out, ref, n * m->H, &sc);
        CHECK_MSG(err <= tol, "%s deferral, %d tokens: max error %.3g", name, n, err);
        if (n <= 4) {
            double d = 0, fm = 1e-9;
            for (int64_t i = 0; i < n * m->H; i++)
                d = fmax(d, fabs(out[i] - full[i])), fm = fmax(fm, fabs(full[i]));
            CHECK_MSG(d <= 1e-5 * fm, "%s deferral, %d tokens: split != whole by %.3g", name, n,
                      d / fm);
        }
        /* in place (out == x): the sums then cannot go straight into out, which the job would
         * clear while it still reads x; the result is the same bits */
        float *xo = fbuf64((size_t)(n * m->H)); /* aligned: only the overlap stops direct sums */
        memcpy(xo, x, sizeof(float) * (size_t)(n * m->H));
        CHECK_OK(hm_moe_submit(moe, xo, HM_MOE_F32, ids, w, n, m->k, xo, HM_MOE_F32, false));
        hm_moe_wait(moe);
        CHECK_MSG(!memcmp(xo, full, sizeof(float) * (size_t)(n * m->H)),
                  "%s in place, %d tokens: out differs from the out-of-place result", name, n);
        free(xo);
        /* bf16 in and out */
        hm_bf16 *xb = malloc(sizeof(hm_bf16) * (size_t)(n * m->H)),
                *ob = malloc(sizeof(hm_bf16) * (size_t)(n * m->H));
        for (int64_t i = 0; i < n * m->H; i++) xb[i] = hm_f32_to_bf16(x[i]);
        CHECK_OK(hm_moe_submit(moe, xb, HM_MOE_BF16, ids, w, n, m->k, ob, HM_MOE_BF16, false));
        hm_moe_wait(moe);
        for (int64_t i = 0; i < n * m->H; i++) out[i] = hm_bf16_to_f32(ob[i]);
        reference(m, x, ids, w, n, NULL, ref);
        err = max_err(out, ref, n * m->H, &sc);
        CHECK_MSG(err <= tol + 1e-2, "%s bf16, %d tokens: max error %.3g", name, n, err);
        free(xb), free(ob), free(ia), free(ib), free(full);
    }
    inputs_free(&in);
    free(out), free(ref);
    hm_moe_free(moe);
}

/* One random batch of n tokens through engines a and b: how many outputs differ in their bits. */
static int64_t outputs_differ(hm_moe *a, hm_moe *b, const model *m, int n, uint64_t seed) {
    float *oa = fbuf64((size_t)(n * m->H)), *ob = fbuf64((size_t)(n * m->H));
    inputs in = inputs_make(m, n, seed, seed + 4321);
    CHECK_OK(hm_moe_submit(a, in.x, HM_MOE_F32, in.ids, in.w, n, m->k, oa, HM_MOE_F32, false));
    hm_moe_wait(a);
    CHECK_OK(hm_moe_submit(b, in.x, HM_MOE_F32, in.ids, in.w, n, m->k, ob, HM_MOE_F32, false));
    hm_moe_wait(b);
    int64_t diff = 0;
    for (int64_t i = 0; i < n * m->H; i++) diff += memcmp(&oa[i], &ob[i], sizeof(float)) != 0;
    inputs_free(&in);
    free(oa), free(ob);
    return diff;
}

/* The decode path's statistics: one participation per thread and submit, the parts inside the
 * time in the job, each start after its launch; nothing from the phased path
 * (HMOE_MOE_DECODE=0); the same from an engine in two slices (no routing time of its own counted);
 * zero after a reset. */
static void test_decode_stats(hm_pool *pool, const model *m) {
    hm_moe_params p = hm_moe_default_params();
    p.n_experts = m->E, p.hidden = m->H, p.inter = m->I, p.experts = m->ex, p.act = m->act;
    p.pool = pool, p.max_tokens = 64;
    hm_moe *dec = NULL, *phased = NULL, *sliced = NULL;
    CHECK_OK(hm_moe_create(&p, &dec));
    char *old = env_push("HMOE_MOE_DECODE", "0");
    CHECK_OK(hm_moe_create(&p, &phased));
    env_pop("HMOE_MOE_DECODE", old);
    if (hm_pool_size(pool) >= 2) {
        p.n_slices = 2;
        CHECK_OK(hm_moe_create(&p, &sliced));
    }
    if (!dec || !phased) {
        hm_moe_free(dec), hm_moe_free(phased), hm_moe_free(sliced);
        return;
    }
    float *out = fbuf64((size_t)(4 * m->H));
    for (int i = 0; i < 4; i++) {
        const int n = i == 0 ? 1 : 3;
        hm_moe *a = i < 2 ? dec : i == 2 ? phased : sliced;
        if (!a) continue;
        inputs in = inputs_make(m, n, 5 + (uint64_t)i, 9 + (uint64_t)i);
        hm_moe_kernel_stats_get(a, NULL, true);
        for (int rep = 0; rep < 2; rep++) {
            CHECK_OK(
                hm_moe_submit(a, in.x, HM_MOE_F32, in.ids, in.w, n, m->k, out, HM_MOE_F32, false));
            hm_moe_wait(a);
        }
        hm_moe_kernel_stats st;
        hm_moe_kernel_stats_get(a, &st, true);
        const uint64_t want = a != phased ? 2 * (uint64_t)hm_pool_size(pool) : 0;
        CHECK_MSG(st.dec_jobs == want, "%d tokens: %llu decode participations, want %llu", n,
                  (unsigned long long)st.dec_jobs, (unsigned long long)want);
        const double parts =
            st.dec_gu_s + st.dec_down_s + st.dec_h_wait_s + st.dec_barrier_s + st.dec_sum_s;
        /* the claims' kernels lie inside the job's time; the waits are not compared: two early
         * runs under heavy contention (all threads on one CPU) summed more barrier and h-wait
         * time than time in the job, which no later run (30+) repeated and nothing here explains
         * (noted in bench/RESULTS.md, 2026-12-01) */
        CHECK_MSG(a == phased ? st.dec_in_s == 0 && parts == 0 && st.dec_prep_s == 0
                              : st.dec_in_s > 0 && st.dec_gu_s > 0 && st.dec_down_s > 0 &&
                                    (a == sliced ? st.dec_prep_s == 0 : st.dec_prep_s > 0) &&
                                    st.dec_gu_s + st.dec_down_s <= st.dec_in_s * (1 + 1e-12),
                  "%d tokens%s: decode times in the job %g, its parts %g (gate/up %g, down %g)", n,
                  a == sliced ? " (slices)" : "", st.dec_in_s, parts, st.dec_gu_s, st.dec_down_s);
        /* from a launch to a participant's start: microseconds, never the clock's epoch */
        CHECK_MSG(st.dec_start_s >= 0 && st.dec_start_s <= (double)st.dec_jobs,
                  "%d tokens%s: %g s from the launches to the starts of %llu participations", n,
                  a == sliced ? " (slices)" : "", st.dec_start_s, (unsigned long long)st.dec_jobs);
        hm_moe_kernel_stats_get(a, &st, false);
        CHECK_MSG(st.dec_jobs == 0 && st.dec_in_s == 0, "decode stats not reset");
        inputs_free(&in);
    }
    free(out);
    hm_moe_free(dec), hm_moe_free(phased), hm_moe_free(sliced);
}

/* The engine's A/B switches give the same bits: no barrier between gate/up and down against the
 * barrier (HMOE_MOE_FLOW=0), sums straight into the output against the scratch copy
 * (HMOE_MOE_DIRECT_OUT=0, and an output off a cache line, which takes the copy too), down
 * claims never split (HMOE_MOE_STEAL=0) and split as often as they can be (=test); and so does
 * a pool of one thread more. */
static void test_same_bits(hm_pool *pool, const model *m, int n) {
    hm_moe_params p = hm_moe_default_params();
    p.n_experts = m->E, p.hidden = m->H, p.inter = m->I, p.experts = m->ex, p.act = m->act;
    /* above 256 tokens, passes of at most 128 tokens: several chunks, each with its own down
     * claims (the claim states of one chunk must not be taken for the next's) */
    p.pool = pool, p.max_tokens = n > 256 ? 128 : 1024, p.repack = true;
    const char *const env[][2] = {{"HMOE_MOE_FLOW", "0"},
                                  {"HMOE_MOE_DIRECT_OUT", "0"},
                                  {"HMOE_MOE_STEAL", "0"},
                                  {"HMOE_MOE_STEAL", "test"}};
    hm_moe *a = NULL;
    CHECK_OK(hm_moe_create(&p, &a));
    const hm_cpu_ops *ops = NULL;
    const bool tiles = hm_cpu_ops_get(&ops) == HM_OK && ops->i8_down_acc; /* the swapped path */
    for (int i = 0; i < 4 && a; i++) {
        hm_moe *b = NULL;
        setenv(env[i][0], env[i][1], 1);
        CHECK_OK(hm_moe_create(&p, &b));
        unsetenv(env[i][0]);
        if (!b) break;
        hm_moe_kernel_stats_get(b, NULL, true);
        for (int rep = 0; rep < 3; rep++) { /* timing differs from run to run: the bits may not */
            const int64_t diff = outputs_differ(a, b, m, n, 31 + (uint64_t)(n + rep));
            CHECK_MSG(diff == 0, "%s, %d tokens: %lld outputs differ with %s=%s",
                      hm_type_name(m->ex[0].gate.type), n, (long long)diff, env[i][0], env[i][1]);
        }
        hm_moe_kernel_stats st;
        hm_moe_kernel_stats_get(b, &st, true);
        /* with the owners but one paused, down claims were split (several threads only) */
        if (!strcmp(env[i][1], "test") && tiles && hm_pool_size(pool) > 1)
            CHECK_MSG(st.steals > 0, "%d tokens: no down claim split with HMOE_MOE_STEAL=test", n);
        if (!strcmp(env[i][1], "0") && !strcmp(env[i][0], "HMOE_MOE_STEAL"))
            CHECK_MSG(st.steals == 0, "%d tokens: %llu down claims split with HMOE_MOE_STEAL=0", n,
                      (unsigned long long)st.steals);
        hm_moe_free(b);
    }
    if (a) { /* another thread count: the down claims do not depend on it, nor do the sums */
        hm_pool_params pp = hm_pool_default_params();
        pp.n_threads = hm_pool_size(pool) + 1, pp.pin = false;
        hm_pool *other = NULL;
        hm_moe *b = NULL;
        CHECK_OK(hm_pool_create(&pp, &other));
        hm_moe_params q = p;
        q.pool = other;
        if (other) CHECK_OK(hm_moe_create(&q, &b));
        for (int rep = 0; b && rep < 3; rep++) { /* the last: a decode batch of 3 tokens */
            const int nt = rep < 2 ? n : 3;
            const int64_t diff = outputs_differ(a, b, m, nt, 57 + (uint64_t)(n + rep));
            CHECK_MSG(diff == 0, "%s, %d tokens: %lld outputs differ on %d threads against %d",
                      hm_type_name(m->ex[0].gate.type), nt, (long long)diff, pp.n_threads,
                      hm_pool_size(pool));
        }
        hm_moe_free(b);
        hm_pool_free(other);
    }
    if (a) { /* an output 4 bytes off a line: summed in the scratch, then copied */
        float *o1 = fbuf64((size_t)(n * m->H)), *o2 = fbuf64((size_t)(n * m->H) + 1);
        inputs in = inputs_make(m, n, 77, 78);
        CHECK_OK(hm_moe_submit(a, in.x, HM_MOE_F32, in.ids, in.w, n, m->k, o1, HM_MOE_F32, false));
        hm_moe_wait(a);
        CHECK_OK(
            hm_moe_submit(a, in.x, HM_MOE_F32, in.ids, in.w, n, m->k, o2 + 1, HM_MOE_F32, false));
        hm_moe_wait(a);
        CHECK_MSG(!memcmp(o1, o2 + 1, sizeof(float) * (size_t)(n * m->H)),
                  "%d tokens: an output off a cache line differs", n);
        inputs_free(&in);
        free(o1), free(o2);
    }
    hm_moe_free(a);
}

/* Small batches (up to 4 tokens) are routed without the counting sort: the outputs are the same
 * bits as with it (HMOE_MOE_ROUTE=full), with ids repeated within a token, ids of -1, masked
 * experts, and a batch whose every expert is masked (zeros out, or the output left as it was
 * with accumulate). */
static void test_route_small(hm_pool *pool, const model *m) {
    hm_moe_params p = hm_moe_default_params();
    p.n_experts = m->E, p.hidden = m->H, p.inter = m->I, p.experts = m->ex, p.act = m->act;
    p.pool = pool, p.max_tokens = 16;
    hm_moe *a = NULL, *b = NULL;
    CHECK_OK(hm_moe_create(&p, &a));
    char *old = env_push("HMOE_MOE_ROUTE", "full");
    CHECK_OK(hm_moe_create(&p, &b));
    env_pop("HMOE_MOE_ROUTE", old);
    uint8_t *mask = calloc((size_t)m->E, 1);
    for (int c = 0; a && b && mask && c < 12; c++) {
        const int n = 1 + c % 4, k = m->k, masked = c >= 8;
        inputs in = inputs_make(m, n, 300 + (uint64_t)c, 400 + (uint64_t)c);
        /* a repeated id (three times where k allows: their sum's order), an id of -1; in case 7
         * every token's repeated id the same expert's (12 assignments with k >= 4: on AMX
         * machines the int8 tiles' path, which only the counting sort routes) */
        if (c % 2)
            for (int t = 0; t < n; t++) {
                if (c == 7 && k >= 4) in.ids[t * k] = in.ids[0];
                in.ids[t * k + k - 1] = in.ids[t * k], in.ids[t * k + 1] = -1;
                if (k >= 4) in.ids[t * k + k - 2] = in.ids[t * k];
            }
        memset(mask, 0, (size_t)m->E);
        if (masked) /* every routed expert (c = 11) or every other */
            for (int i = 0; i < n * k; i++)
                if (in.ids[i] >= 0 && (c == 11 || i % 2)) mask[in.ids[i]] = 1;
        CHECK_OK(hm_moe_set_mask(a, masked ? mask : NULL));
        CHECK_OK(hm_moe_set_mask(b, masked ? mask : NULL));
        for (int acc = 0; acc < 2; acc++) {
            float *oa = fbuf64((size_t)(n * m->H)), *ob = fbuf64((size_t)(n * m->H));
            for (int64_t i = 0; i < n * m->H; i++) oa[i] = ob[i] = (float)(i % 7) - 3.0f;
            CHECK_OK(hm_moe_submit(a, in.x, HM_MOE_F32, in.ids, in.w, n, k, oa, HM_MOE_F32, acc));
            hm_moe_wait(a);
            CHECK_OK(hm_moe_submit(b, in.x, HM_MOE_F32, in.ids, in.w, n, k, ob, HM_MOE_F32, acc));
            hm_moe_wait(b);
            int64_t diff = 0, changed = 0;
            for (int64_t i = 0; i < n * m->H; i++) {
                diff += memcmp(&oa[i], &ob[i], sizeof(float)) != 0;
                changed += oa[i] != (float)(i % 7) - 3.0f;
            }
            CHECK_MSG(diff == 0,
                      "case %d, %d tokens%s: %lld outputs differ from the counting sort's", c, n,
                      acc ? " (accumulate)" : "", (long long)diff);
            if (c == 11 && acc)
                CHECK_MSG(changed == 0, "every expert masked: %lld outputs changed",
                          (long long)changed);
            if (c != 11 || !acc) CHECK_MSG(changed > 0, "case %d: the output was not written", c);
            free(oa), free(ob);
        }
        inputs_free(&in);
    }
    free(mask);
    hm_moe_free(a);
    hm_moe_free(b);
}

/* A token routed to one expert twice (ids repeated within its k) gets both assignments added,
 * on the decode path and on the tiles, repacked (the swapped down's adds into the output rows)
 * or not. */
static void test_dup_ids(hm_pool *pool, const model *m) {
    const int ns[] = {3, 300};
    for (int rp = 0; rp < 2; rp++)
        for (int i = 0; i < 2; i++) {
            const int n = ns[i];
            hm_moe_params p = hm_moe_default_params();
            p.n_experts = m->E, p.hidden = m->H, p.inter = m->I, p.experts = m->ex;
            p.act = m->act, p.pool = pool, p.max_tokens = 512, p.repack = rp;
            hm_moe *moe = NULL;
            CHECK_OK(hm_moe_create(&p, &moe));
            if (!moe) return;
            inputs in = inputs_make(m, n, 5 + (uint64_t)n, 6 + (uint64_t)n);
            for (int t = 0; t < n; t++) in.ids[t * m->k + 1] = in.ids[t * m->k];
            float *out = fbuf64((size_t)(n * m->H));
            double *ref = malloc(sizeof(double) * (size_t)(n * m->H));
            CHECK_OK(hm_moe_submit(moe, in.x, HM_MOE_F32, in.ids, in.w, n, m->k, out, HM_MOE_F32,
                                   false));
            hm_moe_wait(moe);
            reference(m, in.x, in.ids, in.w, n, NULL, ref);
            double sc, err = max_err(out, ref, n * m->H, &sc);
            CHECK_MSG(err <= 3e-2, "repeated expert ids, %d tokens%s: max error %.3g of %.3g", n,
                      rp ? " (repacked)" : "", err, sc);
            inputs_free(&in);
            free(out), free(ref);
            hm_moe_free(moe);
        }
}

/* repack: the engine with its experts repacked once equals the per-call conversion bit for bit,
 * including experts masked at create (not packed) and unmasked later, which take the per-call
 * path; the size query is 0 where nothing would be packed */
static void test_repack(hm_pool *pool, const model *m, int n) {
    /* repacked and per-call experts cross over to the tiles at different token counts
     * (hm_tile_min_tokens); here both take them from 5, so the layouts are what differs */
    char *env = env_push("HMOE_TILE_MIN_TOKENS", "5");
    hm_moe_params p = hm_moe_default_params();
    p.n_experts = m->E, p.hidden = m->H, p.inter = m->I, p.experts = m->ex, p.act = m->act;
    p.pool = pool, p.max_tokens = 200;
    p.n_slices = g_n_slices, p.slice_copy = g_slice_copy;
    const hm_cpu_ops *ops = NULL;
    const bool amx = hm_cpu_ops_get(&ops) == HM_OK && hm_i8_matmul_ok(ops); /* AMX or VNNI */
    uint8_t *mask = calloc((size_t)m->E, 1);
    mask[1] = 1;
    p.mask = mask;
    p.repack = true;
    const size_t want = hm_moe_repack_bytes(&p);
    CHECK_MSG(amx ? want > 0 : want == 0, "repack bytes %zu with%s AMX", want, amx ? "" : "out");
    hm_moe *a = NULL, *b = NULL;
    CHECK_OK(hm_moe_create(&p, &a));
    p.repack = false;
    CHECK_OK(hm_moe_create(&p, &b));
    p.no_amx = true, p.repack = true;
    CHECK_MSG(hm_moe_repack_bytes(&p) == 0, "repack bytes with no_amx");
    if (!a || !b) return;
    CHECK_OK(hm_moe_set_mask(a, NULL));
    CHECK_OK(hm_moe_set_mask(b, NULL));
    hm_moe_kernel_stats_get(a, NULL, true);
    hm_moe_kernel_stats_get(b, NULL, true);
    const int64_t diff = outputs_differ(a, b, m, n, 7 + (uint64_t)n);
    CHECK_MSG(diff == 0, "repack %s, %d tokens%s: %lld outputs differ from the per-call path",
              hm_type_name(m->ex[0].gate.type), n, g_n_slices ? " (slices)" : "", (long long)diff);
    /* the kernel statistics count exactly the work of the swapped-operand kernels: down for
     * every expert with more than 4 tokens, the fused gate/up claims where the GLU is a plain
     * SiLU; nothing on the per-call path (expert 1, masked at create, is not repacked) */
    hm_moe_kernel_stats ka, kb;
    hm_moe_kernel_stats_get(a, &ka, false);
    hm_moe_kernel_stats_get(b, &kb, true);
    CHECK_MSG(kb.claims == 0 && kb.glu_ops == 0 && kb.down_ops == 0,
              "per-call path: %llu claims, %.0f / %.0f ops in the stats",
              (unsigned long long)kb.claims, kb.glu_ops, kb.down_ops);
    if (amx && ops->i8_down_acc) {
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n * m->k));
        float *w = malloc(sizeof(float) * (size_t)(n * m->k));
        int *cnt = calloc((size_t)m->E, sizeof(int));
        route(n, m->E, m->k, 7 + (uint64_t)n + 4321, ids, w);
        for (int i = 0; i < n * m->k; i++) cnt[ids[i]]++;
        double rows = 0; /* assignments of the repacked experts on the tile path */
        for (int e = 0; e < m->E; e++) rows += cnt[e] > 4 && !mask[e] ? cnt[e] : 0;
        const double down = 2.0 * (double)m->H * (double)m->I * rows;
        CHECK_MSG(ka.down_ops == down, "down ops %.0f in the stats, %.0f done", ka.down_ops, down);
        if (m->act == HM_MOE_SILU && !m->bias) {
            const double glu = 4.0 * (double)m->H * (double)m->I * rows;
            CHECK_MSG(ka.glu_ops == glu && ka.claims > 0 && ka.glu_s > 0 && ka.pack_h_s > 0,
                      "gate/up: %.0f ops in %llu claims in the stats, %.0f done", ka.glu_ops,
                      (unsigned long long)ka.claims, glu);
        }
        free(ids), free(w), free(cnt);
    }
    hm_moe_kernel_stats_get(a, NULL, true);
    hm_moe_kernel_stats_get(a, &ka, false);
    CHECK_MSG(ka.claims == 0 && ka.down_s == 0, "kernel stats not reset");
    free(mask);
    hm_moe_free(a), hm_moe_free(b);
    env_pop("HMOE_TILE_MIN_TOKENS", env);
}

/* A decode-sized batch (32 tokens, top-4 of 64: ~2 per expert) in which one expert has 6 tokens
 * (past the repacked crossover of 5, below the per-call one) keeps that expert on the matvec
 * kernels and takes the decode path: the repacked engine gives the per-call engine's bits and
 * no tile work; with HMOE_MOE_DECODE_MV=0 it takes the tiles and the phased path. */
static void test_decode_mv(hm_pool *pool) {
    model m;
    model_init(&m, HM_TYPE_Q4_K, HM_TYPE_Q4_K, 256, 256, 64, 4, HM_MOE_SILU, false, 17);
    hm_moe_params p = hm_moe_default_params();
    p.n_experts = m.E, p.hidden = m.H, p.inter = m.I, p.experts = m.ex, p.act = m.act;
    p.pool = pool, p.max_tokens = 64, p.repack = true;
    if (hm_moe_repack_bytes(&p) == 0) { /* no int8 tiles here */
        model_free(&m);
        return;
    }
    const int n = 32;
    hm_moe *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(hm_moe_create(&p, &a));
    char *old = env_push("HMOE_MOE_DECODE_MV", "0");
    CHECK_OK(hm_moe_create(&p, &c));
    env_pop("HMOE_MOE_DECODE_MV", old);
    p.repack = false;
    CHECK_OK(hm_moe_create(&p, &b));
    inputs in = inputs_make(&m, n, 91, 92);
    int cnt[64] = {0};
    for (int t = 0; t < 6; t++) { /* expert 0 in slot 0 of the first 6 tokens */
        for (int j = 1; j < m.k; j++)
            if (in.ids[t * m.k + j] == 0) in.ids[t * m.k + j] = in.ids[t * m.k];
        in.ids[t * m.k] = 0;
    }
    int busiest = 0;
    for (int i = 0; i < n * m.k; i++)
        busiest = ++cnt[in.ids[i]] > busiest ? cnt[in.ids[i]] : busiest;
    CHECK_MSG(cnt[0] >= 6 && busiest < 11, "decode mv: expert 0 %d tokens, busiest %d", cnt[0],
              busiest);
    float *oa = fbuf64((size_t)(n * m.H)), *ob = fbuf64((size_t)(n * m.H)),
          *oc = fbuf64((size_t)(n * m.H));
    hm_moe *e3[3] = {a, b, c};
    float *o3[3] = {oa, ob, oc};
    hm_moe_kernel_stats st[3];
    for (int i = 0; i < 3 && a && b && c; i++) {
        hm_moe_kernel_stats_get(e3[i], NULL, true);
        CHECK_OK(
            hm_moe_submit(e3[i], in.x, HM_MOE_F32, in.ids, in.w, n, m.k, o3[i], HM_MOE_F32, false));
        hm_moe_wait(e3[i]);
        hm_moe_kernel_stats_get(e3[i], &st[i], false);
    }
    if (a && b && c) {
        int64_t diff = 0;
        for (int64_t i = 0; i < n * m.H; i++) diff += memcmp(&oa[i], &ob[i], sizeof(float)) != 0;
        CHECK_MSG(diff == 0, "decode mv: %lld outputs differ from the per-call engine's",
                  (long long)diff);
        /* below the per-call crossover (HMOE_TILE_MIN_TOKENS=5, moe_tiles: at it, so both
         * engines take the tiles, which give the same bits: test_repack) */
        const hm_cpu_ops *ops = NULL;
        const bool got = hm_cpu_ops_get(&ops) == HM_OK;
        if (got && busiest < hm_tile_min_tokens(ops, HM_TYPE_Q4_K, false))
            CHECK_MSG(st[0].dec_jobs > 0 && st[0].down_ops == 0 && st[0].glu_ops == 0,
                      "decode mv: %llu decode participations, %.0f / %.0f tile ops",
                      (unsigned long long)st[0].dec_jobs, st[0].glu_ops, st[0].down_ops);
        if (got && ops->i8_down_acc)
            CHECK_MSG(st[2].dec_jobs == 0 && st[2].down_ops > 0,
                      "HMOE_MOE_DECODE_MV=0: %llu decode participations, %.0f down tile ops",
                      (unsigned long long)st[2].dec_jobs, st[2].down_ops);
    }
    free(oa), free(ob), free(oc);
    inputs_free(&in);
    hm_moe_free(a), hm_moe_free(b), hm_moe_free(c);
    model_free(&m);
}

/* The hidden rows packed for down by the gate/up claims themselves (one scale group per claim)
 * give bit for bit what the separate packing phase gives (HMOE_MOE_FUSE_H=0), with repacked
 * weights (the SiLU-GLU kernel) and without (two matmuls per claim through the float tile). */
static void test_fused_h(hm_pool *pool, const model *m, int n) {
    for (int rp = 0; rp < 2; rp++) {
        hm_moe_params p = hm_moe_default_params();
        p.n_experts = m->E, p.hidden = m->H, p.inter = m->I, p.experts = m->ex, p.act = m->act;
        p.pool = pool, p.max_tokens = 1024, p.repack = rp;
        hm_moe *a = NULL, *b = NULL;
        CHECK_OK(hm_moe_create(&p, &a));
        setenv("HMOE_MOE_FUSE_H", "0", 1);
        CHECK_OK(hm_moe_create(&p, &b));
        unsetenv("HMOE_MOE_FUSE_H");
        if (!a || !b) break;
        const int64_t diff = outputs_differ(a, b, m, n, 17 + (uint64_t)n);
        CHECK_MSG(diff == 0,
                  "%s, %d tokens, repack %d: %lld outputs differ with h packed by the "
                  "gate/up claims",
                  hm_type_name(m->ex[0].gate.type), n, rp, (long long)diff);
        hm_moe_free(a), hm_moe_free(b);
    }
}

/* Engines of different shapes and types sharing one batch scratch (params.scratch) give bit for
 * bit what engines made without one give (those share their pool's default scratch), in any
 * order of batch sizes; a shared scratch in use refuses a second engine's submit, the pool's
 * default one too, but not an engine's on another pool; pools of another size are refused at
 * create. */
static void test_shared_scratch(hm_pool *pool) {
    model ma, mb;
    model_init(&ma, HM_TYPE_Q8_0, HM_TYPE_Q8_0, 256, 256, 8, 2, HM_MOE_GELU, false, 31);
    model_init(&mb, HM_TYPE_Q4_K, HM_TYPE_Q8_0, 256, 1408, 64, 6, HM_MOE_SILU, true, 32);
    const model *ms[2] = {&ma, &mb};
    hm_moe_scratch *sh = NULL;
    CHECK_OK(hm_moe_scratch_create(&sh));
    hm_moe *own[2] = {NULL, NULL}, *shared[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        hm_moe_params p = hm_moe_default_params();
        p.n_experts = ms[i]->E, p.hidden = ms[i]->H, p.inter = ms[i]->I, p.experts = ms[i]->ex;
        p.act = ms[i]->act, p.pool = pool, p.max_tokens = 40;
        CHECK_OK(hm_moe_create(&p, &own[i]));
        p.scratch = sh;
        CHECK_OK(hm_moe_create(&p, &shared[i]));
    }
    hm_pool_params pp = hm_pool_default_params();
    pp.n_threads = hm_pool_size(pool) + 1, pp.pin = false;
    hm_pool *other = NULL;
    CHECK_OK(hm_pool_create(&pp, &other));
    {
        hm_moe_params p = hm_moe_default_params();
        p.n_experts = ma.E, p.hidden = ma.H, p.inter = ma.I, p.experts = ma.ex, p.pool = other;
        p.scratch = sh;
        hm_moe *bad = NULL;
        CHECK_STATUS(hm_moe_create(&p, &bad), HM_ERR_INVALID_ARG);
        CHECK_CONTAINS(hm_last_error(), "pool of");
    }
    hm_pool_free(other);
    hm_moe_scratch_free(sh); /* the engines keep it alive */
    if (!own[0] || !own[1] || !shared[0] || !shared[1]) return;
    /* (engine, tokens, bf16 input): the shared buffers grow, shrink in use, change shape */
    const int order[][3] = {{1, 64, 0}, {0, 3, 0}, {0, 90, 1}, {1, 1, 0}, {1, 7, 1}, {0, 200, 0}};
    const int NMAX = 200;
    float *x = malloc(sizeof(float) * (size_t)NMAX * 256);
    hm_bf16 *xb = malloc(sizeof(hm_bf16) * (size_t)NMAX * 256);
    float *oa = malloc(sizeof(float) * (size_t)NMAX * 256),
          *ob = malloc(sizeof(float) * NMAX * 256);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)NMAX * 8);
    float *w = malloc(sizeof(float) * (size_t)NMAX * 8);
    for (size_t o = 0; o < sizeof order / sizeof order[0]; o++) {
        const int i = order[o][0], n = order[o][1];
        const bool bf = order[o][2];
        uint64_t s = 100 + o;
        for (int64_t j = 0; j < n * 256; j++) {
            x[j] = (float)((int64_t)(hm_rng_next(&s) % 2001) - 1000) / 1000.0f;
            xb[j] = hm_f32_to_bf16(x[j]);
        }
        route(n, ms[i]->E, ms[i]->k, 77 + o, ids, w);
        const void *xin = bf ? (const void *)xb : (const void *)x;
        const hm_moe_dtype xt = bf ? HM_MOE_BF16 : HM_MOE_F32;
        CHECK_OK(hm_moe_submit(own[i], xin, xt, ids, w, n, ms[i]->k, oa, HM_MOE_F32, false));
        hm_moe_wait(own[i]);
        CHECK_OK(hm_moe_submit(shared[i], xin, xt, ids, w, n, ms[i]->k, ob, HM_MOE_F32, false));
        hm_moe_wait(shared[i]);
        int64_t diff = 0;
        for (int64_t j = 0; j < n * 256; j++) diff += memcmp(&oa[j], &ob[j], sizeof(float)) != 0;
        CHECK_MSG(diff == 0, "shared scratch, batch %zu (%d tokens): %lld outputs differ", o, n,
                  (long long)diff);
    }
    /* one engine's batch in flight on the shared scratch: the other's submit is refused */
    route(4, ma.E, ma.k, 5, ids, w);
    CHECK_OK(hm_moe_submit(shared[0], x, HM_MOE_F32, ids, w, 4, ma.k, oa, HM_MOE_F32, false));
    route(4, mb.E, mb.k, 6, ids + 32, w + 32);
    CHECK_STATUS(
        hm_moe_submit(shared[1], x, HM_MOE_F32, ids + 32, w + 32, 4, mb.k, ob, HM_MOE_F32, false),
        HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "in flight");
    /* and an engine with its own scratch on the busy pool is refused too (not run silently) */
    CHECK_STATUS(
        hm_moe_submit(own[1], x, HM_MOE_F32, ids + 32, w + 32, 4, mb.k, ob, HM_MOE_F32, false),
        HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "pool is still running");
    hm_moe_wait(shared[0]);
    CHECK_OK(
        hm_moe_submit(shared[1], x, HM_MOE_F32, ids + 32, w + 32, 4, mb.k, ob, HM_MOE_F32, false));
    hm_moe_wait(shared[1]);
    /* engines made without a scratch share their pool's: one's batch in flight holds it */
    CHECK_OK(hm_moe_submit(own[0], x, HM_MOE_F32, ids, w, 4, ma.k, oa, HM_MOE_F32, false));
    CHECK_STATUS(
        hm_moe_submit(own[1], x, HM_MOE_F32, ids + 32, w + 32, 4, mb.k, ob, HM_MOE_F32, false),
        HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "scratch shared with another engine");
    /* while an engine on another pool has a default scratch of its own */
    pp.n_threads = 2;
    CHECK_OK(hm_pool_create(&pp, &other));
    hm_moe *apart = NULL;
    {
        hm_moe_params p = hm_moe_default_params();
        p.n_experts = mb.E, p.hidden = mb.H, p.inter = mb.I, p.experts = mb.ex, p.act = mb.act;
        p.pool = other;
        CHECK_OK(hm_moe_create(&p, &apart));
    }
    float *oc = malloc(sizeof(float) * 4 * 256);
    if (apart) {
        CHECK_OK(
            hm_moe_submit(apart, x, HM_MOE_F32, ids + 32, w + 32, 4, mb.k, oc, HM_MOE_F32, false));
        hm_moe_wait(apart);
    }
    hm_moe_wait(own[0]);
    CHECK_OK(
        hm_moe_submit(own[1], x, HM_MOE_F32, ids + 32, w + 32, 4, mb.k, ob, HM_MOE_F32, false));
    hm_moe_wait(own[1]);
    CHECK_MSG(!apart || !memcmp(ob, oc, sizeof(float) * 4 * 256),
              "engines on two pools: the same batch gave different outputs");
    hm_moe_free(apart);
    hm_pool_free(other);
    free(oc);
    free(x), free(xb), free(oa), free(ob), free(ids), free(w);
    for (int i = 0; i < 2; i++) hm_moe_free(own[i]), hm_moe_free(shared[i]);
    model_free(&ma), model_free(&mb);
}

static void test_errors(hm_pool *pool) {
    model m;
    model_init(&m, HM_TYPE_Q8_0, HM_TYPE_Q8_0, 64, 32, 4, 2, HM_MOE_SILU, false, 5);
    hm_moe_params p = hm_moe_default_params();
    p.n_experts = 4, p.hidden = 64, p.inter = 32, p.experts = m.ex, p.pool = pool;
    hm_moe *moe = NULL;
    p.hidden = 48; /* not a whole number of Q8_0 blocks */
    CHECK_STATUS(hm_moe_create(&p, &moe), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "blocks");
    p.hidden = 64;
    m.ex[2].up.type = HM_TYPE_Q4_0;
    CHECK_STATUS(hm_moe_create(&p, &moe), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "expert 2 up");
    m.ex[2].up.type = HM_TYPE_Q8_0;
    CHECK_OK(hm_moe_create(&p, &moe));
    float x[64] = {0}, out[64];
    int32_t ids[2] = {1, 4};
    float w[2] = {0.5f, 0.5f};
    CHECK_STATUS(hm_moe_submit(moe, x, HM_MOE_F32, ids, w, 1, 2, out, HM_MOE_F32, false),
                 HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "expert id 4");
    ids[1] = 2;
    CHECK_STATUS(hm_moe_submit(moe, x, HM_MOE_F32, ids, w, -1, 2, out, HM_MOE_F32, false),
                 HM_ERR_INVALID_ARG);
    /* all slots masked: output zero, no job */
    uint8_t mask[4] = {1, 1, 1, 1};
    CHECK_OK(hm_moe_set_mask(moe, mask));
    out[0] = 7.0f;
    CHECK_OK(hm_moe_submit(moe, x, HM_MOE_F32, ids, w, 1, 2, out, HM_MOE_F32, false));
    hm_moe_wait(moe);
    CHECK(out[0] == 0.0f);
    hm_moe_free(moe);
    model_free(&m);
}

static void test_routers(void) {
    float lg[16];
    for (int i = 0; i < 16; i++) lg[i] = sinf((float)i * 1.7f);
    int32_t ids[4];
    float w[4];
    CHECK_OK(hm_router_softmax_topk(lg, 16, 4, true, ids, w));
    double z = 0;
    for (int i = 0; i < 16; i++) z += exp(lg[i]);
    float s = 0;
    for (int j = 0; j < 4; j++) {
        int better = 0;
        for (int i = 0; i < 16; i++) better += lg[i] > lg[ids[j]];
        CHECK(better == j); /* the j-th largest */
        s += w[j];
        if (j) CHECK(w[j] <= w[j - 1]);
    }
    CHECK(fabsf(s - 1.0f) < 1e-6f);
    CHECK_OK(hm_router_softmax_topk(lg, 16, 2, false, ids, w));
    CHECK(fabs(w[0] - exp(lg[ids[0]]) / z) < 1e-6);
    CHECK_STATUS(hm_router_softmax_topk(lg, 16, 17, true, ids, w), HM_ERR_INVALID_ARG);
    /* DeepSeek-V3 grouping: 16 experts in 4 groups, 2 groups kept, top 4; a bias that makes
     * group 3 win although its sigmoid scores are low */
    float bias[16] = {0};
    for (int i = 12; i < 16; i++) bias[i] = 5.0f;
    CHECK_OK(hm_router_sigmoid_group_topk(lg, bias, 16, 4, 2, 4, true, 2.5f, ids, w));
    int in3 = 0;
    s = 0;
    for (int j = 0; j < 4; j++) in3 += ids[j] >= 12, s += w[j];
    CHECK(in3 == 4);
    CHECK(fabsf(s - 2.5f) < 1e-5f);
    /* the weights are the unbiased sigmoid scores */
    float s0 = 1.0f / (1.0f + expf(-lg[ids[0]])), tot = 0;
    for (int j = 0; j < 4; j++) tot += 1.0f / (1.0f + expf(-lg[ids[j]]));
    CHECK(fabsf(w[0] - 2.5f * s0 / tot) < 1e-5f);
    CHECK_STATUS(hm_router_sigmoid_group_topk(lg, NULL, 16, 5, 2, 4, true, 1, ids, w),
                 HM_ERR_INVALID_ARG);
}

/* NUMA slices: the engine with its slices' weights copied equals the one reading the given
 * views bit for bit (an expert masked at create is not copied and, unmasked later, read where it
 * is), and so do explicit uneven groups, a sync pool, another batch after the first, and an
 * engine sharing its scratch with a second sliced engine and an unsliced one that run in
 * between; the copy's size; bad group sizes and more slices than threads are refused. */
static void test_slices(hm_pool *pool, hm_pool *spool, const model *m, int n) {
    hm_moe_params p = hm_moe_default_params();
    p.n_experts = m->E, p.hidden = m->H, p.inter = m->I, p.experts = m->ex, p.act = m->act;
    p.pool = pool, p.n_slices = 2, p.max_tokens = 64;
    uint8_t *mask = calloc((size_t)m->E, 1);
    mask[1] = 1;
    p.mask = mask;
    uint64_t wb = 0; /* the weight bytes of the unmasked experts */
    for (int e = 0; e < m->E; e++) {
        uint64_t g, u, d;
        hm_type_row_bytes(m->ex[e].gate.type, (uint64_t)m->H, &g);
        hm_type_row_bytes(m->ex[e].up.type, (uint64_t)m->H, &u);
        hm_type_row_bytes(m->ex[e].down.type, (uint64_t)m->I, &d);
        wb += e == 1 ? 0 : (uint64_t)m->I * (g + u) + (uint64_t)m->H * d;
    }
    const size_t cb = hm_moe_slice_copy_bytes(&p);
    CHECK_MSG(cb >= wb && cb <= wb + (uint64_t)(3 * 64 * 2 * m->E),
              "slice copy %zu bytes for %llu weight bytes", cb, (unsigned long long)wb);
    p.n_slices = 1;
    CHECK(hm_moe_slice_copy_bytes(&p) == 0);
    p.n_slices = 2;
    hm_moe *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    CHECK_OK(hm_moe_create(&p, &a));
    p.slice_copy = true;
    CHECK_OK(hm_moe_create(&p, &b));
    const int uneven[2] = {hm_pool_size(pool) - 1, 1};
    p.slice_threads = uneven;
    CHECK_OK(hm_moe_create(&p, &c));
    p.slice_threads = NULL, p.pool = spool;
    CHECK_OK(hm_moe_create(&p, &d));
    hm_moe_scratch *sh = NULL;
    CHECK_OK(hm_moe_scratch_create(&sh));
    hm_moe *e = NULL, *f = NULL, *u = NULL;
    p.pool = pool, p.scratch = sh;
    CHECK_OK(hm_moe_create(&p, &e));
    CHECK_OK(hm_moe_create(&p, &f));
    p.n_slices = 0;
    CHECK_OK(hm_moe_create(&p, &u));
    p.n_slices = 2, p.scratch = NULL;
    hm_moe_scratch_free(sh);
    if (e && f && u) {
        for (int rep = 0; rep < 2; rep++) {
            CHECK(outputs_differ(f, u, m, n + 3, 17) >= 0); /* the shared buffers in other use */
            const int64_t de = outputs_differ(a, e, m, n, 21 + (uint64_t)(n + rep));
            CHECK_MSG(de == 0, "slices, shared scratch, %d tokens: %lld outputs differ", n,
                      (long long)de);
        }
    }
    hm_moe_free(e), hm_moe_free(f), hm_moe_free(u);
    if (a && b && c && d) {
        for (int rep = 0; rep < 2; rep++) {
            const int64_t db = outputs_differ(a, b, m, n, 3 + (uint64_t)(n + rep));
            const int64_t dc = outputs_differ(a, c, m, n, 5 + (uint64_t)(n + rep));
            const int64_t dd = outputs_differ(a, d, m, n, 9 + (uint64_t)(n + rep));
            CHECK_MSG(db == 0 && dc == 0 && dd == 0,
                      "slices %s, %d tokens: %lld / %lld / %lld outputs differ (copied, uneven "
                      "groups, sync pool)",
                      hm_type_name(m->ex[0].gate.type), n, (long long)db, (long long)dc,
                      (long long)dd);
            for (hm_moe **q = (hm_moe *[]){a, b, c, d, NULL}; *q; q++)
                CHECK_OK(hm_moe_set_mask(*q, NULL)); /* expert 1 (not copied) computed too */
        }
    }
    hm_moe_free(a), hm_moe_free(b), hm_moe_free(c), hm_moe_free(d);
    /* bad groups */
    hm_moe *bad = NULL;
    p.pool = pool;
    const int wrong[2] = {1, 1};
    p.slice_threads = wrong;
    CHECK_STATUS(hm_moe_create(&p, &bad), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "add up");
    const int zero[2] = {hm_pool_size(pool), 0};
    p.slice_threads = zero;
    CHECK_STATUS(hm_moe_create(&p, &bad), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "slice 1 has 0 threads");
    p.slice_threads = NULL, p.n_slices = hm_pool_size(pool) + 1;
    CHECK_STATUS(hm_moe_create(&p, &bad), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "at least as many threads");
    free(mask);
}

/* one submit of n routed tokens into out (a fresh engine: its tile thresholds are read at create)
 */
static void submit_once(hm_pool *pool, const model *m, int n, bool no_amx, float *out) {
    hm_moe_params p = hm_moe_default_params();
    p.n_experts = m->E, p.hidden = m->H, p.inter = m->I, p.experts = m->ex, p.act = m->act;
    p.pool = pool, p.no_amx = no_amx;
    hm_moe *moe;
    CHECK_OK(hm_moe_create(&p, &moe));
    if (!moe) return;
    inputs in = inputs_make(m, n, 7, 77);
    CHECK_OK(hm_moe_submit(moe, in.x, HM_MOE_F32, in.ids, in.w, n, m->k, out, HM_MOE_F32, false));
    hm_moe_wait(moe);
    hm_moe_free(moe);
    inputs_free(&in);
}

/* Experts below their formats' tile crossover (hm_tile_min_tokens) take the matvec kernels: Q6_K
 * experts of ~6 tokens give the same bits as an engine without the AMX path, and differ from it
 * (the int8 re-quantization) once HMOE_TILE_MIN_TOKENS=5 sends them to the tiles. And the
 * thresholds themselves: at least 5, none for float formats or without an int8 matmul, a
 * repacked matrix's no higher than a per-call one's, the override taken only from 5 up. */
static void test_tile_min(hm_pool *pool) {
    char *saved = env_push("HMOE_TILE_MIN_TOKENS", ""); /* "": the per-format thresholds */
    const hm_cpu_ops *ops;
    CHECK_OK(hm_cpu_ops_get(&ops));
    const bool i8 = hm_i8_matmul_ok(ops);
    for (uint32_t t = 0; t < HM_TYPE_COUNT; t++) {
        if (!hm_type_get(t) || !hm_vec_dot_for(ops, t)) continue;
        const int pc = hm_tile_min_tokens(ops, t, false), pk = hm_tile_min_tokens(ops, t, true);
        if (!i8 || hm_act_type(t) == HM_TYPE_F32)
            CHECK_MSG(pc == INT_MAX && pk == INT_MAX, "%s: tile threshold %d / %d without tiles",
                      hm_type_name(t), pc, pk);
        else
            CHECK_MSG(pk >= 5 && pc >= pk, "%s: tile thresholds %d (per call) / %d (repacked)",
                      hm_type_name(t), pc, pk);
    }
    CHECK(hm_tile_min_tokens(&hm_ops_ref, HM_TYPE_Q4_K, false) == INT_MAX);
    setenv("HMOE_TILE_MIN_TOKENS", "3", 1); /* below 5: ignored */
    const int q6 = hm_tile_min_tokens(ops, HM_TYPE_Q6_K, false);
    setenv("HMOE_TILE_MIN_TOKENS", "7", 1);
    CHECK(hm_tile_min_tokens(ops, HM_TYPE_Q6_K, false) == (i8 ? 7 : INT_MAX));
    CHECK(!i8 || q6 > 7);
    setenv("HMOE_TILE_MIN_TOKENS", "", 1);

    model m;
    model_init(&m, HM_TYPE_Q6_K, HM_TYPE_Q6_K, 256, 256, 8, 2, HM_MOE_SILU, false, 31);
    const int n = 24; /* ~6 tokens per expert (submit_once's routing) */
    {
        int32_t ids[24 * 2];
        float wt[24 * 2];
        int cnt[8] = {0}, most = 0, least = n;
        route(n, m.E, m.k, 77, ids, wt);
        for (int i = 0; i < n * m.k; i++) cnt[ids[i]]++;
        for (int e = 0; e < m.E; e++)
            most = cnt[e] > most ? cnt[e] : most, least = cnt[e] < least ? cnt[e] : least;
        CHECK_MSG(!i8 || (most < q6 && most >= 5), "test routing: experts of %d-%d tokens", least,
                  most);
    }
    float *a = fbuf64((size_t)(n * m.H)), *b = fbuf64((size_t)(n * m.H)),
          *c = fbuf64((size_t)(n * m.H));
    submit_once(pool, &m, n, false, a);
    submit_once(pool, &m, n, true, b);
    CHECK_MSG(!memcmp(a, b, sizeof(float) * (size_t)(n * m.H)),
              "q6_k experts below the crossover: not the matvec kernels' bits");
    if (i8) {
        setenv("HMOE_TILE_MIN_TOKENS", "5", 1);
        submit_once(pool, &m, n, false, c);
        setenv("HMOE_TILE_MIN_TOKENS", "", 1);
        CHECK_MSG(memcmp(c, b, sizeof(float) * (size_t)(n * m.H)),
                  "q6_k experts on the tiles from 5 tokens: still the matvec kernels' bits");
    }
    free(a), free(b), free(c);
    model_free(&m);
    env_pop("HMOE_TILE_MIN_TOKENS", saved);
}

/* The child of test_numa_by_node, a fresh process (the topology is read once per process) that
 * sees the fake sysfs tree: node 0 = the first CPU of the affinity mask, node 1 = the others. The
 * pool's 3 participants on CPUs (c0, c1, c1) run through the two nodes in 2 runs, so the 2 slices
 * get 1 and 2 threads; by the slices' widths (equal here) they would get 2 and 1. */
static int numa_child(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    int c[2], n = 0;
    for (int i = 0; i < CPU_SETSIZE && n < 2; i++)
        if (CPU_ISSET(i, &set)) c[n++] = i;
    if (n < 2) return 77;
    hm_pool_params pp = hm_pool_default_params();
    const int cpus[3] = {c[0], c[1], c[1]};
    pp.n_threads = 3, pp.cpus = cpus, pp.pin = true, pp.async = true;
    hm_pool *pool;
    CHECK_OK(hm_pool_create(&pp, &pool));
    if (!pool) return 1;
    model m; /* Q8_0: 32-value blocks, so inter 256 splits in two */
    model_init(&m, HM_TYPE_Q8_0, HM_TYPE_Q8_0, 256, 256, 8, 2, HM_MOE_SILU, false, 41);
    hm_moe_params p = hm_moe_default_params();
    p.n_experts = m.E, p.hidden = m.H, p.inter = m.I, p.experts = m.ex, p.act = m.act;
    p.pool = pool, p.n_slices = 2;
    hm_moe *moe;
    CHECK_OK(hm_moe_create(&p, &moe));
    int th[2] = {0, 0};
    CHECK_MSG(hm_moe_slice_threads(moe, th, 2) == 2 && th[0] == 1 && th[1] == 2,
              "slices on a fake 2-node machine: %d + %d threads (by node: 1 + 2)", th[0], th[1]);
    hm_moe_free(moe);
    g_n_slices = 2; /* and the results, with the groups by node */
    run_case(pool, &m, 7, 3e-2, "q8_0 256x256 top-2/8, slices by node", false);
    run_case(pool, &m, 64, 3e-2, "q8_0 256x256 top-2/8, slices by node", false);
    g_n_slices = 0;
    model_free(&m);
    hm_pool_free(pool);
    return t_failures ? 1 : 0;
}

/* NUMA slices grouped by the nodes of the participants' CPUs, on a fake two-node machine (a sysfs
 * tree under /tmp, HMOE_SYSFS_ROOT) in a child process */
static void test_numa_by_node(void) {
    char root[] = "/tmp/hmoe_numa_XXXXXX";
    fake_numa_sysfs(root);
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        setenv("HMOE_SYSFS_ROOT", root, 1);
        execl("/proc/self/exe", "test_moe", "numa-child", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    const int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (rc == 77)
        printf("numa by node: skipped (fewer than 2 CPUs)\n");
    else
        CHECK_MSG(rc == 0, "numa by node: the child failed (exit %d)", rc);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "numa-child")) {
        const int rc = numa_child();
        printf("moe (numa child): %d checks, %d failed\n", t_checks, t_failures);
        return rc;
    }
    TILES_OR_SKIP();
    test_numa_by_node();
    hm_pool_params pp = hm_pool_default_params();
    pp.n_threads = 3;
    pp.async = true;
    pp.pin = false;
    hm_pool *pool;
    CHECK_OK(hm_pool_create(&pp, &pool));
    pp.async = false;
    hm_pool *spool;
    CHECK_OK(hm_pool_create(&pp, &spool));
    test_routers();
    test_errors(pool);
    test_shared_scratch(pool);
    test_tile_min(pool);
    CHECK(!strcmp(hm_moe_profile_name(HM_MOE_PROF_GATE_UP), "gate/up"));
    CHECK(!strcmp(hm_moe_profile_name(HM_MOE_PROF_N), "?"));
    model m;
    /* Qwen3-30B-A3B-like expert rows (hidden 2048, inter 768), Q4_K, SiLU, top-2 of 8 */
    model_init(&m, HM_TYPE_Q4_K, HM_TYPE_Q4_K, 2048, 768, 8, 2, HM_MOE_SILU, false, 11);
    const int ns[] = {1, 2, 3, 4, 7, 64};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
        run_case(pool, &m, ns[i], 3e-2, "q4_k 2048x768 top-2/8", false);
    run_case(spool, &m, 64, 3e-2, "q4_k 2048x768 top-2/8 (sync pool)", true);
    /* batches of matvec experts up to DECODE_ROWS_MAX assignments take the decode path: the
     * phased one for them too (HMOE_MOE_DECODE=0) */
    char *dec = env_push("HMOE_MOE_DECODE", "0");
    run_case(pool, &m, 7, 3e-2, "q4_k 2048x768 top-2/8 (phased path)", true);
    run_case(pool, &m, 64, 3e-2, "q4_k 2048x768 top-2/8 (phased path)", true);
    env_pop("HMOE_MOE_DECODE", dec);
    test_repack(pool, &m, 64);
    test_fused_h(pool, &m, 64);
    test_same_bits(pool, &m, 64);
    test_route_small(pool, &m);
    test_decode_stats(pool, &m);
    test_decode_mv(pool);
    {
        model d; /* small, with biases: 150 assignments per expert, on the tiles where they exist */
        model_init(&d, HM_TYPE_Q4_K, HM_TYPE_Q4_K, 256, 256, 4, 2, HM_MOE_SILU, true, 13);
        test_dup_ids(pool, &d);
        model_free(&d);
    }
    /* AMX experts split into parts of consecutive tokens (tile blocks forced to 32 tokens: ~75
     * tokens per expert in 3 parts), each part an active expert of its own (no split without
     * int8 tiles) */
    setenv("HMOE_TILE_TOKENS", "32", 1);
    run_case(pool, &m, 300, 3e-2, "q4_k 2048x768 top-2/8, 32-token parts", false);
    test_same_bits(pool, &m, 300);
    test_repack(pool, &m, 300);
    unsetenv("HMOE_TILE_TOKENS");
    model_free(&m);
    /* experts of 1024+ tokens (gate/up in single-unit claims) on the per-call AMX path: the down
     * claims (up to 4 units) write their products to the thread's float tile, sized at submit */
    model_init(&m, HM_TYPE_Q4_K, HM_TYPE_Q4_K, 1024, 256, 2, 1, HM_MOE_SILU, false, 21);
    run_case(pool, &m, 2200, 3e-2, "q4_k 1024x256 top-1/2, 1024+ tokens per expert", false);
    model_free(&m);
    /* DeepSeek-V2-Lite inter 1408 (not a multiple of 256): Q4_K gate/up, Q8_0 down, top-6/64 */
    model_init(&m, HM_TYPE_Q4_K, HM_TYPE_Q8_0, 256, 1408, 64, 6, HM_MOE_SILU, false, 12);
    run_case(pool, &m, 1, 3e-2, "q4_k/q8_0 256x1408 top-6/64", false);
    run_case(pool, &m, 513, 3e-2, "q4_k/q8_0 256x1408 top-6/64", false);
    test_repack(pool, &m, 513);
    test_fused_h(pool, &m, 513);
    test_same_bits(pool, &m, 513);
    model_free(&m);
    /* top-8 of 256 experts, Q8_0, GELU */
    model_init(&m, HM_TYPE_Q8_0, HM_TYPE_Q8_0, 256, 256, 256, 8, HM_MOE_GELU, false, 13);
    run_case(pool, &m, 3, 3e-2, "q8_0 256x256 top-8/256 gelu", false);
    run_case(pool, &m, 64, 3e-2, "q8_0 256x256 top-8/256 gelu", false);
    test_route_small(pool, &m);
    model_free(&m);
    /* gpt-oss: MXFP4 with biases and the clamped SwiGLU, top-4 of 32 (hidden 2880 = 90 x 32) */
    model_init(&m, HM_TYPE_MXFP4, HM_TYPE_MXFP4, 2880, 64, 32, 4, HM_MOE_SWIGLU_OAI, true, 14);
    run_case(pool, &m, 2, 3e-2, "mxfp4 2880x64 top-4/32 swiglu-oai", false);
    run_case(pool, &m, 37, 3e-2, "mxfp4 2880x64 top-4/32 swiglu-oai", false);
    test_repack(pool, &m, 37); /* biases through the repacked (swapped-operand) down */
    test_fused_h(pool, &m, 37);
    model_free(&m);
    /* BF16 weights: float activations, tight */
    model_init(&m, HM_TYPE_BF16, HM_TYPE_BF16, 128, 96, 16, 1, HM_MOE_SILU, false, 15);
    run_case(pool, &m, 4, 1e-4, "bf16 128x96 top-1/16", true);
    /* many tokens per expert: float weights must stay on the exact kernels (no int8 tiles) */
    run_case(pool, &m, 96, 1e-4, "bf16 128x96 top-1/16, 96 tokens", true);
    /* past the decode path's 512 assignments: the phased path's float kernels (4 x 6 blocks) */
    run_case(pool, &m, 600, 1e-4, "bf16 128x96 top-1/16, 600 tokens", true);
    model_free(&m);
    /* float weights with biases and shapes that leave 1-3 rows and 1-5 tokens over from the 4 x 6
     * blocks (experts of HM_D46_MIN_TOKENS tokens or more), on the decode path (120 tokens, 240
     * assignments) and the phased one (300) */
    model_init(&m, HM_TYPE_F32, HM_TYPE_F16, 135, 70, 8, 2, HM_MOE_SILU, true, 23);
    run_case(pool, &m, 120, 1e-4, "f32/f16 135x70 top-2/8 biases", false);
    run_case(pool, &m, 300, 1e-4, "f32/f16 135x70 top-2/8 biases", false);
    model_free(&m);
    /* 128 experts top-8 (Qwen3-MoE routing width) with inter 2048, Q5_K gate/up, Q4_0 down */
    model_init(&m, HM_TYPE_Q5_K, HM_TYPE_Q4_0, 256, 2048, 128, 8, HM_MOE_SILU, false, 18);
    run_case(pool, &m, 3, 3e-2, "q5_k/q4_0 256x2048 top-8/128", false);
    run_case(pool, &m, 24, 3e-2, "q5_k/q4_0 256x2048 top-8/128", false); /* phased path */
    model_free(&m);
    /* the remaining weight formats of the kernels issue: IQ4_XS and Q5_0 (int8 paths), F16, F32
     * and FP8 (float weights: exact kernels, tight) */
    model_init(&m, HM_TYPE_IQ4_XS, HM_TYPE_Q5_0, 256, 256, 16, 2, HM_MOE_SILU, false, 19);
    run_case(pool, &m, 2, 3e-2, "iq4_xs/q5_0 256x256 top-2/16", false);
    run_case(pool, &m, 40, 3e-2, "iq4_xs/q5_0 256x256 top-2/16", false);
    model_free(&m);
    model_init(&m, HM_TYPE_F16, HM_TYPE_F32, 128, 96, 16, 2, HM_MOE_GELU, false, 20);
    run_case(pool, &m, 3, 1e-4, "f16/f32 128x96 top-2/16", false);
    run_case(pool, &m, 40, 1e-4, "f16/f32 128x96 top-2/16", false);
    model_free(&m);
    model_init(&m, HM_TYPE_FP8_B128, HM_TYPE_FP8_B128, 256, 256, 16, 2, HM_MOE_SILU, false, 21);
    run_case(pool, &m, 4, 1e-4, "fp8_b128 256x256 top-2/16", false);
    run_case(pool, &m, 40, 1e-4, "fp8_b128 256x256 top-2/16", false);
    model_free(&m);
    /* hidden 7168 (DeepSeek-V3), Q6_K, top-8 of 16 */
    model_init(&m, HM_TYPE_Q6_K, HM_TYPE_Q6_K, 7168, 256, 16, 8, HM_MOE_SILU, false, 16);
    run_case(pool, &m, 1, 3e-2, "q6_k 7168x256 top-8/16", false);
    model_free(&m);

    /* NUMA: 2 emulated nodes, each a group of the pool's participants computing a slice of
     * every expert's intermediate dimension at once; the partial outputs are summed */
    g_n_slices = 2;
    /* inter 768 = 3 Q8_K blocks of 256: slices of 256 and 512 */
    model_init(&m, HM_TYPE_Q4_K, HM_TYPE_Q4_K, 2048, 768, 8, 2, HM_MOE_SILU, false, 11);
    run_case(pool, &m, 1, 3e-2, "2 slices: q4_k 2048x768 top-2/8", false);
    run_case(pool, &m, 7, 3e-2, "2 slices: q4_k 2048x768 top-2/8", false);
    g_slice_copy = true;
    run_case(pool, &m, 64, 3e-2, "2 slices, copied: q4_k 2048x768 top-2/8", false);
    run_case(spool, &m, 3, 3e-2, "2 slices, copied: q4_k 2048x768 top-2/8 (sync pool)", false);
    g_slice_copy = false;
    test_slices(pool, spool, &m, 2);
    test_slices(pool, spool, &m, 80);
    model_free(&m);
    /* 1408 = 44 blocks of 32 (Q8_0 down): 704 + 704 */
    model_init(&m, HM_TYPE_Q4_K, HM_TYPE_Q8_0, 256, 1408, 64, 6, HM_MOE_SILU, false, 12);
    run_case(pool, &m, 3, 3e-2, "2 slices: q4_k/q8_0 256x1408 top-6/64", false);
    test_repack(pool, &m, 300);
    g_slice_copy = true;
    test_repack(pool, &m, 300);
    test_slices(pool, spool, &m, 5);
    model_free(&m);
    /* biases (down bias added once) and the gpt-oss activation */
    model_init(&m, HM_TYPE_MXFP4, HM_TYPE_MXFP4, 2880, 64, 32, 4, HM_MOE_SWIGLU_OAI, true, 14);
    run_case(pool, &m, 2, 3e-2, "2 slices, copied: mxfp4 2880x64 top-4/32 swiglu-oai", false);
    g_slice_copy = false;
    run_case(pool, &m, 2, 3e-2, "2 slices: mxfp4 2880x64 top-4/32 swiglu-oai", false);
    model_free(&m);
    model_init(&m, HM_TYPE_BF16, HM_TYPE_BF16, 128, 96, 16, 1, HM_MOE_SILU, false, 15);
    run_case(pool, &m, 4, 1e-4, "2 slices: bf16 128x96 top-1/16", true);
    g_n_slices = 3;
    run_case(pool, &m, 9, 1e-4, "3 slices: bf16 128x96 top-1/16", true);
    g_n_slices = 0;
    model_free(&m);
    /* an intermediate size that cannot be split into whole blocks */
    model_init(&m, HM_TYPE_Q4_K, HM_TYPE_Q4_K, 256, 256, 4, 1, HM_MOE_SILU, false, 17);
    hm_moe_params bp = hm_moe_default_params();
    bp.n_experts = m.E, bp.hidden = m.H, bp.inter = m.I, bp.experts = m.ex, bp.pool = pool;
    bp.n_slices = 2;
    hm_moe *bad = NULL;
    CHECK_STATUS(hm_moe_create(&bp, &bad), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "cannot be split");
    CHECK(hm_moe_slice_copy_bytes(&bp) == 0);
    model_free(&m);
    hm_pool_free(pool);
    hm_pool_free(spool);
    return test_done("moe");
}
