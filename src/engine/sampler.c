/* sampler.c - token sampler: penalties, greedy, top-k, temperature, top-p, min-p, seeded draw;
 * radix selection instead of sorting. */
#include "engine/sampler.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "quant/synth.h" /* hm_rng_next */

#define BLOCK     256 /* entries per partial sum of the draw */
#define HIST_BITS 11  /* radix digit: levels use key bits 31..21, 20..10, 9..0 */
#define HIST      (1 << HIST_BITS)
#define LANES     8    /* independent accumulators: lets the compiler vectorize reductions */
#define TOP_P_EPS 1e-6 /* relative slack of "cumulative probability >= top_p" */
#define SMALL_CUT 64   /* radix_cut sorts up to this many entries directly */
#define RING_MIN  4096 /* the penalty window's first allocation (entries) */

struct hm_sampler {
    hm_sampler_params p;
    int32_t n_vocab;
    uint64_t rng;
    bool penalize; /* some penalty is on and the window is not empty */

    /* penalty window: the tokens accepted last and how often each occurs among them */
    int32_t *ring;      /* [ring_cap] when penalty_last_n > 0: the window, circular once full */
    int64_t ring_cap;   /* grows with the tokens accepted, up to penalty_last_n */
    int64_t n_seen;     /* tokens accepted since create/reset */
    int32_t *count;     /* [n_vocab] occurrences in the window */
    int32_t *distinct;  /* [n_vocab] the n_distinct tokens with count > 0, unordered */
    int32_t *slot;      /* [n_vocab] where a token with count > 0 sits in distinct */
    int32_t n_distinct; /* tokens with count > 0 */

    /* per-sample scratch */
    float *val;       /* [n_vocab] logits, then unnormalised probabilities, of the candidates */
    int32_t *id;      /* [n_vocab] token of val[i] once candidates were compacted */
    int32_t *idx;     /* [n_vocab] radix selection: positions in the boundary bucket */
    double *block;    /* [n_vocab / BLOCK + 1] sums of val over each BLOCK entries */
    uint32_t *hist_n; /* [HIST] radix histogram: entries per bucket */
    double *hist_w;   /* [HIST] radix histogram: weight per bucket */
};

hm_sampler_params hm_sampler_default_params(void) {
    hm_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    p.repetition_penalty = 1.0f;
    p.penalty_last_n = 64;
    return p;
}

static hm_status check_params(const hm_sampler_params *p, int32_t n_vocab) {
    if (n_vocab <= 0)
        return hm_errorf(HM_ERR_INVALID_ARG, "sampler: n_vocab %d must be > 0", n_vocab);
    if (!(p->temperature >= 0.0f) || isinf(p->temperature))
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "sampler: temperature %g must be finite and >= 0 (0 = greedy)",
                         p->temperature);
    if (p->top_k < 0)
        return hm_errorf(HM_ERR_INVALID_ARG, "sampler: top_k %d must be >= 0 (0 = off)", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return hm_errorf(HM_ERR_INVALID_ARG, "sampler: top_p %g must be in (0, 1] (1 = off)",
                         p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return hm_errorf(HM_ERR_INVALID_ARG, "sampler: min_p %g must be in [0, 1] (0 = off)",
                         p->min_p);
    if (!(p->repetition_penalty > 0.0f) || isinf(p->repetition_penalty))
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "sampler: repetition_penalty %g must be finite and > 0 (1 = off)",
                         p->repetition_penalty);
    if (!isfinite(p->presence_penalty))
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "sampler: presence_penalty %g must be finite (0 = off)",
                         p->presence_penalty);
    if (!isfinite(p->frequency_penalty))
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "sampler: frequency_penalty %g must be finite (0 = off)",
                         p->frequency_penalty);
    if (p->penalty_last_n < -1)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "sampler: penalty_last_n %d must be >= -1 (-1 = all, 0 = none)",
                         p->penalty_last_n);
    return HM_OK;
}

static void *scratch(size_t n, size_t elem, const char *what) {
    return hm_calloc_aligned(n, elem, HM_CACHE_LINE, what);
}

/* The window is allocated as the tokens come (RING_MIN, then doubling, at most penalty_last_n):
 * a window larger than any sequence costs only what the sequence fills. It stays linear until
 * it holds penalty_last_n tokens, so growing copies the first n_seen entries. */
static bool ring_grow(hm_sampler *s) {
    const int64_t max = s->p.penalty_last_n;
    int64_t cap = s->ring_cap ? 2 * s->ring_cap : RING_MIN;
    if (cap > max) cap = max;
    int32_t *r = scratch((size_t)cap, sizeof(int32_t), "sampler window");
    if (!r) return false;
    if (s->ring) memcpy(r, s->ring, (size_t)s->n_seen * sizeof *r);
    hm_free(s->ring);
    s->ring = r;
    s->ring_cap = cap;
    return true;
}

