/* convert.c - Hugging Face safetensors -> GGUF with llama.cpp's names, shapes and metadata,
 * streamed a chunk of rows at a time and quantized by a thread pool. */
#include "model/convert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/log.h"
#include "core/pool.h"
#include "core/timer.h"
#include "format/gguf.h"
#include "model/arch/gptoss.h"
#include "model/arch/registry.h"
#include "format/safetensors.h"
#include "quant/fp16.h"
#include "model/names.h"
#include "quant/ref.h"

#define CHUNK_BYTES (16u << 20) /* output bytes converted per pool job (at least one row) */
#define LIST_MAX    4           /* names quoted in a missing / left-over error */
#define NAME_MAX_HF 192

/* ---------------------------------------------------------------- conversion plan */

typedef struct slab {
    const hm_st_tensor *src;
    /* where the slab starts: its first row in src seen as [rows, cols]; for a strided tensor the
     * source element of its (0, 0); for MXFP4 the packed source row of its row 0 */
    uint64_t row0;
    /* FP8 sources: the 128 x 128 block scales (weight_scale_inv); MXFP4: the E8M0 exponents */
    const hm_st_tensor *scale;
} slab;

typedef struct conv_tensor {
    const hm_tensor_spec *spec;
    uint32_t type;       /* output hm_type */
    uint64_t rows, cols; /* of one slab (rows = 1 for 1-D tensors) */
    uint64_t row_bytes;  /* output bytes of one row */
    uint32_t n_slabs;    /* 1, n_expert, or n_heads (MLA's k_b / v_b) */
    slab *slabs;         /* [n_slabs], expert (head) order */
    uint32_t perm_heads; /* > 0: rows permuted as llama.cpp's q/k (this many heads) */
    /* strided: element (r, c) of a slab is source element row0 + r * rs + c * cs (transposed
     * slabs: MLA's k_b, gpt-oss's float experts; gpt-oss's de-interleaved biases) */
    bool strided;
    uint64_t rs, cs;
    /* MXFP4 blocks and scales as released (gpt-oss): row r of a slab is packed source row
     * row0 + r * row_step, repacked into GGUF's blocks */
    bool mxfp4;
    uint64_t row_step;
    bool per_head; /* slabs are heads, not experts */
} conv_tensor;

typedef struct name_list {
    char names[LIST_MAX][NAME_MAX_HF];
    size_t n;
} name_list;

static void list_add(name_list *l, const char *name) {
    if (l->n < LIST_MAX) snprintf(l->names[l->n], sizeof l->names[0], "%s", name);
    l->n++;
}

static void list_fmt(const name_list *l, char *out, size_t cap) {
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < l->n && i < LIST_MAX && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s'%s'", i ? ", " : "", l->names[i]);
    if (l->n > LIST_MAX && len < cap)
        snprintf(out + len, cap - len, " and %zu more", l->n - LIST_MAX);
}

typedef struct conv {
    const char *path;
    hm_hparams hp;
    const hm_arch_names *names;
    hm_safetensors *st;
    hm_tensor_spec *specs;
    size_t n_specs;
    conv_tensor *t; /* [n_specs] */
    uint8_t *used;  /* [hm_st_n_tensors]: 1 = source of some GGUF tensor */
    name_list missing;
    bool experts_named; /* the experts' type was asked for (not inherited from `type`) */
} conv;

static void shape_fmt(const int64_t *dims, uint32_t n, char *out, size_t cap) {
    size_t len = (size_t)snprintf(out, cap, "[");
    for (uint32_t d = 0; d < n && len < cap; d++)
        len += (size_t)snprintf(out + len, cap - len, "%s%lld", d ? ", " : "", (long long)dims[d]);
    if (len < cap) snprintf(out + len, cap - len, "]");
}

/* Shapes agree up to dimensions of size 1 ([1, H] holds what llama.cpp stores as [H]). */
static bool shape_matches(const hm_st_tensor *t, const int64_t *want, uint32_t n_want) {
    uint32_t i = 0, j = 0;
    for (;;) {
        while (i < t->n_dims && t->shape[i] == 1) i++;
        while (j < n_want && want[j] == 1) j++;
        if (i == t->n_dims || j == n_want) return i == t->n_dims && j == n_want;
        if (t->shape[i++] != want[j++]) return false;
    }
}

static int st_hm_type(hm_st_dtype dt) {
    switch (dt) {
    case HM_ST_F32:
        return HM_TYPE_F32;
    case HM_ST_F16:
        return HM_TYPE_F16;
    case HM_ST_BF16:
        return HM_TYPE_BF16;
    default:
        return -1;
    }
}

/* The GGUF type that keeps a source dtype (KEEP): itself, or BF16 for FP8 (GGUF has no FP8:
 * fp8 * block scale rounded to bf16, as llama.cpp's converter does) */
static int keep_type(hm_st_dtype dt) {
    return dt == HM_ST_F8_E4M3 ? HM_TYPE_BF16 : st_hm_type(dt);
}

