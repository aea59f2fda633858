/* ctx.c - a context: thread pool, expert engines, per-sequence KV cache and scratch; the batch
 * driver of the forward pass (embedding, blocks, final norm, lm_head). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/cpu.h"
#include "core/log.h"
#include "cuda/cuda.h"
#include "format/gguf.h"
#include "model/arch/registry.h"
#include "model/ctx_int.h"
#include "model/place.h"
#include "model/rope.h"
#include "quant/ref.h"

hm_ctx_params hm_ctx_default_params(void) {
    hm_ctx_params p = {0};
    p.gpu_experts = HM_GPU_EXPERTS_FIT;
    return p;
}

int hm_ctx_n_batch(const hm_ctx *c) {
    return c->p.n_batch;
}
hm_device hm_ctx_device(const hm_ctx *c) {
    return c->p.device;
}
int hm_ctx_n_threads(const hm_ctx *c) {
    return c->nth;
}
int32_t hm_ctx_n_vocab(const hm_ctx *c) {
    return (int32_t)c->m->hp.vocab_size;
}

static const char *const prof_names[HM_PROF_COUNT] = {
    "embedding", "norms+residual", "attn projections", "attention",
    "router",    "routed experts", "dense mlp",        "output"};

const char *hm_prof_name(int part) {
    return part >= 0 && part < HM_PROF_COUNT ? prof_names[part] : "?";
}

static const char *const mla_names[HM_MLA_PHASES] = {"projections", "cache", "queries", "positions",
                                                     "values"};

const char *hm_mla_phase_name(int phase) {
    return phase >= 0 && phase < HM_MLA_PHASES ? mla_names[phase] : "?";
}

void hm_ctx_perf_get(hm_ctx *c, hm_ctx_perf *out) {
    memset(out, 0, sizeof *out);
    for (int k = 0; k < HM_PROF_COUNT; k++) {
        out->part_s[k] = (double)c->prof_ns[k] * 1e-9;
        out->alone_s[k] = (double)c->prof_alone_ns[k] * 1e-9;
        out->wait_s[k] = (double)c->prof_wait_ns[k] * 1e-9;
    }
    for (int k = 0; k < HM_MLA_PHASES; k++) out->mla_phase_s[k] = (double)c->mla_ns[k] * 1e-9;
    hm_pool_stats ps;
    hm_pool_stats_get(c->pool, &ps);
    out->pool_jobs = ps.jobs;
    out->pool_run_s = (double)ps.run_ns * 1e-9, out->pool_own_s = (double)ps.own_ns * 1e-9;
    /* the expert engines' phases summed over layers, the routing averaged per (layer, batch) */
    _Static_assert(HM_MOE_PROF_N <= HM_PERF_MOE_PHASES, "hm_ctx_perf holds every phase");
    out->n_moe_phases = HM_MOE_PROF_N;
    for (int k = 0; k < HM_MOE_PROF_N; k++) out->moe_phase_name[k] = hm_moe_profile_name(k);
    for (uint32_t il = 0; il < c->m->hp.n_layers; il++) {
        if (!c->moe || !c->moe[il]) continue;
        double sec[HM_MOE_PROF_N];
        hm_moe_profile(c->moe[il], sec, false);
        for (int k = 0; k < HM_MOE_PROF_N; k++) out->moe_phase_s[k] += sec[k];
    }
    hm_cuda_hybrid_times ht;
    hm_cuda_ctx_hybrid_times(c->cu, &ht);
    c->hyb_wait_s += ht.gpu_wait_s, c->hyb_span_s += ht.cpu_span_s;
    c->hyb_layers += ht.layers, c->hyb_blocked += ht.blocked;
    c->hyb_streamed += ht.streamed, c->hyb_stream_bytes += ht.stream_bytes;
    c->hyb_swaps += ht.swaps;
    out->hyb_gpu_wait_s = c->hyb_wait_s, out->hyb_cpu_span_s = c->hyb_span_s;
    out->hyb_layers = c->hyb_layers, out->hyb_blocked = c->hyb_blocked;
    out->hyb_streamed = c->hyb_streamed, out->hyb_stream_bytes = c->hyb_stream_bytes;
    out->hyb_swaps = c->hyb_swaps;
    out->moe_batches = c->route_batches;
    if (c->route_batches) {
        const double nb = (double)c->route_batches;
        out->moe_tokens = c->route_tokens / nb;
        out->moe_active = c->route_active / nb;
        out->moe_busiest = c->route_busiest / nb;
    }
}

void hm_ctx_perf_reset(hm_ctx *c) {
    memset(c->prof_ns, 0, sizeof c->prof_ns);
    memset(c->prof_alone_ns, 0, sizeof c->prof_alone_ns);
    memset(c->prof_wait_ns, 0, sizeof c->prof_wait_ns);
    memset(c->mla_ns, 0, sizeof c->mla_ns);
    for (uint32_t il = 0; il < c->m->hp.n_layers; il++)
        if (c->moe && c->moe[il]) hm_moe_profile(c->moe[il], NULL, true);
    c->route_batches = 0;
    c->route_active = c->route_busiest = c->route_tokens = 0;
    hm_pool_stats_reset(c->pool);
    hm_cuda_hybrid_times ht;
    hm_cuda_ctx_hybrid_times(c->cu, &ht);
    c->hyb_wait_s = c->hyb_span_s = 0, c->hyb_layers = c->hyb_blocked = 0;
    c->hyb_streamed = c->hyb_stream_bytes = c->hyb_swaps = 0;
}

void hm_ctx_route_stats(hm_ctx *c, int n, int k, int E) {
    if (n <= 4 || !c->route_count) return;
    memset(c->route_count, 0, sizeof(uint32_t) * (size_t)E);
    for (size_t i = 0; i < (size_t)n * (size_t)k; i++)
        if (c->ids[i] >= 0 && c->ids[i] < E) c->route_count[c->ids[i]]++;
    uint32_t active = 0, busiest = 0;
    for (int e = 0; e < E; e++) {
        active += c->route_count[e] > 0;
        if (c->route_count[e] > busiest) busiest = c->route_count[e];
    }
    c->route_batches++;
    c->route_active += active;
    c->route_busiest += busiest;
    c->route_tokens += n;
}

void hm_ctx_placement(const hm_ctx *c, char *buf, size_t cap) {
    if (!cap) return;
    if (!c->cu) {
        snprintf(buf, cap, "cpu");
        return;
    }
    hm_place_describe(&c->plan, buf, cap);
}

double hm_ctx_gpu_expert_share(const hm_ctx *c) {
    if (!c->cu) return 0.0;
    return c->plan.all_bytes ? (double)c->plan.gpu_bytes / (double)c->plan.all_bytes : 1.0;
}