hm_status hm_sampler_create(const hm_sampler_params *params, int32_t n_vocab, hm_sampler **out) {
    *out = NULL;
    hm_sampler_params p = params ? *params : hm_sampler_default_params();
    hm_status st = check_params(&p, n_vocab);
    if (st != HM_OK) return st;
    hm_sampler *s = scratch(1, sizeof *s, "sampler");
    if (!s) return HM_ERR_NO_MEMORY;
    s->p = p;
    s->n_vocab = n_vocab;
    s->rng = p.seed;
    s->penalize =
        p.penalty_last_n != 0 &&
        (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f);
    size_t n = (size_t)n_vocab;
    bool ok = (s->val = scratch(n, sizeof(float), "sampler logits")) &&
              (s->id = scratch(n, sizeof(int32_t), "sampler ids")) &&
              (s->idx = scratch(n, sizeof(int32_t), "sampler radix list")) &&
              (s->block = scratch(n / BLOCK + 1, sizeof(double), "sampler block sums")) &&
              (s->hist_n = scratch(HIST, sizeof(uint32_t), "sampler histogram")) &&
              (s->hist_w = scratch(HIST, sizeof(double), "sampler histogram"));
    if (ok && s->penalize)
        ok = (s->count = scratch(n, sizeof(int32_t), "sampler token counts")) &&
             (s->distinct = scratch(n, sizeof(int32_t), "sampler token counts")) &&
             (s->slot = scratch(n, sizeof(int32_t), "sampler token counts")) &&
             (p.penalty_last_n < 0 || ring_grow(s));
    if (!ok) {
        hm_sampler_free(s);
        return HM_ERR_NO_MEMORY; /* the allocator's message names the buffer */
    }
    *out = s;
    return HM_OK;
}

void hm_sampler_free(hm_sampler *s) {
    if (!s) return;
    hm_free(s->ring);
    hm_free(s->count);
    hm_free(s->distinct);
    hm_free(s->slot);
    hm_free(s->val);
    hm_free(s->id);
    hm_free(s->idx);
    hm_free(s->block);
    hm_free(s->hist_n);
    hm_free(s->hist_w);
    hm_free(s);
}

void hm_sampler_reset(hm_sampler *s) {
    for (int32_t d = 0; d < s->n_distinct; d++) s->count[s->distinct[d]] = 0;
    s->n_distinct = 0;
    s->n_seen = 0;
    s->rng = s->p.seed;
}

/* ---- penalty window ---- */

static void count_add(hm_sampler *s, int32_t t) {
    if (s->count[t]++ == 0) {
        s->slot[t] = s->n_distinct;
        s->distinct[s->n_distinct++] = t;
    }
}

static void count_remove(hm_sampler *s, int32_t t) {
    if (--s->count[t] == 0) {
        int32_t last = s->distinct[--s->n_distinct];
        s->distinct[s->slot[t]] = last;
        s->slot[last] = s->slot[t];
    }
}

hm_status hm_sampler_accept(hm_sampler *s, int32_t token) {
    if (token < 0 || token >= s->n_vocab)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "sampler: accept: token %d outside the vocabulary [0, %d)", token,
                         s->n_vocab);
    if (!s->penalize) return HM_OK;
    if (s->ring) {
        const int64_t n = s->p.penalty_last_n;
        if (s->n_seen == s->ring_cap && s->ring_cap < n && !ring_grow(s))
            return HM_ERR_NO_MEMORY; /* the allocator's message names the buffer */
        int32_t *slot = &s->ring[s->n_seen % n];
        if (s->n_seen >= n) count_remove(s, *slot);
        *slot = token;
    }
    count_add(s, token);
    s->n_seen++;
    return HM_OK;
}

/* Once per distinct token of the window, in place on the logits v. */
static hm_status apply_penalties(const hm_sampler *s, float *v) {
    const hm_sampler_params *p = &s->p;
    for (int32_t d = 0; d < s->n_distinct; d++) {
        int32_t t = s->distinct[d], c = s->count[t];
        float l0 = v[t];
        float l = l0 > 0.0f ? l0 / p->repetition_penalty : l0 * p->repetition_penalty;
        l -= (float)c * p->frequency_penalty + p->presence_penalty;
        if (isnan(l) || l == INFINITY)
            return hm_errorf(HM_ERR_INVALID_ARG,
                             "sampler: penalties turn the logit %g of token %d (seen %d times) "
                             "into %g",
                             l0, t, c, l);
        v[t] = l;
    }
    return HM_OK;
}

