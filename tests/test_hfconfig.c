/* test_hfconfig.c - config.json parsing against the transformers oracle (tests/data/model_configs/
 * golden.json, written by tests/gen/hfconfig_golden.py), layer rules, defaults, and the errors for
 * malformed, incomplete, inconsistent or unsupported configs. */
#include <stddef.h> /* hparams.h uses size_t without including it */

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/hparams.h"
#include "test.h"

#define DATA HMOE_SOURCE_DIR "/tests/data/model_configs"

/* ---- field table shared by the golden comparison and struct equality ------------------------ */

typedef enum { F_U32, F_F32, F_BOOL } ftype;

#define FIELD(name, t)                                                                             \
    { #name, t, offsetof(hm_hparams, name) }
static const struct {
    const char *name;
    ftype t;
    size_t off;
} fields[] = {
    FIELD(vocab_size, F_U32),
    FIELD(hidden, F_U32),
    FIELD(n_layers, F_U32),
    FIELD(n_nextn_layers, F_U32),
    FIELD(max_ctx, F_U32),
    FIELD(norm_eps, F_F32),
    FIELD(tie_embeddings, F_BOOL),
    FIELD(n_heads, F_U32),
    FIELD(n_kv_heads, F_U32),
    FIELD(head_dim, F_U32),
    FIELD(v_head_dim, F_U32),
    FIELD(qk_norm, F_BOOL),
    FIELD(attn_bias, F_BOOL),
    FIELD(attn_out_bias, F_BOOL),
    FIELD(attn_sinks, F_BOOL),
    FIELD(sliding_window, F_U32),
    FIELD(q_lora_rank, F_U32),
    FIELD(kv_lora_rank, F_U32),
    FIELD(qk_rope_head_dim, F_U32),
    FIELD(qk_nope_head_dim, F_U32),
    FIELD(rope_theta, F_F32),
    FIELD(partial_rotary, F_F32),
    FIELD(rope_dim, F_U32),
    FIELD(rope_factor, F_F32),
    FIELD(rope_orig_ctx, F_U32),
    FIELD(yarn_beta_fast, F_F32),
    FIELD(yarn_beta_slow, F_F32),
    FIELD(yarn_mscale, F_F32),
    FIELD(yarn_mscale_all_dim, F_F32),
    FIELD(yarn_attn_factor, F_F32),
    FIELD(ffn_inter, F_U32),
    FIELD(n_experts, F_U32),
    FIELD(n_experts_used, F_U32),
    FIELD(moe_inter, F_U32),
    FIELD(n_shared_experts, F_U32),
    FIELD(shared_inter, F_U32),
    FIELD(shared_gate, F_BOOL),
    FIELD(first_k_dense, F_U32),
    FIELD(decoder_sparse_step, F_U32),
    FIELD(norm_topk_prob, F_BOOL),
    FIELD(routed_scaling, F_F32),
    FIELD(n_group, F_U32),
    FIELD(topk_group, F_U32),
    FIELD(expert_bias, F_BOOL),
    FIELD(router_bias, F_BOOL),
    FIELD(score_correction_bias, F_BOOL),
    FIELD(swiglu_alpha, F_F32),
    FIELD(swiglu_limit, F_F32),
};
#define NFIELDS (sizeof fields / sizeof fields[0])

static uint32_t fu32(const hm_hparams *hp, size_t i) {
    return *(const uint32_t *)((const char *)hp + fields[i].off);
}
static float ff32(const hm_hparams *hp, size_t i) {
    return *(const float *)((const char *)hp + fields[i].off);
}
static bool fbool(const hm_hparams *hp, size_t i) {
    return *(const bool *)((const char *)hp + fields[i].off);
}

static bool close_f(double a, double b) {
    return fabs(a - b) <= 1e-6 * fmax(1.0, fmax(fabs(a), fabs(b)));
}

/* Field-by-field equality (struct padding is not compared). */
static bool same_hparams(const hm_hparams *a, const hm_hparams *b, const char *what) {
    bool ok = a->arch == b->arch && strcmp(a->model_type, b->model_type) == 0 &&
              a->rope_type == b->rope_type && a->gating == b->gating && a->act == b->act &&
              a->yarn_no_truncate == b->yarn_no_truncate &&
              memcmp(a->layer_dense, b->layer_dense, sizeof a->layer_dense) == 0 &&
              memcmp(a->layer_sliding, b->layer_sliding, sizeof a->layer_sliding) == 0;
    for (size_t i = 0; i < NFIELDS; i++) {
        bool eq = fields[i].t == F_U32   ? fu32(a, i) == fu32(b, i)
                  : fields[i].t == F_F32 ? ff32(a, i) == ff32(b, i)
                                         : fbool(a, i) == fbool(b, i);
        if (!eq) fprintf(stderr, "%s: field %s differs\n", what, fields[i].name);
        ok &= eq;
    }
    return ok;
}

/* ---- helpers -------------------------------------------------------------------------------- */

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) break;
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    if (buf) buf[n < cap ? n : cap - 1] = '\0';
    *len = n;
    return buf;
}

static json_t *load_fixture(const char *dir) {
    char path[512];
    json_error_t err;
    snprintf(path, sizeof path, "%s/%s/config.json", DATA, dir);
    json_t *j = json_load_file(path, 0, &err);
    CHECK_MSG(j != NULL, "%s: %s", path, err.text);
    return j;
}

static hm_status parse_obj(const json_t *j, hm_hparams *hp) {
    char *text = json_dumps(j, JSON_INDENT(2));
    hm_status st = hm_hparams_from_hf_json(text, strlen(text), "config.json", hp);
    free(text);
    return st;
}

/* Parses fixture `dir` with key set to val (stolen; NULL deletes the key). */
static hm_status parse_mod(const char *dir, const char *key, json_t *val, hm_hparams *hp) {
    json_t *j = load_fixture(dir);
    if (!j) return HM_ERR_INTERNAL;
    if (val)
        json_object_set_new(j, key, val);
    else
        json_object_del(j, key);
    hm_status st = parse_obj(j, hp);
    json_decref(j);
    return st;
}

static hm_status parse_str(const char *text, hm_hparams *hp) {
    return hm_hparams_from_hf_json(text, strlen(text), "config.json", hp);
}