/* Marks source tensor t used. */
static hm_status mark_used(conv *c, const hm_st_tensor *t) {
    size_t i = (size_t)(t - hm_st_tensor_at(c->st, 0));
    if (i >= hm_st_n_tensors(c->st) || hm_st_tensor_at(c->st, i) != t)
        return hm_errorf(HM_ERR_INTERNAL, "convert: tensor '%s' is not in the table", t->name);
    c->used[i] = 1;
    return HM_OK;
}

/* Checks one source tensor (dtype, shape) and marks it used; FP8 weights also need their block
 * scales (*scale, else NULL). */
static hm_status use_source(conv *c, const hm_st_tensor *t, const char *gguf, const int64_t *want,
                            uint32_t n_want, const hm_st_tensor **scale) {
    *scale = NULL;
    if (keep_type(t->dtype) < 0) {
        bool fp8 = t->dtype == HM_ST_F8_E5M2 || t->dtype == HM_ST_F8_E8M0;
        return hm_errorf(HM_ERR_UNSUPPORTED, "%s: tensor '%s' (for '%s') has dtype %s: %s", c->path,
                         t->name, gguf, hm_st_dtype_name(t->dtype),
                         fp8 ? "of the FP8 formats convert reads F8_E4M3 (with block scales)"
                             : "convert reads F32, F16, BF16 and F8_E4M3");
    }
    if (!shape_matches(t, want, n_want)) {
        char have[128], exp[128];
        int64_t dims[HM_ST_MAX_DIMS];
        for (uint32_t d = 0; d < t->n_dims; d++) dims[d] = t->shape[d];
        shape_fmt(dims, t->n_dims, have, sizeof have);
        shape_fmt(want, n_want, exp, sizeof exp);
        return hm_errorf(HM_ERR_FORMAT, "%s: tensor '%s' (for '%s') has shape %s, expected %s",
                         c->path, t->name, gguf, have, exp);
    }
    if (t->dtype == HM_ST_F8_E4M3) {
        hm_status st = hm_st_fp8_scales(c->st, t, scale);
        if (st) return hm_error_prefix(st, "%s (for '%s')", c->path, gguf);
        if ((st = mark_used(c, *scale))) return st;
    }
    return mark_used(c, t);
}

/* MLA's attn_k_b / attn_v_b from kv_b_proj [heads * (nope + v)][kv_lora], seen as
 * [heads][nope + v][kv_lora] (llama.cpp's DeepseekV2Model.modify_tensors): slab h of k_b is head
 * h's nope rows transposed (ne [nope, kv_lora, heads]), of v_b its v rows (ne [kv_lora, v,
 * heads]). */
static hm_status resolve_kv_b(conv *c, conv_tensor *ct, const hm_name_map *m, uint32_t layer) {
    const hm_tensor_spec *s = ct->spec;
    const uint64_t nh = c->hp.n_heads, kvl = c->hp.kv_lora_rank;
    const uint64_t nope = c->hp.qk_nope_head_dim, vd = c->hp.v_head_dim;
    const bool k = (m->flags & HM_MAP_KV_B_K) != 0;
    if (s->n_dims != 3 || s->ne[0] != (k ? nope : kvl) || s->ne[1] != (k ? kvl : vd) ||
        s->ne[2] != nh)
        return hm_errorf(HM_ERR_INTERNAL, "convert: '%s' is not a per-head slab of kv_b", s->name);
    ct->cols = s->ne[0];
    ct->rows = s->ne[1];
    ct->n_slabs = (uint32_t)nh;
    ct->per_head = true;
    /* k_b: slab h's element (r, c) is kv_b row h * (nope + v) + c, column r */
    ct->strided = k;
    ct->rs = k ? 1 : 0;
    ct->cs = k ? kvl : 0;
    ct->slabs = calloc(ct->n_slabs, sizeof *ct->slabs);
    if (!ct->slabs) return hm_errorf(HM_ERR_NO_MEMORY, "convert: out of memory");
    char name[NAME_MAX_HF];
    hm_hf_name(m->hf, layer, 0, name, sizeof name);
    const hm_st_tensor *t = hm_st_find(c->st, name);
    if (!t) {
        list_add(&c->missing, name);
        return HM_OK;
    }
    const int64_t want[2] = {(int64_t)(nh * (nope + vd)), (int64_t)kvl};
    const hm_st_tensor *scale;
    hm_status st = use_source(c, t, s->name, want, 2, &scale);
    if (st != HM_OK) return st;
    for (uint64_t h = 0; h < nh; h++)
        ct->slabs[h] = (slab){t, k ? h * (nope + vd) * kvl : h * (nope + vd) + nope, scale};
    return HM_OK;
}

/* gpt-oss's experts and their biases (arch/gptoss.h), from the fused gate_up_proj (gate and up
 * rows interleaved) or down_proj: MXFP4 blocks repacked row by row; transformers' float layout
 * ([E][in][out]) and the biases ([E][R]) read with strides. */
