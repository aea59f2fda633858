/* bench.c - `hmoe bench cuda`: the kernels of a decode step of a GQA MoE model, each alone. Each
 * case launches its kernel `iters` times over copies of its weights (so that the L2 cache holds
 * no launch's weights from the one before), captured as one CUDA graph with programmatic
 * dependent launch as a decode step's graph is, and times the graph's replays. The bound is the
 * same run's device-to-device copy (read + written bytes per second). */
#include "cuda/cuda.h"

#ifdef HM_CUDA_HOST
#include "cuda/host/rt.h"
#else
#include <cuda_runtime.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kernels.h"
#include "quant/synth.h"
#include "quant/types.h"

#define CK(call, what)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            st = hm_errorf(HM_ERR_DEVICE, "bench cuda: %s: %s (%s)", what, cudaGetErrorString(e_), \
                           cudaGetErrorName(e_));                                                  \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

enum { MAX_COPIES = 256, REPLAYS = 3 };

/* one case: its launch i (of iters) on stream s */
typedef struct bcase bcase;
struct bcase {
    const char *name;
    char shape[96];
    double bytes; /* weight (or cache) bytes one launch reads */
    int copies;   /* of the weights, cycled */
    hm_cu_w w[3]; /* copy 0; copy c at data + c * wbytes[i] */
    size_t wbytes[3];
    int nw;
    const int32_t *ids; /* experts: [iters][tokens * top_k] */
    /* 0 matvec(s), 1 experts' gate/up + GLU, 2 experts' down, 3 attention; no weights: 4 an
     * empty kernel (256 floats: the launch's own cost), 5 add + rmsnorm, 6 router top-k, 7 the
     * experts' weighted sum; 8 the router's matvec and top-k in one launch (as decode runs them) */
    int kind;
};

typedef struct bench {
    const hm_cuda_bench_params *p;
    cudaStream_t s;
    float *x, *y, *g;      /* activations [tokens][max cols], outputs */
    int32_t *ids;          /* [iters][tokens * top_k] */
    float *q, *att, *part; /* attention */
    int32_t *pos, *seq;
    void *kv;
    hm_cu_kv cache;
    int splits;
    float *res, *nw, *wts; /* residual [tokens][hidden], norm weights, top-k weights */
    int32_t *top;          /* top-k ids */
    unsigned *cnt;         /* attention's counters: its last split merges, as in decode */
    unsigned *rcnt;        /* the fused router's */
} bench;

static cudaError_t launch(bench *b, const bcase *c, int i) {
    const hm_cuda_bench_params *p = b->p;
    const int n = p->tokens, cp = i % c->copies;
    hm_cu_w w[3];
    for (int k = 0; k < c->nw; k++) {
        w[k] = c->w[k];
        w[k].data = (const uint8_t *)c->w[k].data + (size_t)cp * c->wbytes[k];
    }
    switch (c->kind) {
    case 0: {
        float *y[3] = {b->y, b->y + n * w[0].rows, b->y + n * (w[0].rows + w[1].rows)};
        const int64_t ys[3] = {w[0].rows, w[1].rows, w[2].rows};
        return c->nw == 1 ? hm_cu_matvec(&w[0], b->x, w[0].cols, n, b->y, w[0].rows, b->s)
                          : hm_cu_matvec_multi(w, c->nw, b->x, w[0].cols, n, y, ys, b->s);
    }
    case 1:
        return hm_cu_matvec_experts_glu(&w[0], &w[1], NULL, NULL,
                                        c->ids + (size_t)i * (size_t)(n * p->top_k),
                                        n * (int)p->top_k, b->x, w[0].cols, (int)p->top_k, 0, 0.0f,
                                        0.0f, b->g, w[0].rows, b->s);
    case 2:
        return hm_cu_matvec_experts(&w[0], c->ids + (size_t)i * (size_t)(n * p->top_k),
                                    n * (int)p->top_k, b->g, w[0].cols, 1, b->y, w[0].rows, b->s);
    case 4:
        return hm_cuda_launch_axpb(b->x, b->g, 1.0f, 0.0f, 256, b->s);
    case 5:
        return hm_cu_rmsnorm(b->res, b->y, b->nw, b->g, NULL, n, p->hidden, 1e-6f, b->s);
    case 6:
        return hm_cu_router_topk(b->x, p->n_experts, n, (int)p->n_experts, (int)p->top_k, true,
                                 b->top, b->wts, b->s);
    case 7:
        return hm_cu_moe_combine(b->y, p->hidden, NULL, b->wts, n, (int)p->top_k, p->hidden, b->res,
                                 p->hidden, b->s);
    case 8:
        return hm_cu_router_fused(&w[0], b->x, w[0].cols, n, (int)p->top_k, true, b->y, w[0].rows,
                                  b->top, b->wts, b->rcnt, b->s);
    default: {
        const hm_cu_attn a = {b->q,
                              p->n_heads * p->head_dim,
                              b->att,
                              p->n_heads * p->head_dim,
                              (int)p->n_heads,
                              0.0883883f,
                              b->pos,
                              b->seq,
                              cp,
                              NULL,
                              0,
                              b->cnt};
        return hm_cu_attention(&a, &b->cache, n, b->part, b->splits, b->s);
    }
    }
}

