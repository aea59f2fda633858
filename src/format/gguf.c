/* gguf.c - strict GGUF reader (every count, size and offset checked against the file before use)
 * and streaming writer. */
#include "format/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/mmap.h"

struct hm_gguf {
    char *name;
    hm_mapped_file map; /* empty when parsing caller memory */
    const uint8_t *base;
    uint64_t size;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    uint64_t n_kv, n_tensors;
    hm_gguf_kv *kvs;
    hm_gguf_tensor *tensors;
    uint64_t *kv_order;     /* indices sorted by key */
    uint64_t *tensor_order; /* indices sorted by name */
    hm_arena arena;         /* nested array tables */
};

static const char *const vtype_names[HM_GGUF_VTYPE_COUNT] = {
    "uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
    "bool",  "string", "array",  "uint64", "int64",  "float64"};

const char *hm_gguf_vtype_name(uint32_t t) {
    return t < HM_GGUF_VTYPE_COUNT ? vtype_names[t] : "?";
}

size_t hm_gguf_vtype_size(uint32_t t) {
    switch (t) {
    case HM_GGUF_UINT8:
    case HM_GGUF_INT8:
    case HM_GGUF_BOOL:
        return 1;
    case HM_GGUF_UINT16:
    case HM_GGUF_INT16:
        return 2;
    case HM_GGUF_UINT32:
    case HM_GGUF_INT32:
    case HM_GGUF_FLOAT32:
        return 4;
    case HM_GGUF_UINT64:
    case HM_GGUF_INT64:
    case HM_GGUF_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

bool hm_gguf_str_eq(hm_gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

/* ---------------------------------------------------------------- parsing */

typedef struct cursor {
    const uint8_t *p;
    uint64_t size, pos;
    const char *name;
    hm_arena *arena;
} cursor;

static hm_status truncated(cursor *c, const char *what, uint64_t need) {
    return hm_errorf(HM_ERR_FORMAT,
                     "%s: truncated at offset %llu reading %s (need %llu bytes, %llu left)",
                     c->name, (unsigned long long)c->pos, what, (unsigned long long)need,
                     (unsigned long long)(c->size - c->pos));
}

static hm_status take(cursor *c, uint64_t n, const char *what, const uint8_t **out) {
    if (n > c->size - c->pos) return truncated(c, what, n);
    *out = c->p + c->pos;
    c->pos += n;
    return HM_OK;
}

static hm_status rd_u32(cursor *c, const char *what, uint32_t *v) {
    const uint8_t *q = NULL;
    hm_status st = take(c, 4, what, &q);
    if (st == HM_OK) memcpy(v, q, 4);
    return st;
}

static hm_status rd_u64(cursor *c, const char *what, uint64_t *v) {
    const uint8_t *q = NULL;
    hm_status st = take(c, 8, what, &q);
    if (st == HM_OK) memcpy(v, q, 8);
    return st;
}

static hm_status rd_str(cursor *c, const char *what, hm_gguf_str *s) {
    uint64_t at = c->pos, len;
    hm_status st = rd_u64(c, what, &len);
    if (st != HM_OK) return st;
    if (len > c->size - c->pos)
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: %s at offset %llu has length %llu but only %llu bytes remain",
                         c->name, what, (unsigned long long)at, (unsigned long long)len,
                         (unsigned long long)(c->size - c->pos));
    s->ptr = (const char *)c->p + c->pos;
    s->len = len;
    c->pos += len;
    return HM_OK;
}

static uint64_t load_le(const uint8_t *q, size_t n) {
    uint64_t v = 0;
    memcpy(&v, q, n); /* little-endian host (x86-64) */
    return v;
}

static void decode_scalar(hm_gguf_vtype t, const uint8_t *q, hm_gguf_value *v) {
    switch (t) {
    case HM_GGUF_UINT8:
    case HM_GGUF_UINT16:
    case HM_GGUF_UINT32:
    case HM_GGUF_UINT64:
        v->v.u = load_le(q, hm_gguf_vtype_size(t));
        break;
    case HM_GGUF_INT8:
        v->v.i = (int8_t)q[0];
        break;
    case HM_GGUF_INT16:
        v->v.i = (int16_t)load_le(q, 2);
        break;
    case HM_GGUF_INT32:
        v->v.i = (int32_t)load_le(q, 4);
        break;
    case HM_GGUF_INT64:
        v->v.i = (int64_t)load_le(q, 8);
        break;
    case HM_GGUF_FLOAT32: {
        float f;
        memcpy(&f, q, 4);
        v->v.f = f;
        break;
    }
    case HM_GGUF_FLOAT64:
        memcpy(&v->v.f, q, 8);
        break;
    case HM_GGUF_BOOL:
        v->v.b = q[0] != 0;
        break;
    default:
        break;
    }
}

static hm_status parse_value(cursor *c, hm_gguf_vtype t, int depth, const char *what,
                             hm_gguf_value *v);

static hm_status parse_array(cursor *c, int depth, const char *what, hm_gguf_value *v) {
    uint64_t at = c->pos;
    uint32_t et;
    uint64_t n;
    hm_status st = rd_u32(c, "array element type", &et);
    if (st == HM_OK) st = rd_u64(c, "array length", &n);
    if (st != HM_OK) return hm_error_prefix(st, "%s", what);
    if (et >= HM_GGUF_VTYPE_COUNT)
        return hm_errorf(HM_ERR_FORMAT, "%s: %s: array at offset %llu has unknown element type %u",
                         c->name, what, (unsigned long long)at, et);
    if (et == HM_GGUF_ARRAY && depth + 1 >= HM_GGUF_MAX_DEPTH)
        return hm_errorf(HM_ERR_FORMAT, "%s: %s: arrays nested deeper than %d at offset %llu",
                         c->name, what, HM_GGUF_MAX_DEPTH, (unsigned long long)at);
    /* smallest encoding of one element bounds n before anything is allocated */
    uint64_t min = et == HM_GGUF_STRING ? 8 : et == HM_GGUF_ARRAY ? 12 : hm_gguf_vtype_size(et);
    uint64_t left = c->size - c->pos;
    if (n > left / min)
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: %s: array at offset %llu claims %llu %s elements but only %llu bytes "
                         "remain",
                         c->name, what, (unsigned long long)at, (unsigned long long)n,
                         hm_gguf_vtype_name(et), (unsigned long long)left);
    v->arr_type = (hm_gguf_vtype)et;
    v->arr_n = n;
    v->arr_raw = c->p + c->pos;
    if (et != HM_GGUF_STRING && et != HM_GGUF_ARRAY) {
        c->pos += n * min;
        if (et == HM_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (v->arr_raw[i] > 1)
                    return hm_errorf(HM_ERR_FORMAT,
                                     "%s: %s: bool array element %llu is %u, not 0/1", c->name,
                                     what, (unsigned long long)i, v->arr_raw[i]);
        return HM_OK;
    }
    if (et == HM_GGUF_STRING) {
        v->arr_strs = hm_arena_alloc(c->arena, n * sizeof(hm_gguf_str), 8);
        if (!v->arr_strs && n)
            return hm_errorf(HM_ERR_NO_MEMORY, "%s: %s: out of memory", c->name, what);
        for (uint64_t i = 0; i < n; i++) {
            st = rd_str(c, "array string", &v->arr_strs[i]);
            if (st != HM_OK) return hm_error_prefix(st, "%s[%llu]", what, (unsigned long long)i);
        }
        return HM_OK;
    }
    v->arr_items = hm_arena_alloc(c->arena, n * sizeof(hm_gguf_value), 8);
    if (!v->arr_items && n)
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: %s: out of memory", c->name, what);
    for (uint64_t i = 0; i < n; i++) {
        memset(&v->arr_items[i], 0, sizeof v->arr_items[i]);
        st = parse_value(c, HM_GGUF_ARRAY, depth + 1, what, &v->arr_items[i]);
        if (st != HM_OK) return st;
    }
    return HM_OK;
}

static hm_status parse_value(cursor *c, hm_gguf_vtype t, int depth, const char *what,
                             hm_gguf_value *v) {
    v->type = t;
    v->raw = c->p + c->pos;
    uint64_t start = c->pos;
    hm_status st;
    if (t == HM_GGUF_STRING) {
        st = rd_str(c, what, &v->v.s);
    } else if (t == HM_GGUF_ARRAY) {
        st = parse_array(c, depth, what, v);
    } else {
        const uint8_t *q = NULL;
        st = take(c, hm_gguf_vtype_size(t), what, &q);
        if (st == HM_OK) {
            decode_scalar(t, q, v);
            if (t == HM_GGUF_BOOL && q[0] > 1)
                st = hm_errorf(HM_ERR_FORMAT, "%s: %s: bool at offset %llu is %u, not 0/1", c->name,
                               what, (unsigned long long)start, q[0]);
        }
    }
    v->raw_len = c->pos - start;
    return st;
}

static int cmp_str(const char *a, uint64_t al, const char *b, uint64_t bl) {
    int r = memcmp(a, b, al < bl ? al : bl);
    return r ? r : (al > bl) - (al < bl);
}

/* index sorts over a handle's tables (glibc qsort_r: the comparator gets the handle) */
static int cmp_kv_idx(const void *a, const void *b, void *ctx) {
    const hm_gguf *g = ctx;
    const hm_gguf_kv *x = &g->kvs[*(const uint64_t *)a];
    const hm_gguf_kv *y = &g->kvs[*(const uint64_t *)b];
    return cmp_str(x->key.ptr, x->key.len, y->key.ptr, y->key.len);
}
static int cmp_tensor_idx(const void *a, const void *b, void *ctx) {
    const hm_gguf *g = ctx;
    return strcmp(g->tensors[*(const uint64_t *)a].name, g->tensors[*(const uint64_t *)b].name);
}
static int cmp_tensor_off(const void *a, const void *b, void *ctx) {
    const hm_gguf *g = ctx;
    uint64_t x = g->tensors[*(const uint64_t *)a].offset,
             y = g->tensors[*(const uint64_t *)b].offset;
    return (x > y) - (x < y);
}

static void sort_idx(hm_gguf *g, uint64_t *idx, uint64_t n,
                     int (*cmp)(const void *, const void *, void *)) {
    if (n > 1) qsort_r(idx, n, sizeof *idx, cmp, g);
}

static hm_status parse_kvs(hm_gguf *g, cursor *c) {
    /* smallest kv: key length (8) + type (4) + 1 byte value */
    if (g->n_kv > (c->size - c->pos) / 13)
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: header claims %llu metadata entries but the file has room for at "
                         "most %llu",
                         c->name, (unsigned long long)g->n_kv,
                         (unsigned long long)((c->size - c->pos) / 13));
    g->kvs = calloc(g->n_kv ? g->n_kv : 1, sizeof(hm_gguf_kv));
    g->kv_order = malloc((g->n_kv ? g->n_kv : 1) * sizeof(uint64_t));
    if (!g->kvs || !g->kv_order) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", c->name);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        hm_gguf_kv *kv = &g->kvs[i];
        kv->offset = c->pos;
        hm_status st = rd_str(c, "metadata key", &kv->key);
        if (st != HM_OK) return hm_error_prefix(st, "metadata entry %llu", (unsigned long long)i);
        if (kv->key.len == 0 || kv->key.len > 65535 || memchr(kv->key.ptr, 0, kv->key.len))
            return hm_errorf(HM_ERR_FORMAT,
                             "%s: metadata entry %llu at offset %llu has an empty, over-long or "
                             "NUL-containing key",
                             c->name, (unsigned long long)i, (unsigned long long)kv->offset);
        char what[128];
        snprintf(what, sizeof what, "key '%.*s'", (int)(kv->key.len > 80 ? 80 : kv->key.len),
                 kv->key.ptr);
        uint32_t t;
        st = rd_u32(c, "value type", &t);
        if (st != HM_OK) return hm_error_prefix(st, "%s", what);
        if (t >= HM_GGUF_VTYPE_COUNT)
            return hm_errorf(HM_ERR_FORMAT, "%s: %s at offset %llu: unknown value type %u", c->name,
                             what, (unsigned long long)kv->offset, t);
        st = parse_value(c, (hm_gguf_vtype)t, 0, what, &kv->val);
        if (st != HM_OK) return st;
        g->kv_order[i] = i;
    }
    sort_idx(g, g->kv_order, g->n_kv, cmp_kv_idx);
    for (uint64_t i = 1; i < g->n_kv; i++) {
        const hm_gguf_kv *a = &g->kvs[g->kv_order[i - 1]], *b = &g->kvs[g->kv_order[i]];
        if (cmp_str(a->key.ptr, a->key.len, b->key.ptr, b->key.len) == 0)
            return hm_errorf(HM_ERR_FORMAT,
                             "%s: duplicate metadata key '%.*s' at offsets %llu and %llu", c->name,
                             (int)(a->key.len > 80 ? 80 : a->key.len), a->key.ptr,
                             (unsigned long long)a->offset, (unsigned long long)b->offset);
    }
    return HM_OK;
}

