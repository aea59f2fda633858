/* model.c - binds a model's weights from a GGUF file or a Hugging Face directory (model.h). */
#include "model/model.h"
#include "model/arch/gptoss.h"
#include "model/arch/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/cpu.h"
#include "core/log.h"
#include "core/pool.h"
#include "cpu/ops.h"
#include "model/arch.h"
#include "model/names.h"
#include "quant/fp16.h"
#include "quant/ref.h"
#include "quant/types.h"

/* One weight as found in the file: its type, data and shape (ne[0] contiguous). */
typedef struct tview {
    char name[256];
    uint32_t type;
    const void *data;
    uint32_t n_dims;
    uint64_t ne[4];
} tview;

static bool is_gguf(const hm_model *m) {
    return m->gguf != NULL;
}

static hm_status st_type(const hm_st_tensor *t, uint32_t *out) {
    switch (t->dtype) {
    case HM_ST_F32:
        *out = HM_TYPE_F32;
        return HM_OK;
    case HM_ST_F16:
        *out = HM_TYPE_F16;
        return HM_OK;
    case HM_ST_BF16:
        *out = HM_TYPE_BF16;
        return HM_OK;
    default:
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "tensor '%s' has dtype %s, which hmoe cannot load from safetensors yet "
                         "(supported: F32, F16, BF16, and F8_E4M3 weights with 128 x 128 "
                         "weight_scale_inv blocks)",
                         t->name, hm_st_dtype_name(t->dtype));
    }
}

static void *own_bytes(hm_model *m, size_t n) {
    if (m->n_owned == m->cap_owned) {
        size_t cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **p = realloc(m->owned, cap * sizeof *p);
        if (!p) return NULL;
        m->owned = p;
        m->cap_owned = cap;
    }
    void *f = malloc(n ? n : 1);
    if (f) m->owned[m->n_owned++] = f;
    return f;
}

static float *own_floats(hm_model *m, size_t n) {
    return own_bytes(m, n * sizeof(float));
}

/* An FP8 E4M3 weight of an HF checkpoint (DeepSeek-V3, Qwen3-FP8: "weight_block_size" 128 x 128)
 * with its "<name>_scale_inv" tensor of [ceil(rows / 128)][ceil(cols / 128)] scales, bound as an
 * FP8_B128 copy (1.03 bytes per weight; the file's bytes are not used after this). */
static hm_status fp8_view(hm_model *m, const hm_st_tensor *t, tview *v) {
    const hm_st_tensor *s;
    hm_status st = hm_st_fp8_scales(m->st, t, &s);
    if (st) return hm_error_prefix(st, "%s", m->path);
    const int64_t rows = t->shape[0], cols = t->shape[1], ns = s->shape[0] * s->shape[1];
    if (cols % HM_FP8_TILE)
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "%s: FP8 tensor '%s' has %lld columns, not a multiple of %d", m->path,
                         t->name, (long long)cols, HM_FP8_TILE);
    const size_t bytes = (size_t)rows * (size_t)(cols / HM_FP8_TILE) * sizeof(hm_block_fp8_b128);
    float *sc = malloc(sizeof(float) * (size_t)ns);
    void *dst = own_bytes(m, bytes);
    if (!sc || !dst) {
        free(sc);
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory for FP8 tensor '%s'", m->path,
                         t->name);
    }
    for (int64_t i = 0; i < ns; i++) sc[i] = hm_st_scale_at(s, (size_t)i);
    st = hm_fp8_to_b128_tiles(t->data, sc, rows, cols, dst);
    free(sc);
    if (st) return hm_error_prefix(st, "%s: tensor '%s'", m->path, t->name);
    m->fp8_bytes += bytes;
    v->type = HM_TYPE_FP8_B128;
    v->data = dst;
    v->n_dims = 2;
    v->ne[0] = (uint64_t)cols, v->ne[1] = (uint64_t)rows, v->ne[2] = v->ne[3] = 1;
    return HM_OK;
}

/* Finds a tensor by its GGUF name (gguf_fmt: a printf pattern over the layer il). In an HF
 * directory the name is translated with the architecture's table (names.h); for routed experts
 * the view is expert e: the e-th slab of the stacked GGUF tensor, or the HF per-expert tensor. */