/* ---- linear passes ---- */

/* Signed integer with the order of the float values: -NaN < -inf < ... < -0 < +0 < ... < +inf <
 * +NaN. Integer compares and selects keep the loops below branch-free and vectorizable (float
 * selects are not if-converted by GCC while floating-point traps are honoured). The map is its own
 * inverse. */
static inline int32_t float_order(float x) {
    int32_t s;
    memcpy(&s, &x, sizeof s);
    return s ^ (int32_t)((uint32_t)(s >> 31) >> 1);
}

static inline float order_float(int32_t k) {
    int32_t s = k ^ (int32_t)((uint32_t)(k >> 31) >> 1);
    float x;
    memcpy(&x, &s, sizeof x);
    return x;
}

/* Lowest and highest float_order of v[0..n) (integer reductions: the compiler vectorizes them). */
static void order_range(const float *v, int32_t n, int32_t *lo, int32_t *hi) {
    int32_t l = INT32_MAX, h = INT32_MIN;
    for (int32_t i = 0; i < n; i++) {
        int32_t k = float_order(v[i]);
        l = k < l ? k : l;
        h = k > h ? k : h;
    }
    *lo = l, *hi = h;
}

/* Copies logits to v, with -0 made +0 so that equal values have equal keys, and returns their
 * maximum; fails on NaN and +inf, naming the first. */
static hm_status load_logits(const float *logits, int32_t n, float *v, float *max) {
    int32_t lo = INT32_MAX, hi = INT32_MIN;
    for (int32_t i = 0; i < n; i++) {
        float x = logits[i] + 0.0f;
        int32_t k = float_order(x);
        lo = k < lo ? k : lo;
        hi = k > hi ? k : hi;
        v[i] = x;
    }
    if (lo < float_order(-INFINITY) || hi > float_order(FLT_MAX)) {
        int32_t first = -1, n_bad = 0;
        for (int32_t i = 0; i < n; i++) {
            if (!(logits[i] < INFINITY)) {
                if (first < 0) first = i;
                n_bad++;
            }
        }
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "sampler: logits[%d] is %g (%d of %d logits are NaN or +inf): the "
                         "forward pass is broken",
                         first, logits[first], n_bad, n);
    }
    *max = order_float(hi);
    return HM_OK;
}

static float max_of(const float *v, int32_t n) {
    int32_t lo, hi;
    order_range(v, n, &lo, &hi);
    return order_float(hi);
}

/* e^x for x <= 0 (-inf included), Cephes' polynomial: within 2 ulp of expf, exactly 1 at 0, and
 * exactly 0 below -87 (so a masked token gets no mass). Plain float operations in a fixed order,
 * the same bits on every machine; written so that GCC vectorizes the loop around it. */
static inline float exp_nonpos(float x) {
    const uint32_t lim = 0xc2ae0000u; /* -87.0f */
    uint32_t xb;
    memcpy(&xb, &x, sizeof xb);
    uint32_t under = xb > lim; /* below -87 (-inf included); positive x never is */
    uint32_t cb = under ? lim : xb;
    float xc;
    memcpy(&xc, &cb, sizeof xc);
    float t = xc * 1.44269504088896341f + 12582912.0f; /* + 1.5 * 2^23 rounds to an integer */
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float q = 1.9875691500e-4f;
    q = q * r + 1.3981999507e-3f;
    q = q * r + 8.3334519073e-3f;
    q = q * r + 4.1665795894e-2f;
    q = q * r + 1.6666665459e-1f;
    q = q * r + 5.0000001201e-1f;
    float y = q * r * r + r + 1.0f;
    uint32_t tb, yb;
    memcpy(&tb, &t, sizeof tb);
    memcpy(&yb, &y, sizeof yb);
    yb += (tb - 0x4b400000u) << 23; /* y * 2^n: n (in t's low bits) added to y's exponent */
    yb &= under - 1u;               /* 0 below -87 */
    float out;
    memcpy(&out, &yb, sizeof out);
    return out;
}

/* Sums v over each BLOCK entries into block[] and returns the total (in block order). */
static double block_sums(const float *v, int32_t n, double *block) {
    double total = 0.0;
    for (int32_t b0 = 0; b0 < n; b0 += BLOCK) {
        int32_t end = n - b0 < BLOCK ? n : b0 + BLOCK, i = b0;
        double lane[LANES] = {0};
        for (; i + LANES <= end; i += LANES)
            for (int j = 0; j < LANES; j++) lane[j] += v[i + j];
        double sum = 0.0;
        for (; i < end; i++) sum += v[i];
        for (int j = 0; j < LANES; j++) sum += lane[j];
        block[b0 / BLOCK] = sum;
        total += sum;
    }
    return total;
}

