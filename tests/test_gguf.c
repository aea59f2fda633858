/* test_gguf.c - GGUF reader against files written by the `gguf` Python package (manifest), our
 * writer -> our reader round trips, and strict rejection of every kind of corruption (all
 * truncations, hostile counts, bad types, misalignment, overlaps, duplicates).
 * Modes for tests/gguf_python.py: --write FILE (reference file for the Python reader),
 * --check DIR (read DIR/pyfixture.gguf against DIR/pyfixture.json). */
#include <jansson.h>
#include <math.h>
#include <unistd.h>

#include "format/gguf.h"
#include "test.h"

static uint64_t fnv1a(const uint8_t *p, uint64_t n) {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static const char *vtype_of(const char *name) {
    return name;
}

/* Compares one value with its manifest entry {"type":..., "value":..., "elem":...}. */
static void check_value(const char *key, const hm_gguf_value *v, json_t *m) {
    const char *type = json_string_value(json_object_get(m, "type"));
    json_t *val = json_object_get(m, "value");
    CHECK_MSG(type && strcmp(hm_gguf_vtype_name(v->type), vtype_of(type)) == 0,
              "%s: type %s, manifest %s", key, hm_gguf_vtype_name(v->type), type ? type : "?");
    switch (v->type) {
    case HM_GGUF_UINT8:
    case HM_GGUF_UINT16:
    case HM_GGUF_UINT32:
    case HM_GGUF_UINT64:
        CHECK_MSG((json_is_integer(val) && (uint64_t)json_integer_value(val) == v->v.u) ||
                      (json_is_string(val) && strtoull(json_string_value(val), NULL, 10) == v->v.u),
                  "%s: %llu", key, (unsigned long long)v->v.u);
        break;
    case HM_GGUF_INT8:
    case HM_GGUF_INT16:
    case HM_GGUF_INT32:
    case HM_GGUF_INT64:
        CHECK_MSG(json_integer_value(val) == v->v.i, "%s: %lld", key, (long long)v->v.i);
        break;
    case HM_GGUF_FLOAT32:
        CHECK_MSG((float)json_number_value(val) == (float)v->v.f, "%s: %g", key, v->v.f);
        break;
    case HM_GGUF_FLOAT64:
        CHECK_MSG(json_number_value(val) == v->v.f, "%s: %g", key, v->v.f);
        break;
    case HM_GGUF_BOOL:
        CHECK_MSG(json_is_true(val) == v->v.b, "%s", key);
        break;
    case HM_GGUF_STRING: {
        const char *s = json_string_value(val);
        CHECK_MSG(s && hm_gguf_str_eq(v->v.s, s), "%s: '%.*s'", key, (int)v->v.s.len, v->v.s.ptr);
        break;
    }
    case HM_GGUF_ARRAY: {
        CHECK_MSG(json_array_size(val) == v->arr_n, "%s: %llu elements, manifest %zu", key,
                  (unsigned long long)v->arr_n, json_array_size(val));
        for (uint64_t i = 0; i < v->arr_n && i < json_array_size(val); i++) {
            json_t *e = json_array_get(val, i);
            switch (v->arr_type) {
            case HM_GGUF_STRING:
                CHECK_MSG(hm_gguf_str_eq(v->arr_strs[i], json_string_value(e)), "%s[%llu]", key,
                          (unsigned long long)i);
                break;
            case HM_GGUF_ARRAY: {
                const hm_gguf_value *it = &v->arr_items[i];
                CHECK(it->type == HM_GGUF_ARRAY && it->arr_n == json_array_size(e));
                for (uint64_t k = 0; k < it->arr_n; k++)
                    CHECK(hm_gguf_arr_int(it, k) == json_integer_value(json_array_get(e, k)));
                break;
            }
            case HM_GGUF_FLOAT32:
            case HM_GGUF_FLOAT64:
                CHECK_MSG((float)hm_gguf_arr_float(v, i) == (float)json_number_value(e), "%s[%llu]",
                          key, (unsigned long long)i);
                break;
            case HM_GGUF_BOOL:
                CHECK(hm_gguf_arr_uint(v, i) == (uint64_t)json_is_true(e));
                break;
            default:
                CHECK_MSG(hm_gguf_arr_int(v, i) == json_integer_value(e), "%s[%llu]", key,
                          (unsigned long long)i);
            }
        }
        break;
    }
    default:
        CHECK_MSG(0, "%s: unexpected type", key);
    }
}

static int check_dir(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/pyfixture.json", dir);
    json_error_t jerr;
    json_t *m = json_load_file(path, 0, &jerr);
    CHECK_MSG(m != NULL, "%s: %s", path, jerr.text);
    if (!m) return 1;
    snprintf(path, sizeof path, "%s/pyfixture.gguf", dir);
    hm_gguf *g;
    CHECK_OK(hm_gguf_open(path, &g));
    if (!g) return 1;
    CHECK(hm_gguf_version(g) == 3);
    CHECK(hm_gguf_alignment(g) == json_integer_value(json_object_get(m, "alignment")));
    CHECK(hm_gguf_data_offset(g) % hm_gguf_alignment(g) == 0);
    json_t *kvs = json_object_get(m, "kv");
    CHECK(hm_gguf_n_kv(g) == json_object_size(kvs));
    const char *key;
    json_t *entry;
    json_object_foreach(kvs, key, entry) {
        const hm_gguf_kv *kv = hm_gguf_find_kv(g, key);
        CHECK_MSG(kv != NULL, "key %s missing", key);
        if (kv) check_value(key, &kv->val, entry);
    }
    json_t *ts = json_object_get(m, "tensors");
    CHECK(hm_gguf_n_tensors(g) == json_array_size(ts));
    size_t i;
    json_array_foreach(ts, i, entry) {
        const char *name = json_string_value(json_object_get(entry, "name"));
        const hm_gguf_tensor *t = hm_gguf_find_tensor(g, name);
        CHECK_MSG(t != NULL, "tensor %s missing", name);
        if (!t) continue;
        CHECK(t == hm_gguf_tensor_at(g, i)); /* file order kept */
        CHECK(t->type == json_integer_value(json_object_get(entry, "type")));
        json_t *ne = json_object_get(entry, "ne");
        CHECK(t->n_dims == json_array_size(ne));
        for (uint32_t d = 0; d < t->n_dims; d++)
            CHECK(t->ne[d] == (uint64_t)json_integer_value(json_array_get(ne, d)));
        char hex[32];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a(t->data, t->bytes));
        CHECK_MSG(strcmp(hex, json_string_value(json_object_get(entry, "fnv"))) == 0,
                  "tensor %s data hash %s", name, hex);
        CHECK((t->data - (const uint8_t *)hm_gguf_tensor_at(g, 0)->data) % 64 == 0);
    }
    hm_gguf_close(g);
    json_decref(m);
    return 0;
}