static hm_status find(hm_model *m, bool required, tview *v, const char *gguf_fmt, unsigned il,
                      unsigned e) {
    memset(v, 0, sizeof *v);
    char gname[256];
    snprintf(gname, sizeof gname, gguf_fmt, il);
    if (is_gguf(m)) {
        snprintf(v->name, sizeof v->name, "%s", gname);
        const hm_gguf_tensor *t = hm_gguf_find_tensor(m->gguf, v->name);
        if (!t) goto missing;
        v->type = t->type;
        v->data = t->data;
        v->n_dims = t->n_dims;
        for (int i = 0; i < 4; i++) v->ne[i] = t->ne[i];
        return HM_OK;
    }
    uint32_t layer;
    const hm_arch_names *an = hm_arch_names_find(m->hp.arch);
    const hm_name_map *nm = an ? hm_name_map_find(an, gname, &layer) : NULL;
    if (!nm)
        return hm_errorf(HM_ERR_INTERNAL, "%s: no Hugging Face name for '%s' (%s)", m->path, gname,
                         m->hp.model_type);
    hm_hf_name(nm->hf, layer, e, v->name, sizeof v->name);
    const hm_st_tensor *t = hm_st_find(m->st, v->name);
    if (!t && (nm->flags & HM_MAP_EXPERTS) && nm->fused) {
        /* transformers 5's fused experts: [n_experts][n_parts * rows][cols], this tensor is row
         * block `part` of expert e */
        char fname[256];
        hm_hf_name(nm->fused, layer, 0, fname, sizeof fname);
        const hm_st_tensor *f = hm_st_find(m->st, fname);
        if (f) {
            hm_status st = st_type(f, &v->type);
            if (st) return hm_error_prefix(st, "%s", m->path);
            snprintf(v->name, sizeof v->name, "%s", fname);
            if (f->n_dims != 3 || f->shape[0] != (int64_t)m->hp.n_experts ||
                f->shape[1] % (int64_t)nm->n_parts != 0)
                return hm_errorf(HM_ERR_FORMAT,
                                 "%s: fused expert tensor '%s' has shape [%lld x %lld x %lld], "
                                 "expected [%u x %u*rows x cols]",
                                 m->path, fname, (long long)f->shape[0],
                                 f->n_dims > 1 ? (long long)f->shape[1] : 0,
                                 f->n_dims > 2 ? (long long)f->shape[2] : 0, m->hp.n_experts,
                                 nm->n_parts);
            const int64_t rows = f->shape[1] / nm->n_parts, cols = f->shape[2];
            const size_t es = hm_st_dtype_size(f->dtype);
            v->data = (const uint8_t *)f->data +
                      ((size_t)e * nm->n_parts + nm->part) * (size_t)rows * (size_t)cols * es;
            v->n_dims = 2;
            v->ne[0] = (uint64_t)cols, v->ne[1] = (uint64_t)rows, v->ne[2] = v->ne[3] = 1;
            return HM_OK;
        }
    }
    if (!t) goto missing;
    if (t->dtype == HM_ST_F8_E4M3) {
        if (!m->checking) return fp8_view(m, t, v);
        const hm_st_tensor *s; /* the conversion's own checks, without converting */
        hm_status st = hm_st_fp8_scales(m->st, t, &s);
        if (st) return hm_error_prefix(st, "%s", m->path);
        if (t->shape[1] % HM_FP8_TILE)
            return hm_errorf(HM_ERR_UNSUPPORTED,
                             "%s: FP8 tensor '%s' has %lld columns, not a multiple of %d", m->path,
                             t->name, (long long)t->shape[1], HM_FP8_TILE);
        v->type = HM_TYPE_FP8_B128;
        v->n_dims = 2;
        v->ne[0] = (uint64_t)t->shape[1], v->ne[1] = (uint64_t)t->shape[0], v->ne[2] = v->ne[3] = 1;
        return HM_OK;
    }
    hm_status st = st_type(t, &v->type);
    if (st) return hm_error_prefix(st, "%s", m->path);
    if (t->n_dims < 1 || t->n_dims > 4)
        return hm_errorf(HM_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (expected 1 or 2)",
                         m->path, v->name, t->n_dims);
    v->data = t->data;
    v->n_dims = t->n_dims;
    for (int i = 0; i < 4; i++) v->ne[i] = 1;
    for (uint32_t i = 0; i < t->n_dims; i++) v->ne[i] = (uint64_t)t->shape[t->n_dims - 1 - i];
    return HM_OK;
missing:
    if (!required) return HM_ERR_NOT_FOUND;
    return hm_errorf(HM_ERR_NOT_FOUND, "%s: tensor '%s' is missing (needed by %s)", m->path,
                     v->name, m->hp.model_type);
}

static hm_status check_shape(const hm_model *m, const tview *v, uint64_t ne0, uint64_t ne1,
                             uint64_t ne2) {
    uint64_t want[3] = {ne0, ne1, ne2};
    for (int i = 0; i < 3; i++)
        if (v->ne[i] != want[i]) goto bad;
    if (v->ne[3] != 1) goto bad;
    return HM_OK;
bad:
    if (is_gguf(m))
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: tensor '%s' has ne [%llu, %llu, %llu, %llu], expected [%llu, %llu, "
                         "%llu]",
                         m->path, v->name, (unsigned long long)v->ne[0],
                         (unsigned long long)v->ne[1], (unsigned long long)v->ne[2],
                         (unsigned long long)v->ne[3], (unsigned long long)ne0,
                         (unsigned long long)ne1, (unsigned long long)ne2);
    if (ne1 == 1)
        return hm_errorf(HM_ERR_FORMAT, "%s: tensor '%s' has shape [%llu x %llu], expected [%llu]",
                         m->path, v->name, (unsigned long long)v->ne[1],
                         (unsigned long long)v->ne[0], (unsigned long long)ne0);
    return hm_errorf(HM_ERR_FORMAT,
                     "%s: tensor '%s' has shape [%llu x %llu], expected [%llu x %llu]", m->path,
                     v->name, (unsigned long long)v->ne[1], (unsigned long long)v->ne[0],
                     (unsigned long long)ne1, (unsigned long long)ne0);
}

/* The alignment the kernels read a type's data with: its element's (F32), its blocks' scale
 * (halves in the quantized blocks, F16, BF16; a float in FP8_B128), none for MXFP4's bytes. */
static size_t type_align(uint32_t type) {
    switch (type) {
    case HM_TYPE_F32:
    case HM_TYPE_FP8_B128:
        return 4;
    case HM_TYPE_MXFP4:
        return 1;
    default:
        return 2;
    }
}

/* data, or an aligned copy of its n bytes where the file does not align it to its type (a
 * safetensors file may put a tensor at any byte offset, a GGUF declare an alignment of 1) */
static const void *aligned_data(hm_model *m, const tview *v, const void *data, size_t n) {
    if ((uintptr_t)data % type_align(v->type) == 0) return data;
    void *c = own_bytes(m, n); /* malloc: aligned for any type */
    if (!c) {
        hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory for an aligned copy of '%s'", m->path,
                  v->name);
        return NULL;
    }
    memcpy(c, data, n);
    if (!m->realigned_bytes)
        HM_WARN("%s: tensor '%s' is not %zu-byte aligned in the file: misaligned weights are "
                "copied",
                m->path, v->name, type_align(v->type));
    m->realigned_bytes += n;
    return c;
}

/* A 1-D weight of n values as floats (copied and converted from F32/F16/BF16/...). */
static hm_status bind_vec(hm_model *m, const float **out, uint64_t n, const char *gguf_fmt,
                          unsigned il) {
    tview v;
    hm_status st = find(m, true, &v, gguf_fmt, il, 0u);
    if (st) return st;
    if ((st = check_shape(m, &v, n, 1, 1))) return st;
    if (!hm_dequantize_supported(v.type))
        return hm_errorf(HM_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which hmoe cannot read",
                         m->path, v.name, hm_type_name(v.type));
    if (m->checking) return HM_OK;
    uint64_t rb;
    if (!hm_type_row_bytes(v.type, n, &rb))
        return hm_errorf(HM_ERR_FORMAT, "%s: tensor '%s': %llu values are not whole %s blocks",
                         m->path, v.name, (unsigned long long)n, hm_type_name(v.type));
    float *f = own_floats(m, n);
    const void *src = f ? aligned_data(m, &v, v.data, (size_t)rb) : NULL;
    if (!f || !src) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", m->path);
    if ((st = hm_dequantize_row(v.type, src, f, (int64_t)n))) return st;
    *out = f;
    return HM_OK;
}