static hm_status parse_tensor_info(hm_gguf *g, cursor *c, uint64_t i) {
    hm_gguf_tensor *t = &g->tensors[i];
    t->info_offset = c->pos;
    hm_gguf_str name = {NULL, 0};
    hm_status st = rd_str(c, "tensor name", &name);
    if (st != HM_OK) return hm_error_prefix(st, "tensor info %llu", (unsigned long long)i);
    if (name.len == 0 || name.len > HM_GGUF_MAX_NAME || memchr(name.ptr, 0, name.len))
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: tensor info %llu at offset %llu: name is empty, contains NUL or is "
                         "longer than %d bytes (%llu)",
                         c->name, (unsigned long long)i, (unsigned long long)t->info_offset,
                         HM_GGUF_MAX_NAME, (unsigned long long)name.len);
    memcpy(t->name, name.ptr, name.len);
    t->name[name.len] = '\0';
    st = rd_u32(c, "n_dims", &t->n_dims);
    if (st != HM_OK) return hm_error_prefix(st, "tensor '%s'", t->name);
    if (t->n_dims < 1 || t->n_dims > HM_GGUF_MAX_DIMS)
        return hm_errorf(HM_ERR_FORMAT, "%s: tensor '%s' at offset %llu: n_dims %u not in [1, %d]",
                         c->name, t->name, (unsigned long long)t->info_offset, t->n_dims,
                         HM_GGUF_MAX_DIMS);
    t->n_elements = 1;
    for (uint32_t d = 0; d < HM_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        st = rd_u64(c, "dimension", &t->ne[d]);
        if (st != HM_OK) return hm_error_prefix(st, "tensor '%s'", t->name);
        if (t->ne[d] > ((uint64_t)1 << 62) ||
            __builtin_mul_overflow(t->n_elements, t->ne[d], &t->n_elements) ||
            t->n_elements > ((uint64_t)1 << 62))
            return hm_errorf(HM_ERR_FORMAT, "%s: tensor '%s': dimension %u = %llu overflows",
                             c->name, t->name, d, (unsigned long long)t->ne[d]);
    }
    st = rd_u32(c, "type", &t->type);
    if (st == HM_OK) st = rd_u64(c, "data offset", &t->offset);
    if (st != HM_OK) return hm_error_prefix(st, "tensor '%s'", t->name);
    const hm_type_info *ti = t->type < HM_TYPE_FIRST_INTERNAL ? hm_type_get(t->type) : NULL;
    if (!ti)
        return hm_errorf(HM_ERR_FORMAT, "%s: tensor '%s' at offset %llu: unknown ggml type id %u",
                         c->name, t->name, (unsigned long long)t->info_offset, t->type);
    uint64_t row;
    if (!hm_type_row_bytes(t->type, t->ne[0], &row))
        return hm_errorf(
            HM_ERR_FORMAT,
            "%s: tensor '%s': row length %llu is not a multiple of the %s block size %u", c->name,
            t->name, (unsigned long long)t->ne[0], ti->name, ti->block);
    if (__builtin_mul_overflow(row, t->n_elements / (t->ne[0] ? t->ne[0] : 1), &t->bytes))
        return hm_errorf(HM_ERR_FORMAT, "%s: tensor '%s': byte size overflows", c->name, t->name);
    if (t->ne[0] == 0) t->bytes = 0;
    if (t->offset % g->alignment)
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: tensor '%s': data offset %llu is not a multiple of the alignment %u",
                         c->name, t->name, (unsigned long long)t->offset, g->alignment);
    return HM_OK;
}

