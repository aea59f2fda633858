/* safetensors.c - strict safetensors reader: single files, sharded models (index.json), memory.
 *
 * Rules checked for each file (each failure names the file, tensor, field and what was expected):
 *  - at least 8 bytes; the u64 LE header length N is <= HM_ST_MAX_HEADER and <= size - 8;
 *  - the header starts with '{', is valid UTF-8 and one JSON object (trailing spaces allowed),
 *    parsed with JSON_REJECT_DUPLICATES (a name twice in one file is an error);
 *  - "__metadata__", when present, is an object of strings;
 *  - every other entry is an object with exactly the keys dtype, shape, data_offsets;
 *  - dtype is a known name (sub-byte and complex dtypes are HM_ERR_UNSUPPORTED);
 *  - shape is an array of at most HM_ST_MAX_DIMS non-negative integers whose product times the
 *    dtype size fits in 64 bits;
 *  - data_offsets is [begin, end] of non-negative integers, begin <= end, end <= the size of the
 *    data section (which starts right after the header), end - begin == the tensor's byte size;
 *  - tensors do not overlap (holes are allowed and logged at debug level).
 * For sharded models (index.json): weight_map is a non-empty object of plain file names (no '/'
 * or ".."), every shard exists and parses, each tensor is in the shard weight_map names, no
 * tensor is in two shards and no shard holds a tensor weight_map does not list. */
#include "format/safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/mmap.h"
#include "quant/fp16.h"

static const struct {
    const char *name;
    uint8_t size;
} k_dtypes[HM_ST_DTYPE_COUNT] = {
    [HM_ST_F64] = {"F64", 8},         [HM_ST_F32] = {"F32", 4},
    [HM_ST_F16] = {"F16", 2},         [HM_ST_BF16] = {"BF16", 2},
    [HM_ST_F8_E4M3] = {"F8_E4M3", 1}, [HM_ST_F8_E5M2] = {"F8_E5M2", 1},
    [HM_ST_F8_E8M0] = {"F8_E8M0", 1}, [HM_ST_I8] = {"I8", 1},
    [HM_ST_U8] = {"U8", 1},           [HM_ST_I16] = {"I16", 2},
    [HM_ST_U16] = {"U16", 2},         [HM_ST_I32] = {"I32", 4},
    [HM_ST_U32] = {"U32", 4},         [HM_ST_I64] = {"I64", 8},
    [HM_ST_U64] = {"U64", 8},         [HM_ST_BOOL] = {"BOOL", 1},
};

/* dtypes of the format (safetensors 0.6+) that hmoe does not read. */
static const char *const k_unsupported_dtypes[] = {"F4", "F6_E2M3", "F6_E3M2", "C64"};

#define INDEX_NAME  "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"

typedef struct st_meta {
    const char *key, *value;
    size_t seq; /* order of appearance: the first of equal keys wins */
} st_meta;

struct hm_safetensors {
    const char *name; /* what the caller opened, for messages */
    hm_st_shard *shards;
    hm_mapped_file *maps; /* n_shards entries, zeroed for parse_memory */
    size_t n_shards;
    hm_st_tensor *tensors; /* ordered by shard, then file offset */
    size_t n_tensors, cap_tensors;
    const hm_st_tensor **by_name; /* sorted by strcmp */
    st_meta *meta;                /* sorted by key once open */
    size_t n_meta, cap_meta;
    hm_arena strings; /* names, paths, metadata */
};

/* ---- dtypes --------------------------------------------------------------------------------- */

const char *hm_st_dtype_name(hm_st_dtype dt) {
    return (unsigned)dt < HM_ST_DTYPE_COUNT ? k_dtypes[dt].name : "?";
}

size_t hm_st_dtype_size(hm_st_dtype dt) {
    return (unsigned)dt < HM_ST_DTYPE_COUNT ? k_dtypes[dt].size : 0;
}

static void dtype_list(char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < HM_ST_DTYPE_COUNT && used < n; i++) {
        int w = snprintf(buf + used, n - used, "%s%s", i ? ", " : "", k_dtypes[i].name);
        if (w < 0) break;
        used += (size_t)w;
    }
}

