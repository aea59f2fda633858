/* bench_moe.c - `hmoe bench moe`: the CPU expert engine on a preset's real expert shapes, with
 * distinct random weights for every layer (far beyond any cache) and random routing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model/model.h"
#include "core/alloc.h"
#include "core/pool.h"
#include "core/timer.h"
#include "cpu/membw.h"
#include "cpu/ops.h"
#include "hmoe_moe.h"
#include "model/arch.h"
#include "quant/synth.h"
#include "quant/types.h"

typedef struct {
    uint8_t *base;
    uint32_t type;
    int64_t n_experts; /* over all layers: gate, up, down of one expert are contiguous */
    size_t mat_gu, mat_d;
    uint64_t elems; /* values per matrix (inter x hidden) */
} fill_job;

static void fill_task(int ith, int nth, void *arg) {
    fill_job *j = arg;
    for (int64_t e = ith; e < j->n_experts; e += nth) {
        uint8_t *p = j->base + (size_t)e * (2 * j->mat_gu + j->mat_d);
        const uint64_t seed = 5 + 3 * (uint64_t)e;
        hm_synth_fill(j->type, p, j->elems, 0.0f, 0.02f, seed);
        hm_synth_fill(j->type, p + j->mat_gu, j->elems, 0.0f, 0.02f, seed + 1);
        hm_synth_fill(j->type, p + 2 * j->mat_gu, j->elems, 0.0f, 0.02f, seed + 2);
    }
}

/* A read pass over the experts a decode pass uses (gate, up and down of one expert are one
 * range): chunks of RD_CHUNK claimed through hm_work_next, each thread its own share first, read
 * with the membw loads. The "% of read" column pairs every pass of the engine with one. */
#define RD_CHUNK   ((size_t)256 << 10)
#define MOE_PAIRED 5
typedef struct {
    const hm_cpu_ops *ops;
    uint8_t *const *exp; /* [n_exp] the used experts' first bytes */
    int64_t n_exp;
    size_t exp_bytes;
    int64_t per_exp; /* chunks per expert */
    hm_work_slot *work;
    cli_read_sink *sinks;
} rd_job;

static void rd_task(int ith, int nth, void *arg) {
    rd_job *j = arg;
    for (int64_t c; (c = hm_work_next(j->work, nth, ith)) >= 0;) {
        const size_t o = (size_t)(c % j->per_exp) * RD_CHUNK;
        const size_t n = j->exp_bytes - o < RD_CHUNK ? j->exp_bytes - o : RD_CHUNK;
        size_t got;
        j->sinks[ith].sum += hm_membw_read_range(j->ops, j->exp[c / j->per_exp] + o, n, &got);
        j->sinks[ith].bytes += got;
    }
}

/* one read pass (its pool job's counters added to *acc); returns its seconds, *rbytes the bytes */
static double read_pass(hm_pool *pool, rd_job *rj, size_t *rbytes, hm_pool_stats *acc) {
    const int nth = hm_pool_size(pool);
    memset(rj->sinks, 0, sizeof(cli_read_sink) * (size_t)nth);
    hm_work_init(rj->work, nth, rj->n_exp * rj->per_exp);
    hm_pool_stats s0, s1;
    hm_pool_stats_get(pool, &s0);
    const uint64_t t0 = hm_time_ns();
    hm_pool_run(pool, rd_task, rj);
    const double sec = (double)(hm_time_ns() - t0) * 1e-9;
    hm_pool_stats_get(pool, &s1);
    acc->jobs += s1.jobs - s0.jobs, acc->run_ns += s1.run_ns - s0.run_ns;
    acc->own_ns += s1.own_ns - s0.own_ns;
    *rbytes = 0;
    for (int t = 0; t < nth; t++) *rbytes += rj->sinks[t].bytes;
    return sec;
}