static hm_status parse(hm_gguf *g) {
    cursor c = {g->base, g->size, 0, g->name, &g->arena};
    uint32_t magic;
    hm_status st = rd_u32(&c, "magic", &magic);
    if (st != HM_OK) return st;
    if (magic != HM_GGUF_MAGIC)
        return hm_errorf(HM_ERR_FORMAT, "%s: not a GGUF file (magic %08x, expected \"GGUF\")",
                         g->name, magic);
    st = rd_u32(&c, "version", &g->version);
    if (st != HM_OK) return st;
    if (g->version == 0x03000000u || g->version == 0x02000000u)
        return hm_errorf(HM_ERR_UNSUPPORTED, "%s: big-endian GGUF is not supported", g->name);
    if (g->version == 1)
        return hm_errorf(HM_ERR_UNSUPPORTED, "%s: GGUF v1 is obsolete; convert it to v3", g->name);
    if (g->version != 2 && g->version != 3)
        return hm_errorf(HM_ERR_FORMAT, "%s: unknown GGUF version %u (expected 2 or 3)", g->name,
                         g->version);
    st = rd_u64(&c, "tensor count", &g->n_tensors);
    if (st == HM_OK) st = rd_u64(&c, "metadata count", &g->n_kv);
    if (st != HM_OK) return st;
    st = parse_kvs(g, &c);
    if (st != HM_OK) return st;

    g->alignment = HM_GGUF_DEFAULT_ALIGNMENT;
    const hm_gguf_kv *al = hm_gguf_find_kv(g, "general.alignment");
    if (al) {
        if (al->val.type != HM_GGUF_UINT32 || al->val.v.u == 0 || (al->val.v.u & (al->val.v.u - 1)))
            return hm_errorf(
                HM_ERR_FORMAT, "%s: general.alignment must be a uint32 power of two (got %s %llu)",
                g->name, hm_gguf_vtype_name(al->val.type), (unsigned long long)al->val.v.u);
        g->alignment = (uint32_t)al->val.v.u;
    }

    /* smallest tensor info: name length 8 + n_dims 4 + one dim 8 + type 4 + offset 8 */
    if (g->n_tensors > (c.size - c.pos) / 32)
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: header claims %llu tensors but the file has room for at most %llu "
                         "tensor infos",
                         g->name, (unsigned long long)g->n_tensors,
                         (unsigned long long)((c.size - c.pos) / 32));
    uint64_t nt = g->n_tensors ? g->n_tensors : 1;
    g->tensors = calloc(nt, sizeof(hm_gguf_tensor));
    g->tensor_order = malloc(nt * sizeof(uint64_t));
    uint64_t *by_off = malloc(nt * sizeof(uint64_t));
    if (!g->tensors || !g->tensor_order || !by_off) {
        free(by_off);
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory for %llu tensors", g->name,
                         (unsigned long long)g->n_tensors);
    }
    for (uint64_t i = 0; i < g->n_tensors && st == HM_OK; i++) {
        st = parse_tensor_info(g, &c, i);
        g->tensor_order[i] = by_off[i] = i;
    }
    if (st != HM_OK) {
        free(by_off);
        return st;
    }
    g->data_offset = hm_align_up(c.pos, g->alignment);
    if (g->n_tensors && g->data_offset > g->size) {
        free(by_off);
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: data section starts at %llu, past the end of the file (%llu)",
                         g->name, (unsigned long long)g->data_offset, (unsigned long long)g->size);
    }
    sort_idx(g, g->tensor_order, g->n_tensors, cmp_tensor_idx);
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const hm_gguf_tensor *a = &g->tensors[g->tensor_order[i - 1]];
        const hm_gguf_tensor *b = &g->tensors[g->tensor_order[i]];
        if (strcmp(a->name, b->name) == 0) {
            free(by_off);
            return hm_errorf(
                HM_ERR_FORMAT, "%s: duplicate tensor name '%s' (infos at %llu and %llu)", g->name,
                a->name, (unsigned long long)a->info_offset, (unsigned long long)b->info_offset);
        }
    }
    /* bounds and overlap, in file order */
    sort_idx(g, by_off, g->n_tensors, cmp_tensor_off);
    uint64_t data_size = g->n_tensors ? g->size - g->data_offset : 0;
    uint64_t prev_end = 0;
    const char *prev = NULL;
    for (uint64_t k = 0; k < g->n_tensors; k++) {
        hm_gguf_tensor *t = &g->tensors[by_off[k]];
        if (t->offset > data_size || t->bytes > data_size - t->offset) {
            st = hm_errorf(HM_ERR_FORMAT,
                           "%s: tensor '%s': data [%llu, +%llu) lies outside the data section "
                           "(%llu bytes from file offset %llu): truncated file?",
                           g->name, t->name, (unsigned long long)t->offset,
                           (unsigned long long)t->bytes, (unsigned long long)data_size,
                           (unsigned long long)g->data_offset);
            break;
        }
        if (prev && t->offset < prev_end && t->bytes) {
            st = hm_errorf(HM_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap (offset %llu < %llu)",
                           g->name, prev, t->name, (unsigned long long)t->offset,
                           (unsigned long long)prev_end);
            break;
        }
        t->data = g->base + g->data_offset + t->offset;
        if (t->bytes) {
            prev_end = t->offset + t->bytes;
            prev = t->name;
        }
    }
    free(by_off);
    return st;
}

