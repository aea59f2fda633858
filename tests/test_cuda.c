/* test_cuda.c - the GPU backend. Device queries agree with nvidia-smi; every kernel against its
 * CPU twin on random inputs (every weight type, odd shapes, long contexts, f16 and f32 caches);
 * the Qwen3-MoE fixtures on --device cuda against transformers' logits with the CPU's bounds
 * (fixture.h). Skips (77) where no GPU is usable; on a CPU-only build it checks that every entry
 * point says so clearly. */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "cpu/nn.h"
#include "cpu/ops.h"
#include "hmoe_moe.h"
#include "cuda/cuda.h"
#include "cuda/dq.h"
#include "cuda/twins.h"
#include "model/convert.h"
#include "model/model.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/ref.h"
#include "quant/types.h"
#include "test.h"
#include "fixture.h"

#ifdef HMOE_HAVE_CUDA
#ifdef HM_CUDA_HOST
#include "cuda/host/rt.h"
#else
#include <cuda_runtime.h>
#endif

#include "cuda/kernels.h"
#endif

/* the device selection of a context without a GPU: a clear refusal, no crash */
static void check_ctx_refused(void) {
    hm_model *m = NULL;
    CHECK_OK(hm_model_load(HMOE_SOURCE_DIR "/tests/data/qwen3moe/a", &m));
    if (!m) return;
    hm_ctx_params cp = hm_ctx_default_params();
    cp.device = HM_DEVICE_CUDA;
    cp.n_ctx = 32;
    hm_ctx *c = NULL;
    CHECK_STATUS(hm_ctx_create(m, &cp, &c), HM_ERR_UNSUPPORTED);
    CHECK(c == NULL);
    CHECK_MSG(strstr(hm_last_error(), "built without CUDA") ||
                  strstr(hm_last_error(), "no usable GPU"),
              "%s", hm_last_error());
    cp.device = (hm_device)7;
    CHECK_STATUS(hm_ctx_create(m, &cp, &c), HM_ERR_INVALID_ARG);
    cp.device = HM_DEVICE_CPU, cp.defer = -1; /* deferral's count is checked on every device */
    CHECK_STATUS(hm_ctx_create(m, &cp, &c), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "defer -1");
    cp.defer = 0, cp.gpu_prefill_threshold = -2; /* tokens, auto (0) or off (-1) */
    CHECK_STATUS(hm_ctx_create(m, &cp, &c), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "gpu_prefill_threshold -2");
    hm_model_free(m);
}

/* the sampler's order: larger first (-0 equal to +0), ties to the lower token */
static const float *g_top_row;
static int top_order(const void *a, const void *b) {
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    const float x = g_top_row[i] + 0.0f, y = g_top_row[j] + 0.0f;
    if (x != y) return x > y ? -1 : 1;
    return i < j ? -1 : i > j;
}
static int id_order(const void *a, const void *b) {
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    return i < j ? -1 : i > j;
}

typedef struct gen_rec {
    int32_t ids[64];
    int n;
} gen_rec;
static bool gen_token(int32_t id, const char *text, size_t len, void *user) {
    (void)text, (void)len;
    gen_rec *g = user;
    if (id >= 0 && g->n < 64) g->ids[g->n++] = id;
    return true;
}

/* --device auto: the GPU when there is one (the fixtures all have kernels there), else the CPU;
 * HMOE_DEVICE decides instead */
static void check_auto(bool gpu) {
    static const char *const paths[] = {HMOE_SOURCE_DIR "/tests/data/qwen3moe/a",
                                        HMOE_SOURCE_DIR "/tests/data/deepseek/v2a"};
    for (int i = 0; i < 2; i++) {
        hm_model *m = NULL;
        CHECK_OK(hm_model_load(paths[i], &m));
        if (!m) continue;
        hm_ctx_params cp = hm_ctx_default_params();
        cp.n_ctx = 32;
        CHECK(cp.device == HM_DEVICE_AUTO);
        hm_ctx *c = NULL;
        unsetenv("HMOE_DEVICE");
        CHECK_OK(hm_ctx_create(m, &cp, &c));
        if (c) CHECK(hm_ctx_device(c) == (gpu ? HM_DEVICE_CUDA : HM_DEVICE_CPU));
        hm_ctx_free(c), c = NULL;
        setenv("HMOE_DEVICE", "cpu", 1);
        CHECK_OK(hm_ctx_create(m, &cp, &c));
        if (c) CHECK(hm_ctx_device(c) == HM_DEVICE_CPU);
        if (c) { /* candidates come from a GPU */
            const int32_t tok = 1;
            int32_t cid[2];
            float cv[2];
            CHECK_STATUS(hm_ctx_decode_top(c, &tok, NULL, 1, NULL, 2, cid, cv), HM_ERR_UNSUPPORTED);
        }
        hm_ctx_free(c), c = NULL;
        setenv("HMOE_DEVICE", "gpu", 1);
        CHECK_STATUS(hm_ctx_create(m, &cp, &c), HM_ERR_INVALID_ARG);
        CHECK_CONTAINS(hm_last_error(), "HMOE_DEVICE=gpu");
        setenv("HMOE_DEVICE", "cuda", 1);
        if (!gpu) CHECK_STATUS(hm_ctx_create(m, &cp, &c), HM_ERR_UNSUPPORTED);
        CHECK(c == NULL);
        hm_ctx_free(c);
        unsetenv("HMOE_DEVICE");
        hm_model_free(m);
    }
}

/* the Qwen3-MoE fixtures on the GPU: the CPU's bounds against transformers */
static void check_model_gpu(const char *name, bool kv_f16, int gpu_experts,
                            hm_place_strategy strategy) {
    fixture f;
    hm_model *m;
    if (!fixture_open(name, &f, &m)) return;
    const int V = f.vocab;
    hm_ctx_params cp = hm_ctx_default_params();
    cp.device = HM_DEVICE_CUDA;
    cp.n_ctx = 64;
    cp.n_seq = f.n_prompts;
    cp.n_batch = 64;
    cp.kv_f16 = kv_f16;
    cp.gpu_experts = gpu_experts;
    cp.placement = strategy;
    cp.place_seed = 3;
    const double tol = kv_f16 ? 1e-2 : 1e-3;
    hm_ctx *c = NULL;
    CHECK_OK(hm_ctx_create(m, &cp, &c));
    char place[256] = "";
    if (c) hm_ctx_placement(c, place, sizeof place);
    printf("  cuda %s: %s\n", name, place);
    if (!c) {
        hm_model_free(m);
        return free_fixture(&f);
    }
    float *lg = malloc(sizeof(float) * 64 * (size_t)V);
    int total = 0;
    for (int i = 0; i < f.n_prompts; i++) {
        const int n = f.len[i];
        total += n;
        /* the whole prompt in one batch (the GEMM path from 9 tokens) */
        hm_ctx_seq_reset(c, 0);
        CHECK_OK(hm_ctx_decode(c, f.prompt[i], NULL, n, NULL, lg));
        const double e = rel_err(lg, f.logits[i], (size_t)n * (size_t)V);
        printf("  cuda %s prompt %d (%d tokens)%s, %d experts/layer on the GPU: rel error %.2e\n",
               name, i, n, kv_f16 ? " f16 KV" : "", gpu_experts, e);
        CHECK_MSG(e <= tol, "cuda %s prompt %d: logits rel error %.3g > %.0e", name, i, e, tol);
        /* the last row's sampling candidates: the same step's logits, selected on the GPU */
        if (i == f.n_prompts - 1 && V > 8) {
            int32_t cid[8], ref[8], *ord = malloc(sizeof(int32_t) * (size_t)V);
            float cv[8];
            uint8_t want[64] = {0};
            want[n - 1] = 1;
            hm_ctx_seq_reset(c, 0);
            CHECK_OK(hm_ctx_decode_top(c, f.prompt[i], NULL, n, want, 8, cid, cv));
            const float *last = lg + (size_t)(n - 1) * (size_t)V;
            for (int t = 0; t < V; t++) ord[t] = t;
            g_top_row = last;
            qsort(ord, (size_t)V, sizeof *ord, top_order);
            memcpy(ref, ord, sizeof ref);
            qsort(ref, 8, sizeof *ref, id_order);
            CHECK_MSG(memcmp(cid, ref, sizeof ref) == 0, "cuda %s: decode_top's candidates", name);
            /* one wanted row goes through the matvec kernel, a whole prompt's rows through the
             * tile path: the same logits to rounding */
            for (int j = 0; j < 8; j++)
                CHECK_MSG(fabsf(cv[j] - last[ref[j]]) <= 1e-4f * (1.0f + fabsf(last[ref[j]])),
                          "cuda %s: candidate %d: %g, the row's %g", name, j, (double)cv[j],
                          (double)last[ref[j]]);
            free(ord);
        }
        /* greedy continuation, one token at a time (the matvec path) */
        memmove(lg, lg + (size_t)(n - 1) * (size_t)V, sizeof(float) * (size_t)V);
        const int same = fixture_greedy(c, &f, i, lg);
        CHECK_MSG(same == 32 || kv_f16, "cuda %s prompt %d: greedy continuation differs at %d",
                  name, i, same);
        /* hm_generate's greedy run on the GPU: its tokens come from candidates selected there */
        if (i == 0 && !kv_f16) {
            hm_sampler_params sp = hm_sampler_default_params();
            sp.temperature = 0.0f;
            hm_sampler *smp = NULL;
            CHECK_OK(hm_sampler_create(&sp, V, &smp));
            hm_generate_params gp = hm_generate_default_params();
            gp.n_predict = 32, gp.ignore_eos = true;
            gen_rec g = {.n = 0};
            hm_ctx_seq_reset(c, 0);
            if (smp) CHECK_OK(hm_generate(c, smp, NULL, f.prompt[i], n, &gp, gen_token, &g, NULL));
            int eq = 0;
            while (eq < g.n && eq < 32 && g.ids[eq] == f.greedy[i][eq]) eq++;
            CHECK_MSG(eq == 32, "cuda %s: hm_generate's greedy tokens differ at %d", name, eq);
            hm_sampler_free(smp);
        }
        /* token by token */
        const double ei = fixture_token_by_token(c, &f, i, lg);
        CHECK_MSG(ei <= tol, "cuda %s prompt %d: token-by-token rel error %.3g", name, i, ei);
    }
    /* every prompt at once, as separate sequences of one batch; only each last row wanted */
    if (total <= 64) {
        int32_t tok[64], seq[64];
        uint8_t want[64] = {0};
        int n = 0;
        for (int i = 0; i < f.n_prompts; i++) {
            hm_ctx_seq_reset(c, i);
            for (int k = 0; k < f.len[i]; k++) tok[n] = f.prompt[i][k], seq[n++] = i;
            want[n - 1] = 1;
        }
        CHECK_OK(hm_ctx_decode(c, tok, seq, n, want, lg));
        for (int i = 0; i < f.n_prompts; i++) {
            const float *ref = f.logits[i] + (size_t)(f.len[i] - 1) * (size_t)V;
            const double e = rel_err(lg + (size_t)i * (size_t)V, ref, (size_t)V);
            CHECK_MSG(e <= tol, "cuda %s: sequence %d of a shared batch: rel error %.3g", name, i,
                      e);
        }
    }
    /* bad input is refused before the GPU sees it, and nothing is cached */
    int32_t bad = (int32_t)V;
    CHECK_STATUS(hm_ctx_decode(c, &bad, NULL, 1, NULL, lg), HM_ERR_INVALID_ARG);
    free(lg);
    hm_ctx_free(c);
    hm_model_free(m);
    free_fixture(&f);
}

/* gpt-oss as released (tests/data/gptoss/hf: MXFP4 experts in blocks and scales) on the GPU,
 * all experts there and every one on the CPU engine: test_forward's bounds against transformers
 * (the CPU's MXFP4 kernels quantize activations to 8 bits), every position's argmax equal, in one
 * batch and token by token */
static void check_gptoss_hf_gpu(int gpu_experts) {
    fixture f;
    hm_model *m;
    if (!fixture_open("gptoss/hf", &f, &m)) return;
    hm_ctx_params cp = hm_ctx_default_params();
    cp.device = HM_DEVICE_CUDA;
    cp.n_threads = 2, cp.n_ctx = 64, cp.n_batch = 64;
    cp.gpu_experts = gpu_experts;
    hm_ctx *c = NULL;
    CHECK_OK(hm_ctx_create(m, &cp, &c));
    const int V = f.vocab;
    float *lg = malloc(sizeof(float) * 64 * (size_t)V);
    for (int i = 0; c && i < f.n_prompts; i++)
        for (int one = 0; one < 2; one++) {
            const int n = f.len[i];
            fixture_prompt_logits(c, &f, i, one, lg);
            double km, kx;
            kl_rows(f.logits[i], lg, n, V, &km, &kx);
            const int same = same_argmax(lg, f.logits[i], n, V);
            printf("  cuda gptoss/hf (MXFP4 blocks), %d experts/layer on the GPU, prompt %d (%s): "
                   "KL mean %.2e max %.2e, %d of %d argmax equal\n",
                   gpu_experts, i, one ? "token by token" : "one batch", km, kx, same, n);
            CHECK_MSG(km <= 1e-3 && kx <= 5e-3 && same == n,
                      "cuda gptoss/hf prompt %d: KL %.3g / %.3g, %d of %d argmax", i, km, kx, same,
                      n);
        }
    free(lg);
    hm_ctx_free(c);
    hm_model_free(m);
    free_fixture(&f);
}

/* logits of every position of prompt i of a model file, whole prompt in one batch (or one token
 * at a time) on device dev; stream: --gpu-prefill-threshold (*streamed: the layers it streamed,
 * *handed: the layers whose experts the CPU engine computed) */
static bool gguf_logits_stream(const char *path, const fixture *f, int i, hm_device dev, bool one,
                               int gpu_experts, bool bf16, int stream, uint64_t *streamed,
                               uint64_t *handed, float *out) {
    hm_model *m = NULL;
    hm_ctx *c = NULL;
    hm_ctx_params cp = hm_ctx_default_params();
    cp.device = dev, cp.n_ctx = 64, cp.n_batch = 64, cp.n_threads = 2, cp.no_amx = true;
    cp.gpu_experts = gpu_experts, cp.gpu_bf16 = bf16, cp.gpu_prefill_threshold = stream;
    bool ok = hm_model_load(path, &m) == HM_OK && hm_ctx_create(m, &cp, &c) == HM_OK;
    for (int k = 0; ok && one && k < f->len[i]; k++)
        ok = hm_ctx_decode(c, f->prompt[i] + k, NULL, 1, NULL, out + (size_t)k * f->vocab) == HM_OK;
    if (ok && !one) ok = hm_ctx_decode(c, f->prompt[i], NULL, f->len[i], NULL, out) == HM_OK;
    if (!ok) fprintf(stderr, "%s: %s\n", path, hm_last_error());
    if (ok && streamed) {
        hm_ctx_perf pf;
        hm_ctx_perf_get(c, &pf);
        *streamed = pf.hyb_streamed;
        *handed = pf.hyb_layers;
    }
    hm_ctx_free(c);
    hm_model_free(m);
    return ok;
}

static bool gguf_logits_as(const char *path, const fixture *f, int i, hm_device dev, bool one,
                           int gpu_experts, bool bf16, float *out) {
    return gguf_logits_stream(path, f, i, dev, one, gpu_experts, bf16, HM_PREFILL_STREAM_OFF, NULL,
                              NULL, out);
}