/* ---- the reference file our writer makes (tests/gguf_python.py checks it with GGUFReader) ---- */

static void tensor_bytes(int which, uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * (size_t)(7 + which * 6) + (size_t)which) & 255);
}

static hm_status write_reference(const char *path, const hm_gguf *copy_from) {
    hm_gguf_writer *w;
    hm_status st = hm_gguf_writer_open(path, &w);
    if (st != HM_OK) return st;
#define TRY(x)                                                                                     \
    do {                                                                                           \
        if ((st = (x)) != HM_OK) goto fail;                                                        \
    } while (0)
    TRY(hm_gguf_w_str(w, "general.architecture", "qwen3moe"));
    TRY(hm_gguf_w_uint(w, "general.alignment", HM_GGUF_UINT32, 128));
    TRY(hm_gguf_w_uint(w, "t.u8", HM_GGUF_UINT8, 7));
    TRY(hm_gguf_w_int(w, "t.i16", HM_GGUF_INT16, -3));
    TRY(hm_gguf_w_uint(w, "t.u64", HM_GGUF_UINT64, 1ull << 40));
    TRY(hm_gguf_w_int(w, "t.i64", HM_GGUF_INT64, -5));
    TRY(hm_gguf_w_f32(w, "t.f32", 1.5f));
    TRY(hm_gguf_w_f64(w, "t.f64", 2.25));
    TRY(hm_gguf_w_bool(w, "t.bool", true));
    TRY(hm_gguf_w_str(w, "t.str",
                      "\xc3\xbc"
                      "n"
                      "\xc3\xaf"
                      "code"));
    uint32_t u32s[3] = {1, 2, 3};
    TRY(hm_gguf_w_arr(w, "t.arr_u32", HM_GGUF_UINT32, 3, u32s));
    float f32s[2] = {0.5f, 0.25f};
    TRY(hm_gguf_w_arr(w, "t.arr_f32", HM_GGUF_FLOAT32, 2, f32s));
    const char *strs[3] = {"a", "bc", ""};
    TRY(hm_gguf_w_arr_str(w, "t.arr_str", 3, strs, NULL));
    TRY(hm_gguf_w_arr(w, "t.arr_empty", HM_GGUF_INT32, 0, NULL));
    if (copy_from)
        TRY(hm_gguf_w_copy_kv(w, "t.nested", hm_gguf_find_kv(copy_from, "test.arr_nested")));
    uint64_t ne_a[2] = {3, 2}, ne_b[2] = {64, 2}, ne_c[1] = {16}, ne_d[1] = {5};
    TRY(hm_gguf_w_tensor(w, "a", HM_TYPE_F32, 2, ne_a));
    TRY(hm_gguf_w_tensor(w, "b", HM_TYPE_Q8_0, 2, ne_b));
    TRY(hm_gguf_w_tensor(w, "c", HM_TYPE_BF16, 1, ne_c));
    TRY(hm_gguf_w_tensor(w, "d", HM_TYPE_F16, 1, ne_d));
    float a[6];
    for (int i = 0; i < 6; i++) a[i] = (float)i * 0.5f;
    TRY(hm_gguf_w_data(w, a, sizeof a));
    uint8_t buf[136];
    tensor_bytes(1, buf, 136);
    TRY(hm_gguf_w_data(w, buf, 136));
    tensor_bytes(2, buf, 32);
    TRY(hm_gguf_w_data(w, buf, 32));
    tensor_bytes(3, buf, 10);
    for (int k = 0; k < 10; k += 3) TRY(hm_gguf_w_data(w, buf + k, k + 3 <= 10 ? 3 : 10 - k));
    return hm_gguf_writer_finish(w);
fail:
    hm_gguf_writer_abort(w);
    return st;
#undef TRY
}

