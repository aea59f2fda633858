/* test_place.c - the hybrid placement of routed experts (model/place.h) on fixture b (3 layers,
 * layer 1 dense, 8 experts): counts per layer from --gpu-experts and from byte budgets under every
 * strategy, which experts each strategy picks, rules by tensor-name regex, the activation-count
 * file, and bad input. */
#include <limits.h>
#include <math.h>
#include <unistd.h>

#include "model/model.h"
#include "model/place.h"
#include "test.h"

static int layer_count(const hm_place_plan *pl, int il) {
    int c = 0;
    for (int e = 0; e < pl->n_experts; e++) c += pl->gpu[il * pl->n_experts + e];
    return c;
}

/* expert deferral's split: every CPU pair in exactly one of now and later, the K lowest-weighted
 * CPU pairs of each token in later, GPU pairs in neither; against a sort per token */
static void check_defer_split(void) {
    enum { N = 40, K = 8, E = 16 };
    int32_t ids[N * K], now[N * K], later[N * K];
    float w[N * K];
    uint8_t gpu[E];
    uint64_t s = 7;
    for (int e = 0; e < E; e++) gpu[e] = e % 3 == 0;
    for (int i = 0; i < N * K; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((s >> 33) % E);
        w[i] = (float)((s >> 40) % 7) / 7.0f; /* ties */
    }
    for (int defer = 0; defer <= K; defer += 3)
        for (int with_gpu = 0; with_gpu < 2; with_gpu++) {
            const uint8_t *g = with_gpu ? gpu : NULL;
            const int total = hm_defer_split(ids, w, N, K, g, defer, now, later);
            int want_total = 0;
            for (int t = 0; t < N; t++) {
                int cpu = 0, n_later = 0;
                float max_later = -1, min_now = 2;
                for (int j = 0; j < K; j++) {
                    const int i = t * K + j;
                    const bool on_cpu = !g || !g[ids[i]];
                    cpu += on_cpu;
                    CHECK(on_cpu ? (now[i] == ids[i]) != (later[i] == ids[i])
                                 : now[i] == -1 && later[i] == -1);
                    CHECK(now[i] == -1 || later[i] == -1);
                    if (later[i] >= 0) n_later++, max_later = fmaxf(max_later, w[i]);
                    if (now[i] >= 0) min_now = fminf(min_now, w[i]);
                }
                const int want = defer < cpu ? defer : cpu;
                CHECK_MSG(n_later == want, "token %d: %d deferred of %d CPU pairs, want %d", t,
                          n_later, cpu, want);
                CHECK(n_later == 0 || min_now == 2 || max_later <= min_now);
                want_total += want;
            }
            CHECK(total == want_total);
        }
}

/* layerwise prefill's threshold: where the copy of a layer's CPU experts and the CPU's time for
 * the batch meet */