static hm_status view_matrix(hm_model *m, const tview *v, hm_matrix *mat, uint64_t rows,
                             uint64_t cols, uint64_t n_slabs, unsigned slab) {
    hm_status st = check_shape(m, v, cols, rows, n_slabs);
    if (st) return st;
    if ((st = hm_kernel_check(v->type, v->name))) return hm_error_prefix(st, "%s", m->path);
    uint64_t rb;
    if (!hm_type_row_bytes(v->type, cols, &rb))
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: tensor '%s': %llu columns is not a whole number of %s blocks",
                         m->path, v->name, (unsigned long long)cols, hm_type_name(v->type));
    if (m->checking) return hm_matrix_init(mat, v->type, NULL, (int64_t)rows, (int64_t)cols);
    const uint8_t *base = (const uint8_t *)v->data + (size_t)slab * (size_t)rb * (size_t)rows;
    base = aligned_data(m, v, base, (size_t)rb * (size_t)rows);
    if (!base) return HM_ERR_NO_MEMORY;
    return hm_matrix_init(mat, v->type, base, (int64_t)rows, (int64_t)cols);
}

static hm_status bind_mat(hm_model *m, hm_matrix *mat, uint64_t rows, uint64_t cols,
                          const char *gguf_fmt, unsigned il) {
    tview v;
    hm_status st = find(m, true, &v, gguf_fmt, il, 0u);
    if (st) return st;
    return view_matrix(m, &v, mat, rows, cols, 1, 0);
}

/* Routed expert e's projection: a slab of the stacked GGUF tensor or the HF per-expert tensor. */
static hm_status bind_expert(hm_model *m, hm_moe_matrix *mm, uint32_t *type, uint64_t rows,
                             uint64_t cols, const char *gguf_fmt, unsigned il, unsigned e) {
    tview v;
    hm_matrix mat;
    hm_status st;
    if (is_gguf(m)) {
        if ((st = find(m, true, &v, gguf_fmt, il, e))) return st;
        st = view_matrix(m, &v, &mat, rows, cols, m->hp.n_experts, e);
    } else {
        if ((st = find(m, true, &v, gguf_fmt, il, e))) return st;
        st = view_matrix(m, &v, &mat, rows, cols, 1, 0);
    }
    if (st) return st;
    if (e > 0 && mat.type != *type)
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "%s: tensor '%s' has type %s but expert 0 of the layer has %s (one type "
                         "per projection is supported)",
                         m->path, v.name, hm_type_name(mat.type), hm_type_name(*type));
    *type = mat.type;
    mm->type = mat.type;
    mm->data = mat.data;
    mm->row_bytes = mat.row_bytes;
    return HM_OK;
}

/* rows [row0, row0 + nr) of a tensor of `cols` columns, dequantized into out[nr][cols] */
static hm_status rows_f32(hm_model *m, const tview *v, uint64_t cols, uint64_t row0, uint64_t nr,
                          float *out) {
    uint64_t rb;
    if (!hm_type_row_bytes(v->type, cols, &rb) || !hm_dequantize_supported(v->type))
        return hm_errorf(HM_ERR_UNSUPPORTED, "%s: tensor '%s': %s rows of %llu cannot be read",
                         m->path, v->name, hm_type_name(v->type), (unsigned long long)cols);
    const uint8_t *base = aligned_data(m, v, (const uint8_t *)v->data + row0 * rb, nr * rb);
    if (!base) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", m->path);
    for (uint64_t r = 0; r < nr; r++) {
        hm_status st = hm_dequantize_row(v->type, base + r * rb, out + r * cols, (int64_t)cols);
        if (st) return st;
    }
    return HM_OK;
}

/* Routed expert e's bias (gpt-oss): row e of a GGUF [n_experts][n] tensor, as floats. */
static hm_status bind_expert_bias(hm_model *m, const float **out, uint64_t n, const char *fmt,
                                  unsigned il, unsigned e) {
    tview v;
    hm_status st = find(m, true, &v, fmt, il, 0);
    if (st || (st = check_shape(m, &v, n, m->hp.n_experts, 1)) || m->checking) return st;
    float *f = own_floats(m, n);
    if (!f) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", m->path);
    if ((st = rows_f32(m, &v, n, e, 1, f))) return st;
    *out = f;
    return HM_OK;
}

/* Routed expert e's projection p (HM_GPTOSS_GATE, _UP, _DOWN) of a gpt-oss Hugging Face
 * checkpoint (arch/gptoss.h), as a matrix of `rows` rows (the columns hm_gptoss_experts_find
 * checked against the hyper-parameters): the released MXFP4 blocks and scales
 * repacked into GGUF's MXFP4 blocks (hm_mxfp4_from_ocp), or transformers' float save transposed
 * into a copy of its dtype; the rows of this projection only (gate and up are interleaved). */
static hm_status gptoss_expert(hm_model *m, hm_moe_matrix *mm, uint32_t *type, uint64_t rows, int p,
                               unsigned il, unsigned e) {
    hm_gptoss_experts x;
    hm_status st = hm_gptoss_experts_find(m->st, m->path, &m->hp, il, p, false, &x);
    if (st) return st;
    const size_t R = (size_t)x.rows_packed, C = (size_t)x.cols;
    uint32_t t = HM_TYPE_MXFP4;
    if (x.blocks) {
        const size_t G = C / 32;
        if (!m->checking) {
            hm_block_mxfp4 *out = own_bytes(m, rows * G * sizeof *out);
            if (!out) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", m->path);
            for (uint64_t r = 0; r < rows; r++) {
                const size_t pr = (size_t)e * R + (size_t)hm_gptoss_row(p, r);
                hm_mxfp4_from_ocp((const uint8_t *)x.blocks->data + pr * G * 16,
                                  (const uint8_t *)x.scales->data + pr * G, (int64_t)G,
                                  out + r * G);
            }
            mm->data = out;
        }
        mm->row_bytes = G * sizeof(hm_block_mxfp4);
    } else {
        if ((st = st_type(x.w, &t))) return hm_error_prefix(st, "%s", m->path);
        const size_t es = hm_st_dtype_size(x.w->dtype);
        if (!m->checking) {
            uint8_t *out = own_bytes(m, rows * C * es);
            if (!out) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", m->path);
            const uint8_t *src = (const uint8_t *)x.w->data + (size_t)e * C * R * es;
            for (uint64_t r = 0; r < rows; r++)
                for (size_t c = 0; c < C; c++)
                    memcpy(out + (r * C + c) * es, src + (c * R + hm_gptoss_row(p, r)) * es, es);
            mm->data = out;
        }
        mm->row_bytes = C * es;
    }
    if (e > 0 && t != *type)
        return hm_errorf(HM_ERR_UNSUPPORTED, "%s: layer %u's experts mix types", m->path, il);
    *type = t;
    mm->type = t;
    return HM_OK;
}