static hm_status resolve_gptoss(conv *c, conv_tensor *ct, const hm_name_map *m, uint32_t layer) {
    const hm_tensor_spec *s = ct->spec;
    const int p = (int)m->part;
    const bool bias = s->n_dims == 2;
    const uint64_t E = c->hp.n_experts, step = p == HM_GPTOSS_DOWN ? 1 : 2;
    const uint64_t first = hm_gptoss_row(p, 0);
    if (s->n_dims != (bias ? 2u : 3u) || s->ne[bias ? 1 : 2] != E)
        return hm_errorf(HM_ERR_INTERNAL, "convert: '%s' is not per expert", s->name);
    ct->cols = s->ne[0];
    ct->rows = bias ? E : s->ne[1];
    ct->n_slabs = bias ? 1 : (uint32_t)E;
    ct->slabs = calloc(ct->n_slabs, sizeof *ct->slabs);
    if (!ct->slabs) return hm_errorf(HM_ERR_NO_MEMORY, "convert: out of memory");
    hm_gptoss_experts x;
    hm_status st = hm_gptoss_experts_find(c->st, c->path, &c->hp, layer, p, bias, &x);
    if (st == HM_ERR_NOT_FOUND) { /* listed once: gate and up share their sources */
        hm_error_clear();
        if (p != HM_GPTOSS_UP) list_add(&c->missing, x.missing);
        return HM_OK;
    }
    if (st != HM_OK) return st;
    const uint64_t R = (uint64_t)x.rows_packed, C = (uint64_t)x.cols;
    if (bias ? ct->cols * step != R : C != ct->cols || ct->rows * step != R)
        return hm_errorf(HM_ERR_INTERNAL, "convert: '%s' does not match its source", s->name);
    if (bias) { /* row e, value i: bias[e][first + i * step] */
        ct->strided = true, ct->rs = R, ct->cs = step;
        ct->slabs[0] = (slab){x.bias, first, NULL};
        return mark_used(c, x.bias);
    }
    if (x.blocks) { /* expert e's row r: packed row e * R + first + r * step */
        ct->mxfp4 = true, ct->row_step = step;
        for (uint64_t e = 0; e < E; e++) ct->slabs[e] = (slab){x.blocks, e * R + first, x.scales};
        if ((st = mark_used(c, x.scales)) != HM_OK) return st;
        return mark_used(c, x.blocks);
    }
    /* [E][C][R]: expert e's (r, col) is element e * C * R + col * R + first + r * step */
    ct->strided = true, ct->rs = step, ct->cs = R;
    for (uint64_t e = 0; e < E; e++) ct->slabs[e] = (slab){x.w, e * C * R + first, NULL};
    return mark_used(c, x.w);
}

/* Finds the source(s) of one GGUF tensor. Missing sources are listed in c->missing. */
static hm_status resolve(conv *c, conv_tensor *ct) {
    const hm_tensor_spec *s = ct->spec;
    uint32_t layer;
    const hm_name_map *m = hm_name_map_find(c->names, s->name, &layer);
    if (!m)
        return hm_errorf(HM_ERR_INTERNAL, "convert: no Hugging Face name for '%s' (%s)", s->name,
                         c->hp.model_type);
    if (m->flags & (HM_MAP_KV_B_K | HM_MAP_KV_B_V)) return resolve_kv_b(c, ct, m, layer);
    if (m->flags & HM_MAP_GPTOSS) return resolve_gptoss(c, ct, m, layer);
    bool experts = (m->flags & HM_MAP_EXPERTS) != 0;
    if (experts != (s->n_dims == 3))
        return hm_errorf(HM_ERR_INTERNAL, "convert: '%s' has %u dims but is%s per expert", s->name,
                         s->n_dims, experts ? "" : " not");
    ct->cols = s->ne[0];
    ct->rows = s->n_dims > 1 ? s->ne[1] : 1;
    ct->n_slabs = experts ? (uint32_t)s->ne[2] : 1;
    ct->slabs = calloc(ct->n_slabs, sizeof *ct->slabs);
    if (!ct->slabs) return hm_errorf(HM_ERR_NO_MEMORY, "convert: out of memory");
    if (m->flags & HM_MAP_PERMUTE_Q) ct->perm_heads = c->hp.n_heads;
    if (m->flags & HM_MAP_PERMUTE_K) ct->perm_heads = c->hp.n_kv_heads;
    if (ct->perm_heads && (ct->rows % ct->perm_heads || (ct->rows / ct->perm_heads) % 2))
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: '%s': %llu rows do not split into %u heads of even size", c->path,
                         s->name, (unsigned long long)ct->rows, ct->perm_heads);

    char name[NAME_MAX_HF];
    hm_status st;
    if (!experts) {
        hm_hf_name(m->hf, layer, 0, name, sizeof name);
        const hm_st_tensor *t = hm_st_find(c->st, name);
        if (!t) {
            list_add(&c->missing, name);
            return HM_OK;
        }
        int64_t want[HM_GGUF_MAX_DIMS];
        for (uint32_t d = 0; d < s->n_dims; d++) want[d] = (int64_t)s->ne[s->n_dims - 1 - d];
        if ((st = use_source(c, t, s->name, want, s->n_dims, &ct->slabs[0].scale)) != HM_OK)
            return st;
        ct->slabs[0].src = t;
        return HM_OK;
    }

    hm_hf_name(m->hf, layer, 0, name, sizeof name);
    const hm_st_tensor *fused = NULL;
    if (m->fused && !hm_st_find(c->st, name)) {
        char fname[NAME_MAX_HF];
        hm_hf_name(m->fused, layer, 0, fname, sizeof fname);
        fused = hm_st_find(c->st, fname);
    }
    if (fused) {
        int64_t want[3] = {(int64_t)ct->n_slabs, (int64_t)(ct->rows * m->n_parts),
                           (int64_t)ct->cols};
        const hm_st_tensor *scale;
        if ((st = use_source(c, fused, s->name, want, 3, &scale)) != HM_OK) return st;
        for (uint32_t e = 0; e < ct->n_slabs; e++)
            ct->slabs[e] = (slab){fused, ((uint64_t)e * m->n_parts + m->part) * ct->rows, NULL};
        return HM_OK;
    }
    int64_t want[2] = {(int64_t)ct->rows, (int64_t)ct->cols};
    for (uint32_t e = 0; e < ct->n_slabs; e++) {
        hm_hf_name(m->hf, layer, e, name, sizeof name);
        const hm_st_tensor *t = hm_st_find(c->st, name);
        if (!t) {
            list_add(&c->missing, name);
            continue;
        }
        if ((st = use_source(c, t, s->name, want, 2, &ct->slabs[e].scale)) != HM_OK) return st;
        ct->slabs[e].src = t;
    }
    return HM_OK;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Source tensors no GGUF tensor took: errors, except buffers that are not weights. */
