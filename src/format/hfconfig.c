/* hfconfig.c - hm_hparams from a Hugging Face config.json, in the transformers 4.x and 5.x
 * spellings, and the consistency check shared with the GGUF reader.
 *
 * Which keys are required. Keys that decide tensor shapes or which tensors exist must be present
 * (vocab/hidden/layer/head counts, max_position_embeddings, intermediate sizes, expert count and
 * top-k, MLA ranks and head dims, shared-expert size or count, first_k_dense_replace): a default
 * would load a different model without a word. q_lora_rank and n_shared_experts may be null (0).
 * head_dim defaults to hidden_size / num_attention_heads (which must divide) and
 * num_key_value_heads to num_attention_heads. Behavioural keys take the default of the
 * transformers configuration class for the model type when absent (rms_norm_eps, rope_theta,
 * norm_topk_prob, attention_bias, scoring/top-k method, groups, sliding window, swiglu_*), except
 * routed_scaling_factor (1.0, DeepSeek's own default) and num_nextn_predict_layers (0: MTP
 * weights are optional, the tensors decide). JSON null counts as absent everywhere.
 *
 * Integer keys accept JSON integers and integral reals (4096.0), nothing else; sizes are bounded
 * by 2^24. Where both spellings of one value are present (num_experts / num_local_experts /
 * n_routed_experts, rope_scaling / rope_parameters, rope_theta at the top and inside
 * rope_parameters, "type" / "rope_type") they must agree. A config nested as `text_config` is read
 * from there, with keys it lacks taken from the top level (tie_word_embeddings often lives there).
 *
 * Where the layer rules come from (transformers modeling_*.py, 5.x):
 *   qwen2_moe, qwen3_moe: MoE iff il not in mlp_only_layers && num_experts > 0
 *                         && (il + 1) % decoder_sparse_step == 0
 *   deepseek_v2/v3, glm4_moe: MoE iff il >= first_k_dense_replace (DeepSeek's code also requires
 *                         il % moe_layer_freq == 0, honoured here)
 *   gpt_oss: layer_types, default sliding on even layers; mixtral: sliding_window on every layer.
 * MTP layers (il >= num_hidden_layers) follow the first_k_dense_replace rule; they are never
 * sliding. */
#include "format/hparams.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define HF_MAX_FILE_BYTES ((int64_t)16 << 20) /* no config.json comes near this */
#define HF_MAX_SIZE       ((int64_t)1 << 24)  /* bound on sizes and counts */
#define HF_MAX_HEADS      65536
#define HF_MAX_EXPERTS    65536
#define HF_MAX_TOPK       1024
#define HF_REQUIRED       INT64_MIN

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        hm_status st_ = (expr);                                                                    \
        if (st_ != HM_OK) return st_;                                                              \
    } while (0)

static const char k_supported[] =
    "qwen3_moe, qwen2_moe, mixtral, deepseek_v2, deepseek_v3, kimi_k2, gpt_oss, glm4_moe";

const char *hm_arch_name(hm_arch arch) {
    switch (arch) {
    case HM_ARCH_QWEN3MOE:
        return "qwen3moe";
    case HM_ARCH_QWEN2MOE:
        return "qwen2moe";
    case HM_ARCH_MIXTRAL:
        return "mixtral";
    case HM_ARCH_DEEPSEEK2:
        return "deepseek2";
    case HM_ARCH_GPTOSS:
        return "gptoss";
    case HM_ARCH_GLM4MOE:
        return "glm4moe";
    case HM_ARCH_UNKNOWN:
    case HM_ARCH_COUNT:
        break;
    }
    return "unknown";
}

/* Never NULL: "unknown" for HM_ARCH_UNKNOWN or out-of-range values. */
const char *hm_arch_gguf_name(hm_arch arch) {
    switch (arch) {
    case HM_ARCH_QWEN3MOE:
        return "qwen3moe";
    case HM_ARCH_QWEN2MOE:
        return "qwen2moe";
    case HM_ARCH_MIXTRAL:
        return "llama";
    case HM_ARCH_DEEPSEEK2:
        return "deepseek2";
    case HM_ARCH_GPTOSS:
        return "gpt-oss";
    case HM_ARCH_GLM4MOE:
        return "glm4moe";
    case HM_ARCH_UNKNOWN:
    case HM_ARCH_COUNT:
        break;
    }
    return "unknown";
}

/* ---- JSON access with error messages ------------------------------------------------------ */

/* Where a key is looked up: up to two objects in order, each with a display prefix. */
typedef struct hf_src {
    int n;
    json_t *obj[2];
    char pfx[2][48];
} hf_src;

typedef struct hf_ctx {
    const char *file;
    hf_src top;  /* text_config (when present), then the top level */
    hf_src rope; /* rope_parameters, then rope_scaling (either may be missing) */
} hf_ctx;

static void src_add(hf_src *s, json_t *obj, const char *pfx1, const char *pfx2) {
    s->obj[s->n] = obj;
    snprintf(s->pfx[s->n], sizeof s->pfx[0], "%s%s", pfx1, pfx2);
    s->n++;
}

/* The first non-null value of key, and its display name ("text_config.head_dim"); NULL when the
 * key is absent or null everywhere (kname then names it in the first object). */
static json_t *src_get(const hf_src *s, const char *key, char *kname, size_t kcap) {
    for (int i = 0; i < s->n; i++) {
        json_t *v = json_object_get(s->obj[i], key);
        if (v && !json_is_null(v)) {
            snprintf(kname, kcap, "%s%s", s->pfx[i], key);
            return v;
        }
    }
    snprintf(kname, kcap, "%s%s", s->n ? s->pfx[0] : "", key);
    return NULL;
}

/* True when key is present in any object, null included. */
static bool src_has(const hf_src *s, const char *key) {
    for (int i = 0; i < s->n; i++)
        if (json_object_get(s->obj[i], key)) return true;
    return false;
}

static const char *describe(const json_t *v, char *buf, size_t cap) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        snprintf(buf, cap, "\"%.60s%s\"", json_string_value(v),
                 json_string_length(v) > 60 ? "..." : "");
        return buf;
    case JSON_INTEGER:
        snprintf(buf, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return buf;
    case JSON_REAL:
        snprintf(buf, cap, "%.9g", json_real_value(v));
        return buf;
    case JSON_TRUE:
        return "true";
    case JSON_FALSE:
        return "false";
    case JSON_NULL:
        return "null";
    }
    return "an unknown JSON value";
}

static hm_status err_missing(const hf_ctx *c, const char *kname, const char *expect) {
    return hm_errorf(HM_ERR_FORMAT, "%s: missing key '%s' (expected %s)", c->file, kname, expect);
}

