/* arch.c - per-architecture GGUF layout (llama.cpp names and shapes), metadata keys both ways. */
#include "model/arch.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const cat_names[HM_CAT_COUNT] = {"embeddings",     "output",         "attention",
                                                    "routed experts", "shared experts", "dense mlp",
                                                    "router",         "norms",          "other"};

const char *hm_tensor_cat_name(hm_tensor_cat c) {
    return (unsigned)c < HM_CAT_COUNT ? cat_names[c] : "?";
}

static bool has(const char *s, const char *sub) {
    return strstr(s, sub) != NULL;
}

hm_tensor_cat hm_tensor_cat_gguf(const char *n) {
    if (!strncmp(n, "token_embd", 10)) return HM_CAT_EMBED;
    if (!strncmp(n, "output_norm", 11)) return HM_CAT_NORM;
    if (!strncmp(n, "output.", 7)) return HM_CAT_OUTPUT;
    if (has(n, "_exps")) return HM_CAT_ROUTED;
    if (has(n, "_shexp")) return HM_CAT_SHARED;
    if (has(n, "ffn_gate_inp") || has(n, "exp_probs_b")) return HM_CAT_ROUTER;
    if (has(n, "attn_q_norm") || has(n, "attn_k_norm") || has(n, "attn_q_a_norm") ||
        has(n, "attn_kv_a_norm"))
        return HM_CAT_ATTN;
    if (has(n, "_norm")) return HM_CAT_NORM;
    if (has(n, ".attn_")) return HM_CAT_ATTN;
    if (has(n, ".ffn_gate") || has(n, ".ffn_up") || has(n, ".ffn_down")) return HM_CAT_DENSE;
    return HM_CAT_OTHER;
}

hm_tensor_cat hm_tensor_cat_hf(const char *n) {
    if (has(n, "embed_tokens")) return HM_CAT_EMBED;
    if (has(n, "lm_head")) return HM_CAT_OUTPUT;
    if (has(n, "shared_expert_gate")) return HM_CAT_SHARED;
    if (has(n, ".experts.")) return HM_CAT_ROUTED;
    if (has(n, "shared_expert")) return HM_CAT_SHARED;
    if (has(n, "mlp.gate.") || has(n, "mlp.router.") || has(n, "block_sparse_moe.gate.") ||
        has(n, "e_score_correction_bias"))
        return HM_CAT_ROUTER;
    if (has(n, "self_attn.")) return HM_CAT_ATTN;
    if (has(n, "norm")) return HM_CAT_NORM;
    if (has(n, ".mlp.")) return HM_CAT_DENSE;
    return HM_CAT_OTHER;
}

uint32_t hm_type_for_row(uint32_t type, uint64_t ne0) {
    uint64_t b;
    if (hm_type_row_bytes(type, ne0, &b)) return type;
    uint32_t fb;
    switch (type) {
    case HM_TYPE_Q4_K:
        fb = HM_TYPE_Q5_0;
        break;
    case HM_TYPE_Q5_K:
        fb = HM_TYPE_Q5_1;
        break;
    case HM_TYPE_Q6_K:
        fb = HM_TYPE_Q8_0;
        break;
    case HM_TYPE_Q2_K:
    case HM_TYPE_Q3_K:
    case HM_TYPE_IQ4_XS:
        fb = HM_TYPE_IQ4_NL;
        break;
    default:
        fb = HM_TYPE_F16;
    }
    return hm_type_row_bytes(fb, ne0, &b) ? fb : HM_TYPE_F16;
}

/* ---------------------------------------------------------------- tensor plan */

typedef struct plan {
    hm_tensor_spec *v;
    size_t n, cap;
    bool oom;
} plan;

static void add(plan *p, hm_tensor_cat cat, hm_init init, uint32_t type, uint32_t n_dims,
                uint64_t ne0, uint64_t ne1, uint64_t ne2, const char *fmt, ...) {
    if (p->oom) return;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 256;
        hm_tensor_spec *v = realloc(p->v, cap * sizeof *v);
        if (!v) {
            p->oom = true;
            return;
        }
        p->v = v;
        p->cap = cap;
    }
    hm_tensor_spec *t = &p->v[p->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = n_dims > 1 ? ne1 : 1;
    t->ne[2] = n_dims > 2 ? ne2 : 1;
    t->ne[3] = 1;
    t->cat = cat;
    t->init = init;
    t->type =
        init == HM_INIT_WEIGHT || cat == HM_CAT_EMBED ? hm_type_for_row(type, ne0) : HM_TYPE_F32;
}