/* ---- golden ------------------------------------------------------------------------------- */

static void check_layers(const char *dir, const char *field, json_t *want, const uint8_t *have,
                         uint32_t n) {
    CHECK_MSG(json_is_array(want) && json_array_size(want) == n, "%s: %s: %zu entries, want %u",
              dir, field, json_array_size(want), n);
    for (uint32_t i = 0; i < n && i < json_array_size(want); i++) {
        json_int_t w = json_integer_value(json_array_get(want, i));
        CHECK_MSG(have[i] == w, "%s: %s[%u] = %d, golden %d", dir, field, i, have[i], (int)w);
    }
    for (uint32_t i = n; i < HM_MAX_LAYERS; i++)
        CHECK_MSG(have[i] == 0, "%s: %s[%u] = %d past the last layer", dir, field, i, have[i]);
}

static const char *rope_name(hm_rope_type t) {
    return t == HM_ROPE_NONE      ? "none"
           : t == HM_ROPE_LINEAR  ? "linear"
           : t == HM_ROPE_DYNAMIC ? "dynamic"
           : t == HM_ROPE_LLAMA3  ? "llama3"
                                  : "yarn";
}
static const char *gating_name(hm_gating g) {
    return g == HM_GATING_SOFTMAX ? "softmax" : g == HM_GATING_SIGMOID ? "sigmoid" : "softmax_topk";
}
static const char *act_name(hm_ffn_act a) {
    return a == HM_ACT_SILU ? "silu" : a == HM_ACT_GELU ? "gelu" : "swiglu_oai";
}

static void check_str(const char *dir, const char *field, json_t *want, const char *have) {
    CHECK_MSG(json_is_string(want) && strcmp(json_string_value(want), have) == 0,
              "%s: %s = '%s', golden '%s'", dir, field, have,
              json_is_string(want) ? json_string_value(want) : "?");
}

static int compare_golden(const char *dir, json_t *gold, const hm_hparams *hp) {
    int compared = 0;
    const char *key;
    json_t *want;
    json_object_foreach(gold, key, want) {
        size_t i;
        for (i = 0; i < NFIELDS && strcmp(fields[i].name, key) != 0; i++) {
        }
        compared++;
        if (i < NFIELDS) {
            if (fields[i].t == F_U32)
                CHECK_MSG(json_is_integer(want) && fu32(hp, i) == json_integer_value(want),
                          "%s: %s = %u, golden %lld", dir, key, fu32(hp, i),
                          (long long)json_integer_value(want));
            else if (fields[i].t == F_F32)
                CHECK_MSG(json_is_number(want) && close_f(ff32(hp, i), json_number_value(want)),
                          "%s: %s = %.9g, golden %.9g", dir, key, (double)ff32(hp, i),
                          json_number_value(want));
            else
                CHECK_MSG(json_is_boolean(want) && fbool(hp, i) == json_is_true(want),
                          "%s: %s = %d, golden %d", dir, key, fbool(hp, i), json_is_true(want));
        } else if (strcmp(key, "arch") == 0) {
            check_str(dir, key, want, hm_arch_name(hp->arch));
        } else if (strcmp(key, "model_type") == 0) {
            check_str(dir, key, want, hp->model_type);
        } else if (strcmp(key, "rope_type") == 0) {
            check_str(dir, key, want, rope_name(hp->rope_type));
        } else if (strcmp(key, "gating") == 0) {
            check_str(dir, key, want, gating_name(hp->gating));
        } else if (strcmp(key, "act") == 0) {
            check_str(dir, key, want, act_name(hp->act));
        } else if (strcmp(key, "yarn_truncate") == 0) {
            CHECK_MSG(hp->yarn_no_truncate == !json_is_true(want), "%s: yarn_truncate", dir);
        } else if (strcmp(key, "layer_dense") == 0) {
            check_layers(dir, key, want, hp->layer_dense, hp->n_layers + hp->n_nextn_layers);
        } else if (strcmp(key, "layer_sliding") == 0) {
            check_layers(dir, key, want, hp->layer_sliding, hp->n_layers + hp->n_nextn_layers);
        } else {
            CHECK_MSG(0, "%s: golden field '%s' is not compared by this test", dir, key);
            compared--;
        }
    }
    return compared;
}

static void test_golden(void) {
    json_error_t err;
    json_t *golden = json_load_file(DATA "/golden.json", 0, &err);
    CHECK_MSG(golden != NULL, "golden.json: line %d: %s", err.line, err.text);
    if (!golden) return;
    json_t *models = json_object_get(golden, "models");
    CHECK(json_is_array(models) && json_array_size(models) >= 9);

    size_t i;
    json_t *m;
    json_array_foreach(models, i, m) {
        const char *dir = json_string_value(json_object_get(m, "dir"));
        json_t *gold = json_object_get(m, "hparams");
        char path[512];
        hm_hparams hp, hp_file, hp_text;
        snprintf(path, sizeof path, "%s/%s", DATA, dir);
        hm_status st = hm_hparams_from_hf_config(path, &hp); /* the directory */
        CHECK_MSG(st == HM_OK, "%s: %s", dir, hm_last_error());
        if (st != HM_OK) continue;
        int n = compare_golden(dir, gold, &hp);
        CHECK_MSG(n >= (int)NFIELDS + 7, "%s: only %d golden fields", dir, n);

        /* The file path and the in-memory text give the same result. */
        snprintf(path, sizeof path, "%s/%s/config.json", DATA, dir);
        CHECK_OK(hm_hparams_from_hf_config(path, &hp_file));
        CHECK(same_hparams(&hp, &hp_file, dir));
        size_t len;
        char *text = read_text(path, &len);
        CHECK(text != NULL);
        if (text) {
            CHECK_OK(hm_hparams_from_hf_json(text, len, path, &hp_text));
            CHECK(same_hparams(&hp, &hp_text, dir));
        }
        free(text);
        CHECK_OK(hm_hparams_validate(&hp, dir));
    }
    printf("golden: %zu models compared\n", json_array_size(models));

    /* Every fixture directory has a golden entry (a new fixture is never silently untested). */
    DIR *d = opendir(DATA);
    CHECK(d != NULL);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[512];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s/config.json", DATA, e->d_name);
        if (e->d_name[0] == '.' || stat(path, &sb) != 0) continue;
        bool found = false;
        json_array_foreach(models, i, m) {
            found |= strcmp(json_string_value(json_object_get(m, "dir")), e->d_name) == 0;
        }
        CHECK_MSG(found,
                  "fixture %s has no entry in golden.json (run tests/gen/hfconfig_golden.py)",
                  e->d_name);
    }
    if (d) closedir(d);
    json_decref(golden);
}

