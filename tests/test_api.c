/* test_api.c - the public API (include/hmoe.h) as a program embedding it uses it, and nothing
 * else of the library: hm_generate's greedy continuations of the Qwen3-MoE fixtures against
 * transformers' (tests/data/qwen3moe/<name>/expected.json), several sequences of one context,
 * the callback's stop, bad arguments; the tokenizer and incremental detokenizer on data/'s
 * vocabulary; hm_chat_render against a template rendered by hand. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hmoe.h"
#include "test.h"

typedef struct collect {
    int32_t ids[64];
    int n, stop_after;
    char text[4096];
    size_t len;
    int tails;
} collect;

static bool on_token(int32_t id, const char *text, size_t len, void *user) {
    collect *c = user;
    if (id == HM_TOKEN_NONE)
        c->tails++;
    else if (c->n < 64)
        c->ids[c->n++] = id;
    if (text && c->len + len < sizeof c->text) memcpy(c->text + c->len, text, len), c->len += len;
    return !(c->stop_after && c->n >= c->stop_after);
}

static void test_generate(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/qwen3moe/%s/expected.json", HMOE_SOURCE_DIR, name);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    CHECK_MSG(j != NULL, "%s: %s", path, err.text);
    if (!j) return;
    snprintf(path, sizeof path, "%s/tests/data/qwen3moe/%s", HMOE_SOURCE_DIR, name);
    hm_model *m = NULL;
    hm_ctx *c = NULL;
    hm_model_params mp = hm_model_default_params();
    CHECK_OK(hm_model_load_ex(path, &mp, &m));
    json_t *prompts = json_object_get(j, "prompts"), *greedy = json_object_get(j, "greedy");
    const int np = (int)json_array_size(prompts);
    if (m) {
        CHECK(hm_model_n_vocab(m) == (int32_t)json_integer_value(json_object_get(j, "vocab")));
        CHECK(strcmp(hm_model_arch(m), "qwen3_moe") == 0 && hm_model_n_layers(m) >= 2);
        hm_ctx_params cp = hm_ctx_default_params();
        cp.n_threads = 2, cp.n_ctx = 64, cp.n_seq = np, cp.n_batch = 8; /* prompts in batches */
        CHECK_OK(hm_ctx_create(m, &cp, &c));
        hm_model_info mi;
        hm_model_get_info(m, &mi);
        CHECK(mi.n_layers == hm_model_n_layers(m) && mi.n_vocab == hm_model_n_vocab(m));
        if (!strcmp(name, "a")) { /* float32, 2 MoE layers, top-2 of 32 x 64 experts */
            CHECK(mi.hidden == 64 && mi.moe_inter == 32 && mi.n_experts == 8 &&
                  mi.n_experts_used == 2 && !strcmp(mi.expert_type, "F32"));
            CHECK(mi.decode_expert_bytes == 2ull * 2 * 3 * 64 * 32 * 4);
            /* q, k, v, o + router per layer, and the output layer */
            CHECK(mi.decode_dense_bytes ==
                  (2ull * ((64 + 32 + 32 + 64) * 64 + 8 * 64) + 512ull * 64) * 4);
        }
    }
    hm_sampler_params sp = hm_sampler_default_params();
    sp.temperature = 0;
    for (int i = 0; c && i < np; i++) {
        json_t *pj = json_array_get(prompts, (size_t)i), *gj = json_array_get(greedy, (size_t)i);
        int32_t prompt[64];
        const int n = (int)json_array_size(pj);
        for (int k = 0; k < n; k++)
            prompt[k] = (int32_t)json_integer_value(json_array_get(pj, (size_t)k));
        hm_sampler *smp = NULL;
        CHECK_OK(hm_sampler_create(&sp, hm_model_n_vocab(m), &smp));
        hm_generate_params gp = hm_generate_default_params();
        gp.n_predict = 32, gp.seq = i; /* each prompt in its own sequence of the one context */
        collect col = {0};
        hm_generate_stats st;
        CHECK_OK(hm_generate(c, smp, NULL, prompt, n, &gp, on_token, &col, &st));
        int same = 0;
        while (same < col.n &&
               col.ids[same] == json_integer_value(json_array_get(gj, (size_t)same)))
            same++;
        CHECK_MSG(col.n == 32 && same == 32,
                  "%s prompt %d: %d tokens, the first %d as transformers'", name, i, col.n, same);
        CHECK(st.n_prompt == n && st.n_generated == 32 && !st.stopped && !st.eog);
        CHECK(hm_ctx_seq_len(c, i) == n + 31); /* the last token is sampled, not run */
        hm_ctx_perf perf;
        hm_ctx_perf_get(c, &perf);
        CHECK(perf.part_s[HM_PROF_MOE] > 0 && perf.part_s[HM_PROF_ATTN] > 0 && perf.pool_jobs > 0);
        CHECK(perf.n_moe_phases > 0 && perf.moe_phase_name[0] && strcmp(hm_prof_name(0), "?"));
        hm_ctx_perf_reset(c);
        hm_ctx_perf_get(c, &perf);
        CHECK(perf.part_s[HM_PROF_MOE] == 0 && perf.pool_jobs == 0);
        /* the callback stops it; the context's positions left are checked first */
        hm_ctx_seq_reset(c, i);
        hm_sampler_reset(smp);
        collect stop = {.stop_after = 5};
        CHECK_OK(hm_generate(c, smp, NULL, prompt, n, &gp, on_token, &stop, &st));
        CHECK(stop.n == 5 && st.stopped && st.n_generated == 5 &&
              memcmp(stop.ids, col.ids, 20) == 0);
        hm_sampler_free(smp);
    }
    if (c) { /* bad arguments: said, nothing run */
        hm_sampler *smp = NULL;
        CHECK_OK(hm_sampler_create(&sp, hm_model_n_vocab(m), &smp));
        int32_t one = 1;
        hm_generate_params gp = hm_generate_default_params();
        gp.seq = np;
        CHECK_STATUS(hm_generate(c, smp, NULL, &one, 1, &gp, NULL, NULL, NULL), HM_ERR_INVALID_ARG);
        CHECK_CONTAINS(hm_last_error(), "sequence");
        gp.seq = 0, gp.n_predict = 1000;
        CHECK_STATUS(hm_generate(c, smp, NULL, &one, 1, &gp, NULL, NULL, NULL), HM_ERR_INVALID_ARG);
        CHECK_CONTAINS(hm_last_error(), "do not fit the context of 64");
        gp.n_predict = 1;
        CHECK_STATUS(hm_generate(c, smp, NULL, &one, 0, &gp, NULL, NULL, NULL), HM_ERR_INVALID_ARG);
        int32_t bad = hm_model_n_vocab(m);
        hm_ctx_seq_reset(c, 0);
        CHECK(hm_generate(c, smp, NULL, &bad, 1, &gp, NULL, NULL, NULL) != HM_OK);
        CHECK(hm_ctx_seq_len(c, 0) == 0);
        hm_sampler_free(smp);
    }
    hm_ctx_free(c);
    hm_model_free(m);
    json_decref(j);
}