hm_status hm_ctx_expert_counts(const hm_ctx *c, uint64_t *out, size_t n) {
    const size_t want = (size_t)c->m->hp.n_layers * c->m->hp.n_experts;
    if (n != want)
        return hm_errorf(HM_ERR_INVALID_ARG, "expert counts: %zu values asked, the model has %zu",
                         n, want);
    if (want) memcpy(out, c->expert_counts, sizeof *out * want);
    return HM_OK;
}

hm_status hm_ctx_write_expert_counts(const hm_ctx *c, const char *path) {
    return hm_place_counts_write(path, (int)c->m->hp.n_layers, (int)c->m->hp.n_experts,
                                 c->expert_counts);
}

int hm_ctx_n_ctx(const hm_ctx *c) {
    return c->p.n_ctx;
}
/* the bytes of a model computed from its mapping (the file, or for a HF directory its experts,
 * which are nearly all of it) */
static uint64_t mapped_bytes(const hm_model *m) {
    if (m->gguf) return hm_gguf_file_size(m->gguf);
    uint64_t b = 0;
    const hm_hparams *hp = &m->hp;
    for (uint32_t il = 0; il < hp->n_layers; il++) {
        const hm_layer *L = &m->layers[il];
        if (!L->moe) continue;
        for (uint32_t e = 0; e < hp->n_experts; e++) {
            const hm_moe_expert *x = &L->experts[e];
            b += (uint64_t)(x->gate.row_bytes + x->up.row_bytes) * hp->moe_inter +
                 (uint64_t)x->down.row_bytes * hp->hidden;
        }
    }
    return b;
}

size_t hm_ctx_repacked_bytes(const hm_ctx *c) {
    return c->repacked;
}
int hm_ctx_numa_slices(const hm_ctx *c) {
    return c->n_slices;
}
size_t hm_ctx_numa_copy_bytes(const hm_ctx *c) {
    return c->slice_copied;
}

/* The experts' NUMA slices asked for (hm_ctx_params.numa): 1 = none */
static int numa_slices(const hm_ctx_params *p) {
    if (p->numa == 1) return 1;
    if (p->numa >= 2) return p->numa;
    const hm_topology *t = hm_topology_get();
    return t->n_nodes > 1 ? t->n_nodes : 1;
}

/* One slice per real node: the pool's threads in node order, an equal share on each node (the
 * default order would fill node 0 first when fewer threads than cores are asked for). NULL when
 * the slices are emulated (the default order, split evenly). */
static int *node_cpus(int slices, int n) {
    const hm_topology *t = hm_topology_get();
    if (slices != t->n_nodes || n < slices) return NULL;
    int *v = malloc(sizeof(int) * (size_t)n);
    if (!v) return NULL;
    int k = 0;
    for (int s = 0; s < slices; s++) {
        const hm_numa_node *nd = &t->nodes[s];
        const int cnt = (int)((int64_t)n * (s + 1) / slices - (int64_t)n * s / slices);
        if (cnt > nd->n_cores)
            HM_WARN("context: %d threads on NUMA node %d's %d cores: threads will share cores", cnt,
                    nd->id, nd->n_cores);
        for (int j = 0; j < cnt; j++) v[k++] = nd->core_cpus[j % nd->n_cores];
    }
    return v;
}

int hm_ctx_n_seq(const hm_ctx *c) {
    return c->p.n_seq;
}
int hm_ctx_seq_len(const hm_ctx *c, int seq) {
    return seq >= 0 && seq < c->p.n_seq ? c->seq_len[seq] : 0;
}
void hm_ctx_seq_reset(hm_ctx *c, int seq) {
    if (seq >= 0 && seq < c->p.n_seq) c->seq_len[seq] = 0;
}
hm_status hm_ctx_seq_truncate(hm_ctx *c, int seq, int n) {
    if (!c || seq < 0 || seq >= c->p.n_seq)
        return hm_errorf(HM_ERR_INVALID_ARG, "seq_truncate: sequence %d is outside [0, %d)", seq,
                         c ? c->p.n_seq : 0);
    if (n < 0 || n > c->seq_len[seq])
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "seq_truncate: %d positions asked to be kept, sequence %d holds %d", n,
                         seq, c->seq_len[seq]);
    /* positions past n are never read again: attention reads [0, seq_len) and the next token of
     * the sequence overwrites position n */
    c->seq_len[seq] = n;
    return HM_OK;
}

typedef struct tok_job {
    hm_ctx *c;
    int n;
    hm_ctx_tok_fn fn;
    void *arg;
} tok_job;

static void tok_task(int ith, int nth, void *arg) {
    tok_job *j = arg;
    for (int i = ith; i < j->n; i += nth) j->fn(j->c, i, j->arg);
}

void hm_ctx_for_tokens(hm_ctx *c, int n, hm_ctx_tok_fn fn, void *arg) {
    if (n == 1) {
        fn(c, 0, arg);
        return;
    }
    tok_job j = {c, n, fn, arg};
    hm_pool_run(c->pool, tok_task, &j);
}

void hm_ctx_matmul(hm_ctx *c, const hm_matrix *w, const float *x, int n, float *y) {
    hm_nn_matmul(c->pool, w, x, (size_t)w->cols, n, y, (size_t)w->rows, c->mm_scratch,
                 hm_ctx_mm_flags(c));
}

static size_t mm_need(const hm_ctx *c, const hm_matrix *w, size_t cur) {
    size_t b = hm_nn_matmul_scratch_bytes(w, c->p.n_batch, c->nth, hm_ctx_mm_flags(c));
    return b > cur ? b : cur;
}

void hm_ctx_free(hm_ctx *c) {
    if (!c) return;
    hm_cuda_ctx_free(c->cu); /* before the engines its host functions drive */
    if (c->moe) {
        for (uint32_t il = 0; il < c->m->hp.n_layers; il++) hm_moe_free(c->moe[il]);
        free(c->moe);
    }
    free(c->route_count);
    free(c->expert_counts);
    hm_place_free(&c->plan);
    free(c->own_layers);
    hm_graph_free(&c->graph);
    hm_large_free(&c->dense_pack);
    hm_pool_free(c->pool);
    hm_large_free(&c->kv_k), hm_large_free(&c->kv_v), free(c->seq_len), free(c->seq_next),
        free(c->inv_freq), free(c->inv_seq), free(c->inv_seq_len);
    hm_free(c->rope_cs);
    hm_free(c->x), hm_free(c->xn), hm_free(c->q), hm_free(c->k), hm_free(c->v);
    hm_free(c->att), hm_free(c->tmp), hm_free(c->rl), hm_free(c->g), hm_free(c->u), hm_free(c->sh),
        hm_free(c->qa), hm_free(c->mla_scratch), hm_free(c->mla_rows);
    free(c->w), free(c->ids), free(c->pos), free(c->seq), free(c->kvv);
    hm_free(c->attn_scratch), hm_free(c->mm_scratch);
    free(c);
}