#define W(cat, type, nd, a, b, c, ...) add(&p, cat, HM_INIT_WEIGHT, type, nd, a, b, c, __VA_ARGS__)
#define N(cat, a, ...)                 add(&p, cat, HM_INIT_NORM, HM_TYPE_F32, 1, a, 1, 1, __VA_ARGS__)
#define S(cat, nd, a, b, ...)          add(&p, cat, HM_INIT_SMALL, HM_TYPE_F32, nd, a, b, 1, __VA_ARGS__)

hm_status hm_arch_tensor_plan(const hm_hparams *hp, const hm_plan_types *types,
                              hm_tensor_spec **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    hm_status st = hm_hparams_validate(hp, hp->model_type);
    if (st != HM_OK) return st;
    plan p = {0};
    const uint32_t dt = (uint32_t)types->dense, et = (uint32_t)types->experts;
    const uint64_t H = hp->hidden, V = hp->vocab_size, nh = hp->n_heads, nkv = hp->n_kv_heads;
    const uint64_t hd = hp->head_dim, vd = hp->v_head_dim ? hp->v_head_dim : hp->head_dim;
    const uint64_t E = hp->n_experts, FE = hp->moe_inter;
    add(&p, HM_CAT_EMBED, HM_INIT_SMALL, dt, 2, H, V, 1, "token_embd.weight");
    p.v[0].type = hm_type_for_row(dt, H);
    N(HM_CAT_NORM, H, "output_norm.weight");
    if (!hp->tie_embeddings) W(HM_CAT_OUTPUT, dt, 2, H, V, 1, "output.weight");

    for (uint32_t il = 0; il < hp->n_layers; il++) {
        N(HM_CAT_NORM, H, "blk.%u.attn_norm.weight", il);
        switch (hp->arch) {
        case HM_ARCH_DEEPSEEK2: {
            uint64_t nope = hp->qk_nope_head_dim, rope = hp->qk_rope_head_dim;
            uint64_t kvl = hp->kv_lora_rank, ql = hp->q_lora_rank;
            if (ql) {
                W(HM_CAT_ATTN, dt, 2, H, ql, 1, "blk.%u.attn_q_a.weight", il);
                N(HM_CAT_ATTN, ql, "blk.%u.attn_q_a_norm.weight", il);
                W(HM_CAT_ATTN, dt, 2, ql, nh * (nope + rope), 1, "blk.%u.attn_q_b.weight", il);
            } else {
                W(HM_CAT_ATTN, dt, 2, H, nh * (nope + rope), 1, "blk.%u.attn_q.weight", il);
            }
            W(HM_CAT_ATTN, dt, 2, H, kvl + rope, 1, "blk.%u.attn_kv_a_mqa.weight", il);
            N(HM_CAT_ATTN, kvl, "blk.%u.attn_kv_a_norm.weight", il);
            W(HM_CAT_ATTN, dt, 3, nope, kvl, nh, "blk.%u.attn_k_b.weight", il);
            W(HM_CAT_ATTN, dt, 3, kvl, vd, nh, "blk.%u.attn_v_b.weight", il);
            W(HM_CAT_ATTN, dt, 2, nh * vd, H, 1, "blk.%u.attn_output.weight", il);
            break;
        }
        default:
            W(HM_CAT_ATTN, dt, 2, H, nh * hd, 1, "blk.%u.attn_q.weight", il);
            W(HM_CAT_ATTN, dt, 2, H, nkv * hd, 1, "blk.%u.attn_k.weight", il);
            W(HM_CAT_ATTN, dt, 2, H, nkv * vd, 1, "blk.%u.attn_v.weight", il);
            W(HM_CAT_ATTN, dt, 2, nh * vd, H, 1, "blk.%u.attn_output.weight", il);
            if (hp->attn_bias) {
                S(HM_CAT_ATTN, 1, nh * hd, 1, "blk.%u.attn_q.bias", il);
                S(HM_CAT_ATTN, 1, nkv * hd, 1, "blk.%u.attn_k.bias", il);
                S(HM_CAT_ATTN, 1, nkv * vd, 1, "blk.%u.attn_v.bias", il);
            }
            if (hp->attn_out_bias) S(HM_CAT_ATTN, 1, H, 1, "blk.%u.attn_output.bias", il);
            if (hp->qk_norm) {
                N(HM_CAT_ATTN, hd, "blk.%u.attn_q_norm.weight", il);
                N(HM_CAT_ATTN, hd, "blk.%u.attn_k_norm.weight", il);
            }
            if (hp->attn_sinks) S(HM_CAT_ATTN, 1, nh, 1, "blk.%u.attn_sinks.weight", il);
        }
        if (hp->arch == HM_ARCH_GPTOSS || hp->arch == HM_ARCH_GLM4MOE) /* llama.cpp's names */
            N(HM_CAT_NORM, H, "blk.%u.post_attention_norm.weight", il);
        else
            N(HM_CAT_NORM, H, "blk.%u.ffn_norm.weight", il);

        if (!hm_hparams_layer_is_moe(hp, il)) {
            uint64_t F = hp->ffn_inter;
            W(HM_CAT_DENSE, dt, 2, H, F, 1, "blk.%u.ffn_gate.weight", il);
            W(HM_CAT_DENSE, dt, 2, F, H, 1, "blk.%u.ffn_down.weight", il);
            W(HM_CAT_DENSE, dt, 2, H, F, 1, "blk.%u.ffn_up.weight", il);
            continue;
        }
        S(HM_CAT_ROUTER, 2, H, E, "blk.%u.ffn_gate_inp.weight", il);
        if (hp->router_bias) S(HM_CAT_ROUTER, 1, E, 1, "blk.%u.ffn_gate_inp.bias", il);
        if (hp->score_correction_bias) S(HM_CAT_ROUTER, 1, E, 1, "blk.%u.exp_probs_b.bias", il);
        W(HM_CAT_ROUTED, et, 3, H, FE, E, "blk.%u.ffn_gate_exps.weight", il);
        W(HM_CAT_ROUTED, et, 3, FE, H, E, "blk.%u.ffn_down_exps.weight", il);
        W(HM_CAT_ROUTED, et, 3, H, FE, E, "blk.%u.ffn_up_exps.weight", il);
        if (hp->expert_bias) {
            S(HM_CAT_ROUTED, 2, FE, E, "blk.%u.ffn_gate_exps.bias", il);
            S(HM_CAT_ROUTED, 2, H, E, "blk.%u.ffn_down_exps.bias", il);
            S(HM_CAT_ROUTED, 2, FE, E, "blk.%u.ffn_up_exps.bias", il);
        }
        if (hp->n_shared_experts) {
            uint64_t SF = hp->shared_inter;
            if (hp->shared_gate) S(HM_CAT_SHARED, 1, H, 1, "blk.%u.ffn_gate_inp_shexp.weight", il);
            W(HM_CAT_SHARED, dt, 2, H, SF, 1, "blk.%u.ffn_gate_shexp.weight", il);
            W(HM_CAT_SHARED, dt, 2, SF, H, 1, "blk.%u.ffn_down_shexp.weight", il);
            W(HM_CAT_SHARED, dt, 2, H, SF, 1, "blk.%u.ffn_up_shexp.weight", il);
        }
    }
    if (p.oom) {
        free(p.v);
        return hm_errorf(HM_ERR_NO_MEMORY, "tensor plan: out of memory");
    }
    *out = p.v;
    *n_out = p.n;
    return HM_OK;
}

