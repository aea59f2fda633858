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

/* ---------------------------------------------------------------- bench moe, in pieces */

/* the options of bench moe */
typedef struct {
    const char *preset, *type_name;
    long tokens[16], layers, threads;
    int n_tokens;
    bool async, repack;
    double skew; /* Zipf exponent of the experts' popularity (0: uniform routing) */
    long nodes;  /* > 1: one group of threads per node (emulated on one node), a slice each */
    bool slice_copy, sweep_on, own_scratch;
} moe_opts;

/* everything a run of bench moe sets up, and frees at the end (moe_free) */
typedef struct {
    moe_opts o;
    int type;
    const hm_cpu_ops *ops;
    int E, K;
    int64_t H, I;
    size_t mat_gu, mat_d, per_layer, total;
    hm_pool *pool;
    hm_membw_result bw;
    hm_large wbuf;
    long max_tok;
    hm_moe **moe;
    hm_moe_expert *ex;
    float *x, *out;
    int32_t *ids; /* every layer's routing of a pass, drawn before the pass is timed */
    float *w;
    double *wv;
    int *count;
    uint8_t **used_exp;
    hm_work_slot *rd_work;
    cli_read_sink *rd_sinks;
    hm_membw_sweep *sweep;
    rd_job rj;
} moe_bench;

/* one token count's measurement: its passes, and what the row and the lines under it print */
typedef struct {
    int n, passes;
    bool paired;
    double best, eng_sum, used_sum, busiest_sum;
    size_t bytes, rbytes;
    double ratio[MOE_PAIRED], rsec[MOE_PAIRED];
    hm_pool_stats rd_stats; /* the read and sweep passes' jobs, not the engine's */
} moe_row;

/* the options into *o; -1 to go on, else the exit code */
static int moe_parse(int argc, char **argv, moe_opts *o) {
    *o = (moe_opts){.preset = "qwen3-30b-a3b",
                    .type_name = "q4_k",
                    .tokens = {1, 4, 32, 512},
                    .n_tokens = 4,
                    .nodes = 1,
                    .sweep_on = true};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--preset") || !strcmp(a, "--type")) {
            if (!v)
                return cli_bad_value("bench moe", a, v,
                                     a[2] == 'p' ? "a preset (qwen3-30b-a3b, deepseek-v3, ...)"
                                                 : "a weight type (q4_k, bf16, ...)");
            *(a[2] == 'p' ? &o->preset : &o->type_name) = argv[++i];
        } else if (!strcmp(a, "--tokens")) {
            if ((o->n_tokens = cli_parse_list(v, o->tokens, 16)) < 1)
                return cli_bad_value("bench moe", a, v,
                                     "1 to 16 token counts 1..65536, comma-separated (1,4,512)");
            i++;
        } else if (!strcmp(a, "--layers")) {
            if (!cli_parse_int(v, 1, 512, &o->layers))
                return cli_bad_value("bench moe", a, v, "a layer count 1..512");
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (!cli_parse_int(v, 1, 4096, &o->threads))
                return cli_bad_value("bench moe", a, v, "a thread count 1..4096");
            i++;
        } else if (!strcmp(a, "--nodes")) {
            if (!cli_parse_int(v, 1, 64, &o->nodes))
                return cli_bad_value("bench moe", a, v, "a number of slices 1..64");
            i++;
        } else if (!strcmp(a, "--skew")) {
            if (!cli_parse_double(v, 0, 8, &o->skew))
                return cli_bad_value("bench moe", a, v, "a Zipf exponent 0..8");
            i++;
        } else if (!strcmp(a, "--async"))
            o->async = true;
        else if (!strcmp(a, "--repack"))
            o->repack = true;
        else if (!strcmp(a, "--slice-copy"))
            o->slice_copy = true;
        else if (!strcmp(a, "--no-sweep"))
            o->sweep_on = false;
        else if (!strcmp(a, "--own-scratch"))
            o->own_scratch = true;
        else
            return cli_usage_error("bench moe: unknown option '%s' (--preset P --type T --tokens "
                                   "1,4,32,512 --layers N --threads N --async --nodes N "
                                   "--slice-copy --repack --skew S --no-sweep --own-scratch)",
                                   a);
    }
    return -1;
}