static hm_status finish_open(hm_gguf *g, hm_gguf **out) {
    hm_status st = parse(g);
    if (st != HM_OK) {
        hm_gguf_close(g);
        return st;
    }
    *out = g;
    return HM_OK;
}

static hm_gguf *alloc_handle(const char *name) {
    hm_gguf *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->name = strdup(name ? name : "(memory)");
    if (!g->name) {
        free(g);
        return NULL;
    }
    hm_arena_init(&g->arena, 64 << 10, "gguf arrays");
    return g;
}

hm_status hm_gguf_open(const char *path, hm_gguf **out) {
    *out = NULL;
    hm_gguf *g = alloc_handle(path);
    if (!g) return hm_errorf(HM_ERR_NO_MEMORY, "gguf: out of memory");
    hm_map_params mp = hm_map_default_params();
    hm_status st = hm_file_map(path, &mp, &g->map);
    if (st != HM_OK) {
        hm_gguf_close(g);
        return st;
    }
    g->base = g->map.data;
    g->size = g->map.size;
    return finish_open(g, out);
}

hm_status hm_gguf_parse_memory(const void *data, size_t size, const char *name, hm_gguf **out) {
    *out = NULL;
    if (!data && size) return hm_errorf(HM_ERR_INVALID_ARG, "gguf: NULL buffer");
    hm_gguf *g = alloc_handle(name);
    if (!g) return hm_errorf(HM_ERR_NO_MEMORY, "gguf: out of memory");
    g->base = data;
    g->size = size;
    return finish_open(g, out);
}

void hm_gguf_close(hm_gguf *g) {
    if (!g) return;
    hm_file_unmap(&g->map);
    hm_arena_free(&g->arena);
    free(g->kvs);
    free(g->tensors);
    free(g->kv_order);
    free(g->tensor_order);
    free(g->name);
    free(g);
}

const char *hm_gguf_name(const hm_gguf *g) {
    return g->name;
}
uint32_t hm_gguf_version(const hm_gguf *g) {
    return g->version;
}
uint32_t hm_gguf_alignment(const hm_gguf *g) {
    return g->alignment;
}
uint64_t hm_gguf_data_offset(const hm_gguf *g) {
    return g->data_offset;
}
uint64_t hm_gguf_file_size(const hm_gguf *g) {
    return g->size;
}
uint64_t hm_gguf_n_kv(const hm_gguf *g) {
    return g->n_kv;
}
uint64_t hm_gguf_n_tensors(const hm_gguf *g) {
    return g->n_tensors;
}