hm_status hm_st_dtype_parse(const char *s, hm_st_dtype *out) {
    if (!s || !out) return hm_errorf(HM_ERR_INVALID_ARG, "dtype: NULL argument");
    for (int i = 0; i < HM_ST_DTYPE_COUNT; i++) {
        if (strcmp(s, k_dtypes[i].name) == 0) {
            *out = (hm_st_dtype)i;
            return HM_OK;
        }
    }
    char list[256];
    dtype_list(list, sizeof list);
    for (size_t i = 0; i < sizeof k_unsupported_dtypes / sizeof k_unsupported_dtypes[0]; i++) {
        if (strcmp(s, k_unsupported_dtypes[i]) == 0)
            return hm_errorf(HM_ERR_UNSUPPORTED,
                             "dtype '%s' is valid safetensors but not supported by hmoe "
                             "(supported: %s)",
                             s, list);
    }
    return hm_errorf(HM_ERR_FORMAT, "unknown dtype '%s' (expected one of %s)", s, list);
}

/* ---- small helpers -------------------------------------------------------------------------- */

static uint64_t read_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Offset of the first byte that does not start a valid UTF-8 sequence (overlong forms,
 * surrogates and code points above U+10FFFF are invalid), or SIZE_MAX when all is valid. */
static size_t utf8_invalid_at(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return i;
        }
        if (n - i < len) return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += len;
    }
    return SIZE_MAX;
}

/* A short rendering of a JSON value for messages: compact JSON, or a summary when large. */
static const char *json_brief(const json_t *v, char *buf, size_t n) {
    if (json_is_object(v)) {
        snprintf(buf, n, "an object of %zu keys", json_object_size(v));
        return buf;
    }
    if (json_is_array(v) && json_array_size(v) > 8) {
        snprintf(buf, n, "an array of %zu elements", json_array_size(v));
        return buf;
    }
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) {
        snprintf(buf, n, "(unprintable)");
        return buf;
    }
    size_t len = strlen(s);
    if (len >= n) {
        memcpy(buf, s, n - 4);
        memcpy(buf + n - 4, "...", 4);
    } else {
        memcpy(buf, s, len + 1);
    }
    free(s);
    return buf;
}