/* whether the weights (and with --repack their int8 copy) fit in memory; -1 when they do, else
 * the exit code */
static int moe_check_memory(const moe_bench *b) {
    const long layers = b->o.layers;
    /* the weights, and with --repack their int8 copy (its size from the shapes and types) */
    uint64_t layer_need = b->per_layer, usable;
    if (b->o.repack) {
        hm_moe_expert *px = calloc((size_t)b->E, sizeof *px);
        if (!px) return cli_usage_error("bench moe: out of memory");
        for (int e = 0; e < b->E; e++)
            px[e].gate.type = px[e].up.type = px[e].down.type = (uint32_t)b->type;
        hm_moe_params mp = hm_moe_default_params();
        mp.n_experts = b->E, mp.hidden = b->H, mp.inter = b->I, mp.experts = px, mp.repack = true;
        layer_need += hm_moe_repack_bytes(&mp);
        free(px);
    }
    char what[160];
    snprintf(what, sizeof what, "%ld layers of %s experts%s", layers, b->o.type_name,
             b->o.repack ? " with their repacked copy" : "");
    if (cli_check_memory("bench moe", what, layer_need * (uint64_t)layers, &usable)) {
        if (usable / layer_need)
            fprintf(stderr, "hmoe: bench moe: --layers %llu would fit\n",
                    (unsigned long long)(usable / layer_need));
        else
            fprintf(stderr, "hmoe: bench moe: not even one layer fits\n");
        return 1;
    }
    return -1;
}

/* the preset, the type and the shapes, checked; -1 to go on, else the exit code */
static int moe_check(moe_bench *b) {
    moe_opts *o = &b->o;
    const hm_preset *pr = hm_preset_find(o->preset);
    if (!pr || !pr->hp.n_experts) {
        char names[512];
        size_t n = 0;
        names[0] = 0;
        for (size_t i = 0; i < hm_preset_count() && n < sizeof names; i++)
            if (hm_preset_at(i)->hp.n_experts)
                n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", n ? ", " : "",
                                      hm_preset_at(i)->name);
        return cli_usage_error("bench moe: no MoE preset '%s' (presets: %s)", o->preset, names);
    }
    const int type = b->type = hm_type_from_name(o->type_name);
    if (hm_cpu_ops_get(&b->ops) != HM_OK) return cli_usage_error("bench moe: %s", hm_last_error());
    if (type < 0 || !hm_synth_supported((uint32_t)type) ||
        !hm_vec_dot_for(b->ops, (uint32_t)type)) {
        char names[512];
        cli_bench_types(names, sizeof names);
        return cli_usage_error("bench moe: no kernel for type '%s' (types: %s)", o->type_name,
                               names);
    }
    const hm_hparams *hp = &pr->hp;
    b->E = (int)hp->n_experts, b->K = (int)hp->n_experts_used;
    const int64_t H = b->H = hp->hidden, I = b->I = hp->moe_inter;
    if (!o->layers) {
        o->layers = 0;
        for (uint32_t l = 0; l < hp->n_layers; l++) o->layers += hm_hparams_layer_is_moe(hp, l);
    }
    uint64_t rb_g, rb_d;
    if (!hm_type_row_bytes((uint32_t)type, (uint64_t)H, &rb_g) ||
        !hm_type_row_bytes((uint32_t)type, (uint64_t)I, &rb_d))
        return cli_usage_error("bench moe: %s cannot hold rows of %lld / %lld values", o->type_name,
                               (long long)H, (long long)I);
    b->mat_gu = rb_g * (size_t)I, b->mat_d = rb_d * (size_t)H;
    b->per_layer = (size_t)b->E * (2 * b->mat_gu + b->mat_d);
    b->total = b->per_layer * (size_t)o->layers;
    return moe_check_memory(b);
}

/* the pool, the configuration's lines, the bandwidth, the weights filled; -1 to go on, else the
 * exit code (nothing left to free) */