static void test_roundtrip(const hm_gguf *py) {
    char path[] = "/tmp/hmoe_gguf_rt_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK_OK(write_reference(path, py));
    char part[64];
    snprintf(part, sizeof part, "%s.part", path);
    CHECK(access(part, F_OK) != 0); /* renamed into place */
    hm_gguf *g;
    CHECK_OK(hm_gguf_open(path, &g));
    if (!g) return;
    CHECK(hm_gguf_alignment(g) == 128 && hm_gguf_n_kv(g) == 15 && hm_gguf_n_tensors(g) == 4);
    uint64_t u;
    int64_t i64;
    double f;
    bool b;
    hm_gguf_str s;
    CHECK_OK(hm_gguf_get_uint(g, "t.u8", &u));
    CHECK(u == 7);
    CHECK_OK(hm_gguf_get_int(g, "t.i16", &i64));
    CHECK(i64 == -3);
    CHECK_STATUS(hm_gguf_get_uint(g, "t.i16", &u), HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "expected a value >= 0, got -3");
    CHECK_OK(hm_gguf_get_uint(g, "t.u64", &u));
    CHECK(u == 1ull << 40);
    CHECK_OK(hm_gguf_get_float(g, "t.f32", &f));
    CHECK(f == 1.5);
    CHECK_OK(hm_gguf_get_float(g, "t.f64", &f));
    CHECK(f == 2.25);
    CHECK_OK(hm_gguf_get_bool(g, "t.bool", &b));
    CHECK(b);
    CHECK_OK(hm_gguf_get_str(g, "t.str", &s));
    CHECK(hm_gguf_str_eq(s, "\xc3\xbc"
                            "n"
                            "\xc3\xaf"
                            "code"));
    CHECK_STATUS(hm_gguf_get_str(g, "t.u8", &s), HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "metadata key 't.u8': expected string, got uint8");
    CHECK_STATUS(hm_gguf_get_uint(g, "no.such.key", &u), HM_ERR_NOT_FOUND);
    CHECK_CONTAINS(hm_last_error(), "'no.such.key' is missing");
    const hm_gguf_value *arr;
    CHECK_OK(hm_gguf_get_arr(g, "t.arr_u32", &arr));
    CHECK(arr->arr_n == 3 && hm_gguf_arr_uint(arr, 2) == 3 && hm_gguf_arr_uint(arr, 3) == 0);
    CHECK_OK(hm_gguf_get_arr(g, "t.arr_str", &arr));
    CHECK(arr->arr_n == 3 && hm_gguf_str_eq(arr->arr_strs[1], "bc") && arr->arr_strs[2].len == 0);
    CHECK_OK(hm_gguf_get_arr(g, "t.arr_empty", &arr));
    CHECK(arr->arr_n == 0 && arr->arr_type == HM_GGUF_INT32);
    CHECK_OK(hm_gguf_get_arr(g, "t.nested", &arr));
    CHECK(arr->arr_type == HM_GGUF_ARRAY && arr->arr_n == 3 && arr->arr_items[0].arr_n == 3 &&
          hm_gguf_arr_int(&arr->arr_items[2], 1) == 6);
    const hm_gguf_tensor *t = hm_gguf_find_tensor(g, "a");
    CHECK(t && t->type == HM_TYPE_F32 && t->ne[0] == 3 && t->ne[1] == 2 && t->bytes == 24);
    if (t) CHECK(((const float *)t->data)[5] == 2.5f);
    uint8_t buf[136];
    t = hm_gguf_find_tensor(g, "b");
    tensor_bytes(1, buf, 136);
    CHECK(t && t->bytes == 136 && memcmp(t->data, buf, 136) == 0);
    t = hm_gguf_find_tensor(g, "d");
    tensor_bytes(3, buf, 10);
    CHECK(t && t->bytes == 10 && memcmp(t->data, buf, 10) == 0);
    for (uint64_t k = 0; k < hm_gguf_n_tensors(g); k++)
        CHECK((hm_gguf_tensor_at(g, k)->offset % 128) == 0);
    CHECK(hm_gguf_find_tensor(g, "zz") == NULL);
    hm_gguf_close(g);
    unlink(path);
}