/* data/demo-vocab.gguf: text -> ids -> text, and incrementally one token at a time */
static void test_tokenizer(void) {
    hm_tokenizer *tok = NULL;
    CHECK_OK(hm_tokenizer_load(HMOE_SOURCE_DIR "/data/demo-vocab.gguf", &tok));
    if (!tok) return;
    const char *text = "The capital of France is Paris, naïve café.";
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(hm_tokenizer_encode_alloc(tok, text, strlen(text), HM_TOK_ADD_SPECIAL, &ids, &n));
    CHECK(n > 3 && hm_tokenizer_n_vocab(tok) == 4096 && hm_tokenizer_eos(tok) != HM_TOKEN_NONE);
    char *back = NULL;
    size_t len = 0;
    CHECK_OK(hm_tokenizer_decode(tok, ids, n, 0, &back, &len));
    CHECK(back && len == strlen(text) && strcmp(back, text) == 0);
    hm_detok *dt = NULL;
    CHECK_OK(hm_detok_new(tok, HM_DETOK_REPLACE_INVALID, &dt));
    char inc[256] = "";
    size_t at = 0;
    for (size_t i = 0; dt && i < n; i++) {
        const char *p;
        size_t l;
        CHECK_OK(hm_detok_push(dt, ids[i], &p, &l));
        if (at + l < sizeof inc) memcpy(inc + at, p, l), at += l;
    }
    if (dt) {
        const char *p;
        size_t l;
        hm_detok_flush(dt, &p, &l);
        if (at + l < sizeof inc) memcpy(inc + at, p, l), at += l;
    }
    CHECK(at == strlen(text) && memcmp(inc, text, at) == 0);
    CHECK(hm_tokenizer_is_eog(tok, hm_tokenizer_eos(tok)));
    hm_detok_free(dt);
    free(back), free(ids);
    hm_tokenizer_free(tok);
}

/* hm_chat_render: an HF directory's tokenizer_config.json template, rendered as transformers
 * would (by hand: this template is short); bad JSON named; a model without a template */
static void test_chat(void) {
    char dir[] = "/tmp/hmoe-api-XXXXXX", path[300];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("{\"bos_token\": \"<s>\", \"chat_template\": \"{{ bos_token }}{% for m in messages %}"
              "<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}{% if tools %}T{% endif %}"
              "{% if add_generation_prompt %}<assistant>{% if think is false %}-{% endif %}"
              "{% endif %}\"}",
              f);
        fclose(f);
    }
    char *out = NULL;
    size_t len = 0;
    CHECK_OK(hm_chat_render(dir,
                            "[{\"role\":\"system\",\"content\":\"be brief\"},"
                            "{\"role\":\"user\",\"content\":\"hi \\\"there\\\"\"}]",
                            "[{\"type\":\"function\"}]", "{\"think\": false}", true, &out, &len));
    const char *want = "<s><system>be brief</system><user>hi \"there\"</user>T<assistant>-";
    CHECK_MSG(out && strcmp(out, want) == 0 && len == strlen(want), "rendered '%s'",
              out ? out : "");
    free(out);
    CHECK_STATUS(hm_chat_render(dir, "[{\"role\": ", NULL, NULL, true, &out, NULL), HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "messages");
    CHECK(out == NULL);
    CHECK_STATUS(hm_chat_render(dir, "{}", NULL, NULL, true, &out, NULL), HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "messages must be a JSON array");
    CHECK_STATUS(hm_chat_render(dir, "[]", NULL, "[1]", true, &out, NULL), HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "kwargs must be a JSON object");
    unlink(path);
    rmdir(dir);
    CHECK_STATUS(
        hm_chat_render(HMOE_SOURCE_DIR "/data/demo-vocab.gguf", "[]", NULL, NULL, true, &out, NULL),
        HM_ERR_NOT_FOUND);
    CHECK_CONTAINS(hm_last_error(), "no chat template");
}

int main(void) {
    test_tokenizer();
    test_chat();
    test_generate("a");
    test_generate("c");
    return test_done("api");
}