/* HMOE_DENSE_REPACK=0: the dense matrices are converted per batch even where the experts are
 * repacked (an A/B switch for benchmarks) */
static bool dense_repack_off(void) {
    const char *v = getenv("HMOE_DENSE_REPACK");
    return v && !strcmp(v, "0");
}

/* the int8 copies of a layer's dense matrices that prompt batches would read */
static size_t dense_bytes(const hm_layer *L) {
    size_t b = hm_nn_repack_bytes(&L->wq) + hm_nn_repack_bytes(&L->wk) +
               hm_nn_repack_bytes(&L->wv) + hm_nn_repack_bytes(&L->wo);
    if (!L->moe)
        b += hm_nn_repack_bytes(&L->ffn_gate) + hm_nn_repack_bytes(&L->ffn_up) +
             hm_nn_repack_bytes(&L->ffn_down);
    else if (L->sh_gate.rows)
        b += hm_nn_repack_bytes(&L->sh_gate) + hm_nn_repack_bytes(&L->sh_up) +
             hm_nn_repack_bytes(&L->sh_down);
    return b;
}

/* the layers' dense matrices repacked once (hm_nn_repack) into one huge-page buffer; the blocks
 * then read the context's copies of the layers */
static hm_status repack_dense(hm_ctx *c, size_t need) {
    const uint64_t t0 = hm_time_ns();
    const uint32_t nl = c->m->hp.n_layers;
    hm_status st = hm_large_alloc(need, true, "repacked dense weights", &c->dense_pack);
    if (st) return st;
    c->own_layers = malloc(sizeof *c->own_layers * nl);
    if (!c->own_layers) return hm_errorf(HM_ERR_NO_MEMORY, "context: out of memory");
    memcpy(c->own_layers, c->m->layers, sizeof *c->own_layers * nl);
    uint8_t *dst = c->dense_pack.ptr;
    for (uint32_t il = 0; il < nl; il++) {
        hm_layer *L = &c->own_layers[il];
        /* a MoE layer's shared expert (if any) in the dense MLP's place */
        hm_matrix *mats[7] = {&L->wq,
                              &L->wk,
                              &L->wv,
                              &L->wo,
                              L->moe ? &L->sh_gate : &L->ffn_gate,
                              L->moe ? &L->sh_up : &L->ffn_up,
                              L->moe ? &L->sh_down : &L->ffn_down};
        for (int k = 0; k < (L->moe && !L->sh_gate.rows ? 4 : 7); k++) {
            const size_t b = hm_nn_repack_bytes(mats[k]);
            if (!b) continue;
            if ((st = hm_nn_repack(c->pool, mats[k], dst))) return st;
            dst += b;
        }
    }
    c->layers = c->own_layers;
    hm_log(HM_LOG_DEBUG, "context: repacked the dense matrices (%.1f MB) in %.1f ms",
           (double)need * 1e-6, (double)(hm_time_ns() - t0) * 1e-6);
    return HM_OK;
}

static float *fbuf(size_t n, const char *what) {
    return hm_malloc_aligned((n ? n : 1) * sizeof(float), 64, what);
}

/* HM_DEVICE_CUDA: the experts of layer il the CPU computes (none: every one on the GPU) */
static bool cpu_experts(const hm_ctx *c, uint32_t il) {
    if (c->p.device != HM_DEVICE_CUDA) return true;
    return c->plan.n_gpu_layer && c->plan.n_gpu_layer[il] < c->plan.n_experts;
}

/* the CPU engine's mask of layer il: the experts on the GPU */
static const uint8_t *gpu_mask(const hm_ctx *c, uint32_t il) {
    if (c->p.device != HM_DEVICE_CUDA || !c->plan.gpu) return NULL;
    return c->plan.gpu + (size_t)il * (size_t)c->plan.n_experts;
}

static double gib(uint64_t b) {
    return (double)b / (double)(1u << 30);
}

/* The hybrid placement: the GPU's bytes without the routed experts (attention, router, dense
 * layers, embedding, output, KV cache, scratch) come first; the experts get what is left of
 * gpu_mem (or of the free memory), as many per layer as the strategy and gpu_experts say. */
static hm_status place_experts(hm_ctx *c, const hm_ctx_params *p) {
    const hm_model *m = c->m;
    const hm_hparams *hp = &m->hp;
    const hm_cuda_ctx_params gp = {.device = p->gpu,
                                   .n_batch = p->n_batch,
                                   .n_ctx = (int)c->kv_ctx,
                                   .n_seq = p->n_seq,
                                   .kv_f16 = p->kv_f16,
                                   .bf16 = p->gpu_bf16,
                                   .defer = p->defer,
                                   .prefill_stream = p->gpu_prefill_threshold,
                                   .gpu_experts = NULL,
                                   .cpu_moe = hp->n_experts ? c->moe : NULL};
    size_t total = 0, experts = 0, free_b = 0, stream = 0;
    hm_status st = hm_cuda_ctx_measure(m, &c->graph, &gp, &total, &experts, &free_b, &stream);
    if (st) return st;
    uint64_t rest = total - experts;
    const uint64_t avail = p->gpu_mem && p->gpu_mem < free_b ? p->gpu_mem : free_b;
    const bool all_fit =
        p->gpu_experts == HM_GPU_EXPERTS_FIT && !p->n_place_rules && total <= avail;
    /* --dynamic-experts: a spare slot per layer for the expert on its way in */
    if (p->dynamic_experts && hp->n_experts && !all_fit)
        for (uint32_t il = 0; il < hp->n_layers; il++) rest += hm_place_expert_bytes(m, (int)il);
    /* layerwise prefill's two buffers come before the experts, where some experts will be on the
     * CPU: with an explicit threshold always; by default where they take at most an eighth of
     * what is left for experts (every byte of them is one less of resident experts, which decode
     * reads) */
    c->prefill_stream = HM_PREFILL_STREAM_OFF;
    if (stream && hp->n_experts && !all_fit && p->gpu_prefill_threshold != HM_PREFILL_STREAM_OFF) {
        if (p->gpu_prefill_threshold > 0 || (rest <= avail && stream * 8 <= avail - rest)) {
            rest += stream;
            c->prefill_stream = p->gpu_prefill_threshold;
        } else {
            hm_log(HM_LOG_INFO,
                   "layerwise prefill off: its buffers (%.2f GiB) would take more than an eighth "
                   "of the %.2f GiB left for routed experts (--gpu-prefill-threshold N forces it)",
                   gib(stream), gib(rest <= avail ? avail - rest : 0));
        }
    }
    if (rest > avail)
        return hm_errorf(HM_ERR_NO_MEMORY,
                         "--device cuda: attention, router, dense layers, embedding, output, KV "
                         "cache and scratch need %.2f GiB on GPU %d and %.2f GiB %s: lower --ctx, "
                         "--batch or the sequences, or run --device cpu",
                         gib(rest), p->gpu, gib(avail),
                         p->gpu_mem ? "are allowed (--gpu-mem)" : "are free");
    uint64_t *counts = NULL;
    if (p->expert_counts && (st = hm_place_counts_read(p->expert_counts, (int)hp->n_layers,
                                                       (int)hp->n_experts, &counts)))
        return st;
    const hm_place_params pp = {p->gpu_experts < 0 ? -1 : p->gpu_experts,
                                avail - rest,
                                p->placement,
                                p->place_seed,
                                counts,
                                p->place_rules,
                                p->n_place_rules};
    st = hm_place_make(m, &pp, &c->plan);
    free(counts);
    if (st) return st;
    if (c->plan.gpu_bytes > avail - rest) {
        const uint64_t one = c->plan.n_gpu ? c->plan.gpu_bytes / (uint64_t)c->plan.n_gpu : 1;
        st = hm_errorf(HM_ERR_NO_MEMORY,
                       "--device cuda: %d routed experts on the GPU take %.2f GiB; %.2f GiB are "
                       "left for experts after the rest of the model (%.2f GiB) on GPU %d: about "
                       "%llu experts fit (--gpu-experts, --gpu-mem, --place rules)",
                       c->plan.n_gpu, gib(c->plan.gpu_bytes), gib(avail - rest), gib(rest), p->gpu,
                       (unsigned long long)((avail - rest) / one));
        hm_place_free(&c->plan);
        return st;
    }
    char line[256];
    hm_place_describe(&c->plan, line, sizeof line);
    hm_log(HM_LOG_INFO, "placement (%s): %s", hm_place_strategy_name(p->placement), line);
    return HM_OK;
}