const hm_gguf_kv *hm_gguf_kv_at(const hm_gguf *g, uint64_t i) {
    return i < g->n_kv ? &g->kvs[i] : NULL;
}

const hm_gguf_tensor *hm_gguf_tensor_at(const hm_gguf *g, uint64_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const hm_gguf_kv *hm_gguf_find_kv(const hm_gguf *g, const char *key) {
    uint64_t lo = 0, hi = g->n_kv, kl = strlen(key);
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        const hm_gguf_kv *kv = &g->kvs[g->kv_order[mid]];
        int r = cmp_str(kv->key.ptr, kv->key.len, key, kl);
        if (r == 0) return kv;
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const hm_gguf_tensor *hm_gguf_find_tensor(const hm_gguf *g, const char *name) {
    uint64_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        const hm_gguf_tensor *t = &g->tensors[g->tensor_order[mid]];
        int r = strcmp(t->name, name);
        if (r == 0) return t;
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---------------------------------------------------------------- typed getters */

static hm_status get(const hm_gguf *g, const char *key, const hm_gguf_kv **kv) {
    *kv = hm_gguf_find_kv(g, key);
    if (!*kv) return hm_errorf(HM_ERR_NOT_FOUND, "%s: metadata key '%s' is missing", g->name, key);
    return HM_OK;
}

static hm_status wrong_type(const hm_gguf *g, const char *key, const char *want, uint32_t got) {
    return hm_errorf(HM_ERR_FORMAT, "%s: metadata key '%s': expected %s, got %s", g->name, key,
                     want, hm_gguf_vtype_name(got));
}

static bool is_unsigned(uint32_t t) {
    return t == HM_GGUF_UINT8 || t == HM_GGUF_UINT16 || t == HM_GGUF_UINT32 || t == HM_GGUF_UINT64;
}
static bool is_signed(uint32_t t) {
    return t == HM_GGUF_INT8 || t == HM_GGUF_INT16 || t == HM_GGUF_INT32 || t == HM_GGUF_INT64;
}

hm_status hm_gguf_get_uint(const hm_gguf *g, const char *key, uint64_t *out) {
    const hm_gguf_kv *kv;
    hm_status st = get(g, key, &kv);
    if (st != HM_OK) return st;
    if (is_unsigned(kv->val.type))
        *out = kv->val.v.u;
    else if (is_signed(kv->val.type) && kv->val.v.i >= 0)
        *out = (uint64_t)kv->val.v.i;
    else if (is_signed(kv->val.type))
        return hm_errorf(HM_ERR_FORMAT, "%s: metadata key '%s': expected a value >= 0, got %lld",
                         g->name, key, (long long)kv->val.v.i);
    else
        return wrong_type(g, key, "an unsigned integer", kv->val.type);
    return HM_OK;
}

hm_status hm_gguf_get_int(const hm_gguf *g, const char *key, int64_t *out) {
    const hm_gguf_kv *kv;
    hm_status st = get(g, key, &kv);
    if (st != HM_OK) return st;
    if (is_signed(kv->val.type))
        *out = kv->val.v.i;
    else if (is_unsigned(kv->val.type) && kv->val.v.u <= INT64_MAX)
        *out = (int64_t)kv->val.v.u;
    else
        return wrong_type(g, key, "an integer", kv->val.type);
    return HM_OK;
}

hm_status hm_gguf_get_float(const hm_gguf *g, const char *key, double *out) {
    const hm_gguf_kv *kv;
    hm_status st = get(g, key, &kv);
    if (st != HM_OK) return st;
    uint32_t t = kv->val.type;
    if (t == HM_GGUF_FLOAT32 || t == HM_GGUF_FLOAT64)
        *out = kv->val.v.f;
    else if (is_unsigned(t))
        *out = (double)kv->val.v.u;
    else if (is_signed(t))
        *out = (double)kv->val.v.i;
    else
        return wrong_type(g, key, "a number", t);
    return HM_OK;
}

hm_status hm_gguf_get_bool(const hm_gguf *g, const char *key, bool *out) {
    const hm_gguf_kv *kv;
    hm_status st = get(g, key, &kv);
    if (st != HM_OK) return st;
    if (kv->val.type != HM_GGUF_BOOL) return wrong_type(g, key, "bool", kv->val.type);
    *out = kv->val.v.b;
    return HM_OK;
}

hm_status hm_gguf_get_str(const hm_gguf *g, const char *key, hm_gguf_str *out) {
    const hm_gguf_kv *kv;
    hm_status st = get(g, key, &kv);
    if (st != HM_OK) return st;
    if (kv->val.type != HM_GGUF_STRING) return wrong_type(g, key, "string", kv->val.type);
    *out = kv->val.v.s;
    return HM_OK;
}

hm_status hm_gguf_get_arr(const hm_gguf *g, const char *key, const hm_gguf_value **out) {
    const hm_gguf_kv *kv;
    hm_status st = get(g, key, &kv);
    if (st != HM_OK) return st;
    if (kv->val.type != HM_GGUF_ARRAY) return wrong_type(g, key, "array", kv->val.type);
    *out = &kv->val;
    return HM_OK;
}

static const uint8_t *elem(const hm_gguf_value *a, uint64_t i) {
    return a->arr_raw + i * hm_gguf_vtype_size(a->arr_type);
}

uint64_t hm_gguf_arr_uint(const hm_gguf_value *a, uint64_t i) {
    if (i >= a->arr_n || !hm_gguf_vtype_size(a->arr_type)) return 0;
    hm_gguf_value v;
    decode_scalar(a->arr_type, elem(a, i), &v);
    if (is_signed(a->arr_type)) return v.v.i < 0 ? 0 : (uint64_t)v.v.i;
    if (a->arr_type == HM_GGUF_FLOAT32 || a->arr_type == HM_GGUF_FLOAT64) /* saturating */
        return v.v.f >= 18446744073709551615.0 ? UINT64_MAX : v.v.f > 0 ? (uint64_t)v.v.f : 0;
    if (a->arr_type == HM_GGUF_BOOL) return v.v.b;
    return v.v.u;
}

int64_t hm_gguf_arr_int(const hm_gguf_value *a, uint64_t i) {
    if (i >= a->arr_n || !hm_gguf_vtype_size(a->arr_type)) return 0;
    hm_gguf_value v;
    decode_scalar(a->arr_type, elem(a, i), &v);
    if (is_unsigned(a->arr_type)) return (int64_t)v.v.u;
    if (a->arr_type == HM_GGUF_FLOAT32 || a->arr_type == HM_GGUF_FLOAT64) { /* saturating */
        if (v.v.f != v.v.f) return 0;
        if (v.v.f >= 9223372036854775807.0) return INT64_MAX;
        if (v.v.f <= -9223372036854775808.0) return INT64_MIN;
        return (int64_t)v.v.f;
    }
    if (a->arr_type == HM_GGUF_BOOL) return v.v.b;
    return v.v.i;
}

double hm_gguf_arr_float(const hm_gguf_value *a, uint64_t i) {
    if (i >= a->arr_n || !hm_gguf_vtype_size(a->arr_type)) return 0;
    hm_gguf_value v;
    decode_scalar(a->arr_type, elem(a, i), &v);
    if (a->arr_type == HM_GGUF_FLOAT32 || a->arr_type == HM_GGUF_FLOAT64) return v.v.f;
    if (is_unsigned(a->arr_type)) return (double)v.v.u;
    if (a->arr_type == HM_GGUF_BOOL) return v.v.b;
    return (double)v.v.i;
}

/* ---------------------------------------------------------------- writer */

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
} wbuf;

static bool wbuf_put(wbuf *b, const void *data, size_t n) {
    if (n > SIZE_MAX - b->len) return false;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) {
            if (cap > SIZE_MAX / 2) return false;
            cap *= 2;
        }
        uint8_t *q = realloc(b->p, cap);
        if (!q) return false;
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    return true;
}

typedef struct wtensor {
    uint64_t bytes;
} wtensor;

struct hm_gguf_writer {
    char *path;
    hm_outfile out; /* where the bytes go (core/file.h: PATH.part renamed, or in place) */
    FILE *f;        /* out.f */
    wbuf meta;      /* encoded key/values */
    wbuf infos;     /* encoded tensor infos */
    uint64_t n_kv;
    wtensor *tensors;
    uint64_t n_tensors, cap_tensors;
    char **names; /* keys and tensor names, for duplicate checks (hash set) */
    size_t names_cap, names_len;
    uint32_t alignment;
    uint64_t next_offset; /* data offset of the next declared tensor */
    bool header_written;
    uint64_t cur;      /* tensor being written */
    uint64_t cur_done; /* bytes of it written */
    hm_status error;   /* sticky: after a failure every call returns it */
    char error_msg[HM_ERROR_MAX];
};

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Inserts name (copied) into the set; false if it was already there or on OOM (*oom set). */
static bool names_insert(hm_gguf_writer *w, const char *name, bool *oom) {
    *oom = false;
    if (2 * (w->names_len + 1) > w->names_cap) {
        size_t cap = w->names_cap ? w->names_cap * 2 : 256;
        char **tab = calloc(cap, sizeof(char *));
        if (!tab) return !(*oom = true);
        for (size_t i = 0; i < w->names_cap; i++) {
            if (!w->names[i]) continue;
            size_t h = fnv1a(w->names[i]) & (cap - 1);
            while (tab[h]) h = (h + 1) & (cap - 1);
            tab[h] = w->names[i];
        }
        free(w->names);
        w->names = tab;
        w->names_cap = cap;
    }
    size_t h = fnv1a(name) & (w->names_cap - 1);
    while (w->names[h]) {
        if (strcmp(w->names[h], name) == 0) return false;
        h = (h + 1) & (w->names_cap - 1);
    }
    w->names[h] = strdup(name);
    if (!w->names[h]) return !(*oom = true);
    w->names_len++;
    return true;
}

static hm_status wfail(hm_gguf_writer *w, hm_status st) {
    w->error = st;
    snprintf(w->error_msg, sizeof w->error_msg, "%s", hm_last_error());
    return st;
}

static hm_status wcheck(hm_gguf_writer *w) {
    if (w->error != HM_OK) return hm_errorf(w->error, "%s", w->error_msg);
    return HM_OK;
}

hm_status hm_gguf_writer_open(const char *path, hm_gguf_writer **out) {
    *out = NULL;
    hm_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return hm_errorf(HM_ERR_NO_MEMORY, "gguf writer: out of memory");
    w->alignment = HM_GGUF_DEFAULT_ALIGNMENT;
    w->path = strdup(path);
    if (!w->path) {
        free(w);
        return hm_errorf(HM_ERR_NO_MEMORY, "gguf writer: out of memory");
    }
    hm_status st = hm_outfile_open(path, &w->out);
    if (st) {
        free(w->path);
        free(w);
        return st;
    }
    w->f = w->out.f;
    setvbuf(w->f, NULL, _IOFBF, 4 << 20);
    *out = w;
    return HM_OK;
}

static hm_status put_str(hm_gguf_writer *w, wbuf *b, const char *s, uint64_t len) {
    if (!wbuf_put(b, &len, 8) || !wbuf_put(b, s, len))
        return wfail(w, hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", w->path));
    return HM_OK;
}

static hm_status begin_kv(hm_gguf_writer *w, const char *key, hm_gguf_vtype t) {
    hm_status st = wcheck(w);
    if (st != HM_OK) return st;
    if (!key || !*key) return hm_errorf(HM_ERR_INVALID_ARG, "%s: empty metadata key", w->path);
    if (w->n_tensors)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "%s: metadata key '%s' added after tensors were declared", w->path, key);
    char tagged[600];
    snprintf(tagged, sizeof tagged, "k:%s", key);
    bool oom;
    if (!names_insert(w, tagged, &oom))
        return oom ? wfail(w, hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", w->path))
                   : hm_errorf(HM_ERR_INVALID_ARG, "%s: duplicate metadata key '%s'", w->path, key);
    st = put_str(w, &w->meta, key, strlen(key));
    uint32_t t32 = t;
    if (st == HM_OK && !wbuf_put(&w->meta, &t32, 4))
        st = wfail(w, hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", w->path));
    if (st == HM_OK) w->n_kv++;
    return st;
}

static hm_status put(hm_gguf_writer *w, const void *p, size_t n) {
    if (!wbuf_put(&w->meta, p, n))
        return wfail(w, hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", w->path));
    return HM_OK;
}

hm_status hm_gguf_w_uint(hm_gguf_writer *w, const char *key, hm_gguf_vtype type, uint64_t v) {
    size_t n = hm_gguf_vtype_size(type);
    if (!is_unsigned(type))
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: key '%s': %s is not an unsigned type", w->path,
                         key, hm_gguf_vtype_name(type));
    if (n < 8 && v >> (8 * n))
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: key '%s': %llu does not fit in %s", w->path, key,
                         (unsigned long long)v, hm_gguf_vtype_name(type));
    hm_status st = begin_kv(w, key, type);
    if (st == HM_OK && !strcmp(key, "general.alignment")) {
        if (type != HM_GGUF_UINT32 || v == 0 || (v & (v - 1)))
            return wfail(w,
                         hm_errorf(HM_ERR_INVALID_ARG,
                                   "%s: general.alignment must be a uint32 power of two", w->path));
        w->alignment = (uint32_t)v;
    }
    return st == HM_OK ? put(w, &v, n) : st;
}

hm_status hm_gguf_w_int(hm_gguf_writer *w, const char *key, hm_gguf_vtype type, int64_t v) {
    size_t n = hm_gguf_vtype_size(type);
    if (!is_signed(type))
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: key '%s': %s is not a signed type", w->path, key,
                         hm_gguf_vtype_name(type));
    if (n < 8 && (v < -(INT64_C(1) << (8 * n - 1)) || v >= (INT64_C(1) << (8 * n - 1))))
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: key '%s': %lld does not fit in %s", w->path, key,
                         (long long)v, hm_gguf_vtype_name(type));
    hm_status st = begin_kv(w, key, type);
    return st == HM_OK ? put(w, &v, n) : st;
}

