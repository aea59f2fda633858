/* test_convert.c - `hmoe convert` (hm_convert_hf) on tiny Hugging Face models written here: every
 * GGUF tensor is compared with what the safetensors hold, mapped by this file's own reading of
 * llama.cpp's convert_hf_to_gguf.py (names, expert stacking, Mixtral's q/k permutation,
 * DeepSeek's kv_b split) and converted by the reference quantizers; hyper-parameters read back
 * from the GGUF equal the ones from config.json; every malformed model fails with a message naming
 * the tensor and leaves no file. Real checkpoints in tests/data/qwen3moe/<name>/ and
 * tests/data/deepseek/<name>/ (transformers-written) are converted and checked the same way, and
 * run from the GGUF to the same logits as from their directory; so is gpt-oss as released
 * (tests/data/gptoss/hf, MXFP4 experts). tests/convert_python.py checks names and values with
 * the gguf package.
 * HMOE_TEST_VERBOSE=1 prints each expected error message. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/log.h"
#include "format/gguf.h"
#include "format/hparams.h"
#include "format/safetensors.h"
#include "model/arch.h"
#include "model/convert.h"
#include "model/model.h"
#include "quant/fp16.h"
#include "quant/ref.h"
#include "quant/synth.h"
#include "hparams_check.h"
#include "test.h"

static bool g_verbose;
static char g_tmp[64];

/* ---------------------------------------------------------------- tiny safetensors models */

typedef struct ht {
    char name[160];
    char dtype[12];
    uint32_t n_dims;
    int64_t shape[4];
    uint8_t *data;
    size_t nbytes;
} ht;

typedef struct hmodel {
    ht *t;
    size_t n, cap;
} hmodel;

typedef struct opts {
    hm_arch arch;
    const char *dtype; /* F32, F16, BF16 */
    bool tie;
    const char *mlp_only; /* JSON array text, NULL = absent */
    int sparse_step;      /* 0 = absent */
    bool norm_topk_off;
    bool fused; /* transformers-5 fused experts */
    int shards; /* 0/1: model.safetensors; 2: index + two shards */
    /* damage */
    const char *drop;      /* leave this tensor out */
    const char *misshape;  /* one more column (or element) in this tensor */
    const char *extra;     /* add this unknown tensor */
    const char *odd_name;  /* store this tensor with dtype odd_dtype */
    const char *odd_dtype; /* "I32", "F8_E4M3" */
    const char *nan_name;  /* a NaN at element 5 of this tensor */
    bool inv_freq;         /* a rotary_emb.inv_freq buffer (skipped) */
    int lm_head_when_tied; /* 1: a copy of the embeddings, 2: different values */
} opts;

enum {
    V = 96,
    H = 64,
    L = 3,
    NH = 4,
    NKV = 2,
    HD = 16,
    E = 4,
    TOPK = 2,
    MI = 32,
    FI = 48,
    SI = 40
};

static uint64_t fnv(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

static size_t dtype_size(const char *dt) {
    return !strcmp(dt, "F32") || !strcmp(dt, "I32") ? 4 : !strcmp(dt, "F8_E4M3") ? 1 : 2;
}

/* Adds a tensor of random values (uniform in +-1, rounded to the dtype), shape outermost first. */
static void add_t(hmodel *m, const opts *o, const char *name, uint32_t nd, int64_t d0, int64_t d1,
                  int64_t d2) {
    if (o->drop && !strcmp(o->drop, name)) return;
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 64;
        m->t = realloc(m->t, m->cap * sizeof *m->t);
    }
    ht *t = &m->t[m->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    bool odd = o->odd_name && !strcmp(o->odd_name, name);
    snprintf(t->dtype, sizeof t->dtype, "%s", odd ? o->odd_dtype : o->dtype);
    t->n_dims = nd;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->shape[2] = d2;
    if (o->misshape && !strcmp(o->misshape, name)) t->shape[nd - 1]++;
    size_t n = 1, es = dtype_size(t->dtype);
    for (uint32_t d = 0; d < nd; d++) n *= (size_t)t->shape[d];
    t->nbytes = n * es;
    t->data = malloc(t->nbytes);
    uint64_t seed = fnv(name);
    for (size_t i = 0; i < n; i++) {
        float v = (float)((double)(hm_rng_next(&seed) >> 11) * 0x1p-53 * 2.0 - 1.0);
        if (o->nan_name && !strcmp(o->nan_name, name) && i == 5) v = NAN;
        if (es == 4)
            memcpy(t->data + 4 * i, &v, 4);
        else if (es == 1)
            t->data[i] = (uint8_t)(hm_rng_next(&seed) & 0x77);
        else {
            uint16_t h = !strcmp(t->dtype, "F16") ? hm_f32_to_f16(v) : hm_f32_to_bf16(v);
            memcpy(t->data + 2 * i, &h, 2);
        }
    }
}

static void add(hmodel *m, const opts *o, const char *name, int64_t rows, int64_t cols) {
    add_t(m, o, name, cols ? 2 : 1, rows, cols, 0);
}

static void add3(hmodel *m, const opts *o, const char *name, int64_t a, int64_t b, int64_t c) {
    add_t(m, o, name, 3, a, b, c);
}

static bool layer_dense(const opts *o, int il) {
    if (o->sparse_step > 1 && (il + 1) % o->sparse_step != 0) return true;
    if (o->mlp_only) {
        char k[8];
        snprintf(k, sizeof k, "%d", il);
        if (strstr(o->mlp_only, k)) return true; /* single-digit layer lists only */
    }
    return false;
}

static void build(hmodel *m, const opts *o) {
    char n[160];
    bool mixtral = o->arch == HM_ARCH_MIXTRAL, qwen2 = o->arch == HM_ARCH_QWEN2MOE;
    add(m, o, "model.embed_tokens.weight", V, H);
    add(m, o, "model.norm.weight", H, 0);
    if (!o->tie)
        add(m, o, "lm_head.weight", V, H);
    else if (o->lm_head_when_tied) {
        add(m, o, "lm_head.weight", V, H);
        if (o->lm_head_when_tied == 1) memcpy(m->t[m->n - 1].data, m->t[0].data, m->t[0].nbytes);
    }
    for (int il = 0; il < L; il++) {
#define P(fmt, ...) (snprintf(n, sizeof n, "model.layers.%d." fmt, il, ##__VA_ARGS__), n)
        add(m, o, P("input_layernorm.weight"), H, 0);
        add(m, o, P("post_attention_layernorm.weight"), H, 0);
        add(m, o, P("self_attn.q_proj.weight"), NH * HD, H);
        add(m, o, P("self_attn.k_proj.weight"), NKV * HD, H);
        add(m, o, P("self_attn.v_proj.weight"), NKV * HD, H);
        add(m, o, P("self_attn.o_proj.weight"), H, NH * HD);
        if (qwen2) {
            add(m, o, P("self_attn.q_proj.bias"), NH * HD, 0);
            add(m, o, P("self_attn.k_proj.bias"), NKV * HD, 0);
            add(m, o, P("self_attn.v_proj.bias"), NKV * HD, 0);
        } else if (!mixtral) {
            add(m, o, P("self_attn.q_norm.weight"), HD, 0);
            add(m, o, P("self_attn.k_norm.weight"), HD, 0);
        }
        if (o->inv_freq && il == 0) add(m, o, P("self_attn.rotary_emb.inv_freq"), HD / 2, 0);
        if (mixtral) {
            add(m, o, P("block_sparse_moe.gate.weight"), E, H);
            for (int e = 0; e < E; e++) {
                add(m, o, P("block_sparse_moe.experts.%d.w1.weight", e), FI, H);
                add(m, o, P("block_sparse_moe.experts.%d.w2.weight", e), H, FI);
                add(m, o, P("block_sparse_moe.experts.%d.w3.weight", e), FI, H);
            }
            continue;
        }
        if (layer_dense(o, il)) {
            add(m, o, P("mlp.gate_proj.weight"), FI, H);
            add(m, o, P("mlp.up_proj.weight"), FI, H);
            add(m, o, P("mlp.down_proj.weight"), H, FI);
            continue;
        }
        add(m, o, P("mlp.gate.weight"), E, H);
        if (o->fused) {
            add3(m, o, P("mlp.experts.gate_up_proj"), E, 2 * MI, H);
            add3(m, o, P("mlp.experts.down_proj"), E, H, MI);
        } else {
            for (int e = 0; e < E; e++) {
                add(m, o, P("mlp.experts.%d.gate_proj.weight", e), MI, H);
                add(m, o, P("mlp.experts.%d.up_proj.weight", e), MI, H);
                add(m, o, P("mlp.experts.%d.down_proj.weight", e), H, MI);
            }
        }
        if (qwen2) {
            add(m, o, P("mlp.shared_expert.gate_proj.weight"), SI, H);
            add(m, o, P("mlp.shared_expert.up_proj.weight"), SI, H);
            add(m, o, P("mlp.shared_expert.down_proj.weight"), H, SI);
            add(m, o, P("mlp.shared_expert_gate.weight"), 1, H);
        }
#undef P
    }
    if (o->extra) add(m, o, o->extra, 4, 0);
}

static void hmodel_free(hmodel *m) {
    for (size_t i = 0; i < m->n; i++) free(m->t[i].data);
    free(m->t);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(p, 1, n, f) == n);
    fclose(f);
}