static const char *fmt_shape(const int64_t *shape, uint32_t n_dims, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (uint32_t i = 0; i < n_dims && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

/* "<file>: tensor '<name>': <detail>" */
static hm_status tensor_err(hm_status st, const char *path, const char *name, const char *fmt, ...)
    HM_PRINTF(4, 5);
static hm_status tensor_err(hm_status st, const char *path, const char *name, const char *fmt,
                            ...) {
    char detail[HM_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return hm_errorf(st, "%s: tensor '%s': %s", path, name, detail);
}

static char *arena_strdup(hm_safetensors *st, const char *s) {
    size_t len = strlen(s);
    char *p = hm_arena_alloc(&st->strings, len + 1, 1);
    if (p) memcpy(p, s, len + 1);
    return p;
}

static char *arena_join(hm_safetensors *st, const char *dir, const char *file) {
    size_t dl = strlen(dir), fl = strlen(file);
    bool slash = dl > 0 && dir[dl - 1] != '/';
    char *p = hm_arena_alloc(&st->strings, dl + slash + fl + 1, 1);
    if (!p) return NULL;
    memcpy(p, dir, dl);
    if (slash) p[dl] = '/';
    memcpy(p + dl + slash, file, fl + 1);
    return p;
}

/* ---- handle lifetime ------------------------------------------------------------------------ */

static hm_status st_new(const char *name, size_t n_shards, hm_safetensors **out) {
    *out = NULL;
    hm_safetensors *st = calloc(1, sizeof *st);
    if (!st) return hm_errorf(HM_ERR_NO_MEMORY, "%s: cannot allocate a safetensors handle", name);
    hm_arena_init(&st->strings, 64 << 10, "safetensors strings");
    st->shards = calloc(n_shards ? n_shards : 1, sizeof *st->shards);
    st->maps = calloc(n_shards ? n_shards : 1, sizeof *st->maps);
    st->name = arena_strdup(st, name);
    if (!st->shards || !st->maps || !st->name) {
        hm_st_close(st);
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: cannot allocate a safetensors handle", name);
    }
    st->n_shards = n_shards;
    *out = st;
    return HM_OK;
}

void hm_st_close(hm_safetensors *st) {
    if (!st) return;
    if (st->maps)
        for (size_t i = 0; i < st->n_shards; i++) hm_file_unmap(&st->maps[i]);
    free(st->maps);
    free(st->shards);
    free(st->tensors);
    free(st->by_name);
    free(st->meta);
    hm_arena_free(&st->strings);
    free(st);
}

static hm_status map_shard(hm_safetensors *st, size_t i, const char *path) {
    hm_st_shard *sh = &st->shards[i];
    sh->path = path;
    hm_status s = hm_file_map(path, NULL, &st->maps[i]);
    if (s != HM_OK) return s;
    sh->base = st->maps[i].data;
    sh->size = st->maps[i].size;
    return HM_OK;
}

/* ---- one file ------------------------------------------------------------------------------- */

static hm_status add_metadata(hm_safetensors *st, const char *path, const json_t *md) {
    char brief[96];
    if (!json_is_object(md))
        return hm_errorf(HM_ERR_FORMAT, "%s: __metadata__ is %s, expected an object of strings",
                         path, json_brief(md, brief, sizeof brief));
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)md, key, v) {
        if (!json_is_string(v))
            return hm_errorf(HM_ERR_FORMAT, "%s: __metadata__ key '%s' is %s, expected a string",
                             path, key, json_brief(v, brief, sizeof brief));
        if (st->n_meta == st->cap_meta) {
            size_t cap = st->cap_meta ? 2 * st->cap_meta : 8;
            st_meta *m = realloc(st->meta, cap * sizeof *m);
            if (!m) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory for __metadata__", path);
            st->meta = m;
            st->cap_meta = cap;
        }
        st_meta *m = &st->meta[st->n_meta];
        m->key = arena_strdup(st, key);
        m->value = arena_strdup(st, json_string_value(v));
        m->seq = st->n_meta;
        if (!m->key || !m->value)
            return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory for __metadata__", path);
        st->n_meta++;
    }
    return HM_OK;
}

/* Reads a JSON integer >= 0 into *out; false when v is anything else. */
static bool get_uint(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static hm_status parse_entry(hm_safetensors *st, uint32_t si, const char *name, const json_t *e,
                             uint64_t data_size) {
    const hm_st_shard *sh = &st->shards[si];
    const char *path = sh->path;
    char brief[96];
    if (!json_is_object(e))
        return tensor_err(HM_ERR_FORMAT, path, name,
                          "entry is %s, expected an object with dtype, shape, data_offsets",
                          json_brief(e, brief, sizeof brief));
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)e, key, v) {
        if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0 &&
            strcmp(key, "data_offsets") != 0)
            return tensor_err(HM_ERR_FORMAT, path, name,
                              "unexpected key '%s' (expected exactly dtype, shape, data_offsets)",
                              key);
    }
    static const char *const required[] = {"dtype", "shape", "data_offsets"};
    for (int i = 0; i < 3; i++)
        if (!json_object_get(e, required[i]))
            return tensor_err(HM_ERR_FORMAT, path, name,
                              "missing key '%s' (expected dtype, shape, data_offsets)",
                              required[i]);

    hm_st_tensor t;
    memset(&t, 0, sizeof t);
    t.shard = si;

    const json_t *jd = json_object_get(e, "dtype");
    if (!json_is_string(jd))
        return tensor_err(HM_ERR_FORMAT, path, name,
                          "dtype is %s, expected a string such as \"F32\"",
                          json_brief(jd, brief, sizeof brief));
    hm_status s = hm_st_dtype_parse(json_string_value(jd), &t.dtype);
    if (s != HM_OK) return hm_error_prefix(s, "%s: tensor '%s'", path, name);
    uint64_t esize = k_dtypes[t.dtype].size;

    const json_t *js = json_object_get(e, "shape");
    if (!json_is_array(js))
        return tensor_err(HM_ERR_FORMAT, path, name,
                          "shape is %s, expected an array of non-negative integers",
                          json_brief(js, brief, sizeof brief));
    size_t nd = json_array_size(js);
    if (nd > HM_ST_MAX_DIMS)
        return tensor_err(HM_ERR_UNSUPPORTED, path, name,
                          "shape has %zu dimensions; hmoe supports at most %d", nd, HM_ST_MAX_DIMS);
    t.n_dims = (uint32_t)nd;
    uint64_t count = 1;
    bool overflow = false;
    for (size_t i = 0; i < nd; i++) {
        const json_t *d = json_array_get(js, i);
        uint64_t dim;
        if (!get_uint(d, &dim))
            return tensor_err(HM_ERR_FORMAT, path, name,
                              "shape[%zu] is %s, expected a non-negative integer", i,
                              json_brief(d, brief, sizeof brief));
        t.shape[i] = (int64_t)dim;
        if (__builtin_mul_overflow(count, dim, &count)) overflow = true;
    }
    char shp[160];
    fmt_shape(t.shape, t.n_dims, shp, sizeof shp);
    /* A zero dimension makes the product 0 even when earlier dims overflowed. */
    for (size_t i = 0; i < nd; i++)
        if (t.shape[i] == 0) overflow = false, count = 0;
    if (overflow)
        return tensor_err(HM_ERR_FORMAT, path, name, "element count of shape %s overflows 64 bits",
                          shp);
    t.n_elements = count;
    if (__builtin_mul_overflow(count, esize, &t.nbytes))
        return tensor_err(HM_ERR_FORMAT, path, name,
                          "shape %s x %" PRIu64 "-byte %s overflows 64 bits (%" PRIu64 " elements)",
                          shp, esize, k_dtypes[t.dtype].name, count);

    const json_t *jo = json_object_get(e, "data_offsets");
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return tensor_err(HM_ERR_FORMAT, path, name,
                          "data_offsets is %s, expected [begin, end] (two integers)",
                          json_brief(jo, brief, sizeof brief));
    uint64_t off[2];
    for (size_t i = 0; i < 2; i++) {
        const json_t *o = json_array_get(jo, i);
        if (!get_uint(o, &off[i]))
            return tensor_err(HM_ERR_FORMAT, path, name,
                              "data_offsets[%zu] is %s, expected a non-negative integer", i,
                              json_brief(o, brief, sizeof brief));
    }
    if (off[0] > off[1])
        return tensor_err(HM_ERR_FORMAT, path, name,
                          "data_offsets [%" PRIu64 ", %" PRIu64 "] are reversed (begin > end)",
                          off[0], off[1]);
    if (off[1] > data_size)
        return tensor_err(
            HM_ERR_FORMAT, path, name,
            "data_offsets [%" PRIu64 ", %" PRIu64 "] end outside the data section of %" PRIu64
            " bytes (it starts at file offset %" PRIu64 "; file size %" PRIu64 "; truncated file?)",
            off[0], off[1], data_size, sh->data_start, sh->size);
    if (off[1] - off[0] != t.nbytes)
        return tensor_err(HM_ERR_FORMAT, path, name,
                          "data_offsets [%" PRIu64 ", %" PRIu64 "] span %" PRIu64
                          " bytes, but shape %s of %s (%" PRIu64 " bytes each) needs %" PRIu64,
                          off[0], off[1], off[1] - off[0], shp, k_dtypes[t.dtype].name, esize,
                          t.nbytes);
    t.file_offset = sh->data_start + off[0];
    t.data = sh->base + t.file_offset;

    t.name = arena_strdup(st, name);
    if (!t.name) return hm_error_prefix(HM_ERR_NO_MEMORY, "%s: tensor '%s'", path, name);
    if (st->n_tensors == st->cap_tensors) {
        size_t cap = st->cap_tensors ? 2 * st->cap_tensors : 64;
        hm_st_tensor *nt = realloc(st->tensors, cap * sizeof *nt);
        if (!nt) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory for %zu tensors", path, cap);
        st->tensors = nt;
        st->cap_tensors = cap;
    }
    st->tensors[st->n_tensors++] = t;
    return HM_OK;
}