/* Routed expert e's bias of projection p of a gpt-oss Hugging Face checkpoint: its row of
 * "gate_up_proj_bias" [E][2I] (gate and up interleaved) or "down_proj_bias" [E][H], as floats */
static hm_status gptoss_expert_bias(hm_model *m, const float **out, uint64_t n, int p, unsigned il,
                                    unsigned e) {
    hm_gptoss_experts x;
    hm_status st = hm_gptoss_experts_find(m->st, m->path, &m->hp, il, p, true, &x);
    uint32_t type = HM_TYPE_F32;
    if (st || (st = st_type(x.bias, &type)) || m->checking) return st;
    float *f = own_floats(m, n);
    if (!f) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", m->path);
    for (uint64_t i = 0; i < n; i++) {
        const size_t at = (size_t)e * (size_t)x.rows_packed + (size_t)hm_gptoss_row(p, i);
        f[i] = type == HM_TYPE_F32    ? ((const float *)x.bias->data)[at]
               : type == HM_TYPE_BF16 ? hm_bf16_to_f32(((const uint16_t *)x.bias->data)[at])
                                      : hm_f16_to_f32(((const uint16_t *)x.bias->data)[at]);
    }
    *out = f;
    return HM_OK;
}

/* The type of MLA's copy of k_b / v_b from a source of type t: F32 and F16 kept exact, bf16
 * otherwise (quantized sources; DeepSeek-V3's copies are 4 GB as floats, 2 GB in 16 bits) */
static uint32_t mla_copy_type(uint32_t t) {
    return t == HM_TYPE_F32 || t == HM_TYPE_F16 ? t : HM_TYPE_BF16;
}

static size_t mla_copy_elem(uint32_t t) {
    return t == HM_TYPE_F32 ? sizeof(float) : sizeof(uint16_t);
}

/* x[n] into elements [at, at + n) of a copy of type t */
static void mla_copy_store(void *dst, uint32_t t, uint64_t at, const float *x, uint64_t n) {
    if (t == HM_TYPE_F32) {
        memcpy((float *)dst + at, x, sizeof(float) * n);
        return;
    }
    uint16_t *b = (uint16_t *)dst + at;
    for (uint64_t i = 0; i < n; i++)
        b[i] = t == HM_TYPE_F16 ? hm_f32_to_f16(x[i]) : hm_f32_to_bf16(x[i]);
}

/* (here rather than in mla.c, whose use of the context would tie the model's loader to it) */
size_t hm_mla_act_room(const hm_hparams *hp) {
    return sizeof(float) * (size_t)(hp->kv_lora_rank + 64);
}

/* The split attn_k_b (nh heads of kvl rows of nope) and attn_v_b (nh heads of vd rows of kvl) as
 * two quantized matrices of stacked heads (L->k_bq, L->v_bq), where both are of a quantized type
 * with CPU kernels, whole blocks per row and activations that fit mla.c's scratch row; else
 * neither (rows 0) and mla.c uses the copies. */
static hm_status bind_mla_quant(hm_model *m, hm_layer *L, const tview *kb, const tview *vb) {
    const hm_hparams *hp = &m->hp;
    const uint64_t nh = hp->n_heads, kvl = hp->kv_lora_rank, nope = hp->qk_nope_head_dim,
                   vd = hp->v_head_dim;
    const tview *v[2] = {kb, vb};
    const uint64_t rows[2] = {nh * kvl, nh * vd}, cols[2] = {nope, kvl};
    hm_matrix *out[2] = {&L->k_bq, &L->v_bq};
    const void *base[2];
    for (int i = 0; i < 2; i++) {
        const uint32_t t = v[i]->type;
        uint64_t rb, ab;
        if (t == HM_TYPE_F32 || t == HM_TYPE_F16 || t == HM_TYPE_BF16 ||
            hm_kernel_check(t, v[i]->name) != HM_OK || !hm_type_row_bytes(t, cols[i], &rb) ||
            !hm_type_row_bytes(hm_act_type(t), cols[i], &ab) ||
            hm_act_bytes(t, (int64_t)cols[i]) > hm_mla_act_room(hp)) {
            hm_error_clear();
            return HM_OK;
        }
        base[i] = aligned_data(m, v[i], v[i]->data, (size_t)rb * (size_t)rows[i]);
        if (!base[i]) return HM_ERR_NO_MEMORY;
    }
    hm_matrix k, vv;
    hm_status st = hm_matrix_init(&k, kb->type, base[0], (int64_t)rows[0], (int64_t)cols[0]);
    if (!st) st = hm_matrix_init(&vv, vb->type, base[1], (int64_t)rows[1], (int64_t)cols[1]);
    if (st) {
        hm_error_clear();
        return HM_OK;
    }
    *out[0] = k, *out[1] = vv;
    return HM_OK;
}

/* HMOE_MLA_QUANT=0: the copies are built and used even where the file's split tensors are bound
 * (A/B of mla.c's two paths), read once */
static bool mla_copies_forced(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("HMOE_MLA_QUANT");
        on = e && !strcmp(e, "0");
    }
    return on;
}

/* Head h of the copies (hm_layer's layouts): k_b[h] [nope][kv_lora] from kr, the file's
 * [kv_lora][nope] rows transposed (kr NULL: head already holds [nope][kv_lora]), and v_b[h]
 * [kv_lora][v] from vr's [v][kv_lora] rows; head is scratch of nope * kv_lora and kv_lora * v */
static void mla_store_head(void *kc, uint32_t kt, void *vc, uint32_t vt, uint64_t h, uint64_t nope,
                           uint64_t kvl, uint64_t vd, const float *kr, const float *vr,
                           float *head) {
    if (kr)
        for (uint64_t j = 0; j < kvl; j++)
            for (uint64_t r = 0; r < nope; r++) head[r * kvl + j] = kr[j * nope + r];
    mla_copy_store(kc, kt, h * nope * kvl, head, nope * kvl);
    for (uint64_t d = 0; d < vd; d++)
        for (uint64_t j = 0; j < kvl; j++) head[j * vd + d] = vr[d * kvl + j];
    mla_copy_store(vc, vt, h * kvl * vd, head, kvl * vd);
}