/* ---- spot checks on real configs ------------------------------------------------------------ */

static void test_known_values(void) {
    hm_hparams hp;
    CHECK_OK(hm_hparams_from_hf_config(DATA "/Qwen3-30B-A3B", &hp));
    CHECK(hp.arch == HM_ARCH_QWEN3MOE && hp.n_layers == 48 && hp.n_experts == 128);
    CHECK(hp.n_experts_used == 8 && hp.moe_inter == 768 && hp.head_dim == 128 && hp.qk_norm);
    CHECK(hp.n_kv_heads == 4 && hp.norm_topk_prob && hp.rope_theta == 1e6f);
    for (uint32_t il = 0; il < hp.n_layers; il++) CHECK(hm_hparams_layer_is_moe(&hp, il));

    CHECK_OK(hm_hparams_from_hf_config(DATA "/DeepSeek-V3-tf5", &hp)); /* head_dim: 64 in file */
    CHECK(hp.arch == HM_ARCH_DEEPSEEK2 && hp.head_dim == 192 && hp.rope_dim == 64);
    CHECK(hp.v_head_dim == 128 && hp.q_lora_rank == 1536 && hp.kv_lora_rank == 512);
    CHECK(hp.n_nextn_layers == 1 && hp.first_k_dense == 3 && hp.gating == HM_GATING_SIGMOID);
    CHECK(hp.score_correction_bias && hp.n_group == 8 && hp.topk_group == 4);
    CHECK(hp.routed_scaling == 2.5f && hp.rope_type == HM_ROPE_YARN && hp.rope_factor == 40.0f);
    CHECK(hp.yarn_mscale == 1.0f && hp.yarn_mscale_all_dim == 1.0f && hp.rope_orig_ctx == 4096);
    CHECK(hp.layer_dense[0] && hp.layer_dense[2] && !hp.layer_dense[3] && !hp.layer_dense[61]);
    CHECK(hp.shared_inter == 2048 && hp.n_shared_experts == 1);

    CHECK_OK(hm_hparams_from_hf_config(DATA "/DeepSeek-V2-Lite/", &hp)); /* trailing slash */
    CHECK(hp.q_lora_rank == 0 && hp.gating == HM_GATING_SOFTMAX && !hp.score_correction_bias);
    CHECK(hp.n_group == 0 && hp.shared_inter == 2 * 1408 && fabsf(hp.yarn_mscale - 0.707f) < 1e-6f);

    CHECK_OK(hm_hparams_from_hf_config(DATA "/gpt-oss-20b", &hp));
    CHECK(hp.arch == HM_ARCH_GPTOSS && hp.n_experts == 32 && hp.n_experts_used == 4);
    CHECK(hp.act == HM_ACT_SWIGLU_OAI && hp.swiglu_alpha == 1.702f && hp.swiglu_limit == 7.0f);
    CHECK(hp.attn_sinks && hp.attn_bias && hp.attn_out_bias && hp.expert_bias && hp.router_bias);
    CHECK(hp.gating == HM_GATING_SOFTMAX_TOPK && hp.sliding_window == 128);
    CHECK(hp.layer_sliding[0] && !hp.layer_sliding[1] && hp.layer_sliding[22]);
    CHECK(!hp.layer_sliding[23] && hp.yarn_no_truncate && hp.moe_inter == 2880);

    CHECK_OK(hm_hparams_from_hf_config(DATA "/GLM-4.5-Air", &hp));
    CHECK(hp.arch == HM_ARCH_GLM4MOE && hp.head_dim == 128 && hp.rope_dim == 64);
    CHECK(hp.partial_rotary == 0.5f && hp.attn_bias && !hp.attn_out_bias && !hp.qk_norm);
    CHECK(hp.n_nextn_layers == 1 && hp.layer_dense[0] && !hp.layer_dense[1] && !hp.layer_dense[46]);
    CHECK(hp.gating == HM_GATING_SIGMOID && hp.score_correction_bias && hp.n_group == 0);

    CHECK_OK(hm_hparams_from_hf_config(DATA "/Qwen1.5-MoE-A2.7B-Chat-GPTQ-Int4", &hp));
    CHECK(hp.arch == HM_ARCH_QWEN2MOE && hp.n_shared_experts == 1 && hp.shared_gate);
    CHECK(hp.shared_inter == 5632 && hp.attn_bias && !hp.norm_topk_prob && hp.sliding_window == 0);

    CHECK_OK(hm_hparams_from_hf_config(DATA "/Mixtral-8x7B-v0.1-tf5", &hp)); /* head_dim: null */
    CHECK(hp.arch == HM_ARCH_MIXTRAL && hp.head_dim == 128 && hp.moe_inter == 14336);
    CHECK(hp.n_experts == 8 && hp.n_experts_used == 2 && hp.norm_topk_prob && !hp.attn_bias);

    CHECK(strcmp(hm_arch_name(HM_ARCH_DEEPSEEK2), "deepseek2") == 0);
    CHECK(strcmp(hm_arch_gguf_name(HM_ARCH_MIXTRAL), "llama") == 0);
    CHECK(strcmp(hm_arch_gguf_name(HM_ARCH_GPTOSS), "gpt-oss") == 0);
    CHECK(strcmp(hm_arch_name(HM_ARCH_UNKNOWN), "unknown") == 0);
    CHECK(strcmp(hm_arch_gguf_name((hm_arch)99), "unknown") == 0);
    for (int a = 1; a < HM_ARCH_COUNT; a++) {
        CHECK(strcmp(hm_arch_name((hm_arch)a), "unknown") != 0);
        CHECK(strcmp(hm_arch_gguf_name((hm_arch)a), "unknown") != 0);
    }
}

/* ---- semantics on modified configs ---------------------------------------------------------- */