static hm_status check_leftovers(conv *c) {
    name_list extra = {0};
    size_t n_inv_freq = 0;
    bool tied_head = false; /* an lm_head.weight unlike the embeddings it is tied to */
    for (size_t i = 0; i < hm_st_n_tensors(c->st); i++) {
        if (c->used[i]) continue;
        const hm_st_tensor *t = hm_st_tensor_at(c->st, i);
        if (ends_with(t->name, "rotary_emb.inv_freq")) {
            n_inv_freq++;
            continue;
        }
        if (c->hp.tie_embeddings && !strcmp(t->name, "lm_head.weight")) {
            const hm_st_tensor *e = hm_st_find(c->st, "model.embed_tokens.weight");
            if (e && e->dtype == t->dtype && e->nbytes == t->nbytes &&
                !memcmp(e->data, t->data, t->nbytes)) {
                HM_INFO("%s: lm_head.weight equals the tied embeddings: skipped", c->path);
                continue;
            }
        }
        list_add(&extra, t->name);
        if (c->hp.tie_embeddings && !strcmp(t->name, "lm_head.weight")) tied_head = true;
    }
    if (n_inv_freq)
        HM_WARN("%s: skipped %zu rotary_emb.inv_freq buffers (computed, not weights)", c->path,
                n_inv_freq);
    if (!c->missing.n && !extra.n) return HM_OK;
    char list[640], msg[900];
    size_t len = 0;
    msg[0] = '\0';
    if (c->missing.n) {
        list_fmt(&c->missing, list, sizeof list);
        len += (size_t)snprintf(msg, sizeof msg, "missing %zu tensor(s): %s", c->missing.n, list);
    }
    if (extra.n && len < sizeof msg) {
        list_fmt(&extra, list, sizeof list);
        snprintf(msg + len, sizeof msg - len, "%sunexpected %zu tensor(s): %s", len ? "; " : "",
                 extra.n, list);
    }
    return hm_errorf(HM_ERR_FORMAT,
                     "%s: the tensors do not match the %s layout of config.json: %s%s", c->path,
                     hm_arch_name(c->hp.arch), msg,
                     tied_head ? " (config.json has tie_word_embeddings: true, but lm_head.weight "
                                 "differs from model.embed_tokens.weight)"
                               : "");
}

/* ---------------------------------------------------------------- conversion of rows */

static void widen(hm_st_dtype dt, const uint8_t *in, float *out, uint64_t n) {
    if (dt == HM_ST_F32) {
        memcpy(out, in, n * 4);
        return;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, in + 2 * i, 2);
        out[i] = dt == HM_ST_F16 ? hm_f16_to_f32(h) : hm_bf16_to_f32(h);
    }
}

/* Row `row` of an FP8 E4M3 weight: fp8(w) * its block's scale (exact in float) */
static void widen_fp8(const uint8_t *in, const hm_st_tensor *scale, uint64_t row, float *out,
                      uint64_t n) {
    const size_t s0 = (size_t)(row / 128) * (size_t)scale->shape[1];
    for (uint64_t b = 0; b * 128 < n; b++) {
        const float d = hm_st_scale_at(scale, s0 + (size_t)b);
        for (uint64_t i = b * 128; i < n && i < (b + 1) * 128; i++)
            out[i] = hm_fp8_e4m3_to_f32(in[i]) * d;
    }
}