static int moe_start(moe_bench *b) {
    const moe_opts *o = &b->o;
    hm_pool_params pp = hm_pool_default_params();
    pp.n_threads = (int)o->threads;
    /* sync (default): the caller is participant 0, pinned, as in CPU-only inference; async: all
     * participants are workers and submit returns at once (the GPU-hybrid case: give the caller
     * a core of its own, i.e. --threads one less than the cores, or it competes with a worker) */
    pp.async = o->async;
    pp.pin_caller = !o->async;
    if (hm_pool_create(&pp, &b->pool) != HM_OK) {
        fprintf(stderr, "hmoe bench moe: %s\n", hm_last_error());
        return 1;
    }
    hm_pool *pool = b->pool;
    if (o->nodes > hm_pool_size(pool)) { /* before the weights are filled, not after */
        fprintf(stderr,
                "hmoe bench moe: --nodes %ld needs at least as many threads (the pool has %d)\n",
                o->nodes, hm_pool_size(pool));
        hm_pool_free(pool);
        return 1;
    }
    printf("bench moe: preset %s: %d experts, top-%d, hidden %lld, expert inter %lld, %ld MoE "
           "layers, %s experts (%.2f GB, %.1f MB per layer), kernel variant %s, %d threads\n",
           o->preset, b->E, b->K, (long long)b->H, (long long)b->I, o->layers,
           hm_type_name((uint32_t)b->type), (double)b->total * 1e-9, (double)b->per_layer * 1e-6,
           b->ops->name, hm_pool_size(pool));
    if (o->skew > 0)
        printf("routing: expert popularity Zipf-distributed with exponent %.2f\n", o->skew);
    else
        printf("routing: uniform at random\n");
    printf("pool: %s\n", o->async
                             ? "async (submit returns at once; the caller waits on its own thread)"
                             : "sync (the caller computes as participant 0)");
    printf("batch scratch: %s\n", o->own_scratch ? "one per layer (--own-scratch)"
                                                 : "one shared by the layers, as a model's are");
    /* measured before the weights take their memory, as bench kernels does: after them (45 GB
     * resident) the device reads ~95 GB/s here against 146-172 in bench kernels and bench membw
     * on the same machine */
    hm_membw_params bp = hm_membw_default_params();
    bp.pool = NULL; /* the membw pool is sync; measure with its own threads */
    bp.passes = 9;
    if (hm_membw_read(&bp, &b->bw) != HM_OK) {
        fprintf(stderr, "hmoe bench moe: %s\n", hm_last_error());
        hm_pool_free(pool);
        return 1;
    }
    printf("roofline: same-run streaming read %.1f GB/s (median of 9 passes; best %.1f)\n",
           b->bw.median_gbs, b->bw.best_gbs);

    if (hm_large_alloc(b->total, true, "expert weights", &b->wbuf) != HM_OK) {
        fprintf(stderr, "hmoe bench moe: %s\n", hm_last_error());
        hm_pool_free(pool);
        return 1;
    }
    /* random valid blocks, first touched by the pool threads that will read them */
    fill_job fj = {b->wbuf.ptr, (uint32_t)b->type, (int64_t)b->E * o->layers,
                   b->mat_gu,   b->mat_d,          (uint64_t)(b->I * b->H)};
    hm_pool_run(pool, fill_task, &fj);

    if (o->nodes > 1)
        printf("numa: %ld groups of the pool's threads (by node where the threads span %ld "
               "nodes, else in proportion to the slices' widths), each a slice of every expert's "
               "intermediate "
               "dimension%s\n",
               o->nodes, o->nodes, o->slice_copy ? ", its weights copied by its own threads" : "");
    b->max_tok = 1;
    for (int i = 0; i < o->n_tokens; i++)
        b->max_tok = o->tokens[i] > b->max_tok ? o->tokens[i] : b->max_tok;
    return -1;
}