static void test_layer_rules(void) {
    hm_hparams hp;
    /* qwen: dense if in mlp_only_layers or (il + 1) % decoder_sparse_step != 0 */
    json_t *j = load_fixture("Qwen3-30B-A3B");
    json_object_set_new(j, "mlp_only_layers", json_pack("[i,i]", 0, 5));
    json_object_set_new(j, "decoder_sparse_step", json_integer(2));
    CHECK_OK(parse_obj(j, &hp));
    for (uint32_t il = 0; il < 48; il++) {
        bool dense = il == 0 || il == 5 || (il + 1) % 2 != 0;
        CHECK_MSG(hp.layer_dense[il] == dense, "qwen layer %u", il);
    }
    CHECK(hp.decoder_sparse_step == 2);
    json_object_set_new(j, "num_experts", json_integer(0)); /* qwen: 0 experts = dense model */
    CHECK_OK(parse_obj(j, &hp));
    CHECK(hp.n_experts == 0 && hp.n_experts_used == 0 && !hm_hparams_layer_is_moe(&hp, 7));
    json_decref(j);

    /* deepseek: first_k_dense_replace and moe_layer_freq */
    j = load_fixture("DeepSeek-V2-Lite");
    json_object_set_new(j, "first_k_dense_replace", json_integer(3));
    json_object_set_new(j, "moe_layer_freq", json_integer(2));
    CHECK_OK(parse_obj(j, &hp));
    for (uint32_t il = 0; il < 27; il++)
        CHECK_MSG(hp.layer_dense[il] == (il < 3 || il % 2 != 0), "deepseek layer %u", il);
    json_decref(j);

    /* mixtral: a sliding window applies to every layer */
    CHECK_OK(parse_mod("Mixtral-8x7B-v0.1", "sliding_window", json_integer(4096), &hp));
    CHECK(hp.sliding_window == 4096 && hp.layer_sliding[0] && hp.layer_sliding[31]);
    CHECK(!hp.layer_sliding[32]);

    /* gpt-oss without layer_types: sliding on even layers */
    CHECK_OK(parse_mod("gpt-oss-20b", "layer_types", NULL, &hp));
    CHECK(hp.layer_sliding[0] && !hp.layer_sliding[1] && hp.layer_sliding[2]);
}

static void test_defaults_and_spellings(void) {
    hm_hparams ref, hp;
    CHECK_OK(hm_hparams_from_hf_config(DATA "/Qwen3-30B-A3B", &ref));

    CHECK_OK(parse_mod("Qwen3-30B-A3B", "num_key_value_heads", NULL, &hp));
    CHECK(hp.n_kv_heads == hp.n_heads);
    CHECK_OK(parse_mod("Mixtral-8x7B-v0.1", "head_dim", NULL, &hp));
    CHECK(hp.head_dim == 4096 / 32);
    CHECK_OK(parse_mod("Qwen3-30B-A3B", "tie_word_embeddings", NULL, &hp));
    CHECK(!hp.tie_embeddings);
    CHECK_OK(parse_mod("Qwen3-30B-A3B", "tie_word_embeddings", json_true(), &hp));
    CHECK(hp.tie_embeddings);
    CHECK_OK(parse_mod("Qwen3-30B-A3B", "norm_topk_prob", NULL, &hp));
    CHECK(!hp.norm_topk_prob); /* Qwen3MoeConfig default */
    CHECK_OK(parse_mod("Qwen3-30B-A3B", "hidden_size", json_real(2048.0), &hp)); /* integral */
    CHECK(hp.hidden == 2048);
    CHECK_OK(parse_mod("DeepSeek-V3", "routed_scaling_factor", NULL, &hp));
    CHECK(hp.routed_scaling == 1.0f);

    /* Expert count spellings; agreeing duplicates are fine. */
    json_t *j = load_fixture("Qwen3-30B-A3B");
    json_object_set_new(j, "n_routed_experts", json_integer(128));
    CHECK_OK(parse_obj(j, &hp));
    CHECK(hp.n_experts == 128);
    json_decref(j);

    /* kimi_k2 is DeepSeek-V3. */
    CHECK_OK(parse_mod("DeepSeek-V3", "model_type", json_string("kimi_k2"), &hp));
    CHECK(hp.arch == HM_ARCH_DEEPSEEK2 && strcmp(hp.model_type, "kimi_k2") == 0);
    CHECK(hp.gating == HM_GATING_SIGMOID && hp.n_group == 8 && hp.head_dim == 192);

    /* A config nested as text_config, with tie_word_embeddings only at the top level. */
    j = json_object();
    json_t *inner = load_fixture("Qwen3-30B-A3B");
    json_object_del(inner, "tie_word_embeddings");
    json_object_set_new(j, "architectures", json_pack("[s]", "SomethingForConditionalGeneration"));
    json_object_set_new(j, "model_type", json_string("something_vl"));
    json_object_set_new(j, "tie_word_embeddings", json_false());
    json_object_set_new(j, "text_config", inner);
    CHECK_OK(parse_obj(j, &hp));
    CHECK(same_hparams(&ref, &hp, "text_config"));
    json_object_del(inner, "hidden_size");
    CHECK_STATUS(parse_obj(j, &hp), HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "'text_config.hidden_size'");
    json_object_del(inner, "model_type"); /* model_type only at the top level: unsupported */
    CHECK_STATUS(parse_obj(j, &hp), HM_ERR_UNSUPPORTED);
    CHECK_CONTAINS(hm_last_error(), "something_vl");
    json_decref(j);

    /* RoPE: 5.x rope_parameters, linear, yarn without a factor, gpt-oss without any. */
    CHECK_OK(parse_mod(
        "Qwen3-30B-A3B", "rope_parameters",
        json_pack("{s:s,s:f,s:f}", "rope_type", "linear", "factor", 4.0, "rope_theta", 1e6), &hp));
    CHECK(hp.rope_type == HM_ROPE_LINEAR && hp.rope_factor == 4.0f && hp.rope_theta == 1e6f);
    CHECK_OK(parse_mod(
        "Qwen3-30B-A3B", "rope_scaling",
        json_pack("{s:s,s:i}", "type", "yarn", "original_max_position_embeddings", 4096), &hp));
    CHECK(hp.rope_type == HM_ROPE_YARN && hp.rope_factor == 40960.0f / 4096.0f);
    CHECK(hp.yarn_beta_fast == 32.0f && hp.yarn_beta_slow == 1.0f && !hp.yarn_no_truncate);
    CHECK_OK(parse_mod("Qwen3-30B-A3B", "rope_scaling",
                       json_pack("{s:s,s:f}", "rope_type", "yarn", "factor", 4.0), &hp));
    CHECK(hp.rope_orig_ctx == 40960); /* defaults to max_position_embeddings */
    CHECK_OK(parse_mod("Qwen3-30B-A3B", "rope_scaling",
                       json_pack("{s:{s:s,s:f},s:{s:s,s:f}}", "full_attention", "rope_type",
                                 "default", "rope_theta", 1e6, "sliding_attention", "rope_type",
                                 "default", "rope_theta", 1e6),
                       &hp)); /* per layer type, all the same */
    CHECK(hp.rope_type == HM_ROPE_NONE);
    j = load_fixture("gpt-oss-20b");
    json_object_del(j, "rope_scaling");
    json_object_del(j, "rope_theta");
    CHECK_OK(parse_obj(j, &hp));
    CHECK(hp.rope_type == HM_ROPE_YARN && hp.rope_factor == 32.0f && hp.rope_theta == 150000.0f);
    CHECK(hp.rope_orig_ctx == 4096 && hp.yarn_no_truncate);
    json_decref(j);
    CHECK_OK(parse_mod("Qwen3-30B-A3B", "rope_theta", NULL, &hp));
    CHECK(hp.rope_theta == 10000.0f);
    CHECK_OK(parse_mod("GLM-4.5-Air", "partial_rotary_factor", NULL, &hp));
    CHECK(hp.partial_rotary == 0.5f); /* Glm4MoeConfig's default */
}