static int cmp_by_offset(const void *pa, const void *pb) {
    const hm_st_tensor *a = pa, *b = pb;
    if (a->file_offset != b->file_offset) return a->file_offset < b->file_offset ? -1 : 1;
    if (a->nbytes != b->nbytes) return a->nbytes < b->nbytes ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* Sorts the shard's tensors [first, n_tensors) by offset; rejects overlaps, notes holes. */
static hm_status check_layout(hm_safetensors *st, uint32_t si, size_t first) {
    const hm_st_shard *sh = &st->shards[si];
    size_t n = st->n_tensors - first;
    hm_st_tensor *t = n ? st->tensors + first : NULL;
    if (n > 1) qsort(t, n, sizeof *t, cmp_by_offset);
    uint64_t ds = sh->data_start, end = ds;
    const hm_st_tensor *owner = NULL; /* the tensor that ends at `end` */
    for (size_t i = 0; i < n; i++) {
        if (t[i].file_offset < end) {
            return hm_errorf(HM_ERR_FORMAT,
                             "%s: tensors '%s' (data_offsets [%" PRIu64 ", %" PRIu64
                             "]) and '%s' ([%" PRIu64 ", %" PRIu64 "]) overlap",
                             sh->path, owner->name, owner->file_offset - ds,
                             owner->file_offset + owner->nbytes - ds, t[i].name,
                             t[i].file_offset - ds, t[i].file_offset + t[i].nbytes - ds);
        }
        if (t[i].file_offset > end)
            HM_DEBUG("%s: %" PRIu64 " unused bytes (hole) at data offsets [%" PRIu64 ", %" PRIu64
                     ") before tensor '%s'",
                     sh->path, t[i].file_offset - end, end - ds, t[i].file_offset - ds, t[i].name);
        if (t[i].file_offset + t[i].nbytes >= end) {
            end = t[i].file_offset + t[i].nbytes;
            owner = &t[i];
        }
    }
    if (end < sh->size)
        HM_DEBUG("%s: %" PRIu64 " unused bytes (hole) at the end of the data section", sh->path,
                 sh->size - end);
    return HM_OK;
}

static hm_status parse_shard(hm_safetensors *st, uint32_t si) {
    hm_st_shard *sh = &st->shards[si];
    const char *path = sh->path;
    if (sh->size < 8)
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: file is %" PRIu64 " bytes, shorter than the 8-byte header length "
                         "that starts a safetensors file",
                         path, sh->size);
    uint64_t n = read_le64(sh->base);
    if (n > HM_ST_MAX_HEADER)
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: header length %" PRIu64 " (u64 LE at offset 0) is absurd: larger "
                         "than the %" PRIu64 " MiB limit (corrupt, or not a safetensors file)",
                         path, n, HM_ST_MAX_HEADER >> 20);
    if (n > sh->size - 8)
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: header length %" PRIu64 " (u64 LE at offset 0) is larger than the "
                         "%" PRIu64 " bytes that follow it (file size %" PRIu64 "; truncated?)",
                         path, n, sh->size - 8, sh->size);
    const uint8_t *hdr = sh->base + 8;
    if (n == 0)
        return hm_errorf(HM_ERR_FORMAT, "%s: header is empty, expected a JSON object", path);
    if (hdr[0] != '{')
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: header must start with '{' (file offset 8 holds byte 0x%02x)", path,
                         hdr[0]);
    size_t bad = utf8_invalid_at(hdr, (size_t)n);
    if (bad != SIZE_MAX)
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: header is not valid UTF-8: byte 0x%02x at file offset %zu", path,
                         hdr[bad], bad + 8);
    sh->data_start = 8 + n;
    uint64_t data_size = sh->size - sh->data_start;

    json_error_t je;
    json_t *root = json_loadb((const char *)hdr, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: header is not valid JSON: %s at line %d, column %d (file offset "
                         "%lld)",
                         path, je.text, je.line, je.column, (long long)je.position + 8);
    hm_status s = HM_OK;
    if (!json_is_object(root)) {
        s = hm_errorf(HM_ERR_FORMAT, "%s: header is not a JSON object", path);
        goto done;
    }
    size_t first = st->n_tensors;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0)
            s = add_metadata(st, path, v);
        else
            s = parse_entry(st, si, key, v, data_size);
        if (s != HM_OK) goto done;
    }
    sh->n_tensors = st->n_tensors - first;
    s = check_layout(st, si, first);