#undef W
#undef N
#undef S

/* ---------------------------------------------------------------- metadata out */

static hm_status wkey_u32(hm_gguf_writer *w, const char *arch, const char *key, uint64_t v) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return hm_gguf_w_uint(w, k, HM_GGUF_UINT32, v);
}

static hm_status wkey_f32(hm_gguf_writer *w, const char *arch, const char *key, float v) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return hm_gguf_w_f32(w, k, v);
}

hm_status hm_hparams_write_gguf(hm_gguf_writer *w, const hm_hparams *hp, const char *model_name) {
    const char *a = hm_arch_gguf_name(hp->arch);
    if (!a || !*a)
        return hm_errorf(HM_ERR_UNSUPPORTED, "no GGUF architecture for %s", hp->model_type);
    if (hp->rope_type == HM_ROPE_DYNAMIC || hp->rope_type == HM_ROPE_LLAMA3)
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "RoPE scaling \"%s\" has no GGUF form that llama.cpp reads for %s (it "
                         "knows none, linear and yarn): run this model from its Hugging Face "
                         "directory",
                         hp->rope_type == HM_ROPE_DYNAMIC ? "dynamic" : "llama3", a);
    hm_status st;
#define T(x)                                                                                       \
    do {                                                                                           \
        if ((st = (x)) != HM_OK) return st;                                                        \
    } while (0)
    T(hm_gguf_w_str(w, "general.architecture", a));
    T(hm_gguf_w_str(w, "general.name", model_name ? model_name : a));
    T(hm_gguf_w_uint(w, "general.quantization_version", HM_GGUF_UINT32, 2));
    T(wkey_u32(w, a, "context_length", hp->max_ctx));
    T(wkey_u32(w, a, "embedding_length", hp->hidden));
    T(wkey_u32(w, a, "block_count", hp->n_layers));
    T(wkey_u32(w, a, "feed_forward_length",
               hp->arch == HM_ARCH_MIXTRAL ? hp->moe_inter : hp->ffn_inter));
    T(wkey_u32(w, a, "attention.head_count", hp->n_heads));
    /* MLA is written as llama.cpp's converter does: MQA over the latent (one kv head, of
     * kv_lora + rope), decompressed per head by attn_k_b / attn_v_b */
    T(wkey_u32(w, a, "attention.head_count_kv",
               hp->arch == HM_ARCH_DEEPSEEK2 ? 1 : hp->n_kv_heads));
    T(wkey_f32(w, a, "attention.layer_norm_rms_epsilon", hp->norm_eps));
    T(wkey_f32(w, a, "rope.freq_base", hp->rope_theta));
    T(wkey_u32(w, a, "vocab_size", hp->vocab_size));
    if (hp->n_experts) {
        T(wkey_u32(w, a, "expert_count", hp->n_experts));
        T(wkey_u32(w, a, "expert_used_count", hp->n_experts_used));
        if (hp->arch != HM_ARCH_MIXTRAL)
            T(wkey_u32(w, a, "expert_feed_forward_length", hp->moe_inter));
    }
    switch (hp->arch) {
    case HM_ARCH_QWEN3MOE:
        T(wkey_u32(w, a, "attention.key_length", hp->head_dim));
        T(wkey_u32(w, a, "attention.value_length", hp->v_head_dim));
        /* not a llama.cpp key (it always renormalises): only written when a model does not */
        if (!hp->norm_topk_prob) T(hm_gguf_w_bool(w, "qwen3moe.expert_weights_norm", false));
        break;
    case HM_ARCH_QWEN2MOE:
        T(wkey_u32(w, a, "expert_shared_feed_forward_length", hp->shared_inter));
        /* not a llama.cpp key (it never renormalises): only written when a model does */
        if (hp->norm_topk_prob) T(hm_gguf_w_bool(w, "qwen2moe.expert_weights_norm", true));
        break;
    case HM_ARCH_MIXTRAL:
        T(wkey_u32(w, a, "rope.dimension_count", hp->rope_dim));
        break;
    case HM_ARCH_DEEPSEEK2:
        T(wkey_u32(w, a, "leading_dense_block_count", hp->first_k_dense));
        T(wkey_u32(w, a, "expert_shared_count", hp->n_shared_experts));
        T(wkey_f32(w, a, "expert_weights_scale", hp->routed_scaling));
        T(hm_gguf_w_bool(w, "deepseek2.expert_weights_norm", hp->norm_topk_prob));
        T(wkey_u32(w, a, "expert_gating_func", hp->gating == HM_GATING_SIGMOID ? 2 : 1));
        if (hp->n_group) {
            T(wkey_u32(w, a, "expert_group_count", hp->n_group));
            T(wkey_u32(w, a, "expert_group_used_count", hp->topk_group));
        }
        if (hp->q_lora_rank) T(wkey_u32(w, a, "attention.q_lora_rank", hp->q_lora_rank));
        T(wkey_u32(w, a, "attention.kv_lora_rank", hp->kv_lora_rank));
        T(wkey_u32(w, a, "attention.key_length", hp->kv_lora_rank + hp->qk_rope_head_dim));
        T(wkey_u32(w, a, "attention.value_length", hp->kv_lora_rank));
        T(wkey_u32(w, a, "attention.key_length_mla", hp->qk_nope_head_dim + hp->qk_rope_head_dim));
        T(wkey_u32(w, a, "attention.value_length_mla", hp->v_head_dim));
        T(wkey_u32(w, a, "rope.dimension_count", hp->qk_rope_head_dim));
        break;
    case HM_ARCH_GPTOSS:
        T(wkey_u32(w, a, "attention.key_length", hp->head_dim));
        T(wkey_u32(w, a, "attention.value_length", hp->v_head_dim));
        T(wkey_u32(w, a, "attention.sliding_window", hp->sliding_window));
        break;
    case HM_ARCH_GLM4MOE:
        T(wkey_u32(w, a, "leading_dense_block_count", hp->first_k_dense));
        T(wkey_u32(w, a, "expert_shared_count", hp->n_shared_experts));
        T(wkey_f32(w, a, "expert_weights_scale", hp->routed_scaling));
        T(hm_gguf_w_bool(w, "glm4moe.expert_weights_norm", hp->norm_topk_prob));
        T(wkey_u32(w, a, "expert_gating_func", 2));
        if (hp->n_group > 1) { /* group-limited routing (GLM-4.5 itself has one group) */
            T(wkey_u32(w, a, "expert_group_count", hp->n_group));
            T(wkey_u32(w, a, "expert_group_used_count", hp->topk_group));
        }
        T(wkey_u32(w, a, "attention.key_length", hp->head_dim));
        T(wkey_u32(w, a, "attention.value_length", hp->v_head_dim));
        T(wkey_u32(w, a, "rope.dimension_count", hp->rope_dim));
        T(wkey_u32(w, a, "nextn_predict_layers", hp->n_nextn_layers));
        break;
    default:
        break;
    }
    if (hp->rope_type == HM_ROPE_YARN || hp->rope_type == HM_ROPE_LINEAR) {
        char k[160];
        snprintf(k, sizeof k, "%s.rope.scaling.type", a);
        T(hm_gguf_w_str(w, k, hp->rope_type == HM_ROPE_YARN ? "yarn" : "linear"));
        T(wkey_f32(w, a, "rope.scaling.factor", hp->rope_factor));
        if (hp->rope_orig_ctx)
            T(wkey_u32(w, a, "rope.scaling.original_context_length", hp->rope_orig_ctx));
        if (hp->arch == HM_ARCH_DEEPSEEK2 && hp->yarn_mscale_all_dim > 0)
            T(wkey_f32(w, a, "rope.scaling.yarn_log_multiplier", 0.1f * hp->yarn_mscale_all_dim));
        if (hp->rope_type == HM_ROPE_YARN && hp->yarn_beta_fast > 0 && hp->yarn_beta_fast != 32.0f)
            T(wkey_f32(w, a, "rope.scaling.yarn_beta_fast", hp->yarn_beta_fast));
        if (hp->rope_type == HM_ROPE_YARN && hp->yarn_beta_slow > 0 && hp->yarn_beta_slow != 1.0f)
            T(wkey_f32(w, a, "rope.scaling.yarn_beta_slow", hp->yarn_beta_slow));
    }