/* ---- errors -----------------------------------------------------------------------------------
 */

static void expect_err(hm_status got, hm_status want, const char *needle, const char *what) {
    if (getenv("HMOE_TEST_VERBOSE")) printf("%-32s %s\n", what, hm_last_error());
    CHECK_MSG(got == want, "%s: got %s (%s), want %s", what, hm_status_str(got), hm_last_error(),
              hm_status_str(want));
    if (needle)
        CHECK_MSG(strstr(hm_last_error(), needle), "%s: '%s' lacks '%s'", what, hm_last_error(),
                  needle);
}

static void test_malformed(void) {
    hm_hparams hp;
    memset(&hp, 0x5a, sizeof hp);
    expect_err(parse_str("{\n  \"model_type\": \"qwen3_moe\",\n  \"hidden_size\": 20 48\n}", &hp),
               HM_ERR_FORMAT, "line 3", "syntax error");
    CHECK(hp.vocab_size == 0x5a5a5a5a); /* untouched on failure */
    expect_err(parse_str("{\"model_type\": \"qwen3_moe\",", &hp), HM_ERR_FORMAT, "line 1",
               "truncated");
    expect_err(parse_str("", &hp), HM_ERR_FORMAT, "invalid JSON", "empty");
    expect_err(parse_str("{\"model_type\": \"mixtral\",\n \"model_type\": \"qwen3_moe\"}", &hp),
               HM_ERR_FORMAT, "duplicate", "duplicate key");
    expect_err(parse_str("{\"a\": {\"x\": 1, \"x\": 2}}", &hp), HM_ERR_FORMAT, "duplicate",
               "nested duplicate key");
    expect_err(parse_str("[1, 2]", &hp), HM_ERR_FORMAT, "JSON object", "array at top level");
    expect_err(parse_str("{} trailing", &hp), HM_ERR_FORMAT, "line 1", "trailing garbage");
    expect_err(hm_hparams_from_hf_json("{\"a\":1}", 8, "x.json", &hp), HM_ERR_FORMAT, "x.json",
               "embedded NUL");
    expect_err(hm_hparams_from_hf_json(NULL, 0, NULL, &hp), HM_ERR_INVALID_ARG, NULL, "NULL");
    expect_err(hm_hparams_from_hf_config(NULL, &hp), HM_ERR_INVALID_ARG, NULL, "NULL path");
}