/* HM_DEVICE_AUTO: the GPU when there is one and the model runs there (hybrid, the placement's
 * default fits what it can), else the CPU. HMOE_DEVICE=cpu|cuda decides instead (the CPU tests
 * set cpu, so that a machine with a GPU runs them as written). */
static hm_status create_auto(const hm_model *m, const hm_ctx_params *params, hm_ctx **out) {
    hm_ctx_params p = *params;
    const char *env = getenv("HMOE_DEVICE");
    if (env && *env && strcmp(env, "auto")) {
        if (!strcmp(env, "cpu"))
            p.device = HM_DEVICE_CPU;
        else if (!strcmp(env, "cuda"))
            p.device = HM_DEVICE_CUDA;
        else
            return hm_errorf(HM_ERR_INVALID_ARG, "HMOE_DEVICE=%s: expected auto, cpu or cuda", env);
        return hm_ctx_create(m, &p, out);
    }
    int n = 0;
    if (hm_cuda_compiled() && hm_cuda_device_count(&n) == HM_OK && n > p.gpu && p.gpu >= 0) {
        p.device = HM_DEVICE_CUDA;
        const hm_status st = hm_ctx_create(m, &p, out);
        if (st != HM_ERR_UNSUPPORTED && st != HM_ERR_NO_MEMORY) return st;
        hm_log(HM_LOG_INFO, "--device auto: %s; running on the CPU", hm_last_error());
    }
    p.device = HM_DEVICE_CPU;
    return hm_ctx_create(m, &p, out);
}