/* the case's launches as one graph: *us the best replay's microseconds per launch */
static hm_status time_case(bench *b, const bcase *c, double *us) {
    hm_status st = HM_OK;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ex = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    const int iters = b->p->iters;
    CK(cudaEventCreate(&e0), "cudaEventCreate");
    CK(cudaEventCreate(&e1), "cudaEventCreate");
    hm_cu_pdl_allow(true);
    CK(cudaStreamBeginCapture(b->s, cudaStreamCaptureModeThreadLocal), "graph capture");
    cudaError_t le = cudaSuccess;
    for (int i = 0; i < iters && le == cudaSuccess; i++) le = launch(b, c, i);
    const cudaError_t ce = cudaStreamEndCapture(b->s, &g);
    hm_cu_pdl_allow(false);
    CK(le, c->name);
    CK(ce, "graph capture");
    CK(cudaGraphInstantiate(&ex, g, 0), "cudaGraphInstantiate");
    CK(cudaGraphLaunch(ex, b->s), "cudaGraphLaunch (warm-up)");
    CK(cudaStreamSynchronize(b->s), c->name);
    float best = 0;
    for (int r = 0; r < REPLAYS; r++) {
        CK(cudaEventRecord(e0, b->s), "cudaEventRecord");
        CK(cudaGraphLaunch(ex, b->s), "cudaGraphLaunch");
        CK(cudaEventRecord(e1, b->s), "cudaEventRecord");
        CK(cudaEventSynchronize(e1), c->name);
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
        if (r == 0 || ms < best) best = ms;
    }
    *us = (double)best * 1e3 / iters;
done:
    if (ex) cudaGraphExecDestroy(ex);
    if (g) cudaGraphDestroy(g);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    return st;
}

static size_t copies_for(size_t one, size_t min_bytes) {
    size_t n = one ? (min_bytes + one - 1) / one : 1;
    return n < 1 ? 1 : (n > MAX_COPIES ? MAX_COPIES : n);
}

/* a matrix of `count` x rows x cols random values of type t, `copies` times, on the device */
static hm_status make_weights(uint32_t t, int64_t count, int64_t rows, int64_t cols, int copies,
                              uint64_t seed, hm_cu_w *w, size_t *bytes) {
    hm_status st = HM_OK;
    uint64_t rb = 0;
    void *h = NULL, *d = NULL;
    if (!hm_type_row_bytes(t, (uint64_t)cols, &rb))
        return hm_errorf(HM_ERR_INVALID_ARG, "bench cuda: %s rows of %lld values do not exist",
                         hm_type_name(t), (long long)cols);
    const size_t one = (size_t)rb * (size_t)(rows * count);
    h = malloc(one);
    if (!h) return hm_errorf(HM_ERR_NO_MEMORY, "bench cuda: out of host memory");
    st = hm_synth_fill(t, h, (uint64_t)(rows * count * cols), 0.0f, 0.02f, seed);
    if (st != HM_OK) goto done;
    CK(cudaMalloc(&d, one * (size_t)copies), "cudaMalloc (weights)");
    for (int c = 0; c < copies; c++)
        CK(cudaMemcpy((uint8_t *)d + (size_t)c * one, h, one, cudaMemcpyHostToDevice),
           "copy of the weights");
    *w = (hm_cu_w){t, d, rows, cols, (size_t)rb, (size_t)rb * (size_t)rows};
    *bytes = one;
    d = NULL;
done:
    if (d) cudaFree(d);
    free(h);
    return st;
}