/* Tensors [lo, hi) of m as one safetensors file. */
static void write_st(const char *path, const hmodel *m, size_t lo, size_t hi) {
    json_t *root = json_object();
    json_object_set_new(root, "__metadata__", json_pack("{s:s}", "format", "pt"));
    size_t off = 0;
    for (size_t i = lo; i < hi; i++) {
        const ht *t = &m->t[i];
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->n_dims; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        json_object_set_new(root, t->name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype", t->dtype, "shape", shape,
                                      "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + t->nbytes)));
        off += t->nbytes;
    }
    char *hdr = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    size_t total = 8 + padded + off;
    uint8_t *buf = malloc(total);
    uint64_t n64 = padded;
    memcpy(buf, &n64, 8);
    memcpy(buf + 8, hdr, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    off = 8 + padded;
    for (size_t i = lo; i < hi; i++) {
        memcpy(buf + off, m->t[i].data, m->t[i].nbytes);
        off += m->t[i].nbytes;
    }
    write_bytes(path, buf, total);
    free(buf);
    free(hdr);
}

static void path_in(char *out, size_t cap, const char *dir, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
}

static void write_config(const char *dir, const opts *o) {
    char cfg[2048], p[256];
    if (o->arch == HM_ARCH_MIXTRAL)
        snprintf(cfg, sizeof cfg,
                 "{\"architectures\": [\"MixtralForCausalLM\"], \"model_type\": \"mixtral\", "
                 "\"vocab_size\": %d, \"hidden_size\": %d, \"num_hidden_layers\": %d, "
                 "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, "
                 "\"intermediate_size\": %d, \"num_local_experts\": %d, \"num_experts_per_tok\": "
                 "%d, \"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-05, \"rope_theta\": "
                 "1000000.0, \"hidden_act\": \"silu\", \"sliding_window\": null, "
                 "\"tie_word_embeddings\": %s}",
                 V, H, L, NH, NKV, HD, FI, E, TOPK, o->tie ? "true" : "false");
    else
        snprintf(cfg, sizeof cfg,
                 "{\"architectures\": [\"X\"], \"model_type\": \"%s\", \"vocab_size\": %d, "
                 "\"hidden_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
                 "\"num_key_value_heads\": %d, \"head_dim\": %d, \"intermediate_size\": %d, "
                 "\"moe_intermediate_size\": %d, \"num_experts\": %d, \"num_experts_per_tok\": %d, "
                 "\"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-06, \"rope_theta\": "
                 "1000000.0, \"hidden_act\": \"silu\", \"tie_word_embeddings\": %s, "
                 "\"norm_topk_prob\": %s, \"decoder_sparse_step\": %d, \"mlp_only_layers\": %s%s}",
                 o->arch == HM_ARCH_QWEN2MOE ? "qwen2_moe" : "qwen3_moe", V, H, L, NH, NKV, HD, FI,
                 MI, E, TOPK, o->tie ? "true" : "false", o->norm_topk_off ? "false" : "true",
                 o->sparse_step ? o->sparse_step : 1, o->mlp_only ? o->mlp_only : "[]",
                 o->arch == HM_ARCH_QWEN2MOE ? ", \"shared_expert_intermediate_size\": 40" : "");
    path_in(p, sizeof p, dir, "config.json");
    write_bytes(p, cfg, strlen(cfg));
}

static void clear_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
}

/* A fresh model directory g_tmp/hf (emptied first). */
static const char *make_model(const opts *o) {
    static char dir[128];
    snprintf(dir, sizeof dir, "%s/hf", g_tmp);
    mkdir(dir, 0755);
    clear_dir(dir);
    write_config(dir, o);
    hmodel m = {0};
    build(&m, o);
    char p[256];
    if (o->shards == 2) {
        size_t half = m.n / 2;
        path_in(p, sizeof p, dir, "model-00001-of-00002.safetensors");
        write_st(p, &m, 0, half);
        path_in(p, sizeof p, dir, "model-00002-of-00002.safetensors");
        write_st(p, &m, half, m.n);
        json_t *wm = json_object();
        for (size_t i = 0; i < m.n; i++)
            json_object_set_new(wm, m.t[i].name,
                                json_string(i < half ? "model-00001-of-00002.safetensors"
                                                     : "model-00002-of-00002.safetensors"));
        json_t *idx = json_pack("{s:{s:i},s:o}", "metadata", "total_size", 0, "weight_map", wm);
        path_in(p, sizeof p, dir, "model.safetensors.index.json");
        CHECK(json_dump_file(idx, p, 0) == 0);
        json_decref(idx);
    } else {
        path_in(p, sizeof p, dir, "model.safetensors");
        write_st(p, &m, 0, m.n);
    }
    /* tokenizer files are ignored, not an error */
    path_in(p, sizeof p, dir, "tokenizer_config.json");
    write_bytes(p, "{}", 2);
    hmodel_free(&m);
    return dir;
}

/* ---------------------------------------------------------------- the oracle */

/* llama.cpp's GGUF name of an HF tensor (convert_hf_to_gguf.py + gguf's tensor_mapping.py), the
 * expert it is (or -1), and for transformers-5 fused experts the number of row blocks (else 0). */
static bool hf_to_gguf(const char *hf, char *gguf, size_t cap, int *expert, int *fused_parts) {
    static const char *const pairs[][2] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_proj.bias", "attn_q.bias"},
        {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.bias", "attn_v.bias"},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"mlp.gate.weight", "ffn_gate_inp.weight"},
        {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
        {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
        {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
        {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
        {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
        {"mlp.experts.gate_up_proj", "ffn_gate_up_exps.weight"}, /* split by the caller */
        {"mlp.experts.down_proj", "ffn_down_exps.weight"},
        /* DeepSeek (kv_b_proj: kv_b_split) */
        {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
        {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
        {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
        {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
        {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
        {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
        {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
        {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
        {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
    };
    *expert = -1;
    *fused_parts = 0;
    if (!strcmp(hf, "model.embed_tokens.weight")) return snprintf(gguf, cap, "token_embd.weight");
    if (!strcmp(hf, "model.norm.weight")) return snprintf(gguf, cap, "output_norm.weight");
    if (!strcmp(hf, "lm_head.weight")) return snprintf(gguf, cap, "output.weight");
    unsigned il, e;
    int pos = 0;
    if (sscanf(hf, "model.layers.%u.%n", &il, &pos) != 1 || !pos) return false;
    const char *rest = hf + pos;
    char tail[64];
    if (sscanf(rest, "mlp.experts.%u.%63s", &e, tail) == 2 ||
        sscanf(rest, "block_sparse_moe.experts.%u.%63s", &e, tail) == 2) {
        const char *g = !strcmp(tail, "gate_proj.weight") || !strcmp(tail, "w1.weight")   ? "gate"
                        : !strcmp(tail, "up_proj.weight") || !strcmp(tail, "w3.weight")   ? "up"
                        : !strcmp(tail, "down_proj.weight") || !strcmp(tail, "w2.weight") ? "down"
                                                                                          : NULL;
        if (!g) return false;
        *expert = (int)e;
        return snprintf(gguf, cap, "blk.%u.ffn_%s_exps.weight", il, g);
    }
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (!strcmp(rest, pairs[i][0])) {
            if (strstr(rest, "mlp.experts.")) *fused_parts = strstr(rest, "gate_up") ? 2 : 1;
            return snprintf(gguf, cap, "blk.%u.%s", il, pairs[i][1]);
        }
    return false;
}

static void widen(const hm_st_tensor *t, size_t i0, float *out, size_t n) {
    const uint8_t *p = (const uint8_t *)t->data;
    for (size_t i = 0; i < n; i++) {
        if (t->dtype == HM_ST_F32) {
            memcpy(&out[i], p + 4 * (i0 + i), 4);
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * (i0 + i), 2);
            out[i] = t->dtype == HM_ST_F16 ? hm_f16_to_f32(h) : hm_bf16_to_f32(h);
        }
    }
}

/* The type a kept source dtype gets in the GGUF (FP8: BF16, GGUF has no FP8) */
static int st_type(hm_st_dtype dt) {
    return dt == HM_ST_F32 ? HM_TYPE_F32 : dt == HM_ST_F16 ? HM_TYPE_F16 : HM_TYPE_BF16;
}

/* An FP8 E4M3 tensor [rows][cols] times its "<name>_scale_inv" 128 x 128 block scales (F32) */
static bool widen_fp8(const hm_safetensors *st, const hm_st_tensor *t, float *out) {
    char name[160];
    snprintf(name, sizeof name, "%s_scale_inv", t->name);
    const hm_st_tensor *s = hm_st_find(st, name);
    if (!s || s->dtype != HM_ST_F32 || t->n_dims != 2) return false;
    const int64_t rows = t->shape[0], cols = t->shape[1], tc = (cols + 127) / 128;
    const float *sc = s->data;
    const uint8_t *q = t->data;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[r * cols + c] = hm_fp8_e4m3_to_f32(q[r * cols + c]) * sc[(r / 128) * tc + c / 128];
    return true;
}

/* llama.cpp's DeepseekV2Model.modify_tensors: kv_b_proj [heads * (nope + v)][kv_lora] viewed as
 * [heads][nope + v][kv_lora] and split on the middle axis; attn_k_b is the nope part transposed
 * to [heads][kv_lora][nope], attn_v_b the v part [heads][v][kv_lora]. Fills want (gt's [slabs]
 * [rows][cols]) and *dt from the layer's kv_b_proj; false when gt is neither. */
static bool kv_b_split(const char *what, const hm_safetensors *st, const hm_gguf_tensor *gt,
                       float *want, hm_st_dtype *dt) {
    unsigned il;
    char part[8] = "", name[96];
    int end = 0;
    if (sscanf(gt->name, "blk.%u.attn_%1[kv]_b.weight%n", &il, part, &end) != 2 || !end ||
        gt->name[end])
        return false;
    const bool k = part[0] == 'k';
    snprintf(name, sizeof name, "model.layers.%u.self_attn.kv_b_proj.weight", il);
    const hm_st_tensor *t = hm_st_find(st, name);
    const uint64_t heads = gt->ne[2], cols = gt->ne[0], rows = gt->ne[1];
    const uint64_t kvl = k ? rows : cols;
    CHECK_MSG(t && t->n_dims == 2 && heads > 0 && (uint64_t)t->shape[1] == kvl &&
                  t->shape[0] % (int64_t)heads == 0,
              "%s: %s has no kv_b_proj [heads * (nope + v), %llu]", what, gt->name,
              (unsigned long long)kvl);
    if (!t || t->n_dims != 2 || !heads || (uint64_t)t->shape[1] != kvl ||
        t->shape[0] % (int64_t)heads)
        return true;
    const uint64_t per = (uint64_t)t->shape[0] / heads, nope = k ? cols : per - rows;
    float *kv = malloc(sizeof(float) * (size_t)t->n_elements);
    if (t->dtype == HM_ST_F8_E4M3)
        CHECK_MSG(widen_fp8(st, t, kv), "%s: %s has no F32 scales", what, t->name);
    else
        widen(t, 0, kv, (size_t)t->n_elements);
    *dt = t->dtype;
    for (uint64_t h = 0; h < heads; h++)
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t c = 0; c < cols; c++)
                want[(h * rows + r) * cols + c] =
                    k ? kv[(h * per + c) * kvl + r] : kv[(h * per + nope + r) * kvl + c];
    free(kv);
    return true;
}

typedef struct want_types {
    int dense, experts; /* hm_type or HM_CONVERT_KEEP */
} want_types;

/* Type the brief and llama.cpp give a tensor: F32 for norms, routers and 1-D tensors; otherwise the
 * requested type (the source's when kept), with llama.cpp's fallback for partial blocks. */
static uint32_t expected_type(const hm_gguf_tensor *g, const want_types *wt, hm_st_dtype src) {
    if (g->n_dims == 1 || strstr(g->name, "ffn_gate_inp")) return HM_TYPE_F32;
    int t = strstr(g->name, "_exps") ? wt->experts : wt->dense;
    if (t == HM_CONVERT_KEEP) return (uint32_t)st_type(src);
    return hm_type_for_row((uint32_t)t, g->ne[0]);
}

/* Compares every tensor of the GGUF with the safetensors at hf_dir. */
static void check_tensors(const char *what, const hm_gguf *g, const char *hf_dir,
                          const want_types *wt, hm_arch arch) {
    hm_safetensors *st;
    hm_status s = hm_st_open(hf_dir, &st);
    CHECK_OK(s);
    if (s != HM_OK) return;
    for (uint64_t k = 0; k < hm_gguf_n_tensors(g); k++) {
        const hm_gguf_tensor *gt = hm_gguf_tensor_at(g, k);
        uint64_t cols = gt->ne[0], rows = gt->ne[1], slabs = gt->ne[2];
        size_t n = (size_t)(cols * rows * slabs);
        float *want = malloc(n * sizeof(float));
        uint8_t *filled = calloc(slabs, 1);
        hm_st_dtype src_dt = HM_ST_F32;
        const bool split = kv_b_split(what, st, gt, want, &src_dt);
        if (split) memset(filled, 1, slabs);
        for (size_t i = 0; i < hm_st_n_tensors(st) && !split; i++) {
            const hm_st_tensor *t = hm_st_tensor_at(st, i);
            char name[96];
            int e, parts;
            if (!hf_to_gguf(t->name, name, sizeof name, &e, &parts)) continue;
            uint64_t part = 0;
            if (parts == 2) { /* gate_up: each expert's gate rows, then its up rows */
                char *p = strstr(name, "gate_up");
                if (!p) continue;
                bool up = strstr(gt->name, "ffn_up_exps") != NULL;
                memmove(p + (up ? 2 : 4), p + 7, strlen(p + 7) + 1);
                memcpy(p, up ? "up" : "gate", up ? 2 : 4);
                part = up;
            }
            if (strcmp(name, gt->name) != 0) continue;
            src_dt = t->dtype;
            if (parts) {
                CHECK_MSG(t->n_elements == (uint64_t)parts * rows * cols * slabs,
                          "%s: %s does not fit %s", what, t->name, gt->name);
                if (t->n_elements != (uint64_t)parts * rows * cols * slabs) continue;
                for (uint64_t x = 0; x < slabs; x++) {
                    widen(t, (size_t)((x * (uint64_t)parts + part) * rows * cols),
                          want + x * rows * cols, (size_t)(rows * cols));
                    filled[x]++;
                }
            } else {
                uint64_t x = e < 0 ? 0 : (uint64_t)e;
                CHECK_MSG(x < slabs && t->n_elements == rows * cols, "%s: %s does not fit %s", what,
                          t->name, gt->name);
                if (x >= slabs || t->n_elements != rows * cols) continue;
                if (t->dtype == HM_ST_F8_E4M3)
                    CHECK_MSG(widen_fp8(st, t, want + x * rows * cols), "%s: %s has no F32 scales",
                              what, t->name);
                else
                    widen(t, 0, want + x * rows * cols, (size_t)(rows * cols));
                filled[x]++;
            }
        }
        for (uint64_t x = 0; x < slabs; x++)
            CHECK_MSG(filled[x] == 1, "%s: %s slab %llu has %u sources", what, gt->name,
                      (unsigned long long)x, filled[x]);
        /* llama.cpp LlamaModel.permute: each head's rows [2][hd/2] -> [hd/2][2] */
        bool perm = arch == HM_ARCH_MIXTRAL &&
                    (strstr(gt->name, "attn_q.weight") || strstr(gt->name, "attn_k.weight"));
        if (perm) {
            uint64_t heads = strstr(gt->name, "attn_q") ? NH : NKV, hd = rows / heads;
            float *tmp = malloc(n * sizeof(float));
            for (uint64_t h = 0; h < heads; h++)
                for (uint64_t half = 0; half < 2; half++)
                    for (uint64_t i = 0; i < hd / 2; i++)
                        memcpy(tmp + ((h * hd) + i * 2 + half) * cols,
                               want + ((h * hd) + half * (hd / 2) + i) * cols,
                               cols * sizeof(float));
            free(want);
            want = tmp;
        }
        uint32_t type = expected_type(gt, wt, src_dt);
        CHECK_MSG(gt->type == type, "%s: %s is %s, want %s", what, gt->name, hm_type_name(gt->type),
                  hm_type_name(type));
        uint64_t row_bytes = 0;
        hm_type_row_bytes(type, cols, &row_bytes);
        uint8_t *bytes = malloc(row_bytes * rows * slabs + 1);
        for (uint64_t r = 0; r < rows * slabs; r++) {
            const float *x = want + r * cols;
            uint8_t *out = bytes + r * row_bytes;
            for (uint64_t c = 0; c < cols && (type == HM_TYPE_F16 || type == HM_TYPE_BF16); c++) {
                uint16_t h = type == HM_TYPE_F16 ? hm_f32_to_f16(x[c]) : hm_f32_to_bf16(x[c]);
                memcpy(out + 2 * c, &h, 2);
            }
            if (type == HM_TYPE_F32) memcpy(out, x, cols * 4);
            if (type != HM_TYPE_F32 && type != HM_TYPE_F16 && type != HM_TYPE_BF16)
                CHECK_OK(hm_quantize_row(type, x, out, (int64_t)cols));
        }
        CHECK_MSG(gt->bytes == row_bytes * rows * slabs &&
                      memcmp(gt->data, bytes, (size_t)gt->bytes) == 0,
                  "%s: %s (%s) differs from its source", what, gt->name, hm_type_name(gt->type));
        free(bytes);
        free(want);
        free(filled);
    }
    hm_st_close(st);
}

/* Hyper-parameters the forward pass uses, from config.json and back from the GGUF. */
static void check_hparams(const char *what, const hm_gguf *g, const char *hf_dir) {
    hm_hparams a, b;
    CHECK_OK(hm_hparams_from_hf_config(hf_dir, &a));
    CHECK_OK(hm_hparams_from_gguf(g, &b));
    check_same_hparams(what, &a, &b, true);
}

static bool file_exists(const char *p) {
    return access(p, F_OK) == 0;
}

/* Converts hf_dir with the given types, checks tensors and hparams; returns the gguf path. */
static const char *convert_check(const char *what, const char *hf_dir, const want_types *wt,
                                 hm_arch arch, const char *out_name) {
    static char out[256];
    snprintf(out, sizeof out, "%s/%s", g_tmp, out_name ? out_name : "out.gguf");
    hm_convert_params p = hm_convert_default_params();
    p.type = wt->dense;
    p.experts_type = wt->experts;
    p.n_threads = 2;
    hm_convert_stats stats;
    hm_status s = hm_convert_hf(hf_dir, out, &p, &stats);
    CHECK_MSG(s == HM_OK, "%s: %s", what, hm_last_error());
    if (s != HM_OK) return out;
    char part[300];
    snprintf(part, sizeof part, "%s.part", out);
    CHECK(!file_exists(part));
    hm_gguf *g;
    CHECK_OK(hm_gguf_open(out, &g));
    if (!g) return out;
    hm_safetensors *st;
    CHECK_OK(hm_st_open(hf_dir, &st));
    check_tensors(what, g, hf_dir, wt, arch);
    CHECK(stats.n_tensors == hm_gguf_n_tensors(g));
    size_t skipped = 0; /* not weights: inv_freq buffers, lm_head copies of tied embeddings */
    for (size_t i = 0; i < hm_st_n_tensors(st); i++) {
        const char *nm = hm_st_tensor_at(st, i)->name;
        skipped += strstr(nm, "rotary_emb.inv_freq") ||
                   (stats.hp.tie_embeddings && !strcmp(nm, "lm_head.weight"));
    }
    CHECK_MSG(stats.n_source_tensors + skipped == hm_st_n_tensors(st), "%s: %zu of %zu sources",
              what, stats.n_source_tensors, hm_st_n_tensors(st));
    uint64_t sum = 0, total = 0;
    for (int c = 0; c < HM_CAT_COUNT; c++) sum += stats.cat_bytes[c];
    for (uint64_t k = 0; k < hm_gguf_n_tensors(g); k++) total += hm_gguf_tensor_at(g, k)->bytes;
    CHECK(sum == stats.total_bytes && total == stats.total_bytes);
    check_hparams(what, g, hf_dir);
    hm_st_close(st);
    hm_gguf_close(g);
    return out;
}

static char *slurp(const char *path, size_t *n) {
    return test_read_file(path, n);
}

static bool same_file(const char *a, const char *b) {
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* ---------------------------------------------------------------- cases */

static const want_types k_keep = {HM_CONVERT_KEEP, HM_CONVERT_KEEP};

static void test_round_trips(void) {
    opts o = {.arch = HM_ARCH_QWEN3MOE, .dtype = "F32", .mlp_only = "[1]"};
    const char *dir = make_model(&o);
    convert_check("f32 keep", dir, &k_keep, o.arch, "f32.gguf");
    want_types f32 = {HM_TYPE_F32, HM_TYPE_F32};
    const char *out = convert_check("f32 -> f32", dir, &f32, o.arch, "f32b.gguf");
    char a[256];
    snprintf(a, sizeof a, "%s/f32.gguf", g_tmp);
    CHECK(same_file(a, out));

    /* default parameters (NULL) keep the dtype: the same file */
    snprintf(a, sizeof a, "%s/null.gguf", g_tmp);
    CHECK_OK(hm_convert_hf(dir, a, NULL, NULL));
    CHECK(same_file(a, out));

    want_types q8 = {HM_TYPE_Q8_0, HM_TYPE_Q8_0};
    convert_check("f32 -> q8_0", dir, &q8, o.arch, "q8.gguf");
    want_types mix = {HM_TYPE_Q8_0, HM_TYPE_Q4_K}; /* Q4_K rows of 64 / 32: Q5_0 fallback */
    convert_check("f32 -> q8_0 + q4_k experts", dir, &mix, o.arch, "mix.gguf");
    want_types k6 = {HM_TYPE_Q6_K, HM_TYPE_IQ4_XS};
    convert_check("f32 -> q6_k + iq4_xs", dir, &k6, o.arch, "k6.gguf");
    want_types half = {HM_TYPE_F16, HM_TYPE_BF16};
    convert_check("f32 -> f16 + bf16 experts", dir, &half, o.arch, "half.gguf");
    want_types keep_q = {HM_CONVERT_KEEP, HM_TYPE_Q8_0};
    convert_check("keep + q8_0 experts", dir, &keep_q, o.arch, "keepq.gguf");

    /* q8_0: no tensor left in F32 except the small ones */
    snprintf(a, sizeof a, "%s/q8.gguf", g_tmp);
    hm_gguf *g;
    CHECK_OK(hm_gguf_open(a, &g));
    if (g) {
        const hm_gguf_tensor *t = hm_gguf_find_tensor(g, "blk.0.ffn_gate_exps.weight");
        CHECK(t && t->type == HM_TYPE_Q8_0 && t->n_dims == 3 && t->ne[0] == H && t->ne[1] == MI &&
              t->ne[2] == E);
        t = hm_gguf_find_tensor(g, "blk.1.ffn_down.weight"); /* 48 columns: F16 fallback */
        CHECK(t && t->type == HM_TYPE_F16 && t->ne[0] == FI && t->ne[1] == H);
        CHECK(hm_gguf_find_tensor(g, "blk.1.ffn_gate_inp.weight") == NULL);
        t = hm_gguf_find_tensor(g, "blk.0.ffn_gate_inp.weight");
        CHECK(t && t->type == HM_TYPE_F32);
        t = hm_gguf_find_tensor(g, "token_embd.weight");
        CHECK(t && t->type == HM_TYPE_Q8_0);
        hm_gguf_close(g);
    }

    o = (opts){.arch = HM_ARCH_QWEN3MOE, .dtype = "BF16", .tie = true};
    dir = make_model(&o);
    convert_check("bf16 keep, tied", dir, &k_keep, o.arch, NULL);
    convert_check("bf16 -> q8_0, tied", dir, &(want_types){HM_TYPE_Q8_0, HM_TYPE_Q5_K}, o.arch,
                  NULL);
    convert_check("bf16 -> f32", dir, &(want_types){HM_TYPE_F32, HM_TYPE_F32}, o.arch, NULL);

    o = (opts){.arch = HM_ARCH_QWEN3MOE, .dtype = "F16", .sparse_step = 2, .norm_topk_off = true};
    dir = make_model(&o);
    convert_check("f16 keep, sparse step 2, no top-k norm", dir, &k_keep, o.arch, NULL);
    convert_check("f16 -> bf16", dir, &(want_types){HM_TYPE_BF16, HM_TYPE_BF16}, o.arch, NULL);
    snprintf(a, sizeof a, "%s/out.gguf", g_tmp);
    CHECK_OK(hm_gguf_open(a, &g));
    if (g) {
        bool norm = true;
        CHECK_OK(hm_gguf_get_bool(g, "qwen3moe.expert_weights_norm", &norm));
        CHECK(!norm);
        CHECK(hm_gguf_find_tensor(g, "blk.0.ffn_gate.weight") != NULL);
        CHECK(hm_gguf_find_tensor(g, "blk.1.ffn_gate_exps.weight") != NULL);
        hm_gguf_close(g);
    }
}

/* Logits of ids 1 2 3 with the model in dir (HF directory), or NULL. malloc'd [3][V]. */
static float *model_logits(const char *dir) {
    hm_model *m = NULL;
    hm_ctx *c = NULL;
    float *lg = malloc(sizeof(float) * 3 * V);
    hm_ctx_params cp = hm_ctx_default_params();
    cp.n_threads = 1, cp.n_ctx = 8, cp.n_batch = 8;
    const int32_t ids[3] = {1, 2, 3};
    bool ok = hm_model_load(dir, &m) == HM_OK && hm_ctx_create(m, &cp, &c) == HM_OK &&
              hm_ctx_decode(c, ids, NULL, 3, NULL, lg) == HM_OK;
    CHECK_MSG(ok, "%s: %s", dir, hm_last_error());
    hm_ctx_free(c);
    hm_model_free(m);
    if (!ok) free(lg);
    return ok ? lg : NULL;
}

/* Sharded and transformers-5 fused layouts give the very same file as one plain file. */
static void test_layouts(void) {
    opts o = {.arch = HM_ARCH_QWEN3MOE, .dtype = "BF16", .mlp_only = "[2]"};
    want_types q8 = {HM_TYPE_Q8_0, HM_TYPE_Q8_0};
    const char *dir = make_model(&o);
    char plain[256], plain_q[256];
    snprintf(plain, sizeof plain, "%s/plain.gguf", g_tmp);
    snprintf(plain_q, sizeof plain_q, "%s/plain_q.gguf", g_tmp);
    convert_check("plain", dir, &k_keep, o.arch, "plain.gguf");
    convert_check("plain q8", dir, &q8, o.arch, "plain_q.gguf");

    o.shards = 2;
    dir = make_model(&o);
    CHECK(same_file(plain, convert_check("sharded", dir, &k_keep, o.arch, "sharded.gguf")));

    o.shards = 0;
    o.fused = true;
    dir = make_model(&o);
    char fused_gguf[256]; /* convert_check's result is a static buffer */
    snprintf(fused_gguf, sizeof fused_gguf, "%s",
             convert_check("fused", dir, &k_keep, o.arch, "fused.gguf"));
    convert_check("fused q8", dir, &q8, o.arch, "fused_q.gguf");
    /* the loader reads the fused layout straight from the HF directory: the same logits as the
     * GGUF the converter (checked tensor by tensor above) made of it */
    float *want = model_logits(fused_gguf), *got = model_logits(dir);
    CHECK_MSG(want && got && !memcmp(want, got, sizeof(float) * 3 * V),
              "fused HF experts give other logits than their GGUF");
    free(want), free(got);

    o = (opts){.arch = HM_ARCH_QWEN3MOE, .dtype = "F32", .inv_freq = true};
    dir = make_model(&o);
    hm_log_set_level(HM_LOG_ERROR); /* the skip is logged as a warning */
    convert_check("rotary_emb.inv_freq skipped", dir, &k_keep, o.arch, NULL);
    hm_log_set_level(HM_LOG_WARN);
    o = (opts){.arch = HM_ARCH_QWEN3MOE, .dtype = "F32", .tie = true, .lm_head_when_tied = 1};
    dir = make_model(&o);
    convert_check("tied lm_head copy skipped", dir, &k_keep, o.arch, NULL);
}

static void test_other_archs(void) {
    opts o = {.arch = HM_ARCH_QWEN2MOE, .dtype = "BF16", .mlp_only = "[0]"};
    const char *dir = make_model(&o);
    convert_check("qwen2moe keep", dir, &k_keep, o.arch, NULL);
    convert_check("qwen2moe q8_0", dir, &(want_types){HM_TYPE_Q8_0, HM_TYPE_Q4_0}, o.arch, NULL);

    o = (opts){.arch = HM_ARCH_MIXTRAL, .dtype = "F32"};
    dir = make_model(&o);
    convert_check("mixtral keep", dir, &k_keep, o.arch, NULL);
    convert_check("mixtral q8_0", dir, &(want_types){HM_TYPE_Q8_0, HM_TYPE_Q8_0}, o.arch, NULL);
}

/* A conversion that must fail with `want`, a message holding every needle, and no file left. */
static void expect_fail(const char *what, const opts *o, const want_types *wt, hm_status want,
                        const char *n1, const char *n2, const char *n3) {
    const char *dir = make_model(o);
    char out[256], part[300];
    snprintf(out, sizeof out, "%s/bad.gguf", g_tmp);
    snprintf(part, sizeof part, "%s.part", out);
    hm_convert_params p = hm_convert_default_params();
    p.type = wt->dense;
    p.experts_type = wt->experts;
    hm_status s = hm_convert_hf(dir, out, &p, NULL);
    CHECK_MSG(s == want, "%s: got %s (%s), want %s", what, hm_status_str(s), hm_last_error(),
              hm_status_str(want));
    const char *msg = hm_last_error();
    if (g_verbose) printf("  %s: %s\n", what, msg);
    if (n1) CHECK_CONTAINS(msg, n1);
    if (n2) CHECK_CONTAINS(msg, n2);
    if (n3) CHECK_CONTAINS(msg, n3);
    CHECK_MSG(!file_exists(out) && !file_exists(part), "%s: output left behind", what);
    unlink(out);
}

static void test_errors(void) {
    hm_log_set_level(HM_LOG_OFF);
    opts o = {.arch = HM_ARCH_QWEN3MOE, .dtype = "F32"};
    o.drop = "model.layers.1.mlp.experts.2.up_proj.weight";
    expect_fail("missing expert", &o, &k_keep, HM_ERR_FORMAT, "missing 1 tensor",
                "'model.layers.1.mlp.experts.2.up_proj.weight'", NULL);
    o.drop = "model.layers.0.self_attn.k_norm.weight";
    expect_fail("missing norm", &o, &k_keep, HM_ERR_FORMAT,
                "model.layers.0.self_attn.k_norm.weight", NULL, NULL);
    o.drop = NULL;
    o.misshape = "model.layers.2.self_attn.q_proj.weight";
    expect_fail("wrong shape", &o, &k_keep, HM_ERR_FORMAT,
                "'model.layers.2.self_attn.q_proj.weight'", "[64, 65]", "expected [64, 64]");
    o.misshape = "model.layers.0.mlp.experts.3.down_proj.weight";
    expect_fail("wrong expert shape", &o, &k_keep, HM_ERR_FORMAT,
                "'model.layers.0.mlp.experts.3.down_proj.weight'", "blk.0.ffn_down_exps.weight",
                "expected [64, 32]");
    o.misshape = NULL;
    o.extra = "model.layers.0.mlp.mystery.weight";
    expect_fail("extra tensor", &o, &k_keep, HM_ERR_FORMAT, "unexpected 1 tensor",
                "'model.layers.0.mlp.mystery.weight'", NULL);
    o.drop = "model.layers.0.input_layernorm.weight";
    expect_fail("missing and extra", &o, &k_keep, HM_ERR_FORMAT,
                "'model.layers.0.input_layernorm.weight'", "'model.layers.0.mlp.mystery.weight'",
                NULL);
    o.drop = o.extra = NULL;
    o.odd_name = "model.layers.1.mlp.gate.weight";
    o.odd_dtype = "I32";
    expect_fail("I32 tensor", &o, &k_keep, HM_ERR_UNSUPPORTED, "'model.layers.1.mlp.gate.weight'",
                "I32", NULL);
    o.odd_name = "model.layers.1.self_attn.o_proj.weight";
    o.odd_dtype = "F8_E4M3";
    expect_fail("FP8 tensor", &o, &k_keep, HM_ERR_UNSUPPORTED,
                "'model.layers.1.self_attn.o_proj.weight'", "FP8", NULL);
    { /* the loader binds FP8 weights, but only with their 128 x 128 block scales */
        hm_model *m = NULL;
        CHECK_STATUS(hm_model_load(make_model(&o), &m), HM_ERR_UNSUPPORTED);
        CHECK_CONTAINS(hm_last_error(), "'model.layers.1.self_attn.o_proj.weight_scale_inv'");
        CHECK(m == NULL);
    }
    o.odd_name = NULL;
    o.nan_name = "model.layers.1.mlp.experts.1.gate_proj.weight";
    expect_fail("NaN when quantizing", &o, &(want_types){HM_TYPE_Q8_0, HM_TYPE_Q8_0},
                HM_ERR_INVALID_ARG, "blk.1.ffn_gate_exps.weight",
                "'model.layers.1.mlp.experts.1.gate_proj.weight'", "expert 1, row 0");
    o.nan_name = NULL;
    o.tie = true;
    o.lm_head_when_tied = 2;
    expect_fail("tied but lm_head differs", &o, &k_keep, HM_ERR_FORMAT, "'lm_head.weight'",
                "tie_word_embeddings", NULL);
    o = (opts){.arch = HM_ARCH_QWEN3MOE, .dtype = "F32", .fused = true};
    o.misshape = "model.layers.0.mlp.experts.gate_up_proj";
    expect_fail("wrong fused shape", &o, &k_keep, HM_ERR_FORMAT,
                "'model.layers.0.mlp.experts.gate_up_proj'", "expected [4, 64, 64]", NULL);

    /* bad parameters, unsupported architecture, no such directory */
    o = (opts){.arch = HM_ARCH_QWEN3MOE, .dtype = "F32"};
    const char *dir = make_model(&o);
    char out[256];
    snprintf(out, sizeof out, "%s/never.gguf", g_tmp);
    hm_convert_params p = hm_convert_default_params();
    p.type = HM_TYPE_Q2_K;
    CHECK_STATUS(hm_convert_hf(dir, out, &p, NULL), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "Q2_K");
    p.type = HM_CONVERT_KEEP;
    p.experts_type = HM_TYPE_IQ2_XS;
    CHECK_STATUS(hm_convert_hf(dir, out, &p, NULL), HM_ERR_INVALID_ARG);
    CHECK(!file_exists(out));
    char cfg[256];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    size_t n;
    char *gc = slurp(HMOE_SOURCE_DIR "/tests/data/model_configs/gpt-oss-20b/config.json", &n);
    CHECK(gc != NULL);
    if (gc) write_bytes(cfg, gc, n);
    free(gc);
    /* gpt-oss converts (test_gptoss): a config of it over qwen3_moe tensors fails on them */
    CHECK_STATUS(hm_convert_hf(dir, out, NULL, NULL), HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "'model.embed_tokens.weight'");
    CHECK_CONTAINS(hm_last_error(), "expected [201088, 2880]");
    CHECK_STATUS(hm_convert_hf("/nonexistent/model", out, NULL, NULL), HM_ERR_NOT_FOUND);
    CHECK(!file_exists(out));
    hm_log_set_level(HM_LOG_WARN);
}

/* ---------------------------------------------------------------- the command */

static int run(const char *cmd) {
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_cli(void) {
    opts o = {.arch = HM_ARCH_QWEN3MOE, .dtype = "BF16", .mlp_only = "[1]"};
    const char *dir = make_model(&o);
    char cmd[1024], out[256], log[256];
    snprintf(out, sizeof out, "%s/cli.gguf", g_tmp);
    snprintf(log, sizeof log, "%s/cli.log", g_tmp);
    snprintf(cmd, sizeof cmd,
             "%s convert %s -o %s --type q8_0 --experts-type q4_k --threads 2 >%s 2>&1",
             HMOE_BINARY, dir, out, log);
    CHECK(run(cmd) == 0);
    char *text = slurp(log, NULL);
    CHECK(text != NULL);
    if (text) {
        CHECK_CONTAINS(text, "routed experts");
        CHECK_CONTAINS(text, "dense mlp");
        CHECK_CONTAINS(text, "Q5_0"); /* Q4_K's fallback for 64- and 32-column rows */
        CHECK_CONTAINS(text, "total");
    }
    free(text);
    hm_gguf *g;
    CHECK_OK(hm_gguf_open(out, &g));
    if (g) {
        check_tensors("cli", g, dir, &(want_types){HM_TYPE_Q8_0, HM_TYPE_Q4_K}, o.arch);
        check_hparams("cli", g, dir);
        /* no tokenizer converted: llama.cpp needs the key to say so */
        hm_gguf_str s = {0};
        CHECK_OK(hm_gguf_get_str(g, "tokenizer.ggml.model", &s));
        CHECK(hm_gguf_str_eq(s, "no_vocab"));
        hm_gguf_close(g);
    }
    /* and we run it: ids only, the missing vocabulary named */
    snprintf(cmd, sizeof cmd, "%s run -m %s --ids \"1 2\" -n 2 --threads 2 >%s 2>&1", HMOE_BINARY,
             out, log);
    CHECK(run(cmd) == 0);
    text = slurp(log, NULL);
    if (text) {
        CHECK_CONTAINS(text, "printing ids only");
        CHECK_CONTAINS(text, "ids: ");
        CHECK_CONTAINS(text, "no tokenizer"); /* not "no_vocab is not supported" */
    }
    free(text);
    unlink(out);

    /* -o through a symlink: the target is written, the link stays a link */
    char target[256], link[256];
    snprintf(target, sizeof target, "%s/cli-target.gguf", g_tmp);
    snprintf(link, sizeof link, "%s/cli-link.gguf", g_tmp);
    CHECK(symlink(target, link) == 0 || errno == EEXIST);
    FILE *tf = fopen(target, "wb");
    if (tf) fclose(tf);
    snprintf(cmd, sizeof cmd, "%s convert %s -o %s --threads 2 >%s 2>&1", HMOE_BINARY, dir, link,
             log);
    CHECK(run(cmd) == 0);
    struct stat lsb;
    CHECK(lstat(link, &lsb) == 0 && S_ISLNK(lsb.st_mode));
    CHECK(hm_gguf_open(target, &g) == HM_OK);
    hm_gguf_close(g);
    text = slurp(log, NULL);
    if (text) CHECK_CONTAINS(text, "/cli-target.gguf (through the symlink ");
    free(text);
    /* -o /dev/full: the write fails, the device stays */
    snprintf(cmd, sizeof cmd, "%s convert %s -o /dev/full --threads 2 >%s 2>&1", HMOE_BINARY, dir,
             log);
    CHECK(run(cmd) == 1);
    text = slurp(log, NULL);
    if (text) CHECK_CONTAINS(text, "/dev/full: write failed: No space left on device");
    free(text);
    CHECK(stat("/dev/full", &lsb) == 0 && S_ISCHR(lsb.st_mode));
    unlink(link);
    unlink(target);

    static const char *const bad[] = {
        "",                         /* no HF_DIR */
        "%s",                       /* no -o */
        "%s -o x.gguf --type q2_k", /* no quantizer */
        "%s -o x.gguf --type nope", /* unknown */
        "%s -o x.gguf --threads 0", /* range */
        "%s -o x.gguf --bogus",     /* unknown option */
        "%s %s -o x.gguf",          /* two inputs */
        "%s -o",                    /* missing value */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, bad[i], dir, dir);
        snprintf(cmd, sizeof cmd, "cd %s && %s convert %s >%s 2>&1", g_tmp, HMOE_BINARY, args, log);
        CHECK_MSG(run(cmd) == 2, "usage error %zu: %s", i, args);
        text = slurp(log, NULL);
        if (text) CHECK_CONTAINS(text, "usage: hmoe convert");
        free(text);
    }
    snprintf(cmd, sizeof cmd, "%s convert --help >%s 2>&1", HMOE_BINARY, log);
    CHECK(run(cmd) == 0);
    text = slurp(log, NULL);
    if (text) CHECK_CONTAINS(text, "tokenizer");
    free(text);

    snprintf(cmd, sizeof cmd, "%s convert %s -o %s --dry-run >%s 2>&1", HMOE_BINARY, dir, out, log);
    CHECK(run(cmd) == 0);
    CHECK(!file_exists(out));
    text = slurp(log, NULL);
    if (text) CHECK_CONTAINS(text, "would convert");
    free(text);

    o.drop = "model.layers.2.mlp.gate.weight";
    dir = make_model(&o);
    snprintf(cmd, sizeof cmd, "%s convert %s -o %s >%s 2>&1", HMOE_BINARY, dir, out, log);
    CHECK(run(cmd) == 1);
    CHECK(!file_exists(out));
    text = slurp(log, NULL);
    if (text) CHECK_CONTAINS(text, "'model.layers.2.mlp.gate.weight'");
    free(text);
}

/* ---------------------------------------------------------------- transformers' checkpoints */

/* The forward pass (`hmoe logits`, where this build has it) gives the same logits, bit for bit,
 * from the converted GGUF as from the Hugging Face directory: the conversion lost nothing. */
/* Sum over n positions of KL(softmax(p) || softmax(q)) for logits rows of nv values; *same
 * counts the positions whose argmax agrees. */
static double kl_total(const float *pl, const float *ql, size_t n, size_t nv, size_t *same) {
    double sum = 0;
    *same = 0;
    for (size_t t = 0; t < n; t++) {
        const float *p = pl + t * nv, *q = ql + t * nv;
        double mp = p[0], mq = q[0], zp = 0, zq = 0, kl = 0;
        size_t ap = 0, aq = 0;
        for (size_t v = 1; v < nv; v++) {
            if (p[v] > mp) mp = p[v], ap = v;
            if (q[v] > mq) mq = q[v], aq = v;
        }
        for (size_t v = 0; v < nv; v++) zp += exp(p[v] - mp), zq += exp(q[v] - mq);
        for (size_t v = 0; v < nv; v++) {
            const double lp = p[v] - mp - log(zp), lq = q[v] - mq - log(zq);
            kl += exp(lp) * (lp - lq);
        }
        sum += kl;
        *same += ap == aq;
    }
    return sum;
}

/* The logits of the HF directory and of its GGUF: identical, or (tol > 0: FP8 weights written as
 * BF16) a mean KL of at most tol with 90% of the argmaxes equal */
static void check_logits(const char *what, const char *hf_dir, const char *gguf_path, double tol) {
    char cmd[2048], log[256], a[256], b[256], exp[600];
    snprintf(log, sizeof log, "%s/logits.log", g_tmp);
    snprintf(cmd, sizeof cmd, "%s logits >%s 2>&1", HMOE_BINARY, log);
    run(cmd);
    char *text = slurp(log, NULL);
    bool have = text && strstr(text, "usage: hmoe logits");
    free(text);
    if (!have) return;
    snprintf(exp, sizeof exp, "%s/expected.json", hf_dir);
    json_t *j = json_load_file(exp, 0, NULL);
    json_t *prompts = json_object_get(j, "prompts");
    json_t *ids = json_array_get(prompts, json_array_size(prompts) - 1);
    const json_int_t vocab = json_integer_value(json_object_get(j, "vocab"));
    char list[1024] = "";
    size_t len = 0;
    for (size_t i = 0; i < json_array_size(ids) && len + 16 < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%lld", i ? " " : "",
                                (long long)json_integer_value(json_array_get(ids, i)));
    json_decref(j);
    if (!len) return;
    snprintf(a, sizeof a, "%s/logits_hf.f32", g_tmp);
    snprintf(b, sizeof b, "%s/logits_gguf.f32", g_tmp);
    const char *models[2][2] = {{hf_dir, a}, {gguf_path, b}};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s logits -m %s --ids \"%s\" --out %s --threads 2 >%s 2>&1",
                 HMOE_BINARY, models[k][0], list, models[k][1], log);
        CHECK_MSG(run(cmd) == 0, "%s: hmoe logits -m %s failed", what, models[k][0]);
    }
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    if (tol > 0 && x && y && na == nb && na > 0) {
        /* per position: KL(hf || gguf) of the softmax; a near-tied expert choice that flips
         * changes one position a lot, so the bound is on the mean, with most argmaxes equal */
        const size_t nv = (size_t)vocab, n = nv ? na / 4 / nv : 0;
        size_t same = 0;
        const double kl_sum = kl_total((const float *)x, (const float *)y, n, nv, &same);
        const double km = n ? kl_sum / (double)n : 1e9;
        CHECK_MSG(n > 0 && km <= tol && same * 10 >= n * 9,
                  "%s: GGUF vs Hugging Face logits: KL mean %.3g (bound %.0e), argmax equal at "
                  "%zu of %zu positions",
                  what, km, tol, same, n);
        if (g_verbose)
            printf("  %s: KL mean %.3g, argmax equal at %zu of %zu positions\n", what, km, same, n);
    } else {
        CHECK_MSG(x && y && na == nb && na > 0 && memcmp(x, y, na) == 0,
                  "%s: logits from the GGUF differ from the Hugging Face directory's", what);
        if (g_verbose && x && y && na == nb) printf("  %s: %zu logits identical\n", what, na / 4);
    }
    free(x);
    free(y);
    unlink(a);
    unlink(b);
}

static int convert_fixtures(const char *sub, hm_arch arch) {
    char root[256];
    snprintf(root, sizeof root, "%s/tests/data/%s", HMOE_SOURCE_DIR, sub);
    DIR *d = opendir(root);
    if (!d) {
        printf("test_convert: no %s, real checkpoints not checked\n", root);
        return 0;
    }
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        char dir[512], cfg[600];
        snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        if (e->d_name[0] == '.' || !file_exists(cfg)) continue;
        char what[600];
        snprintf(what, sizeof what, "fixture %s/%s", sub, e->d_name);
        const char *out = convert_check(what, dir, &k_keep, arch, "fixture.gguf");
        /* FP8 weights become BF16 (fp8 * scale rounded to 8 bits): close, not identical
         * (measured on q_fp8's 23-token prompt: KL mean 1.8e-3, 22 of 23 argmaxes equal) */
        check_logits(what, dir, out, strstr(e->d_name, "fp8") ? 5e-3 : 0);
        snprintf(what, sizeof what, "fixture %s/%s q8_0", sub, e->d_name);
        convert_check(what, dir, &(want_types){HM_TYPE_Q8_0, HM_TYPE_Q4_K}, arch, "fixture_q.gguf");
        n++;
    }
    closedir(d);
    return n;
}

/* gpt-oss as released (tests/data/gptoss/hf: MXFP4 experts in blocks and scales): the GGUF reads
 * back to config.json's hyper-parameters; its experts are MXFP4, byte for byte the blocks the
 * loader repacks from the directory (the bytes themselves against the source: convert_python);
 * the logits of the GGUF and of the directory are identical. --type leaves MXFP4 experts alone;
 * --experts-type converts their values. */
static void test_gptoss(void) {
    const char *dir = HMOE_SOURCE_DIR "/tests/data/gptoss/hf";
    char out[256];
    snprintf(out, sizeof out, "%s/gptoss.gguf", g_tmp);
    hm_convert_params p = hm_convert_default_params();
    p.n_threads = 2;
    hm_convert_stats stats;
    CHECK_OK(hm_convert_hf(dir, out, &p, &stats));
    CHECK(stats.cat_types[HM_CAT_ROUTED][HM_TYPE_MXFP4] == 6 &&
          stats.cat_types[HM_CAT_ROUTED][HM_TYPE_F32] == 6); /* weights, and their biases */
    hm_gguf *g = NULL;
    hm_model *m = NULL;
    CHECK_OK(hm_gguf_open(out, &g));
    CHECK_OK(hm_model_load(dir, &m));
    if (g && m) {
        check_hparams("gpt-oss", g, dir);
        const char *proj[3] = {"gate", "up", "down"};
        for (uint32_t il = 0; il < m->hp.n_layers; il++)
            for (int k = 0; k < 3; k++) {
                char name[64];
                snprintf(name, sizeof name, "blk.%u.ffn_%s_exps.weight", il, proj[k]);
                const hm_gguf_tensor *t = hm_gguf_find_tensor(g, name);
                CHECK_MSG(t && t->type == HM_TYPE_MXFP4, "%s: not MXFP4", name);
                if (!t || t->type != HM_TYPE_MXFP4) continue;
                const uint64_t slab = t->bytes / m->hp.n_experts;
                for (uint32_t e = 0; e < m->hp.n_experts; e++) {
                    const hm_moe_expert *x = &m->layers[il].experts[e];
                    const hm_moe_matrix *w = k == 0 ? &x->gate : k == 1 ? &x->up : &x->down;
                    CHECK_MSG(w->row_bytes * t->ne[1] == slab &&
                                  memcmp(w->data, t->data + e * slab, slab) == 0,
                              "%s expert %u: GGUF bytes differ from the loader's", name, e);
                }
            }
    }
    hm_model_free(m);
    hm_gguf_close(g);
    check_logits("gpt-oss", dir, out, 0);

    p.type = HM_TYPE_Q8_0; /* the experts inherit it, but MXFP4 stays */
    CHECK_OK(hm_convert_hf(dir, out, &p, &stats));
    CHECK(stats.cat_types[HM_CAT_ROUTED][HM_TYPE_MXFP4] == 6);
    CHECK(stats.cat_types[HM_CAT_ATTN][HM_TYPE_Q8_0] == 8 &&
          stats.cat_types[HM_CAT_OUTPUT][HM_TYPE_Q8_0] == 1);
    p.type = HM_CONVERT_KEEP;
    p.experts_type = HM_TYPE_Q8_0; /* named: the MXFP4 values requantized */
    CHECK_OK(hm_convert_hf(dir, out, &p, &stats));
    CHECK(stats.cat_types[HM_CAT_ROUTED][HM_TYPE_MXFP4] == 0 &&
          stats.cat_types[HM_CAT_ROUTED][HM_TYPE_Q8_0] == 6);
    check_logits("gpt-oss, experts Q8_0", dir, out, 1e-3);
    unlink(out);
}

/* transformers' checkpoints: Qwen3-MoE (tests/gen/qwen3moe_fixtures.py) and DeepSeek-V2/V3
 * (deepseek_fixtures.py: MLA's kv_b_proj split into attn_k_b / attn_v_b) */
static void test_fixtures(void) {
    const int nq = convert_fixtures("qwen3moe", HM_ARCH_QWEN3MOE);
    const int nd = convert_fixtures("deepseek", HM_ARCH_DEEPSEEK2);
    printf("test_convert: %d transformers checkpoints converted (%d qwen3moe, %d deepseek)\n",
           nq + nd, nq, nd);
}

int main(void) {
    g_verbose = getenv("HMOE_TEST_VERBOSE") != NULL;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hmoe_convert_XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trips();
    test_layouts();
    test_other_archs();
    test_errors();
    test_cli();
    test_fixtures();
    test_gptoss();
    char hf[128];
    snprintf(hf, sizeof hf, "%s/hf", g_tmp);
    clear_dir(hf);
    rmdir(hf);
    clear_dir(g_tmp);
    rmdir(g_tmp);
    return test_done("test_convert");
}