hm_status hm_ctx_create(const hm_model *m, const hm_ctx_params *params, hm_ctx **out) {
    *out = NULL;
    const hm_hparams *hp = &m->hp;
    hm_ctx_params p = params ? *params : hm_ctx_default_params();
    if (p.n_ctx < 0 || p.n_seq < 0 || p.n_batch < 0 || p.n_threads < 0)
        return hm_errorf(HM_ERR_INVALID_ARG, "context: n_ctx, n_seq, n_batch and n_threads must "
                                             "not be negative");
    if (!p.n_ctx) p.n_ctx = hp->max_ctx && hp->max_ctx < 4096 ? (int)hp->max_ctx : 4096;
    if (hp->max_ctx && (uint32_t)p.n_ctx > hp->max_ctx)
        HM_WARN("context: %d positions is more than the model was trained for (%u)", p.n_ctx,
                hp->max_ctx);
    if (!p.n_seq) p.n_seq = 1;
    if (p.device < HM_DEVICE_AUTO || p.device > HM_DEVICE_CUDA)
        return hm_errorf(HM_ERR_INVALID_ARG, "context: unknown device %d", (int)p.device);
    if (p.defer < 0 || (hp->n_experts_used && (uint32_t)p.defer > hp->n_experts_used))
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "context: defer %d: between 0 and the experts per token (%u)", p.defer,
                         hp->n_experts_used);
    if (p.gpu_prefill_threshold < HM_PREFILL_STREAM_OFF)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "context: gpu_prefill_threshold %d: tokens, 0 (auto) or -1 (off)",
                         p.gpu_prefill_threshold);
    if (p.device == HM_DEVICE_AUTO) return create_auto(m, &p, out);
    /* on a GPU: no CPU KV cache; expert engines only for the routed experts placed on the CPU */
    const bool on_gpu = p.device == HM_DEVICE_CUDA;
    if (hp->n_kv_heads == 0 || hp->n_heads % hp->n_kv_heads || hp->n_heads / hp->n_kv_heads > 64)
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "%s: %u query heads per kv head (%u / %u); attention runs up to 64",
                         m->path, hp->n_kv_heads ? hp->n_heads / hp->n_kv_heads : 0, hp->n_heads,
                         hp->n_kv_heads);
    if (!p.n_batch) p.n_batch = 512;
    if (p.n_batch > 65536)
        return hm_errorf(HM_ERR_INVALID_ARG, "context: n_batch %d is above 65536", p.n_batch);
    hm_ctx *c = calloc(1, sizeof *c);
    if (!c) return hm_errorf(HM_ERR_NO_MEMORY, "context: out of memory");
    c->m = m;
    c->p = p;
    hm_status st;
    hm_pool_params pp = hm_pool_default_params();
    pp.n_threads = p.n_threads;
    pp.async = on_gpu; /* the GPU stream's host functions submit the CPU experts */
    /* the thread running the stream's host functions spins while it waits for the CPU experts:
     * by default it gets a core of its own (pool.h) */
    const int n_cores = hm_topology_get()->n_cores;
    if (on_gpu && !p.n_threads && n_cores > 1) pp.n_threads = n_cores - 1;
    /* the stream hands the pool a layer every ~0.25 ms of GPU work: workers that fall asleep
     * in between (the default spin is 200 us) pay a futex wake-up per layer (hybrid decode on
     * the device: 27.5 tok/s at the default, 45 with 2 ms); HMOE_SPIN_US still decides */
    if (on_gpu && !getenv("HMOE_SPIN_US")) pp.spin_us = 5000;
    pp.pin_caller = p.pin_caller;
    c->n_slices = hp->n_experts && !on_gpu ? numa_slices(&p) : 1;
    int *cpus = c->n_slices > 1
                    ? node_cpus(c->n_slices, p.n_threads ? p.n_threads : hm_topology_get()->n_cores)
                    : NULL;
    if (cpus) pp.cpus = cpus, pp.n_threads = p.n_threads ? p.n_threads : hm_topology_get()->n_cores;
    st = hm_pool_create(&pp, &c->pool);
    free(cpus);
    if (st) goto fail;
    c->nth = hm_pool_size(c->pool);

    const size_t H = hp->hidden, B = (size_t)p.n_batch;
    c->q_dim = (size_t)hp->n_heads * hp->head_dim;
    c->kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
    /* MLA caches one latent and one rotated key per token, shared by the heads: the K slot and
     * the K cache hold [kv_lora + rope] per token, and there is no V cache */
    const bool mla = hp->kv_lora_rank > 0;
    if (mla) c->kv_dim = (size_t)hp->kv_lora_rank + hp->qk_rope_head_dim;
    c->ffn_max = hp->ffn_inter; /* the dense MLP's and the shared expert's gate/up rows */
    if (hp->n_shared_experts && hp->shared_inter > c->ffn_max) c->ffn_max = hp->shared_inter;
    if (!c->ffn_max) c->ffn_max = 1;
    c->kv_ctx = ((size_t)p.n_ctx + HM_NN_KBLK - 1) / HM_NN_KBLK * HM_NN_KBLK;
    size_t kv_floats = on_gpu ? 0 : (size_t)hp->n_layers * (size_t)p.n_seq * c->kv_ctx * c->kv_dim;
    c->kv_elem = p.kv_f16 ? 2 : 4;
    if ((st = hm_large_alloc((kv_floats ? kv_floats : 1) * c->kv_elem, true, "KV cache (K)",
                             &c->kv_k)) ||
        (st = hm_large_alloc((kv_floats && !mla ? kv_floats : 1) * c->kv_elem, true, "KV cache (V)",
                             &c->kv_v)))
        goto fail;
    c->seq_len = calloc((size_t)p.n_seq, sizeof(int32_t));
    c->seq_next = calloc((size_t)p.n_seq, sizeof(int32_t));
    c->inv_freq = calloc(hp->rope_dim / 2 + 1, sizeof(float));
    if (hp->rope_type == HM_ROPE_DYNAMIC &&
        (!(c->inv_seq = calloc((size_t)p.n_seq * (hp->rope_dim / 2 + 1), sizeof(float))) ||
         !(c->inv_seq_len = calloc((size_t)p.n_seq, sizeof(int64_t))))) {
        st = hm_errorf(HM_ERR_NO_MEMORY, "context: out of memory (RoPE frequencies)");
        goto fail;
    }
    c->rope_cs = fbuf(B * (hp->rope_dim ? hp->rope_dim : 1), "ctx rope");
    c->x = fbuf(B * H, "ctx x");
    c->xn = fbuf(B * H, "ctx xn");
    c->tmp = fbuf(B * H, "ctx tmp");
    c->q = fbuf(B * c->q_dim, "ctx q");
    c->att = fbuf(B * c->q_dim, "ctx att");
    c->k = fbuf(B * c->kv_dim, "ctx k");
    c->v = fbuf(B * c->kv_dim, "ctx v");
    c->rl = fbuf(B * (hp->n_experts ? hp->n_experts : 1), "ctx router");
    c->g = fbuf(B * c->ffn_max, "ctx gate");
    c->u = fbuf(B * c->ffn_max, "ctx up");
    c->sh = fbuf(B * H, "ctx shared expert");
    c->qa = fbuf(B * (hp->q_lora_rank ? hp->q_lora_rank : 1), "ctx q latent");
    /* MLA: per participant the absorbed q, the latent output and a cache row in floats; the
     * split decode's shared rows */
    c->mla_scratch =
        fbuf(mla ? hm_mla_scratch_floats(hp, c->kv_dim, c->nth) : 1, "ctx latent attention");
    c->mla_rows = fbuf(mla ? hm_mla_rows_floats(hp, c->kv_dim, p.n_batch) : 1, "ctx latent rows");
    size_t K = hp->n_experts_used ? hp->n_experts_used : 1;
    c->w = calloc(B * K, sizeof(float));
    c->ids = calloc(B * K, sizeof(int32_t));
    c->pos = calloc(B, sizeof(int32_t));
    c->seq = calloc(B, sizeof(int32_t));
    c->kvv = calloc(B, sizeof(hm_nn_kv));
    size_t attn_floats = hm_nn_attn_scratch_floats(p.n_ctx, (int)hp->n_heads, (int)hp->n_kv_heads,
                                                   (int)hp->head_dim, c->nth);
    /* sinks or a sliding window (exec_cpu.c's sink_attend): scores and an accumulator per thread */
    const size_t sink_floats = (size_t)c->nth * ((size_t)p.n_ctx + hp->head_dim + 16);
    if ((hp->attn_sinks || hp->sliding_window) && sink_floats > attn_floats)
        attn_floats = sink_floats;
    c->attn_scratch = fbuf(attn_floats, "ctx attention");
    if (!c->seq_len || !c->seq_next || !c->inv_freq || !c->rope_cs || !c->x || !c->xn || !c->tmp ||
        !c->q || !c->att || !c->k || !c->v || !c->rl || !c->g || !c->u || !c->sh || !c->qa ||
        !c->mla_scratch || !c->mla_rows || !c->w || !c->ids || !c->pos || !c->seq || !c->kvv ||
        !c->attn_scratch) {
        st = hm_errorf(HM_ERR_NO_MEMORY,
                       "context: out of memory (KV cache %zu MiB for %d positions x %d sequences)",
                       kv_floats * 2 * c->kv_elem >> 20, p.n_ctx, p.n_seq);
        goto fail;
    }
    hm_rope_freqs(hp, 0, c->inv_freq, &c->rope_attn);

    size_t mmb = mm_need(c, &m->output, 0);
    c->moe = calloc(hp->n_layers, sizeof *c->moe);
    c->route_count = calloc(hp->n_experts ? hp->n_experts : 1, sizeof *c->route_count);
    c->expert_counts = calloc((size_t)hp->n_layers * (hp->n_experts ? hp->n_experts : 1),
                              sizeof *c->expert_counts);
    if (!c->moe || !c->route_count || !c->expert_counts) {
        st = hm_errorf(HM_ERR_NO_MEMORY, "context: out of memory");
        goto fail;
    }
    bool repack = false, slice_copy = false;
    size_t dense_need = 0, copy_need = 0;
    c->layers = m->layers;
    if (on_gpu) { /* the graph first: the GPU's share of the model is measured from it */
        const hm_arch_desc *ad = hm_arch_desc_get(hp->arch);
        if (!ad || !ad->build) {
            st = hm_errorf(HM_ERR_UNSUPPORTED,
                           "context: architecture '%s' does not run yet (runs: %s)", hp->model_type,
                           hm_arch_list(HM_ARCH_RUNS));
            goto fail;
        }
        if ((st = ad->build(m, c->layers, &c->graph)) || (st = place_experts(c, &p))) goto fail;
    }
    hm_mem_info mi;
    const bool have = hm_mem_info_get(&mi) == HM_OK;
    const uint64_t keep = m->copy.ptr ? 0 : mapped_bytes(m);
    if (c->n_slices > 1) { /* the split the shapes allow, and the slices' copies */
        for (uint32_t il = 0; il < hp->n_layers; il++) {
            if (!m->layers[il].moe) continue;
            hm_moe_params mp = hm_moe_default_params();
            mp.n_experts = (int)hp->n_experts, mp.hidden = hp->hidden, mp.inter = hp->moe_inter;
            mp.experts = m->layers[il].experts, mp.n_slices = c->n_slices;
            const size_t b = hm_moe_slice_copy_bytes(&mp);
            if (!b || c->nth < c->n_slices) {
                HM_WARN("%s: the experts (inter %u) cannot be split into %d NUMA slices of whole "
                        "blocks over %d threads; running without slices",
                        m->path, hp->moe_inter, c->n_slices, c->nth);
                c->n_slices = 1, copy_need = 0;
                break;
            }
            copy_need += b;
        }
        slice_copy = copy_need > 0 &&
                     (p.numa_copy == HM_REPACK_ON || (p.numa_copy == HM_REPACK_AUTO && have &&
                                                      copy_need + keep <= mi.available / 5 * 4));
        if (copy_need > 0 && !slice_copy && p.numa_copy == HM_REPACK_AUTO)
            hm_log(HM_LOG_INFO,
                   "NUMA slices' weights not copied to their nodes: %.1f GB needed%s, %.1f GB "
                   "available (--numa-copy on forces it)",
                   (double)copy_need * 1e-9, keep ? " (+ the mmapped model)" : "",
                   have ? (double)mi.available * 1e-9 : 0.0);
        if (slice_copy) c->slice_copied = copy_need;
    }
    if (p.repack != HM_REPACK_OFF) {
        size_t need = 0;
        for (uint32_t il = 0; il < hp->n_layers; il++) {
            if (!on_gpu && !p.no_amx && !dense_repack_off())
                dense_need += dense_bytes(&m->layers[il]);
            if (!m->layers[il].moe || !cpu_experts(c, il)) continue;
            hm_moe_params mp = hm_moe_default_params();
            mp.n_experts = (int)hp->n_experts, mp.hidden = hp->hidden, mp.inter = hp->moe_inter;
            mp.experts = m->layers[il].experts, mp.no_amx = p.no_amx;
            mp.mask = gpu_mask(c, il);
            need += hm_moe_repack_bytes(&mp);
        }
        need += dense_need;
        const size_t copies = slice_copy ? copy_need : 0;
        repack = need > 0 && (p.repack == HM_REPACK_ON ||
                              (have && need + copies + keep <= mi.available / 5 * 4));
        if (need > 0 && !repack)
            hm_log(HM_LOG_INFO,
                   "weights not repacked for AMX prefill: %.1f GB needed%s%s, %.1f GB available "
                   "(--repack on forces it)",
                   (double)need * 1e-9, keep ? " (+ the mmapped model)" : "",
                   copies ? " (+ the NUMA slices' copies)" : "",
                   have ? (double)mi.available * 1e-9 : 0.0);
        /* forced: refused with the numbers when the memory cannot hold it, before any copy
         * (growing into the OOM killer takes the rest of the machine with it) */
        uint64_t avail = have ? mi.available : 0;
        if (have && mi.cgroup_limit && mi.cgroup_limit < avail) avail = mi.cgroup_limit;
        if (repack && p.repack == HM_REPACK_ON && have && avail && need > avail) {
            st = hm_errorf(HM_ERR_NO_MEMORY,
                           "--repack on: the int8 copy of the weights needs %.2f MB, more than "
                           "the %.2f MB of memory available (--repack auto makes it only when it "
                           "fits, off never)",
                           (double)need * 1e-6, (double)avail * 1e-6);
            goto fail;
        }
        if (repack) c->repacked = need;
    }
    if (repack && dense_need && (st = repack_dense(c, dense_need))) goto fail;
    /* the layers run one after another: one batch scratch serves every expert engine (the
     * engines hold references; ours is dropped below) */
    hm_moe_scratch *moe_scratch = NULL;
    if ((st = hm_moe_scratch_create(&moe_scratch))) goto fail;
    for (uint32_t il = 0; il < hp->n_layers; il++) {
        const hm_layer *L = &m->layers[il];
        mmb = mm_need(c, &L->wq, mmb);
        mmb = mm_need(c, &L->wq_a, mmb);
        mmb = mm_need(c, &L->wq_b, mmb);
        mmb = mm_need(c, &L->wkv_a, mmb);
        mmb = mm_need(c, &L->wk, mmb);
        mmb = mm_need(c, &L->wv, mmb);
        mmb = mm_need(c, &L->wo, mmb);
        if (L->k_bq.rows && L->v_bq.rows) { /* mla.c's per-head views of them */
            hm_matrix k = L->k_bq, v = L->v_bq;
            k.rows = hp->kv_lora_rank, v.rows = hp->v_head_dim;
            mmb = mm_need(c, &k, mmb);
            mmb = mm_need(c, &v, mmb);
        }
        if (!L->moe) {
            mmb = mm_need(c, &L->ffn_gate, mmb);
            mmb = mm_need(c, &L->ffn_up, mmb);
            mmb = mm_need(c, &L->ffn_down, mmb);
            continue;
        }
        mmb = mm_need(c, &L->router, mmb);
        if (L->sh_gate.rows) {
            mmb = mm_need(c, &L->sh_gate, mmb);
            mmb = mm_need(c, &L->sh_up, mmb);
            mmb = mm_need(c, &L->sh_down, mmb);
        }
        if (!cpu_experts(c, il)) continue;
        hm_moe_params mp = hm_moe_default_params();
        mp.n_experts = (int)hp->n_experts;
        mp.hidden = hp->hidden;
        mp.inter = hp->moe_inter;
        mp.experts = L->experts;
        mp.mask = gpu_mask(c, il);
        mp.act = hp->act == HM_ACT_SWIGLU_OAI ? HM_MOE_SWIGLU_OAI
                 : hp->act == HM_ACT_GELU     ? HM_MOE_GELU
                                              : HM_MOE_SILU;
        mp.swiglu_alpha = hp->swiglu_alpha, mp.swiglu_limit = hp->swiglu_limit;
        mp.pool = c->pool;
        mp.max_tokens = p.n_batch;
        mp.no_amx = p.no_amx;
        mp.repack = repack;
        mp.scratch = moe_scratch;
        mp.n_slices = c->n_slices > 1 ? c->n_slices : 0;
        mp.slice_copy = slice_copy;
        if ((st = hm_moe_create(&mp, &c->moe[il]))) {
            st = hm_errorf(st, "%s: layer %u experts: %s", m->path, il, hm_last_error());
            hm_moe_scratch_free(moe_scratch);
            goto fail;
        }
    }
    hm_moe_scratch_free(moe_scratch);
    if (c->n_slices > 1)
        hm_log(HM_LOG_INFO, "NUMA: routed experts in %d slices (%s), their weights %s", c->n_slices,
               c->n_slices == hm_topology_get()->n_nodes ? "one per node" : "emulated",
               slice_copy ? "copied to their threads' nodes" : "read in place");
    c->mm_scratch = hm_malloc_aligned(mmb ? mmb : 64, 64, "ctx matmul scratch");
    if (!c->mm_scratch) {
        st = hm_errorf(HM_ERR_NO_MEMORY, "context: out of memory (%zu bytes of matmul scratch)",
                       mmb);
        goto fail;
    }
    /* the forward graph over the layers this context reads */
    const hm_arch_desc *ad = hm_arch_desc_get(hp->arch);
    if (!ad || !ad->build) {
        st = hm_errorf(HM_ERR_UNSUPPORTED, "context: architecture '%s' does not run yet (runs: %s)",
                       hp->model_type, hm_arch_list(HM_ARCH_RUNS));
        goto fail;
    }
    if (!on_gpu && (st = ad->build(m, c->layers, &c->graph))) goto fail;
    if (on_gpu) {
        bool any_cpu = false;
        for (uint32_t il = 0; il < hp->n_layers; il++) any_cpu |= c->moe[il] != NULL;
        const hm_cuda_ctx_params gp = {.device = p.gpu,
                                       .n_batch = p.n_batch,
                                       .n_ctx = (int)c->kv_ctx,
                                       .n_seq = p.n_seq,
                                       .kv_f16 = p.kv_f16,
                                       .bf16 = p.gpu_bf16,
                                       .defer = p.defer,
                                       .prefill_stream = c->prefill_stream,
                                       .dynamic = p.dynamic_experts,
                                       .gpu_experts = c->plan.gpu,
                                       .cpu_moe = any_cpu ? c->moe : NULL};
        if ((st = hm_cuda_ctx_create(m, &c->graph, &gp, &c->cu))) goto fail;
    }
    *out = c;
    return HM_OK;