static void free_case(bcase *c) {
    for (int k = 0; k < c->nw; k++)
        if (c->w[k].data) cudaFree((void *)c->w[k].data);
    memset(c->w, 0, sizeof c->w);
}

/* picks of top_k distinct experts out of n_experts for each token of each launch */
static void pick_ids(int32_t *ids, int iters, int tokens, int64_t n_experts, int top_k,
                     uint64_t seed) {
    for (int i = 0; i < iters * tokens; i++) {
        int32_t *t = ids + (size_t)i * (size_t)top_k;
        for (int k = 0; k < top_k; k++) {
            int32_t e;
            bool dup;
            do {
                e = (int32_t)(hm_rng_next(&seed) % (uint64_t)n_experts);
                dup = false;
                for (int j = 0; j < k; j++) dup = dup || t[j] == e;
            } while (dup);
            t[k] = e;
        }
    }
}

/* the distinct experts of launch i */
static int distinct(const int32_t *ids, int np) {
    int d = 0;
    for (int j = 0; j < np; j++) {
        bool seen = false;
        for (int k = 0; k < j; k++) seen = seen || ids[k] == ids[j];
        d += !seen;
    }
    return d;
}

static hm_status check_params(const hm_cuda_bench_params *p) {
    if (p->tokens < 1 || p->tokens > HM_CU_MATVEC_MAX)
        return hm_errorf(HM_ERR_INVALID_ARG, "bench cuda: --tokens %d: 1 to %d (a decode step)",
                         p->tokens, HM_CU_MATVEC_MAX);
    if (p->hidden < 32 || p->n_heads < 1 || p->n_kv_heads < 1 || p->n_heads % p->n_kv_heads ||
        p->head_dim < 32 || p->head_dim > 160 || p->n_experts < 1 || p->top_k < 1 ||
        p->top_k > p->n_experts || p->moe_inter < 32 || p->vocab < 1)
        return hm_errorf(HM_ERR_INVALID_ARG, "bench cuda: shapes the kernels do not take "
                                             "(a GQA MoE model's: heads, head dims 32..160)");
    if (p->ctx < 1 || p->iters < 1)
        return hm_errorf(HM_ERR_INVALID_ARG, "bench cuda: --ctx and --iters must be positive");
    if (!hm_cu_type_ok(p->attn_type) || !hm_cu_type_ok(p->experts_type))
        return hm_errorf(
            HM_ERR_INVALID_ARG, "bench cuda: no matvec kernel for %s",
            hm_type_name(hm_cu_type_ok(p->attn_type) ? p->experts_type : p->attn_type));
    return HM_OK;
}