#undef T
    return HM_OK;
}

/* ---------------------------------------------------------------- metadata in */

typedef struct rd {
    const hm_gguf *g;
    const char *arch;
    hm_status st;
} rd;

/* Optional u32: leaves *v alone when absent; records the first type error. */
static void opt_u32(rd *r, const char *key, uint32_t *v) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", r->arch, key);
    uint64_t u;
    hm_status st = hm_gguf_get_uint(r->g, k, &u);
    if (st == HM_OK && u > UINT32_MAX)
        st = hm_errorf(HM_ERR_FORMAT, "%s: %s = %llu is too large", hm_gguf_name(r->g), k,
                       (unsigned long long)u);
    if (st == HM_OK)
        *v = (uint32_t)u;
    else if (st != HM_ERR_NOT_FOUND && r->st == HM_OK)
        r->st = st;
}

static void req_u32(rd *r, const char *key, uint32_t *v) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", r->arch, key);
    if (r->st == HM_OK && !hm_gguf_find_kv(r->g, k))
        r->st = hm_errorf(HM_ERR_FORMAT, "%s: required metadata key '%s' is missing",
                          hm_gguf_name(r->g), k);
    opt_u32(r, key, v);
}

static void opt_f32(rd *r, const char *key, float *v) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", r->arch, key);
    double d;
    hm_status st = hm_gguf_get_float(r->g, k, &d);
    if (st == HM_OK)
        *v = (float)d;
    else if (st != HM_ERR_NOT_FOUND && r->st == HM_OK)
        r->st = st;
}