fail:
    hm_ctx_free(c);
    return st;
}

typedef struct fin_arg {
    const int32_t *rows;
    const float *norm;
} fin_arg;

/* Dynamic NTK: the frequencies of each sequence of the batch for its length at the end of the
 * batch, as transformers computes them per forward call from its largest position; once per
 * sequence and length, before the tokens' rotations read them. */
static void dynamic_freqs(hm_ctx *c, int n) {
    const hm_hparams *hp = &c->m->hp;
    if (hp->rope_type != HM_ROPE_DYNAMIC) return;
    for (int i = 0; i < n; i++) {
        const int s = c->seq[i];
        const int64_t len = c->seq_next[s];
        if (!hm_rope_dynamic(hp, len) || c->inv_seq_len[s] == len) continue;
        float af;
        hm_rope_freqs(hp, len, c->inv_seq + (size_t)s * (hp->rope_dim / 2), &af);
        c->inv_seq_len[s] = len;
    }
}

/* the cos/sin of token i's rotary angles for every layer */
static void rope_tok(hm_ctx *c, int i, void *arg) {
    (void)arg;
    const hm_hparams *hp = &c->m->hp;
    const int rd = (int)hp->rope_dim;
    float *cs = c->rope_cs + (size_t)i * (size_t)rd;
    const int s = c->seq[i];
    const float *inv = hm_rope_dynamic(hp, c->seq_next[s])
                           ? c->inv_seq + (size_t)s * (size_t)(rd / 2) /* dynamic_freqs */
                           : c->inv_freq;
    hm_rope_cos_sin(c->pos[i], inv, rd, cs);
    if (c->rope_attn != 1.0f)
        for (int j = 0; j < rd; j++) cs[j] *= c->rope_attn;
}