static bool gguf_logits(const char *path, const fixture *f, int i, hm_device dev, bool one,
                        int gpu_experts, float *out) {
    return gguf_logits_as(path, f, i, dev, one, gpu_experts, false, out);
}

/* expert deferral: each token's lowest-weighted CPU experts join the next layer's sum. The logits
 * move (how far is printed and documented); a broken hand-off would move them far more. */
static void check_defer(const char *name) {
    fixture f;
    hm_model *m;
    if (!fixture_open(name, &f, &m)) return;
    const int V = f.vocab, i = f.n_prompts - 1, n = f.len[i];
    const int k = (int)m->hp.n_experts_used;
    float *lg = malloc(sizeof(float) * 64 * (size_t)V);
    for (int d = 1; d <= k; d += k - 1) {
        hm_ctx_params cp = hm_ctx_default_params();
        cp.device = HM_DEVICE_CUDA, cp.n_ctx = 64, cp.n_batch = 64, cp.gpu_experts = 0;
        cp.defer = d;
        hm_ctx *c = NULL;
        CHECK_OK(hm_ctx_create(m, &cp, &c));
        if (!c) break;
        for (int one = 0; one < 2; one++) {
            fixture_prompt_logits(c, &f, i, one, lg);
            double km, kx;
            kl_rows(f.logits[i], lg, n, V, &km, &kx);
            printf("  cuda %s --defer %d (%s): KL against transformers mean %.2e max %.2e\n", name,
                   d, one ? "token by token" : "one batch", km, kx);
            CHECK_MSG(km <= 0.5 && kx <= 5.0, "cuda %s --defer %d: KL mean %.3g max %.3g", name, d,
                      km, kx);
        }
        hm_ctx_free(c);
    }
    hm_ctx_params cp = hm_ctx_default_params();
    cp.device = HM_DEVICE_CUDA, cp.defer = k + 1;
    hm_ctx *c = NULL;
    CHECK_STATUS(hm_ctx_create(m, &cp, &c), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "defer");
    free(lg);
    hm_model_free(m);
    free_fixture(&f);
}

/* --dynamic-experts, re-ranking after every step (HMOE_DYN_EVERY=1): experts swap between the
 * GPU and the CPU in the middle of greedy runs, which keep transformers' ids; the logits of a
 * prompt run after the swaps keep the fixtures' bound. */
static void check_dynamic(const char *name) {
    fixture f;
    hm_model *m;
    if (!fixture_open(name, &f, &m)) return;
    const int V = f.vocab, E = (int)m->hp.n_experts;
    float *lg = malloc(sizeof(float) * 64 * (size_t)V);
    setenv("HMOE_DYN_EVERY", "1", 1);
    hm_ctx_params cp = hm_ctx_default_params();
    cp.device = HM_DEVICE_CUDA, cp.n_ctx = 64, cp.n_batch = 64, cp.gpu_experts = E / 2;
    cp.dynamic_experts = true;
    hm_ctx *c = NULL;
    CHECK_OK(hm_ctx_create(m, &cp, &c));
    uint64_t swaps = 0;
    for (int i = 0; c && i < f.n_prompts; i++) {
        fixture_prompt_logits(c, &f, i, false, lg);
        const double e = rel_err(lg, f.logits[i], (size_t)f.len[i] * (size_t)V);
        CHECK_MSG(e <= 1e-3, "cuda %s --dynamic-experts prompt %d: rel error %.3g", name, i, e);
        memmove(lg, lg + (size_t)(f.len[i] - 1) * (size_t)V, sizeof(float) * (size_t)V);
        const int same = fixture_greedy(c, &f, i, lg);
        hm_ctx_perf pf;
        hm_ctx_perf_get(c, &pf);
        printf("  cuda %s --dynamic-experts prompt %d: rel error %.2e, greedy %d of 32, %llu "
               "swaps so far\n",
               name, i, e, same, (unsigned long long)pf.hyb_swaps);
        CHECK_MSG(same == 32, "cuda %s --dynamic-experts prompt %d: greedy differs at %d", name, i,
                  same);
        swaps = pf.hyb_swaps;
    }
    CHECK_MSG(swaps > 0, "cuda %s --dynamic-experts: no expert swapped", name);
    unsetenv("HMOE_DYN_EVERY");
    hm_ctx_free(c);
    free(lg);
    hm_model_free(m);
    free_fixture(&f);
}

/* prefill attention on the tensor cores (from 9 tokens here; the default starts at 128) on fixture
 * q (head dim 64): every prompt in one batch against transformers within the half-rounding's KL
 * bounds, every argmax equal, and not the exact path's logits (the kernel ran) */
static void check_fa_model(const char *name) {
    fixture f;
    hm_model *m;
    if (!fixture_open(name, &f, &m)) return;
    const int V = f.vocab;
    float *lg = malloc(sizeof(float) * 64 * (size_t)V),
          *lx = malloc(sizeof(float) * 64 * (size_t)V);
    hm_ctx_params cp = hm_ctx_default_params();
    cp.device = HM_DEVICE_CUDA, cp.n_ctx = 64, cp.n_batch = 64;
    hm_ctx *c = NULL, *cx = NULL;
    setenv("HMOE_CUDA_FA", "0", 1);
    CHECK_OK(hm_ctx_create(m, &cp, &cx)); /* the exact path */
    setenv("HMOE_CUDA_FA", "1", 1);
    setenv("HMOE_CUDA_FA_MIN", "9", 1);
    CHECK_OK(hm_ctx_create(m, &cp, &c));
    unsetenv("HMOE_CUDA_FA");
    unsetenv("HMOE_CUDA_FA_MIN");
    for (int i = 0; c && cx && i < f.n_prompts; i++) {
        const int n = f.len[i];
        fixture_prompt_logits(c, &f, i, false, lg);
        fixture_prompt_logits(cx, &f, i, false, lx);
        double km, kx;
        kl_rows(f.logits[i], lg, n, V, &km, &kx);
        const int same = same_argmax(lg, f.logits[i], n, V);
        const double dx = rel_err(lg, lx, (size_t)n * (size_t)V);
        printf("  cuda %s attention on the tensor cores, prompt %d (%d tokens): KL mean %.2e max "
               "%.2e, %d of %d argmax equal, rel %.2e from the exact path\n",
               name, i, n, km, kx, same, n, dx);
        CHECK_MSG(km <= 1e-4 && kx <= 1e-3 && same == n,
                  "cuda %s tensor-core attention prompt %d: KL %.3g / %.3g, %d of %d argmax", name,
                  i, km, kx, same, n);
        if (n >= 9) CHECK_MSG(dx > 0, "cuda %s prompt %d: the tensor cores did not run", name, i);
    }
    hm_ctx_free(c);
    hm_ctx_free(cx);
    free(lg), free(lx);
    hm_model_free(m);
    free_fixture(&f);
}

/* Batches of more than 8 tokens in more shapes (tokens, wanted rows) than the backend keeps
 * graphs of: the first GRAPHS_BIG (64) shapes are captured, the rest run eagerly, and every
 * step's wanted logits have the bits of a context that runs every step eagerly. The batches
 * are rows of sequences 0..3 at their own positions, as a server's mixed batches are. */
static void check_graph_shapes(const char *name) {
    fixture f;
    hm_model *m;
    if (!fixture_open(name, &f, &m)) return;
    const int V = f.vocab;
    hm_ctx_params cp = hm_ctx_default_params();
    cp.device = HM_DEVICE_CUDA, cp.n_ctx = 1024, cp.n_batch = 64, cp.n_seq = 4;
    hm_ctx *c = NULL, *cx = NULL;
    setenv("HMOE_CUDA_GRAPHS", "0", 1);
    CHECK_OK(hm_ctx_create(m, &cp, &cx));
    unsetenv("HMOE_CUDA_GRAPHS");
    CHECK_OK(hm_ctx_create(m, &cp, &c));
    float *lg = malloc(sizeof(float) * 64 * (size_t)V),
          *lx = malloc(sizeof(float) * 64 * (size_t)V);
    int32_t tok[64], seq[64];
    uint8_t want[64];
    int bad = 0, steps = 0;
    for (int round = 0; c && cx && round < 2; round++) { /* the second replays or runs eagerly */
        for (int q = 0; q < 4; q++) hm_ctx_seq_reset(c, q), hm_ctx_seq_reset(cx, q);
        for (int i = 0; i < 88 && !bad; i++) { /* 44 sizes, all rows or every third wanted */
            const int n = 9 + i / 2;
            int w = 0;
            for (int k = 0; k < n; k++) {
                tok[k] = (int32_t)((k * 31 + i * 7 + round) % V), seq[k] = k % 4;
                want[k] = i % 2 == 0 || k % 3 == 0;
                w += want[k];
            }
            CHECK_OK(hm_ctx_decode(c, tok, seq, n, want, lg));
            CHECK_OK(hm_ctx_decode(cx, tok, seq, n, want, lx));
            bad += memcmp(lg, lx, sizeof(float) * (size_t)w * (size_t)V) != 0;
            steps++;
        }
    }
    CHECK_MSG(bad == 0 && steps == 176, "cuda %s: %d of %d batch shapes differ from eager", name,
              bad, steps);
    printf("  cuda %s: %d steps of 9-52 tokens in many shapes, graphs or eager: the eager bits\n",
           name, steps);
    free(lg), free(lx);
    hm_ctx_free(c), hm_ctx_free(cx);
    hm_model_free(m);
    free_fixture(&f);
}

/* model q written as a quantized GGUF. The GPU's matvec path (one token at a time) computes in
 * float on the dequantized weights: against the CPU's exact kernels on the same weights written
 * as F32, the fixtures' 1e-3 (Q4_K experts, which multiply Q8_K activations as the CPU's do
 * unless HMOE_MV_Q4K_I8=0: the hybrid bounds). The tensor-core path (whole prompt; weights and
 * activations rounded to half) and the hybrid placement (the CPU's experts quantize their
 * activations as the CPU does, without AMX here) within KL bounds of that reference; so is
 * --gpu-dtype bf16 (non-expert weights rounded to BF16; batches with BF16 activations on cuBLAS);
 * so is layerwise prefill (the CPU's experts streamed to the GPU and computed on its tiles), with
 * none or one expert per layer resident, all of them streamed or half (HMOE_LW_SPLIT, set for both
 * instead of the split the context times; the CPU computes the rest meanwhile). */
static void check_quantized_gpu(int type, int experts_type) {
    fixture f;
    CHECK(load_fixture("q", &f));
    if (!f.n_prompts) return;
    char dir[] = "/tmp/hmoe-cuda-XXXXXX", path[256], fpath[300];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    snprintf(fpath, sizeof fpath, "%s/f32.gguf", dir);
    hm_convert_params p = hm_convert_default_params();
    p.type = type, p.experts_type = experts_type, p.n_threads = 2;
    CHECK_OK(hm_convert_hf(f.dir, path, &p, NULL));
    CHECK(write_dequantized(path, fpath));
    const int V = f.vocab;
    /* Q4_K experts multiply activations quantized to Q8_K on the GPU's matvec as on the CPU
     * (kernels.h; HMOE_MV_Q4K_I8=0 and HMOE_MV_Q4K=0 keep them in float): those cases take the
     * hybrid bounds rather than the exact kernels' */
    const char *q4k = getenv("HMOE_MV_Q4K"), *i8v = getenv("HMOE_MV_Q4K_I8");
    const bool q8k =
        experts_type == HM_TYPE_Q4_K && !(q4k && !strcmp(q4k, "0")) && !(i8v && !strcmp(i8v, "0"));
    float *lf = malloc(sizeof(float) * 64 * (size_t)V),
          *lg = malloc(sizeof(float) * 64 * (size_t)V);
    for (int i = 0; i < f.n_prompts; i++) {
        if (!gguf_logits(fpath, &f, i, HM_DEVICE_CPU, false, HM_GPU_EXPERTS_FIT, lf)) break;
        const size_t nv = (size_t)f.len[i] * (size_t)V;
        /* matvec, tiles, hybrid matvec, hybrid tiles, bf16 x 2, streamed with 1 and 0 resident
         * (from 9 tokens: the smallest batch on the tiles), half streamed with 1 and 0; then
         * tiles and hybrid tiles with the dense matmuls of 9 tokens or more in half on cuBLAS;
         * then the whole prompt on the matvec (dense in groups of 8 tokens, experts in tiles of
         * 8), all on the GPU and hybrid. The tile cases keep batches of 9 tokens or more off the
         * matvec (HMOE_CUDA_MV_MAX=8). */
        for (int k = 0; k < 14; k++) {
            const bool lw = k >= 6 && k < 10, mvb = k >= 12, one = !(k & 1) && !lw && k < 10,
                       hyb = k == 2 || k == 3 || lw || k == 11 || k == 13, bf16 = k == 4 || k == 5,
                       split = k == 8 || k == 9, hg = k == 10 || k == 11;
            uint64_t streamed = 0, handed = 0;
            if (lw) setenv("HMOE_LW_SPLIT", split ? "0.5" : "1", 1); /* not the timed split */
            if (hg) setenv("HMOE_CUDA_HGEMM_MIN", "9", 1);
            setenv("HMOE_CUDA_MV_MAX", mvb ? "64" : "8", 1);
            CHECK(gguf_logits_stream(path, &f, i, HM_DEVICE_CUDA, one,
                                     k & 1 && lw ? 0 : (hyb ? 1 : HM_GPU_EXPERTS_FIT), bf16,
                                     lw ? 9 : HM_PREFILL_STREAM_OFF, &streamed, &handed, lg));
            unsetenv("HMOE_LW_SPLIT");
            unsetenv("HMOE_CUDA_HGEMM_MIN");
            unsetenv("HMOE_CUDA_MV_MAX");
            if (lw && f.len[i] >= 9) {
                CHECK_MSG(streamed > 0, "cuda %s/%s: a prompt of %d tokens streamed no layer",
                          hm_type_name((uint32_t)type), hm_type_name((uint32_t)experts_type),
                          f.len[i]);
                /* split: every streamed layer's other experts went to the CPU engine */
                CHECK_MSG(split ? handed == streamed : handed == 0,
                          "cuda %s/%s: %llu layers streamed, %llu handed to the CPU",
                          hm_type_name((uint32_t)type), hm_type_name((uint32_t)experts_type),
                          (unsigned long long)streamed, (unsigned long long)handed);
            }
            double km, kx;
            kl_rows(lf, lg, f.len[i], V, &km, &kx);
            const double e = rel_err(lg, lf, nv);
            printf("  cuda %s/%s %s%s%s%s vs exact kernels on the same weights, prompt %d: rel "
                   "%.2e, KL mean %.2e max %.2e\n",
                   hm_type_name((uint32_t)type), hm_type_name((uint32_t)experts_type),
                   one   ? "matvec"
                   : mvb ? "whole prompt on the matvec"
                   : hg  ? "tensor cores, dense in half on cuBLAS"
                         : "tensor cores",
                   hyb ? " hybrid" : "", bf16 ? " bf16" : "",
                   lw ? (k & 1 ? (split ? " half streamed (0 resident)" : " streamed (0 resident)")
                               : (split ? " half streamed (1 resident)" : " streamed (1 resident)"))
                      : "",
                   i, e, km, kx);
            if ((k == 0 || k == 12) && !q8k)
                CHECK_MSG(e <= 1e-3, "cuda %s/%s %s: rel error %.3g", hm_type_name((uint32_t)type),
                          hm_type_name((uint32_t)experts_type),
                          k ? "whole prompt on the matvec" : "matvec", e);
            else
                CHECK_MSG(km <= (hyb || q8k ? 1e-2 : 3e-3) && kx <= (hyb || q8k ? 1e-1 : 3e-2),
                          "cuda %s/%s %s%s%s: KL mean %.3g max %.3g", hm_type_name((uint32_t)type),
                          hm_type_name((uint32_t)experts_type), one ? "matvec" : "tiles",
                          hyb ? " hybrid" : "", bf16 ? " bf16" : "", km, kx);
        }
    }
    free(lf), free(lg);
    remove(path);
    remove(fpath);
    rmdir(dir);
    free_fixture(&f);
}