/* an engine per layer on its weights; 0, or 1 on failure */
static int moe_engines(moe_bench *b) {
    const moe_opts *o = &b->o;
    const long layers = o->layers;
    const int E = b->E, type = b->type;
    b->moe = calloc((size_t)layers, sizeof *b->moe);
    hm_moe_expert *ex = b->ex = calloc((size_t)E, sizeof *ex);
    int rc = 0;
    double create_s = 0;
    /* a model's layers share one batch scratch (model/ctx.c): the per-thread buffers and the
     * activations' scratch stay warm from layer to layer, where a scratch per layer
     * (--own-scratch) is as cold as the layer's weights. Made here rather than left to the
     * pool's default, which engines split into NUMA slices do not take. */
    hm_moe_scratch *shared = NULL;
    if (!o->own_scratch && hm_moe_scratch_create(&shared) != HM_OK) {
        fprintf(stderr, "hmoe bench moe: %s\n", hm_last_error());
        rc = 1;
    }
    for (long l = 0; l < layers && !rc; l++) {
        uint8_t *lb = (uint8_t *)b->wbuf.ptr + (size_t)l * b->per_layer;
        for (int e = 0; e < E; e++) {
            uint8_t *eb = lb + (size_t)e * (2 * b->mat_gu + b->mat_d);
            ex[e].gate = (hm_moe_matrix){(uint32_t)type, eb, 0};
            ex[e].up = (hm_moe_matrix){(uint32_t)type, eb + b->mat_gu, 0};
            ex[e].down = (hm_moe_matrix){(uint32_t)type, eb + 2 * b->mat_gu, 0};
        }
        hm_moe_params mp = hm_moe_default_params();
        mp.n_experts = E, mp.hidden = b->H, mp.inter = b->I, mp.experts = ex, mp.pool = b->pool;
        mp.n_slices = o->nodes > 1 ? (int)o->nodes : 0, mp.slice_copy = o->slice_copy;
        mp.repack = o->repack;
        hm_moe_scratch *scratch = shared;
        if (o->own_scratch && hm_moe_scratch_create(&scratch) != HM_OK) {
            fprintf(stderr, "hmoe bench moe: %s\n", hm_last_error());
            rc = 1;
            break;
        }
        mp.scratch = scratch;
        mp.max_tokens = (int)b->max_tok; /* the batch the engine is made for, as a context does */
        if (l == 0 && o->repack)
            printf("repack: every expert also stored as int8 AMX tile units, %.2f GB more (%s)\n",
                   (double)hm_moe_repack_bytes(&mp) * (double)layers * 1e-9,
                   hm_moe_repack_bytes(&mp) ? "prefill reads those" : "nothing: no AMX here");
        const uint64_t t0 = hm_time_ns();
        if (hm_moe_create(&mp, &b->moe[l]) != HM_OK) {
            fprintf(stderr, "hmoe bench moe: %s\n", hm_last_error());
            rc = 1;
        }
        create_s += (double)(hm_time_ns() - t0) * 1e-9;
        if (o->own_scratch) hm_moe_scratch_free(scratch); /* the engine holds its reference */
    }
    hm_moe_scratch_free(shared); /* the engines hold theirs */
    if (o->repack && !rc) printf("repack: %.2f s for %ld layers\n", create_s, layers);
    return rc;
}

/* the round trip of an empty submit: one whose experts are all elsewhere (masked) */
static void moe_empty_submit(moe_bench *b) {
    const int E = b->E, K = b->K;
    uint8_t *mask = malloc((size_t)E);
    if (!mask) return;
    memset(mask, 1, (size_t)E);
    hm_moe_set_mask(b->moe[0], mask);
    for (int j = 0; j < K; j++) b->ids[j] = j, b->w[j] = 1.0f / (float)K;
    double best = 1e9;
    for (int it = 0; it < 1000; it++) {
        uint64_t t0 = hm_time_ns();
        hm_moe_submit(b->moe[0], b->x, HM_MOE_F32, b->ids, b->w, 1, K, b->out, HM_MOE_F32, false);
        hm_moe_wait(b->moe[0]);
        double us = (double)(hm_time_ns() - t0) * 1e-3;
        best = us < best ? us : best;
    }
    hm_moe_set_mask(b->moe[0], NULL);
    free(mask);
    printf("empty submit -> wait (all experts masked): best %.2f us\n", best);
}