static hm_status err_value(const hf_ctx *c, const char *kname, const json_t *v,
                           const char *expect) {
    char got[96];
    return hm_errorf(HM_ERR_FORMAT, "%s: key '%s': expected %s, got %s", c->file, kname, expect,
                     describe(v, got, sizeof got));
}

/* Absent (or null) and required: "missing key", or "got null" when the key is there as null. */
static hm_status err_required(const hf_ctx *c, const hf_src *s, const char *key, const char *kname,
                              const char *expect) {
    if (src_has(s, key)) return err_value(c, kname, json_null(), expect);
    return err_missing(c, kname, expect);
}

static bool int_value(const json_t *v, int64_t lo, int64_t hi, int64_t *out) {
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x < lo || x > hi) return false;
        *out = x;
        return true;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!(d >= (double)lo && d <= (double)hi) || d != floor(d)) return false;
        *out = (int64_t)d;
        return true;
    }
    return false;
}

/* Integer key in [lo, hi]; absent or null gives def, or an error when def is HF_REQUIRED. */
static hm_status get_int(const hf_ctx *c, const hf_src *s, const char *key, int64_t def, int64_t lo,
                         int64_t hi, int64_t *out) {
    char kname[112], expect[80];
    json_t *v = src_get(s, key, kname, sizeof kname);
    snprintf(expect, sizeof expect, "an integer in [%" PRId64 ", %" PRId64 "]", lo, hi);
    if (!v) {
        if (def == HF_REQUIRED) return err_required(c, s, key, kname, expect);
        *out = def;
        return HM_OK;
    }
    if (!int_value(v, lo, hi, out)) return err_value(c, kname, v, expect);
    return HM_OK;
}

static hm_status get_u32(const hf_ctx *c, const hf_src *s, const char *key, int64_t def, int64_t lo,
                         int64_t hi, uint32_t *out) {
    int64_t x = 0;
    TRY(get_int(c, s, key, def, lo, hi, &x));
    *out = (uint32_t)x;
    return HM_OK;
}

/* Number key in (lo, hi] (lo_open) or [lo, hi]; absent or null gives def (NAN: required). */
static hm_status get_num(const hf_ctx *c, const hf_src *s, const char *key, double def, double lo,
                         bool lo_open, double hi, double *out) {
    char kname[112], expect[80];
    json_t *v = src_get(s, key, kname, sizeof kname);
    snprintf(expect, sizeof expect, "a number in %c%g, %g]", lo_open ? '(' : '[', lo, hi);
    if (!v) {
        if (isnan(def)) return err_required(c, s, key, kname, expect);
        *out = def;
        return HM_OK;
    }
    double d = json_is_number(v) ? json_number_value(v) : NAN;
    if (!(lo_open ? d > lo : d >= lo) || !(d <= hi)) return err_value(c, kname, v, expect);
    *out = d;
    return HM_OK;
}

static hm_status get_bool(const hf_ctx *c, const hf_src *s, const char *key, bool def, bool *out) {
    char kname[112];
    json_t *v = src_get(s, key, kname, sizeof kname);
    if (!v) {
        *out = def;
        return HM_OK;
    }
    if (!json_is_boolean(v)) return err_value(c, kname, v, "true or false");
    *out = json_is_true(v);
    return HM_OK;
}

/* String key; *out is NULL when absent or null. */
static hm_status get_str(const hf_ctx *c, const hf_src *s, const char *key, const char **out,
                         char *kname, size_t kcap) {
    json_t *v = src_get(s, key, kname, kcap);
    *out = NULL;
    if (!v) return HM_OK;
    if (!json_is_string(v)) return err_value(c, kname, v, "a string");
    *out = json_string_value(v);
    return HM_OK;
}