done:
    json_decref(root);
    return s;
}

static int cmp_by_name(const void *pa, const void *pb) {
    const hm_st_tensor *a = *(const hm_st_tensor *const *)pa, *b = *(const hm_st_tensor *const *)pb;
    int c = strcmp(a->name, b->name);
    if (c) return c;
    return a->shard < b->shard ? -1 : a->shard > b->shard; /* messages name shards in order */
}

static int cmp_meta(const void *pa, const void *pb) {
    const st_meta *a = pa, *b = pb;
    int c = strcmp(a->key, b->key);
    if (c) return c;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Sorts the merged __metadata__ by key; of equal keys (from different shards) the first stays. */
static void sort_metadata(hm_safetensors *st) {
    if (st->n_meta > 1) qsort(st->meta, st->n_meta, sizeof *st->meta, cmp_meta);
    size_t n = 0;
    for (size_t i = 0; i < st->n_meta; i++) {
        if (n > 0 && strcmp(st->meta[i].key, st->meta[n - 1].key) == 0) {
            if (strcmp(st->meta[i].value, st->meta[n - 1].value) != 0)
                HM_DEBUG("%s: shards disagree on __metadata__ '%s' ('%s' vs '%s'); keeping '%s'",
                         st->name, st->meta[i].key, st->meta[n - 1].value, st->meta[i].value,
                         st->meta[n - 1].value);
            continue;
        }
        st->meta[n++] = st->meta[i];
    }
    st->n_meta = n;
}

/* Builds the name index and sorts the metadata; a name twice (only possible across shards) is an
 * error. */
static hm_status build_index(hm_safetensors *st) {
    sort_metadata(st);
    st->by_name = malloc((st->n_tensors ? st->n_tensors : 1) * sizeof *st->by_name);
    if (!st->by_name)
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory for the index of %zu tensors",
                         st->name, st->n_tensors);
    for (size_t i = 0; i < st->n_tensors; i++) st->by_name[i] = &st->tensors[i];
    if (st->n_tensors > 1) qsort(st->by_name, st->n_tensors, sizeof *st->by_name, cmp_by_name);
    for (size_t i = 1; i < st->n_tensors; i++) {
        const hm_st_tensor *a = st->by_name[i - 1], *b = st->by_name[i];
        if (strcmp(a->name, b->name) == 0)
            return hm_errorf(HM_ERR_FORMAT, "%s: tensor '%s' appears twice: in %s and in %s",
                             st->name, a->name, st->shards[a->shard].path,
                             st->shards[b->shard].path);
    }
    return HM_OK;
}