#ifdef HMOE_HAVE_CUDA

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { /* [-1, 1) */
    return (float)((double)rnd32() / 2147483648.0 - 1.0);
}

#define CU(call)                                                                                   \
    CHECK_MSG((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

static void *dev_copy(const void *h, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) return NULL;
    if (h) cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    return d;
}
static void host_copy(void *h, const void *d, size_t bytes) {
    CU(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* setenv(name, v) for an integer v */
static void setenv_int(const char *name, int v) {
    char b[16];
    snprintf(b, sizeof b, "%d", v);
    setenv(name, b, 1);
}

/* random weights of `type`: quantized from random floats where the repo has a quantizer, else
 * random bytes with the scales kept in range */
static void rand_weights(uint32_t type, int64_t rows, int64_t cols, uint8_t *w, size_t rb) {
    float *src = malloc(sizeof(float) * (size_t)cols);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = w + (size_t)r * rb;
        for (int64_t j = 0; j < cols; j++) src[j] = rndf() * (1.0f + (float)(r % 3));
        if (type == HM_TYPE_F32 || type == HM_TYPE_F16 || type == HM_TYPE_BF16) {
            for (int64_t j = 0; j < cols; j++) {
                if (type == HM_TYPE_F32) {
                    memcpy(row + 4 * j, &src[j], 4);
                } else {
                    const uint16_t h =
                        type == HM_TYPE_F16 ? hm_f32_to_f16(src[j]) : hm_f32_to_bf16(src[j]);
                    memcpy(row + 2 * j, &h, 2);
                }
            }
            continue;
        }
        if (hm_quantize_row(type, src, row, cols) == HM_OK) continue;
        for (size_t b = 0; b < rb; b++) row[b] = (uint8_t)rnd32();
        const hm_type_info *ti = hm_type_get(type);
        const int64_t nb = cols / ti->block;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *blk = row + (size_t)b * ti->bytes;
            if (type == HM_TYPE_FP8_B128) {
                const float d = 0.001f + (float)(rnd32() % 1000) * 1e-4f;
                memcpy(blk, &d, 4);
            } else if (type == HM_TYPE_MXFP4) {
                blk[0] = (uint8_t)(120 + rnd32() % 12);
            } else if (type == HM_TYPE_Q2_K || type == HM_TYPE_Q3_K || type == HM_TYPE_IQ4_XS) {
                /* halves d (and dmin) in [-2, 2): exponents kept away from inf/NaN */
                const size_t off = type == HM_TYPE_Q2_K ? 80 : type == HM_TYPE_Q3_K ? 108 : 0;
                const int nh = type == HM_TYPE_Q2_K ? 2 : 1;
                for (int h = 0; h < nh; h++) {
                    const uint16_t v = hm_f32_to_f16(rndf() * 2.0f);
                    memcpy(blk + off + 2 * (size_t)h, &v, 2);
                }
            }
        }
    }
    free(src);
}

static bool same_bits(float a, float b) {
    return memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b));
}

static void check_matvec(uint32_t type, int64_t rows, int64_t cols) {
    const hm_type_info *ti = hm_type_get(type);
    uint64_t rb64 = 0;
    if (!hm_type_row_bytes(type, (uint64_t)cols, &rb64)) return;
    const size_t rb = (size_t)rb64;
    const int E = 3; /* experts: three matrices one after another */
    uint8_t *w = malloc(rb * (size_t)rows * E);
    rand_weights(type, rows * E, cols, w, rb);
    float *ref = malloc(sizeof(float) * (size_t)(rows * cols * E));
    for (int64_t r = 0; r < rows * E; r++)
        CHECK_OK(hm_dequantize_row(type, w + (size_t)r * rb, ref + r * cols, cols));
    enum { NT = 40 };
    float *x = malloc(sizeof(float) * NT * (size_t)cols);
    for (int64_t i = 0; i < NT * cols; i++) x[i] = rndf();
    uint8_t *dw = dev_copy(w, rb * (size_t)rows * E);
    float *dx = dev_copy(x, sizeof(float) * NT * (size_t)cols);
    float *dy = dev_copy(NULL, sizeof(float) * (size_t)(rows * cols * E));
    float *y = malloc(sizeof(float) * (size_t)(rows * cols * E));
    const hm_cu_w cw = {type, dw, rows, cols, rb, rows * rb};
    /* dequantization: the reference's bits */
    CU(hm_cu_dequant_f32(&cw, 0, rows, dy, 0));
    host_copy(y, dy, sizeof(float) * (size_t)(rows * cols));
    int bad = 0;
    for (int64_t i = 0; i < rows * cols; i++) bad += !same_bits(y[i], ref[i]);
    CHECK_MSG(bad == 0, "%s %lldx%lld: %d dequantized values differ", ti->name, (long long)rows,
              (long long)cols, bad);
    /* matvec over 1..8 tokens and batches of groups of 8: the double sums of the reference
     * within float rounding */
    /* (HMOE_MV_Q8_I8=1: Q8_0 rows on Q8_0 activations, each product with the bits of
     * hm_hd_q8_0_q8_0_row, the CPU's dot_q8_0_ref within float rounding, the float reference
     * within the codes' rounding) */
    static const int ns[] = {1, 2, 3, 5, 8, 9, 17, 40};
    const bool q8i = type == HM_TYPE_Q8_0 && hm_cu_env_is("HMOE_MV_Q8_I8", "1");
    hm_block_q8_0 *x80 = q8i ? malloc(sizeof(hm_block_q8_0) * (size_t)(NT * cols / 32)) : NULL;
    for (int t = 0; q8i && t < NT; t++)
        hm_quantize_row_q8_0_ref(x + (int64_t)t * cols, x80 + t * (cols / 32), cols);
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        const int n = ns[k];
        CU(hm_cu_matvec(&cw, dx, cols, n, dy, rows, 0));
        host_copy(y, dy, sizeof(float) * (size_t)n * (size_t)rows);
        double worst = 0, worst_cpu = 0;
        int bad_i8 = 0;
        for (int t = 0; t < n; t++)
            for (int64_t r = 0; r < rows; r++) {
                double s = 0, a = 0;
                for (int64_t j = 0; j < cols; j++) {
                    s += (double)ref[r * cols + j] * x[t * cols + j];
                    a += fabs((double)ref[r * cols + j] * x[t * cols + j]);
                }
                if (!isfinite(s)) continue;
                const double e = fabs(y[t * rows + r] - s) / (a + 1e-30);
                if (!(e <= worst)) worst = e;
                if (!q8i) continue;
                const hm_block_q8_0 *wr = (const hm_block_q8_0 *)(w + (size_t)r * rb);
                const hm_block_q8_0 *xt = x80 + t * (cols / 32);
                bad_i8 += !same_bits(y[t * rows + r], hm_hd_q8_0_q8_0_row(wr, xt, cols / 32));
                const double c = hm_ops_ref.vec_dot[HM_TYPE_Q8_0](cols, wr, xt);
                const double ec = fabs(y[t * rows + r] - c) / (a + 1e-30);
                if (!(ec <= worst_cpu)) worst_cpu = ec;
            }
        CHECK_MSG(worst <= (q8i ? 8e-3 : 1e-5), "%s %lldx%lld, %d tokens: matvec error %.3g",
                  ti->name, (long long)rows, (long long)cols, n, worst);
        CHECK_MSG(bad_i8 == 0 && worst_cpu <= 1e-5,
                  "%s %lldx%lld, %d tokens on Q8_0 activations: %d differ from "
                  "hm_hd_q8_0_q8_0_row, %.3g from the CPU's",
                  ti->name, (long long)rows, (long long)cols, n, bad_i8, worst_cpu);
    }
    free(x80);
    /* a batch's groups: the bits of one launch per group (on one path: a Q4_K launch of one
     * token alone would take the lane layout) */
    {
        setenv("HMOE_MV_Q4K", "0", 1);
        float *y2 = malloc(sizeof(float) * 17 * (size_t)rows);
        CU(hm_cu_matvec(&cw, dx, cols, 17, dy, rows, 0));
        host_copy(y2, dy, sizeof(float) * 17 * (size_t)rows);
        for (int g = 0; g < 17; g += 8)
            CU(hm_cu_matvec(&cw, dx + (int64_t)g * cols, cols, 17 - g < 8 ? 17 - g : 8,
                            dy + (int64_t)g * rows, rows, 0));
        host_copy(y, dy, sizeof(float) * 17 * (size_t)rows);
        bad = 0;
        for (int64_t i = 0; i < 17 * rows; i++) bad += !same_bits(y[i], y2[i]);
        unsetenv("HMOE_MV_Q4K");
        CHECK_MSG(bad == 0, "%s %lldx%lld: %d values of a 17-token batch differ from its groups'",
                  ti->name, (long long)rows, (long long)cols, bad);
        free(y2);
    }
    CHECK(hm_cu_matvec(&cw, dx, cols, HM_CU_MATVEC_BATCH + 1, dy, rows, 0) ==
          cudaErrorInvalidValue);
    /* experts: 7 pairs of 3 tokens (x_div 3) and of 7 inputs (x_div 1). Q4_K in whole
     * super-blocks multiplies x quantized to Q8_K: each product has the bits of
     * hm_hd_q4k_q8k_row and equals the CPU engine's (dot_q4_K_ref) within float rounding; the
     * float reference within the codes' rounding (half a step of at most 1/127 of the block's
     * largest value, against values of mean magnitude 1/2) */
    const bool i8 = hm_cu_experts_i8(type, cols);
    const int64_t nsb = cols / 256;
    hm_block_q8_K *xq = i8 ? malloc(sizeof(hm_block_q8_K) * 7 * (size_t)nsb) : NULL;
    for (int t = 0; i8 && t < 7; t++)
        hm_quantize_row_q8_K_ref(x + (int64_t)t * cols, xq + t * nsb, cols);
    int32_t ids[7];
    for (int p = 0; p < 7; p++) ids[p] = (int32_t)(rnd32() % E);
    int32_t *did = dev_copy(ids, sizeof ids);
    for (int xd = 1; xd <= 3; xd += 2) {
        CU(hm_cu_matvec_experts(&cw, did, 7, dx, cols, xd, dy, rows, 0));
        host_copy(y, dy, sizeof(float) * 7 * (size_t)rows);
        double worst = 0, worst_cpu = 0;
        int bad_i8 = 0;
        for (int p = 0; p < 7; p++)
            for (int64_t r = 0; r < rows; r++) {
                const float *wr = ref + ((int64_t)ids[p] * rows + r) * cols;
                const float *xr = x + (int64_t)(p / xd) * cols;
                double s = 0, a = 0;
                for (int64_t j = 0; j < cols; j++)
                    s += (double)wr[j] * xr[j], a += fabs((double)wr[j] * xr[j]);
                if (!isfinite(s)) continue;
                const double e = fabs(y[p * rows + r] - s) / (a + 1e-30);
                if (!(e <= worst)) worst = e;
                if (!i8) continue;
                const uint8_t *row = w + ((size_t)ids[p] * (size_t)rows + (size_t)r) * rb;
                const hm_block_q8_K *xt = xq + (p / xd) * nsb;
                bad_i8 += !same_bits(y[p * rows + r],
                                     hm_hd_q4k_q8k_row((const hm_block_q4_K *)row, xt, (int)nsb));
                const double c = hm_ops_ref.vec_dot[HM_TYPE_Q4_K](cols, row, xt);
                const double ec = fabs(y[p * rows + r] - c) / (a + 1e-30);
                if (!(ec <= worst_cpu)) worst_cpu = ec;
            }
        CHECK_MSG(worst <= (i8 ? 8e-3 : 1e-5), "%s experts (x_div %d): error %.3g", ti->name, xd,
                  worst);
        CHECK_MSG(bad_i8 == 0 && worst_cpu <= 1e-5,
                  "%s %lldx%lld experts on Q8_K (x_div %d): %d differ from hm_hd_q4k_q8k_row, "
                  "%.3g from the CPU's",
                  ti->name, (long long)rows, (long long)cols, xd, bad_i8, worst_cpu);
    }
    free(xq);
    /* batches on the tensor cores (quantized types): half-rounded weights and activations */
    if (hm_cu_mmq_type_ok(type)) {
        enum { NB = 37, K = 2 };
        const hm_cu_mmq_args dense = {dx, cols, NULL, dy, rows, NULL, NULL, NULL, NULL, NB};
        CU(hm_cu_mmq(&cw, &dense, 0, 0));
        host_copy(y, dy, sizeof(float) * NB * (size_t)rows);
        double worst = 0;
        for (int t = 0; t < NB; t++)
            for (int64_t r = 0; r < rows; r++) {
                double s = 0, a = 0;
                for (int64_t j = 0; j < cols; j++)
                    s += (double)ref[r * cols + j] * x[t * cols + j],
                        a += fabs((double)ref[r * cols + j] * x[t * cols + j]);
                if (!isfinite(s)) continue;
                const double e = fabs(y[t * rows + r] - s) / (a + 1e-30);
                if (!(e <= worst)) worst = e;
            }
        CHECK_MSG(worst <= 2e-3, "%s tensor-core batch of %d: error %.3g", ti->name, NB, worst);
        /* experts: NB tokens x K picks of E, in expert order */
        int32_t pid[NB * K];
        for (int p = 0; p < NB * K; p++) pid[p] = (int32_t)((p * 7 + p / 5) % E);
        const int mt = hm_cu_moe_max_tiles(NB * K, E, 64);
        int32_t *dpid = dev_copy(pid, sizeof pid);
        int32_t *ob = dev_copy(NULL, sizeof(int32_t) * (size_t)(2 * NB * K + 3 * mt + 1));
        const hm_cu_moe_order o = {ob,
                                   ob + NB * K,
                                   ob + 2 * NB * K,
                                   ob + 2 * NB * K + mt,
                                   ob + 2 * NB * K + 2 * mt,
                                   ob + 2 * NB * K + 3 * mt};
        CU(hm_cu_moe_sort(dpid, NB * K, E, K, 64, &o, 0));
        const hm_cu_mmq_args ea = {dx,       cols,      o.xrow,   dy,        rows,
                                   o.tile_e, o.tile_i0, o.tile_n, o.n_tiles, NB * K};
        CU(hm_cu_mmq(&cw, &ea, mt, 0));
        int32_t pos_of[NB * K];
        host_copy(pos_of, o.pos_of, sizeof pos_of);
        host_copy(y, dy, sizeof(float) * NB * K * (size_t)rows);
        worst = 0;
        int places = 0;
        for (int p = 0; p < NB * K; p++) {
            places += pos_of[p] >= 0 && pos_of[p] < NB * K;
            if (pos_of[p] < 0 || pos_of[p] >= NB * K) continue;
            for (int64_t r = 0; r < rows; r++) {
                const float *wr = ref + ((int64_t)pid[p] * rows + r) * cols;
                const float *xr = x + (int64_t)(p / K) * cols;
                double s = 0, a = 0;
                for (int64_t j = 0; j < cols; j++)
                    s += (double)wr[j] * xr[j], a += fabs((double)wr[j] * xr[j]);
                if (!isfinite(s)) continue;
                const double e = fabs(y[(int64_t)pos_of[p] * rows + r] - s) / (a + 1e-30);
                if (!(e <= worst)) worst = e;
            }
        }
        CHECK(places == NB * K);
        CHECK_MSG(worst <= 2e-3, "%s tensor-core experts: error %.3g", ti->name, worst);
        cudaFree(dpid), cudaFree(ob);
    }
    /* experts in tiles of 8 places of one expert on the matvec: 21 tokens x 2 picks of E in
     * expert order, their activations gathered into place order; each product has the bits of
     * the per-pair matvec */
    {
        enum { NB = 21, K = 2, NP = NB * K };
        int32_t pid[NP];
        for (int p = 0; p < NP; p++) pid[p] = (int32_t)(p % 5 ? (p * 7 + p / 5) % E : 1);
        const int mt = hm_cu_moe_max_tiles(NP, E, HM_CU_MATVEC_MAX);
        int32_t *dpid = dev_copy(pid, sizeof pid);
        int32_t *ob = dev_copy(NULL, sizeof(int32_t) * (size_t)(2 * NP + 3 * mt + 1));
        const hm_cu_moe_order o = {
            ob, ob + NP, ob + 2 * NP, ob + 2 * NP + mt, ob + 2 * NP + 2 * mt, ob + 2 * NP + 3 * mt};
        CU(hm_cu_moe_sort(dpid, NP, E, K, HM_CU_MATVEC_MAX, &o, 0));
        float *dxg = dev_copy(NULL, sizeof(float) * NP * (size_t)cols);
        float *dz = dev_copy(NULL, sizeof(float) * NP * (size_t)rows);
        const hm_cu_w xv = {HM_TYPE_F32, dx, NB, cols, sizeof(float) * (size_t)cols, 0};
        CU(hm_cu_embed(&xv, o.xrow, NP, dxg, 0)); /* the gather */
        const hm_cu_mmq_args ea = {dxg,      cols,      NULL,     dy,        rows,
                                   o.tile_e, o.tile_i0, o.tile_n, o.n_tiles, NP};
        CU(hm_cu_mmv_tiles(&cw, &ea, HM_CU_MATVEC_MAX, mt, 0));
        /* the per-pair products on the staged path, as the tiles' (a Q4_K pair alone takes the
         * lane layout, whose sums take another order) */
        setenv("HMOE_MV_Q4K", "0", 1);
        CU(hm_cu_matvec_experts(&cw, dpid, NP, dx, cols, K, dz, rows, 0));
        unsetenv("HMOE_MV_Q4K");
        int32_t pos_of[NP], tn[64], nt = 0;
        host_copy(pos_of, o.pos_of, sizeof pos_of);
        host_copy(&nt, o.n_tiles, sizeof nt);
        CHECK(nt > 0 && nt <= mt && mt <= 64);
        host_copy(tn, o.tile_n, sizeof(int32_t) * (size_t)mt);
        int most = 0;
        for (int t = 0; t < nt && t < 64; t++) most = tn[t] > most ? tn[t] : most;
        CHECK_MSG(most == HM_CU_MATVEC_MAX, "tiles of 8: the fullest holds %d", most);
        float *yp = malloc(sizeof(float) * NP * (size_t)rows);
        host_copy(y, dy, sizeof(float) * NP * (size_t)rows);
        host_copy(yp, dz, sizeof(float) * NP * (size_t)rows);
        bad = 0;
        for (int p = 0; p < NP; p++) {
            if (pos_of[p] < 0 || pos_of[p] >= NP) {
                bad++;
                continue;
            }
            for (int64_t r = 0; r < rows; r++)
                bad += !same_bits(y[(int64_t)pos_of[p] * rows + r], yp[(int64_t)p * rows + r]);
        }
        CHECK_MSG(bad == 0,
                  "%s %lldx%lld experts in tiles of 8: %d values differ from the "
                  "per-pair matvec",
                  ti->name, (long long)rows, (long long)cols, bad);
        /* the gather: rows by place, the inputs' bits */
        float *xg = malloc(sizeof(float) * NP * (size_t)cols);
        int32_t xrow[NP];
        host_copy(xg, dxg, sizeof(float) * NP * (size_t)cols);
        host_copy(xrow, o.xrow, sizeof xrow);
        bad = 0;
        for (int i = 0; i < NP; i++)
            for (int64_t j = 0; j < cols; j++)
                bad += !same_bits(xg[i * cols + j], x[(int64_t)xrow[i] * cols + j]);
        CHECK_MSG(bad == 0, "gather: %d values differ", bad);
        hm_cu_mmq_args xr = ea; /* rows by xrow: gathered first, not here */
        xr.xrow = o.xrow;
        CHECK(hm_cu_mmv_tiles(&cw, &xr, HM_CU_MATVEC_MAX, mt, 0) == cudaErrorInvalidValue);
        CHECK(hm_cu_mmv_tiles(&cw, &ea, HM_CU_MATVEC_MAX + 1, mt, 0) == cudaErrorInvalidValue);
        free(yp), free(xg);
        cudaFree(dpid), cudaFree(ob), cudaFree(dxg), cudaFree(dz);
    }
    /* dequantization to half: the reference's values rounded to nearest even */
    if (!(cols % 2)) {
        uint16_t *dh = dev_copy(NULL, sizeof(uint16_t) * (size_t)(rows * cols));
        uint16_t *yh = malloc(sizeof(uint16_t) * (size_t)(rows * cols));
        CU(hm_cu_dequant_f16(&cw, 0, rows, dh, 0));
        host_copy(yh, dh, sizeof(uint16_t) * (size_t)(rows * cols));
        bad = 0;
        for (int64_t i = 0; i < rows * cols; i++) bad += yh[i] != hm_f32_to_f16(ref[i]);
        CHECK_MSG(bad == 0, "%s %lldx%lld: %d values as half differ", ti->name, (long long)rows,
                  (long long)cols, bad);
        cudaFree(dh), free(yh);
    }
    /* the embedding gather: rows by id, the reference's bits */
    int32_t tok[4] = {(int32_t)(rows - 1), 0, (int32_t)(rows / 2), 0};
    int32_t *dt = dev_copy(tok, sizeof tok);
    CU(hm_cu_embed(&cw, dt, 4, dy, 0));
    host_copy(y, dy, sizeof(float) * 4 * (size_t)cols);
    bad = 0;
    for (int i = 0; i < 4; i++)
        for (int64_t j = 0; j < cols; j++)
            bad += !same_bits(y[i * cols + j], ref[tok[i] * cols + j]);
    CHECK_MSG(bad == 0, "%s embedding: %d values differ", ti->name, bad);
    cudaFree(dw), cudaFree(dx), cudaFree(dy), cudaFree(did), cudaFree(dt);
    free(w), free(ref), free(x), free(y);
}