/* token i's embedding row, and its rotary cos/sin */
static void embed_tok(hm_ctx *c, int i, void *arg) {
    const int32_t *tokens = arg;
    const hm_matrix *e = &c->m->tok_embd;
    hm_dequantize_row(e->type, (const uint8_t *)e->data + (size_t)tokens[i] * e->row_bytes,
                      c->x + (size_t)i * c->m->hp.hidden, e->cols);
    rope_tok(c, i, NULL);
}

static void final_norm(hm_ctx *c, int i, void *arg) {
    const fin_arg *a = arg;
    const size_t H = c->m->hp.hidden;
    hm_rmsnorm(c->x + (size_t)a->rows[i] * H, a->norm, c->xn + (size_t)i * H, (int64_t)H,
               c->m->hp.norm_eps);
}

/* true when x[0..n) holds no NaN or inf: x * 0 is 0 for finite x and NaN otherwise; eight
 * independent sums keep it a vector loop */
static bool all_finite(const float *x, size_t n) {
    float acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += x[i + k] * 0.0f;
    for (; i < n; i++) acc[0] += x[i] * 0.0f;
    float s = 0;
    for (int k = 0; k < 8; k++) s += acc[k];
    return s == 0.0f;
}

static hm_status not_finite(const hm_ctx *c, const char *what, int i) {
    return hm_errorf(HM_ERR_NUMERIC,
                     "decode: the %s of batch index %d (sequence %d, position %d) hold NaN or "
                     "inf: the model's weights (or scales) hold NaN or inf, or an activation "
                     "overflowed",
                     what, i, c->seq[i], c->pos[i]);
}

/* A GPU step's time since t0: the GPU's parts when it times them (HMOE_CUDA_PROFILE=1), the
 * rest of the step (rope, transfers, the host's waiting) under output; else the whole step
 * under output (the GPU runs it as one). */