/* Numbers compare by value (32 == 32.0), objects member by member, the rest by json_equal. */
static bool json_same(const json_t *a, const json_t *b) {
    if (!a || !b) return a == b;
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    if (json_is_object(a) && json_is_object(b)) {
        if (json_object_size(a) != json_object_size(b)) return false;
        const char *k;
        json_t *va;
        json_object_foreach((json_t *)a, k, va) {
            if (!json_same(va, json_object_get(b, k))) return false;
        }
        return true;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

/* A number that may be spelled in two places (rope_parameters.rope_theta and rope_theta); both
 * present must agree. */
static hm_status get_num2(const hf_ctx *c, const hf_src *first, const hf_src *second,
                          const char *key, double def, double lo, bool lo_open, double hi,
                          double *out) {
    char k1[112], k2[112];
    json_t *v1 = src_get(first, key, k1, sizeof k1);
    json_t *v2 = src_get(second, key, k2, sizeof k2);
    if (v1 && v2 && !json_same(v1, v2)) {
        char g1[96], g2[96];
        return hm_errorf(HM_ERR_FORMAT, "%s: keys '%s' (%s) and '%s' (%s) disagree", c->file, k1,
                         describe(v1, g1, sizeof g1), k2, describe(v2, g2, sizeof g2));
    }
    return get_num(c, v1 || !v2 ? first : second, key, def, lo, lo_open, hi, out);
}

/* ---- parsing -------------------------------------------------------------------------------- */

static hm_arch arch_from_model_type(const char *mt) {
    static const struct {
        const char *hf;
        hm_arch arch;
    } map[] = {{"qwen3_moe", HM_ARCH_QWEN3MOE},    {"qwen2_moe", HM_ARCH_QWEN2MOE},
               {"mixtral", HM_ARCH_MIXTRAL},       {"deepseek_v2", HM_ARCH_DEEPSEEK2},
               {"deepseek_v3", HM_ARCH_DEEPSEEK2}, {"kimi_k2", HM_ARCH_DEEPSEEK2},
               {"gpt_oss", HM_ARCH_GPTOSS},        {"glm4_moe", HM_ARCH_GLM4MOE}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(mt, map[i].hf) == 0) return map[i].arch;
    return HM_ARCH_UNKNOWN;
}

/* Finds rope_parameters (5.x) and rope_scaling (4.x), checks that they agree where both are set,
 * and flattens rope_parameters given per layer type when every layer type has the same one. */
static hm_status rope_sources(hf_ctx *c) {
    static const char *const names[2] = {"rope_parameters", "rope_scaling"};
    json_t *objs[2];
    c->rope.n = 0;
    for (int i = 0; i < 2; i++) {
        char kname[112];
        objs[i] = src_get(&c->top, names[i], kname, sizeof kname);
        if (objs[i] && !json_is_object(objs[i]))
            return err_value(c, kname, objs[i], "an object or null");
        if (!objs[i]) continue;
        const char *pfx = strncmp(kname, "text_config.", 12) == 0 ? "text_config." : "";
        json_t *full = json_object_get(objs[i], "full_attention");
        if (json_is_object(full)) { /* nested by layer type */
            const char *lt;
            json_t *v;
            json_object_foreach(objs[i], lt, v) {
                if (!json_same(v, full))
                    return hm_errorf(HM_ERR_UNSUPPORTED,
                                     "%s: key '%s': RoPE parameters that differ between layer "
                                     "types ('%s' vs 'full_attention') are not supported",
                                     c->file, kname, lt);
            }
            src_add(&c->rope, full, pfx, "rope_parameters.full_attention.");
            continue;
        }
        src_add(&c->rope, objs[i], pfx, i == 0 ? "rope_parameters." : "rope_scaling.");
    }
    if (c->rope.n == 2) {
        const char *k;
        json_t *v;
        json_object_foreach(c->rope.obj[1], k, v) {
            json_t *w = json_object_get(c->rope.obj[0], k);
            if (w && !json_same(v, w)) {
                char g1[96], g2[96];
                return hm_errorf(HM_ERR_FORMAT, "%s: keys '%s%s' (%s) and '%s%s' (%s) disagree",
                                 c->file, c->rope.pfx[0], k, describe(w, g1, sizeof g1),
                                 c->rope.pfx[1], k, describe(v, g2, sizeof g2));
            }
        }
    }
    return HM_OK;
}

static hm_status parse_rope(hf_ctx *c, hm_hparams *hp) {
    const hf_src *R = &c->rope;
    bool ds = hp->arch == HM_ARCH_DEEPSEEK2;
    TRY(rope_sources(c));

    double theta_def = hp->arch == HM_ARCH_MIXTRAL  ? 1e6
                       : hp->arch == HM_ARCH_GPTOSS ? 150000.0
                                                    : 10000.0;
    double theta, partial = 1.0;
    TRY(get_num2(c, R, &c->top, "rope_theta", theta_def, 0, true, 1e12, &theta));
    hp->rope_theta = (float)theta;
    if (!ds) {
        double def = hp->arch == HM_ARCH_GLM4MOE ? 0.5 : 1.0; /* Glm4MoeConfig sets 0.5 for BC */
        TRY(get_num2(c, R, &c->top, "partial_rotary_factor", def, 0, true, 1, &partial));
        /* transformers: dim = int(head_dim * partial_rotary_factor) */
        hp->rope_dim = (uint32_t)((double)hp->head_dim * partial);
    } /* MLA: rope_dim = qk_rope_head_dim, set by the caller; the whole rope part rotates */
    hp->partial_rotary = (float)partial;

    char k1[112], k2[112];
    const char *rtype, *type;
    TRY(get_str(c, R, "rope_type", &rtype, k1, sizeof k1));
    TRY(get_str(c, R, "type", &type, k2, sizeof k2));
    if (rtype && type && strcmp(rtype, type) != 0)
        return hm_errorf(HM_ERR_FORMAT, "%s: keys '%s' (\"%s\") and '%s' (\"%s\") disagree",
                         c->file, k1, rtype, k2, type);
    const char *kind = rtype ? rtype : type ? type : "default";
    const char *kname = rtype ? k1 : k2;

    hp->rope_type = HM_ROPE_NONE;
    hp->rope_factor = 1.0f;
    if (R->n == 0 && hp->arch == HM_ARCH_GPTOSS) {
        /* GptOssConfig: no rope_parameters means YaRN x32 over 4096 positions, no truncation */
        hp->rope_type = HM_ROPE_YARN;
        hp->rope_factor = 32.0f;
        hp->rope_orig_ctx = 4096;
        hp->yarn_beta_fast = 32.0f;
        hp->yarn_beta_slow = 1.0f;
        hp->yarn_no_truncate = true;
        return HM_OK;
    }
    if (strcmp(kind, "default") == 0) return HM_OK;
    if (strcmp(kind, "linear") == 0 || strcmp(kind, "dynamic") == 0) {
        double f;
        TRY(get_num(c, R, "factor", NAN, 0, true, 1e6, &f));
        hp->rope_type = kind[0] == 'l' ? HM_ROPE_LINEAR : HM_ROPE_DYNAMIC;
        hp->rope_factor = (float)f;
        /* _compute_dynamic_ntk_parameters scales past max_position_embeddings */
        if (hp->rope_type == HM_ROPE_DYNAMIC) hp->rope_orig_ctx = hp->max_ctx;
        return HM_OK;
    }
    if (strcmp(kind, "yarn") != 0 && strcmp(kind, "llama3") != 0)
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "%s: key '%s': RoPE type \"%s\" is not supported (supported: default, "
                         "linear, dynamic, yarn, llama3)",
                         c->file, kname, kind);

    /* standardize_rope_params: original_max_position_embeddings defaults to max_position_...;
     * one at the top level of the config (Phi-3 style) takes precedence */
    char ko[112];
    const bool top_orig = src_get(&c->top, "original_max_position_embeddings", ko, sizeof ko);
    TRY(get_u32(c, top_orig ? &c->top : R, "original_max_position_embeddings", hp->max_ctx, 1,
                HF_MAX_SIZE, &hp->rope_orig_ctx));
    if (kind[0] == 'l') { /* llama3: every parameter is required by _compute_llama3_parameters */
        double f, lo, hi;
        TRY(get_num(c, R, "factor", NAN, 0, true, 1e6, &f));
        TRY(get_num(c, R, "low_freq_factor", NAN, 0, true, 1e6, &lo));
        TRY(get_num(c, R, "high_freq_factor", NAN, 0, true, 1e6, &hi));
        if (!(hi > lo))
            return hm_errorf(HM_ERR_FORMAT,
                             "%s: llama3 RoPE needs high_freq_factor > low_freq_factor (got %g "
                             "and %g)",
                             c->file, hi, lo);
        hp->rope_type = HM_ROPE_LLAMA3;
        hp->rope_factor = (float)f;
        hp->rope_low_freq_factor = (float)lo;
        hp->rope_high_freq_factor = (float)hi;
        return HM_OK;
    }

    double f, bf, bs, ms, msa, af;
    bool truncate = true; /* set by get_bool (gcc 13 cannot tell) */
    hp->rope_type = HM_ROPE_YARN;
    /* _compute_yarn_parameters: factor None -> max_position_embeddings / original */
    TRY(get_num(c, R, "factor", (double)hp->max_ctx / hp->rope_orig_ctx, 0, true, 1e6, &f));
    TRY(get_num(c, R, "beta_fast", 32.0, 0, true, 1e6, &bf));
    TRY(get_num(c, R, "beta_slow", 1.0, 0, true, 1e6, &bs));
    TRY(get_num(c, R, "mscale", 0.0, 0, false, 1e6, &ms));
    TRY(get_num(c, R, "mscale_all_dim", 0.0, 0, false, 1e6, &msa));
    TRY(get_num(c, R, "attention_factor", 0.0, 0, false, 1e6, &af));
    TRY(get_bool(c, R, "truncate", true, &truncate));
    hp->rope_factor = (float)f;
    hp->yarn_beta_fast = (float)bf;
    hp->yarn_beta_slow = (float)bs;
    hp->yarn_mscale = (float)ms;
    hp->yarn_mscale_all_dim = (float)msa;
    hp->yarn_attn_factor = (float)af;
    hp->yarn_no_truncate = !truncate;
    return HM_OK;
}

/* layer_types: one "sliding_attention" / "full_attention" per layer, into sliding[]. */
static hm_status parse_layer_types(const hf_ctx *c, json_t *v, const char *kname, uint32_t n,
                                   uint8_t *sliding) {
    char expect[96];
    snprintf(expect, sizeof expect, "an array of %u strings (num_hidden_layers)", n);
    if (!json_is_array(v)) return err_value(c, kname, v, expect);
    if (json_array_size(v) != n)
        return hm_errorf(HM_ERR_FORMAT, "%s: key '%s': expected %s, got %zu entries", c->file,
                         kname, expect, json_array_size(v));
    for (uint32_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        char ename[160];
        snprintf(ename, sizeof ename, "%s[%u]", kname, i);
        if (!json_is_string(e))
            return err_value(c, ename, e, "\"sliding_attention\" or \"full_attention\"");
        const char *s = json_string_value(e);
        if (strcmp(s, "sliding_attention") == 0)
            sliding[i] = 1;
        else if (strcmp(s, "full_attention") == 0)
            sliding[i] = 0;
        else
            return hm_errorf(HM_ERR_UNSUPPORTED,
                             "%s: key '%s': attention type \"%s\" is not supported (expected "
                             "\"sliding_attention\" or \"full_attention\")",
                             c->file, ename, s);
    }
    return HM_OK;
}

static hm_status parse_attention(hf_ctx *c, hm_hparams *hp) {
    const hf_src *T = &c->top;
    char kname[112];
    TRY(get_u32(c, T, "num_attention_heads", HF_REQUIRED, 1, HF_MAX_HEADS, &hp->n_heads));
    TRY(get_u32(c, T, "num_key_value_heads", hp->n_heads, 1, HF_MAX_HEADS, &hp->n_kv_heads));

    if (hp->arch == HM_ARCH_DEEPSEEK2) {
        /* MLA. transformers 5 writes head_dim = qk_rope_head_dim, so head_dim is not read. */
        if (!src_has(T, "q_lora_rank"))
            return err_missing(c, "q_lora_rank", "an integer or null (no q compression)");
        TRY(get_u32(c, T, "q_lora_rank", 0, 1, HF_MAX_SIZE, &hp->q_lora_rank));
        TRY(get_u32(c, T, "kv_lora_rank", HF_REQUIRED, 1, HF_MAX_SIZE, &hp->kv_lora_rank));
        TRY(get_u32(c, T, "qk_rope_head_dim", HF_REQUIRED, 2, HF_MAX_HEADS, &hp->qk_rope_head_dim));
        TRY(get_u32(c, T, "qk_nope_head_dim", HF_REQUIRED, 1, HF_MAX_HEADS, &hp->qk_nope_head_dim));
        TRY(get_u32(c, T, "v_head_dim", HF_REQUIRED, 1, HF_MAX_HEADS, &hp->v_head_dim));
        hp->head_dim = hp->qk_nope_head_dim + hp->qk_rope_head_dim;
        hp->rope_dim = hp->qk_rope_head_dim;
    } else {
        TRY(get_u32(c, T, "head_dim", 0, 1, HF_MAX_HEADS, &hp->head_dim));
        if (hp->head_dim == 0) {
            if (hp->hidden % hp->n_heads != 0)
                return hm_errorf(HM_ERR_FORMAT,
                                 "%s: missing key 'head_dim', and hidden_size %u is not a "
                                 "multiple of num_attention_heads %u to derive it",
                                 c->file, hp->hidden, hp->n_heads);
            hp->head_dim = hp->hidden / hp->n_heads;
        }
        hp->v_head_dim = hp->head_dim;
    }

    switch (hp->arch) {
    case HM_ARCH_QWEN3MOE:
        hp->qk_norm = true; /* Qwen3MoeAttention always has q_norm / k_norm */
        TRY(get_bool(c, T, "attention_bias", false, &hp->attn_bias));
        break;
    case HM_ARCH_QWEN2MOE: /* 4.x: q/k/v bias=True; 5.x: bias=config.qkv_bias */
        TRY(get_bool(c, T, "qkv_bias", true, &hp->attn_bias));
        break;
    case HM_ARCH_DEEPSEEK2: /* attention_bias applies to q_a/kv_a and o_proj */
        TRY(get_bool(c, T, "attention_bias", false, &hp->attn_bias));
        hp->attn_out_bias = hp->attn_bias;
        break;
    case HM_ARCH_GPTOSS:
        TRY(get_bool(c, T, "attention_bias", true, &hp->attn_bias));
        hp->attn_out_bias = hp->attn_bias;
        hp->attn_sinks = true;
        break;
    case HM_ARCH_GLM4MOE:
        TRY(get_bool(c, T, "attention_bias", false, &hp->attn_bias)); /* o_proj has none */
        TRY(get_bool(c, T, "use_qk_norm", false, &hp->qk_norm));
        break;
    default:
        break;
    }

    /* Sliding windows. */
    uint8_t tmp[HM_MAX_LAYERS];
    json_t *lt = src_get(T, "layer_types", kname, sizeof kname);
    if (hp->arch == HM_ARCH_GPTOSS) {
        TRY(get_u32(c, T, "sliding_window", 128, 0, HF_MAX_SIZE, &hp->sliding_window));
        if (lt) {
            TRY(parse_layer_types(c, lt, kname, hp->n_layers, hp->layer_sliding));
        } else { /* GptOssConfig default: sliding on even layers */
            for (uint32_t il = 0; il < hp->n_layers; il++) hp->layer_sliding[il] = il % 2 == 0;
        }
    } else if (hp->arch == HM_ARCH_MIXTRAL) {
        TRY(get_u32(c, T, "sliding_window", 0, 0, HF_MAX_SIZE, &hp->sliding_window));
        for (uint32_t il = 0; il < hp->n_layers; il++) hp->layer_sliding[il] = 1;
    } else if (hp->arch == HM_ARCH_QWEN3MOE || hp->arch == HM_ARCH_QWEN2MOE) {
        bool use_sw = false; /* set by get_bool (gcc 13 cannot tell) */
        TRY(get_bool(c, T, "use_sliding_window", false, &use_sw));
        if (use_sw)
            return hm_errorf(HM_ERR_UNSUPPORTED,
                             "%s: key 'use_sliding_window': true is not supported (no released "
                             "Qwen MoE checkpoint uses it, and transformers versions disagree on "
                             "which layers slide)",
                             c->file);
        if (lt) TRY(parse_layer_types(c, lt, kname, hp->n_layers, tmp)); /* checked, unused */
    }
    bool any = false;
    for (uint32_t il = 0; il < hp->n_layers; il++) {
        if (hp->sliding_window == 0) hp->layer_sliding[il] = 0;
        any |= hp->layer_sliding[il] != 0;
    }
    if (!any) hp->sliding_window = 0;
    return HM_OK;
}

/* Routed expert count under any of its spellings; the ones present must agree. */
static hm_status parse_expert_count(const hf_ctx *c, int64_t lo, uint32_t *out) {
    static const char *const keys[] = {"num_experts", "num_local_experts", "n_routed_experts"};
    const char *found = NULL;
    uint32_t n = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char kname[112];
        if (!src_get(&c->top, keys[i], kname, sizeof kname)) continue;
        uint32_t v;
        TRY(get_u32(c, &c->top, keys[i], HF_REQUIRED, lo, HF_MAX_EXPERTS, &v));
        if (found && v != n)
            return hm_errorf(HM_ERR_FORMAT, "%s: keys '%s' (%u) and '%s' (%u) disagree", c->file,
                             found, n, keys[i], v);
        found = keys[i];
        n = v;
    }
    if (!found) {
        char expect[80];
        snprintf(expect, sizeof expect, "an integer in [%" PRId64 ", %d]", lo, HF_MAX_EXPERTS);
        return err_missing(c, "num_experts' / 'num_local_experts' / 'n_routed_experts", expect);
    }
    *out = n;
    return HM_OK;
}