/* The fused decode launchers against the launches they replace, bit for bit: q, k and v of
 * one input (the same type, a different one, an empty matrix), and the experts' gate, up,
 * biases and activation for every activation, with experts on the CPU (-1) among the pairs. */
static void check_fused(uint32_t type, int64_t rows, int64_t cols) {
    const hm_type_info *ti = hm_type_get(type);
    uint64_t rb64 = 0;
    if (!hm_type_row_bytes(type, (uint64_t)cols, &rb64)) return;
    const size_t rb = (size_t)rb64;
    enum { E = 3, NP = 6, NT = 8 };
    const int64_t all = rows * E * 2; /* gate experts, then up experts */
    uint8_t *w = malloc(rb * (size_t)all);
    rand_weights(type, all, cols, w, rb);
    float *x = malloc(sizeof(float) * NT * (size_t)cols), *b = malloc(sizeof(float) * 2 * E * rows);
    for (int64_t i = 0; i < NT * cols; i++) x[i] = rndf();
    for (int64_t i = 0; i < 2 * E * rows; i++) b[i] = rndf();
    uint8_t *dw = dev_copy(w, rb * (size_t)all);
    float *dx = dev_copy(x, sizeof(float) * NT * (size_t)cols);
    float *db = dev_copy(b, sizeof(float) * 2 * E * (size_t)rows);
    const size_t ny = (size_t)NT * (size_t)(rows * 2 * E);
    float *dy = dev_copy(NULL, sizeof(float) * ny), *dz = dev_copy(NULL, sizeof(float) * ny);
    float *y = malloc(sizeof(float) * ny), *z = malloc(sizeof(float) * ny);
    /* three matrices: rows, rows / 2 + 1 and rows - 1 rows of the buffer */
    const int64_t mr[3] = {rows, rows / 2 + 1, rows - 1};
    hm_cu_w m[3];
    float *ym[3], *zm[3];
    int64_t ys[3];
    int64_t at = 0;
    for (int i = 0; i < 3; i++) {
        m[i] = (hm_cu_w){type, dw + (size_t)at * rb, mr[i], cols, rb, 0};
        ym[i] = dy + (size_t)NT * (size_t)at, zm[i] = dz + (size_t)NT * (size_t)at;
        ys[i] = mr[i] + 3, at += mr[i] + 3;
    }
    static const int ns[] = {1, 3, 8};
    for (int k = 0; k < 3; k++) {
        const int n = ns[k];
        for (int nw = 2; nw <= 3; nw++) {
            cudaMemset(dy, 0, sizeof(float) * ny), cudaMemset(dz, 0, sizeof(float) * ny);
            CU(hm_cu_matvec_multi(m, nw, dx, cols, n, ym, ys, 0));
            for (int i = 0; i < nw; i++) CU(hm_cu_matvec(&m[i], dx, cols, n, zm[i], ys[i], 0));
            host_copy(y, dy, sizeof(float) * ny), host_copy(z, dz, sizeof(float) * ny);
            int bad = 0;
            for (size_t i = 0; i < ny; i++) bad += !same_bits(y[i], z[i]);
            CHECK_MSG(bad == 0, "%s %lldx%lld: %d matrices in one launch, %d tokens: %d differ",
                      ti->name, (long long)rows, (long long)cols, nw, n, bad);
        }
    }
    /* one launch each where the matrices differ: a narrower second one, an empty third */
    hm_cu_w mix[3] = {m[0], m[1], m[2]};
    mix[1].cols = cols > 32 ? cols - 32 : cols, mix[2].rows = 0;
    CU(hm_cu_matvec_multi(mix, 3, dx, cols, 2, ym, ys, 0));
    CHECK(hm_cu_matvec_multi(m, 0, dx, cols, 1, ym, ys, 0) == cudaErrorInvalidValue);
    CHECK(hm_cu_matvec_multi(m, 4, dx, cols, 1, ym, ys, 0) == cudaErrorInvalidValue);
    /* experts: NP pairs of 2 tokens (x_div 3), pair 4 on the CPU */
    int32_t ids[NP] = {2, 0, 1, 2, -1, 0};
    int32_t *did = dev_copy(ids, sizeof ids);
    const hm_cu_w wg = {type, dw, rows, cols, rb, (size_t)rows * rb};
    const hm_cu_w wu = {type, dw + (size_t)(rows * E) * rb, rows, cols, rb, (size_t)rows * rb};
    const int64_t gs = rows + 5;
    for (int act = 0; act < 3; act++)
        for (int bias = 0; bias < 2; bias++) {
            const float *bg = bias ? db : NULL, *bu = bias ? db + E * rows : NULL;
            cudaMemset(dy, 0, sizeof(float) * ny), cudaMemset(dz, 0, sizeof(float) * ny);
            CU(hm_cu_matvec_experts_glu(&wg, &wu, bg, bu, did, NP, dx, cols, 3, act, 1.702f, 7.0f,
                                        dy, gs, 0));
            float *du = dz + (size_t)NP * (size_t)gs;
            CU(hm_cu_matvec_experts(&wg, did, NP, dx, cols, 3, dz, gs, 0));
            CU(hm_cu_matvec_experts(&wu, did, NP, dx, cols, 3, du, gs, 0));
            CU(hm_cu_expert_bias(dz, gs, NULL, did, NP, bg, rows, 0));
            CU(hm_cu_expert_bias(du, gs, NULL, did, NP, bu, rows, 0));
            CU(hm_cu_glu(dz, gs, du, gs, NP, rows, act, 1.702f, 7.0f, 0));
            host_copy(y, dy, sizeof(float) * (size_t)NP * (size_t)gs);
            host_copy(z, dz, sizeof(float) * (size_t)NP * (size_t)gs);
            int bad = 0;
            for (int p = 0; p < NP; p++)
                for (int64_t r = 0; r < rows; r++) bad += !same_bits(y[p * gs + r], z[p * gs + r]);
            CHECK_MSG(bad == 0,
                      "%s %lldx%lld: experts' gate, up and glu (act %d, bias %d): %d "
                      "differ",
                      ti->name, (long long)rows, (long long)cols, act, bias, bad);
        }
    hm_cu_w wx = wu;
    wx.rows--;
    CHECK(hm_cu_matvec_experts_glu(&wg, &wx, NULL, NULL, did, NP, dx, cols, 3, 0, 0, 0, dy, gs,
                                   0) == cudaErrorInvalidValue);
    CHECK(hm_cu_matvec_experts_glu(&wg, &wu, NULL, NULL, did, NP, dx, cols, 3, 3, 0, 0, dy, gs,
                                   0) == cudaErrorInvalidValue);
    /* down and the weighted sum in one launch (2 tokens of 3 pairs, one on the CPU): the bits
     * of the two launches, its counters left 0; twice, as a graph's replays */
    {
        const float wts[NP] = {0.5f, 0.25f, -1.5f, 2.0f, 0.75f, 1e-3f};
        const unsigned zc[2] = {0, 0};
        float *dwt = dev_copy(wts, sizeof wts);
        unsigned *dc = dev_copy(zc, sizeof zc), hc[2] = {1, 1};
        const int64_t os = rows + 1;
        float *do1 = dev_copy(NULL, sizeof(float) * 2 * (size_t)os),
              *do2 = dev_copy(NULL, sizeof(float) * 2 * (size_t)os);
        float *o1 = malloc(sizeof(float) * 2 * (size_t)os),
              *o2 = malloc(sizeof(float) * 2 * (size_t)os);
        for (int rep = 0; rep < 2; rep++) {
            CU(hm_cu_matvec_experts_sum(&wg, did, 2, 3, dx, cols, dy, gs, dwt, do1, os, dc, 0));
            CU(hm_cu_matvec_experts(&wg, did, NP, dx, cols, 1, dz, gs, 0));
            CU(hm_cu_moe_combine(dz, gs, NULL, dwt, 2, 3, rows, do2, os, 0));
            host_copy(o1, do1, sizeof(float) * 2 * (size_t)os);
            host_copy(o2, do2, sizeof(float) * 2 * (size_t)os);
            host_copy(hc, dc, sizeof hc);
            int bad = 0;
            for (int t = 0; t < 2; t++)
                for (int64_t r = 0; r < rows; r++)
                    bad += !same_bits(o1[t * os + r], o2[t * os + r]);
            CHECK_MSG(bad == 0 && hc[0] == 0 && hc[1] == 0,
                      "%s %lldx%lld: experts' down and sum: %d differ, counters %u %u", ti->name,
                      (long long)rows, (long long)cols, bad, hc[0], hc[1]);
        }
        CHECK(hm_cu_matvec_experts_sum(&wg, did, 9, 3, dx, cols, dy, gs, dwt, do1, os, dc, 0) ==
              cudaErrorInvalidValue);
        CHECK(hm_cu_matvec_experts_sum(&wg, did, 2, 3, dx, cols, dy, gs, dwt, do1, os, NULL, 0) ==
              cudaErrorInvalidValue);
        cudaFree(dwt), cudaFree(dc), cudaFree(do1), cudaFree(do2);
        free(o1), free(o2);
    }
    cudaFree(dw), cudaFree(dx), cudaFree(db), cudaFree(dy), cudaFree(dz), cudaFree(did);
    free(w), free(x), free(b), free(y), free(z);
}