/* the activations, outputs and routing, the empty submit, the read passes' and the sweep's
 * buffers; rc (0 or 1) so far in, 0 or 1 out */
static int moe_buffers(moe_bench *b, int rc) {
    const int E = b->E, K = b->K, nth = hm_pool_size(b->pool);
    const long max_tok = b->max_tok, layers = b->o.layers;
    const int64_t H = b->H;
    b->x = hm_malloc_aligned(sizeof(float) * (size_t)(max_tok * H), 64, "moe input");
    b->out = hm_malloc_aligned(sizeof(float) * (size_t)(max_tok * H), 64,
                               "moe output"); /* as a model's */
    b->ids = malloc(sizeof(int32_t) * (size_t)(max_tok * K) * (size_t)layers);
    b->w = malloc(sizeof(float) * (size_t)(max_tok * K) * (size_t)layers);
    b->wv = malloc(sizeof(double) * (size_t)E);
    b->count = malloc(sizeof(int) * (size_t)E);
    if (!b->x || !b->out || !b->ids || !b->w || !b->wv || !b->count) {
        fprintf(stderr, "hmoe bench moe: out of memory\n");
        rc = 1;
    }
    uint64_t s = 3;
    for (long i = 0; b->x && i < max_tok * H; i++)
        b->x[i] = (float)((int64_t)(hm_rng_next(&s) % 2001) - 1000) / 1000.0f;
    if (!rc) moe_empty_submit(b);
    b->used_exp = malloc(sizeof(uint8_t *) * (size_t)(E * layers));
    b->rd_work = hm_calloc_aligned((size_t)nth, sizeof(hm_work_slot), 64, "claims");
    b->rd_sinks = hm_calloc_aligned((size_t)nth, sizeof(cli_read_sink), 64, "read sinks");
    if (!b->used_exp || !b->rd_work || !b->rd_sinks) {
        fprintf(stderr, "hmoe bench moe: out of memory\n");
        rc = 1;
    }
    if (!rc && b->o.sweep_on && hm_membw_sweep_create(b->pool, b->ops, 0, &b->sweep) != HM_OK) {
        fprintf(stderr, "hmoe bench moe: %s (--no-sweep runs without)\n", hm_last_error());
        rc = 1;
    }
    const size_t exp_bytes = 2 * b->mat_gu + b->mat_d;
    b->rj = (rd_job){.ops = b->ops,
                     .exp = b->used_exp,
                     .exp_bytes = exp_bytes,
                     .per_exp = (int64_t)((exp_bytes + RD_CHUNK - 1) / RD_CHUNK),
                     .work = b->rd_work,
                     .sinks = b->rd_sinks};
    return rc;
}

/* the notes on the columns, and the table's header */
static void moe_print_header(const moe_bench *b) {
    printf("%% of read (up to 4 tokens): each of %d passes paired with a read of the experts it "
           "uses by the same threads (the membw loads, right before or after it, in turn); the "
           "median of the pairs' ratios. It follows the machine's bandwidth from moment to "
           "moment, which the %% of bw (the membw passes before the weights) does not.\n",
           MOE_PAIRED);
    if (b->sweep)
        printf("cache sweep: before each timed pass up to 4 tokens (the engine's and its read), a "
               "read of %.0f MiB of other memory, so neither finds the other's experts in the "
               "caches (--no-sweep: none)\n",
               (double)hm_membw_sweep_bytes(b->sweep) / (1 << 20));
    printf("%7s %12s %12s %12s %10s %9s %10s %10s %10s\n", "tokens", "us/layer", "ms/layers",
           "tokens/s", "GB/s", "% of bw", "TOPS", "read GB/s", "% of read");
}