/* one cache sweep (its pool job's counters added to *acc, as read_pass's); nonzero on failure */
static int sweep_pass(hm_pool *pool, hm_membw_sweep *sw, hm_pool_stats *acc) {
    hm_pool_stats s0, s1;
    hm_pool_stats_get(pool, &s0);
    const hm_status st = hm_membw_sweep_run(sw);
    hm_pool_stats_get(pool, &s1);
    acc->jobs += s1.jobs - s0.jobs, acc->run_ns += s1.run_ns - s0.run_ns;
    acc->own_ns += s1.own_ns - s0.own_ns;
    if (st != HM_OK) fprintf(stderr, "hmoe bench moe: %s\n", hm_last_error());
    return st != HM_OK;
}

/* Random routing of n tokens to k distinct experts each: uniform (skew 0) or with the experts'
 * popularity following a Zipf law of exponent skew over a random order of the experts (real
 * routers are uneven, and synth models' routers very much so); count[e] gets tokens per expert. */
static void route(uint64_t *rs, double *wv, int *count, int E, int K, int n, double skew,
                  int32_t *ids, float *w) {
    for (int e = 0; e < E; e++) count[e] = 0;
    double total = 0;
    if (skew > 0) {
        for (int e = 0; e < E; e++) wv[e] = 1.0 / pow((double)e + 1.0, skew);
        for (int e = E - 1; e > 0; e--) { /* shuffle which expert gets which popularity */
            int j = (int)(hm_rng_next(rs) % (uint64_t)(e + 1));
            double t = wv[e];
            wv[e] = wv[j], wv[j] = t;
        }
        for (int e = 0; e < E; e++) total += wv[e];
    }
    for (int t = 0; t < n; t++) {
        int32_t *it = ids + (size_t)t * (size_t)K;
        double left = total; /* the popularity mass of the experts not picked yet */
        for (int j = 0; j < K; j++) {
            int e = -1;
            if (skew > 0) {
                /* weighted draw without replacement: walk the experts not picked yet (a
                 * rejection loop would almost never hit the unpopular ones at a high skew) */
                const double u = (double)(hm_rng_next(rs) >> 11) * 0x1p-53 * left;
                double acc = 0;
                for (int c = 0; c < E; c++) {
                    bool picked = false;
                    for (int q = 0; q < j; q++) picked |= it[q] == c;
                    if (picked) continue;
                    e = c; /* the last one not picked, should rounding leave u past the end */
                    if ((acc += wv[c]) > u) break;
                }
                left -= wv[e];
            } else {
                bool dup;
                do {
                    e = (int)(hm_rng_next(rs) % (uint64_t)E);
                    dup = false;
                    for (int q = 0; q < j; q++) dup |= it[q] == e;
                } while (dup);
            }
            it[j] = e;
            w[t * K + j] = 1.0f / (float)K;
            count[e]++;
        }
    }
}

