/* fixture.h - the Qwen3-MoE fixtures of tests/data/qwen3moe/<name>/ (made by
 * tests/gen/qwen3moe_fixtures.py): prompts, transformers' logits for every position and 32-token
 * greedy continuations; with the comparisons the forward tests share. Needs jansson and test.h. */
#ifndef HMOE_TEST_FIXTURE_H
#define HMOE_TEST_FIXTURE_H

#include <jansson.h>
#include <math.h>

#include "format/gguf.h"
#include "quant/ref.h"
#include "test.h"

#define DATA HMOE_SOURCE_DIR "/tests/data/qwen3moe"

typedef struct fixture {
    char dir[512];
    char model[600]; /* what to load: dir, or the file expected.json's "model" names in it */
    int n_prompts;
    int32_t *prompt[8];
    int len[8];
    int32_t greedy[8][32];
    float *logits[8];      /* [len][vocab] float32 compute */
    float *logits_bf16[8]; /* bfloat16 compute, or NULL */
    int vocab;
} fixture;

static inline float *read_f32(const char *dir, const char *name, size_t want) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t len;
    char *b = test_read_file(path, &len);
    if (!b || len != want * sizeof(float)) {
        fprintf(stderr, "%s: %zu bytes, expected %zu\n", path, b ? len : 0, want * sizeof(float));
        free(b);
        return NULL;
    }
    return (float *)b;
}

static inline bool load_fixture(const char *name, fixture *f) {
    memset(f, 0, sizeof *f);
    /* "a" is tests/data/qwen3moe/a; a name with a '/' is under tests/data ("mixtral/a") */
    if (strchr(name, '/'))
        snprintf(f->dir, sizeof f->dir, "%s/tests/data/%s", HMOE_SOURCE_DIR, name);
    else
        snprintf(f->dir, sizeof f->dir, "%s/%s", DATA, name);
    char path[1024];
    snprintf(path, sizeof path, "%s/expected.json", f->dir);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j) {
        fprintf(stderr, "%s: %s\n", path, err.text);
        return false;
    }
    json_t *prompts = json_object_get(j, "prompts"), *greedy = json_object_get(j, "greedy");
    json_t *model = json_object_get(j, "model");
    if (json_is_string(model))
        snprintf(f->model, sizeof f->model, "%s/%s", f->dir, json_string_value(model));
    else
        snprintf(f->model, sizeof f->model, "%s", f->dir);
    json_t *lg = json_object_get(j, "logits"), *lb = json_object_get(j, "logits_bf16");
    f->vocab = (int)json_integer_value(json_object_get(j, "vocab"));
    f->n_prompts = (int)json_array_size(prompts);
    bool ok = f->n_prompts > 0 && f->n_prompts <= 8 && f->vocab > 0;
    for (int i = 0; ok && i < f->n_prompts; i++) {
        json_t *p = json_array_get(prompts, (size_t)i), *g = json_array_get(greedy, (size_t)i);
        f->len[i] = (int)json_array_size(p);
        f->prompt[i] = calloc((size_t)f->len[i] + 1, sizeof(int32_t));
        for (int k = 0; k < f->len[i]; k++)
            f->prompt[i][k] = (int32_t)json_integer_value(json_array_get(p, (size_t)k));
        ok = json_array_size(g) == 32;
        for (int k = 0; ok && k < 32; k++)
            f->greedy[i][k] = (int32_t)json_integer_value(json_array_get(g, (size_t)k));
        size_t n = (size_t)f->len[i] * (size_t)f->vocab;
        f->logits[i] = read_f32(f->dir, json_string_value(json_array_get(lg, (size_t)i)), n);
        ok = ok && f->logits[i];
        if (lb) {
            f->logits_bf16[i] =
                read_f32(f->dir, json_string_value(json_array_get(lb, (size_t)i)), n);
            ok = ok && f->logits_bf16[i];
        }
    }
    json_decref(j);
    return ok;
}

static inline void free_fixture(fixture *f) {
    for (int i = 0; i < f->n_prompts; i++)
        free(f->prompt[i]), free(f->logits[i]), free(f->logits_bf16[i]);
}

/* max |a - b| / max |b| over n values */
static inline double rel_err(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d)) d = e; /* NaN propagates */
        if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
    }
    return m > 0 ? d / m : d;
}

static inline int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* KL(softmax(ref) || softmax(got)) per row of V logits, its mean and max over n rows (in double;
 * a NaN reaches the max) */
static inline void kl_rows(const float *ref, const float *got, int n, int V, double *mean,
                           double *max) {
    *mean = *max = 0;
    for (int t = 0; t < n; t++) {
        const float *a = ref + (size_t)t * (size_t)V, *b = got + (size_t)t * (size_t)V;
        double ma = -INFINITY, mb = -INFINITY, sa = 0, sb = 0, kl = 0;
        for (int v = 0; v < V; v++) ma = fmax(ma, a[v]), mb = fmax(mb, b[v]);
        for (int v = 0; v < V; v++) sa += exp(a[v] - ma), sb += exp(b[v] - mb);
        for (int v = 0; v < V; v++) {
            const double la = a[v] - ma - log(sa), lb = b[v] - mb - log(sb);
            kl += exp(la) * (la - lb);
        }
        *mean += kl / n;
        if (!(kl <= *max)) *max = kl;
    }
}