/* every layer's routing of n tokens for a pass; the experts it uses into b->rj for the read */
static void moe_route_pass(moe_bench *b, int n, int pass, moe_row *r) {
    const int E = b->E, K = b->K;
    const size_t exp_bytes = 2 * b->mat_gu + b->mat_d;
    r->bytes = 0;
    b->rj.n_exp = 0;
    for (long l = 0; l < b->o.layers; l++) {
        uint64_t rs = (uint64_t)(l * 7919 + pass * 104729 + n);
        const size_t o = (size_t)l * (size_t)(b->max_tok * K);
        route(&rs, b->wv, b->count, E, K, n, b->o.skew, b->ids + o, b->w + o);
        int used = 0, busiest = 0;
        for (int e = 0; e < E; e++) {
            const int c = b->count[e];
            r->bytes += c ? exp_bytes : 0;
            if (c)
                b->used_exp[b->rj.n_exp++] =
                    (uint8_t *)b->wbuf.ptr + (size_t)l * b->per_layer + (size_t)e * exp_bytes;
            used += c > 0;
            busiest = c > busiest ? c : busiest;
        }
        r->used_sum += used, r->busiest_sum += busiest;
    }
}

/* one timed pass of the engines over all the layers (*sec its seconds); 0, or 1 on failure */
static int moe_engine_pass(moe_bench *b, int n, double *sec) {
    int rc = 0;
    const int K = b->K;
    uint64_t t0 = hm_time_ns();
    for (long l = 0; l < b->o.layers; l++) {
        const size_t o = (size_t)l * (size_t)(b->max_tok * K);
        if (hm_moe_submit(b->moe[l], b->x, HM_MOE_F32, b->ids + o, b->w + o, n, K, b->out,
                          HM_MOE_F32, false)) {
            fprintf(stderr, "hmoe bench moe: %s\n", hm_last_error());
            rc = 1;
            break;
        }
        hm_moe_wait(b->moe[l]);
    }
    *sec = (double)(hm_time_ns() - t0) * 1e-9;
    return rc;
}

/* the passes of n tokens into *r (up to 4 tokens each paired with a read); 0, or 1 on failure */
static int moe_measure(moe_bench *b, int n, moe_row *r) {
    int rc = 0;
    *r = (moe_row){.n = n, .best = 1e30, .paired = n <= 4};
    r->passes = r->paired ? MOE_PAIRED : 3;
    for (long l = 0; l < b->o.layers; l++) {
        hm_moe_profile(b->moe[l], NULL, true);
        hm_moe_kernel_stats_get(b->moe[l], NULL, true);
    }
    hm_pool_stats_reset(b->pool);
    for (int pass = 0; pass < r->passes; pass++) {
        moe_route_pass(b, n, pass, r);
        /* the read first in odd passes: neither side always follows the other */
        if (r->paired && pass % 2) {
            if (b->sweep && sweep_pass(b->pool, b->sweep, &r->rd_stats)) rc = 1;
            r->rsec[pass] = read_pass(b->pool, &b->rj, &r->rbytes, &r->rd_stats);
        }
        if (r->paired && b->sweep && sweep_pass(b->pool, b->sweep, &r->rd_stats)) rc = 1;
        double sec;
        if (moe_engine_pass(b, n, &sec)) rc = 1;
        r->best = sec < r->best ? sec : r->best;
        r->eng_sum += sec;
        if (r->paired) {
            if (pass % 2 == 0) {
                if (b->sweep && sweep_pass(b->pool, b->sweep, &r->rd_stats)) rc = 1;
                r->rsec[pass] = read_pass(b->pool, &b->rj, &r->rbytes, &r->rd_stats);
            }
            /* (engine bytes / engine time) / (read bytes / read time) */
            r->ratio[pass] =
                r->rbytes ? (double)r->bytes / sec / ((double)r->rbytes / r->rsec[pass]) : 0;
        }
    }
    return rc;
}