hm_status hm_model_mla_copies(const hm_model *m, int il, void **k_b, uint32_t *kt, void **v_b,
                              uint32_t *vt) {
    const hm_hparams *hp = &m->hp;
    const hm_layer *L = &m->layers[il];
    const uint64_t nh = hp->n_heads, kvl = hp->kv_lora_rank, nope = hp->qk_nope_head_dim,
                   vd = hp->v_head_dim;
    *k_b = *v_b = NULL;
    if (!L->k_bq.rows || !L->v_bq.rows)
        return hm_errorf(HM_ERR_INTERNAL, "%s: layer %d has no split attn_k_b / attn_v_b", m->path,
                         il);
    *kt = mla_copy_type(L->k_bq.type), *vt = mla_copy_type(L->v_bq.type);
    const uint64_t most = (nope > vd ? nope : vd) * kvl;
    void *kc = malloc(mla_copy_elem(*kt) * nh * nope * kvl);
    void *vc = malloc(mla_copy_elem(*vt) * nh * kvl * vd);
    float *kr = malloc(sizeof(float) * 3 * most), *vr = kr ? kr + most : NULL,
          *head = kr ? kr + 2 * most : NULL;
    hm_status st =
        kc && vc && kr ? HM_OK : hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", m->path);
    for (uint64_t h = 0; h < nh && !st; h++) {
        /* k_bq's head h: kvl rows of nope; v_bq's: vd rows of kvl */
        for (uint64_t j = 0; j < kvl && !st; j++)
            st = hm_dequantize_row(
                L->k_bq.type, (const uint8_t *)L->k_bq.data + (h * kvl + j) * L->k_bq.row_bytes,
                kr + j * nope, (int64_t)nope);
        for (uint64_t d = 0; d < vd && !st; d++)
            st = hm_dequantize_row(L->v_bq.type,
                                   (const uint8_t *)L->v_bq.data + (h * vd + d) * L->v_bq.row_bytes,
                                   vr + d * kvl, (int64_t)kvl);
        if (!st) mla_store_head(kc, *kt, vc, *vt, h, nope, kvl, vd, kr, vr, head);
    }
    free(kr);
    if (st) {
        free(kc), free(vc);
        return st;
    }
    *k_b = kc, *v_b = vc;
    return HM_OK;
}

/* MLA's attention tensors (model.h): q (or its low-rank pair), the latent's projection and norm,
 * and per head the key's up-projection transposed and the value's, as 32- or 16-bit copies: from
 * llama.cpp's split attn_k_b / attn_v_b, or from one kv_b ([heads * (nope + v)][kv_lora]: HF's
 * kv_b_proj, older GGUFs' attn_kv_b). */
static hm_status bind_mla(hm_model *m, hm_layer *L, unsigned il) {
    const hm_hparams *hp = &m->hp;
    const uint64_t H = hp->hidden, nh = hp->n_heads, hd = hp->head_dim, kvl = hp->kv_lora_rank;
    const uint64_t rope = hp->qk_rope_head_dim, nope = hp->qk_nope_head_dim, vd = hp->v_head_dim;
    hm_status st;
    if (hp->attn_bias)
        return hm_errorf(HM_ERR_UNSUPPORTED, "%s: MLA with attention biases is not supported",
                         m->path);
    if (hp->q_lora_rank) {
        const uint64_t ql = hp->q_lora_rank;
        if ((st = bind_mat(m, &L->wq_a, ql, H, "blk.%u.attn_q_a.weight", il)) ||
            (st = bind_vec(m, &L->q_a_norm, ql, "blk.%u.attn_q_a_norm.weight", il)) ||
            (st = bind_mat(m, &L->wq_b, nh * hd, ql, "blk.%u.attn_q_b.weight", il)))
            return st;
    } else if ((st = bind_mat(m, &L->wq, nh * hd, H, "blk.%u.attn_q.weight", il))) {
        return st;
    }
    if ((st = bind_mat(m, &L->wkv_a, kvl + rope, H, "blk.%u.attn_kv_a_mqa.weight", il)) ||
        (st = bind_vec(m, &L->kv_a_norm, kvl, "blk.%u.attn_kv_a_norm.weight", il)) ||
        (st = bind_mat(m, &L->wo, H, nh * vd, "blk.%u.attn_output.weight", il)))
        return st;
    tview kb, vb, kv;
    const bool split = is_gguf(m) && find(m, false, &kb, "blk.%u.attn_k_b.weight", il, 0) == HM_OK;
    if (split) {
        if ((st = check_shape(m, &kb, nope, kvl, nh)) ||
            (st = find(m, true, &vb, "blk.%u.attn_v_b.weight", il, 0)) ||
            (st = check_shape(m, &vb, kvl, vd, nh)))
            return st;
    } else {
        hm_error_clear();
        if ((st = find(m, true, &kv, "blk.%u.attn_kv_b.weight", il, 0)) ||
            (st = check_shape(m, &kv, kvl, nh * (nope + vd), 1)))
            return st;
    }
    if (m->checking) return HM_OK;
    if (split && (st = bind_mla_quant(m, L, &kb, &vb))) return st;
    /* the CPU multiplies the bound tensors themselves: no copies (a GPU backend builds its own,
     * hm_model_mla_copies) */
    if (L->k_bq.rows && !mla_copies_forced()) return HM_OK;
    /* k_b[h] [nope][kv_lora] (the key's up-projection as HF stores it) and v_b[h] [kv_lora][v]
     * (the value's, transposed): both read row by row in mla.c's inner loops, every token */
    const uint32_t kt = mla_copy_type(split ? kb.type : kv.type);
    const uint32_t vt = mla_copy_type(split ? vb.type : kv.type);
    const uint64_t most = (nope > vd ? nope : vd) * kvl;
    void *k_b = own_bytes(m, mla_copy_elem(kt) * nh * nope * kvl);
    void *v_b = own_bytes(m, mla_copy_elem(vt) * nh * kvl * vd);
    float *kr = malloc(sizeof(float) * 3 * most), *vr = kr ? kr + most : NULL,
          *head = kr ? kr + 2 * most : NULL;
    if (!k_b || !v_b || !kr) {
        free(kr);
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", m->path);
    }
    for (uint64_t h = 0; h < nh && !st; h++) {
        if (split) { /* llama.cpp: attn_k_b[h] [kv_lora][nope], attn_v_b[h] [v][kv_lora] */
            if ((st = rows_f32(m, &kb, nope, h * kvl, kvl, kr)) ||
                (st = rows_f32(m, &vb, kvl, h * vd, vd, vr)))
                break;
            mla_store_head(k_b, kt, v_b, vt, h, nope, kvl, vd, kr, vr, head);
        } else { /* kv_b [heads * (nope + v)][kv_lora]: k's rows are k_b[h] as it is */
            const uint64_t r0 = h * (nope + vd);
            if ((st = rows_f32(m, &kv, kvl, r0, nope, head)) ||
                (st = rows_f32(m, &kv, kvl, r0 + nope, vd, vr)))
                break;
            mla_store_head(k_b, kt, v_b, vt, h, nope, kvl, vd, NULL, vr, head);
        }
    }
    free(kr);
    if (st) return st;
    L->k_b_type = kt, L->v_b_type = vt;
    L->k_b = k_b, L->v_b = v_b;
    return HM_OK;
}