/* ---- public open functions ------------------------------------------------------------------ */

hm_status hm_st_parse_memory(const void *data, size_t size, const char *name,
                             hm_safetensors **out) {
    if (!out) return hm_errorf(HM_ERR_INVALID_ARG, "safetensors: out is NULL");
    *out = NULL;
    if (!name) name = "(memory)";
    if (!data && size)
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: data is NULL but size is %zu", name, size);
    hm_safetensors *st;
    hm_status s = st_new(name, 1, &st);
    if (s != HM_OK) return s;
    st->shards[0].path = st->name;
    st->shards[0].base = data;
    st->shards[0].size = size;
    s = parse_shard(st, 0);
    if (s == HM_OK) s = build_index(st);
    if (s != HM_OK) {
        hm_st_close(st);
        return s;
    }
    *out = st;
    return HM_OK;
}

hm_status hm_st_open_file(const char *path, hm_safetensors **out) {
    if (!out) return hm_errorf(HM_ERR_INVALID_ARG, "safetensors: out is NULL");
    *out = NULL;
    if (!path) return hm_errorf(HM_ERR_INVALID_ARG, "safetensors: path is NULL");
    hm_safetensors *st;
    hm_status s = st_new(path, 1, &st);
    if (s != HM_OK) return s;
    s = map_shard(st, 0, st->name);
    if (s == HM_OK) s = parse_shard(st, 0);
    if (s == HM_OK) s = build_index(st);
    if (s != HM_OK) {
        hm_st_close(st);
        return s;
    }
    *out = st;
    return HM_OK;
}

static bool plain_file_name(const char *s) {
    return s[0] != '\0' && !strchr(s, '/') && !strstr(s, "..");
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks weight_map against the shards' contents (names[] are the shards' file names). */
static hm_status check_weight_map(hm_safetensors *st, const char *index_path, const json_t *wm,
                                  const char *const *names) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)wm, key, v) {
        const char *want = json_string_value(v);
        const hm_st_tensor *t = hm_st_find(st, key);
        if (!t)
            return hm_errorf(HM_ERR_FORMAT,
                             "%s: weight_map puts tensor '%s' in '%s', but that shard does not "
                             "hold it (no shard does)",
                             index_path, key, want);
        if (strcmp(names[t->shard], want) != 0)
            return hm_errorf(HM_ERR_FORMAT,
                             "%s: weight_map puts tensor '%s' in '%s', but that shard does not "
                             "hold it (it is in '%s')",
                             index_path, key, want, names[t->shard]);
    }
    if (st->n_tensors != json_object_size(wm)) {
        for (size_t i = 0; i < st->n_tensors; i++) {
            const hm_st_tensor *t = &st->tensors[i];
            if (!json_object_get(wm, t->name))
                return hm_errorf(HM_ERR_FORMAT,
                                 "%s: shard '%s' holds tensor '%s', which weight_map does not list",
                                 index_path, names[t->shard], t->name);
        }
    }
    return HM_OK;
}