static void check_stream_threshold(void) {
    /* 350 MB at 25 GB/s (14 ms) against 48000 tokens/s through one layer: 672 tokens */
    CHECK(hm_place_stream_threshold(0.014, 48000.0, 9) == 672);
    CHECK(hm_place_stream_threshold(0.0141, 48000.0, 9) == 677); /* rounded up */
    CHECK(hm_place_stream_threshold(1e-6, 48000.0, 9) == 9);     /* never below the floor */
    CHECK(hm_place_stream_threshold(0.0, 48000.0, 64) == 64);
    CHECK(hm_place_stream_threshold(0.01, 0.0, 9) == INT_MAX); /* no rate: never */
    CHECK(hm_place_stream_threshold(0.01, NAN, 9) == INT_MAX);
    CHECK(hm_place_stream_threshold(-1.0, 1000.0, 9) == INT_MAX);
    CHECK(hm_place_stream_threshold(1e9, 1e9, 9) == INT_MAX);
    /* the split: the CPU's time for a batch against the copy's (the H100 machine's pp512: a
     * 6.3 ms copy, 3.8 ms of CPU experts: 0.376 streams) */
    const double r = 512 / 3.8e-3;
    CHECK(fabs(hm_place_stream_split(6.3e-3, r, 0, 512) - 3.8 / 10.1) < 1e-9);
    /* the GPU's own 1 ms of the layer, before the CPU can start: (3.8 + 1) / 10.1 */
    CHECK(fabs(hm_place_stream_split(6.3e-3, r, 1e-3 / 512, 512) - 4.8 / 10.1) < 1e-9);
    CHECK(fabs(hm_place_stream_split(6.3e-3, r, 2e-3 / 256, 256) - 3.9 / 8.2) < 1e-9);
    CHECK(hm_place_stream_split(6.3e-3, r, 6e-3 / 512, 512) == 1.0); /* 0.97: all */
    CHECK(hm_place_stream_split(6.3e-3, r, NAN, 512) == hm_place_stream_split(6.3e-3, r, 0, 512));
    CHECK(hm_place_stream_split(6.3e-3, r, -1, 512) == hm_place_stream_split(6.3e-3, r, 0, 512));
    CHECK(fabs(hm_place_stream_split(6.3e-3, r, 0, 4096) - 30.4 / 36.7) < 1e-9); /* 0.83 */
    CHECK(hm_place_stream_split(6.3e-3, r, 0, 16384) == 1.0); /* the CPU 19x slower: all */
    CHECK(hm_place_stream_split(6.3e-3, r, 0, 64) == 0.0);    /* too little to pay for itself */
    /* the threshold for a fifth streams no batch below a fifth */
    const int t = hm_place_stream_threshold(6.3e-3 / 4, r, 9);
    CHECK(hm_place_stream_split(6.3e-3, r, 0, t) >= 0.2 &&
          hm_place_stream_split(6.3e-3, r, 0, t - 1) == 0);
    CHECK(hm_place_stream_split(0, r, 0, 512) == 0 &&
          hm_place_stream_split(6.3e-3, 0, 0, 512) == 0);
    CHECK(hm_place_stream_split(6.3e-3, NAN, 0, 512) == 0 &&
          hm_place_stream_split(INFINITY, r, 0, 9) == 0);
    CHECK(hm_place_stream_split(6.3e-3, r, 0, 0) == 0);
    /* the rate learned from a batch: a CPU that took 2.5 ms for 60% of them at 512 tokens ran
     * all of them at 512 / 4.1667 ms; halfway between in time per token from 6.8 ms */
    const double r0 = 512 / 6.8e-3, seen = 512 / (2.5e-3 / 0.6);
    const double r1 = hm_place_rate_update(r0, 512, 2.5e-3, 0.6);
    CHECK(fabs(1 / r1 - 0.5 * (1 / r0 + 1 / seen)) < 1e-12);
    CHECK(fabs(hm_place_rate_update(0, 512, 2.5e-3, 0.6) - seen) < 1e-6 * seen);
    CHECK(hm_place_rate_update(NAN, 512, 2.5e-3, 0.6) > 0);
    /* repeated batches converge on the observed rate, and the split follows */
    double rr = r0;
    for (int i = 0; i < 40; i++) rr = hm_place_rate_update(rr, 512, 2.5e-3, 0.6);
    CHECK(fabs(rr - seen) < 1e-6 * seen);
    CHECK(hm_place_stream_split(6.3e-3, rr, 0, 512) < hm_place_stream_split(6.3e-3, r0, 0, 512));
    /* the plan: forced, split, all (after a split was seen), two thirds before one was */
    const double g = 1e-3 / 512;
    CHECK(hm_place_stream_plan(6.3e-3, r, g, 512, 0.38, false) == 0.38);
    CHECK(hm_place_stream_plan(6.3e-3, r, g, 512, 0, false) ==
          hm_place_stream_split(6.3e-3, r, g, 512));
    CHECK(hm_place_stream_plan(6.3e-3, r, g, 16384, 0, true) == 1.0);
    CHECK(hm_place_stream_plan(6.3e-3, r, g, 16384, 0, false) == 2.0 / 3.0);
    CHECK(hm_place_stream_plan(6.3e-3, r, 0, 64, 0, true) == 1.0); /* below the split's threshold */
    CHECK(hm_place_stream_plan(6.3e-3, r, g, 512, 1.5, true) ==
          hm_place_stream_split(6.3e-3, r, g, 512));
    CHECK(hm_place_stream_plan(0, r, g, 512, 0, true) == 1.0);
    /* what is not an observation leaves the rate alone */
    CHECK(hm_place_rate_update(r0, 512, 0, 0.6) == r0 &&
          hm_place_rate_update(r0, 0, 1e-3, 1) == r0);
    CHECK(hm_place_rate_update(r0, 512, 1e-3, 0) == r0 &&
          hm_place_rate_update(r0, 512, 1e-3, 1.5) == r0);
    CHECK(hm_place_rate_update(r0, 512, INFINITY, 1) == r0 &&
          hm_place_rate_update(r0, 512, NAN, 1) == r0);
}