static hm_status narrow(uint32_t type, const float *in, uint8_t *out, uint64_t n) {
    switch (type) {
    case HM_TYPE_F32:
        memcpy(out, in, n * 4);
        return HM_OK;
    case HM_TYPE_F16:
    case HM_TYPE_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = type == HM_TYPE_F16 ? hm_f32_to_f16(in[i]) : hm_f32_to_bf16(in[i]);
            memcpy(out + 2 * i, &h, 2);
        }
        return HM_OK;
    default:
        return hm_quantize_row(type, in, out, (int64_t)n);
    }
}

/* Source row of output row r: llama.cpp's permute views each head's rows as [2, hd/2] and
 * transposes them to [hd/2, 2]. */
static uint64_t source_row(const conv_tensor *ct, uint64_t r) {
    if (!ct->perm_heads) return r;
    uint64_t hd = ct->rows / ct->perm_heads, h = r / hd, i = r % hd;
    return h * hd + (i % 2) * (hd / 2) + i / 2;
}

/* Output row r of a strided slab: element c is source element row0 + r * rs + c * cs, as the
 * source's bytes (raw) or as floats in tmp. */
static void gather_strided(const conv_tensor *ct, const slab *sl, uint64_t r, bool raw,
                           uint8_t *out, float *tmp) {
    const hm_st_tensor *src = sl->src;
    const size_t es = hm_st_dtype_size(src->dtype);
    const uint64_t src_cols = (uint64_t)src->shape[src->n_dims - 1];
    for (uint64_t c = 0; c < ct->cols; c++) {
        const uint64_t at = sl->row0 + r * ct->rs + c * ct->cs;
        const uint8_t *in = (const uint8_t *)src->data + at * es;
        if (raw)
            memcpy(out + c * es, in, es);
        else if (sl->scale) /* FP8: the scale of the source element's 128 x 128 block */
            tmp[c] = hm_fp8_e4m3_to_f32(*in) *
                     hm_st_scale_at(sl->scale,
                                    (size_t)(at / src_cols / 128 * (uint64_t)sl->scale->shape[1] +
                                             at % src_cols / 128));
        else
            widen(src->dtype, in, tmp + c, 1);
    }
}

/* Output row r of an MXFP4 slab: its packed source row repacked into GGUF's blocks (out, when
 * the output is MXFP4), or their values as floats in tmp. */
static void repack_mxfp4(const conv_tensor *ct, const slab *sl, uint64_t r, bool raw, uint8_t *out,
                         float *tmp) {
    const uint64_t nb = ct->cols / HM_QK_MXFP4, pr = sl->row0 + r * ct->row_step;
    const uint8_t *qs = (const uint8_t *)sl->src->data + pr * nb * 16;
    const uint8_t *e = (const uint8_t *)sl->scale->data + pr * nb;
    if (raw) {
        hm_mxfp4_from_ocp(qs, e, (int64_t)nb, (hm_block_mxfp4 *)out);
        return;
    }
    for (uint64_t b = 0; b < nb; b++) {
        hm_block_mxfp4 blk;
        hm_mxfp4_from_ocp(qs + b * 16, e + b, 1, &blk);
        hm_dequantize_row_mxfp4(&blk, tmp + b * HM_QK_MXFP4, HM_QK_MXFP4);
    }
}

typedef struct chunk_job {
    const conv_tensor *ct;
    const slab *sl;
    uint64_t r0, r1; /* rows of the slab */
    uint8_t *out;    /* (r1 - r0) * row_bytes */
    float *scratch;  /* [nth][cols_max] */
    uint64_t cols_max;
    hm_status *st;    /* [nth] */
    char (*msg)[300]; /* [nth] */
} chunk_job;

static void chunk_task(int ith, int nth, void *arg) {
    chunk_job *j = arg;
    const conv_tensor *ct = j->ct;
    const hm_st_tensor *src = j->sl->src;
    const size_t es = hm_st_dtype_size(src->dtype);
    const bool raw =
        ct->mxfp4 ? ct->type == HM_TYPE_MXFP4 : (uint32_t)st_hm_type(src->dtype) == ct->type;
    float *tmp = j->scratch + (size_t)ith * j->cols_max;
    uint64_t n = j->r1 - j->r0, lo = n * (uint64_t)ith / (uint64_t)nth,
             hi = n * (uint64_t)(ith + 1) / (uint64_t)nth;
    for (uint64_t i = lo; i < hi; i++) {
        uint64_t r = j->r0 + i;
        uint8_t *out = j->out + i * ct->row_bytes;
        if (ct->mxfp4 || ct->strided) {
            if (ct->mxfp4)
                repack_mxfp4(ct, j->sl, r, raw, out, tmp);
            else
                gather_strided(ct, j->sl, r, raw, out, tmp);
            if (raw) continue;
        } else {
            const uint64_t row = j->sl->row0 + source_row(ct, r);
            const uint8_t *in = (const uint8_t *)src->data + row * ct->cols * es;
            if (raw) {
                memcpy(out, in, ct->cols * es);
                continue;
            }
            if (j->sl->scale)
                widen_fp8(in, j->sl->scale, row, tmp, ct->cols);
            else
                widen(src->dtype, in, tmp, ct->cols);
        }
        hm_status st = narrow(ct->type, tmp, out, ct->cols);
        if (st != HM_OK) {
            j->st[ith] = st;
            snprintf(j->msg[ith], sizeof j->msg[0], "row %llu: %s", (unsigned long long)r,
                     hm_last_error());
            return;
        }
    }
}