static void test_missing_and_types(void) {
    hm_hparams hp;
    static const struct {
        const char *dir, *key;
    } required[] = {{"Qwen3-30B-A3B", "hidden_size"},
                    {"Qwen3-30B-A3B", "num_hidden_layers"},
                    {"Qwen3-30B-A3B", "vocab_size"},
                    {"Qwen3-30B-A3B", "num_attention_heads"},
                    {"Qwen3-30B-A3B", "moe_intermediate_size"},
                    {"Qwen3-30B-A3B", "num_experts_per_tok"},
                    {"Qwen3-30B-A3B", "max_position_embeddings"},
                    {"Qwen3-30B-A3B", "model_type"},
                    {"Qwen1.5-MoE-A2.7B-Chat-GPTQ-Int4", "shared_expert_intermediate_size"},
                    {"DeepSeek-V2-Lite", "q_lora_rank"},
                    {"DeepSeek-V2-Lite", "kv_lora_rank"},
                    {"DeepSeek-V3", "qk_rope_head_dim"},
                    {"DeepSeek-V3", "n_shared_experts"},
                    {"DeepSeek-V3", "first_k_dense_replace"},
                    {"GLM-4.5-Air", "first_k_dense_replace"},
                    {"Mixtral-8x7B-v0.1", "intermediate_size"}};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        char want[96], what[128];
        snprintf(want, sizeof want, "missing key '%s'", required[i].key);
        snprintf(what, sizeof what, "%s without %s", required[i].dir, required[i].key);
        expect_err(parse_mod(required[i].dir, required[i].key, NULL, &hp), HM_ERR_FORMAT, want,
                   what);
        CHECK_CONTAINS(hm_last_error(), "config.json: ");
    }
    expect_err(parse_mod("Mixtral-8x7B-v0.1", "num_local_experts", NULL, &hp), HM_ERR_FORMAT,
               "n_routed_experts", "no expert count");
    expect_err(parse_mod("Qwen3-30B-A3B", "hidden_size", json_null(), &hp), HM_ERR_FORMAT,
               "key 'hidden_size': expected an integer in [1, 16777216], got null", "null size");

    /* the exact message format */
    expect_err(parse_mod("Qwen3-30B-A3B", "num_experts_per_tok", json_integer(-3), &hp),
               HM_ERR_FORMAT,
               "config.json: key 'num_experts_per_tok': expected an integer in [1, 1024], got -3",
               "negative top-k");
    expect_err(parse_mod("Qwen3-30B-A3B", "hidden_size", json_string("2048"), &hp), HM_ERR_FORMAT,
               "key 'hidden_size': expected an integer in [1, 16777216], got \"2048\"",
               "string size");
    expect_err(parse_mod("Qwen3-30B-A3B", "hidden_size", json_real(2048.5), &hp), HM_ERR_FORMAT,
               "got 2048.5", "fractional size");
    expect_err(parse_mod("Qwen3-30B-A3B", "vocab_size", json_integer((json_int_t)1 << 25), &hp),
               HM_ERR_FORMAT, "got 33554432", "absurd size");
    expect_err(parse_mod("Qwen3-30B-A3B", "num_hidden_layers", json_integer(600), &hp),
               HM_ERR_FORMAT, "[1, 512], got 600", "too many layers");
    expect_err(parse_mod("Qwen3-30B-A3B", "num_attention_heads", json_true(), &hp), HM_ERR_FORMAT,
               "got true", "bool heads");
    expect_err(parse_mod("Qwen3-30B-A3B", "tie_word_embeddings", json_string("yes"), &hp),
               HM_ERR_FORMAT, "key 'tie_word_embeddings': expected true or false", "string bool");
    expect_err(parse_mod("Qwen3-30B-A3B", "rms_norm_eps", json_integer(0), &hp), HM_ERR_FORMAT,
               "key 'rms_norm_eps': expected a number in (0, 0.5], got 0", "zero eps");
    expect_err(parse_mod("Qwen3-30B-A3B", "rope_theta", json_string("1e6"), &hp), HM_ERR_FORMAT,
               "key 'rope_theta'", "string theta");
    expect_err(parse_mod("Qwen3-30B-A3B", "model_type", json_integer(3), &hp), HM_ERR_FORMAT,
               "key 'model_type': expected a string, got 3", "numeric model_type");
    expect_err(parse_mod("Qwen3-30B-A3B", "rope_scaling", json_integer(5), &hp), HM_ERR_FORMAT,
               "key 'rope_scaling': expected an object or null, got 5", "rope_scaling type");
    expect_err(parse_mod("Qwen3-30B-A3B", "mlp_only_layers", json_pack("[i,i]", 3, 48), &hp),
               HM_ERR_FORMAT, "key 'mlp_only_layers[1]': expected an integer in [0, 47]",
               "mlp_only_layers out of range");
    expect_err(parse_mod("Qwen3-30B-A3B", "mlp_only_layers", json_string("0"), &hp), HM_ERR_FORMAT,
               "key 'mlp_only_layers'", "mlp_only_layers type");
    expect_err(parse_mod("Qwen3-30B-A3B", "decoder_sparse_step", json_integer(0), &hp),
               HM_ERR_FORMAT, "decoder_sparse_step", "zero sparse step");
    expect_err(parse_mod("gpt-oss-20b", "layer_types", json_pack("[s]", "full_attention"), &hp),
               HM_ERR_FORMAT, "expected an array of 24 strings (num_hidden_layers), got 1 entries",
               "layer_types length");
    json_t *j = load_fixture("gpt-oss-20b");
    json_array_set_new(json_object_get(j, "layer_types"), 3, json_string("linear_attention"));
    expect_err(parse_obj(j, &hp), HM_ERR_UNSUPPORTED, "'layer_types[3]'", "layer type");
    json_array_set_new(json_object_get(j, "layer_types"), 3, json_integer(1));
    expect_err(parse_obj(j, &hp), HM_ERR_FORMAT, "'layer_types[3]'", "layer type number");
    json_decref(j);
    expect_err(parse_mod("Qwen3-30B-A3B", "text_config", json_string("x"), &hp), HM_ERR_FORMAT,
               "'text_config'", "text_config type");
    expect_err(parse_mod("Qwen3-30B-A3B", "head_dim", json_integer(0), &hp), HM_ERR_FORMAT,
               "'head_dim'", "zero head_dim");
}