/* Index of the entry where the running sum of the weights v first exceeds u * total (u in [0,1));
 * entries of weight 0 are never returned. block[] and total come from block_sums; total > 0. */
static int32_t draw(const float *v, int32_t n, const double *block, double total, double u) {
    double target = u * total, acc = 0.0;
    int32_t nb = (n + BLOCK - 1) / BLOCK, b = 0, last = -1;
    for (; b < nb; b++) {
        if (block[b] > 0.0) {
            last = b;
            if (acc + block[b] > target) break;
        }
        acc += block[b];
    }
    if (b == nb) b = last; /* rounding left target at the very end */
    int32_t end = n - b * BLOCK < BLOCK ? n : (b + 1) * BLOCK, pick = -1;
    for (int32_t i = b * BLOCK; i < end; i++) {
        if (v[i] > 0.0f) {
            pick = i;
            if (acc + v[i] > target) break;
            acc += v[i];
        }
    }
    return pick;
}

/* ---- radix selection ---- */

/* Unsigned key with the order of the float values (no NaN here; -0 was made +0). */
static inline uint32_t sort_key(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u ^ ((uint32_t)((int32_t)u >> 31) | 0x80000000u);
}

static inline float key_float(uint32_t k) {
    uint32_t u = k ^ ((k & 0x80000000u) ? 0x80000000u : 0xffffffffu);
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Weight of histogram bucket b: the summed values when weighted (the entries are > 0 then, so
 * weight 0 means empty), else the count. */
static inline double bucket_weight(const hm_sampler *s, bool weighted, int b) {
    return weighted ? s->hist_w[b] : (double)s->hist_n[b];
}

/* Walks the histogram from the top bucket down, adding weights to *acc while they stay below
 * target; returns the bucket where target is reached, or - when it is not - the lowest non-empty
 * bucket if `lowest` is set (rounding can leave a sub-histogram a little short), else -1. */
static int walk(const hm_sampler *s, bool weighted, double target, double *acc, bool lowest) {
    int low = -1;
    for (int b = HIST - 1; b >= 0; b--) {
        double w = bucket_weight(s, weighted, b);
        if (w == 0.0) continue;
        low = b;
        if (*acc + w >= target) return b;
        *acc += w;
    }
    if (lowest && low >= 0) *acc -= bucket_weight(s, weighted, low);
    return lowest ? low : -1;
}

static inline uint32_t bucket(float x, int shift) {
    return (sort_key(x) >> shift) & (HIST - 1);
}

/* Histogram of bits [shift, shift + HIST_BITS) of the keys of v[at[j]] (at NULL: v[j]), j < n:
 * counts unless weighted, sums of values if weighted, both if also `counts`. The arrays are zero
 * on entry and left for hist_clear. (Plain loops: interleaved copies against store-to-load
 * stalls measured no faster.) */
static void histogram(hm_sampler *s, const float *v, const int32_t *at, int32_t n, int shift,
                      bool weighted, bool counts) {
    uint32_t *hn = s->hist_n;
    double *hw = s->hist_w;
    if (!at && weighted && !counts) { /* the big one: level 1 of top-p */
        for (int32_t j = 0; j < n; j++) hw[bucket(v[j], shift)] += v[j];
        return;
    }
    for (int32_t j = 0; j < n; j++) {
        float x = v[at ? at[j] : j];
        uint32_t b = bucket(x, shift);
        if (counts || !weighted) hn[b]++;
        if (weighted) hw[b] += x;
    }
}

/* Zeroes what histogram() wrote (only the touched buckets when there are few entries). */
static void hist_clear(hm_sampler *s, const float *v, const int32_t *at, int32_t n, int shift) {
    if (n > HIST / 8) {
        memset(s->hist_n, 0, HIST * sizeof *s->hist_n);
        memset(s->hist_w, 0, HIST * sizeof *s->hist_w);
        return;
    }
    for (int32_t j = 0; j < n; j++) {
        uint32_t b = bucket(v[at ? at[j] : j], shift);
        s->hist_n[b] = 0;
        s->hist_w[b] = 0.0;
    }
}

/* radix_cut for a few entries: insertion sort by key, descending (stable: positions ascend
 * among equal keys), then a running sum. */
static bool small_cut(const float *v, int32_t n, bool weighted, double target, uint32_t *cut,
                      int32_t *n_ties) {
    uint32_t key[SMALL_CUT];
    for (int32_t i = 0; i < n; i++) {
        uint32_t k = sort_key(v[i]);
        int32_t r = i;
        for (; r > 0 && key[r - 1] < k; r--) key[r] = key[r - 1];
        key[r] = k;
    }
    double acc = 0.0;
    for (int32_t r = 0; r < n; r++) {
        acc += weighted ? key_float(key[r]) : 1.0;
        if (acc >= target) {
            int32_t ties = 1;
            while (ties <= r && key[r - ties] == key[r]) ties++;
            *cut = key[r];
            *n_ties = ties;
            return true;
        }
    }
    return false;
}

/* Levels 2 and 3 of a radix cut: the entries v[at[0..m)] (in position order) are those of the
 * level-1 boundary bucket b0, acc the weight above it. Sets *cut and *n_ties as radix_cut does;
 * at[] is permuted, the entries equal to *cut staying in position order. */
static void refine(hm_sampler *s, const float *v, int32_t *at, int32_t m, bool weighted,
                   double target, double acc, int b0, uint32_t *cut, int32_t *n_ties) {
    histogram(s, v, at, m, 10, weighted, false);
    int b1 = walk(s, weighted, target, &acc, true);
    hist_clear(s, v, at, m, 10);

    /* level-2 members to the front, in order; the others stay behind them (cut_prefix needs
     * all of at[0..m) back) */
    int32_t m2 = 0;
    for (int32_t j = 0; j < m; j++) {
        if (bucket(v[at[j]], 10) == (uint32_t)b1) {
            int32_t t = at[m2];
            at[m2++] = at[j];
            at[j] = t;
        }
    }
    histogram(s, v, at, m2, 0, weighted, true);
    int b2 = walk(s, weighted, target, &acc, true);
    /* the ties all have the same value, so the same weight w */
    int32_t ties = (int32_t)s->hist_n[b2];
    double w = weighted ? s->hist_w[b2] / ties : 1.0;
    hist_clear(s, v, at, m2, 0);

    *cut = (uint32_t)b0 << 21 | (uint32_t)b1 << 10 | (uint32_t)b2;
    double need = ceil((target - acc) / w);
    *n_ties = need < 1.0 ? 1 : need > ties ? ties : (int32_t)need;
}

/* Order v[0..n) by value, descending, then by position. Finds the shortest prefix whose weight
 * (v[i] > 0 when weighted, else 1 per entry) reaches target. Returns false when all of v
 * together stays below it; else sets *cut to the key of the prefix's last entry and *n_ties to
 * how many entries with exactly that key (the first ones by position) are in the prefix. Three
 * histogram levels of the 32-bit key (bits 31..21, 20..10, 9..0): the first sees every entry,
 * the others only the boundary bucket of the level before. */
static bool radix_cut(hm_sampler *s, const float *v, int32_t n, bool weighted, double target,
                      uint32_t *cut, int32_t *n_ties) {
    if (n <= SMALL_CUT) return small_cut(v, n, weighted, target, cut, n_ties);
    double acc = 0.0;
    histogram(s, v, NULL, n, 21, weighted, false);
    int b0 = walk(s, weighted, target, &acc, false);
    hist_clear(s, v, NULL, n, 21);
    if (b0 < 0) return false;
    int32_t *at = s->idx, m = 0;
    for (int32_t i = 0; i < n; i++) {
        at[m] = i; /* branch-free: written always, kept when in the boundary bucket */
        m += bucket(v[i], 21) == (uint32_t)b0;
    }
    refine(s, v, at, m, weighted, target, acc, b0, cut, n_ties);
    return true;
}

/* Positions i of v[0..n) (>= 0) with bits >> 21 == b, in order, into at[]; returns how many.
 * Chunks without any are skipped by a vectorized test; inside, a branch-free append. */
static int32_t collect_bucket(const float *v, int32_t n, int32_t b, int32_t *at) {
    enum { CHUNK = 16 };
    int32_t m = 0, i0 = 0;
    for (; i0 + CHUNK <= n; i0 += CHUNK) {
        int32_t any = 0;
        for (int c = 0; c < CHUNK; c++) any |= (float_order(v[i0 + c]) >> 21) == b;
        if (!any) continue;
        for (int c = 0; c < CHUNK; c++) {
            at[m] = i0 + c;
            m += (float_order(v[i0 + c]) >> 21) == b;
        }
    }
    for (; i0 < n; i0++) {
        at[m] = i0;
        m += (float_order(v[i0]) >> 21) == b;
    }
    return m;
}

/* The top-p cut, in place on probabilities v[0..n) (>= 0): zeroes the entries outside the
 * shortest prefix (by value descending, then position) whose sum reaches target, and those below
 * floor. Returns false, zeroing only below floor, when all of v stays below target. Like
 * radix_cut, but instead of compacting (most of the vocabulary may stay) it zeroes: once the
 * first level has found the boundary bucket, one vectorized pass zeroes everything below it, and
 * only the boundary bucket's entries are visited again. */
static bool cut_prefix(hm_sampler *s, float *v, int32_t n, double target, float floor) {
    int32_t f = float_order(floor);
    double acc = 0.0;
    int b0 = -1;
    if (n > SMALL_CUT) {
        histogram(s, v, NULL, n, 21, true, false);
        b0 = walk(s, true, target, &acc, false);
        hist_clear(s, v, NULL, n, 21);
    }
    uint32_t cut = 0;
    int32_t ties = 0, *at = s->idx, m = 0;
    bool has_cut = n <= SMALL_CUT ? small_cut(v, n, true, target, &cut, &ties) : b0 >= 0;
    /* n small: cut is final, so zero against it; else keep bucket b0 whole for refine() */
    uint32_t lo = n <= SMALL_CUT ? cut : (uint32_t)b0 << 21;
    if (!has_cut) lo = 0;
    /* for v >= 0 the float bits order like the values: compare them as ints, which vectorizes */
    int32_t lo_bits = has_cut ? (int32_t)(lo ^ 0x80000000u) : INT32_MIN;
    int32_t member_b = n > SMALL_CUT && has_cut ? b0 - HIST / 2 : -1; /* b0 of the bits */
    for (int32_t i = 0; i < n; i++) {
        int32_t k;
        memcpy(&k, &v[i], sizeof k);
        /* the boundary bucket weighs in refine(): it stays as is for now */
        k &= -((k >= lo_bits) & ((k >= f) | ((k >> 21) == member_b)));
        memcpy(&v[i], &k, sizeof k);
    }
    if (member_b >= 0) m = collect_bucket(v, n, member_b, at);
    if (!has_cut) return false;
    if (n > SMALL_CUT) {
        refine(s, v, at, m, true, target, acc, b0, &cut, &ties);
    } else {
        m = 0; /* the ties of the final cut, by position */
        for (int32_t i = 0; i < n; i++) {
            at[m] = i;
            m += sort_key(v[i]) == cut;
        }
    }
    /* the boundary bucket (or, small n, the ties): drop what the exact cut leaves out */
    for (int32_t j = 0, seen = 0; j < m; j++) {
        uint32_t key = sort_key(v[at[j]]);
        seen += key == cut;
        if (key < cut || (key == cut && seen > ties) || float_order(v[at[j]]) < f) v[at[j]] = 0.0f;
    }
    return true;
}

/* Keeps, in place and in position order, the entries of v[0..n) inside the prefix found by
 * radix_cut: key above cut, or one of the first n_ties equal to it. ids[] moves along. */
static int32_t compact_cut(float *v, int32_t *ids, int32_t n, uint32_t cut, int32_t n_ties) {
    int32_t last_tie = 0; /* position of the n_ties-th entry equal to cut */
    for (int32_t ties = 0; last_tie < n; last_tie++)
        if (sort_key(v[last_tie]) == cut && ++ties == n_ties) break;
    int32_t j = 0;
    for (int32_t i = 0; i < n; i++) { /* branch-free: the outcome is often a coin toss */
        float x = v[i];
        int32_t id = ids[i];
        uint32_t k = sort_key(x);
        v[j] = x;
        ids[j] = id;
        j += (k > cut) | ((k == cut) & (i <= last_tie));
    }
    return j;
}

/* ---- the chain ---- */

/* Top-k of v[0..n) in one pass: entries above the current threshold are appended (in place) to a
 * buffer; whenever it fills up, it is cut back to the best k and the threshold rises to the
 * k-th key. Once k are held, an entry equal to the threshold comes later than all of them and
 * so ranks below them: the test is strict. Leaves the k best in v[0..k), their tokens in
 * s->id, in token order. */
static void top_k(hm_sampler *s, float *v, int32_t n, int32_t k) {
    enum { CHUNK = 16 };
    int64_t cap = (int64_t)k + (k > 4096 ? k : 4096);
    int32_t j = 0, ties;
    int32_t thr = INT32_MIN; /* float_order of the k-th best so far; below every non-NaN */
    uint32_t cut;
    for (int32_t i0 = 0; i0 < n; i0 += CHUNK) {
        int32_t end = n - i0 < CHUNK ? n : i0 + CHUNK, any = 0;
        for (int32_t i = i0; i < end; i++) any |= float_order(v[i]) > thr; /* vectorized */
        if (!any) continue;
        for (int32_t i = i0; i < end; i++) {
            float x = v[i];
            if (float_order(x) <= thr) continue;
            v[j] = x;
            s->id[j] = i;
            if (++j == cap) {
                radix_cut(s, v, j, false, (double)k, &cut, &ties);
                j = compact_cut(v, s->id, j, cut, ties);
                thr = float_order(key_float(cut));
            }
        }
    }
    if (j > k) {
        radix_cut(s, v, j, false, (double)k, &cut, &ties);
        compact_cut(v, s->id, j, cut, ties);
    }
}

/* Keeps, in place and in position order, the entries v[i] >= floor; fills s->id from ids (NULL:
 * the identity). Chunks are first counted branch-free: most are dropped or kept whole. */
static int32_t compact_floor(hm_sampler *s, float *v, const int32_t *ids, int32_t n, float floor) {
    enum { CHUNK = 16 };
    int32_t j = 0, f = float_order(floor);
    for (int32_t i0 = 0; i0 < n; i0 += CHUNK) {
        int32_t end = n - i0 < CHUNK ? n : i0 + CHUNK, pass = 0;
        for (int32_t i = i0; i < end; i++) pass += float_order(v[i]) >= f;
        if (pass == 0) continue;
        for (int32_t i = i0; i < end; i++) {
            if (pass == end - i0 || float_order(v[i]) >= f) {
                v[j] = v[i];
                s->id[j] = ids ? ids[i] : i;
                j++;
            }
        }
    }
    return j;
}

static int32_t count_at_least(const float *v, int32_t n, float floor) {
    int32_t c = 0, f = float_order(floor);
    for (int32_t i = 0; i < n; i++) c += float_order(v[i]) >= f;
    return c;
}

/* Narrows v[0..n) (tokens *ids, NULL: the identity) to the entries >= floor when that drops most
 * of them (then *ids = s->id); otherwise leaves everything, as an in-place compaction of most of
 * the vocabulary costs more than carrying the rest along. Returns the new n. */
static int32_t narrow(hm_sampler *s, float *v, const int32_t **ids, int32_t n, float floor) {
    if (count_at_least(v, n, floor) > n / 4) return n;
    n = compact_floor(s, v, *ids, n, floor);
    *ids = s->id;
    return n;
}

/* Zeroes, in place, the probabilities v[0..n) (>= 0) below floor. */
static void zero_below(float *v, int32_t n, float floor) {
    int32_t f = float_order(floor);
    for (int32_t i = 0; i < n; i++) {
        int32_t k = float_order(v[i]); /* = the bits, for v >= 0 */
        k &= -(k >= f);
        memcpy(&v[i], &k, sizeof k);
    }
}

/* Top-p and min-p on the probabilities v[0..n) (unnormalised, total z, tokens *ids): zeroes or
 * drops what they remove and returns the new n (*ids updated). Only the tokens that can be in the
 * nucleus matter: those with p < c, c = (1 - top_p) * z / n, weigh less than (1 - top_p) * z
 * together, so the tokens >= c surely reach top_p (by the slack TOP_P_EPS, far above the
 * rounding of the sums); when they are few, the others are dropped before selecting. Both top-p
 * and min-p keep a prefix of the tokens ordered by probability, so the result is the shorter. */
static int32_t nucleus(hm_sampler *s, float *v, const int32_t **ids, int32_t n, double z) {
    const hm_sampler_params *p = &s->p;
    /* our exp gives 0 or a normal number: floor FLT_MIN drops exactly the masked tokens */
    float floor = p->min_p > FLT_MIN ? p->min_p : FLT_MIN;
    if (p->top_p >= 1.0f) {
        zero_below(v, n, floor);
        return n;
    }
    double target = p->top_p * z * (1.0 - TOP_P_EPS);
    float sure = (float)((1.0 - p->top_p) * z / n * (1.0 - TOP_P_EPS));
    n = narrow(s, v, ids, n, sure > floor ? sure : floor);
    int32_t lo, hi;
    order_range(v, n, &lo, &hi);
    if (lo == hi) { /* all equal (a flat distribution): the first ones by token id */
        double need = ceil(target / v[0]);
        return need < 1.0 ? 1 : need < n ? (int32_t)need : n;
    }
    /* no cut: min-p dropped so much that the rest stays below top_p, so min-p binds */
    cut_prefix(s, v, n, target, floor);
    return n;
}

/* A logit below which p < min_p * p_max for sure: m + t * ln(min_p), less a margin far wider than
 * the rounding of the exact test (exp of (l - m) / t within a few ulp). */
static float min_p_logit_floor(float m, float t, float min_p) {
    double ln = log((double)min_p);
    double margin = 0.01 * t + 1e-5 * (fabs((double)m) + t * fabs(ln));
    double floor = (double)m + t * ln - margin;
    return floor < -FLT_MAX ? -INFINITY : (float)floor;
}

/* The chain after top-k: min-p's logit floor, temperature, softmax, top-p / min-p, the draw, over
 * v[0..n) (tokens ids, or the positions themselves when NULL) whose largest value is m. */
static hm_status finish(hm_sampler *s, float *v, const int32_t *ids, int32_t n, float m,
                        int32_t *out) {
    const hm_sampler_params *p = &s->p;
    if (p->min_p > 0.0f && p->top_p >= 1.0f) /* min-p alone needs no normalisation: drop what
                                              * is surely below it by logit, before any exp
                                              * (nucleus() then applies the exact test) */
        n = narrow(s, v, &ids, n, min_p_logit_floor(m, p->temperature, p->min_p));

    float inv_t = 1.0f / p->temperature;
    for (int32_t i = 0; i < n; i++) v[i] = exp_nonpos((v[i] - m) * inv_t);
    double z = block_sums(v, n, s->block);

    if (p->top_p < 1.0f || p->min_p > 0.0f) {
        n = nucleus(s, v, &ids, n, z);
        z = block_sums(v, n, s->block);
    }

    double u = (double)(hm_rng_next(&s->rng) >> 11) * 0x1p-53;
    int32_t i = draw(v, n, s->block, z, u);
    if (i < 0) return hm_errorf(HM_ERR_INTERNAL, "sampler: draw found no token of positive mass");
    *out = ids ? ids[i] : i;
    return HM_OK;
}

int hm_sampler_candidates(const hm_sampler *s) {
    const hm_sampler_params *p = &s->p;
    if (s->penalize && s->n_distinct > 0) return 0;
    if (p->temperature < HM_SAMPLER_GREEDY_TEMP) return 1;
    return p->top_k > 0 && p->top_k < s->n_vocab && p->top_k <= HM_SAMPLER_MAX_CANDIDATES ? p->top_k
                                                                                          : 0;
}

hm_status hm_sampler_sample_candidates(hm_sampler *s, const int32_t *ids, const float *vals,
                                       int32_t k, int32_t *out) {
    *out = -1;
    if (!ids || !vals) return hm_errorf(HM_ERR_INVALID_ARG, "sampler: candidates are NULL");
    const int32_t want = hm_sampler_candidates(s);
    if (want == 0 || k < want || k > s->n_vocab)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "sampler: %d candidates given, %d wanted (hm_sampler_candidates)", k,
                         want);
    float m = -INFINITY;
    hm_status st = load_logits(vals, k, s->val, &m);
    if (st != HM_OK) return st;
    for (int32_t i = 0; i < k; i++) {
        if (ids[i] < 0 || ids[i] >= s->n_vocab || (i && ids[i] <= ids[i - 1]))
            return hm_errorf(HM_ERR_INVALID_ARG,
                             "sampler: candidate %d is token %d (tokens in [0, %d), ascending)", i,
                             ids[i], s->n_vocab);
        s->id[i] = ids[i];
    }
    if (m == -INFINITY)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "sampler: all %d logits are -inf: no token can be drawn", s->n_vocab);
    if (s->p.temperature < HM_SAMPLER_GREEDY_TEMP) {
        int32_t i = 0;
        while (s->val[i] != m) i++;
        *out = ids[i];
        return HM_OK;
    }
    if (k > want) { /* a batch's largest k: this sampler's top-k of them, still in token order */
        top_k(s, s->val, k, want);
        for (int32_t i = 0; i < want; i++) s->id[i] = ids[s->id[i]];
    }
    return finish(s, s->val, s->id, want, m, out);
}

