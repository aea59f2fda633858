/* test_sampler.c - token sampler against oracles: argmax, exact top-k / top-p / min-p sets from a
 * sort in double, softmax frequencies within 5 binomial sigma, penalties on hand-computed
 * thresholds, seeds, and bad parameters / logits. */
#include <math.h>

#include "core/cpu.h"
#include "engine/sampler.h"
#include "quant/synth.h"
#include "test.h"

#define BIG_VOCAB 151936

static hm_sampler *make(const hm_sampler_params *p, int32_t n_vocab) {
    hm_sampler *s = NULL;
    CHECK_OK(hm_sampler_create(p, n_vocab, &s));
    return s;
}

static float uniform(uint64_t *rng) {
    return (float)(hm_rng_next(rng) >> 40) * (1.0f / 16777216.0f);
}

/* Samples `draws` times and counts the tokens into count[n] (zeroed first). */
static void histogram(hm_sampler *s, const float *logits, int32_t n, int draws, int *count) {
    memset(count, 0, sizeof(int) * (size_t)n);
    for (int i = 0; i < draws; i++) {
        int32_t t = -1;
        hm_status st = hm_sampler_sample(s, logits, &t);
        if (st != HM_OK || t < 0 || t >= n) {
            CHECK_MSG(0, "draw %d: %s, token %d", i, hm_last_error(), t);
            return;
        }
        count[t]++;
    }
}

/* The set {i : in[i]} is exactly the set of tokens seen (count > 0). */
static void check_seen_set(const int *count, const unsigned char *in, int32_t n, const char *what) {
    int outside = 0, missing = 0, first_outside = -1, first_missing = -1;
    for (int32_t i = 0; i < n; i++) {
        if (count[i] && !in[i] && outside++ == 0) first_outside = i;
        if (!count[i] && in[i] && missing++ == 0) first_missing = i;
    }
    CHECK_MSG(outside == 0, "%s: %d tokens outside the set were drawn (first %d)", what, outside,
              first_outside);
    CHECK_MSG(missing == 0, "%s: %d tokens of the set never drawn (first %d)", what, missing,
              first_missing);
}

/* Frequencies match probabilities prob[n] (renormalised over their sum) within 5 sigma. */
static void check_frequencies(const int *count, const double *prob, int32_t n, int draws,
                              const char *what) {
    double z = 0.0;
    for (int32_t i = 0; i < n; i++) z += prob[i];
    for (int32_t i = 0; i < n; i++) {
        double p = prob[i] / z, want = draws * p, sigma = sqrt(draws * p * (1.0 - p));
        if (p == 0.0) {
            CHECK_MSG(count[i] == 0, "%s: token %d has p 0 but was drawn %d times", what, i,
                      count[i]);
            continue;
        }
        CHECK_MSG(fabs(count[i] - want) <= 5.0 * sigma,
                  "%s: token %d drawn %d times, want %.1f +- 5 * %.1f", what, i, count[i], want,
                  sigma);
    }
}

/* Oracle ranking: positions sorted by logit descending, then by id. */
static const float *g_rank_logits;
static int by_logit_then_id(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = g_rank_logits[i], y = g_rank_logits[j];
    if (x != y) return x > y ? -1 : 1;
    return i < j ? -1 : 1;
}

static int32_t *rank(const float *logits, int32_t n) {
    int32_t *order = malloc(sizeof(int32_t) * (size_t)n);
    for (int32_t i = 0; i < n; i++) order[i] = i;
    g_rank_logits = logits;
    qsort(order, (size_t)n, sizeof *order, by_logit_then_id);
    return order;
}