static hm_status parse_ffn(hf_ctx *c, hm_hparams *hp, bool ds_v2) {
    const hf_src *T = &c->top;
    hm_arch a = hp->arch;
    bool qwen = a == HM_ARCH_QWEN3MOE || a == HM_ARCH_QWEN2MOE;
    bool ds_glm = a == HM_ARCH_DEEPSEEK2 || a == HM_ARCH_GLM4MOE;
    char kname[112];

    if (a != HM_ARCH_GPTOSS) { /* gpt-oss says "silu" but runs its own clamped SwiGLU */
        const char *act;
        TRY(get_str(c, T, "hidden_act", &act, kname, sizeof kname));
        if (act && strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
            return hm_errorf(HM_ERR_UNSUPPORTED,
                             "%s: key '%s': activation \"%s\" is not supported for %s (expected "
                             "\"silu\")",
                             c->file, kname, act, hp->model_type);
    }

    TRY(get_u32(c, T, "intermediate_size", HF_REQUIRED, 1, HF_MAX_SIZE, &hp->ffn_inter));
    TRY(parse_expert_count(c, qwen ? 0 : 1, &hp->n_experts));
    if (hp->n_experts > 0) {
        /* gpt-oss also spells top-k experts_per_token */
        bool alt = a == HM_ARCH_GPTOSS && src_get(T, "experts_per_token", kname, sizeof kname);
        TRY(get_u32(c, T, "num_experts_per_tok", alt ? 0 : HF_REQUIRED, 1, HF_MAX_TOPK,
                    &hp->n_experts_used));
        if (alt) {
            uint32_t k;
            TRY(get_u32(c, T, "experts_per_token", HF_REQUIRED, 1, HF_MAX_TOPK, &k));
            if (hp->n_experts_used && k != hp->n_experts_used)
                return hm_errorf(HM_ERR_FORMAT,
                                 "%s: keys 'num_experts_per_tok' (%u) and '%s' (%u) disagree",
                                 c->file, hp->n_experts_used, kname, k);
            hp->n_experts_used = k;
        }
    }
    if (a == HM_ARCH_MIXTRAL || a == HM_ARCH_GPTOSS)
        hp->moe_inter = hp->ffn_inter; /* the experts are sized by intermediate_size */
    else
        TRY(get_u32(c, T, "moe_intermediate_size", hp->n_experts ? HF_REQUIRED : 0, 1, HF_MAX_SIZE,
                    &hp->moe_inter));

    /* Shared experts. */
    if (a == HM_ARCH_QWEN2MOE) {
        TRY(get_u32(c, T, "shared_expert_intermediate_size", HF_REQUIRED, 0, HF_MAX_SIZE,
                    &hp->shared_inter));
        hp->n_shared_experts = hp->shared_inter ? 1 : 0;
        hp->shared_gate = hp->shared_inter != 0; /* shared_expert_gate: sigmoid(Linear(h, 1)) */
    } else if (ds_glm) {
        if (!src_has(T, "n_shared_experts"))
            return err_missing(c, "n_shared_experts", "an integer or null (none)");
        TRY(get_u32(c, T, "n_shared_experts", 0, 0, 1024, &hp->n_shared_experts));
        hp->shared_inter = hp->n_shared_experts * hp->moe_inter;
    }

    /* Which layers are dense. */
    uint32_t nl = hp->n_layers, nt = nl + hp->n_nextn_layers;
    hp->decoder_sparse_step = 1;
    if (qwen) {
        TRY(get_u32(c, T, "decoder_sparse_step", 1, 1, HF_MAX_SIZE, &hp->decoder_sparse_step));
        for (uint32_t il = 0; il < nl; il++)
            hp->layer_dense[il] = (il + 1) % hp->decoder_sparse_step != 0;
        json_t *mlp = src_get(T, "mlp_only_layers", kname, sizeof kname);
        if (mlp && !json_is_array(mlp))
            return err_value(c, kname, mlp, "an array of layer indices");
        for (size_t i = 0; mlp && i < json_array_size(mlp); i++) {
            char ename[160], expect[80];
            int64_t il;
            snprintf(ename, sizeof ename, "%s[%zu]", kname, i);
            snprintf(expect, sizeof expect, "an integer in [0, %u] (num_hidden_layers - 1)",
                     nl - 1);
            if (!int_value(json_array_get(mlp, i), 0, nl - 1, &il))
                return err_value(c, ename, json_array_get(mlp, i), expect);
            hp->layer_dense[il] = 1;
        }
    } else if (ds_glm) {
        uint32_t freq = 1;
        TRY(get_u32(c, T, "first_k_dense_replace", HF_REQUIRED, 0, nl, &hp->first_k_dense));
        if (a == HM_ARCH_DEEPSEEK2)
            TRY(get_u32(c, T, "moe_layer_freq", 1, 1, HM_MAX_LAYERS, &freq));
        for (uint32_t il = 0; il < nt; il++)
            hp->layer_dense[il] = il < hp->first_k_dense || (il < nl && il % freq != 0);
    }
    if (hp->n_experts == 0) {
        for (uint32_t il = 0; il < nt; il++) hp->layer_dense[il] = 1;
        hp->n_experts_used = 0;
    }

    /* Routing. */
    bool v3 = a == HM_ARCH_DEEPSEEK2 && !ds_v2; /* deepseek_v3, kimi_k2 */
    hp->routed_scaling = 1.0f;
    hp->gating = HM_GATING_SOFTMAX;
    switch (a) {
    case HM_ARCH_MIXTRAL: /* softmax, top-k, renormalised over the k */
        hp->norm_topk_prob = true;
        break;
    case HM_ARCH_GPTOSS: { /* top-k on the logits, softmax over the k */
        double alpha, limit;
        hp->norm_topk_prob = true;
        hp->gating = HM_GATING_SOFTMAX_TOPK;
        hp->expert_bias = hp->router_bias = true;
        hp->act = HM_ACT_SWIGLU_OAI;
        TRY(get_num(c, T, "swiglu_alpha", 1.702, 0, true, 1e3, &alpha));
        TRY(get_num(c, T, "swiglu_limit", 7.0, 0, true, 1e6, &limit));
        hp->swiglu_alpha = (float)alpha;
        hp->swiglu_limit = (float)limit;
        break;
    }
    case HM_ARCH_QWEN3MOE:
    case HM_ARCH_QWEN2MOE:
        TRY(get_bool(c, T, "norm_topk_prob", false, &hp->norm_topk_prob));
        break;
    case HM_ARCH_DEEPSEEK2:
    case HM_ARCH_GLM4MOE: {
        double rs;
        bool grouped;
        TRY(get_bool(c, T, "norm_topk_prob", a == HM_ARCH_GLM4MOE || v3, &hp->norm_topk_prob));
        TRY(get_num(c, T, "routed_scaling_factor", 1.0, 0, true, 1e3, &rs));
        hp->routed_scaling = (float)rs;
        if (a == HM_ARCH_GLM4MOE) { /* Glm4MoeTopkRouter: sigmoid + e_score_correction_bias */
            hp->gating = HM_GATING_SIGMOID;
            hp->score_correction_bias = true;
            grouped = true;
        } else {
            const char *method, *scoring;
            char k2[112];
            TRY(get_str(c, T, "topk_method", &method, kname, sizeof kname));
            TRY(get_str(c, T, "scoring_func", &scoring, k2, sizeof k2));
            if (!method) method = v3 ? "noaux_tc" : "greedy";
            bool noaux = strcmp(method, "noaux_tc") == 0;
            if (!noaux && strcmp(method, "greedy") != 0 &&
                strcmp(method, "group_limited_greedy") != 0)
                return hm_errorf(HM_ERR_UNSUPPORTED,
                                 "%s: key '%s': \"%s\" is not supported (supported: greedy, "
                                 "group_limited_greedy, noaux_tc)",
                                 c->file, kname, method);
            if (!scoring) scoring = v3 || noaux ? "sigmoid" : "softmax";
            if (strcmp(scoring, "sigmoid") == 0)
                hp->gating = HM_GATING_SIGMOID;
            else if (strcmp(scoring, "softmax") != 0)
                return hm_errorf(HM_ERR_UNSUPPORTED,
                                 "%s: key '%s': \"%s\" is not supported (supported: softmax, "
                                 "sigmoid)",
                                 c->file, k2, scoring);
            if (noaux && hp->gating != HM_GATING_SIGMOID)
                return hm_errorf(HM_ERR_UNSUPPORTED,
                                 "%s: key '%s': noaux_tc routing with scoring_func \"%s\" is not "
                                 "supported (DeepSeek's code requires sigmoid)",
                                 c->file, kname, scoring);
            hp->score_correction_bias = noaux;
            grouped = noaux || strcmp(method, "group_limited_greedy") == 0;
        }
        /* transformers defaults: DeepseekV3Config 8 / 4, Glm4MoeConfig 1 / 1 */
        TRY(get_u32(c, T, "n_group", v3 ? 8 : 1, 1, HF_MAX_EXPERTS, &hp->n_group));
        TRY(get_u32(c, T, "topk_group", v3 ? 4 : 1, 1, HF_MAX_EXPERTS, &hp->topk_group));
        if (!grouped || hp->n_group <= 1) hp->n_group = hp->topk_group = 0;
        break;
    }
    default:
        break;
    }
    return HM_OK;
}

static hm_status parse(hf_ctx *c, json_t *root, hm_hparams *hp) {
    char kname[112];
    if (!json_is_object(root)) {
        char got[96];
        return hm_errorf(HM_ERR_FORMAT, "%s: expected a JSON object at the top level, got %s",
                         c->file, describe(root, got, sizeof got));
    }
    json_t *text = json_object_get(root, "text_config");
    if (text && !json_is_null(text) && !json_is_object(text))
        return err_value(c, "text_config", text, "an object or null");
    if (json_is_object(text)) src_add(&c->top, text, "text_config.", "");
    src_add(&c->top, root, "", "");
    const hf_src *T = &c->top;

    const char *mt;
    TRY(get_str(c, T, "model_type", &mt, kname, sizeof kname));
    if (!mt) return err_required(c, T, "model_type", kname, "a string");
    hp->arch = arch_from_model_type(mt);
    if (hp->arch == HM_ARCH_UNKNOWN)
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "%s: key '%s': model type \"%.64s\" is not supported "
                         "(supported: %s)",
                         c->file, kname, mt, k_supported);
    snprintf(hp->model_type, sizeof hp->model_type, "%s", mt);
    bool ds_v2 = strcmp(mt, "deepseek_v2") == 0;
    bool eps5 =
        hp->arch == HM_ARCH_MIXTRAL || hp->arch == HM_ARCH_GPTOSS || hp->arch == HM_ARCH_GLM4MOE;

    /* Trunk. */
    double eps;
    TRY(get_u32(c, T, "vocab_size", HF_REQUIRED, 1, HF_MAX_SIZE, &hp->vocab_size));
    TRY(get_u32(c, T, "hidden_size", HF_REQUIRED, 1, HF_MAX_SIZE, &hp->hidden));
    TRY(get_u32(c, T, "num_hidden_layers", HF_REQUIRED, 1, HM_MAX_LAYERS, &hp->n_layers));
    if (hp->arch == HM_ARCH_DEEPSEEK2 || hp->arch == HM_ARCH_GLM4MOE)
        TRY(get_u32(c, T, "num_nextn_predict_layers", 0, 0, HM_MAX_LAYERS - hp->n_layers,
                    &hp->n_nextn_layers));
    TRY(get_u32(c, T, "max_position_embeddings", HF_REQUIRED, 1, HF_MAX_SIZE, &hp->max_ctx));
    TRY(get_num(c, T, "rms_norm_eps", eps5 ? 1e-5 : 1e-6, 0, true, 0.5, &eps));
    hp->norm_eps = (float)eps;
    TRY(get_bool(c, T, "tie_word_embeddings", false, &hp->tie_embeddings));

    TRY(parse_attention(c, hp));
    TRY(parse_rope(c, hp));
    TRY(parse_ffn(c, hp, ds_v2));
    return hm_hparams_validate(hp, c->file);
}