/* Lets the kernel drop the source pages of a slab once converted (they are file-backed and
 * read-only, so this only lowers resident memory; a later read faults them back in). */
static void release_pages(const void *p, uint64_t n) {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || n == 0) return;
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(page - 1);
    uintptr_t b = ((uintptr_t)p + n + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    madvise((void *)a, b - a, MADV_DONTNEED);
}

typedef struct writer_ctx {
    hm_gguf_writer *w;
    hm_pool *pool;
    uint8_t *buf[2];
    float *scratch;
    uint64_t cols_max;
    hm_status *st;
    char (*msg)[300];
    int nth;
    chunk_job jobs[2];
    int pending; /* index of a converted buffer not yet written, -1 when none */
    uint64_t done, total;
    const hm_convert_params *p;
} writer_ctx;

static hm_status write_out(writer_ctx *x, const void *data, uint64_t bytes) {
    hm_status st = hm_gguf_w_data(x->w, data, bytes);
    x->done += bytes;
    if (st == HM_OK && x->p->progress) x->p->progress(x->done, x->total, x->p->progress_arg);
    return st;
}

static hm_status flush_pending(writer_ctx *x) {
    if (x->pending < 0) return HM_OK;
    const chunk_job *j = &x->jobs[x->pending];
    x->pending = -1;
    return write_out(x, j->out, (j->r1 - j->r0) * j->ct->row_bytes);
}

/* Converts rows [r0, r1) of a slab on the pool while the previous chunk is written. */
static hm_status convert_chunk(writer_ctx *x, const conv_tensor *ct, const slab *sl, uint64_t r0,
                               uint64_t r1) {
    int k = x->pending < 0 ? 0 : 1 - x->pending;
    chunk_job *j = &x->jobs[k];
    *j = (chunk_job){ct, sl, r0, r1, x->buf[k], x->scratch, x->cols_max, x->st, x->msg};
    for (int i = 0; i < x->nth; i++) x->st[i] = HM_OK;
    hm_status st = hm_pool_submit(x->pool, chunk_task, j);
    if (st != HM_OK) return st;
    hm_status wst = flush_pending(x);
    hm_pool_wait(x->pool);
    for (int i = 0; i < x->nth; i++) {
        if (x->st[i] == HM_OK) continue;
        char expert[32] = "";
        if (ct->n_slabs > 1)
            snprintf(expert, sizeof expert, "%s %u, ", ct->per_head ? "head" : "expert",
                     (unsigned)(sl - ct->slabs));
        return hm_errorf(x->st[i], "tensor '%s' (from '%s'): %s%s", ct->spec->name, sl->src->name,
                         expert, x->msg[i]);
    }
    if (wst != HM_OK) return wst;
    if (!ct->perm_heads && !ct->strided && !ct->mxfp4) { /* these source rows are done with */
        size_t row = ct->cols * hm_st_dtype_size(sl->src->dtype);
        release_pages((const uint8_t *)sl->src->data + (sl->row0 + r0) * row, (r1 - r0) * row);
    }
    x->pending = k;
    return HM_OK;
}

static hm_status write_tensor(writer_ctx *x, const conv_tensor *ct) {
    hm_status st = HM_OK;
    /* rows, in order, of consecutive source rows (else: strided, MXFP4 rows whose source rows
     * interleave with another tensor's, which will still read them) */
    const bool rows_in_order = !ct->strided && !ct->mxfp4;
    for (uint32_t e = 0; e < ct->n_slabs && st == HM_OK; e++) {
        const slab *sl = &ct->slabs[e];
        const size_t es = hm_st_dtype_size(sl->src->dtype);
        const uint8_t *data = (const uint8_t *)sl->src->data + sl->row0 * ct->cols * es;
        const uint64_t src_bytes = ct->rows * ct->cols * es;
        if ((uint32_t)st_hm_type(sl->src->dtype) == ct->type && !ct->perm_heads && rows_in_order) {
            st = flush_pending(x); /* same bytes: straight from the mapping, a chunk at a time */
            for (uint64_t off = 0; off < src_bytes && st == HM_OK; off += CHUNK_BYTES) {
                uint64_t len = src_bytes - off < CHUNK_BYTES ? src_bytes - off : CHUNK_BYTES;
                st = write_out(x, data + off, len);
                release_pages(data + off, len);
            }
        } else {
            uint64_t per = CHUNK_BYTES / ct->row_bytes;
            if (per == 0) per = 1;
            for (uint64_t r = 0; r < ct->rows && st == HM_OK; r += per)
                st = convert_chunk(x, ct, sl, r, r + per < ct->rows ? r + per : ct->rows);
        }
        if (rows_in_order) release_pages(data, src_bytes);
    }
    return st;
}