static void gpu_step_time(hm_ctx *c, uint64_t t0) {
    double ms[HM_PROF_COUNT];
    if (hm_cuda_ctx_prof(c->cu, ms)) {
        uint64_t sum = 0;
        for (int p = 0; p < HM_PROF_COUNT; p++) {
            const uint64_t ns = (uint64_t)(ms[p] * 1e6);
            c->prof_ns[p] += ns;
            sum += ns;
        }
        const uint64_t wall = hm_time_ns() - t0;
        c->prof_ns[HM_PROF_OUTPUT] += wall > sum ? wall - sum : 0;
        return;
    }
    hm_ctx_prof(c, HM_PROF_OUTPUT, &t0);
}

/* The batch on the GPU (HM_DEVICE_CUDA): the host computes the rotary cos/sin (every scaling
 * variant of model/rope.h, as the CPU path) and the GPU everything else. */
static hm_status decode_gpu(hm_ctx *c, const int32_t *tokens, int n, const uint8_t *want,
                            float *logits, int k, int32_t *ids, float *vals) {
    const hm_hparams *hp = &c->m->hp;
    uint64_t t0 = hm_time_ns();
    hm_ctx_for_tokens(c, n, rope_tok, NULL);
    int32_t *rows = c->ids; /* holds >= n entries */
    int nw = 0, bad = -1;
    for (int i = 0; (logits || k) && i < n; i++)
        if (!want || want[i]) rows[nw++] = i;
    hm_status st =
        k ? hm_cuda_ctx_decode_top(c->cu, n, tokens, c->seq, c->pos, c->rope_cs, rows, nw, k, ids,
                                   vals, &bad)
          : hm_cuda_ctx_decode(c->cu, n, tokens, c->seq, c->pos, c->rope_cs, rows, nw, logits);
    if (st) return st;
    memcpy(c->seq_len, c->seq_next, sizeof(int32_t) * (size_t)c->p.n_seq);
    for (int r = 0; !k && bad < 0 && r < nw; r++)
        if (!all_finite(logits + (size_t)r * hp->vocab_size, hp->vocab_size)) bad = r;
    if (bad >= 0) return not_finite(c, "logits", rows[bad]);
    gpu_step_time(c, t0);
    return HM_OK;
}

/* The batch's checks, sequences and positions (c->seq, c->pos, c->seq_next) */
static hm_status prepare(hm_ctx *c, const int32_t *tokens, const int32_t *seq, int n) {
    const hm_hparams *hp = &c->m->hp;
    if (!tokens) return hm_errorf(HM_ERR_INVALID_ARG, "decode: no tokens given");
    if (n > c->p.n_batch)
        return hm_errorf(HM_ERR_INVALID_ARG, "decode: %d tokens in one batch, the context takes %d",
                         n, c->p.n_batch);
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= hp->vocab_size)
            return hm_errorf(HM_ERR_INVALID_ARG,
                             "decode: token %d (at batch index %d) is outside the vocabulary "
                             "[0, %u)",
                             tokens[i], i, hp->vocab_size);
        int s = seq ? seq[i] : 0;
        if (s < 0 || s >= c->p.n_seq)
            return hm_errorf(HM_ERR_INVALID_ARG,
                             "decode: sequence %d (at batch index %d) is outside [0, %d)", s, i,
                             c->p.n_seq);
        c->seq[i] = s;
    }
    /* positions: each sequence continues where its cache ends */
    memcpy(c->seq_next, c->seq_len, sizeof(int32_t) * (size_t)c->p.n_seq);
    for (int i = 0; i < n; i++) {
        const int s = c->seq[i];
        c->pos[i] = c->seq_next[s]++;
        if (c->pos[i] >= c->p.n_ctx)
            return hm_errorf(HM_ERR_INVALID_ARG,
                             "decode: sequence %d would reach position %d, past the context size "
                             "%d (%d positions already cached)",
                             s, c->pos[i] + 1, c->p.n_ctx, c->seq_len[s]);
    }
    dynamic_freqs(c, n);
    return HM_OK;
}

hm_status hm_ctx_decode_top(hm_ctx *c, const int32_t *tokens, const int32_t *seq, int n,
                            const uint8_t *want, int k, int32_t *ids, float *vals) {
    if (n <= 0) return HM_OK;
    if (!c->cu)
        return hm_errorf(HM_ERR_UNSUPPORTED, "decode_top: a context on the CPU gives logits "
                                             "(hm_ctx_decode); candidates come from a GPU");
    if (k < 1 || k > HM_SAMPLER_MAX_CANDIDATES || (uint32_t)k >= c->m->hp.vocab_size || !ids ||
        !vals)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "decode_top: %d candidates per row (1 to %d, below "
                         "the vocabulary), ids and vals given",
                         k, HM_SAMPLER_MAX_CANDIDATES);
    hm_status st = prepare(c, tokens, seq, n);
    if (st) return st;
    return decode_gpu(c, tokens, n, want, NULL, k, ids, vals);
}

hm_status hm_ctx_decode(hm_ctx *c, const int32_t *tokens, const int32_t *seq, int n,
                        const uint8_t *want, float *logits) {
    const hm_hparams *hp = &c->m->hp;
    if (n <= 0) return HM_OK;
    hm_status st0 = prepare(c, tokens, seq, n);
    if (st0) return st0;
    if (c->cu) return decode_gpu(c, tokens, n, want, logits, 0, NULL, NULL);
    uint64_t t0 = hm_time_ns();
    hm_ctx_for_tokens(c, n, embed_tok, (void *)tokens);
    hm_ctx_prof(c, HM_PROF_EMBED, &t0);
    const hm_backend be = hm_ctx_cpu_backend(c);
    hm_status st = be.i->compute(be.self, &c->graph, n);
    if (st) return st;
    memcpy(c->seq_len, c->seq_next, sizeof(int32_t) * (size_t)c->p.n_seq);
    if (!logits) return HM_OK;
    t0 = hm_time_ns();
    int32_t *rows = c->ids; /* free now; holds >= n entries */
    int nw = 0;
    for (int i = 0; i < n; i++)
        if (!want || want[i]) rows[nw++] = i;
    /* NaN or inf in the weights or activations is reported, never turned into plausible logits
     * (a quantized output matmul would quantize a NaN activation into finite values) */
    for (int r = 0; r < nw; r++)
        if (!all_finite(c->x + (size_t)rows[r] * hp->hidden, hp->hidden))
            return not_finite(c, "hidden state", rows[r]);
    fin_arg fa = {rows, c->m->output_norm};
    hm_ctx_for_tokens(c, nw, final_norm, &fa);
    hm_ctx_matmul(c, &c->m->output, c->xn, nw, logits);
    for (int r = 0; r < nw; r++)
        if (!all_finite(logits + (size_t)r * hp->vocab_size, hp->vocab_size))
            return not_finite(c, "logits", rows[r]);
    hm_ctx_prof(c, HM_PROF_OUTPUT, &t0);
    return HM_OK;
}