hm_status hm_gguf_w_f32(hm_gguf_writer *w, const char *key, float v) {
    hm_status st = begin_kv(w, key, HM_GGUF_FLOAT32);
    return st == HM_OK ? put(w, &v, 4) : st;
}

hm_status hm_gguf_w_f64(hm_gguf_writer *w, const char *key, double v) {
    hm_status st = begin_kv(w, key, HM_GGUF_FLOAT64);
    return st == HM_OK ? put(w, &v, 8) : st;
}

hm_status hm_gguf_w_bool(hm_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v;
    hm_status st = begin_kv(w, key, HM_GGUF_BOOL);
    return st == HM_OK ? put(w, &b, 1) : st;
}

hm_status hm_gguf_w_str(hm_gguf_writer *w, const char *key, const char *v) {
    hm_status st = begin_kv(w, key, HM_GGUF_STRING);
    return st == HM_OK ? put_str(w, &w->meta, v, strlen(v)) : st;
}

hm_status hm_gguf_w_arr(hm_gguf_writer *w, const char *key, hm_gguf_vtype elem_t, uint64_t n,
                        const void *data) {
    size_t es = hm_gguf_vtype_size(elem_t);
    if (!es)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "%s: key '%s': use hm_gguf_w_arr_str / copy_kv for %s arrays", w->path,
                         key, hm_gguf_vtype_name(elem_t));
    if (n > SIZE_MAX / es)
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: key '%s': array too large", w->path, key);
    hm_status st = begin_kv(w, key, HM_GGUF_ARRAY);
    uint32_t t32 = elem_t;
    if (st == HM_OK) st = put(w, &t32, 4);
    if (st == HM_OK) st = put(w, &n, 8);
    if (st == HM_OK) st = put(w, data, n * es);
    return st;
}