static int32_t argmax_ref(const float *v, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

static void test_greedy(void) {
    hm_sampler_params p = hm_sampler_default_params();
    p.temperature = 0.0f;
    p.top_k = 5;
    p.top_p = 0.1f;
    p.min_p = 0.5f;
    p.seed = 1234;
    float tie[6] = {-INFINITY, 0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
    float neg[4] = {-5.0f, -3.0f, -INFINITY, -3.0f};
    hm_sampler *s = make(&p, 6);
    hm_sampler *s4 = make(&p, 4);
    int32_t t = -1;
    for (int rep = 0; rep < 3; rep++) {
        CHECK_OK(hm_sampler_sample(s, tie, &t));
        CHECK_MSG(t == 2, "tie between 2 and 4: got %d", t);
        CHECK_OK(hm_sampler_sample(s4, neg, &t));
        CHECK_MSG(t == 1, "negative logits, tie between 1 and 3: got %d", t);
    }
    hm_sampler_free(s);
    hm_sampler_free(s4);

    /* temperature just under the greedy threshold is greedy too; large random vocabulary */
    p.temperature = HM_SAMPLER_GREEDY_TEMP * 0.5f;
    float *logits = malloc(sizeof(float) * BIG_VOCAB);
    uint64_t rng = 7;
    hm_sampler *big = make(&p, BIG_VOCAB);
    for (int row = 0; row < 8; row++) {
        for (int32_t i = 0; i < BIG_VOCAB; i++) logits[i] = 10.0f * uniform(&rng) - 5.0f;
        CHECK_OK(hm_sampler_sample(big, logits, &t));
        CHECK_MSG(t == argmax_ref(logits, BIG_VOCAB), "row %d: got %d, argmax %d", row, t,
                  argmax_ref(logits, BIG_VOCAB));
    }
    hm_sampler_free(big);
    free(logits);
}

/* top_k = 1 at any temperature is greedy, ties included (logits on a coarse grid tie often). */
static void test_top_k_one(void) {
    hm_sampler_params pg = hm_sampler_default_params(), pk = pg;
    pg.temperature = 0.0f;
    pk.temperature = 1.5f;
    pk.top_k = 1;
    pk.seed = 99;
    const int32_t n = 5000;
    float *logits = malloc(sizeof(float) * n);
    hm_sampler *g = make(&pg, n), *k = make(&pk, n);
    uint64_t rng = 3;
    int same = 0;
    for (int row = 0; row < 50; row++) {
        for (int32_t i = 0; i < n; i++) logits[i] = floorf(8.0f * uniform(&rng)) - 4.0f;
        int32_t a = -1, b = -2;
        CHECK_OK(hm_sampler_sample(g, logits, &a));
        CHECK_OK(hm_sampler_sample(k, logits, &b));
        same += a == b;
        CHECK_MSG(a == argmax_ref(logits, n), "row %d: greedy %d, argmax %d", row, a,
                  argmax_ref(logits, n));
    }
    CHECK_MSG(same == 50, "top_k 1 agreed with greedy on %d of 50 rows", same);
    hm_sampler_free(g);
    hm_sampler_free(k);
    free(logits);
}

static void sequence(hm_sampler *s, const float *logits, int len, int32_t *out) {
    for (int i = 0; i < len; i++) CHECK_OK(hm_sampler_sample(s, logits, &out[i]));
}

static void test_seeds(void) {
    enum { N = 1000, LEN = 64 };
    static float flat[N];
    hm_sampler_params p = hm_sampler_default_params();
    p.seed = 1;
    hm_sampler *a = make(&p, N), *b = make(&p, N);
    p.seed = 2;
    hm_sampler *c = make(&p, N);
    int32_t sa[LEN], sb[LEN], sc[LEN], sr[LEN];
    sequence(a, flat, LEN, sa);
    sequence(b, flat, LEN, sb);
    sequence(c, flat, LEN, sc);
    CHECK(memcmp(sa, sb, sizeof sa) == 0);
    CHECK(memcmp(sa, sc, sizeof sa) != 0);
    hm_sampler_reset(a);
    sequence(a, flat, LEN, sr);
    CHECK_MSG(memcmp(sa, sr, sizeof sa) == 0, "reset does not restart the random stream");
    hm_sampler_free(a);
    hm_sampler_free(b);
    hm_sampler_free(c);

    /* Golden tokens: the draw is defined by our own generator and exp, not libc's, so these are
     * the same on every machine. A change here changes what every seeded run generates. */
    static float logits[N];
    for (int i = 0; i < N; i++) logits[i] = (float)((i * 37) % 101) / 25.0f;
    p = hm_sampler_default_params();
    p.temperature = 0.8f;
    p.top_p = 0.95f;
    p.seed = 42;
    hm_sampler *g = make(&p, N);
    int32_t got[8];
    const int32_t want[8] = {742, 161, 280, 343, 38, 868, 221, 802};
    sequence(g, logits, 8, got);
    for (int i = 0; i < 8; i++)
        CHECK_MSG(got[i] == want[i], "golden token %d: got %d, want %d", i, got[i], want[i]);
    hm_sampler_free(g);
}

/* 200k draws from 5 tokens at temperatures 1 and 0.5, and with top-k on top. */
static void test_frequencies(void) {
    enum { N = 5, DRAWS = 200000 };
    const float logits[N] = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f};
    const float temps[3] = {1.0f, 0.5f, 2.0f};
    int count[N];
    double prob[N];
    for (int ti = 0; ti < 3; ti++) {
        for (int top_k = 0; top_k <= 3; top_k += 3) {
            hm_sampler_params p = hm_sampler_default_params();
            p.temperature = temps[ti];
            p.top_k = top_k;
            p.seed = 1000 + (uint64_t)ti;
            hm_sampler *s = make(&p, N);
            histogram(s, logits, N, DRAWS, count);
            for (int i = 0; i < N; i++) prob[i] = exp(logits[i] / (double)temps[ti]);
            if (top_k == 3) prob[2] = prob[3] = 0.0; /* the two smallest logits */
            char what[64];
            snprintf(what, sizeof what, "temperature %g, top_k %d", temps[ti], top_k);
            check_frequencies(count, prob, N, DRAWS, what);
            hm_sampler_free(s);
        }
    }
}

/* Exact top-k sets: many ties at the boundary (a grid of 64 values), and rising logits that
 * refill the selection buffer several times. */
static void test_top_k_sets(void) {
    const int32_t n = 12000; /* ~190 tokens per value */
    float *logits = malloc(sizeof(float) * n);
    int *count = malloc(sizeof(int) * n);
    unsigned char *in = malloc((size_t)n);
    const struct {
        bool rising;
        int k;
    } cases[] = {{false, 40}, {false, 250}, {false, 20}, {true, 40}};
    for (int c = 0; c < 4; c++) {
        uint64_t rng = 11;
        for (int32_t i = 0; i < n; i++)
            logits[i] = cases[c].rising ? 1e-3f * (float)i : floorf(64.0f * uniform(&rng)) / 8.0f;
        int32_t *order = rank(logits, n);
        hm_sampler_params p = hm_sampler_default_params();
        p.top_k = cases[c].k;
        p.temperature = 1000.0f; /* nearly uniform over the kept set */
        p.seed = (uint64_t)c;
        hm_sampler *s = make(&p, n);
        histogram(s, logits, n, cases[c].k * 25, count);
        memset(in, 0, (size_t)n);
        for (int i = 0; i < cases[c].k; i++) in[order[i]] = 1;
        char what[64];
        snprintf(what, sizeof what, "top_k %d%s", cases[c].k, cases[c].rising ? ", rising" : "");
        check_seen_set(count, in, n, what);
        hm_sampler_free(s);
        free(order);
    }
    free(logits);
    free(count);
    free(in);
}

/* top_p set halfway between the cumulative probabilities of keep - 1 and keep tokens (sorted in
 * double), so that the nucleus is exactly the best `keep`; with min_p, those of them with
 * p >= min_p * p_max. Checks that exactly that set is drawn. */
static void check_top_p_set(const float *logits, int32_t n, int top_k, float temperature, int keep,
                            float min_p, const char *what) {
    int32_t *order = rank(logits, n);
    int32_t m = top_k > 0 && top_k < n ? top_k : n;
    double z = 0.0, *cum = malloc(sizeof(double) * (size_t)m);
    for (int32_t i = 0; i < m; i++) {
        z += exp((logits[order[i]] - logits[order[0]]) / (double)temperature);
        cum[i] = z;
    }
    float top_p = (float)(0.5 * (cum[keep - 1] + cum[keep - 2]) / z);
    int *count = malloc(sizeof(int) * (size_t)n);
    unsigned char *in = calloc((size_t)n, 1);
    int n_in = 0;
    for (int i = 0; i < keep; i++) {
        double ratio = exp((logits[order[i]] - logits[order[0]]) / (double)temperature);
        in[order[i]] = ratio >= min_p;
        n_in += in[order[i]];
    }
    hm_sampler_params p = hm_sampler_default_params();
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = 5;
    hm_sampler *s = make(&p, n);
    histogram(s, logits, n, 40 * n_in, count);
    check_seen_set(count, in, n, what);
    hm_sampler_free(s);
    free(order);
    free(cum);
    free(count);
    free(in);
}

static void test_top_p(void) {
    /* Boundary semantics: the smallest set of most likely tokens whose cumulative probability is
     * >= top_p, ties to the lowest id. Probabilities: token 2: 1/2, 0: 1/4, 1 and 3: 1/8. */
    enum { N = 4, DRAWS = 20000 };
    const float l2 = logf(2.0f);
    const float logits[N] = {-l2, -2.0f * l2, 0.0f, -2.0f * l2};
    const struct {
        float top_p;
        unsigned char in[N];
    } cases[] = {
        {0.3f, {0, 0, 1, 0}},    {0.5f, {0, 0, 1, 0}},  {0.51f, {1, 0, 1, 0}},
        {0.75f, {1, 0, 1, 0}},   {0.76f, {1, 1, 1, 0}}, {0.875f, {1, 1, 1, 0}},
        {0.8751f, {1, 1, 1, 1}}, {1.0f, {1, 1, 1, 1}},
    };
    int count[N];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        hm_sampler_params p = hm_sampler_default_params();
        p.top_p = cases[c].top_p;
        p.seed = c;
        hm_sampler *s = make(&p, N);
        histogram(s, logits, N, DRAWS, count);
        char what[64];
        snprintf(what, sizeof what, "top_p %g", cases[c].top_p);
        check_seen_set(count, cases[c].in, N, what);
        double prob[N];
        for (int i = 0; i < N; i++) prob[i] = cases[c].in[i] ? exp(logits[i]) : 0.0;
        check_frequencies(count, prob, N, DRAWS, what);
        hm_sampler_free(s);
    }

    /* a flat distribution: top_p 0.25 of 1000 equal tokens is exactly ids 0..249 */
    enum { F = 1000 };
    static float flat[F];
    int fcount[F];
    unsigned char in[F];
    const float fp[2] = {0.25f, 0.2505f};
    const int fkeep[2] = {250, 251};
    for (int c = 0; c < 2; c++) {
        hm_sampler_params p = hm_sampler_default_params();
        p.top_p = fp[c];
        hm_sampler *s = make(&p, F);
        histogram(s, flat, F, 20000, fcount);
        for (int i = 0; i < F; i++) in[i] = i < fkeep[c];
        check_seen_set(fcount, in, F, fp[c] == 0.25f ? "flat, top_p 0.25" : "flat, top_p 0.2505");
        hm_sampler_free(s);
    }

    /* large vocabularies: boundaries inside the deeper radix levels (close distinct values, a
     * coarse grid with ties), and top-p after top-k */
    const int32_t n = 8192;
    float *logits_big = malloc(sizeof(float) * 20000);
    uint64_t rng = 17;
    for (int32_t i = 0; i < n; i++) logits_big[i] = -1e-5f * (float)(i % 4096) - (float)(i / 4096);
    check_top_p_set(logits_big, n, 0, 1.0f, 100, 0.0f, "top_p, close distinct values");
    for (int32_t i = 0; i < n; i++) logits_big[i] = floorf(32.0f * uniform(&rng)) / 4.0f;
    check_top_p_set(logits_big, n, 0, 0.5f, 200, 0.0f, "top_p, ties on a grid");
    for (int32_t i = 0; i < 20000; i++) logits_big[i] = 2.0f * uniform(&rng);
    check_top_p_set(logits_big, 20000, 100, 1.0f, 30, 0.0f, "top_p after top_k 100");
    /* three groups, interleaved: 120 tokens at p_max, 80 at 0.84 p_max, 200 at 0.71 p_max
     * (temperature 4). The nucleus ends inside the third group (ties by id); min_p 0.9 then
     * keeps the first group only, dropping the second although it lies above the boundary. */
    for (int32_t i = 0; i < 400; i++)
        logits_big[i] = i % 10 < 3 ? 0.0f : i % 10 < 5 ? -logf(2.0f) : -2.0f * logf(2.0f);
    check_top_p_set(logits_big, 400, 0, 4.0f, 377, 0.0f, "top_p, boundary in a tie group");
    check_top_p_set(logits_big, 400, 0, 4.0f, 377, 0.9f, "top_p and min_p 0.9");
    free(logits_big);
}