/* dynamic placement: the layer whose hottest CPU expert beats its coldest GPU one by the most */
static void check_dyn_pick(void) {
    enum { L = 3, E = 4 };
    double cn[L * E] = {5, 1,  9,  0,  /* layer 0: CPU 0 (5), 1 (1); GPU 2 (9), 3 (0): gain 5 */
                        7, 7,  7,  7,  /* layer 1: all on the GPU */
                        2, 30, 10, 3}; /* layer 2: CPU 1 (30), 3 (3); GPU 0 (2), 2 (10): gain 28 */
    uint8_t g[L * E] = {0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0};
    int il = -1, in = -1, out = -1;
    CHECK(hm_dyn_pick(cn, g, L, E, 1.0, &il, &in, &out));
    CHECK(il == 2 && in == 1 && out == 0);
    CHECK(!hm_dyn_pick(cn, g, L, E, 29.0, &il, &in, &out)); /* below min_gain */
    CHECK(hm_dyn_pick(cn, g, 2, E, 1.0, &il, &in, &out) && il == 0 && in == 0 && out == 3);
    /* a hot CPU expert that does not beat the coldest GPU one by a quarter of its count */
    double c2[E] = {100, 0, 90, 0};
    uint8_t g2[E] = {1, 0, 0, 1};
    c2[3] = 85; /* GPU: 0 (100), 3 (85); CPU: 2 (90): gain 5 < 85 / 4 */
    CHECK(!hm_dyn_pick(c2, g2, 1, E, 1.0, &il, &in, &out));
    c2[3] = 40; /* gain 50 >= 10 */
    CHECK(hm_dyn_pick(c2, g2, 1, E, 1.0, &il, &in, &out) && in == 2 && out == 3);
    uint8_t none[E] = {0, 0, 0, 0}; /* every expert on the CPU: nothing to swap with */
    CHECK(!hm_dyn_pick(c2, none, 1, E, 0.0, &il, &in, &out));
}