static hm_status open_index(const char *index_path, hm_safetensors **out) {
    *out = NULL;
    hm_mapped_file f;
    hm_status s = hm_file_map(index_path, NULL, &f);
    if (s != HM_OK) return s;
    if (f.size > HM_ST_MAX_HEADER) {
        hm_file_unmap(&f);
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: %zu bytes is too large for an index (limit %" PRIu64 " MiB)",
                         index_path, f.size, HM_ST_MAX_HEADER >> 20);
    }
    size_t size = f.size;
    json_error_t je;
    json_t *root =
        size ? json_loadb((const char *)f.data, size, JSON_REJECT_DUPLICATES, &je) : NULL;
    hm_file_unmap(&f);
    if (!root) {
        if (size == 0) return hm_errorf(HM_ERR_FORMAT, "%s: file is empty", index_path);
        return hm_errorf(HM_ERR_FORMAT, "%s: not valid JSON: %s at line %d, column %d", index_path,
                         je.text, je.line, je.column);
    }
    const char **names = NULL;
    hm_safetensors *st = NULL;
    char brief[96];
    const json_t *wm = json_object_get(root, "weight_map");
    const json_t *md = json_object_get(root, "metadata");
    if (!json_is_object(root)) {
        s = hm_errorf(HM_ERR_FORMAT, "%s: expected a JSON object with a weight_map", index_path);
        goto done;
    }
    if (md && !json_is_object(md)) {
        s = hm_errorf(HM_ERR_FORMAT, "%s: metadata is %s, expected an object", index_path,
                      json_brief(md, brief, sizeof brief));
        goto done;
    }
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        s = hm_errorf(HM_ERR_FORMAT,
                      "%s: weight_map is %s, expected a non-empty object of tensor name -> "
                      "shard file",
                      index_path, wm ? json_brief(wm, brief, sizeof brief) : "missing");
        goto done;
    }

    /* The distinct shard names, sorted. */
    size_t n = 0;
    names = malloc(json_object_size(wm) * sizeof *names);
    if (!names) {
        s = hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", index_path);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)wm, key, v) {
        if (!json_is_string(v)) {
            s = hm_errorf(HM_ERR_FORMAT, "%s: weight_map['%s'] is %s, expected a shard file name",
                          index_path, key, json_brief(v, brief, sizeof brief));
            goto done;
        }
        if (!plain_file_name(json_string_value(v))) {
            s = hm_errorf(HM_ERR_FORMAT,
                          "%s: weight_map['%s'] names shard '%s': a shard must be a plain file "
                          "name next to the index (no '/' or '..')",
                          index_path, key, json_string_value(v));
            goto done;
        }
        names[n++] = json_string_value(v);
    }
    if (n > 1) qsort(names, n, sizeof *names, cmp_str);
    size_t n_shards = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || strcmp(names[i], names[n_shards - 1]) != 0) names[n_shards++] = names[i];

    s = st_new(index_path, n_shards, &st);
    if (s != HM_OK) goto done;
    const char *slash = strrchr(st->name, '/');
    char *dir = slash ? hm_arena_alloc(&st->strings, (size_t)(slash - st->name) + 2, 1)
                      : arena_strdup(st, ".");
    if (!dir) {
        s = hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", index_path);
        goto done;
    }
    if (slash) {
        size_t dl = slash == st->name ? 1 : (size_t)(slash - st->name); /* "/x.json" -> "/" */
        memcpy(dir, st->name, dl);
        dir[dl] = '\0';
    }
    for (size_t i = 0; i < n_shards; i++) {
        const char *path = arena_join(st, dir, names[i]);
        if (!path) {
            s = hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", index_path);
            goto done;
        }
        s = map_shard(st, i, path);
        if (s != HM_OK) {
            hm_error_prefix(s, "%s: shard '%s' named by weight_map", index_path, names[i]);
            goto done;
        }
        s = parse_shard(st, (uint32_t)i);
        if (s != HM_OK) goto done;
    }
    s = build_index(st);
    if (s == HM_OK) s = check_weight_map(st, index_path, wm, names);
done:
    free(names);
    json_decref(root);
    if (s != HM_OK) {
        hm_st_close(st);
        return s;
    }
    *out = st;
    return HM_OK;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

hm_status hm_st_open(const char *path, hm_safetensors **out) {
    if (!out) return hm_errorf(HM_ERR_INVALID_ARG, "safetensors: out is NULL");
    *out = NULL;
    if (!path) return hm_errorf(HM_ERR_INVALID_ARG, "safetensors: path is NULL");
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        return hm_errorf_errno(e == ENOENT ? HM_ERR_NOT_FOUND : HM_ERR_IO, e, "%s: cannot open",
                               path);
    }
    if (!S_ISDIR(sb.st_mode))
        return ends_with(path, ".json") ? open_index(path, out) : hm_st_open_file(path, out);

    size_t len = strlen(path);
    char *p = malloc(len + sizeof INDEX_NAME + 1);
    if (!p) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", path);
    const char *sep = len && path[len - 1] == '/' ? "" : "/";
    hm_status s;
    sprintf(p, "%s%s%s", path, sep, SINGLE_NAME);
    if (stat(p, &sb) == 0) {
        s = hm_st_open_file(p, out);
    } else {
        sprintf(p, "%s%s%s", path, sep, INDEX_NAME);
        if (stat(p, &sb) == 0)
            s = open_index(p, out);
        else
            s = hm_errorf(HM_ERR_NOT_FOUND,
                          "%s: directory holds neither " SINGLE_NAME " nor " INDEX_NAME, path);
    }
    free(p);
    return s;
}