static hm_status bind_qwen3moe(hm_model *m) {
    const hm_hparams *hp = &m->hp;
    const uint64_t H = hp->hidden, V = hp->vocab_size, hd = hp->head_dim;
    const uint64_t nq = (uint64_t)hp->n_heads * hd, nkv = (uint64_t)hp->n_kv_heads * hd;
    hm_status st;
    if ((st = bind_mat(m, &m->tok_embd, V, H, "token_embd.weight", 0))) return st;
    if (!hm_dequantize_supported(m->tok_embd.type))
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "%s: token embeddings have type %s, which hmoe cannot read", m->path,
                         hm_type_name(m->tok_embd.type));
    if ((st = bind_vec(m, &m->output_norm, H, "output_norm.weight", 0))) return st;
    if (hp->tie_embeddings) {
        m->output = m->tok_embd;
    } else if ((st = bind_mat(m, &m->output, V, H, "output.weight", 0))) {
        return st;
    }
    if (!m->layers) m->layers = calloc(hp->n_layers, sizeof *m->layers); /* kept from the check */
    if (!m->layers) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", m->path);
    for (unsigned il = 0; il < hp->n_layers; il++) {
        hm_layer *L = &m->layers[il];
        if ((st = bind_vec(m, &L->attn_norm, H, "blk.%u.attn_norm.weight", il)) ||
            (st = bind_vec(m, &L->ffn_norm, H,
                           hp->arch == HM_ARCH_GLM4MOE || hp->arch == HM_ARCH_GPTOSS
                               ? "blk.%u.post_attention_norm.weight"
                               : "blk.%u.ffn_norm.weight",
                           il)))
            return st;
        if (hp->kv_lora_rank) {
            if ((st = bind_mla(m, L, il))) return st;
        } else if ((st = bind_mat(m, &L->wq, nq, H, "blk.%u.attn_q.weight", il)) ||
                   (st = bind_mat(m, &L->wk, nkv, H, "blk.%u.attn_k.weight", il)) ||
                   (st = bind_mat(m, &L->wv, nkv, H, "blk.%u.attn_v.weight", il)) ||
                   (st = bind_mat(m, &L->wo, H, nq, "blk.%u.attn_output.weight", il)))
            return st;
        if (hp->qk_norm && ((st = bind_vec(m, &L->q_norm, hd, "blk.%u.attn_q_norm.weight", il)) ||
                            (st = bind_vec(m, &L->k_norm, hd, "blk.%u.attn_k_norm.weight", il))))
            return st;
        if (hp->attn_bias && ((st = bind_vec(m, &L->bq, nq, "blk.%u.attn_q.bias", il)) ||
                              (st = bind_vec(m, &L->bk, nkv, "blk.%u.attn_k.bias", il)) ||
                              (st = bind_vec(m, &L->bv, nkv, "blk.%u.attn_v.bias", il))))
            return st;
        if ((hp->attn_out_bias && !hp->kv_lora_rank &&
             (st = bind_vec(m, &L->bo, H, "blk.%u.attn_output.bias", il))) ||
            (hp->attn_sinks &&
             (st = bind_vec(m, &L->sinks, hp->n_heads, "blk.%u.attn_sinks.weight", il))))
            return st;
        L->moe = hm_hparams_layer_is_moe(hp, il);
        if (!L->moe) {
            const uint64_t F = hp->ffn_inter;
            if ((st = bind_mat(m, &L->ffn_gate, F, H, "blk.%u.ffn_gate.weight", il)) ||
                (st = bind_mat(m, &L->ffn_up, F, H, "blk.%u.ffn_up.weight", il)) ||
                (st = bind_mat(m, &L->ffn_down, H, F, "blk.%u.ffn_down.weight", il)))
                return st;
            continue;
        }
        const uint64_t E = hp->n_experts, FE = hp->moe_inter;
        if ((st = bind_mat(m, &L->router, E, H, "blk.%u.ffn_gate_inp.weight", il))) return st;
        if (hp->score_correction_bias &&
            (st = bind_vec(m, &L->exp_bias, E, "blk.%u.exp_probs_b.bias", il)))
            return st;
        if (hp->router_bias && (st = bind_vec(m, &L->router_b, E, "blk.%u.ffn_gate_inp.bias", il)))
            return st;
        if (hp->n_shared_experts && hp->shared_inter) {
            const uint64_t SF = hp->shared_inter;
            if ((st = bind_mat(m, &L->sh_gate, SF, H, "blk.%u.ffn_gate_shexp.weight", il)) ||
                (st = bind_mat(m, &L->sh_up, SF, H, "blk.%u.ffn_up_shexp.weight", il)) ||
                (st = bind_mat(m, &L->sh_down, H, SF, "blk.%u.ffn_down_shexp.weight", il)) ||
                (hp->shared_gate &&
                 (st = bind_vec(m, &L->sh_inp, H, "blk.%u.ffn_gate_inp_shexp.weight", il))))
                return st;
        }
        if (!L->experts) L->experts = calloc(E, sizeof *L->experts);
        if (!L->experts) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", m->path);
        const bool oss_hf = hp->arch == HM_ARCH_GPTOSS && !is_gguf(m);
        for (unsigned e = 0; e < E && oss_hf; e++) {
            hm_moe_expert *x = &L->experts[e];
            if ((st = gptoss_expert(m, &x->gate, &L->expert_type[0], FE, HM_GPTOSS_GATE, il, e)) ||
                (st = gptoss_expert(m, &x->up, &L->expert_type[1], FE, HM_GPTOSS_UP, il, e)) ||
                (st = gptoss_expert(m, &x->down, &L->expert_type[2], H, HM_GPTOSS_DOWN, il, e)) ||
                (st = gptoss_expert_bias(m, &x->gate_bias, FE, HM_GPTOSS_GATE, il, e)) ||
                (st = gptoss_expert_bias(m, &x->up_bias, FE, HM_GPTOSS_UP, il, e)) ||
                (st = gptoss_expert_bias(m, &x->down_bias, H, HM_GPTOSS_DOWN, il, e)))
                return st;
        }
        for (unsigned e = 0; e < E && !oss_hf; e++) {
            hm_moe_expert *x = &L->experts[e];
            if ((st = bind_expert(m, &x->gate, &L->expert_type[0], FE, H,
                                  "blk.%u.ffn_gate_exps.weight", il, e)) ||
                (st = bind_expert(m, &x->up, &L->expert_type[1], FE, H, "blk.%u.ffn_up_exps.weight",
                                  il, e)) ||
                (st = bind_expert(m, &x->down, &L->expert_type[2], H, FE,
                                  "blk.%u.ffn_down_exps.weight", il, e)))
                return st;
            if (hp->expert_bias &&
                ((st =
                      bind_expert_bias(m, &x->gate_bias, FE, "blk.%u.ffn_gate_exps.bias", il, e)) ||
                 (st = bind_expert_bias(m, &x->up_bias, FE, "blk.%u.ffn_up_exps.bias", il, e)) ||
                 (st = bind_expert_bias(m, &x->down_bias, H, "blk.%u.ffn_down_exps.bias", il, e))))
                return st;
        }
        if (hm_act_type(L->expert_type[0]) != hm_act_type(L->expert_type[1]))
            return hm_errorf(HM_ERR_UNSUPPORTED,
                             "%s: layer %u: the experts' gate (%s) and up (%s) projections need "
                             "different activation types (they are computed together)",
                             m->path, il, hm_type_name(L->expert_type[0]),
                             hm_type_name(L->expert_type[1]));
    }
    return HM_OK;
}