static void test_writer_errors(void) {
    char path[] = "/tmp/hmoe_gguf_we_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    unlink(path);
    hm_gguf_writer *w;
    CHECK_OK(hm_gguf_writer_open(path, &w));
    CHECK_OK(hm_gguf_w_str(w, "k", "v"));
    CHECK_STATUS(hm_gguf_w_str(w, "k", "again"), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "duplicate metadata key 'k'");
    CHECK_STATUS(hm_gguf_w_uint(w, "x", HM_GGUF_UINT8, 300), HM_ERR_INVALID_ARG);
    CHECK_STATUS(hm_gguf_w_int(w, "x", HM_GGUF_INT8, -129), HM_ERR_INVALID_ARG);
    CHECK_STATUS(hm_gguf_w_uint(w, "general.alignment", HM_GGUF_UINT32, 48), HM_ERR_INVALID_ARG);
    CHECK_STATUS(hm_gguf_w_str(w, "after", "error"), HM_ERR_INVALID_ARG); /* sticky */
    CHECK_CONTAINS(hm_last_error(), "general.alignment must be");
    hm_gguf_writer_abort(w);
    CHECK_OK(hm_gguf_writer_open(path, &w));
    uint64_t ne[2] = {33, 2};
    CHECK_STATUS(hm_gguf_w_tensor(w, "q", HM_TYPE_Q4_K, 2, ne), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "not a multiple of Q4_K's block size 256");
    CHECK_STATUS(hm_gguf_w_tensor(w, "q", 4, 2, ne), HM_ERR_INVALID_ARG);
    const uint64_t ne8[2] = {128, 2}; /* hmoe's own layouts never go into a GGUF file */
    CHECK_STATUS(hm_gguf_w_tensor(w, "f", HM_TYPE_FP8_B128, 2, ne8), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "FP8_B128 is hmoe's in-memory layout");
    CHECK_STATUS(
        hm_gguf_w_tensor(w, "0123456789012345678901234567890123456789012345678901234567890123",
                         HM_TYPE_F32, 2, ne),
        HM_ERR_INVALID_ARG);
    CHECK_OK(hm_gguf_w_tensor(w, "ok", HM_TYPE_F32, 2, ne));
    CHECK_STATUS(hm_gguf_w_tensor(w, "ok", HM_TYPE_F32, 2, ne), HM_ERR_INVALID_ARG);
    CHECK_STATUS(hm_gguf_w_str(w, "late", "key"), HM_ERR_INVALID_ARG);
    CHECK(hm_gguf_w_pending(w) == 33 * 2 * 4);
    float f[10] = {0};
    CHECK_OK(hm_gguf_w_data(w, f, sizeof f));
    CHECK(hm_gguf_w_pending(w) == 33 * 2 * 4 - 40);
    CHECK_STATUS(hm_gguf_writer_finish(w), HM_ERR_INVALID_ARG); /* incomplete */
    CHECK_CONTAINS(hm_last_error(), "incomplete");
    CHECK(access(path, F_OK) != 0); /* nothing under the final name */
    char part[64];
    snprintf(part, sizeof part, "%s.part", path);
    CHECK(access(part, F_OK) != 0);
    CHECK_STATUS(hm_gguf_writer_open("/nonexistent/dir/x.gguf", &w), HM_ERR_IO);
    CHECK_CONTAINS(hm_last_error(), "/nonexistent/dir/x.gguf: cannot create");
    hm_gguf_writer_abort(NULL);
}