/* ---- queries -------------------------------------------------------------------------------- */

size_t hm_st_n_tensors(const hm_safetensors *st) {
    return st ? st->n_tensors : 0;
}

const hm_st_tensor *hm_st_tensor_at(const hm_safetensors *st, size_t i) {
    return st && i < st->n_tensors ? &st->tensors[i] : NULL;
}

const hm_st_tensor *hm_st_find(const hm_safetensors *st, const char *name) {
    if (!st || !name || !st->by_name) return NULL;
    size_t lo = 0, hi = st->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->by_name[mid]->name, name);
        if (c == 0) return st->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

hm_status hm_st_get(const hm_safetensors *st, const char *name, const hm_st_tensor **out) {
    if (!st || !name || !out) return hm_errorf(HM_ERR_INVALID_ARG, "safetensors: NULL argument");
    *out = hm_st_find(st, name);
    if (!*out)
        return hm_errorf(HM_ERR_NOT_FOUND, "%s: no tensor named '%s' (among %zu)", st->name, name,
                         st->n_tensors);
    return HM_OK;
}

size_t hm_st_n_shards(const hm_safetensors *st) {
    return st ? st->n_shards : 0;
}

const hm_st_shard *hm_st_shard_at(const hm_safetensors *st, size_t i) {
    return st && i < st->n_shards ? &st->shards[i] : NULL;
}

size_t hm_st_n_metadata(const hm_safetensors *st) {
    return st ? st->n_meta : 0;
}

hm_status hm_st_metadata_at(const hm_safetensors *st, size_t i, const char **key,
                            const char **value) {
    if (!st || i >= st->n_meta)
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: metadata index %zu out of range (%zu entries)",
                         st ? st->name : "safetensors", i, st ? st->n_meta : 0);
    if (key) *key = st->meta[i].key;
    if (value) *value = st->meta[i].value;
    return HM_OK;
}

const char *hm_st_metadata_get(const hm_safetensors *st, const char *key) {
    if (!st || !key) return NULL;
    size_t lo = 0, hi = st->n_meta;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->meta[mid].key, key);
        if (c == 0) return st->meta[mid].value;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

hm_status hm_st_fp8_scales(const hm_safetensors *st, const hm_st_tensor *t,
                           const hm_st_tensor **out) {
    char name[1024];
    *out = NULL;
    if (snprintf(name, sizeof name, "%s_scale_inv", t->name) >= (int)sizeof name)
        return hm_errorf(HM_ERR_UNSUPPORTED, "FP8 tensor '%.64s...': name too long", t->name);
    if (t->n_dims != 2)
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "FP8 tensor '%s' has %u dimensions (only 2-D FP8 weights are read)",
                         t->name, t->n_dims);
    const hm_st_tensor *s = hm_st_find(st, name);
    if (!s)
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "FP8 tensor '%s' has no '%s' (only 128 x 128 block scales are supported)",
                         t->name, name);
    const int64_t tr = (t->shape[0] + 127) / 128, tc = (t->shape[1] + 127) / 128;
    if (s->n_dims != 2 || s->shape[0] != tr || s->shape[1] != tc ||
        (s->dtype != HM_ST_F32 && s->dtype != HM_ST_BF16))
        return hm_errorf(HM_ERR_FORMAT,
                         "'%s' is %s [%lld x %lld], expected F32 or BF16 [%lld x %lld] (one scale "
                         "per 128 x 128 block of '%s')",
                         name, hm_st_dtype_name(s->dtype), (long long)s->shape[0],
                         s->n_dims > 1 ? (long long)s->shape[1] : 0LL, (long long)tr, (long long)tc,
                         t->name);
    /* a NaN or inf scale makes its whole block NaN: said here, naming the block, rather than as
     * NaN logits later (a few floats per 16384 weights to read) */
    for (int64_t i = 0; i < tr * tc; i++) {
        const float f = hm_st_scale_at(s, (size_t)i);
        if (!isfinite(f))
            return hm_errorf(
                HM_ERR_FORMAT,
                "'%s': the scale of block (%lld, %lld) is %s (a NaN or inf scale makes "
                "that block of '%s' NaN)",
                name, (long long)(i / tc), (long long)(i % tc), isnan(f) ? "NaN" : "inf", t->name);
    }
    *out = s;
    return HM_OK;
}

float hm_st_scale_at(const hm_st_tensor *s, size_t i) {
    if (s->dtype == HM_ST_F32) {
        float f;
        memcpy(&f, (const uint8_t *)s->data + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const uint8_t *)s->data + 2 * i, 2);
    return hm_bf16_to_f32(h);
}