int main(void) {
    check_defer_split();
    check_dyn_pick();
    check_stream_threshold();
    hm_model *m = NULL;
    CHECK_OK(hm_model_load(HMOE_SOURCE_DIR "/tests/data/qwen3moe/b", &m));
    if (!m) return test_done("place");
    const uint64_t eb = hm_place_expert_bytes(m, 0);
    CHECK(eb == 3ull * 48 * 64 * 4);
    CHECK(hm_place_expert_bytes(m, 1) == 0 && hm_place_expert_bytes(m, 2) == eb);
    hm_place_plan pl;
    hm_place_params p = {.gpu_experts = 3, .strategy = HM_PLACE_UNIFORM};
    char line[256];

    /* --gpu-experts: the same count in every MoE layer, none in the dense one */
    CHECK_OK(hm_place_make(m, &p, &pl));
    CHECK(pl.n_layers == 3 && pl.n_experts == 8 && pl.n_gpu == 6 && pl.gpu_bytes == 6 * eb);
    CHECK(pl.all_bytes == 16 * eb);
    CHECK(pl.gpu[0] && pl.gpu[2] && pl.gpu[5] && layer_count(&pl, 0) == 3); /* 0, 8/3, 16/3 */
    CHECK(layer_count(&pl, 1) == 0 && pl.n_gpu_layer[1] == 0 && pl.n_gpu_layer[2] == 3);
    hm_place_describe(&pl, line, sizeof line);
    CHECK_CONTAINS(line, "3 of 8 routed experts per layer");
    hm_place_free(&pl);
    p.gpu_experts = 0; /* CPU-only and all-GPU: the two ends */
    CHECK_OK(hm_place_make(m, &p, &pl));
    CHECK(pl.n_gpu == 0 && pl.gpu_bytes == 0);
    hm_place_free(&pl);
    p.gpu_experts = 99;
    CHECK_OK(hm_place_make(m, &p, &pl));
    CHECK(pl.n_gpu == 16 && pl.gpu_bytes == pl.all_bytes);
    hm_place_free(&pl);

    /* budgets: 5 experts' bytes (a little less than 6) */
    p.gpu_experts = -1;
    p.gpu_budget = 5 * eb + eb / 2;
    CHECK_OK(hm_place_make(m, &p, &pl)); /* uniform: 2 each, the remainder to the first layer */
    CHECK(pl.n_gpu_layer[0] == 3 && pl.n_gpu_layer[2] == 2 && pl.gpu_bytes <= p.gpu_budget);
    hm_place_describe(&pl, line, sizeof line);
    CHECK_CONTAINS(line, "per layer: 3 0 2");
    hm_place_free(&pl);
    p.strategy = HM_PLACE_FRONT, p.gpu_budget = 10 * eb;
    CHECK_OK(hm_place_make(m, &p, &pl)); /* front: layer 0 whole, then 2 of layer 2 */
    CHECK(pl.n_gpu_layer[0] == 8 && pl.n_gpu_layer[2] == 2 && pl.gpu[2 * 8 + 0] &&
          pl.gpu[2 * 8 + 1]);
    hm_place_free(&pl);
    p.gpu_budget = 0;
    CHECK_OK(hm_place_make(m, &p, &pl));
    CHECK(pl.n_gpu == 0);
    hm_place_free(&pl);

    /* random: uniform's counts, seeded choices */
    p.strategy = HM_PLACE_RANDOM, p.gpu_experts = 4, p.seed = 1;
    hm_place_plan a, b;
    CHECK_OK(hm_place_make(m, &p, &a));
    CHECK_OK(hm_place_make(m, &p, &b));
    CHECK(a.n_gpu_layer[0] == 4 && a.n_gpu_layer[2] == 4 && !memcmp(a.gpu, b.gpu, 24));
    int differ = 0;
    for (uint64_t seed = 2; seed < 6; seed++) {
        hm_place_free(&b);
        p.seed = seed;
        CHECK_OK(hm_place_make(m, &p, &b));
        differ += memcmp(a.gpu, b.gpu, 24) != 0;
        CHECK(b.n_gpu == 8);
    }
    CHECK(differ >= 3);
    CHECK(memcmp(a.gpu, a.gpu + 16, 8) != 0 || memcmp(b.gpu, b.gpu + 16, 8) != 0); /* per layer */
    hm_place_free(&a), hm_place_free(&b);

    /* frequency: per layer with --gpu-experts, ranked over layers under a budget */
    uint64_t counts[24] = {0};
    for (int e = 0; e < 8; e++)
        counts[e] = (uint64_t)(10 + e), counts[16 + e] = (uint64_t)(100 - e);
    counts[16 + 5] = 1000;
    p.strategy = HM_PLACE_FREQUENCY, p.counts = NULL;
    CHECK_STATUS(hm_place_make(m, &p, &pl), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "hmoe profile");
    p.counts = counts, p.gpu_experts = 2;
    CHECK_OK(hm_place_make(m, &p, &pl));
    CHECK(pl.gpu[7] && pl.gpu[6] && layer_count(&pl, 0) == 2);
    CHECK(pl.gpu[16 + 5] && pl.gpu[16 + 0] && layer_count(&pl, 2) == 2);
    hm_place_free(&pl);
    p.gpu_experts = -1, p.gpu_budget = 3 * eb;
    CHECK_OK(hm_place_make(m, &p, &pl)); /* the three busiest of all: layer 2's 5, 0, 1 */
    CHECK(pl.n_gpu == 3 && pl.n_gpu_layer[0] == 0 && pl.gpu[16 + 5] && pl.gpu[16] && pl.gpu[17]);
    hm_place_free(&pl);

    /* rules move whole layers; later rules win */
    p.strategy = HM_PLACE_UNIFORM, p.gpu_experts = 2;
    const char *r1[] = {"blk\\.0\\.=cpu", "blk\\.2\\.ffn_up_exps=cuda"};
    p.rules = r1, p.n_rules = 2;
    CHECK_OK(hm_place_make(m, &p, &pl));
    CHECK(pl.n_gpu_layer[0] == 0 && pl.n_gpu_layer[2] == 8 && pl.n_gpu == 8);
    hm_place_free(&pl);
    const char *r2[] = {"blk\\.[02]\\.ffn_.*_exps=cuda", "blk\\.2\\.=cpu"};
    p.rules = r2;
    CHECK_OK(hm_place_make(m, &p, &pl));
    CHECK(pl.n_gpu_layer[0] == 8 && pl.n_gpu_layer[2] == 0);
    hm_place_free(&pl);
    static const struct {
        const char *rule, *msg;
    } bad[] = {{"blk[=cuda", "offset"},
               {"blk\\.1\\.=cuda", "matches no routed-expert tensor"},
               {"blk.0", "expected REGEX=cuda"},
               {"=cuda", "expected REGEX=cuda"},
               {"blk\\.0\\.=tpu", "unknown device 'tpu'"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *r[] = {bad[i].rule};
        p.rules = r, p.n_rules = 1;
        CHECK_STATUS(hm_place_make(m, &p, &pl), HM_ERR_INVALID_ARG);
        CHECK_CONTAINS(hm_last_error(), bad[i].msg);
        CHECK(pl.gpu == NULL);
    }
    p.rules = NULL, p.n_rules = 0;
    p.strategy = (hm_place_strategy)9;
    CHECK_STATUS(hm_place_make(m, &p, &pl), HM_ERR_INVALID_ARG);

    /* names */
    CHECK(hm_place_strategy_from_name("front-loading") == HM_PLACE_FRONT);
    CHECK(hm_place_strategy_from_name("frequency") == HM_PLACE_FREQUENCY);
    CHECK(hm_place_strategy_from_name("hot") == -1);
    CHECK(strcmp(hm_place_strategy_name(HM_PLACE_RANDOM), "random") == 0);

    /* the count file: round trip, shape and content checked */
    char dir[] = "/tmp/hmoe-place-XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/counts.txt", dir);
    CHECK_OK(hm_place_counts_write(path, 3, 8, counts));
    uint64_t *back = NULL;
    CHECK_OK(hm_place_counts_read(path, 3, 8, &back));
    CHECK(back && !memcmp(back, counts, sizeof counts));
    free(back);
    CHECK_STATUS(hm_place_counts_read(path, 48, 128, &back), HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "3 layers x 8 experts, the model has 48 x 128");
    write_text(path, "hmoe-expert-counts 1 3 8\n1 2 3\n");
    CHECK_STATUS(hm_place_counts_read(path, 3, 8, &back), HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "count 4 of 24");
    write_text(path, "not counts\n");
    CHECK_STATUS(hm_place_counts_read(path, 3, 8, &back), HM_ERR_FORMAT);
    remove(path);
    CHECK_STATUS(hm_place_counts_read(path, 3, 8, &back), HM_ERR_IO);
    rmdir(dir);
    hm_model_free(m);
    return test_done("place");
}