hm_status hm_hparams_from_hf_json(const char *json, size_t len, const char *name, hm_hparams *out) {
    if (!name) name = "config.json";
    if (!json || !out) return hm_errorf(HM_ERR_INVALID_ARG, "%s: NULL json or output", name);
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return hm_errorf(HM_ERR_FORMAT, "%s: invalid JSON at line %d, column %d: %s", name,
                         jerr.line, jerr.column, jerr.text);
    hm_hparams *hp = calloc(1, sizeof *hp);
    if (!hp) {
        json_decref(root);
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", name);
    }
    hf_ctx c = {.file = name};
    hm_status st = parse(&c, root, hp);
    if (st == HM_OK) *out = *hp;
    free(hp);
    json_decref(root);
    return st;
}

hm_status hm_hparams_from_hf_config(const char *path, hm_hparams *out) {
    if (!path || !out) return hm_errorf(HM_ERR_INVALID_ARG, "hf config: NULL path or output");
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        return hm_errorf_errno(e == ENOENT || e == ENOTDIR ? HM_ERR_NOT_FOUND : HM_ERR_IO, e, "%s",
                               path);
    }
    char *file = NULL;
    if (S_ISDIR(sb.st_mode)) {
        size_t n = strlen(path);
        bool slash = n > 0 && path[n - 1] == '/';
        if (asprintf(&file, "%s%sconfig.json", path, slash ? "" : "/") < 0)
            return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", path);
        if (stat(file, &sb) != 0) {
            int e = errno;
            hm_status st =
                e == ENOENT ? hm_errorf(HM_ERR_NOT_FOUND, "%s: directory has no config.json", path)
                            : hm_errorf_errno(HM_ERR_IO, e, "%s", file);
            free(file);
            return st;
        }
    }
    const char *fname = file ? file : path;
    hm_status st = HM_OK;
    char *buf = NULL;
    FILE *f = NULL;
    if (!S_ISREG(sb.st_mode)) {
        st = hm_errorf(HM_ERR_FORMAT, "%s: not a regular file", fname);
    } else if ((int64_t)sb.st_size > HF_MAX_FILE_BYTES) {
        st = hm_errorf(HM_ERR_FORMAT,
                       "%s: %lld bytes is too large for a config.json (the limit is 16 MiB)", fname,
                       (long long)sb.st_size);
    } else if (!(f = fopen(fname, "rb"))) {
        int e = errno;
        st = hm_errorf_errno(e == ENOENT ? HM_ERR_NOT_FOUND : HM_ERR_IO, e, "%s", fname);
    } else if (!(buf = malloc((size_t)sb.st_size + 1))) {
        st = hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory for %lld bytes", fname,
                       (long long)sb.st_size);
    } else {
        size_t want = (size_t)sb.st_size, got = fread(buf, 1, want, f);
        if (ferror(f))
            st = hm_errorf(HM_ERR_IO, "%s: read error", fname);
        else if (got != want || fgetc(f) != EOF)
            st = hm_errorf(HM_ERR_IO, "%s: file changed while reading (%zu of %zu bytes)", fname,
                           got, want);
        else
            st = hm_hparams_from_hf_json(buf, got, fname, out);
    }
    if (f) fclose(f);
    free(buf);
    free(file);
    return st;
}