static void test_min_p(void) {
    /* p / p_max = 1, 0.5, 0.2, 0.09, 0.05, 0.3 */
    enum { N = 6, DRAWS = 50000 };
    const float ratio[N] = {1.0f, 0.5f, 0.2f, 0.09f, 0.05f, 0.3f};
    float logits[N];
    for (int i = 0; i < N; i++) logits[i] = logf(ratio[i]) + 3.0f;
    const float min_ps[3] = {0.1f, 0.25f, 0.6f};
    int count[N];
    for (int c = 0; c < 3; c++) {
        hm_sampler_params p = hm_sampler_default_params();
        p.min_p = min_ps[c];
        p.seed = 77 + (uint64_t)c;
        hm_sampler *s = make(&p, N);
        histogram(s, logits, N, DRAWS, count);
        unsigned char in[N];
        double prob[N];
        for (int i = 0; i < N; i++) {
            in[i] = ratio[i] >= min_ps[c];
            prob[i] = in[i] ? ratio[i] : 0.0;
        }
        char what[64];
        snprintf(what, sizeof what, "min_p %g", min_ps[c]);
        check_seen_set(count, in, N, what);
        check_frequencies(count, prob, N, DRAWS, what);
        hm_sampler_free(s);
    }

    /* with top_p: the intersection of both sets, whichever is smaller. Total mass 2.14: top_p 0.6
     * keeps {0, 1} (1.5 >= 1.284), min_p 0.25 alone would keep {0, 1, 5}. */
    hm_sampler_params p = hm_sampler_default_params();
    p.min_p = 0.25f;
    p.top_p = 0.6f;
    hm_sampler *s = make(&p, N);
    histogram(s, logits, N, DRAWS, count);
    check_seen_set(count, (const unsigned char[N]){1, 1, 0, 0, 0, 0}, N, "min_p 0.25, top_p 0.6");
    hm_sampler_free(s);
    p.min_p = 0.6f;
    p.top_p = 0.9f;
    s = make(&p, N);
    histogram(s, logits, N, DRAWS, count);
    check_seen_set(count, (const unsigned char[N]){1, 0, 0, 0, 0, 0}, N, "min_p 0.6, top_p 0.9");
    hm_sampler_free(s);
}