/* ---- corruption ---- */

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    uint8_t *p = malloc(*n);
    if (fread(p, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return p;
}

static size_t find(const uint8_t *p, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(p + i, needle, k) == 0) return i;
    return (size_t)-1;
}

static void expect_reject(const uint8_t *p, size_t n, const char *what, const char *msg) {
    hm_gguf *g = NULL;
    hm_status st = hm_gguf_parse_memory(p, n, "mut.gguf", &g);
    CHECK_MSG(st != HM_OK && g == NULL, "%s: accepted", what);
    if (st != HM_OK && msg)
        CHECK_MSG(strstr(hm_last_error(), msg), "%s: message '%s' lacks '%s'", what,
                  hm_last_error(), msg);
    hm_gguf_close(g);
}

static void test_corruption(const char *fixture) {
    size_t n;
    uint8_t *orig = read_file(fixture, &n);
    CHECK(orig && n > 1000);
    if (!orig) return;
    uint8_t *p = malloc(n + 64);
    hm_gguf *g;
    CHECK_OK(hm_gguf_parse_memory(orig, n, "ok.gguf", &g));
    uint64_t data_off = hm_gguf_data_offset(g), data_end = 0;
    for (uint64_t i = 0; i < hm_gguf_n_tensors(g); i++) {
        const hm_gguf_tensor *t = hm_gguf_tensor_at(g, i);
        if (data_off + t->offset + t->bytes > data_end) data_end = data_off + t->offset + t->bytes;
    }
    hm_gguf_close(g);
    CHECK(data_end <= n);

    /* every truncation is rejected (each copy is exactly as long as the cut, so ASan sees any
     * over-read) */
    for (size_t cut = 0; cut < data_end; cut++) { /* past data_end only padding is cut */
        uint8_t *q = malloc(cut ? cut : 1);
        memcpy(q, orig, cut);
        hm_gguf *t = NULL;
        hm_status st = hm_gguf_parse_memory(q, cut, "cut.gguf", &t);
        CHECK_MSG(st == HM_ERR_FORMAT && t == NULL, "truncation at %zu: %s", cut,
                  hm_status_str(st));
        if (cut == data_off + 10) CHECK_CONTAINS(hm_last_error(), "outside the data section");
        free(q);
    }

#define MUTATE(off, val, len)                                                                      \
    do {                                                                                           \
        memcpy(p, orig, n);                                                                        \
        uint64_t v_ = (val);                                                                       \
        memcpy(p + (off), &v_, (len));                                                             \
    } while (0)
    MUTATE(0, 0x46554746, 4);
    expect_reject(p, n, "magic", "not a GGUF file");
    MUTATE(4, 1, 4);
    expect_reject(p, n, "v1", "v1 is obsolete");
    MUTATE(4, 0x03000000, 4);
    expect_reject(p, n, "big endian", "big-endian");
    MUTATE(4, 77, 4);
    expect_reject(p, n, "version", "unknown GGUF version 77");
    MUTATE(8, 1ull << 60, 8);
    expect_reject(p, n, "tensor count", "claims");
    MUTATE(16, 1ull << 60, 8);
    expect_reject(p, n, "kv count", "claims 1152921504606846976 metadata entries");
    MUTATE(24, 1ull << 62, 8); /* first key length */
    expect_reject(p, n, "key length", "has length 4611686018427387904");

    /* value type of a key */
    size_t k = find(orig, n, "test.u8");
    CHECK(k != (size_t)-1);
    MUTATE(k + 7, 13, 4);
    expect_reject(p, n, "value type", "unknown value type 13");
    MUTATE(k + 11, 300, 1); /* fine: uint8 200 -> 44 */
    hm_gguf *ok;
    CHECK_OK(hm_gguf_parse_memory(p, n, "x", &ok));
    hm_gguf_close(ok);
    k = find(orig, n, "test.bool_t");
    MUTATE(k + 11 + 4, 2, 1);
    expect_reject(p, n, "bool", "not 0/1");
    k = find(orig, n, "test.arr_i32");
    MUTATE(k + 12 + 4, 99, 4);
    expect_reject(p, n, "array elem type", "unknown element type 99");
    MUTATE(k + 12 + 8, 1ull << 61, 8);
    expect_reject(p, n, "array count", "claims 2305843009213693952 int32 elements");
    k = find(orig, n, "test.arr_nested");
    MUTATE(k + 15 + 4 + 8 + 8, 1ull << 50, 8); /* first inner array's count */
    expect_reject(p, n, "inner array count", "claims");
    /* duplicate key: rename test.i8 to test.u8 */
    k = find(orig, n, "test.i8");
    memcpy(p, orig, n);
    memcpy(p + k, "test.u8", 7);
    expect_reject(p, n, "duplicate key", "duplicate metadata key 'test.u8'");
    /* alignment: 48 */
    k = find(orig, n, "general.alignment");
    MUTATE(k + 17 + 4, 48, 4);
    expect_reject(p, n, "alignment", "power of two");
    MUTATE(k + 17, HM_GGUF_INT32, 4);
    expect_reject(p, n, "alignment type", "general.alignment");

    /* tensor infos */
    k = find(orig, n, "blk.0.ffn_gate.weight");
    size_t info = k - 8;
    MUTATE(info + 8 + 21, 5, 4);
    expect_reject(p, n, "n_dims", "n_dims 5 not in [1, 4]");
    MUTATE(info + 8 + 21 + 4 + 16, 4, 4);
    expect_reject(p, n, "removed type", "unknown ggml type id 4");
    MUTATE(info + 8 + 21 + 4 + 16, 77, 4);
    expect_reject(p, n, "type", "unknown ggml type id 77");
    MUTATE(info + 8 + 21 + 4 + 16, HM_TYPE_FP8_B128, 4); /* an id of ours is not a file type */
    expect_reject(p, n, "internal type", "unknown ggml type id 42");
    MUTATE(info + 8 + 21 + 4, 100, 8);
    expect_reject(p, n, "row", "not a multiple of the Q4_K block size 256");
    MUTATE(info + 8 + 21 + 4, 1ull << 63, 8);
    expect_reject(p, n, "dim overflow", "overflows");
    MUTATE(info + 8 + 21 + 4 + 16 + 4, 65, 8);
    expect_reject(p, n, "misaligned", "not a multiple of the alignment 64");
    MUTATE(info + 8 + 21 + 4 + 16 + 4, 1ull << 40, 8);
    expect_reject(p, n, "outside", "outside the data section");
    MUTATE(info + 8 + 21 + 4 + 16 + 4, 0, 8); /* same offset as token_embd */
    expect_reject(p, n, "overlap", "overlap");
    MUTATE(info, 64, 8); /* name length 64 > 63 */
    expect_reject(p, n, "long name", "longer than 63");
    /* duplicate tensor name: blk.0.ffn_down -> blk.0.ffn_gate (same length) */
    k = find(orig, n, "blk.0.ffn_down.weight");
    memcpy(p, orig, n);
    memcpy(p + k, "blk.0.ffn_gate.weight", 21);
    expect_reject(p, n, "dup tensor", "duplicate tensor name 'blk.0.ffn_gate.weight'");
#undef MUTATE

    /* nesting deeper than allowed: hand-built */
    uint8_t deep[512];
    size_t o = 0;
    uint32_t u32;
    uint64_t u64;
#define PUT(v, len) (memcpy(deep + o, &(v), (len)), o += (len))
    u32 = HM_GGUF_MAGIC, PUT(u32, 4);
    u32 = 3, PUT(u32, 4);
    u64 = 0, PUT(u64, 8);
    u64 = 1, PUT(u64, 8);
    u64 = 1, PUT(u64, 8);
    deep[o++] = 'k';
    u32 = HM_GGUF_ARRAY, PUT(u32, 4);
    for (int d = 0; d < 12; d++) {
        u32 = HM_GGUF_ARRAY, PUT(u32, 4);
        u64 = 1, PUT(u64, 8);
    }
#undef PUT
    expect_reject(deep, o, "deep nesting", "nested deeper than 8");
    /* the empty file, and a header-only file with no tensors and no keys (valid) */
    expect_reject(orig, 0, "empty", "truncated at offset 0");
    uint8_t tiny[24] = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    CHECK_OK(hm_gguf_parse_memory(tiny, 24, "tiny", &g));
    CHECK(hm_gguf_n_tensors(g) == 0 && hm_gguf_n_kv(g) == 0);
    hm_gguf_close(g);
    CHECK_STATUS(hm_gguf_open("/nonexistent.gguf", &g), HM_ERR_NOT_FOUND);
    CHECK(g == NULL);
    free(p);
    free(orig);
}