/* a token count's row, and with a skew its routing */
static void moe_print_row(const moe_bench *b, moe_row *r) {
    const long layers = b->o.layers;
    const int n = r->n;
    const double best = r->best;
    const double gbs = (double)r->bytes / best * 1e-9;
    const double ops2 = 2.0 * 3.0 * (double)b->H * (double)b->I * (double)n * b->K * (double)layers;
    printf("%7d %12.1f %12.2f %12.1f %10.1f %8.1f%% %10.2f", n, best / (double)layers * 1e6,
           best * 1e3, (double)n / best, gbs, 100.0 * gbs / b->bw.median_gbs, ops2 / best * 1e-12);
    cli_print_read_columns(r->ratio, r->rsec, r->paired ? r->passes : 0, r->rbytes);
    if (b->o.skew > 0 && n > 4)
        printf("        routing (skew %.2f): %.1f of %d experts used, busiest %.1f tokens\n",
               b->o.skew, r->used_sum / ((double)r->passes * (double)layers), b->E,
               r->busiest_sum / ((double)r->passes * (double)layers));
}

/* the engines' phases over the passes of a token count (their profiles read and reset) */
static void moe_print_phases(const moe_bench *b, const moe_row *r) {
    const long layers = b->o.layers;
    const int passes = r->passes;
    double ph[HM_MOE_PROF_N] = {0}, one[HM_MOE_PROF_N];
    for (long l = 0; l < layers; l++) {
        hm_moe_profile(b->moe[l], one, true);
        for (int i = 0; i < HM_MOE_PROF_N; i++) ph[i] += one[i] / (double)passes;
    }
    if (ph[HM_MOE_PROF_GATE_UP] > 0) {
        printf("        phases (ms per pass of %ld layers):", layers);
        for (int i = 0; i < HM_MOE_PROF_N; i++)
            printf("%s %s %.1f", i ? "," : "", hm_moe_profile_name(i), ph[i] * 1e3);
        /* a sync pool's job ends when its slowest participant does: the caller's wait
         * after its own share (participant 0's phases above end with its last claim) */
        hm_pool_stats ps;
        hm_pool_stats_get(b->pool, &ps);
        ps.jobs -= r->rd_stats.jobs, ps.run_ns -= r->rd_stats.run_ns;
        ps.own_ns -= r->rd_stats.own_ns;
        if (!b->o.async && ps.jobs)
            printf(", waiting for the last thread %.1f",
                   (double)(ps.run_ns - ps.own_ns) / (1e6 * passes));
        printf("\n");
    }
}

/* the kernels' counters over the passes of a token count (read and reset) */
static void moe_print_kernel_stats(const moe_bench *b, const moe_row *r) {
    const int passes = r->passes, nth = hm_pool_size(b->pool);
    const long layers = b->o.layers;
    hm_moe_kernel_stats ks = {0}, k1;
    for (long l = 0; l < layers; l++) {
        hm_moe_kernel_stats_get(b->moe[l], &k1, true);
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
        if (!b->o.async && b->o.nodes == 1)
            printf(", outside it %.1f (the submit's routing %.1f, launch to start %.1f)",
                   (r->eng_sum * nth - ks.dec_in_s) * per, ks.dec_prep_s * nth * per,
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

static void moe_free(moe_bench *b) {
    for (long l = 0; l < b->o.layers; l++) hm_moe_free(b->moe[l]);
    free(b->moe), free(b->ex), hm_free(b->x), hm_free(b->out), free(b->ids), free(b->w);
    free(b->wv), free(b->count);
    hm_membw_sweep_free(b->sweep);
    free(b->used_exp), hm_free(b->rd_work), hm_free(b->rd_sinks);
    hm_large_free(&b->wbuf);
    hm_pool_free(b->pool);
}

int bench_moe(int argc, char **argv) {
    moe_bench b = {0};
    int rc = moe_parse(argc, argv, &b.o);
    if (rc < 0) rc = moe_check(&b);
    if (rc < 0) rc = moe_start(&b);
    if (rc >= 0) return rc;
    rc = moe_engines(&b);
    cli_print_huge_pages("");
    rc = moe_buffers(&b, rc);
    moe_print_header(&b);
    for (int ti = 0; ti < b.o.n_tokens && !rc; ti++) {
        moe_row r;
        rc = moe_measure(&b, (int)b.o.tokens[ti], &r);
        moe_print_row(&b, &r);
        moe_print_phases(&b, &r);
        moe_print_kernel_stats(&b, &r);
    }
    moe_free(&b);
    return rc;
}