/* the sigmoid router (DeepSeek-V3, GLM-4.5) against the CPU's: the same ids, weights to float
 * rounding */
static void check_router_sigmoid(void) {
    enum { N = 9, E = 256, K = 8, RS = 260 };
    static float rl[N * RS], bias[E];
    float w[N * K], wr[K];
    int32_t id[N * K], ir[K];
    for (int i = 0; i < N * RS; i++) rl[i] = rndf() * 3;
    for (int i = 0; i < E; i++) bias[i] = rndf() * 0.1f;
    float *drl = dev_copy(rl, sizeof rl), *db = dev_copy(bias, sizeof bias);
    float *dw = dev_copy(NULL, sizeof w);
    int32_t *did = dev_copy(NULL, sizeof id);
    static const int groups[][2] = {{1, 1}, {8, 4}, {16, 3}};
    for (int g = 0; g < 3; g++)
        for (int renorm = 0; renorm < 2; renorm++) {
            CU(hm_cu_router_sigmoid(drl, RS, N, E, db, groups[g][0], groups[g][1], K, renorm, 2.5f,
                                    did, dw, 0));
            host_copy(id, did, sizeof id);
            host_copy(w, dw, sizeof w);
            for (int t = 0; t < N; t++) {
                CHECK_OK(hm_router_sigmoid_group_topk(rl + t * RS, bias, E, groups[g][0],
                                                      groups[g][1], K, renorm, 2.5f, ir, wr));
                CHECK_MSG(memcmp(ir, id + t * K, sizeof ir) == 0, "sigmoid router: token %d ids",
                          t);
                for (int j = 0; j < K; j++) /* the device's expf is within 2 ulp of the host's */
                    CHECK(fabsf(wr[j] - w[t * K + j]) <= 1e-6f * fabsf(wr[j]));
            }
        }
    /* DeepSeek-V2's group-limited softmax against the twin the CPU's router runs */
    static const int sgroups[][3] = {{8, 3, 6}, {16, 2, 8}, {4, 4, 8}};
    for (int g = 0; g < 3; g++)
        for (int renorm = 0; renorm < 2; renorm++) {
            CU(hm_cu_router_softmax_group(drl, RS, N, 160, sgroups[g][0], sgroups[g][1],
                                          sgroups[g][2], renorm, 16.0f, did, dw, 0));
            host_copy(id, did, sizeof id);
            host_copy(w, dw, sizeof w);
            const int k = sgroups[g][2];
            for (int t = 0; t < N; t++) {
                hm_hd_router_softmax_group(rl + t * RS, 160, sgroups[g][0], sgroups[g][1], k,
                                           renorm, 16.0f, ir, wr);
                CHECK_MSG(memcmp(ir, id + t * k, sizeof(int32_t) * (size_t)k) == 0,
                          "group-limited softmax router: token %d ids", t);
                for (int j = 0; j < k; j++)
                    CHECK(fabsf(wr[j] - w[t * k + j]) <= 1e-6f * fabsf(wr[j]));
            }
        }
    CHECK(hm_cu_router_softmax_group(drl, RS, N, 160, 7, 3, 6, false, 1.0f, did, dw, 0) ==
          cudaErrorInvalidValue);
    cudaFree(drl), cudaFree(db), cudaFree(dw), cudaFree(did);
}

/* The hybrid step's hand-off through pinned memory: the rows, ids and weights written to the
 * host and the out flag rung with the step's number; the in side waiting for its flag (rung
 * here before the launch), then adding or assigning the host's sum. N rows of H values, XS
 * apart on the device: whole float4s or not, one block's loads or many. */
static void check_handoff_case(int N, int H, int XS, int K) {
    const size_t nx = (size_t)N * XS, nh = (size_t)N * H, nk = (size_t)N * K;
    float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * nk);
    float *out = malloc(sizeof(float) * nx), *sum = malloc(sizeof(float) * nh);
    float *got = malloc(sizeof(float) * nx);
    int32_t *ids = malloc(sizeof(int32_t) * nk);
    for (size_t i = 0; i < nx; i++) x[i] = rndf(), out[i] = rndf();
    for (size_t i = 0; i < nk; i++) ids[i] = (int32_t)(rnd32() % 100) - 1, w[i] = rndf();
    for (size_t i = 0; i < nh; i++) sum[i] = rndf();
    float *dx = dev_copy(x, sizeof(float) * nx), *dw = dev_copy(w, sizeof(float) * nk),
          *dout = dev_copy(out, sizeof(float) * nx);
    int32_t *di = dev_copy(ids, sizeof(int32_t) * nk);
    const uint32_t ep = 7;
    uint32_t *dep = dev_copy(&ep, sizeof ep);
    void *hb = NULL;
    const size_t hbytes = sizeof(float) * (2 * nh + nk) + sizeof(int32_t) * (nk + 3);
    CU(cudaMallocHost(&hb, hbytes));
    memset(hb, 0, hbytes);
    float *hx = hb, *hout = hx + nh, *hw = hout + nh;
    int32_t *hid = (int32_t *)(hw + nk);
    uint32_t *ring = (uint32_t *)(hid + nk), *err = ring + 2;
    memcpy(hout, sum, sizeof(float) * nh);
    CU(hm_cu_handoff_out(dx, XS, N, H, di, dw, (int)nk, hx, hid, hw, ring, dep, 0));
    CU(cudaDeviceSynchronize());
    int bad = 0;
    for (int t = 0; t < N; t++)
        for (int j = 0; j < H; j++) bad += !same_bits(hx[t * H + j], x[t * XS + j]);
    bad += memcmp(hid, ids, sizeof(int32_t) * nk) != 0 || memcmp(hw, w, sizeof(float) * nk) != 0;
    CHECK_MSG(bad == 0 && ring[0] == ep, "hand-off out (%d x %d): %d wrong, ring %u", N, H, bad,
              ring[0]);
    for (int add = 0; add < 2; add++) {
        ring[1] = ep;
        float *o2 = dev_copy(out, sizeof(float) * nx);
        CU(hm_cu_handoff_in(ring + 1, dep, hout, N, H, add, o2, XS, err, 0));
        CU(cudaDeviceSynchronize());
        host_copy(got, o2, sizeof(float) * nx);
        bad = 0;
        for (int t = 0; t < N; t++)
            for (int j = 0; j < XS; j++) {
                const float want = j < H ? (add ? out[t * XS + j] + sum[t * H + j] : sum[t * H + j])
                                         : out[t * XS + j];
                bad += !same_bits(got[t * XS + j], want);
            }
        CHECK_MSG(bad == 0 && *err == 0, "hand-off in (%d x %d, add %d): %d wrong, err %u", N, H,
                  add, bad, *err);
        cudaFree(o2);
    }
    CHECK(hm_cu_handoff_out(dx, XS, -1, H, di, dw, 0, hx, hid, hw, ring, dep, 0) ==
          cudaErrorInvalidValue);
    CHECK(hm_cu_handoff_in(ring + 1, dep, hout, N, 0, true, dout, XS, err, 0) ==
          cudaErrorInvalidValue);
    cudaFreeHost(hb);
    cudaFree(dx), cudaFree(dw), cudaFree(dout), cudaFree(di), cudaFree(dep);
    free(x), free(w), free(out), free(sum), free(got), free(ids);
}

static void check_handoff(void) {
    check_handoff_case(3, 70, 75, 4);      /* odd rows: single floats */
    check_handoff_case(33, 2048, 2112, 8); /* a decode batch: float4s over many blocks */
    check_handoff_case(5, 2880, 2884, 4);  /* whole float4s, rows 4 floats apart */
}

/* the sampler's candidates against a sort: the k largest, ties to the lower token, in token
 * order; ties across the radix passes' boundaries, -0 and +0, -inf, a NaN row */
static void check_top_candidates(void) {
    enum { R = 5, VMAX = 151936 };
    static const int vs[] = {151936, 1000, 300};
    static const int ks[] = {1, 7, 40, 256};
    float *lg = malloc(sizeof(float) * R * VMAX);
    int32_t *order = malloc(sizeof(int32_t) * VMAX), ids[R * 256], bad[R];
    float vals[R * 256];
    for (size_t vi = 0; vi < 3; vi++) {
        const int V = vs[vi];
        for (int r = 0; r < R; r++)
            for (int i = 0; i < V; i++) {
                float x = rndf() * 8.0f;
                if (r == 1) x = (float)(int)(x * 2.0f); /* many ties */
                if (r == 2 && i % 3 == 0) x = -INFINITY;
                if (r == 3) x = i % 2 ? -0.0f : 0.0f; /* every logit tied */
                lg[(size_t)r * V + i] = x;
            }
        lg[(size_t)4 * V + V / 2] = NAN;
        float *dl = dev_copy(lg, sizeof(float) * R * (size_t)V);
        int32_t *di = dev_copy(NULL, sizeof ids), *db = dev_copy(NULL, sizeof bad);
        float *dv = dev_copy(NULL, sizeof vals);
        const size_t scb = hm_cu_top_scratch(R, V);
        void *sc = scb ? dev_copy(NULL, scb) : NULL;
        for (size_t ki = 0; ki < 8; ki++) {
            const int k = ks[ki % 4];
            if (k > V) continue;
            /* one block per row, then the segmented form where the row allows it */
            CU(hm_cu_top_candidates(dl, V, R, V, k, di, dv, db, ki < 4 ? NULL : sc, 0));
            host_copy(ids, di, sizeof(int32_t) * R * (size_t)k);
            host_copy(vals, dv, sizeof(float) * R * (size_t)k);
            host_copy(bad, db, sizeof bad);
            for (int r = 0; r < 4; r++) {
                const float *row = lg + (size_t)r * V;
                for (int i = 0; i < V; i++) order[i] = i;
                g_top_row = row;
                qsort(order, (size_t)V, sizeof *order, top_order);
                qsort(order, (size_t)k, sizeof *order, id_order);
                int wrong = 0;
                for (int j = 0; j < k; j++)
                    wrong += ids[r * k + j] != order[j] || vals[r * k + j] != row[order[j]] + 0.0f;
                CHECK_MSG(wrong == 0 && bad[r] == -1, "candidates V %d k %d row %d: %d wrong", V, k,
                          r, wrong);
            }
            CHECK_MSG(bad[4] == V / 2, "candidates: NaN at %d reported at %d", V / 2, bad[4]);
        }
        cudaFree(dl), cudaFree(di), cudaFree(db), cudaFree(dv), cudaFree(sc);
    }
    CHECK(hm_cu_top_candidates(NULL, 1, 1, 10, 257, NULL, NULL, NULL, NULL, 0) ==
          cudaErrorInvalidValue);
    free(lg), free(order);
}

/* a matmul's bias and the shared expert's gated add (qwen2moe) against the CPU's arithmetic
 * (exec_cpu.c: bias rows added; dst += sigmoid(xn . w) * src with the twin's sigmoid) */
static void check_bias_gated_add(void) {
    enum { N = 6, H = 200, S = 232 }; /* rows S floats apart: strides as the slots have them */
    float dst[N * S], src[N * S], xn[N * S], b[H], w[H], out[N * S];
    for (int i = 0; i < N * S; i++) dst[i] = rndf(), src[i] = rndf() * 2, xn[i] = rndf();
    for (int i = 0; i < H; i++) b[i] = rndf(), w[i] = rndf() * 0.2f;
    float *dd = dev_copy(dst, sizeof dst), *ds = dev_copy(src, sizeof src);
    float *dx = dev_copy(xn, sizeof xn), *db = dev_copy(b, sizeof b), *dw = dev_copy(w, sizeof w);
    CU(hm_cu_add_bias(dd, S, db, N, H - 3, 0));
    host_copy(out, dd, sizeof out);
    double worst = 0;
    for (int t = 0; t < N; t++)
        for (int d = 0; d < S; d++) {
            const float r = dst[t * S + d] + (d < H - 3 ? b[d] : 0.0f);
            worst = fmax(worst, fabs(out[t * S + d] - r));
        }
    CHECK_MSG(worst == 0, "bias: error %.3g", worst);
    for (int gated = 0; gated < 2; gated++) {
        float *dd2 = dev_copy(dst, sizeof dst);
        CU(hm_cu_gated_add(dd2, S, ds, S, dx, S, gated ? dw : NULL, N, H, 0));
        host_copy(out, dd2, sizeof out);
        worst = 0;
        for (int t = 0; t < N; t++) {
            double dot = 0;
            for (int d = 0; d < H; d++) dot += (double)xn[t * S + d] * w[d];
            const float g = gated ? hm_hd_sigmoid((float)dot) : 1.0f;
            /* relative to the terms' size: a sum that cancels to near zero keeps their
             * rounding (the gate's float dot product on the GPU) */
            for (int d = 0; d < S; d++) {
                const float a = dst[t * S + d], u = d < H ? g * src[t * S + d] : 0.0f;
                worst = fmax(worst, fabs(out[t * S + d] - (a + u)) / (fabs(a) + fabs(u) + 1e-6));
            }
        }
        CHECK_MSG(worst <= 1e-5, "gated add (%s): error %.3g", gated ? "gate" : "no gate", worst);
        cudaFree(dd2);
    }
    cudaFree(dd), cudaFree(ds), cudaFree(dx), cudaFree(db), cudaFree(dw);
}

/* the experts' weighted sum added by the norm (hm_cu_rmsnorm_moe) against the sum's launch and
 * the residual add + norm (hm_cu_moe_combine, hm_cu_rmsnorm): the same bits, with and without
 * the norm */
static void check_norm_moe(int64_t h) {
    enum { N = 3, K = 4 };
    const size_t nx = (size_t)N * (size_t)h, ny = nx * K;
    float *x = malloc(sizeof(float) * nx), *y = malloc(sizeof(float) * ny), wt[N * K];
    float *w = malloc(sizeof(float) * (size_t)h), *r1 = malloc(sizeof(float) * nx * 2),
          *r2 = malloc(sizeof(float) * nx * 2);
    for (size_t i = 0; i < nx; i++) x[i] = rndf() * 3;
    for (size_t i = 0; i < ny; i++) y[i] = rndf();
    for (int i = 0; i < N * K; i++) wt[i] = rndf() * 0.5f + 0.5f;
    for (int64_t d = 0; d < h; d++) w[d] = 1 + rndf() * 0.5f;
    float *dx1 = dev_copy(x, sizeof(float) * nx), *dx2 = dev_copy(x, sizeof(float) * nx);
    float *dy = dev_copy(y, sizeof(float) * ny), *dwt = dev_copy(wt, sizeof wt),
          *dw = dev_copy(w, sizeof(float) * (size_t)h);
    float *ds = dev_copy(NULL, sizeof(float) * nx), *dn1 = dev_copy(NULL, sizeof(float) * nx),
          *dn2 = dev_copy(NULL, sizeof(float) * nx);
    for (int norm = 0; norm < 2; norm++) {
        CU(hm_cu_moe_combine(dy, h, NULL, dwt, N, K, h, ds, h, 0));
        CU(hm_cu_rmsnorm(dx1, ds, norm ? dw : NULL, dn1, NULL, N, h, 1e-6f, 0));
        CU(hm_cu_rmsnorm_moe(dx2, dy, h, dwt, K, norm ? dw : NULL, dn2, N, h, 1e-6f, 0));
        host_copy(r1, dx1, sizeof(float) * nx), host_copy(r2, dx2, sizeof(float) * nx);
        host_copy(r1 + nx, dn1, sizeof(float) * nx), host_copy(r2 + nx, dn2, sizeof(float) * nx);
        int bad = 0;
        for (size_t i = 0; i < (norm ? 2 * nx : nx); i++) bad += !same_bits(r1[i], r2[i]);
        CHECK_MSG(bad == 0, "experts' sum + residual add%s (h %lld): %d values differ",
                  norm ? " + rmsnorm" : "", (long long)h, bad);
    }
    CHECK(hm_cu_rmsnorm_moe(dx2, dy, h, dwt, 0, dw, dn2, N, h, 1e-6f, 0) == cudaErrorInvalidValue);
    cudaFree(dx1), cudaFree(dx2), cudaFree(dy), cudaFree(dwt), cudaFree(dw);
    cudaFree(ds), cudaFree(dn1), cudaFree(dn2);
    free(x), free(y), free(w), free(r1), free(r2);
}