static hm_status write_all(conv *c, const char *out_path, const hm_convert_params *p,
                           uint64_t total, const char *model_name) {
    writer_ctx x = {0};
    x.pending = -1;
    x.total = total;
    x.p = p;
    uint64_t buf_bytes = CHUNK_BYTES;
    for (size_t i = 0; i < c->n_specs; i++) {
        if (c->t[i].row_bytes > buf_bytes) buf_bytes = c->t[i].row_bytes;
        if (c->t[i].cols > x.cols_max) x.cols_max = c->t[i].cols;
    }
    hm_pool_params pp = hm_pool_default_params();
    pp.n_threads = p->n_threads;
    pp.async = true;
    pp.pin = false;
    hm_status st = hm_pool_create(&pp, &x.pool);
    if (st == HM_OK) {
        x.nth = hm_pool_size(x.pool);
        x.buf[0] = malloc(buf_bytes);
        x.buf[1] = malloc(buf_bytes);
        x.scratch = malloc((size_t)x.nth * x.cols_max * sizeof(float));
        x.st = calloc((size_t)x.nth, sizeof *x.st);
        x.msg = calloc((size_t)x.nth, sizeof *x.msg);
        if (!x.buf[0] || !x.buf[1] || !x.scratch || !x.st || !x.msg)
            st = hm_errorf(HM_ERR_NO_MEMORY, "convert: out of memory for %llu-byte buffers",
                           (unsigned long long)buf_bytes);
    }
    if (st == HM_OK) st = hm_gguf_writer_open(out_path, &x.w);
    if (st == HM_OK) st = hm_hparams_write_gguf(x.w, &c->hp, model_name);
    /* the tokenizer is not converted: llama.cpp loads a model without a vocabulary only when
     * this key says so (without it: "key not found: tokenizer.ggml.model") */
    if (st == HM_OK) st = hm_gguf_w_str(x.w, "tokenizer.ggml.model", "no_vocab");
    for (size_t i = 0; st == HM_OK && i < c->n_specs; i++) {
        const hm_tensor_spec *s = c->t[i].spec;
        st = hm_gguf_w_tensor(x.w, s->name, c->t[i].type, s->n_dims, s->ne);
    }
    for (size_t i = 0; st == HM_OK && i < c->n_specs; i++) st = write_tensor(&x, &c->t[i]);
    if (st == HM_OK) st = flush_pending(&x);
    if (st == HM_OK) {
        st = hm_gguf_writer_finish(x.w); /* frees w whatever happens */
        x.w = NULL;
    }
    if (st != HM_OK) {
        st = hm_error_prefix(st, "convert %s -> %s", c->path, out_path);
        hm_gguf_writer_abort(x.w);
    }
    hm_pool_free(x.pool);
    free(x.buf[0]);
    free(x.buf[1]);
    free(x.scratch);
    free(x.st);
    free(x.msg);
    return st;
}

/* ---------------------------------------------------------------- entry points */

hm_convert_params hm_convert_default_params(void) {
    hm_convert_params p;
    memset(&p, 0, sizeof p);
    p.type = HM_CONVERT_KEEP;
    p.experts_type = HM_CONVERT_SAME;
    return p;
}

bool hm_convert_type_supported(int type) {
    return type == HM_TYPE_F32 || type == HM_TYPE_F16 || type == HM_TYPE_BF16 ||
           (type >= 0 && type < HM_TYPE_FIRST_INTERNAL && hm_quantize_supported((uint32_t)type));
}

static hm_status check_type(int type, const char *what) {
    if (type == HM_CONVERT_KEEP || hm_convert_type_supported(type)) return HM_OK;
    return hm_errorf(HM_ERR_INVALID_ARG,
                     "convert: %s type %s (%d) cannot be written (supported: F32, F16, BF16, Q4_0, "
                     "Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)",
                     what, hm_type_name((uint32_t)type), type);
}

/* Picks each tensor's output type: small tensors F32, the rest `type` / `experts_type` (the plan
 * already applied hm_type_for_row), or the source dtype where those say KEEP. */
static hm_status assign_types(conv *c, int dense, int experts) {
    for (size_t i = 0; i < c->n_specs; i++) {
        conv_tensor *ct = &c->t[i];
        const hm_tensor_spec *s = ct->spec;
        bool big = s->init == HM_INIT_WEIGHT || s->cat == HM_CAT_EMBED;
        int want = s->cat == HM_CAT_ROUTED ? experts : dense;
        ct->type = s->type;
        /* MXFP4 experts (gpt-oss as released) stay MXFP4, byte for byte, unless their type was
         * asked for by name */
        const bool keep_mxfp4 = ct->mxfp4 && (want == HM_CONVERT_KEEP || !c->experts_named);
        if (keep_mxfp4)
            ct->type = HM_TYPE_MXFP4;
        else if (big && want == HM_CONVERT_KEEP && ct->slabs[0].src)
            ct->type = (uint32_t)keep_type(ct->slabs[0].src->dtype);
        if (!keep_mxfp4 && !hm_convert_type_supported((int)ct->type))
            return hm_errorf(HM_ERR_UNSUPPORTED, "convert: '%s' would be %s, which has no writer",
                             s->name, hm_type_name(ct->type));
        if (!hm_type_row_bytes(ct->type, ct->cols, &ct->row_bytes))
            return hm_errorf(HM_ERR_INTERNAL, "convert: '%s': %llu is not whole %s blocks", s->name,
                             (unsigned long long)ct->cols, hm_type_name(ct->type));
    }
    return HM_OK;
}