hm_model_params hm_model_default_params(void) {
    hm_model_params p = {HM_LOAD_AUTO, 0};
    return p;
}

bool hm_model_copied(const hm_model *m) {
    return m->copy.ptr != NULL;
}

int32_t hm_model_n_vocab(const hm_model *m) {
    return (int32_t)m->hp.vocab_size;
}
int hm_model_n_layers(const hm_model *m) {
    return (int)m->hp.n_layers;
}
int hm_model_n_ctx_train(const hm_model *m) {
    return (int)m->hp.max_ctx;
}
const char *hm_model_arch(const hm_model *m) {
    return m->hp.model_type;
}

static uint64_t mat_bytes(const hm_matrix *w) {
    return (uint64_t)w->rows * w->row_bytes;
}

/* one routed expert of layer L: gate, up and down */
static uint64_t expert_bytes(const hm_hparams *hp, const hm_layer *L) {
    uint64_t b = 0, r;
    if (hm_type_row_bytes(L->expert_type[0], hp->hidden, &r)) b += r * hp->moe_inter;
    if (hm_type_row_bytes(L->expert_type[1], hp->hidden, &r)) b += r * hp->moe_inter;
    if (hm_type_row_bytes(L->expert_type[2], hp->moe_inter, &r)) b += r * hp->hidden;
    return b;
}

void hm_model_get_info(const hm_model *m, hm_model_info *out) {
    const hm_hparams *hp = &m->hp;
    memset(out, 0, sizeof *out);
    out->arch = hp->model_type;
    out->n_layers = (int)hp->n_layers, out->hidden = (int)hp->hidden;
    out->n_experts = (int)hp->n_experts, out->n_experts_used = (int)hp->n_experts_used;
    out->moe_inter = (int)hp->moe_inter, out->n_vocab = (int32_t)hp->vocab_size;
    out->expert_type =
        hp->n_layers ? hm_type_name(m->layers[hp->n_layers - 1].expert_type[0]) : "?";
    out->decode_dense_bytes = mat_bytes(&m->output);
    for (uint32_t il = 0; il < hp->n_layers; il++) {
        const hm_layer *L = &m->layers[il];
        out->decode_dense_bytes +=
            mat_bytes(&L->wq) + mat_bytes(&L->wk) + mat_bytes(&L->wv) + mat_bytes(&L->wo);
        if (L->moe) {
            out->decode_dense_bytes += mat_bytes(&L->router) + mat_bytes(&L->sh_gate) +
                                       mat_bytes(&L->sh_up) + mat_bytes(&L->sh_down);
            out->decode_expert_bytes += expert_bytes(hp, L) * hp->n_experts_used;
        } else {
            out->decode_dense_bytes +=
                mat_bytes(&L->ffn_gate) + mat_bytes(&L->ffn_up) + mat_bytes(&L->ffn_down);
        }
    }
}

/* ---------------------------------------------------------------- copy into huge pages */

/* A mapped byte range the weights live in (the GGUF's tensor data, or one safetensors shard). */
typedef struct region {
    const uint8_t *lo, *hi;
    size_t off; /* where it starts in the copy */
} region;

typedef struct copy_job {
    const region *r;
    size_t n;
    uint8_t *dst;
    size_t total;
} copy_job;

static void copy_task(int ith, int nth, void *arg) {
    copy_job *j = arg;
    /* every thread copies (and first-touches) an equal slice of the destination */
    size_t a = j->total * (size_t)ith / (size_t)nth, b = j->total * (size_t)(ith + 1) / (size_t)nth;
    for (size_t i = 0; i < j->n; i++) {
        size_t r0 = j->r[i].off, r1 = r0 + (size_t)(j->r[i].hi - j->r[i].lo);
        size_t s = a > r0 ? a : r0, e = b < r1 ? b : r1;
        if (s < e) memcpy(j->dst + s, j->r[i].lo + (s - r0), e - s);
    }
}

static const void *rebase(const region *r, size_t n, uint8_t *dst, const void *p) {
    const uint8_t *q = p;
    for (size_t i = 0; i < n; i++)
        if (q >= r[i].lo && q < r[i].hi) return dst + r[i].off + (size_t)(q - r[i].lo);
    return p; /* not inside the file: an owned copy */
}