static void test_unsupported_and_conflicts(void) {
    hm_hparams hp;
    expect_err(parse_mod("Qwen3-30B-A3B", "model_type", json_string("llama"), &hp),
               HM_ERR_UNSUPPORTED, "\"llama\" is not supported", "unknown model_type");
    CHECK_CONTAINS(hm_last_error(), "qwen3_moe, qwen2_moe, mixtral, deepseek_v2, deepseek_v3, "
                                    "kimi_k2, gpt_oss, glm4_moe");
    expect_err(parse_mod("Qwen3-30B-A3B", "rope_scaling",
                         json_pack("{s:s,s:f}", "rope_type", "longrope", "factor", 2.0), &hp),
               HM_ERR_UNSUPPORTED, "\"longrope\"", "longrope");
    CHECK_CONTAINS(hm_last_error(), "default, linear, dynamic, yarn, llama3");
    expect_err(parse_mod("Qwen3-30B-A3B", "rope_scaling",
                         json_pack("{s:s,s:f,s:f}", "rope_type", "llama3", "factor", 8.0,
                                   "low_freq_factor", 1.0),
                         &hp),
               HM_ERR_FORMAT, "missing key 'rope_scaling.high_freq_factor'", "llama3 keys");
    expect_err(parse_mod("Qwen3-30B-A3B", "rope_scaling",
                         json_pack("{s:s,s:f,s:f,s:f}", "rope_type", "llama3", "factor", 8.0,
                                   "low_freq_factor", 4.0, "high_freq_factor", 1.0),
                         &hp),
               HM_ERR_FORMAT, "high_freq_factor > low_freq_factor", "llama3 order");
    expect_err(
        parse_mod("Qwen3-30B-A3B", "rope_scaling", json_pack("{s:s}", "type", "dynamic"), &hp),
        HM_ERR_FORMAT, "missing key 'rope_scaling.factor'", "dynamic without factor");
    CHECK_OK(parse_mod("Qwen3-30B-A3B", "rope_scaling",
                       json_pack("{s:s,s:f}", "rope_type", "dynamic", "factor", 2.0), &hp));
    CHECK(hp.rope_type == HM_ROPE_DYNAMIC && hp.rope_factor == 2.0f &&
          hp.rope_orig_ctx == hp.max_ctx);
    expect_err(
        parse_mod("Qwen3-30B-A3B", "rope_scaling", json_pack("{s:s}", "type", "linear"), &hp),
        HM_ERR_FORMAT, "missing key 'rope_scaling.factor'", "linear without factor");
    expect_err(parse_mod("Qwen3-30B-A3B", "use_sliding_window", json_true(), &hp),
               HM_ERR_UNSUPPORTED, "use_sliding_window", "qwen sliding");
    expect_err(parse_mod("Qwen3-30B-A3B", "hidden_act", json_string("gelu"), &hp),
               HM_ERR_UNSUPPORTED, "\"gelu\"", "activation");
    expect_err(parse_mod("DeepSeek-V3", "topk_method", json_string("random"), &hp),
               HM_ERR_UNSUPPORTED, "'topk_method'", "topk_method");
    expect_err(parse_mod("DeepSeek-V3", "scoring_func", json_string("softmax"), &hp),
               HM_ERR_UNSUPPORTED, "noaux_tc", "noaux_tc with softmax");
    expect_err(parse_mod("DeepSeek-V2-Lite", "scoring_func", json_string("tanh"), &hp),
               HM_ERR_UNSUPPORTED, "'scoring_func'", "scoring_func");

    /* two spellings that disagree */
    expect_err(parse_mod("Qwen3-30B-A3B", "num_local_experts", json_integer(64), &hp),
               HM_ERR_FORMAT, "keys 'num_experts' (128) and 'num_local_experts' (64) disagree",
               "expert count conflict");
    expect_err(parse_mod("Qwen3-30B-A3B", "rope_parameters",
                         json_pack("{s:s,s:f}", "rope_type", "default", "rope_theta", 5e6), &hp),
               HM_ERR_FORMAT, "'rope_parameters.rope_theta' (5000000) and 'rope_theta'",
               "rope_theta conflict");
    json_t *j = load_fixture("DeepSeek-V3");
    json_object_set_new(j, "rope_parameters",
                        json_pack("{s:s,s:i,s:i}", "rope_type", "yarn", "factor", 20,
                                  "original_max_position_embeddings", 4096));
    expect_err(parse_obj(j, &hp), HM_ERR_FORMAT, "'rope_parameters.factor' (20)", "rope conflict");
    json_object_set_new(j, "rope_parameters",
                        json_pack("{s:s,s:f}", "rope_type", "yarn", "factor", 40.0)); /* 40==40.0 */
    CHECK_OK(parse_obj(j, &hp));
    CHECK(hp.rope_type == HM_ROPE_YARN && hp.rope_factor == 40.0f && hp.yarn_mscale == 1.0f);
    json_object_set_new(j, "rope_parameters", json_pack("{s:s}", "rope_type", "linear"));
    expect_err(parse_obj(j, &hp), HM_ERR_FORMAT,
               "'rope_parameters.rope_type' (\"linear\") and "
               "'rope_scaling.type' (\"yarn\") disagree",
               "rope type conflict");
    json_decref(j);
    expect_err(parse_mod("gpt-oss-20b", "experts_per_token", json_integer(2), &hp), HM_ERR_FORMAT,
               "disagree", "top-k spellings");
}