static void opt_bool(rd *r, const char *key, bool *v) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", r->arch, key);
    hm_status st = hm_gguf_get_bool(r->g, k, v);
    if (st != HM_OK && st != HM_ERR_NOT_FOUND && r->st == HM_OK) r->st = st;
}

static bool tensor_exists(const hm_gguf *g, const char *fmt, uint32_t il) {
    char name[96];
    snprintf(name, sizeof name, fmt, il);
    return hm_gguf_find_tensor(g, name) != NULL;
}

hm_status hm_hparams_from_gguf(const hm_gguf *g, hm_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    hm_gguf_str as;
    hm_status st = hm_gguf_get_str(g, "general.architecture", &as);
    if (st != HM_OK) return st;
    char arch[32];
    snprintf(arch, sizeof arch, "%.*s", (int)(as.len < 31 ? as.len : 31), as.ptr);
    snprintf(hp->model_type, sizeof hp->model_type, "%s", arch);
    rd r = {g, arch, HM_OK};
    uint32_t n_exp = 0;
    opt_u32(&r, "expert_count", &n_exp);
    if (!strcmp(arch, "qwen3moe"))
        hp->arch = HM_ARCH_QWEN3MOE;
    else if (!strcmp(arch, "qwen2moe"))
        hp->arch = HM_ARCH_QWEN2MOE;
    else if (!strcmp(arch, "llama") && n_exp > 0)
        hp->arch = HM_ARCH_MIXTRAL;
    else if (!strcmp(arch, "deepseek2"))
        hp->arch = HM_ARCH_DEEPSEEK2;
    else if (!strcmp(arch, "gpt-oss"))
        hp->arch = HM_ARCH_GPTOSS;
    else if (!strcmp(arch, "glm4moe"))
        hp->arch = HM_ARCH_GLM4MOE;
    else
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "%s: architecture '%s'%s is not supported (supported: qwen3moe, qwen2moe, "
                         "llama with experts (Mixtral), deepseek2, gpt-oss, glm4moe)",
                         hm_gguf_name(g), arch, !strcmp(arch, "llama") ? " without experts" : "");
    req_u32(&r, "embedding_length", &hp->hidden);
    req_u32(&r, "block_count", &hp->n_layers);
    req_u32(&r, "attention.head_count", &hp->n_heads);
    hp->n_kv_heads = hp->n_heads;
    opt_u32(&r, "attention.head_count_kv", &hp->n_kv_heads);
    opt_u32(&r, "context_length", &hp->max_ctx);
    opt_u32(&r, "feed_forward_length", &hp->ffn_inter);
    hp->norm_eps = 1e-6f;
    opt_f32(&r, "attention.layer_norm_rms_epsilon", &hp->norm_eps);
    hp->rope_theta = 10000.0f;
    opt_f32(&r, "rope.freq_base", &hp->rope_theta);
    hp->n_experts = n_exp;
    opt_u32(&r, "expert_used_count", &hp->n_experts_used);
    opt_u32(&r, "expert_feed_forward_length", &hp->moe_inter);
    if (hp->arch == HM_ARCH_MIXTRAL && !hp->moe_inter) hp->moe_inter = hp->ffn_inter;
    /* llama.cpp's LlamaModel converter permutes q and k rows for the interleaved rotation */
    hp->rope_interleaved = hp->arch == HM_ARCH_MIXTRAL;
    opt_u32(&r, "expert_shared_count", &hp->n_shared_experts);
    opt_u32(&r, "leading_dense_block_count", &hp->first_k_dense);
    opt_u32(&r, "nextn_predict_layers", &hp->n_nextn_layers);
    hp->routed_scaling = 1.0f;
    opt_f32(&r, "expert_weights_scale", &hp->routed_scaling);
    /* llama.cpp's per-architecture defaults for top-k renormalisation */
    hp->norm_topk_prob = hp->arch == HM_ARCH_QWEN3MOE || hp->arch == HM_ARCH_MIXTRAL;
    opt_bool(&r, "expert_weights_norm", &hp->norm_topk_prob);
    uint32_t gating = 0;
    opt_u32(&r, "expert_gating_func", &gating);
    hp->gating = hp->arch == HM_ARCH_GPTOSS ? HM_GATING_SOFTMAX_TOPK
                 : gating == 2              ? HM_GATING_SIGMOID
                 : gating == 3              ? HM_GATING_SOFTMAX_TOPK
                                            : HM_GATING_SOFTMAX;
    opt_u32(&r, "expert_group_count", &hp->n_group);
    opt_u32(&r, "expert_group_used_count", &hp->topk_group);
    hp->head_dim = hp->n_heads ? hp->hidden / hp->n_heads : 0;
    opt_u32(&r, "attention.key_length", &hp->head_dim);
    hp->v_head_dim = hp->head_dim;
    opt_u32(&r, "attention.value_length", &hp->v_head_dim);
    hp->rope_dim = hp->head_dim;
    opt_u32(&r, "rope.dimension_count", &hp->rope_dim);
    opt_u32(&r, "attention.sliding_window", &hp->sliding_window);
    if (hp->arch == HM_ARCH_DEEPSEEK2) {
        opt_u32(&r, "attention.q_lora_rank", &hp->q_lora_rank);
        opt_u32(&r, "attention.kv_lora_rank", &hp->kv_lora_rank);
        hp->qk_rope_head_dim = hp->rope_dim;
        uint32_t kmla = 0, vmla = 0;
        opt_u32(&r, "attention.key_length_mla", &kmla);
        opt_u32(&r, "attention.value_length_mla", &vmla);
        if (kmla) hp->head_dim = kmla; /* current conversions: key_length is the MQA latent */
        if (vmla) hp->v_head_dim = vmla;
        hp->qk_nope_head_dim =
            hp->head_dim > hp->qk_rope_head_dim ? hp->head_dim - hp->qk_rope_head_dim : 0;
        hp->score_correction_bias =
            hm_gguf_n_tensors(g) ? tensor_exists(g, "blk.%u.exp_probs_b.bias", hp->first_k_dense)
                                 : hp->gating == HM_GATING_SIGMOID;
    }
    hp->rope_factor = 1.0f;
    char k[160];
    snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
    hm_gguf_str rt;
    if (hm_gguf_get_str(g, k, &rt) == HM_OK) {
        /* llama.cpp's names (llama_rope_scaling_type); any other would be silently wrong */
        if (hm_gguf_str_eq(rt, "yarn"))
            hp->rope_type = HM_ROPE_YARN;
        else if (hm_gguf_str_eq(rt, "linear"))
            hp->rope_type = HM_ROPE_LINEAR;
        else if (hm_gguf_str_eq(rt, "none"))
            hp->rope_type = HM_ROPE_NONE;
        else
            return hm_errorf(HM_ERR_UNSUPPORTED,
                             "%s: %s = \"%.*s\" is not supported (supported: none, linear, yarn)",
                             hm_gguf_name(g), k, (int)(rt.len > 64 ? 64 : rt.len), rt.ptr);
        opt_f32(&r, "rope.scaling.factor", &hp->rope_factor);
        opt_u32(&r, "rope.scaling.original_context_length", &hp->rope_orig_ctx);
        float mult = 0, attn = 1.0f;
        opt_f32(&r, "rope.scaling.yarn_log_multiplier", &mult);
        if (mult > 0) hp->yarn_mscale = hp->yarn_mscale_all_dim = mult / 0.1f;
        if (hp->rope_type == HM_ROPE_YARN) {
            /* llama.cpp's defaults; the original context defaults to the trained one */
            hp->yarn_beta_fast = 32.0f, hp->yarn_beta_slow = 1.0f;
            opt_f32(&r, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast);
            opt_f32(&r, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow);
            if (!hp->rope_orig_ctx) hp->rope_orig_ctx = hp->max_ctx;
        }
        opt_f32(&r, "rope.scaling.attn_factor", &attn);
        if (r.st == HM_OK && attn != 1.0f)
            return hm_errorf(HM_ERR_UNSUPPORTED,
                             "%s: %s.rope.scaling.attn_factor = %g is not supported (only 1)",
                             hm_gguf_name(g), arch, (double)attn);
        if (r.st == HM_OK && hp->rope_type != HM_ROPE_NONE &&
            !(hp->rope_factor > 0.0f && isfinite(hp->rope_factor)))
            return hm_errorf(HM_ERR_FORMAT, "%s: %s.rope.scaling.factor = %g must be > 0",
                             hm_gguf_name(g), arch, (double)hp->rope_factor);
    }
    if (r.st != HM_OK) return r.st;

    /* vocabulary: explicit key, else the embedding's rows */
    const hm_gguf_tensor *emb = hm_gguf_find_tensor(g, "token_embd.weight");
    opt_u32(&r, "vocab_size", &hp->vocab_size);
    if (!hp->vocab_size && emb) hp->vocab_size = (uint32_t)emb->ne[1];
    hp->tie_embeddings = hm_gguf_n_tensors(g) > 0 && !hm_gguf_find_tensor(g, "output.weight");
    /* partial rotary as transformers defines it; MLA rotates its own qk_rope part fully */
    hp->partial_rotary = hp->arch == HM_ARCH_DEEPSEEK2 || !hp->head_dim
                             ? 1.0f
                             : (float)hp->rope_dim / (float)hp->head_dim;
    hp->decoder_sparse_step = 1;

    /* per-layer structure from the tensors present (what llama.cpp will actually load) */
    bool any_tensors = hm_gguf_n_tensors(g) > 0;
    for (uint32_t il = 0; il < hp->n_layers && il < HM_MAX_LAYERS; il++) {
        if (any_tensors)
            hp->layer_dense[il] = !tensor_exists(g, "blk.%u.ffn_gate_inp.weight", il);
        else
            hp->layer_dense[il] = hp->n_experts == 0 || il < hp->first_k_dense;
    }
    switch (hp->arch) {
    case HM_ARCH_QWEN3MOE:
        hp->qk_norm = true;
        hp->attn_bias = tensor_exists(g, "blk.%u.attn_q.bias", 0); /* attention_bias: true */
        break;
    case HM_ARCH_QWEN2MOE:
        hp->attn_bias = true;
        hp->shared_gate = true;
        hp->n_shared_experts = 1;
        opt_u32(&r, "expert_shared_feed_forward_length", &hp->shared_inter);
        break;
    case HM_ARCH_DEEPSEEK2:
        hp->shared_inter = hp->n_shared_experts * hp->moe_inter;
        /* head_count_kv is 1 (llama.cpp's MQA view of the latent); each head has its own keys
         * and values once decompressed, as transformers counts them */
        hp->n_kv_heads = hp->n_heads;
        break;
    case HM_ARCH_GPTOSS:
        hp->norm_topk_prob = true; /* softmax over the chosen k */
        hp->attn_bias = hp->attn_out_bias = hp->attn_sinks = true;
        hp->expert_bias = hp->router_bias = true;
        hp->act = HM_ACT_SWIGLU_OAI;
        hp->yarn_no_truncate = true; /* gpt-oss config: rope_scaling.truncate = false */
        hp->swiglu_alpha = 1.702f;
        hp->swiglu_limit = 7.0f;
        for (uint32_t il = 0; il < hp->n_layers && il < HM_MAX_LAYERS; il++)
            hp->layer_sliding[il] = il % 2 == 0; /* llama.cpp: swa pattern 2 */
        break;
    case HM_ARCH_GLM4MOE:
        hp->attn_bias = true;
        hp->qk_norm = tensor_exists(g, "blk.%u.attn_q_norm.weight", 0);
        hp->shared_inter = hp->n_shared_experts * hp->moe_inter;
        /* metadata alone (no tensors): GLM-4.5's routers all have the bias */
        hp->score_correction_bias =
            !hm_gguf_n_tensors(g) || tensor_exists(g, "blk.%u.exp_probs_b.bias", hp->first_k_dense);
        hp->gating = HM_GATING_SIGMOID;
        break;
    default:
        break;
    }
    if (r.st != HM_OK) return r.st;
    return hm_hparams_validate(hp, hm_gguf_name(g));
}