static hm_status copy_weights(hm_model *m, const hm_model_params *p) {
    region *r = NULL;
    size_t n = 0;
    if (m->gguf) {
        const uint8_t *lo = NULL, *hi = NULL;
        for (uint64_t i = 0; i < hm_gguf_n_tensors(m->gguf); i++) {
            const hm_gguf_tensor *t = hm_gguf_tensor_at(m->gguf, i);
            if (!t->bytes) continue;
            if (!lo || t->data < lo) lo = t->data;
            if (!hi || t->data + t->bytes > hi) hi = t->data + t->bytes;
        }
        if (!lo) return HM_OK;
        r = calloc(1, sizeof *r);
        if (!r) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", m->path);
        r[0] = (region){lo, hi, 0};
        n = 1;
    } else {
        n = hm_st_n_shards(m->st);
        r = calloc(n ? n : 1, sizeof *r);
        if (!r) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", m->path);
        size_t off = 0;
        for (size_t i = 0; i < n; i++) {
            const hm_st_shard *sh = hm_st_shard_at(m->st, i);
            r[i] = (region){sh->base, sh->base + sh->size, off};
            off += ((size_t)sh->size + 63) & ~(size_t)63;
        }
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t e = r[i].off + (size_t)(r[i].hi - r[i].lo);
        if (e > total) total = e;
    }
    if (p->load == HM_LOAD_AUTO && m->fp8_bytes) {
        /* the FP8 weights already live in their FP8_B128 copies: a copy of the file would hold
         * them twice (--load copy still copies) */
        hm_log(HM_LOG_INFO,
               "%s: FP8 weights bound as FP8_B128 copies (%.1f GB); the file stays "
               "mapped",
               m->path, (double)m->fp8_bytes * 1e-9);
        free(r);
        return HM_OK;
    }
    if (p->load == HM_LOAD_AUTO) {
        hm_mem_info mi;
        const uint64_t mem = hm_mem_info_get(&mi) == HM_OK ? mi.total : 0;
        if (!mem || (uint64_t)total > mem / 4 * 3) {
            free(r);
            return HM_OK;
        }
    }
    hm_status st = hm_large_alloc(total, true, "model weights", &m->copy);
    if (st) {
        free(r);
        return st;
    }
    hm_pool_params pp = hm_pool_default_params();
    pp.n_threads = p->n_threads;
    hm_pool *pool = NULL;
    if ((st = hm_pool_create(&pp, &pool))) {
        free(r);
        return st;
    }
    copy_job j = {r, n, m->copy.ptr, total};
    hm_pool_run(pool, copy_task, &j);
    hm_pool_free(pool);
    uint8_t *d = m->copy.ptr;
#define RB(mat) (mat).data = rebase(r, n, d, (mat).data)
    RB(m->tok_embd);
    RB(m->output);
    for (uint32_t il = 0; il < m->hp.n_layers; il++) {
        hm_layer *L = &m->layers[il];
        RB(L->wq), RB(L->wk), RB(L->wv), RB(L->wo), RB(L->router);
        RB(L->ffn_gate), RB(L->ffn_up), RB(L->ffn_down);
        RB(L->sh_gate), RB(L->sh_up), RB(L->sh_down);
        RB(L->wq_a), RB(L->wq_b), RB(L->wkv_a);
        if (L->experts)
            for (uint32_t e = 0; e < m->hp.n_experts; e++)
                RB(L->experts[e].gate), RB(L->experts[e].up), RB(L->experts[e].down);
    }
#undef RB
    free(r);
    HM_INFO("%s: weights copied into %.2f GB of anonymous memory", m->path, (double)total * 1e-9);
    return HM_OK;
}

hm_status hm_model_load(const char *path, hm_model **out) {
    return hm_model_load_ex(path, NULL, out);
}

/* the architecture has a layer builder (model/arch/registry.h) */
static bool arch_runs(const hm_hparams *hp) {
    const hm_arch_desc *d = hm_arch_desc_get(hp->arch);
    return d && d->build;
}

hm_status hm_model_load_ex(const char *path, const hm_model_params *params, hm_model **out) {
    *out = NULL;
    hm_model_params mp = params ? *params : hm_model_default_params();
    if (!path || !*path) return hm_errorf(HM_ERR_INVALID_ARG, "model: no path given");
    hm_model *m = calloc(1, sizeof *m);
    if (!m) return hm_errorf(HM_ERR_NO_MEMORY, "model: out of memory");
    snprintf(m->path, sizeof m->path, "%s", path);
    hm_status st;
    struct stat sb;
    size_t plen = strlen(path);
    const bool found = stat(path, &sb) == 0;
    bool gguf = found && S_ISREG(sb.st_mode) && !(plen >= 5 && !strcmp(path + plen - 5, ".json"));
    if (found && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode)) { /* a FIFO: never opened */
        st = hm_errorf(HM_ERR_INVALID_ARG,
                       "%s: not a model (a .gguf file or a Hugging Face directory): not a regular "
                       "file or directory",
                       path);
        goto fail;
    }
    if (gguf) {
        if ((st = hm_gguf_open(path, &m->gguf)) || (st = hm_hparams_from_gguf(m->gguf, &m->hp)))
            goto fail;
    } else {
        /* a directory, or its config.json */
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", path);
        if (plen >= 5 && !strcmp(path + plen - 5, ".json")) {
            char *slash = strrchr(dir, '/');
            if (slash)
                *slash = '\0';
            else
                snprintf(dir, sizeof dir, ".");
        }
        if ((st = hm_hparams_from_hf_config(dir, &m->hp))) goto fail;
        if (!arch_runs(&m->hp)) { /* say so before looking for weights */
            st = hm_errorf(HM_ERR_UNSUPPORTED,
                           "%s: architecture '%s' can be inspected (hmoe info) but not run yet "
                           "(runs: %s)",
                           path, m->hp.model_type, hm_arch_list(HM_ARCH_RUNS));
            goto fail;
        }
        if ((st = hm_st_open(dir, &m->st))) goto fail;
    }
    if (!arch_runs(&m->hp)) {
        st = hm_errorf(HM_ERR_UNSUPPORTED,
                       "%s: architecture '%s' can be inspected but not run yet (runs: %s)", path,
                       m->hp.model_type, hm_arch_list(HM_ARCH_RUNS));
        goto fail;
    }
    /* two passes: the first checks every tensor's presence, type and shape without reading a
     * byte of weights, so a bad tensor anywhere fails before the FP8 conversions and copies */
    m->checking = true;
    st = bind_qwen3moe(m);
    m->checking = false;
    if (st || (st = bind_qwen3moe(m))) goto fail;
    if (m->realigned_bytes)
        HM_WARN("%s: %.1f MB of misaligned weights copied", path,
                (double)m->realigned_bytes * 1e-6);
    if (mp.load != HM_LOAD_MMAP && (st = copy_weights(m, &mp))) goto fail;
    *out = m;
    return HM_OK;
fail:
    hm_model_free(m);
    return st;
}

void hm_model_free(hm_model *m) {
    if (!m) return;
    if (m->layers) {
        for (uint32_t il = 0; il < m->hp.n_layers; il++) free(m->layers[il].experts);
        free(m->layers);
    }
    for (size_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    hm_large_free(&m->copy);
    hm_gguf_close(m->gguf);
    hm_st_close(m->st);
    free(m);
}