static void check_norm_glu_router(void) {
    enum { N = 5, H = 300 };
    float x[N * H], add[N * H], w[H], y[N * H], ref[N * H];
    for (int i = 0; i < N * H; i++) x[i] = rndf() * 3, add[i] = rndf();
    for (int i = 0; i < H; i++) w[i] = 1 + rndf() * 0.5f;
    float *dx = dev_copy(x, sizeof x), *da = dev_copy(add, sizeof add), *dw = dev_copy(w, sizeof w);
    float *dy = dev_copy(NULL, sizeof y);
    CU(hm_cu_rmsnorm(dx, da, dw, dy, NULL, N, H, 1e-6f, 0));
    host_copy(y, dy, sizeof y);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        float xr[H];
        for (int d = 0; d < H; d++) xr[d] = x[i * H + d] + add[i * H + d];
        hm_rmsnorm(xr, w, ref + i * H, H, 1e-6f);
        for (int d = 0; d < H; d++)
            worst =
                fmax(worst, fabs(y[i * H + d] - ref[i * H + d]) / (fabs(ref[i * H + d]) + 1e-6));
    }
    CHECK_MSG(worst <= 1e-6, "add + rmsnorm: error %.3g", worst);
    /* the output head's gather: rows 4 and 1 of the (added) stream */
    const int32_t rows[2] = {4, 1};
    int32_t *dr = dev_copy(rows, sizeof rows);
    CU(hm_cu_rmsnorm(dx, NULL, dw, dy, dr, 2, H, 1e-6f, 0));
    host_copy(y, dy, sizeof(float) * 2 * H);
    worst = 0;
    for (int i = 0; i < 2; i++)
        for (int d = 0; d < H; d++)
            worst = fmax(worst, fabs(y[i * H + d] - ref[rows[i] * H + d]) /
                                    (fabs(ref[rows[i] * H + d]) + 1e-6));
    CHECK_MSG(worst <= 1e-6, "gathered rmsnorm: error %.3g", worst);
    check_norm_moe(H);
    check_norm_moe(8200); /* past the kernel's rows in registers */
    /* the GLU of every activation against the twin (hm_hd_glu), on the stream x + add */
    for (int act = 0; act < 3; act++) {
        float xs[N * H];
        for (int i = 0; i < N * H; i++) xs[i] = (x[i] + add[i]) * (act == 2 ? 4.0f : 1.0f);
        cudaMemcpy(dx, xs, sizeof xs, cudaMemcpyHostToDevice);
        CU(hm_cu_glu(dx, H, da, H, N, H - 7, act, 1.702f, 7.0f, 0));
        host_copy(y, dx, sizeof y);
        worst = 0;
        for (int i = 0; i < N; i++)
            for (int d = 0; d < H; d++) {
                const float xr = xs[i * H + d];
                const float r = d < H - 7 ? hm_hd_glu(act, xr, add[i * H + d], 1.702f, 7.0f) : xr;
                /* GELU's 1 + erf(g / sqrt 2) cancels for negative g: the device's and the host's
                 * erff differ by an ulp or two, relative to the gate's scale */
                const double scale =
                    act == 1 ? fabs(r) + 0.1 * fabs(xr * add[i * H + d]) + 1e-6 : fabs(r) + 1e-6;
                worst = fmax(worst, fabs(y[i * H + d] - r) / scale);
            }
        CHECK_MSG(worst <= (act == 1 ? 2e-6 : 1e-6), "glu (act %d): error %.3g", act, worst);
    }
    CHECK(hm_cu_glu(dx, H, da, H, N, H, 3, 0, 0, 0) == cudaErrorInvalidValue);
    /* rounding to BF16 (--gpu-dtype bf16) against hm_f32_to_bf16: ties, subnormals, infinities,
     * rows with a stride */
    {
        enum { R = 3, C = 1000, S = 1003 };
        static float xf[R * S];
        static uint16_t yo[R * C];
        for (int i = 0; i < R * S; i++) xf[i] = rndf() * ldexpf(1.0f, i % 40 - 20);
        xf[0] = hm_bits_f32(0x3f808000u), xf[1] = hm_bits_f32(0x3f818000u); /* ties both ways */
        xf[2] = hm_bits_f32(0x00000123u), xf[3] = INFINITY, xf[4] = -INFINITY, xf[5] = -0.0f;
        xf[6] = hm_bits_f32(0x7f7fffffu); /* rounds up to infinity */
        float *dxf = dev_copy(xf, sizeof xf);
        uint16_t *dyo = dev_copy(NULL, sizeof yo);
        CU(hm_cu_f32_to_bf16(dxf, S, R, C, dyo, 0));
        host_copy(yo, dyo, sizeof yo);
        int bad = 0;
        for (int r = 0; r < R; r++)
            for (int j = 0; j < C; j++) bad += yo[r * C + j] != hm_f32_to_bf16(xf[r * S + j]);
        CHECK_MSG(bad == 0, "f32 -> bf16: %d of %d differ", bad, R * C);
        cudaFree(dxf), cudaFree(dyo);
    }
    /* the experts' biases: pairs in order and at places, experts on the CPU (-1) untouched */
    {
        enum { NP = 6, C = 40, NE = 3 };
        const int32_t ids[NP] = {2, -1, 0, 1, -1, 2}, pos_of[NP] = {5, 0, 3, 1, 4, 2};
        float yb[NP * C], b[NE * C], yo[NP * C];
        for (int i = 0; i < NP * C; i++) yb[i] = rndf();
        for (int i = 0; i < NE * C; i++) b[i] = rndf();
        float *dyb = dev_copy(yb, sizeof yb), *dbb = dev_copy(b, sizeof b);
        int32_t *did = dev_copy(ids, sizeof ids), *dpo = dev_copy(pos_of, sizeof pos_of);
        for (int placed = 0; placed < 2; placed++) {
            cudaMemcpy(dyb, yb, sizeof yb, cudaMemcpyHostToDevice);
            CU(hm_cu_expert_bias(dyb, C, placed ? dpo : NULL, did, NP, dbb, C, 0));
            host_copy(yo, dyb, sizeof yo);
            int bad = 0;
            for (int p = 0; p < NP; p++) {
                const int r = placed ? pos_of[p] : p;
                for (int j = 0; j < C; j++)
                    bad += yo[r * C + j] !=
                           (ids[p] < 0 ? yb[r * C + j] : yb[r * C + j] + b[ids[p] * C + j]);
            }
            CHECK_MSG(bad == 0, "experts' biases (%s): %d wrong", placed ? "placed" : "in order",
                      bad);
        }
        CU(hm_cu_expert_bias(dyb, C, NULL, did, NP, NULL, C, 0)); /* no bias: nothing */
        cudaFree(dyb), cudaFree(dbb), cudaFree(did), cudaFree(dpo);
    }
    /* softmax top-k: the CPU router's ids, its weights to float rounding */
    static const int es[] = {128, 60, 8, 300, 512};
    for (size_t t = 0; t < 5; t++) {
        const int E = es[t], K = E < 8 ? E : E == 512 ? 32 : 8;
        float rl[7 * 512], wg[7 * 32], wr[32];
        int32_t id[7 * 32], ir[32];
        for (int i = 0; i < 7 * E; i++) rl[i] = rndf() * 4;
        rl[3 * E + 1] = rl[3 * E + 2]; /* a tie: the lower index first */
        float *drl = dev_copy(rl, sizeof(float) * 7 * (size_t)E), *dwg = dev_copy(NULL, sizeof wg);
        int32_t *did = dev_copy(NULL, sizeof id);
        for (int renorm = 0; renorm < 2; renorm++) {
            CU(hm_cu_router_topk(drl, E, 7, E, K, renorm, did, dwg, 0));
            host_copy(id, did, sizeof(int32_t) * 7 * K);
            host_copy(wg, dwg, sizeof(float) * 7 * K);
            for (int i = 0; i < 7; i++) {
                CHECK_OK(hm_router_softmax_topk(rl + i * E, E, K, renorm, ir, wr));
                CHECK(memcmp(ir, id + i * K, sizeof(int32_t) * K) == 0);
                for (int j = 0; j < K; j++)
                    CHECK(fabsf(wr[j] - wg[i * K + j]) <= 1e-6f * fabsf(wr[j]));
            }
        }
        cudaFree(drl), cudaFree(dwg), cudaFree(did);
    }
    /* the experts' weighted sum */
    {
        enum { T = 3, K = 4, D = 70 };
        float ye[T * K * D], we[T * K], o[T * D];
        for (int i = 0; i < T * K * D; i++) ye[i] = rndf();
        for (int i = 0; i < T * K; i++) we[i] = rndf();
        float *dye = dev_copy(ye, sizeof ye), *dwe = dev_copy(we, sizeof we),
              *dout = dev_copy(NULL, sizeof o);
        CU(hm_cu_moe_combine(dye, D, NULL, dwe, T, K, D, dout, D, 0));
        host_copy(o, dout, sizeof o);
        worst = 0;
        for (int t = 0; t < T; t++)
            for (int d = 0; d < D; d++) {
                double s = 0;
                for (int j = 0; j < K; j++) s += (double)we[t * K + j] * ye[(t * K + j) * D + d];
                worst = fmax(worst, fabs(o[t * D + d] - s));
            }
        CHECK_MSG(worst <= 1e-5, "experts' sum: error %.3g", worst);
        cudaFree(dye), cudaFree(dwe), cudaFree(dout);
    }
    cudaFree(dx), cudaFree(da), cudaFree(dw), cudaFree(dy), cudaFree(dr);
}

/* the router's matvec and softmax top-k in one launch: its logits against a double product, its
 * picks against the CPU router's on those logits; twice on the same counters (the last block
 * resets them); shapes it refuses launch nothing */
static void check_router_fused(void) {
    static const int es[] = {128, 60, 8, 300, 512}, cs[] = {2048, 64, 4096, 264};
    for (size_t ie = 0; ie < 5; ie++)
        for (size_t ic = 0; ic < 4; ic++) {
            const int E = es[ie], C = cs[ic],
                      K = E < 8      ? E
                          : E == 512 ? 32
                                     : 8,
                      N = 1 + (int)ie, XS = C + 4, RS = E + 3;
            float *wt = malloc(sizeof(float) * (size_t)E * C), *x = malloc(sizeof(float) * 8 * XS);
            float rl[8 * 515], wg[8 * 32], wr[32];
            int32_t id[8 * 32], ir[32];
            for (int i = 0; i < E * C; i++) wt[i] = rndf();
            float *dwt = dev_copy(wt, sizeof(float) * (size_t)E * C);
            float *dx = dev_copy(NULL, sizeof(float) * 8 * XS), *drl = dev_copy(NULL, sizeof rl);
            float *dwg = dev_copy(NULL, sizeof wg);
            int32_t *did = dev_copy(NULL, sizeof id);
            unsigned *dcnt = dev_copy(NULL, sizeof(unsigned) * HM_CU_MATVEC_MAX);
            CU(cudaMemset(dcnt, 0, sizeof(unsigned) * HM_CU_MATVEC_MAX));
            const hm_cu_w w = {HM_TYPE_F32, dwt, E, C, sizeof(float) * (size_t)C, 0};
            for (int rep = 0; rep < 2; rep++) {
                for (int i = 0; i < 8 * XS; i++) x[i] = rndf();
                CU(cudaMemcpy(dx, x, sizeof(float) * 8 * XS, cudaMemcpyHostToDevice));
                const bool renorm = rep == 1;
                CU(hm_cu_router_fused(&w, dx, XS, N, K, renorm, drl, RS, did, dwg, dcnt, 0));
                host_copy(rl, drl, sizeof(float) * (size_t)N * RS);
                host_copy(id, did, sizeof(int32_t) * (size_t)N * K);
                host_copy(wg, dwg, sizeof(float) * (size_t)N * K);
                double worst = 0;
                for (int t = 0; t < N; t++) {
                    for (int r = 0; r < E; r++) {
                        double d = 0, a = 0;
                        for (int j = 0; j < C; j++) {
                            d += (double)wt[r * C + j] * x[t * XS + j];
                            a += fabs((double)wt[r * C + j] * x[t * XS + j]);
                        }
                        worst = fmax(worst, fabs(rl[t * RS + r] - d) / (a + 1e-30));
                    }
                    CHECK_OK(hm_router_softmax_topk(rl + t * RS, E, K, renorm, ir, wr));
                    CHECK_MSG(memcmp(ir, id + t * K, sizeof(int32_t) * K) == 0,
                              "fused router E %d cols %d token %d: ids", E, C, t);
                    for (int j = 0; j < K; j++)
                        CHECK(fabsf(wr[j] - wg[t * K + j]) <= 1e-6f * fabsf(wr[j]));
                }
                CHECK_MSG(worst <= 1e-6, "fused router E %d cols %d: logits error %.3g", E, C,
                          worst);
            }
            free(wt), free(x);
            cudaFree(dwt), cudaFree(dx), cudaFree(drl), cudaFree(dwg), cudaFree(did);
            cudaFree(dcnt);
        }
    /* shapes the kernel does not take: nothing launched, the caller's two kernels instead */
    float *d = dev_copy(NULL, sizeof(float) * 64 * 8200);
    unsigned *dcnt = dev_copy(NULL, sizeof(unsigned) * HM_CU_MATVEC_MAX);
    int32_t *did = dev_copy(NULL, sizeof(int32_t) * 64);
    const hm_cu_w odd = {HM_TYPE_F32, d, 64, 100, 400, 0},
                  wide = {HM_TYPE_F32, d, 8, 8192, 32768, 0},
                  q8 = {HM_TYPE_Q8_0, d, 64, 256, 272, 0}, ok = {HM_TYPE_F32, d, 64, 256, 1024, 0};
    CHECK(hm_cu_router_fused(&odd, d, 100, 1, 8, true, d, 64, did, d, dcnt, 0) ==
          cudaErrorInvalidValue);
    CHECK(hm_cu_router_fused(&wide, d, 8192, 1, 8, true, d, 64, did, d, dcnt, 0) ==
          cudaErrorInvalidValue);
    CHECK(hm_cu_router_fused(&q8, d, 256, 1, 8, true, d, 64, did, d, dcnt, 0) ==
          cudaErrorInvalidValue);
    CHECK(hm_cu_router_fused(&ok, d, 256, 9, 8, true, d, 64, did, d, dcnt, 0) ==
          cudaErrorInvalidValue);
    CHECK(hm_cu_router_fused(&ok, d, 256, 1, 8, true, d, 64, did, d, NULL, 0) ==
          cudaErrorInvalidValue);
    CHECK(hm_cu_router_fused(&ok, d + 1, 256, 1, 8, true, d, 64, did, d, dcnt, 0) ==
          cudaErrorInvalidValue);
    CHECK(hm_cu_router_fused(&ok, d, 256, 1, 65, true, d, 64, did, d, dcnt, 0) ==
          cudaErrorInvalidValue);
    cudaFree(d), cudaFree(dcnt), cudaFree(did);
}