hm_status hm_gguf_w_arr_str(hm_gguf_writer *w, const char *key, uint64_t n, const char *const *strs,
                            const uint64_t *lens) {
    hm_status st = begin_kv(w, key, HM_GGUF_ARRAY);
    uint32_t t32 = HM_GGUF_STRING;
    if (st == HM_OK) st = put(w, &t32, 4);
    if (st == HM_OK) st = put(w, &n, 8);
    for (uint64_t i = 0; i < n && st == HM_OK; i++)
        st = put_str(w, &w->meta, strs[i], lens ? lens[i] : strlen(strs[i]));
    return st;
}

hm_status hm_gguf_w_copy_kv(hm_gguf_writer *w, const char *key, const hm_gguf_kv *kv) {
    char k[1024];
    if (!key) {
        if (kv->key.len >= sizeof k)
            return hm_errorf(HM_ERR_INVALID_ARG, "%s: key too long to copy", w->path);
        memcpy(k, kv->key.ptr, kv->key.len);
        k[kv->key.len] = '\0';
        key = k;
    }
    if (!strcmp(key, "general.alignment") && kv->val.type == HM_GGUF_UINT32)
        return hm_gguf_w_uint(w, key, HM_GGUF_UINT32, kv->val.v.u);
    hm_status st = begin_kv(w, key, kv->val.type);
    return st == HM_OK ? put(w, kv->val.raw, kv->val.raw_len) : st;
}