/* of n rows of V logits, those whose argmax is the same in a and b */
static inline int same_argmax(const float *a, const float *b, int n, int V) {
    int same = 0;
    for (int t = 0; t < n; t++)
        same += argmax(a + (size_t)t * (size_t)V, V) == argmax(b + (size_t)t * (size_t)V, V);
    return same;
}

/* Fixture `name` and its model (false, with the failed checks counted, when either cannot be
 * read; nothing is left to free then). */
static inline bool fixture_open(const char *name, fixture *f, hm_model **m) {
    *m = NULL;
    CHECK_MSG(load_fixture(name, f), "fixture %s", name);
    if (!f->n_prompts) return false;
    CHECK_OK(hm_model_load(f->model, m));
    if (!*m) free_fixture(f);
    return *m != NULL;
}

/* Prompt i's logits ([len][vocab] into lg) from an empty sequence 0: the whole prompt in one
 * batch, or (one) a token at a time. */
static inline void fixture_prompt_logits(hm_ctx *c, const fixture *f, int i, bool one, float *lg) {
    hm_ctx_seq_reset(c, 0);
    if (!one) {
        CHECK_OK(hm_ctx_decode(c, f->prompt[i], NULL, f->len[i], NULL, lg));
        return;
    }
    for (int t = 0; t < f->len[i]; t++)
        CHECK_OK(hm_ctx_decode(c, f->prompt[i] + t, NULL, 1, NULL, lg + (size_t)t * f->vocab));
}

/* Prompt i's greedy continuation after the prompt ran on sequence 0 (lg: its last row of
 * logits, then scratch of a row), one token at a time: how many of the fixture's 32 tokens
 * match before the first difference. */
static inline int fixture_greedy(hm_ctx *c, const fixture *f, int i, float *lg) {
    int32_t t = argmax(lg, f->vocab);
    int same = 0;
    for (int k = 0; k < 32; k++) {
        same += t == f->greedy[i][k];
        if (t != f->greedy[i][k]) break;
        CHECK_OK(hm_ctx_decode(c, &t, NULL, 1, NULL, lg));
        t = argmax(lg, f->vocab);
    }
    return same;
}

/* Prompt i run one token at a time from an empty sequence 0: the largest relative error of a
 * position's logits (lg: a row of scratch). */
static inline double fixture_token_by_token(hm_ctx *c, const fixture *f, int i, float *lg) {
    hm_ctx_seq_reset(c, 0);
    double ei = 0;
    for (int k = 0; k < f->len[i]; k++) {
        CHECK_OK(hm_ctx_decode(c, f->prompt[i] + k, NULL, 1, NULL, lg));
        const double ek =
            rel_err(lg, f->logits[i] + (size_t)k * (size_t)f->vocab, (size_t)f->vocab);
        if (ek > ei) ei = ek;
    }
    return ei;
}

/* src (a GGUF) with every tensor dequantized to F32: the same weights for exact kernels */
static inline bool write_dequantized(const char *src, const char *dst) {
    hm_gguf *g = NULL;
    hm_gguf_writer *w = NULL;
    if (hm_gguf_open(src, &g) || hm_gguf_writer_open(dst, &w)) goto fail;
    for (uint64_t i = 0; i < hm_gguf_n_kv(g); i++)
        if (hm_gguf_w_copy_kv(w, NULL, hm_gguf_kv_at(g, i))) goto fail;
    for (uint64_t i = 0; i < hm_gguf_n_tensors(g); i++) {
        const hm_gguf_tensor *t = hm_gguf_tensor_at(g, i);
        if (hm_gguf_w_tensor(w, t->name, HM_TYPE_F32, t->n_dims, t->ne)) goto fail;
    }
    for (uint64_t i = 0; i < hm_gguf_n_tensors(g); i++) {
        const hm_gguf_tensor *t = hm_gguf_tensor_at(g, i);
        float *row = malloc(sizeof(float) * t->ne[0]);
        uint64_t rows = t->n_elements / t->ne[0], rb = t->bytes / rows;
        for (uint64_t r = 0; r < rows; r++) {
            if (hm_dequantize_row(t->type, t->data + r * rb, row, (int64_t)t->ne[0]) ||
                hm_gguf_w_data(w, row, sizeof(float) * t->ne[0])) {
                free(row);
                goto fail;
            }
        }
        free(row);
    }
    hm_gguf_close(g);
    return hm_gguf_writer_finish(w) == HM_OK;
fail:
    fprintf(stderr, "write_dequantized: %s\n", hm_last_error());
    hm_gguf_writer_abort(w);
    hm_gguf_close(g);
    return false;
}

#endif