/* q/k norms, rope and the cache store, then attention, against the CPU's ops and a double
 * softmax: a prompt of P tokens in batches of `chunk` on sequence 1 of 2 */
static void check_attention(int nh, int nkv, int hd, int rd, int P, int chunk, bool f16, int window,
                            bool sinks, bool tc) {
    const int qd = nh * hd, kd = nkv * hd, L = 2, S = 2, il = 1, sq = 1;
    /* those cases with the interleaved rotation (GGUF Mixtral) */
    const bool inter = hd == 72 || (hd == 64 && rd == 32);
    const int64_t ctx = P + 3;
    float *q = malloc(sizeof(float) * (size_t)P * qd), *k = malloc(sizeof(float) * (size_t)P * kd),
          *v = malloc(sizeof(float) * (size_t)P * kd), *cs = malloc(sizeof(float) * (size_t)P * rd);
    float qn[512], kn[512], inv[256];
    for (int i = 0; i < P * qd; i++) q[i] = rndf();
    for (int i = 0; i < P * kd; i++) k[i] = rndf(), v[i] = rndf();
    for (int d = 0; d < hd; d++) qn[d] = 1 + 0.3f * rndf(), kn[d] = 1 + 0.3f * rndf();
    float sk[64]; /* gpt-oss's sink logits, some above every score */
    for (int h = 0; h < nh; h++) sk[h] = h % 3 == 2 ? 6.0f : rndf() * 2;
    float *dsk = sinks ? dev_copy(sk, sizeof(float) * (size_t)nh) : NULL;
    hm_rope_inv_freq(inv, rd, 10000.0f);
    for (int p = 0; p < P; p++) hm_rope_cos_sin(p, inv, rd, cs + (size_t)p * rd);
    /* CPU: norms and rotation (hm_rmsnorm, hm_rope_neox) */
    float *qr = malloc(sizeof(float) * (size_t)P * qd),
          *kr = malloc(sizeof(float) * (size_t)P * kd);
    memcpy(qr, q, sizeof(float) * (size_t)P * qd);
    memcpy(kr, k, sizeof(float) * (size_t)P * kd);
    for (int p = 0; p < P; p++) {
        for (int h = 0; h < nh; h++)
            hm_rmsnorm(qr + (size_t)p * qd + h * hd, qn, qr + (size_t)p * qd + h * hd, hd, 1e-6f);
        for (int h = 0; h < nkv; h++)
            hm_rmsnorm(kr + (size_t)p * kd + h * hd, kn, kr + (size_t)p * kd + h * hd, hd, 1e-6f);
        hm_rope(inter, qr + (size_t)p * qd, nh, hd, rd, cs + (size_t)p * rd);
        hm_rope(inter, kr + (size_t)p * kd, nkv, hd, rd, cs + (size_t)p * rd);
    }
    /* GPU */
    const size_t el = f16 ? 2 : 4, kvn = (size_t)L * S * nkv * (size_t)ctx * hd;
    void *dk = dev_copy(NULL, kvn * el), *dv = dev_copy(NULL, kvn * el);
    cudaMemset(dk, 0, kvn * el), cudaMemset(dv, 0, kvn * el);
    const hm_cu_kv kv = {dk, dv, f16, ctx, S, nkv, hd, 0};
    float *dq = dev_copy(q, sizeof(float) * (size_t)P * qd),
          *dkk = dev_copy(k, sizeof(float) * (size_t)P * kd),
          *dvv = dev_copy(v, sizeof(float) * (size_t)P * kd),
          *dcs = dev_copy(cs, sizeof(float) * (size_t)P * rd);
    float *dqn = dev_copy(qn, sizeof(float) * hd), *dkn = dev_copy(kn, sizeof(float) * hd);
    float *dout = dev_copy(NULL, sizeof(float) * (size_t)P * qd);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)P), *seq = malloc(sizeof(int32_t) * (size_t)P);
    float *dpart = dev_copy(NULL, sizeof(float) * 8 * (size_t)nh *
                                      (size_t)hm_cu_attention_splits(ctx) * (hd + 2));
    for (int p = 0; p < P; p++) pos[p] = p, seq[p] = sq;
    int32_t *dpos = dev_copy(pos, sizeof(int32_t) * (size_t)P),
            *dseq = dev_copy(seq, sizeof(int32_t) * (size_t)P);
    /* the split kernel's own merge (counters) into dout2 */
    unsigned *zc = calloc((size_t)(8 * nh), sizeof(unsigned));
    unsigned *dcnt = dev_copy(zc, sizeof(unsigned) * 8 * (size_t)nh);
    float *dout2 = dev_copy(NULL, sizeof(float) * (size_t)P * qd);
    CU(cudaMemset(dout2, 0, sizeof(float) * (size_t)P * qd));
    CU(cudaMemset(dout, 0, sizeof(float) * (size_t)P * qd));
    for (int p0 = 0; p0 < P; p0 += chunk) {
        const int n = P - p0 < chunk ? P - p0 : chunk;
        const hm_cu_qkv a = {dq + (size_t)p0 * qd,
                             dkk + (size_t)p0 * kd,
                             dvv + (size_t)p0 * kd,
                             qd,
                             kd,
                             dqn,
                             dkn,
                             dcs + (size_t)p0 * rd,
                             rd,
                             inter,
                             nh,
                             1e-6f,
                             dpos + p0,
                             dseq + p0,
                             il};
        CU(hm_cu_qk_rope_kv(&a, &kv, n, 0));
        const hm_cu_attn at = {dq + (size_t)p0 * qd,
                               qd,
                               dout + (size_t)p0 * qd,
                               qd,
                               nh,
                               1.0f / sqrtf((float)hd),
                               dpos + p0,
                               dseq + p0,
                               il,
                               dsk,
                               window,
                               NULL};
        /* decode-sized batches through the split kernel too (splits of 128 positions); with
         * tc, chunks of more than 8 tokens on the tensor cores */
        const int sp = hm_cu_attention_splits(ctx);
        if (tc && n > 8)
            CU(hm_cu_attention_tc(&at, &kv, n, sq, p0, 0));
        else
            CU(hm_cu_attention(&at, &kv, n, n <= 8 ? dpart : NULL, sp, 0));
        if (n <= 8 && sp > 1) {
            hm_cu_attn a2 = at;
            a2.out = dout2 + (size_t)p0 * qd, a2.cnt = dcnt;
            CU(hm_cu_attention(&a2, &kv, n, dpart, sp, 0));
        }
    }
    {
        float *o1 = malloc(sizeof(float) * (size_t)P * qd),
              *o2 = malloc(sizeof(float) * (size_t)P * qd);
        host_copy(o1, dout, sizeof(float) * (size_t)P * qd);
        host_copy(o2, dout2, sizeof(float) * (size_t)P * qd);
        host_copy(zc, dcnt, sizeof(unsigned) * 8 * (size_t)nh);
        int bad = 0, left = 0;
        if (chunk <= 8 && hm_cu_attention_splits(ctx) > 1)
            for (int i = 0; i < P * qd; i++) bad += !same_bits(o1[i], o2[i]);
        for (int i = 0; i < 8 * nh; i++) left += zc[i] != 0;
        CHECK_MSG(bad == 0 && left == 0,
                  "attention (hd %d, ctx %lld): %d values of the merge by the last split differ "
                  "from the merge launch's, %d counters left set",
                  hd, (long long)ctx, bad, left);
        free(o1), free(o2);
    }
    free(zc);
    cudaFree(dcnt), cudaFree(dout2);
    float *out = malloc(sizeof(float) * (size_t)P * qd),
          *qg = malloc(sizeof(float) * (size_t)P * qd);
    host_copy(out, dout, sizeof(float) * (size_t)P * qd);
    host_copy(qg, dq, sizeof(float) * (size_t)P * qd);
    double eq = 0, eo = 0;
    for (int i = 0; i < P * qd; i++) eq = fmax(eq, fabs(qg[i] - qr[i]));
    /* the reference attention reads K and V as the cache holds them (halves when f16) */
    double *sc = malloc(sizeof(double) * (size_t)P);
    const int g = nh / nkv;
    for (int t = 0; t < P; t += (t < 8 || t > P - 4) ? 1 : 13)
        for (int h = 0; h < nh; h++) {
            const int kh = h / g, lo = window && t + 1 > window ? t + 1 - window : 0;
            double mx = sinks ? sk[h] : -INFINITY, sum = 0;
            for (int p = lo; p <= t; p++) {
                double s = 0;
                for (int d = 0; d < hd; d++) {
                    float kvv = kr[(size_t)p * kd + kh * hd + d];
                    if (f16) kvv = hm_f16_to_f32(hm_f32_to_f16(kvv));
                    s += (double)qr[(size_t)t * qd + h * hd + d] * kvv;
                }
                sc[p] = s / sqrt((double)hd);
                mx = fmax(mx, sc[p]);
            }
            if (sinks) sum = exp(sk[h] - mx);
            for (int p = lo; p <= t; p++) sum += exp(sc[p] - mx);
            for (int d = 0; d < hd; d++) {
                double o = 0;
                for (int p = lo; p <= t; p++) {
                    float vv = v[(size_t)p * kd + kh * hd + d];
                    if (f16) vv = hm_f16_to_f32(hm_f32_to_f16(vv));
                    o += exp(sc[p] - mx) / sum * vv;
                }
                eo = fmax(eo, fabs(out[(size_t)t * qd + h * hd + d] - o));
            }
        }
    CHECK_MSG(eq <= 1e-5, "q norm + rope (hd %d, rope %d): error %.3g", hd, rd, eq);
    /* the tensor cores round queries, keys, values and weights to half: 2^-11 each */
    CHECK_MSG(eo <= (tc ? 4e-3 : (f16 ? 2e-3 : 2e-5)),
              "attention%s (%d heads, %d kv, hd %d, %d positions, chunks of %d, %s, window %d%s): "
              "error %.3g",
              tc ? " on the tensor cores" : "", nh, nkv, hd, P, chunk, f16 ? "f16" : "f32", window,
              sinks ? ", sinks" : "", eo);
    cudaFree(dk), cudaFree(dv), cudaFree(dq), cudaFree(dkk), cudaFree(dvv), cudaFree(dcs),
        cudaFree(dqn), cudaFree(dkn), cudaFree(dout), cudaFree(dpos), cudaFree(dseq), cudaFree(dsk);
    free(q), free(k), free(v), free(cs), free(qr), free(kr), free(out), free(qg), free(sc),
        free(pos), free(seq);
}

/* hm_cu_quant_q8_K: the bytes of hm_quantize_row_q8_K_ref, with ties of magnitude (the first
 * wins), NaNs, infinities, a zero block and -0 */
static void check_quant_q8k(void) {
    enum { N = 5, C = 1024, NSB = C / 256 };
    float *x = malloc(sizeof(float) * N * C);
    for (int i = 0; i < N * C; i++) x[i] = rndf() * (float)(1 + i % 7);
    for (int j = 0; j < 256; j++) x[C + j] = 0.0f; /* row 1: a zero block */
    x[C + 7] = -0.0f;
    x[C + 300] = 9.0f, x[C + 301] = -9.0f; /* row 1: ties, the first positive */
    x[C + 600] = -9.5f, x[C + 777] = 9.5f; /* the first negative, in another lane */
    x[2 * C + 3] = NAN, x[2 * C + 260] = INFINITY, x[2 * C + 513] = -INFINITY;
    x[3 * C + 100] = 1e-40f, x[3 * C + 101] = -3e-39f; /* subnormals */
    for (int j = 768; j < 1024; j++) x[3 * C + j] = NAN;
    uint8_t *ref = malloc(sizeof(hm_block_q8_K) * N * NSB),
            *got = malloc(sizeof(hm_block_q8_K) * N * NSB);
    for (int t = 0; t < N; t++)
        hm_quantize_row_q8_K_ref(x + t * C, ref + sizeof(hm_block_q8_K) * NSB * t, C);
    float *dx = dev_copy(x, sizeof(float) * N * C);
    uint8_t *dq = dev_copy(NULL, sizeof(hm_block_q8_K) * N * NSB);
    CU(hm_cu_quant_q8_K(dx, C, N, C, dq, 0));
    host_copy(got, dq, sizeof(hm_block_q8_K) * N * NSB);
    int bad = 0;
    for (int b = 0; b < N * NSB; b++)
        bad += memcmp(ref + sizeof(hm_block_q8_K) * b, got + sizeof(hm_block_q8_K) * b,
                      sizeof(hm_block_q8_K)) != 0;
    CHECK_MSG(bad == 0, "Q8_K quantization: %d of %d blocks differ", bad, N * NSB);
    CHECK(hm_cu_quant_q8_K(dx, C, N, 1000, dq, 0) == cudaErrorInvalidValue);
    CHECK(hm_cu_quant_q8_K(dx + 1, C, N, C, dq, 0) == cudaErrorInvalidValue);
    CHECK(hm_cu_quant_q8_K(dx, C - 4, N, C, dq, 0) == cudaErrorInvalidValue);
    CHECK(hm_cu_quant_q8_K(dx, 65536, 1, 65536, dq, 0) == cudaErrorInvalidValue);
    CU(hm_cu_quant_q8_K(dx, C, 0, C, dq, 0));
    cudaFree(dx), cudaFree(dq);
    free(x), free(ref), free(got);
}