/* ---- consistency ---------------------------------------------------------------------------- */

#define BAD(...) hm_errorf(HM_ERR_FORMAT, __VA_ARGS__)

hm_status hm_hparams_validate(const hm_hparams *hp, const char *name) {
    if (!name) name = "hparams";
    if (!hp) return hm_errorf(HM_ERR_INVALID_ARG, "%s: NULL hparams", name);
    if ((int)hp->arch <= (int)HM_ARCH_UNKNOWN || (int)hp->arch >= (int)HM_ARCH_COUNT)
        return BAD("%s: architecture %d is not a known one", name, (int)hp->arch);
    if (hp->vocab_size == 0 || hp->hidden == 0)
        return BAD("%s: vocab_size and hidden must be > 0 "
                   "(got %u, %u)",
                   name, hp->vocab_size, hp->hidden);
    if (hp->n_layers == 0 || hp->n_layers > HM_MAX_LAYERS)
        return BAD("%s: n_layers %u is outside [1, %d]", name, hp->n_layers, HM_MAX_LAYERS);
    if (hp->n_nextn_layers > HM_MAX_LAYERS - hp->n_layers)
        return BAD("%s: n_layers %u + n_nextn_layers %u exceed %d layers", name, hp->n_layers,
                   hp->n_nextn_layers, HM_MAX_LAYERS);
    if (hp->max_ctx == 0) return BAD("%s: max_ctx must be > 0", name);
    if (!(hp->norm_eps > 0.0f && hp->norm_eps < 1.0f))
        return BAD("%s: norm_eps %g is outside (0, 1)", name, (double)hp->norm_eps);

    /* attention */
    if (hp->n_heads == 0 || hp->n_kv_heads == 0)
        return BAD("%s: n_heads %u and n_kv_heads %u must be > 0", name, hp->n_heads,
                   hp->n_kv_heads);
    if (hp->n_heads % hp->n_kv_heads != 0)
        return BAD("%s: n_heads %u is not a multiple of n_kv_heads %u", name, hp->n_heads,
                   hp->n_kv_heads);
    if (hp->head_dim == 0 || hp->v_head_dim == 0)
        return BAD("%s: head_dim %u and v_head_dim %u must be > 0", name, hp->head_dim,
                   hp->v_head_dim);
    if (hp->arch == HM_ARCH_DEEPSEEK2) {
        if (hp->kv_lora_rank == 0 || hp->qk_rope_head_dim == 0)
            return BAD("%s: MLA needs kv_lora_rank and qk_rope_head_dim > 0 (got %u, %u)", name,
                       hp->kv_lora_rank, hp->qk_rope_head_dim);
        if (hp->head_dim != hp->qk_nope_head_dim + hp->qk_rope_head_dim)
            return BAD("%s: head_dim %u != qk_nope_head_dim %u + qk_rope_head_dim %u", name,
                       hp->head_dim, hp->qk_nope_head_dim, hp->qk_rope_head_dim);
    }
    bool any_sliding = false;
    for (uint32_t il = 0; il < hp->n_layers + hp->n_nextn_layers; il++)
        any_sliding |= hp->layer_sliding[il] != 0;
    if (any_sliding && hp->sliding_window == 0)
        return BAD("%s: some layers are marked sliding but sliding_window is 0", name);

    /* rotary */
    if (!(hp->rope_theta > 0.0f) || !isfinite(hp->rope_theta))
        return BAD("%s: rope_theta %g must be > 0", name, (double)hp->rope_theta);
    if (!(hp->partial_rotary > 0.0f && hp->partial_rotary <= 1.0f))
        return BAD("%s: partial_rotary %g is outside (0, 1]", name, (double)hp->partial_rotary);
    if (hp->rope_dim == 0 || hp->rope_dim % 2 != 0 || hp->rope_dim > hp->head_dim)
        return BAD("%s: rope_dim %u must be even and in [2, head_dim %u]", name, hp->rope_dim,
                   hp->head_dim);
    if (hp->rope_type != HM_ROPE_NONE && hp->rope_type != HM_ROPE_LINEAR &&
        hp->rope_type != HM_ROPE_DYNAMIC && hp->rope_type != HM_ROPE_YARN &&
        hp->rope_type != HM_ROPE_LLAMA3)
        return BAD("%s: rope_type %d is not a known one", name, (int)hp->rope_type);
    if (hp->rope_type != HM_ROPE_NONE && !(hp->rope_factor > 0.0f && isfinite(hp->rope_factor)))
        return BAD("%s: rope_factor %g must be > 0", name, (double)hp->rope_factor);
    if ((hp->rope_type == HM_ROPE_YARN || hp->rope_type == HM_ROPE_DYNAMIC ||
         hp->rope_type == HM_ROPE_LLAMA3) &&
        hp->rope_orig_ctx == 0)
        return BAD("%s: RoPE scaling needs rope_orig_ctx > 0", name);
    if (hp->rope_type == HM_ROPE_DYNAMIC && hp->rope_dim <= 2)
        return BAD("%s: dynamic NTK RoPE needs rope_dim > 2 (got %u)", name, hp->rope_dim);

    /* feed-forward */
    if (hp->n_experts > 0) {
        if (hp->n_experts_used == 0 || hp->n_experts_used > hp->n_experts)
            return BAD("%s: n_experts_used %u is outside [1, n_experts %u]", name,
                       hp->n_experts_used, hp->n_experts);
        if (hp->moe_inter == 0) return BAD("%s: moe_inter must be > 0 with experts", name);
    } else if (hp->n_experts_used != 0) {
        return BAD("%s: n_experts_used %u with no experts", name, hp->n_experts_used);
    }
    if ((hp->n_shared_experts == 0) != (hp->shared_inter == 0))
        return BAD("%s: n_shared_experts %u and shared_inter %u must be both zero or both not",
                   name, hp->n_shared_experts, hp->shared_inter);
    if (hp->shared_gate && hp->n_shared_experts == 0)
        return BAD("%s: shared_gate without a shared expert", name);
    if (hp->first_k_dense > hp->n_layers)
        return BAD("%s: first_k_dense %u exceeds n_layers %u", name, hp->first_k_dense,
                   hp->n_layers);
    if (hp->decoder_sparse_step == 0) return BAD("%s: decoder_sparse_step must be >= 1", name);
    for (uint32_t il = 0; il < hp->n_layers + hp->n_nextn_layers; il++) {
        if (!hm_hparams_layer_is_moe(hp, il) && hp->ffn_inter == 0)
            return BAD("%s: layer %u has a dense MLP but ffn_inter is 0", name, il);
    }
    if (hp->n_group || hp->topk_group) {
        if (hp->n_group == 0 || hp->n_experts % hp->n_group != 0)
            return BAD("%s: n_experts %u is not a multiple of n_group %u", name, hp->n_experts,
                       hp->n_group);
        if (hp->topk_group == 0 || hp->topk_group > hp->n_group)
            return BAD("%s: topk_group %u is outside [1, n_group %u]", name, hp->topk_group,
                       hp->n_group);
        if (hp->n_experts_used > hp->topk_group * (hp->n_experts / hp->n_group))
            return BAD("%s: n_experts_used %u exceeds the %u experts of topk_group %u groups", name,
                       hp->n_experts_used, hp->topk_group * (hp->n_experts / hp->n_group),
                       hp->topk_group);
    }
    if (hp->gating != HM_GATING_SOFTMAX && hp->gating != HM_GATING_SIGMOID &&
        hp->gating != HM_GATING_SOFTMAX_TOPK)
        return BAD("%s: gating %d is not a known one", name, (int)hp->gating);
    if (!(hp->routed_scaling > 0.0f) || !isfinite(hp->routed_scaling))
        return BAD("%s: routed_scaling %g must be > 0", name, (double)hp->routed_scaling);
    if (hp->act == HM_ACT_SWIGLU_OAI && !(hp->swiglu_alpha > 0.0f && hp->swiglu_limit > 0.0f))
        return BAD("%s: SwiGLU-OAI needs swiglu_alpha and swiglu_limit > 0 (got %g, %g)", name,
                   (double)hp->swiglu_alpha, (double)hp->swiglu_limit);
    if (hp->act != HM_ACT_SILU && hp->act != HM_ACT_GELU && hp->act != HM_ACT_SWIGLU_OAI)
        return BAD("%s: act %d is not a known one", name, (int)hp->act);
    return HM_OK;
}