hm_status hm_sampler_sample(hm_sampler *s, const float *logits, int32_t *out) {
    *out = -1;
    if (!logits) return hm_errorf(HM_ERR_INVALID_ARG, "sampler: sample: logits is NULL");
    const hm_sampler_params *p = &s->p;
    int32_t n = s->n_vocab;
    float *v = s->val, m = -INFINITY;
    hm_status st = load_logits(logits, n, v, &m);
    if (st != HM_OK) return st;
    if (s->penalize && s->n_distinct > 0) {
        if ((st = apply_penalties(s, v)) != HM_OK) return st;
        m = max_of(v, n);
    }
    if (m == -INFINITY)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "sampler: all %d logits are -inf%s: no token can be drawn", n,
                         s->penalize && s->n_distinct > 0 ? " after the penalties" : "");

    if (p->temperature < HM_SAMPLER_GREEDY_TEMP) {
        int32_t i = 0;
        while (v[i] != m) i++;
        *out = i;
        return HM_OK;
    }

    const int32_t *ids = NULL; /* token of v[i]; NULL: i itself */
    if (p->top_k > 0 && p->top_k < n) {
        top_k(s, v, n, p->top_k);
        n = p->top_k;
        ids = s->id;
    }
    return finish(s, v, ids, n, m, out);
}