static void conv_free(conv *c) {
    for (size_t i = 0; c->t && i < c->n_specs; i++) free(c->t[i].slabs);
    free(c->t);
    free(c->specs);
    free(c->used);
    hm_st_close(c->st);
}

static void base_name(const char *path, char *out, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    snprintf(out, cap, "%.*s", (int)(n - b), path + b);
}

hm_status hm_convert_hf(const char *hf_path, const char *out_path, const hm_convert_params *params,
                        hm_convert_stats *stats) {
    hm_convert_params p = params ? *params : hm_convert_default_params();
    if (stats) memset(stats, 0, sizeof *stats);
    if (!hf_path || (!out_path && !p.dry_run))
        return hm_errorf(HM_ERR_INVALID_ARG, "convert: a model path and an output path are needed");
    const bool experts_named = p.experts_type != HM_CONVERT_SAME;
    if (p.experts_type == HM_CONVERT_SAME) p.experts_type = p.type;
    hm_status st = check_type(p.type, "output");
    if (st == HM_OK) st = check_type(p.experts_type, "experts");
    if (st != HM_OK) return st;
    if (p.n_threads < 0)
        return hm_errorf(HM_ERR_INVALID_ARG, "convert: n_threads %d < 0", p.n_threads);
    uint64_t t0 = hm_time_ns();

    conv c;
    memset(&c, 0, sizeof c);
    c.path = hf_path;
    c.experts_named = experts_named;
    if ((st = hm_hparams_from_hf_config(hf_path, &c.hp)) != HM_OK) return st;
    if (!(c.names = hm_arch_names_find(c.hp.arch)))
        return hm_errorf(HM_ERR_UNSUPPORTED, "%s: convert does not handle %s yet (supported: %s)",
                         hf_path, c.hp.model_type, hm_arch_list(HM_ARCH_NAMED));
    if ((st = hm_st_open(hf_path, &c.st)) != HM_OK) return st;

    /* KEEP: plan with F32 as a placeholder; assign_types puts the source dtype in */
    hm_plan_types types = {p.experts_type == HM_CONVERT_KEEP ? HM_TYPE_F32 : p.experts_type,
                           p.type == HM_CONVERT_KEEP ? HM_TYPE_F32 : p.type};
    st = hm_arch_tensor_plan(&c.hp, &types, &c.specs, &c.n_specs);
    if (st == HM_OK) {
        c.t = calloc(c.n_specs ? c.n_specs : 1, sizeof *c.t);
        c.used = calloc(hm_st_n_tensors(c.st) + 1, 1);
        if (!c.t || !c.used) st = hm_errorf(HM_ERR_NO_MEMORY, "convert: out of memory");
    }
    for (size_t i = 0; st == HM_OK && i < c.n_specs; i++) {
        c.t[i].spec = &c.specs[i];
        st = resolve(&c, &c.t[i]);
    }
    if (st == HM_OK) st = check_leftovers(&c);
    if (st == HM_OK) st = assign_types(&c, p.type, p.experts_type);

    uint64_t total = 0;
    if (st == HM_OK) {
        for (size_t i = 0; i < c.n_specs; i++) {
            const conv_tensor *ct = &c.t[i];
            uint64_t bytes = ct->row_bytes * ct->rows * ct->n_slabs;
            total += bytes;
            if (!stats) continue;
            stats->cat_tensors[ct->spec->cat]++;
            stats->cat_bytes[ct->spec->cat] += bytes;
            stats->cat_types[ct->spec->cat][ct->type]++;
        }
        if (stats) {
            stats->hp = c.hp;
            stats->n_tensors = c.n_specs;
            stats->total_bytes = total;
            for (size_t i = 0; i < hm_st_n_tensors(c.st); i++) {
                if (!c.used[i]) continue;
                stats->n_source_tensors++;
                stats->source_bytes += hm_st_tensor_at(c.st, i)->nbytes;
            }
        }
    }
    if (st == HM_OK && !p.dry_run) {
        char name[256];
        if (p.model_name)
            snprintf(name, sizeof name, "%s", p.model_name);
        else
            base_name(hf_path, name, sizeof name);
        st = write_all(&c, out_path, &p, total, name);
    }
    if (stats) stats->seconds = (double)(hm_time_ns() - t0) * 1e-9;
    conv_free(&c);
    return st;
}