static void test_inconsistent(void) {
    hm_hparams hp, good;
    expect_err(parse_mod("Qwen3-30B-A3B", "num_key_value_heads", json_integer(5), &hp),
               HM_ERR_FORMAT, "config.json: n_heads 32 is not a multiple of n_kv_heads 5", "heads");
    expect_err(parse_mod("Qwen3-30B-A3B", "num_experts_per_tok", json_integer(200), &hp),
               HM_ERR_FORMAT, "n_experts_used 200 is outside [1, n_experts 128]", "top-k");
    json_t *j = load_fixture("Mixtral-8x7B-v0.1");
    json_object_set_new(j, "hidden_size", json_integer(4100));
    expect_err(parse_obj(j, &hp), HM_ERR_FORMAT,
               "missing key 'head_dim', and hidden_size 4100 is not a multiple of "
               "num_attention_heads 32",
               "underivable head_dim");
    json_object_set_new(j, "head_dim", json_integer(128)); /* given: hidden need not divide */
    CHECK_OK(parse_obj(j, &hp));
    CHECK(hp.head_dim == 128 && hp.hidden == 4100);
    json_decref(j);
    CHECK_OK(parse_mod("Mixtral-8x7B-v0.1", "head_dim", json_integer(96), &hp));
    CHECK(hp.head_dim == 96 && hp.rope_dim == 96);
    expect_err(parse_mod("DeepSeek-V3", "qk_rope_head_dim", json_integer(63), &hp), HM_ERR_FORMAT,
               "rope_dim 63 must be even", "odd rope dim");
    expect_err(parse_mod("DeepSeek-V3", "n_group", json_integer(7), &hp), HM_ERR_FORMAT,
               "n_experts 256 is not a multiple of n_group 7", "n_group");
    expect_err(parse_mod("DeepSeek-V3", "topk_group", json_integer(9), &hp), HM_ERR_FORMAT,
               "topk_group 9 is outside [1, n_group 8]", "topk_group");
    expect_err(parse_mod("DeepSeek-V3", "first_k_dense_replace", json_integer(62), &hp),
               HM_ERR_FORMAT, "key 'first_k_dense_replace': expected an integer in [0, 61], got 62",
               "first_k_dense_replace");
    expect_err(parse_mod("DeepSeek-V3", "num_nextn_predict_layers", json_integer(500), &hp),
               HM_ERR_FORMAT, "[0, 451], got 500", "too many MTP layers");
    CHECK_OK(parse_mod("GLM-4.5-Air", "partial_rotary_factor", json_real(0.25), &hp));
    CHECK(hp.rope_dim == 32);
    expect_err(parse_mod("GLM-4.5-Air", "partial_rotary_factor", json_real(1.5), &hp),
               HM_ERR_FORMAT, "expected a number in (0, 1], got 1.5", "partial > 1");

    /* hm_hparams_validate on its own (the GGUF reader uses it too) */
    CHECK_OK(hm_hparams_from_hf_config(DATA "/DeepSeek-V3", &good));
    CHECK_OK(hm_hparams_validate(&good, NULL));
    CHECK_STATUS(hm_hparams_validate(NULL, "x"), HM_ERR_INVALID_ARG);
    static const struct {
        const char *needle;
        size_t off;
        uint32_t val;
    } breaks[] = {
        {"architecture", offsetof(hm_hparams, arch), 0},
        {"architecture", offsetof(hm_hparams, arch), HM_ARCH_COUNT},
        {"n_layers 0", offsetof(hm_hparams, n_layers), 0},
        {"n_layers 513", offsetof(hm_hparams, n_layers), 513},
        {"n_kv_heads 0", offsetof(hm_hparams, n_kv_heads), 0},
        {"head_dim 100 != qk_nope_head_dim", offsetof(hm_hparams, head_dim), 100},
        {"rope_dim 256", offsetof(hm_hparams, rope_dim), 256},
        {"RoPE scaling needs rope_orig_ctx", offsetof(hm_hparams, rope_orig_ctx), 0},
        {"n_experts_used 0", offsetof(hm_hparams, n_experts_used), 0},
        {"moe_inter", offsetof(hm_hparams, moe_inter), 0},
        {"n_shared_experts 1 and shared_inter 0", offsetof(hm_hparams, shared_inter), 0},
        {"first_k_dense 62", offsetof(hm_hparams, first_k_dense), 62},
        {"decoder_sparse_step", offsetof(hm_hparams, decoder_sparse_step), 0},
        {"layer 0 has a dense MLP but ffn_inter is 0", offsetof(hm_hparams, ffn_inter), 0},
        {"gating 7", offsetof(hm_hparams, gating), 7},
        {"kv_lora_rank", offsetof(hm_hparams, kv_lora_rank), 0},
    };
    for (size_t i = 0; i < sizeof breaks / sizeof breaks[0]; i++) {
        hp = good;
        memcpy((char *)&hp + breaks[i].off, &breaks[i].val, sizeof(uint32_t));
        expect_err(hm_hparams_validate(&hp, "x.gguf"), HM_ERR_FORMAT, breaks[i].needle,
                   breaks[i].needle);
        CHECK_CONTAINS(hm_last_error(), "x.gguf: ");
    }
    hp = good;
    hp.norm_eps = 0.0f;
    expect_err(hm_hparams_validate(&hp, "x"), HM_ERR_FORMAT, "norm_eps", "eps 0");
    hp = good;
    hp.layer_sliding[3] = 1;
    expect_err(hm_hparams_validate(&hp, "x"), HM_ERR_FORMAT, "sliding_window is 0", "window");
    hp = good;
    hp.routed_scaling = -1.0f;
    expect_err(hm_hparams_validate(&hp, "x"), HM_ERR_FORMAT, "routed_scaling", "scaling");
    CHECK_OK(hm_hparams_from_hf_config(DATA "/gpt-oss-20b", &hp));
    hp.swiglu_limit = 0.0f;
    expect_err(hm_hparams_validate(&hp, "x"), HM_ERR_FORMAT, "swiglu_limit", "swiglu");
}

/* ---- files ---------------------------------------------------------------------------------- */

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_files(void) {
    hm_hparams hp;
    char dir[] = "/tmp/hmoe_hfconfig_XXXXXX", path[256], sub[256];
    CHECK(mkdtemp(dir) != NULL);

    expect_err(hm_hparams_from_hf_config(dir, &hp), HM_ERR_NOT_FOUND,
               "directory has no config.json", "empty directory");
    CHECK_CONTAINS(hm_last_error(), dir);
    snprintf(path, sizeof path, "%s/nonexistent", dir);
    expect_err(hm_hparams_from_hf_config(path, &hp), HM_ERR_NOT_FOUND, path, "missing path");
    snprintf(path, sizeof path, "%s/nonexistent/config.json", dir);
    expect_err(hm_hparams_from_hf_config(path, &hp), HM_ERR_NOT_FOUND, "nonexistent",
               "missing parent");

    snprintf(path, sizeof path, "%s/config.json", dir);
    write_file(path, "");
    expect_err(hm_hparams_from_hf_config(dir, &hp), HM_ERR_FORMAT, "config.json: invalid JSON",
               "empty file");
    write_file(path, "{\n  \"model_type\": \"mixtral\",\n  \"hidden_size\": 4096,,\n}\n");
    expect_err(hm_hparams_from_hf_config(dir, &hp), HM_ERR_FORMAT, "line 3", "bad file");
    CHECK_CONTAINS(hm_last_error(), path);

    /* larger than 16 MiB (sparse) */
    CHECK(truncate(path, (off_t)17 << 20) == 0);
    expect_err(hm_hparams_from_hf_config(path, &hp), HM_ERR_FORMAT, "16 MiB", "huge file");
    CHECK(unlink(path) == 0);

    /* config.json that is a directory */
    CHECK(mkdir(path, 0755) == 0);
    expect_err(hm_hparams_from_hf_config(dir, &hp), HM_ERR_FORMAT, "not a regular file",
               "config.json directory");
    CHECK(rmdir(path) == 0);

    /* a good copy found through the directory */
    size_t len;
    char *text = read_text(DATA "/Qwen3-30B-A3B/config.json", &len);
    snprintf(sub, sizeof sub, "%s/config.json", dir);
    if (text) write_file(sub, text);
    free(text);
    CHECK_OK(hm_hparams_from_hf_config(dir, &hp));
    CHECK(hp.arch == HM_ARCH_QWEN3MOE);
    CHECK(unlink(sub) == 0);
    CHECK(rmdir(dir) == 0);
}

int main(void) {
    test_golden();
    test_known_values();
    test_layer_rules();
    test_defaults_and_spellings();
    test_malformed();
    test_missing_and_types();
    test_unsupported_and_conflicts();
    test_inconsistent();
    test_files();
    return test_done("hfconfig");
}