int bench_moe(int argc, char **argv) {
    const char *preset = "qwen3-30b-a3b", *type_name = "q4_k";
    long tokens[16] = {1, 4, 32, 512}, layers = 0, threads = 0;
    bool async = false, repack = false;
    double skew = 0; /* Zipf exponent of the experts' popularity (0: uniform routing) */
    long nodes = 1;  /* > 1: one group of threads per node (emulated on one node), a slice each */
    bool slice_copy = false, sweep_on = true, own_scratch = false;
    int n_tokens = 4;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--preset") || !strcmp(a, "--type")) {
            if (!v)
                return cli_bad_value("bench moe", a, v,
                                     a[2] == 'p' ? "a preset (qwen3-30b-a3b, deepseek-v3, ...)"
                                                 : "a weight type (q4_k, bf16, ...)");
            *(a[2] == 'p' ? &preset : &type_name) = argv[++i];
        } else if (!strcmp(a, "--tokens")) {
            if ((n_tokens = cli_parse_list(v, tokens, 16)) < 1)
                return cli_bad_value("bench moe", a, v,
                                     "1 to 16 token counts 1..65536, comma-separated (1,4,512)");
            i++;
        } else if (!strcmp(a, "--layers")) {
            if (!cli_parse_int(v, 1, 512, &layers))
                return cli_bad_value("bench moe", a, v, "a layer count 1..512");
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (!cli_parse_int(v, 1, 4096, &threads))
                return cli_bad_value("bench moe", a, v, "a thread count 1..4096");
            i++;
        } else if (!strcmp(a, "--nodes")) {
            if (!cli_parse_int(v, 1, 64, &nodes))
                return cli_bad_value("bench moe", a, v, "a number of slices 1..64");
            i++;
        } else if (!strcmp(a, "--skew")) {
            if (!cli_parse_double(v, 0, 8, &skew))
                return cli_bad_value("bench moe", a, v, "a Zipf exponent 0..8");
            i++;
        } else if (!strcmp(a, "--async"))
            async = true;
        else if (!strcmp(a, "--repack"))
            repack = true;
        else if (!strcmp(a, "--slice-copy"))
            slice_copy = true;
        else if (!strcmp(a, "--no-sweep"))
            sweep_on = false;
        else if (!strcmp(a, "--own-scratch"))
            own_scratch = true;
        else
            return cli_usage_error("bench moe: unknown option '%s' (--preset P --type T --tokens "
                                   "1,4,32,512 --layers N --threads N --async --nodes N "
                                   "--slice-copy --repack --skew S --no-sweep --own-scratch)",
                                   a);
    }
    const hm_preset *pr = hm_preset_find(preset);
    if (!pr || !pr->hp.n_experts) {
        char names[512];
        size_t n = 0;
        names[0] = 0;
        for (size_t i = 0; i < hm_preset_count() && n < sizeof names; i++)
            if (hm_preset_at(i)->hp.n_experts)
                n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", n ? ", " : "",
                                      hm_preset_at(i)->name);
        return cli_usage_error("bench moe: no MoE preset '%s' (presets: %s)", preset, names);
    }
    const int type = hm_type_from_name(type_name);
    const hm_cpu_ops *ops;
    if (hm_cpu_ops_get(&ops) != HM_OK) return cli_usage_error("bench moe: %s", hm_last_error());
    if (type < 0 || !hm_synth_supported((uint32_t)type) || !hm_vec_dot_for(ops, (uint32_t)type)) {
        char names[512];
        cli_bench_types(names, sizeof names);
        return cli_usage_error("bench moe: no kernel for type '%s' (types: %s)", type_name, names);
    }
    const hm_hparams *hp = &pr->hp;
    const int E = (int)hp->n_experts, K = (int)hp->n_experts_used;
    const int64_t H = hp->hidden, I = hp->moe_inter;
    if (!layers) {
        layers = 0;
        for (uint32_t l = 0; l < hp->n_layers; l++) layers += hm_hparams_layer_is_moe(hp, l);
    }
    uint64_t rb_g, rb_d;
    if (!hm_type_row_bytes((uint32_t)type, (uint64_t)H, &rb_g) ||
        !hm_type_row_bytes((uint32_t)type, (uint64_t)I, &rb_d))
        return cli_usage_error("bench moe: %s cannot hold rows of %lld / %lld values", type_name,
                               (long long)H, (long long)I);
    const size_t mat_gu = rb_g * (size_t)I, mat_d = rb_d * (size_t)H;
    const size_t per_layer = (size_t)E * (2 * mat_gu + mat_d);
    const size_t total = per_layer * (size_t)layers;
    {
        /* the weights, and with --repack their int8 copy (its size from the shapes and types) */
        uint64_t layer_need = per_layer, usable;
        if (repack) {
            hm_moe_expert *px = calloc((size_t)E, sizeof *px);
            if (!px) return cli_usage_error("bench moe: out of memory");
            for (int e = 0; e < E; e++)
                px[e].gate.type = px[e].up.type = px[e].down.type = (uint32_t)type;
            hm_moe_params mp = hm_moe_default_params();
            mp.n_experts = E, mp.hidden = H, mp.inter = I, mp.experts = px, mp.repack = true;
            layer_need += hm_moe_repack_bytes(&mp);
            free(px);
        }
        char what[160];
        snprintf(what, sizeof what, "%ld layers of %s experts%s", layers, type_name,
                 repack ? " with their repacked copy" : "");
        if (cli_check_memory("bench moe", what, layer_need * (uint64_t)layers, &usable)) {
            if (usable / layer_need)
                fprintf(stderr, "hmoe: bench moe: --layers %llu would fit\n",
                        (unsigned long long)(usable / layer_need));
            else
                fprintf(stderr, "hmoe: bench moe: not even one layer fits\n");
            return 1;
        }
    }

    hm_pool_params pp = hm_pool_default_params();
    pp.n_threads = (int)threads;
    /* sync (default): the caller is participant 0, pinned, as in CPU-only inference; async: all
     * participants are workers and submit returns at once (the GPU-hybrid case: give the caller
     * a core of its own, i.e. --threads one less than the cores, or it competes with a worker) */
    pp.async = async;
    pp.pin_caller = !async;
    hm_pool *pool;
    if (hm_pool_create(&pp, &pool) != HM_OK) {
        fprintf(stderr, "hmoe bench moe: %s\n", hm_last_error());
        return 1;
    }
    if (nodes > hm_pool_size(pool)) { /* before the weights are filled, not after */
        fprintf(stderr,
                "hmoe bench moe: --nodes %ld needs at least as many threads (the pool has %d)\n",
                nodes, hm_pool_size(pool));
        hm_pool_free(pool);
        return 1;
    }
    printf("bench moe: preset %s: %d experts, top-%d, hidden %lld, expert inter %lld, %ld MoE "
           "layers, %s experts (%.2f GB, %.1f MB per layer), kernel variant %s, %d threads\n",
           preset, E, K, (long long)H, (long long)I, layers, hm_type_name((uint32_t)type),
           (double)total * 1e-9, (double)per_layer * 1e-6, ops->name, hm_pool_size(pool));
    if (skew > 0)
        printf("routing: expert popularity Zipf-distributed with exponent %.2f\n", skew);
    else
        printf("routing: uniform at random\n");
    printf("pool: %s\n", async
                             ? "async (submit returns at once; the caller waits on its own thread)"
                             : "sync (the caller computes as participant 0)");
    printf("batch scratch: %s\n", own_scratch ? "one per layer (--own-scratch)"
                                              : "one shared by the layers, as a model's are");
    /* measured before the weights take their memory, as bench kernels does: after them (45 GB
     * resident) the device read ~95 GB/s here against 146-172 in bench kernels and bench membw
     * of the same session */
    hm_membw_params bp = hm_membw_default_params();
    bp.pool = NULL; /* the membw pool is sync; measure with its own threads */
    bp.passes = 9;
    hm_membw_result bw;
    if (hm_membw_read(&bp, &bw) != HM_OK) {
        fprintf(stderr, "hmoe bench moe: %s\n", hm_last_error());
        hm_pool_free(pool);
        return 1;
    }
    printf("roofline: same-run streaming read %.1f GB/s (median of 9 passes; best %.1f)\n",
           bw.median_gbs, bw.best_gbs);

    hm_large wbuf;
    if (hm_large_alloc(total, true, "expert weights", &wbuf) != HM_OK) {
        fprintf(stderr, "hmoe bench moe: %s\n", hm_last_error());
        hm_pool_free(pool);
        return 1;
    }
    /* random valid blocks, first touched by the pool threads that will read them */
    fill_job fj = {wbuf.ptr, (uint32_t)type, (int64_t)E * layers, mat_gu, mat_d, (uint64_t)(I * H)};
    hm_pool_run(pool, fill_task, &fj);

    if (nodes > 1)
        printf("numa: %ld groups of the pool's threads (by node where the threads span %ld "
               "nodes, else in proportion to the slices' widths), each a slice of every expert's "
               "intermediate "
               "dimension%s\n",
               nodes, nodes, slice_copy ? ", its weights copied by its own threads" : "");
    long max_tok = 1;
    for (int i = 0; i < n_tokens; i++) max_tok = tokens[i] > max_tok ? tokens[i] : max_tok;
    hm_moe **moe = calloc((size_t)layers, sizeof *moe);
    hm_moe_expert *ex = calloc((size_t)E, sizeof *ex);
    int rc = 0;
    double create_s = 0;
    /* a model's layers share one batch scratch (model/ctx.c): the per-thread buffers and the
     * activations' scratch stay warm from layer to layer, where a scratch per layer
     * (--own-scratch) is as cold as the layer's weights. Made here rather than left to the
     * pool's default, which engines split into NUMA slices do not take. */
    hm_moe_scratch *shared = NULL;
    if (!own_scratch && hm_moe_scratch_create(&shared) != HM_OK) {
        fprintf(stderr, "hmoe bench moe: %s\n", hm_last_error());
        rc = 1;
    }
    for (long l = 0; l < layers && !rc; l++) {
        uint8_t *lb = (uint8_t *)wbuf.ptr + (size_t)l * per_layer;
        for (int e = 0; e < E; e++) {
            uint8_t *eb = lb + (size_t)e * (2 * mat_gu + mat_d);
            ex[e].gate = (hm_moe_matrix){(uint32_t)type, eb, 0};
            ex[e].up = (hm_moe_matrix){(uint32_t)type, eb + mat_gu, 0};
            ex[e].down = (hm_moe_matrix){(uint32_t)type, eb + 2 * mat_gu, 0};
        }
        hm_moe_params mp = hm_moe_default_params();
        mp.n_experts = E, mp.hidden = H, mp.inter = I, mp.experts = ex, mp.pool = pool;
        mp.n_slices = nodes > 1 ? (int)nodes : 0, mp.slice_copy = slice_copy;
        mp.repack = repack;
        hm_moe_scratch *scratch = shared;
        if (own_scratch && hm_moe_scratch_create(&scratch) != HM_OK) {
            fprintf(stderr, "hmoe bench moe: %s\n", hm_last_error());
            rc = 1;
            break;
        }
        mp.scratch = scratch;
        mp.max_tokens = (int)max_tok; /* the batch the engine is made for, as a context does */
        if (l == 0 && repack)
            printf("repack: every expert also stored as int8 AMX tile units, %.2f GB more (%s)\n",
                   (double)hm_moe_repack_bytes(&mp) * (double)layers * 1e-9,
                   hm_moe_repack_bytes(&mp) ? "prefill reads those" : "nothing: no AMX here");
        const uint64_t t0 = hm_time_ns();
        if (hm_moe_create(&mp, &moe[l]) != HM_OK) {
            fprintf(stderr, "hmoe bench moe: %s\n", hm_last_error());
            rc = 1;
        }
        create_s += (double)(hm_time_ns() - t0) * 1e-9;
        if (own_scratch) hm_moe_scratch_free(scratch); /* the engine holds its reference */
    }
    hm_moe_scratch_free(shared); /* the engines hold theirs */
    if (repack && !rc) printf("repack: %.2f s for %ld layers\n", create_s, layers);
    cli_print_huge_pages("");
    float *x = hm_malloc_aligned(sizeof(float) * (size_t)(max_tok * H), 64, "moe input");
    float *out = hm_malloc_aligned(sizeof(float) * (size_t)(max_tok * H), 64,
                                   "moe output"); /* as a model's */
    /* every layer's routing of a pass, drawn before the pass is timed */
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(max_tok * K) * (size_t)layers);
    float *w = malloc(sizeof(float) * (size_t)(max_tok * K) * (size_t)layers);
    double *wv = malloc(sizeof(double) * (size_t)E);
    int *count = malloc(sizeof(int) * (size_t)E);
    if (!x || !out || !ids || !w || !wv || !count) {
        fprintf(stderr, "hmoe bench moe: out of memory\n");
        rc = 1;
    }
    uint64_t s = 3;
    for (long i = 0; x && i < max_tok * H; i++)
        x[i] = (float)((int64_t)(hm_rng_next(&s) % 2001) - 1000) / 1000.0f;
    /* empty round trip: a submit whose experts are all elsewhere (masked) */
    uint8_t *mask = rc ? NULL : malloc((size_t)E);
    if (mask) {
        memset(mask, 1, (size_t)E);
        hm_moe_set_mask(moe[0], mask);
        for (int j = 0; j < K; j++) ids[j] = j, w[j] = 1.0f / (float)K;
        double best = 1e9;
        for (int it = 0; it < 1000; it++) {
            uint64_t t0 = hm_time_ns();
            hm_moe_submit(moe[0], x, HM_MOE_F32, ids, w, 1, K, out, HM_MOE_F32, false);
            hm_moe_wait(moe[0]);
            double us = (double)(hm_time_ns() - t0) * 1e-3;
            best = us < best ? us : best;
        }
        hm_moe_set_mask(moe[0], NULL);
        free(mask);
        printf("empty submit -> wait (all experts masked): best %.2f us\n", best);
    }
    const int nth = hm_pool_size(pool);
    uint8_t **used_exp = malloc(sizeof(uint8_t *) * (size_t)(E * layers));
    hm_work_slot *rd_work = hm_calloc_aligned((size_t)nth, sizeof(hm_work_slot), 64, "claims");
    cli_read_sink *rd_sinks =
        hm_calloc_aligned((size_t)nth, sizeof(cli_read_sink), 64, "read sinks");
    if (!used_exp || !rd_work || !rd_sinks) {
        fprintf(stderr, "hmoe bench moe: out of memory\n");
        rc = 1;
    }
    hm_membw_sweep *sweep = NULL;
    if (!rc && sweep_on && hm_membw_sweep_create(pool, ops, 0, &sweep) != HM_OK) {
        fprintf(stderr, "hmoe bench moe: %s (--no-sweep runs without)\n", hm_last_error());
        rc = 1;
    }
    rd_job rj = {.ops = ops,
                 .exp = used_exp,
                 .exp_bytes = 2 * mat_gu + mat_d,
                 .per_exp = (int64_t)((2 * mat_gu + mat_d + RD_CHUNK - 1) / RD_CHUNK),
                 .work = rd_work,
                 .sinks = rd_sinks};
    printf("%% of read (up to 4 tokens): each of %d passes paired with a read of the experts it "
           "uses by the same threads (the membw loads, right before or after it, in turn); the "
           "median of the pairs' ratios. It follows the machine's bandwidth from moment to "
           "moment, which the %% of bw (the membw passes before the weights) does not.\n",
           MOE_PAIRED);
    if (sweep)
        printf("cache sweep: before each timed pass up to 4 tokens (the engine's and its read), a "
               "read of %.0f MiB of other memory, so neither finds the other's experts in the "
               "caches (--no-sweep: none)\n",
               (double)hm_membw_sweep_bytes(sweep) / (1 << 20));
    printf("%7s %12s %12s %12s %10s %9s %10s %10s %10s\n", "tokens", "us/layer", "ms/layers",
           "tokens/s", "GB/s", "% of bw", "TOPS", "read GB/s", "% of read");
    for (int ti = 0; ti < n_tokens && !rc; ti++) {
        const int n = (int)tokens[ti];
        double best = 1e30, eng_sum = 0;
        size_t bytes = 0;
        double used_sum = 0, busiest_sum = 0;
        for (long l = 0; l < layers; l++) {
            hm_moe_profile(moe[l], NULL, true);
            hm_moe_kernel_stats_get(moe[l], NULL, true);
        }
        hm_pool_stats_reset(pool);
        const bool paired = n <= 4;
        const int passes = paired ? MOE_PAIRED : 3;
        double ratio[MOE_PAIRED], rsec[MOE_PAIRED];
        size_t rbytes = 0;
        hm_pool_stats rd_stats = {0}; /* the read and sweep passes' jobs, not the engine's */
        for (int pass = 0; pass < passes; pass++) {
            bytes = 0;
            rj.n_exp = 0;
            for (long l = 0; l < layers; l++) {
                uint64_t rs = (uint64_t)(l * 7919 + pass * 104729 + n);
                const size_t o = (size_t)l * (size_t)(max_tok * K);
                route(&rs, wv, count, E, K, n, skew, ids + o, w + o);
                int used = 0, busiest = 0;
                for (int e = 0; e < E; e++) {
                    bytes += count[e] ? 2 * mat_gu + mat_d : 0;
                    if (count[e])
                        used_exp[rj.n_exp++] = (uint8_t *)wbuf.ptr + (size_t)l * per_layer +
                                               (size_t)e * (2 * mat_gu + mat_d);
                    used += count[e] > 0;
                    busiest = count[e] > busiest ? count[e] : busiest;
                }
                used_sum += used, busiest_sum += busiest;
            }
            /* the read first in odd passes: neither side always follows the other */
            if (paired && pass % 2) {
                if (sweep && sweep_pass(pool, sweep, &rd_stats)) rc = 1;
                rsec[pass] = read_pass(pool, &rj, &rbytes, &rd_stats);
            }
            if (paired && sweep && sweep_pass(pool, sweep, &rd_stats)) rc = 1;
            uint64_t t0 = hm_time_ns();
            for (long l = 0; l < layers; l++) {
                const size_t o = (size_t)l * (size_t)(max_tok * K);
                if (hm_moe_submit(moe[l], x, HM_MOE_F32, ids + o, w + o, n, K, out, HM_MOE_F32,
                                  false)) {
                    fprintf(stderr, "hmoe bench moe: %s\n", hm_last_error());
                    rc = 1;
                    break;
                }
                hm_moe_wait(moe[l]);
            }
            double sec = (double)(hm_time_ns() - t0) * 1e-9;
            best = sec < best ? sec : best;
            eng_sum += sec;
            if (paired) {
                if (pass % 2 == 0) {
                    if (sweep && sweep_pass(pool, sweep, &rd_stats)) rc = 1;
                    rsec[pass] = read_pass(pool, &rj, &rbytes, &rd_stats);
                }
                /* (engine bytes / engine time) / (read bytes / read time) */
                ratio[pass] = rbytes ? (double)bytes / sec / ((double)rbytes / rsec[pass]) : 0;
            }
        }
        const double gbs = (double)bytes / best * 1e-9;
        const double ops2 = 2.0 * 3.0 * (double)H * (double)I * (double)n * K * (double)layers;
        printf("%7d %12.1f %12.2f %12.1f %10.1f %8.1f%% %10.2f", n, best / (double)layers * 1e6,
               best * 1e3, (double)n / best, gbs, 100.0 * gbs / bw.median_gbs, ops2 / best * 1e-12);
        cli_print_read_columns(ratio, rsec, paired ? passes : 0, rbytes);
        if (skew > 0 && n > 4)
            printf("        routing (skew %.2f): %.1f of %d experts used, busiest %.1f tokens\n",
                   skew, used_sum / ((double)passes * (double)layers), E,
                   busiest_sum / ((double)passes * (double)layers));
        double ph[HM_MOE_PROF_N] = {0}, one[HM_MOE_PROF_N];
        for (long l = 0; l < layers; l++) {
            hm_moe_profile(moe[l], one, true);
            for (int i = 0; i < HM_MOE_PROF_N; i++) ph[i] += one[i] / (double)passes;
        }
        if (ph[HM_MOE_PROF_GATE_UP] > 0) {
            printf("        phases (ms per pass of %ld layers):", layers);
            for (int i = 0; i < HM_MOE_PROF_N; i++)
                printf("%s %s %.1f", i ? "," : "", hm_moe_profile_name(i), ph[i] * 1e3);
            /* a sync pool's job ends when its slowest participant does: the caller's wait
             * after its own share (participant 0's phases above end with its last claim) */
            hm_pool_stats ps;
            hm_pool_stats_get(pool, &ps);
            ps.jobs -= rd_stats.jobs, ps.run_ns -= rd_stats.run_ns, ps.own_ns -= rd_stats.own_ns;
            if (!async && ps.jobs)
                printf(", waiting for the last thread %.1f",
                       (double)(ps.run_ns - ps.own_ns) / (1e6 * passes));
            printf("\n");
        }
        hm_moe_kernel_stats ks = {0}, k1;
        for (long l = 0; l < layers; l++) {
            hm_moe_kernel_stats_get(moe[l], &k1, true);
            ks.claims += k1.claims, ks.tokens += k1.tokens, ks.pack_x_s += k1.pack_x_s;
            ks.glu_s += k1.glu_s, ks.glu_ops += k1.glu_ops, ks.pack_h_s += k1.pack_h_s;
            ks.down_s += k1.down_s, ks.down_ops += k1.down_ops, ks.h_wait_s += k1.h_wait_s;
            ks.steals += k1.steals;
            ks.dec_jobs += k1.dec_jobs, ks.dec_in_s += k1.dec_in_s, ks.dec_gu_s += k1.dec_gu_s;
            ks.dec_down_s += k1.dec_down_s, ks.dec_h_wait_s += k1.dec_h_wait_s;
            ks.dec_barrier_s += k1.dec_barrier_s, ks.dec_sum_s += k1.dec_sum_s;
            ks.dec_prep_s += k1.dec_prep_s, ks.dec_start_s += k1.dec_start_s;
        }
        if (ks.dec_jobs) {
            /* per participant and layer; the rest of the passes' wall time (times the threads)
             * is outside the jobs: the caller's submit, waking the threads, the pool's join */
            const double per = 1e6 / (double)ks.dec_jobs;
            printf("        decode, us per thread and layer: in the job %.1f (gate/up claims %.1f, "
                   "down claims %.1f, down waiting for h %.1f, barrier %.1f, sum and output "
                   "%.1f)",
                   ks.dec_in_s * per, ks.dec_gu_s * per, ks.dec_down_s * per, ks.dec_h_wait_s * per,
                   ks.dec_barrier_s * per, ks.dec_sum_s * per);
            if (!async && nodes == 1)
                printf(", outside it %.1f (the submit's routing %.1f, launch to start %.1f)",
                       (eng_sum * nth - ks.dec_in_s) * per, ks.dec_prep_s * nth * per,
                       ks.dec_start_s * per);
            printf("\n");
        }
        if (ks.claims && ks.glu_s > 0)
            printf("        gate/up claims (%.0f tokens): pack x %.1f us, gate+up+silu %.1f us "
                   "(%.2f TOPS per core), pack h %.1f us per claim\n",
                   (double)ks.tokens / (double)ks.claims, ks.pack_x_s * 1e6 / (double)ks.claims,
                   ks.glu_s * 1e6 / (double)ks.claims, ks.glu_ops / ks.glu_s * 1e-12,
                   ks.pack_h_s * 1e6 / (double)ks.claims);
        if (ks.down_s > 0)
            printf("        down kernel: %.2f TOPS per core while it runs; down waited %.1f ms "
                   "per pass for experts' last gate/up claims (thread-ms, all threads); %.1f "
                   "down claims split per layer\n",
                   ks.down_ops / ks.down_s * 1e-12, ks.h_wait_s * 1e3 / (double)passes,
                   (double)ks.steals / ((double)passes * (double)layers));
    }
    for (long l = 0; l < layers; l++) hm_moe_free(moe[l]);
    free(moe), free(ex), hm_free(x), hm_free(out), free(ids), free(w), free(wv), free(count);
    hm_membw_sweep_free(sweep);
    free(used_exp), hm_free(rd_work), hm_free(rd_sinks);
    hm_large_free(&wbuf);
    hm_pool_free(pool);
    return rc;
}