hm_status hm_cuda_bench(const hm_cuda_bench_params *p, FILE *out) {
    hm_status st = check_params(p);
    if (st != HM_OK) return st;
    bench b;
    memset(&b, 0, sizeof b);
    enum { NC = 12 };
    bcase cs[NC];
    memset(cs, 0, sizeof cs);
    int32_t *hids = NULL;
    void *hkv = NULL;
    double copy_gbs = 0;
    struct cudaDeviceProp prop;
    const int n = p->tokens, K = (int)p->top_k;
    const int64_t H = p->hidden, QD = p->n_heads * p->head_dim, KD = p->n_kv_heads * p->head_dim;
    st =
        hm_cuda_mem_bandwidth(p->device, p->bw_bytes ? p->bw_bytes : (size_t)1 << 30, 5, &copy_gbs);
    if (st != HM_OK) return st;
    CK(cudaSetDevice(p->device), "cudaSetDevice");
    CK(cudaGetDeviceProperties(&prop, p->device), "cudaGetDeviceProperties");
    const size_t min_bytes =
        p->min_bytes ? p->min_bytes : 4 * (size_t)(prop.l2CacheSize > 0 ? prop.l2CacheSize : 1);
    CK(cudaStreamCreateWithFlags(&b.s, cudaStreamNonBlocking), "cudaStreamCreate");
    b.p = p;
    const int64_t xmax = QD > H ? (QD > p->moe_inter ? QD : p->moe_inter) : H;
    const int64_t ymax = p->vocab > QD + 2 * KD ? p->vocab : QD + 2 * KD;
    CK(cudaMalloc((void **)&b.x, sizeof(float) * (size_t)(n * xmax)), "cudaMalloc");
    CK(cudaMalloc((void **)&b.y, sizeof(float) * (size_t)(n * (ymax > H * K ? ymax : H * K))),
       "cudaMalloc");
    CK(cudaMalloc((void **)&b.g, sizeof(float) * (size_t)(n * K * p->moe_inter)), "cudaMalloc");
    {
        float *hx = malloc(sizeof(float) * (size_t)(n * xmax));
        if (!hx) {
            st = hm_errorf(HM_ERR_NO_MEMORY, "bench cuda: out of host memory");
            goto done;
        }
        uint64_t sd = 7;
        for (int64_t i = 0; i < n * xmax; i++)
            hx[i] = (float)((double)(hm_rng_next(&sd) >> 11) / 9007199254740992.0 - 0.5);
        cudaError_t e =
            cudaMemcpy(b.x, hx, sizeof(float) * (size_t)(n * xmax), cudaMemcpyHostToDevice);
        CK(e == cudaSuccess
               ? cudaMemcpy(b.g, hx,
                            sizeof(float) *
                                (size_t)(n * (K * p->moe_inter < xmax ? K * p->moe_inter : xmax)),
                            cudaMemcpyHostToDevice)
               : e,
           "copy of the activations");
        free(hx);
    }
    const size_t nid = (size_t)p->iters * (size_t)(n * K);
    hids = malloc(sizeof(int32_t) * nid);
    if (!hids) {
        st = hm_errorf(HM_ERR_NO_MEMORY, "bench cuda: out of host memory");
        goto done;
    }
    pick_ids(hids, p->iters, n, p->n_experts, K, 11);
    CK(cudaMalloc((void **)&b.ids, sizeof(int32_t) * nid), "cudaMalloc");
    CK(cudaMemcpy(b.ids, hids, sizeof(int32_t) * nid, cudaMemcpyHostToDevice), "copy of the ids");
    CK(cudaMalloc((void **)&b.res, sizeof(float) * (size_t)(n * H)), "cudaMalloc");
    CK(cudaMalloc((void **)&b.nw, sizeof(float) * (size_t)H), "cudaMalloc");
    CK(cudaMalloc((void **)&b.wts, sizeof(float) * (size_t)(n * K)), "cudaMalloc");
    CK(cudaMalloc((void **)&b.top, sizeof(int32_t) * (size_t)(n * K)), "cudaMalloc");
    CK(cudaMemcpy(b.res, b.x, sizeof(float) * (size_t)(n * H), cudaMemcpyDeviceToDevice), "copy");
    CK(cudaMemcpy(b.nw, b.x, sizeof(float) * (size_t)H, cudaMemcpyDeviceToDevice), "copy");
    CK(cudaMemset(b.y, 0, sizeof(float) * (size_t)(n * (ymax > H * K ? ymax : H * K))), "memset");
    CK(cudaMemset(b.wts, 0, sizeof(float) * (size_t)(n * K)), "memset");
    double avg_distinct = 0;
    for (int i = 0; i < p->iters; i++) avg_distinct += distinct(hids + (size_t)i * n * K, n * K);
    avg_distinct /= p->iters;

    /* the cases: matrices (name, rows per matrix, cols, type, count per copy) */
    uint64_t rb = 0;
    {
        const struct {
            const char *name;
            int kind, nw;
            int64_t rows[3], cols, count;
            uint32_t t;
        } def[7] = {
            {"q, k, v", 0, 3, {QD, KD, KD}, H, 1, p->attn_type},
            {"o", 0, 1, {H}, QD, 1, p->attn_type},
            {"router", 0, 1, {p->n_experts}, H, 1, HM_TYPE_F32},
            {"experts gate/up + GLU",
             1,
             2,
             {p->moe_inter, p->moe_inter},
             H,
             p->n_experts,
             p->experts_type},
            {"experts down", 2, 1, {H}, p->moe_inter, p->n_experts, p->experts_type},
            {"output head", 0, 1, {p->vocab}, H, 1, p->attn_type},
            {"router + top-k", 8, 1, {p->n_experts}, H, 1, HM_TYPE_F32},
        };
        for (int k = 0; k < 7; k++) {
            bcase *c = &cs[k < 6 ? k : 11];
            c->name = def[k].name, c->kind = def[k].kind, c->nw = def[k].nw;
            size_t one = 0;
            for (int m = 0; m < c->nw; m++) {
                if (!hm_type_row_bytes(def[k].t, (uint64_t)def[k].cols, &rb)) rb = 0;
                one += (size_t)rb * (size_t)(def[k].rows[m] * def[k].count);
            }
            c->copies = (int)copies_for(one, min_bytes);
            for (int m = 0; m < c->nw; m++) {
                st = make_weights(def[k].t, def[k].count, def[k].rows[m], def[k].cols, c->copies,
                                  100 + (uint64_t)(10 * k + m), &c->w[m], &c->wbytes[m]);
                if (st != HM_OK) goto done;
            }
            c->ids = b.ids;
            double bytes = 0;
            for (int m = 0; m < c->nw; m++) bytes += (double)c->w[m].row_bytes * c->w[m].rows;
            if (c->kind == 1 || c->kind == 2) bytes *= avg_distinct; /* the experts touched */
            c->bytes = bytes;
            if (c->kind == 1 || c->kind == 2)
                snprintf(c->shape, sizeof c->shape, "%s %lld of %lldx%lld, top-%d",
                         hm_type_name(def[k].t), (long long)p->n_experts, (long long)def[k].rows[0],
                         (long long)def[k].cols, K);
            else
                snprintf(c->shape, sizeof c->shape, "%s %lldx%lld", hm_type_name(def[k].t),
                         (long long)(def[k].rows[0] + def[k].rows[1] + def[k].rows[2]),
                         (long long)def[k].cols);
        }
    }
    /* attention: token i in sequence i at position ctx - 1 */
    {
        bcase *c = &cs[6];
        c->name = "attention", c->kind = 3;
        const size_t es = p->kv_f16 ? 2 : 4;
        const size_t layer = (size_t)n * (size_t)KD * (size_t)p->ctx * es; /* k or v */
        c->copies = (int)copies_for(2 * layer, min_bytes);
        c->bytes = 2.0 * (double)layer;
        snprintf(c->shape, sizeof c->shape, "%lld/%lld heads x %lld, %d pos, %s, merged",
                 (long long)p->n_heads, (long long)p->n_kv_heads, (long long)p->head_dim, p->ctx,
                 p->kv_f16 ? "f16" : "f32");
        const size_t all = layer * (size_t)c->copies;
        CK(cudaMalloc(&b.kv, 2 * all), "cudaMalloc (KV cache)");
        hkv = malloc(layer);
        if (!hkv) {
            st = hm_errorf(HM_ERR_NO_MEMORY, "bench cuda: out of host memory");
            goto done;
        }
        st = hm_synth_fill(p->kv_f16 ? HM_TYPE_F16 : HM_TYPE_F32, hkv, layer / es, 0.0f, 0.5f, 5);
        if (st != HM_OK) goto done;
        for (size_t o = 0; o < 2 * all; o += layer)
            CK(cudaMemcpy((uint8_t *)b.kv + o, hkv, layer, cudaMemcpyHostToDevice),
               "copy of the KV cache");
        b.cache = (hm_cu_kv){b.kv, (uint8_t *)b.kv + all, p->kv_f16,        p->ctx,
                             n,    (int)p->n_kv_heads,    (int)p->head_dim, 0};
        b.splits = hm_cu_attention_splits(p->ctx);
        int32_t hp[HM_CU_MATVEC_MAX], hs[HM_CU_MATVEC_MAX];
        for (int i = 0; i < n; i++) hp[i] = p->ctx - 1, hs[i] = i;
        CK(cudaMalloc((void **)&b.pos, sizeof hp), "cudaMalloc");
        CK(cudaMalloc((void **)&b.seq, sizeof hs), "cudaMalloc");
        CK(cudaMemcpy(b.pos, hp, sizeof hp, cudaMemcpyHostToDevice), "copy");
        CK(cudaMemcpy(b.seq, hs, sizeof hs, cudaMemcpyHostToDevice), "copy");
        b.q = b.x; /* n x QD floats */
        CK(cudaMalloc((void **)&b.att, sizeof(float) * (size_t)(n * QD)), "cudaMalloc");
        CK(cudaMalloc((void **)&b.cnt, sizeof(unsigned) * (size_t)(n * p->n_heads)), "cudaMalloc");
        CK(cudaMemset(b.cnt, 0, sizeof(unsigned) * (size_t)(n * p->n_heads)), "memset");
        CK(cudaMalloc((void **)&b.rcnt, sizeof(unsigned) * (size_t)n), "cudaMalloc");
        CK(cudaMemset(b.rcnt, 0, sizeof(unsigned) * (size_t)n), "memset");
        CK(cudaMalloc((void **)&b.part,
                      sizeof(float) * (size_t)(n * p->n_heads * b.splits * (p->head_dim + 2))),
           "cudaMalloc");
    }
    /* the kernels without weights */
    static const char *const small[4] = {"empty kernel", "add + rmsnorm", "router top-k",
                                         "experts' weighted sum"};
    for (int k = 0; k < 4; k++) {
        bcase *c = &cs[7 + k];
        c->name = small[k], c->kind = 4 + k, c->copies = 1;
        if (k == 0)
            snprintf(c->shape, sizeof c->shape, "256 floats (the launch's own cost)");
        else if (k == 2)
            snprintf(c->shape, sizeof c->shape, "%lld logits, top-%d", (long long)p->n_experts, K);
        else
            snprintf(c->shape, sizeof c->shape, "%lld floats%s", (long long)H,
                     k == 3 ? " x top-k" : "");
    }
    fprintf(out,
            "bench cuda: %s (%d SMs, L2 %.0f MiB); same-run device copy %.1f GB/s (read + "
            "written); %d token%s per step, %d launches per graph (PDL), best of %d replays; "
            "weights cycled over copies of at least %.0f MiB\n",
            prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1048576.0, copy_gbs, n,
            n > 1 ? "s" : "", p->iters, REPLAYS, min_bytes / 1048576.0);
    fprintf(out, "%-22s %-40s %10s %8s %10s %10s\n", "kernel", "shape", "MB/launch", "copies",
            "us/launch", "GB/s");
    double tot_us = 0, tot_mb = 0;
    for (int k = 0; k < NC; k++) {
        double us = 0;
        st = time_case(&b, &cs[k], &us);
        if (st != HM_OK) goto done;
        const double gbs = cs[k].bytes / (us * 1e-6) * 1e-9;
        if (cs[k].bytes > 0)
            fprintf(out, "%-22s %-40s %10.2f %8d %10.2f %10.1f  (%.1f%% of copy)\n", cs[k].name,
                    cs[k].shape, cs[k].bytes / 1e6, cs[k].copies, us, gbs, 100.0 * gbs / copy_gbs);
        else
            fprintf(out, "%-22s %-40s %10s %8s %10.2f %10s\n", cs[k].name, cs[k].shape, "-", "-",
                    us, "-");
        /* a decode layer runs the router and its top-k as the fused launch (11) */
        if (k != 5 && k != 7 && k != 2 && k != 9) tot_us += us, tot_mb += cs[k].bytes / 1e6;
        free_case(&cs[k]);
    }
    fprintf(out,
            "a layer's kernels (the rows above but the output head, the empty kernel and the "
            "router's two unfused launches; add + rmsnorm once): %.1f us, %.2f MB: %.1f GB/s "
            "(%.1f%% of copy)\n",
            tot_us, tot_mb, tot_mb / tot_us * 1e3, 100.0 * tot_mb * 1e3 / tot_us / copy_gbs);
    st = HM_OK;
done:
    for (int k = 0; k < NC; k++) free_case(&cs[k]);
    if (b.s) cudaStreamSynchronize(b.s), cudaStreamDestroy(b.s);
    cudaFree(b.x), cudaFree(b.y), cudaFree(b.g), cudaFree(b.ids), cudaFree(b.kv);
    cudaFree(b.pos), cudaFree(b.seq), cudaFree(b.att), cudaFree(b.part);
    cudaFree(b.res), cudaFree(b.nw), cudaFree(b.wts), cudaFree(b.top), cudaFree(b.cnt);
    cudaFree(b.rcnt);
    free(hids);
    free(hkv);
    return st;
}