static void check_kernels(void) {
    static const uint32_t types[] = {
        HM_TYPE_F32,  HM_TYPE_F16,    HM_TYPE_BF16,   HM_TYPE_Q4_0,  HM_TYPE_Q4_1,    HM_TYPE_Q5_0,
        HM_TYPE_Q5_1, HM_TYPE_Q8_0,   HM_TYPE_Q2_K,   HM_TYPE_Q3_K,  HM_TYPE_Q4_K,    HM_TYPE_Q5_K,
        HM_TYPE_Q6_K, HM_TYPE_IQ4_NL, HM_TYPE_IQ4_XS, HM_TYPE_MXFP4, HM_TYPE_FP8_B128};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        const uint32_t t = types[i];
        CHECK_MSG(hm_cu_type_ok(t), "%s has no GPU kernel", hm_type_name(t));
        const int64_t blk = hm_type_get(t)->block;
        check_matvec(t, 37, blk == 1 ? 75 : blk * 3);
        check_matvec(t, 5, blk == 1 ? 1000 : (blk < 128 ? 1024 : 1280));
        if (blk == 1) check_matvec(t, 19, 96); /* float rows read 32 values per lane */
    }
    /* enough rows that a warp takes several (the output head's shape) */
    check_matvec(HM_TYPE_Q4_0, 17001, 64);
    /* Q4_K's float kernels (HMOE_MV_Q4K_I8=0: the experts on float activations too): the lanes
     * across each super-block (the default where the shape allows it) with one, two (the
     * default) and four rows per warp (tails of 1 and 3 rows), and a lane per 32-value chunk as
     * the other types (HMOE_MV_Q4K=0) */
    setenv("HMOE_MV_Q4K_I8", "0", 1);
    check_matvec(HM_TYPE_Q4_K, 37, 768);
    check_matvec(HM_TYPE_Q4_K, 5, 2048);
    check_fused(HM_TYPE_Q4_K, 45, 768);
    for (int r = 1; r <= 4; r *= 2) {
        setenv_int("HMOE_MV_Q4K_R", r);
        check_matvec(HM_TYPE_Q4_K, 37, 768);
        check_matvec(HM_TYPE_Q4_K, 7, 2560);
        check_fused(HM_TYPE_Q4_K, 45, 768);
    }
    unsetenv("HMOE_MV_Q4K_R");
    unsetenv("HMOE_MV_Q4K_I8");
    /* the experts on Q8_K activations (the default) with 1, 2 (gate/up's default) and 4 (down's)
     * rows per warp, then the defaults; rows of 1-3 super-blocks take down's flat layout (the
     * default: the super-blocks spread over the four lane groups), then a lane group per
     * super-block (HMOE_MV_I8_FLAT=0): both with the bits of hm_hd_q4k_q8k_row */
    for (int flat = 1; flat >= 0; flat--) {
        if (!flat) setenv("HMOE_MV_I8_FLAT", "0", 1);
        for (int r = 1; r <= 4; r *= 2) {
            setenv_int("HMOE_MV_I8_RG", r), setenv_int("HMOE_MV_I8_RD", r);
            check_matvec(HM_TYPE_Q4_K, 37, 768);
            check_matvec(HM_TYPE_Q4_K, 9, 512);
            check_matvec(HM_TYPE_Q4_K, 6, 256);
            if (!flat) continue; /* the shapes below take neither layout's choice */
            check_matvec(HM_TYPE_Q4_K, 7, 2560);
            check_fused(HM_TYPE_Q4_K, 45, 768);
            check_fused(HM_TYPE_Q4_K, 13, 2816);
        }
    }
    unsetenv("HMOE_MV_I8_RG"), unsetenv("HMOE_MV_I8_RD"), unsetenv("HMOE_MV_I8_FLAT");
    check_matvec(HM_TYPE_Q4_K, 5, 2048);
    check_fused(HM_TYPE_Q4_K, 45, 768);
    check_quant_q8k();
    setenv("HMOE_MV_Q4K", "0", 1);
    check_matvec(HM_TYPE_Q4_K, 37, 768);
    check_fused(HM_TYPE_Q4_K, 45, 768);
    unsetenv("HMOE_MV_Q4K");
    /* Q8_0 with a warp across eight blocks (the default; rows of 3 blocks leave lanes idle, of
     * 144 blocks a partial last group), and a lane per block (HMOE_MV_Q8=0) */
    check_matvec(HM_TYPE_Q8_0, 37, 4608);
    check_fused(HM_TYPE_Q8_0, 37, 256);
    /* and on Q8_0 activations (HMOE_MV_Q8_I8=1): rows of 3, 32 and 144 blocks */
    setenv("HMOE_MV_Q8_I8", "1", 1);
    check_matvec(HM_TYPE_Q8_0, 37, 96);
    check_matvec(HM_TYPE_Q8_0, 5, 1024);
    check_matvec(HM_TYPE_Q8_0, 37, 4608);
    check_fused(HM_TYPE_Q8_0, 37, 256);
    unsetenv("HMOE_MV_Q8_I8");
    setenv("HMOE_MV_Q8", "0", 1);
    check_matvec(HM_TYPE_Q8_0, 37, 4608);
    check_fused(HM_TYPE_Q8_0, 37, 256);
    unsetenv("HMOE_MV_Q8");
    check_fused(HM_TYPE_BF16, 21, 96);
    check_fused(HM_TYPE_F32, 9, 75);
    CHECK(!hm_cu_type_ok(HM_TYPE_Q8_K) && !hm_cu_type_ok(HM_TYPE_IQ2_XXS) && !hm_cu_type_ok(9999));
    check_bias_gated_add();
    check_top_candidates();
    check_handoff();
    check_router_sigmoid();
    check_norm_glu_router();
    check_router_fused();
    for (int r = 0; r < 4; r++) {
        /* f32 and f16 caches, head dims 64 and 128 on the warp kernel, then on attn_k */
        const bool f16 = r & 1;
        setenv("HMOE_CUDA_ATT_WARP", r < 2 ? "1" : "0", 1);
        check_attention(4, 2, 64, 64, 40, 40, f16, 0, false, false); /* a prompt in one batch */
        check_attention(8, 1, 72, 32, 300, 7, f16, 0, false, false); /* partial rope, odd hd */
        check_attention(4, 2, 64, 32, 60, 3, f16, 0, false, false);  /* the same, hd 64 */
        check_attention(2, 2, 128, 128, 1100, 500, f16, 0, false, false); /* several chunks */
        check_attention(4, 4, 8, 8, 20, 1, f16, 0, false, false);         /* one token at a time */
        /* gpt-oss: sinks, and a window shorter than the context (splits before it empty) */
        check_attention(8, 2, 64, 64, 40, 40, f16, 0, true, false);
        check_attention(8, 2, 64, 64, 700, 3, f16, 128, true, false);
        check_attention(4, 4, 64, 64, 600, 600, f16, 300, false, false);
        /* on the tensor cores: a prompt, several chunks (the second's keys start before it),
         * partial last tiles, GQA, a window and sinks */
        check_attention(4, 2, 64, 64, 40, 40, f16, 0, false, true);
        check_attention(2, 2, 128, 128, 1100, 500, f16, 0, false, true);
        check_attention(8, 2, 64, 64, 700, 333, f16, 128, true, true);
        check_attention(16, 2, 128, 64, 130, 130, f16, 0, true, true);
        /* heads not a multiple of 4; then splits of more than two chunks at the cache's
         * length, where a block's warps share a head */
        check_attention(6, 3, 128, 128, 90, 1, f16, 0, false, false);
        check_attention(2, 1, 128, 128, 2600, 2597, f16, 0, false, false);
        check_attention(4, 2, 64, 64, 2200, 2195, f16, 1000, true, false);
    }
    unsetenv("HMOE_CUDA_ATT_WARP");
}
#endif

/* hmoe bench cuda on small shapes: a row per kernel with a positive rate, and bad shapes
 * refused with a message */
static void check_bench(void) {
    hm_cuda_bench_params p = {.hidden = 256,
                              .n_heads = 4,
                              .n_kv_heads = 2,
                              .head_dim = 64,
                              .n_experts = 8,
                              .top_k = 2,
                              .moe_inter = 256,
                              .vocab = 1000,
                              .attn_type = HM_TYPE_Q8_0,
                              .experts_type = HM_TYPE_Q4_K,
                              .tokens = 2,
                              .ctx = 100,
                              .iters = 3,
                              .min_bytes = 1 << 20,
                              .bw_bytes = 8 << 20};
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f) return;
    CHECK_OK(hm_cuda_bench(&p, f));
    rewind(f);
    char line[512];
    int rows = 0, small = 0;
    while (fgets(line, sizeof line, f)) {
        const char *pc = strstr(line, "% of copy)");
        if (!strncmp(line, "empty kernel", 12) || !strncmp(line, "add + rmsnorm", 13) ||
            !strncmp(line, "router top-k", 12) || !strncmp(line, "experts' weighted", 17)) {
            /* no weights: "- -  us  -" */
            const char *d = strstr(line, " - ");
            CHECK_MSG(d && atof(d + 8) >= 0, "bench cuda row: %s", line);
            small++;
            continue;
        }
        if (!pc || !strncmp(line, "a layer", 7)) continue;
        double us = 0, gbs = 0;
        /* "... copies us/launch GB/s  (P% of copy)": the two numbers before the parenthesis */
        const char *par = strrchr(line, '(');
        CHECK(par != NULL);
        const char *q = par;
        int fields = 0;
        while (q > line && fields < 2) {
            while (q > line && q[-1] == ' ') q--;
            while (q > line && q[-1] != ' ') q--;
            fields++;
        }
        CHECK(sscanf(q, "%lf %lf", &us, &gbs) == 2);
        /* a slow host GPU (sanitizers) prints 0.0 GB/s: the time is what must be there */
        CHECK_MSG(us > 0 && gbs >= 0, "bench cuda row: %s", line);
        rows++;
    }
    CHECK_MSG(rows == 8 && small == 4, "bench cuda printed %d kernel rows and %d without weights",
              rows, small);
    fclose(f);
    p.tokens = 9;
    CHECK_STATUS(hm_cuda_bench(&p, stdout), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "--tokens 9");
    p.tokens = 1, p.n_kv_heads = 3;
    CHECK_STATUS(hm_cuda_bench(&p, stdout), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "shapes");
}

int main(void) {
    int n = -1;
    CHECK_OK(hm_cuda_device_count(&n));
    if (!hm_cuda_compiled()) {
        CHECK(n == 0);
        hm_gpu_info info;
        CHECK_STATUS(hm_cuda_device_info(0, &info), HM_ERR_UNSUPPORTED);
        CHECK_CONTAINS(hm_last_error(), "built without CUDA");
        CHECK_STATUS(hm_cuda_selftest(0), HM_ERR_UNSUPPORTED);
        check_ctx_refused();
        check_auto(false);
        return test_done("cuda (CPU-only build)");
    }
    hm_gpu_info info;
    CHECK_STATUS(hm_cuda_device_info(n < 0 ? 0 : n, &info), HM_ERR_NOT_FOUND);
    CHECK_CONTAINS(hm_last_error(), "does not exist");
    if (n <= 0) {
        check_ctx_refused();
        check_auto(false);
        test_done("cuda");
        return test_skip("cuda", "no usable GPU on this machine");
    }
    int drv, rt;
    CHECK_OK(hm_cuda_versions(&drv, &rt));
    CHECK(drv >= rt && rt >= 12000);
    for (int d = 0; d < n; d++) {
        CHECK_OK(hm_cuda_device_info(d, &info));
        CHECK(info.mem_total > 0 && info.mem_free <= info.mem_total && info.sm_count > 0);
        CHECK(info.cc_major >= 7);
        /* oracle: nvidia-smi, when present */
        char cmd[160], line[512];
        snprintf(cmd, sizeof cmd,
                 "nvidia-smi -i %d --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null",
                 d);
        FILE *p = popen(cmd, "r");
        if (p && fgets(line, sizeof line, p)) {
            char cc[16];
            snprintf(cc, sizeof cc, "%d.%d", info.cc_major, info.cc_minor);
            CHECK_MSG(strncmp(line, info.name, strlen(info.name)) == 0, "nvidia-smi '%s' vs '%s'",
                      line, info.name);
            CHECK_CONTAINS(line, cc);
        }
        if (p) pclose(p);
        CHECK_OK(hm_cuda_selftest(d));
        double gbs = 0;
        CHECK_OK(hm_cuda_h2d_bandwidth(d, 64 << 20, 3, &gbs));
#ifdef HM_CUDA_HOST
        /* the host GPU's copy is a memcpy, under the sanitizers beside other tests below 1 GB/s */
        CHECK_MSG(gbs > 0.0, "pinned H2D %.2f GB/s", gbs);
#else
        CHECK_MSG(gbs > 1.0, "pinned H2D %.2f GB/s", gbs);
#endif
        printf("GPU %d: %s sm_%d%d, %.1f GiB, H2D %.1f GB/s\n", d, info.name, info.cc_major,
               info.cc_minor, (double)info.mem_total / (1 << 30), gbs);
    }
    double gbs;
    CHECK_STATUS(hm_cuda_h2d_bandwidth(0, 0, 1, &gbs), HM_ERR_INVALID_ARG);
#ifdef HMOE_HAVE_CUDA
    check_kernels();
#endif
    check_auto(true);
    check_bench();
    static const char *const models[] = {"a",
                                         "b",
                                         "c",
                                         "q",
                                         "q_fp8",
                                         "mixtral/a",
                                         "mixtral/b",
                                         "qwen2moe/a",
                                         "qwen2moe/b",
                                         "glm4moe/a",
                                         "glm4moe/b",
                                         "gptoss/a",
                                         "gptoss/b",
                                         "deepseek/v3a",
                                         "deepseek/v3b",
                                         "deepseek/v2a",
                                         "deepseek/v2b",
                                         "deepseek/kimi"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        check_model_gpu(models[i], false, HM_GPU_EXPERTS_FIT, HM_PLACE_UNIFORM);
    check_model_gpu("q", true, HM_GPU_EXPERTS_FIT, HM_PLACE_UNIFORM);
    check_graph_shapes("a");
    /* hybrid: every routed expert on the CPU, and some on each side under every strategy */
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        check_model_gpu(models[i], false, 0, HM_PLACE_UNIFORM);
    for (int s = HM_PLACE_UNIFORM; s <= HM_PLACE_RANDOM; s++) {
        check_model_gpu("a", false, 3, (hm_place_strategy)s);
        check_model_gpu("c", false, 5, (hm_place_strategy)s);
    }
    /* Mixtral as llama.cpp writes it (q/k permuted: the interleaved rotation) on the GPU */
    {
        fixture f;
        CHECK(load_fixture("mixtral/a", &f));
        char dir[] = "/tmp/hmoe-cuda-mix-XXXXXX", path[256];
        CHECK(mkdtemp(dir) != NULL);
        snprintf(path, sizeof path, "%s/m.gguf", dir);
        hm_convert_params p = hm_convert_default_params();
        p.n_threads = 2;
        CHECK_OK(hm_convert_hf(f.dir, path, &p, NULL));
        float *lg = malloc(sizeof(float) * 64 * (size_t)f.vocab);
        for (int i = 0; i < f.n_prompts; i++)
            for (int one = 0; one < 2; one++) {
                CHECK(gguf_logits(path, &f, i, HM_DEVICE_CUDA, one, HM_GPU_EXPERTS_FIT, lg));
                const double e = rel_err(lg, f.logits[i], (size_t)f.len[i] * (size_t)f.vocab);
                CHECK_MSG(e <= 1e-3, "cuda mixtral GGUF prompt %d (%s): rel error %.3g", i,
                          one ? "token by token" : "batch", e);
            }
        free(lg);
        remove(path);
        rmdir(dir);
        free_fixture(&f);
    }
    check_fa_model("q");
    check_gptoss_hf_gpu(HM_GPU_EXPERTS_FIT);
    check_gptoss_hf_gpu(0);
    check_defer("a");
    check_dynamic("a");
    check_defer("deepseek/v3a");
    check_quantized_gpu(HM_TYPE_Q8_0, HM_TYPE_Q8_0);
    check_quantized_gpu(HM_TYPE_Q8_0, HM_TYPE_Q4_K);
    check_quantized_gpu(HM_TYPE_Q6_K, HM_TYPE_Q5_K);
    /* a context the GPU cannot hold: refused with the numbers */
    {
        hm_model *m = NULL;
        CHECK_OK(hm_model_load(HMOE_SOURCE_DIR "/tests/data/qwen3moe/q", &m));
        hm_ctx_params cp = hm_ctx_default_params();
        cp.device = HM_DEVICE_CUDA;
        cp.n_ctx = 1 << 22;
        cp.n_seq = 256;
        cp.n_batch = 16;
        hm_ctx *c = NULL;
        CHECK_STATUS(hm_ctx_create(m, &cp, &c), HM_ERR_NO_MEMORY);
        CHECK_CONTAINS(hm_last_error(), "free");
        cp.n_ctx = 64, cp.n_seq = 1, cp.gpu = n;
        CHECK_STATUS(hm_ctx_create(m, &cp, &c), HM_ERR_NOT_FOUND);
        hm_model_free(m);
    }
    return test_done("cuda");
}