hm_status hm_gguf_w_tensor(hm_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const uint64_t *ne) {
    hm_status st = wcheck(w);
    if (st != HM_OK) return st;
    if (w->header_written)
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: tensor '%s' declared after data writing began",
                         w->path, name);
    size_t nl = name ? strlen(name) : 0;
    if (nl == 0 || nl > HM_GGUF_MAX_NAME)
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: tensor name '%s' is empty or longer than %d",
                         w->path, name ? name : "", HM_GGUF_MAX_NAME);
    if (n_dims < 1 || n_dims > HM_GGUF_MAX_DIMS)
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: tensor '%s': n_dims %u not in [1, %d]", w->path,
                         name, n_dims, HM_GGUF_MAX_DIMS);
    const hm_type_info *ti = hm_type_get(type);
    if (!ti)
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: tensor '%s': unknown type id %u", w->path, name,
                         type);
    if (type >= HM_TYPE_FIRST_INTERNAL)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "%s: tensor '%s': %s is hmoe's in-memory layout, not a GGUF type", w->path,
                         name, ti->name);
    uint64_t nel = 1, row, bytes;
    for (uint32_t d = 0; d < n_dims; d++)
        if (__builtin_mul_overflow(nel, ne[d], &nel))
            return hm_errorf(HM_ERR_INVALID_ARG, "%s: tensor '%s': shape overflows", w->path, name);
    if (!hm_type_row_bytes(type, ne[0], &row))
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "%s: tensor '%s': row length %llu is not a multiple of %s's block size %u",
                         w->path, name, (unsigned long long)ne[0], ti->name, ti->block);
    if (ne[0] == 0)
        bytes = 0;
    else if (__builtin_mul_overflow(row, nel / ne[0], &bytes))
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: tensor '%s': size overflows", w->path, name);
    char tagged[80];
    snprintf(tagged, sizeof tagged, "t:%s", name);
    bool oom;
    if (!names_insert(w, tagged, &oom))
        return oom ? wfail(w, hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", w->path))
                   : hm_errorf(HM_ERR_INVALID_ARG, "%s: duplicate tensor name '%s'", w->path, name);
    if (w->n_tensors == w->cap_tensors) {
        uint64_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        wtensor *t = realloc(w->tensors, cap * sizeof *t);
        if (!t) return wfail(w, hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", w->path));
        w->tensors = t;
        w->cap_tensors = cap;
    }
    w->tensors[w->n_tensors++].bytes = bytes;
    st = put_str(w, &w->infos, name, nl);
    if (st != HM_OK) return st;
    if (!wbuf_put(&w->infos, &n_dims, 4) || !wbuf_put(&w->infos, ne, 8 * (size_t)n_dims) ||
        !wbuf_put(&w->infos, &type, 4) || !wbuf_put(&w->infos, &w->next_offset, 8))
        return wfail(w, hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", w->path));
    w->next_offset = hm_align_up(w->next_offset + bytes, w->alignment);
    return HM_OK;
}

static hm_status wwrite(hm_gguf_writer *w, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, w->f) != n)
        return wfail(
            w, hm_errorf_errno(HM_ERR_IO, errno, "%s: write failed", hm_outfile_name(&w->out)));
    return HM_OK;
}

static hm_status wpad(hm_gguf_writer *w, uint64_t pos) {
    static const uint8_t zeros[256];
    uint64_t pad = hm_align_up(pos, w->alignment) - pos;
    while (pad) {
        size_t n = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
        hm_status st = wwrite(w, zeros, n);
        if (st != HM_OK) return st;
        pad -= n;
    }
    return HM_OK;
}

static hm_status write_header(hm_gguf_writer *w) {
    uint32_t hdr[2] = {HM_GGUF_MAGIC, 3};
    uint64_t counts[2] = {w->n_tensors, w->n_kv};
    hm_status st = wwrite(w, hdr, 8);
    if (st == HM_OK) st = wwrite(w, counts, 16);
    if (st == HM_OK) st = wwrite(w, w->meta.p, w->meta.len);
    if (st == HM_OK) st = wwrite(w, w->infos.p, w->infos.len);
    if (st == HM_OK) st = wpad(w, 24 + (uint64_t)w->meta.len + w->infos.len);
    w->header_written = true;
    w->cur = 0;
    w->cur_done = 0;
    /* skip zero-byte tensors */
    while (w->cur < w->n_tensors && w->tensors[w->cur].bytes == 0) w->cur++;
    return st;
}

hm_status hm_gguf_w_data(hm_gguf_writer *w, const void *data, size_t bytes) {
    hm_status st = wcheck(w);
    if (st != HM_OK) return st;
    if (!w->header_written && (st = write_header(w)) != HM_OK) return st;
    const uint8_t *p = data;
    while (bytes) {
        if (w->cur >= w->n_tensors)
            return wfail(w, hm_errorf(HM_ERR_INVALID_ARG,
                                      "%s: %zu bytes of data beyond the declared tensors", w->path,
                                      bytes));
        uint64_t left = w->tensors[w->cur].bytes - w->cur_done;
        size_t n = bytes < left ? bytes : (size_t)left;
        if ((st = wwrite(w, p, n)) != HM_OK) return st;
        p += n;
        bytes -= n;
        w->cur_done += n;
        if (w->cur_done == w->tensors[w->cur].bytes) {
            if ((st = wpad(w, w->cur_done)) != HM_OK) return st;
            w->cur++;
            w->cur_done = 0;
            while (w->cur < w->n_tensors && w->tensors[w->cur].bytes == 0) w->cur++;
        }
    }
    return HM_OK;
}

uint64_t hm_gguf_w_pending(const hm_gguf_writer *w) {
    if (!w->header_written) return w->n_tensors ? w->tensors[0].bytes : 0;
    return w->cur < w->n_tensors ? w->tensors[w->cur].bytes - w->cur_done : 0;
}

static void writer_free(hm_gguf_writer *w) {
    for (size_t i = 0; i < w->names_cap; i++) free(w->names[i]);
    free(w->names);
    free(w->meta.p);
    free(w->infos.p);
    free(w->tensors);
    hm_outfile_close(&w->out); /* removes PATH.part unless committed */
    free(w->path);
    free(w);
}

hm_status hm_gguf_writer_finish(hm_gguf_writer *w) {
    hm_status st = wcheck(w);
    if (st == HM_OK && !w->header_written) st = write_header(w);
    if (st == HM_OK && w->cur < w->n_tensors)
        st = hm_errorf(HM_ERR_INVALID_ARG,
                       "%s: incomplete: tensor %llu of %llu has %llu of %llu bytes written",
                       w->path, (unsigned long long)w->cur, (unsigned long long)w->n_tensors,
                       (unsigned long long)w->cur_done,
                       (unsigned long long)w->tensors[w->cur].bytes);
    if (st == HM_OK) st = hm_outfile_commit(&w->out);
    w->f = NULL;
    writer_free(w);
    return st;
}

void hm_gguf_writer_abort(hm_gguf_writer *w) {
    if (!w) return;
    writer_free(w);
}