/* Greedy choice after accepting history[0..n_hist) with penalties p. */
static int32_t penalized_argmax(hm_sampler_params p, const int32_t *history, int n_hist,
                                const float *logits, int32_t n) {
    p.temperature = 0.0f;
    hm_sampler *s = make(&p, n);
    if (!s) return -1;
    for (int i = 0; i < n_hist; i++) CHECK_OK(hm_sampler_accept(s, history[i]));
    int32_t t = -1;
    CHECK_OK(hm_sampler_sample(s, logits, &t));
    hm_sampler_free(s);
    return t;
}

#define EXPECT_PICK(p, hist, logits, want)                                                         \
    do {                                                                                           \
        int32_t got_ = penalized_argmax((p), (hist), (int)(sizeof(hist) / sizeof(hist[0])),        \
                                        (logits), (int32_t)(sizeof(logits) / sizeof(logits[0])));  \
        CHECK_MSG(got_ == (want), "%s after %s: picked %d, want %d", #logits, #hist, got_, want);  \
    } while (0)

static void test_penalties(void) {
    hm_sampler_params p = hm_sampler_default_params();
    const int32_t h0[1] = {0}, h000[3] = {0, 0, 0};

    /* repetition penalty 2 (HF): 3 -> 1.5 (divided), -1 -> -2 (multiplied); once per token */
    p.repetition_penalty = 2.0f;
    const float pos_a[2] = {3.0f, 1.6f}, pos_b[2] = {3.0f, 1.4f};
    const float neg_a[2] = {-1.0f, -1.9f}, neg_b[2] = {-1.0f, -2.1f};
    EXPECT_PICK(p, h0, pos_a, 1);
    EXPECT_PICK(p, h0, pos_b, 0);
    EXPECT_PICK(p, h0, neg_a, 1);
    EXPECT_PICK(p, h0, neg_b, 0);
    EXPECT_PICK(p, h000, pos_b, 0); /* 1.5 again, not 3 / 8 */
    EXPECT_PICK(p, h000, neg_b, 0); /* -2 again, not -8 */

    /* presence 0.5 + frequency 0.6 * count 2: 5 -> 3.3 */
    p = hm_sampler_default_params();
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.6f;
    const int32_t h00[2] = {0, 0};
    const float pf_a[2] = {5.0f, 3.2f}, pf_b[2] = {5.0f, 3.4f};
    EXPECT_PICK(p, h00, pf_a, 0);
    EXPECT_PICK(p, h00, pf_b, 1);
    EXPECT_PICK(p, h0, pf_b, 0); /* count 1: 5 - 0.5 - 0.6 = 3.9 */
    /* all three, repetition first: 5 / 2 - 0.5 - 1.2 = 0.8 */
    p.repetition_penalty = 2.0f;
    const float all_a[2] = {5.0f, 0.7f}, all_b[2] = {5.0f, 0.9f};
    EXPECT_PICK(p, h00, all_a, 0);
    EXPECT_PICK(p, h00, all_b, 1);
    /* negative penalties raise the logit */
    p = hm_sampler_default_params();
    p.presence_penalty = -1.0f;
    const float raise[2] = {1.0f, 1.5f};
    EXPECT_PICK(p, h0, raise, 0);

    /* window: only the last penalty_last_n accepted tokens count */
    p = hm_sampler_default_params();
    p.repetition_penalty = 2.0f;
    p.penalty_last_n = 2;
    const int32_t h012[3] = {0, 1, 2}, h0120[4] = {0, 1, 2, 0};
    const float win[3] = {3.0f, 2.0f, 1.6f}, win4[4] = {3.0f, 2.0f, 1.6f, 2.5f};
    EXPECT_PICK(p, h012, win, 0);  /* token 0 left the window */
    EXPECT_PICK(p, h0120, win, 1); /* window {2, 0}: 0 -> 1.5, 2 -> 0.8 */
    EXPECT_PICK(p, h012, win4, 0);
    p.penalty_last_n = 0;
    EXPECT_PICK(p, h0120, win, 0);
    p.penalty_last_n = -1;
    EXPECT_PICK(p, h012, win4, 3); /* 0 -> 1.5, 1 -> 1.0, 2 -> 0.8, 3 stays 2.5 */
    /* frequency counts only the occurrences inside the window: 0,0,0 then 1 with window 3 */
    p = hm_sampler_default_params();
    p.frequency_penalty = 1.0f;
    p.penalty_last_n = 3;
    const int32_t h0001[4] = {0, 0, 0, 1};
    const float freq_a[3] = {5.0f, 2.5f, 3.5f}, freq_b[3] = {5.0f, 2.5f, 2.5f};
    EXPECT_PICK(p, h0001, freq_a, 2); /* 5 - 2 = 3 < 3.5 */
    EXPECT_PICK(p, h0001, freq_b, 0); /* 3 > 2.5; with all three 0s counted: 2 < 2.5 */

    /* reset forgets the history; logits are not modified */
    p = hm_sampler_default_params();
    p.temperature = 0.0f;
    p.repetition_penalty = 2.0f;
    hm_sampler *s = make(&p, 2);
    float logits[2] = {3.0f, 1.6f};
    int32_t t = -1;
    CHECK_OK(hm_sampler_accept(s, 0));
    CHECK_OK(hm_sampler_sample(s, logits, &t));
    CHECK(t == 1);
    CHECK(logits[0] == 3.0f && logits[1] == 1.6f);
    hm_sampler_reset(s);
    CHECK_OK(hm_sampler_sample(s, logits, &t));
    CHECK(t == 0);
    hm_sampler_free(s);

    /* penalties apply before top-k: top_k 1 at temperature 1 follows the penalised argmax */
    p = hm_sampler_default_params();
    p.repetition_penalty = 2.0f;
    p.top_k = 1;
    s = make(&p, 2);
    CHECK_OK(hm_sampler_accept(s, 0));
    for (int i = 0; i < 20; i++) {
        CHECK_OK(hm_sampler_sample(s, logits, &t));
        CHECK(t == 1);
    }
    hm_sampler_free(s);
}

/* The penalty window against a brute-force oracle of the documented formula over the last
 * penalty_last_n tokens, across the window's growth (4096, 8192, ... entries) and wrap; and a
 * window far larger than the sequence costs only the sequence. */
static void test_penalty_window(void) {
    enum { V = 64, N = 12000 };
    const int windows[3] = {5000, 1 << 30, -1};
    int32_t *seq = malloc(sizeof(int32_t) * N);
    uint64_t rng = 99;
    for (int i = 0; i < N; i++) seq[i] = (int32_t)(hm_rng_next(&rng) % V);
    for (int w = 0; w < 3; w++) {
        hm_sampler_params p = hm_sampler_default_params();
        p.temperature = 0.0f;
        p.repetition_penalty = 1.3f;
        p.presence_penalty = 0.2f;
        p.frequency_penalty = 0.01f;
        p.penalty_last_n = windows[w];
        hm_sampler *s = make(&p, V);
        if (!s) break;
        int bad = 0, first_bad = -1;
        for (int i = 0; i < N; i++) {
            CHECK_OK(hm_sampler_accept(s, seq[i]));
            if (i % 97 != 0 && i != N - 1) continue;
            float logits[V], pen[V];
            int count[V] = {0};
            const int from = windows[w] < 0 || i + 1 < windows[w] ? 0 : i + 1 - windows[w];
            for (int j = from; j <= i; j++) count[seq[j]]++;
            for (int t = 0; t < V; t++) {
                float l = logits[t] = uniform(&rng) * 8.0f - 4.0f;
                if (count[t]) {
                    l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
                    l -= (float)count[t] * p.frequency_penalty + p.presence_penalty;
                }
                pen[t] = l;
            }
            int32_t t = -1;
            CHECK_OK(hm_sampler_sample(s, logits, &t));
            if (t != argmax_ref(pen, V) && bad++ == 0) first_bad = i;
        }
        CHECK_MSG(bad == 0,
                  "penalty_last_n %d: %d picks differ from the oracle (first after %d "
                  "tokens)",
                  windows[w], bad, first_bad + 1);
        hm_sampler_free(s);
    }
    free(seq);

    /* a window of 2^26 tokens over a short sequence: no 256 MB window up front */
    hm_sampler_params p = hm_sampler_default_params();
    p.repetition_penalty = 1.1f;
    p.penalty_last_n = 1 << 26;
    const uint64_t before = hm_mem_anon_bytes();
    hm_sampler *s = make(&p, 1000);
    for (int i = 0; s && i < 100; i++) CHECK_OK(hm_sampler_accept(s, i));
    const uint64_t after = hm_mem_anon_bytes();
    if (before && after)
        CHECK_MSG(after < before + (64u << 20), "resident memory grew by %.1f MB",
                  (double)(after - before) * 1e-6);
    hm_sampler_free(s);
}

static void expect_bad_params(hm_sampler_params p, int32_t n_vocab, const char *field) {
    hm_sampler *s = (hm_sampler *)&p; /* must be reset to NULL */
    CHECK_STATUS(hm_sampler_create(&p, n_vocab, &s), HM_ERR_INVALID_ARG);
    CHECK(s == NULL);
    CHECK_CONTAINS(hm_last_error(), field);
}

static void test_errors(void) {
    hm_sampler_params d = hm_sampler_default_params(), p;
    expect_bad_params(d, 0, "n_vocab");
    p = d, p.temperature = -0.1f, expect_bad_params(p, 10, "temperature");
    p = d, p.temperature = NAN, expect_bad_params(p, 10, "temperature");
    p = d, p.temperature = INFINITY, expect_bad_params(p, 10, "temperature");
    p = d, p.top_k = -1, expect_bad_params(p, 10, "top_k");
    p = d, p.top_p = 0.0f, expect_bad_params(p, 10, "top_p");
    p = d, p.top_p = 1.01f, expect_bad_params(p, 10, "top_p");
    p = d, p.top_p = NAN, expect_bad_params(p, 10, "top_p");
    p = d, p.min_p = -0.01f, expect_bad_params(p, 10, "min_p");
    p = d, p.min_p = 1.5f, expect_bad_params(p, 10, "min_p");
    p = d, p.repetition_penalty = 0.0f, expect_bad_params(p, 10, "repetition_penalty");
    p = d, p.repetition_penalty = INFINITY, expect_bad_params(p, 10, "repetition_penalty");
    p = d, p.presence_penalty = NAN, expect_bad_params(p, 10, "presence_penalty");
    p = d, p.frequency_penalty = -INFINITY, expect_bad_params(p, 10, "frequency_penalty");
    p = d, p.penalty_last_n = -2, expect_bad_params(p, 10, "penalty_last_n");
    CHECK_CONTAINS(hm_last_error(), ">= -1");

    hm_sampler *s = make(&d, 4);
    int32_t t = 0;
    float nan_row[4] = {0.0f, 1.0f, 2.0f, NAN};
    CHECK_STATUS(hm_sampler_sample(s, nan_row, &t), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "logits[3]");
    CHECK_CONTAINS(hm_last_error(), "NaN");
    CHECK(t == -1);
    float all_nan[4] = {NAN, NAN, NAN, NAN};
    CHECK_STATUS(hm_sampler_sample(s, all_nan, &t), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "4 of 4");
    float inf_row[4] = {0.0f, INFINITY, 2.0f, 1.0f};
    CHECK_STATUS(hm_sampler_sample(s, inf_row, &t), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "logits[1]");
    float masked[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK_STATUS(hm_sampler_sample(s, masked, &t), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "-inf");
    CHECK_STATUS(hm_sampler_accept(s, 4), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "token 4");
    CHECK_STATUS(hm_sampler_accept(s, -1), HM_ERR_INVALID_ARG);
    /* masked tokens are never drawn, whatever the chain */
    float part[4] = {-INFINITY, 0.0f, -INFINITY, 0.0f};
    int count[4];
    histogram(s, part, 4, 2000, count);
    CHECK(count[0] == 0 && count[2] == 0 && count[1] > 0 && count[3] > 0);
    hm_sampler_free(s);
    d.top_k = 3;
    d.min_p = 1e-30f;
    s = make(&d, 4);
    histogram(s, part, 4, 2000, count);
    CHECK(count[0] == 0 && count[2] == 0 && count[1] > 0 && count[3] > 0);
    hm_sampler_free(s);
    hm_sampler_free(NULL);
}

static int by_id(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    return i < j ? -1 : i > j;
}

/* The GPU's candidates (hm_ctx_decode_top) as a plain reference makes them: the k largest logits,
 * ties to the lower token, in token order. Sampling from them must give the same tokens, and the
 * same random stream, as sampling the whole row. */
static void test_candidates(void) {
    enum { V = 5000, STEPS = 12 };
    static float lg[V];
    uint64_t r = 99;
    static const struct {
        float temp, top_p, min_p;
        int top_k;
    } cfg[] = {{0.0f, 1.0f, 0.0f, 0},    {0.7f, 1.0f, 0.0f, 40},  {1.0f, 0.9f, 0.0f, 20},
               {1.3f, 0.5f, 0.05f, 256}, {0.8f, 1.0f, 0.1f, 7},   {1.0f, 1.0f, 0.0f, 1},
               {0.6f, 0.95f, 0.0f, 100}, {2.0f, 0.999f, 0.0f, 3}, {1.0f, 0.8f, 0.0f, 0}};
    for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++)
        for (int trial = 0; trial < 6; trial++) {
            hm_sampler_params p = hm_sampler_default_params();
            p.temperature = cfg[c].temp, p.top_p = cfg[c].top_p, p.min_p = cfg[c].min_p;
            p.top_k = cfg[c].top_k, p.seed = 1000 + (uint64_t)trial;
            hm_sampler *full = make(&p, V), *cand = make(&p, V);
            const int k = hm_sampler_candidates(cand);
            CHECK(k == (p.temperature < HM_SAMPLER_GREEDY_TEMP ? 1 : p.top_k));
            for (int step = 0; step < STEPS && k > 0; step++) {
                for (int i = 0; i < V; i++) lg[i] = (uniform(&r) - 0.5f) * 12.0f;
                for (int i = 0; i < 200; i++) lg[(i * 37) % V] = lg[(i * 91) % V]; /* ties */
                if (trial == 1) lg[17] = -0.0f, lg[18] = 0.0f, lg[4000] = -INFINITY;
                int32_t *order = rank(lg, V), ids[HM_SAMPLER_MAX_CANDIDATES];
                float vals[HM_SAMPLER_MAX_CANDIDATES];
                /* a batch's larger k (other rows' samplers) gives the same token */
                const int kk = trial >= 3 ? k + 1 + trial * 7 : k;
                const int kg = kk > HM_SAMPLER_MAX_CANDIDATES ? HM_SAMPLER_MAX_CANDIDATES : kk;
                memcpy(ids, order, sizeof(int32_t) * (size_t)kg);
                qsort(ids, (size_t)kg, sizeof *ids, by_id);
                for (int j = 0; j < kg; j++) vals[j] = lg[ids[j]];
                int32_t a = -1, b = -2;
                CHECK_OK(hm_sampler_sample(full, lg, &a));
                CHECK_OK(hm_sampler_sample_candidates(cand, ids, vals, kg, &b));
                CHECK_MSG(a == b,
                          "config %zu trial %d step %d: %d from the row, %d from %d "
                          "candidates",
                          c, trial, step, (int)a, (int)b, kg);
                free(order);
            }
            if (k == 0) { /* no top-k: every logit is needed */
                int32_t id0 = 0, t = -1;
                float v0 = 0.0f;
                CHECK_STATUS(hm_sampler_sample_candidates(cand, &id0, &v0, 1, &t),
                             HM_ERR_INVALID_ARG);
            }
            hm_sampler_free(full), hm_sampler_free(cand);
        }
    /* penalties switch the candidates off once a token was accepted; bad candidates */
    hm_sampler_params p = hm_sampler_default_params();
    p.top_k = 2, p.repetition_penalty = 1.3f;
    hm_sampler *s = make(&p, 10);
    CHECK(hm_sampler_candidates(s) == 2);
    int32_t ids[2] = {4, 2}, t;
    CHECK_STATUS(hm_sampler_sample_candidates(s, ids, (float[]){1.0f}, 1, &t), HM_ERR_INVALID_ARG);
    float vals[2] = {1.0f, 2.0f};
    CHECK_STATUS(hm_sampler_sample_candidates(s, ids, vals, 2, &t), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "ascending");
    ids[0] = 2, ids[1] = 10;
    CHECK_STATUS(hm_sampler_sample_candidates(s, ids, vals, 2, &t), HM_ERR_INVALID_ARG);
    ids[1] = 4, vals[1] = NAN;
    CHECK_STATUS(hm_sampler_sample_candidates(s, ids, vals, 2, &t), HM_ERR_INVALID_ARG);
    vals[0] = vals[1] = -INFINITY;
    CHECK_STATUS(hm_sampler_sample_candidates(s, ids, vals, 2, &t), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "-inf");
    CHECK_OK(hm_sampler_accept(s, 3));
    CHECK(hm_sampler_candidates(s) == 0);
    hm_sampler_free(s);
}

int main(void) {
    test_greedy();
    test_candidates();
    test_top_k_one();
    test_seeds();
    test_frequencies();
    test_top_k_sets();
    test_top_p();
    test_min_p();
    test_penalties();
    test_penalty_window();
    test_errors();
    return test_done("sampler");
}