static void test_types(void) {
    CHECK(hm_type_get(HM_TYPE_Q4_K)->block == 256 && hm_type_get(HM_TYPE_Q4_K)->bytes == 144);
    CHECK(hm_type_get(4) == NULL && hm_type_get(31) == NULL && hm_type_get(999) == NULL);
    CHECK(hm_type_from_name("q4_k") == HM_TYPE_Q4_K && hm_type_from_name("BF16") == HM_TYPE_BF16);
    CHECK(hm_type_from_name("Q4_2") == -1);
    uint64_t b;
    CHECK(hm_type_row_bytes(HM_TYPE_Q8_0, 64, &b) && b == 68);
    CHECK(!hm_type_row_bytes(HM_TYPE_Q8_0, 65, &b));
    CHECK(!hm_type_row_bytes(HM_TYPE_F32, UINT64_MAX, &b));
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--check")) {
        check_dir(argv[2]);
        return test_done("gguf --check");
    }
    if (argc == 4 && !strcmp(argv[1], "--write")) {
        hm_gguf *py;
        CHECK_OK(hm_gguf_open(argv[3], &py));
        CHECK_OK(write_reference(argv[2], py));
        hm_gguf_close(py);
        return test_done("gguf --write");
    }
    if (argc == 2 && !strcmp(argv[1], "--types")) { /* the table, for tests/gguf_python.py */
        for (uint32_t t = 0; t < HM_TYPE_COUNT; t++)
            if (hm_type_get(t))
                printf("%u %s %u %u\n", t, hm_type_name(t), hm_type_get(t)->block,
                       hm_type_get(t)->bytes);
        return 0;
    }
    char dir[1024], fixture[1100];
    snprintf(dir, sizeof dir, "%s/tests/data/gguf", HMOE_SOURCE_DIR);
    snprintf(fixture, sizeof fixture, "%s/pyfixture.gguf", dir);
    test_types();
    check_dir(dir);
    hm_gguf *py = NULL;
    CHECK_OK(hm_gguf_open(fixture, &py));
    test_roundtrip(py);
    hm_gguf_close(py);
    test_writer_errors();
    test_corruption(fixture);
    return test_done("gguf");
}
