/* test_safetensors.c - the safetensors reader against files written by the reference writer
 * (tests/gen/safetensors_fixtures.py: names, dtypes, shapes, metadata and an FNV-1a 64 of every
 * tensor's bytes in manifest.json), and every validation rule on malformed files built here.
 * HMOE_TEST_VERBOSE=1 prints each expected error message. */
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "format/safetensors.h"
#include "quant/fp16.h"
#include "quant/ref.h"
#include "quant/types.h"
#include "test.h"

static const char *g_data = HMOE_SOURCE_DIR "/tests/data/safetensors";
static bool g_verbose;

static uint64_t fnv1a64(const void *data, size_t n) {
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* ---- fixtures written by the reference implementation --------------------------------------- */

/* Checks an open model against the manifest entry of one fixture. */
static void check_model(const char *what, const hm_safetensors *st, const json_t *model) {
    const json_t *tensors = json_object_get(model, "tensors");
    const json_t *shards = json_object_get(model, "shards");
    const json_t *meta = json_object_get(model, "metadata");
    CHECK(json_is_object(tensors) && json_is_array(shards) && json_is_object(meta));
    CHECK_MSG(hm_st_n_tensors(st) == json_object_size(tensors), "%s: %zu tensors, want %zu", what,
              hm_st_n_tensors(st), json_object_size(tensors));
    CHECK(hm_st_n_shards(st) == json_array_size(shards));
    for (size_t i = 0; i < hm_st_n_shards(st) && i < json_array_size(shards); i++) {
        const hm_st_shard *sh = hm_st_shard_at(st, i);
        CHECK_MSG(ends_with(sh->path, json_string_value(json_array_get(shards, i))),
                  "%s: shard %zu is %s", what, i, sh->path);
        CHECK(sh->data_start >= 8 && sh->data_start <= sh->size);
    }
    CHECK(hm_st_shard_at(st, hm_st_n_shards(st)) == NULL);

    const char *name;
    json_t *want;
    json_object_foreach((json_t *)tensors, name, want) {
        const hm_st_tensor *t = hm_st_find(st, name);
        CHECK_MSG(t != NULL, "%s: tensor '%s' not found", what, name);
        if (!t) continue;
        CHECK(strcmp(t->name, name) == 0);
        const char *wdt = json_string_value(json_object_get(want, "dtype"));
        CHECK_MSG(strcmp(hm_st_dtype_name(t->dtype), wdt) == 0, "%s: '%s' dtype %s, want %s", what,
                  name, hm_st_dtype_name(t->dtype), wdt);
        const json_t *shape = json_object_get(want, "shape");
        CHECK_MSG(t->n_dims == json_array_size(shape), "%s: '%s' has %u dims", what, name,
                  t->n_dims);
        uint64_t count = 1;
        for (size_t d = 0; d < t->n_dims && d < json_array_size(shape); d++) {
            CHECK(t->shape[d] == json_integer_value(json_array_get(shape, d)));
            count *= (uint64_t)t->shape[d];
        }
        for (size_t d = t->n_dims; d < HM_ST_MAX_DIMS; d++) CHECK(t->shape[d] == 0);
        CHECK(t->n_elements == count);
        CHECK(t->nbytes == (uint64_t)json_integer_value(json_object_get(want, "nbytes")));
        CHECK(t->nbytes == count * hm_st_dtype_size(t->dtype));
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, fnv1a64(t->data, t->nbytes));
        CHECK_MSG(strcmp(hex, json_string_value(json_object_get(want, "fnv1a64"))) == 0,
                  "%s: '%s' bytes hash %s, want %s", what, name, hex,
                  json_string_value(json_object_get(want, "fnv1a64")));
        const hm_st_shard *sh = hm_st_shard_at(st, t->shard);
        CHECK(sh != NULL);
        if (!sh) continue;
        CHECK((const uint8_t *)t->data == sh->base + t->file_offset);
        CHECK(t->file_offset >= sh->data_start && t->file_offset + t->nbytes <= sh->size);
        const json_t *wshard = json_object_get(want, "shard");
        if (wshard) CHECK(ends_with(sh->path, json_string_value(wshard)));
        const hm_st_tensor *g = NULL;
        CHECK_OK(hm_st_get(st, name, &g));
        CHECK(g == t);
    }

    /* index order: by shard, then file offset; the shards' counts add up */
    size_t per_shard_total = 0;
    for (size_t i = 0; i < hm_st_n_shards(st); i++)
        per_shard_total += hm_st_shard_at(st, i)->n_tensors;
    CHECK(per_shard_total == hm_st_n_tensors(st));
    for (size_t i = 1; i < hm_st_n_tensors(st); i++) {
        const hm_st_tensor *a = hm_st_tensor_at(st, i - 1), *b = hm_st_tensor_at(st, i);
        CHECK(a->shard < b->shard || (a->shard == b->shard && a->file_offset <= b->file_offset));
    }
    CHECK(hm_st_tensor_at(st, hm_st_n_tensors(st)) == NULL);

    CHECK_MSG(hm_st_n_metadata(st) == json_object_size(meta), "%s: %zu metadata entries", what,
              hm_st_n_metadata(st));
    json_object_foreach((json_t *)meta, name, want) {
        const char *v = hm_st_metadata_get(st, name);
        CHECK_MSG(v && strcmp(v, json_string_value(want)) == 0, "%s: __metadata__ '%s'", what,
                  name);
    }
    for (size_t i = 0; i < hm_st_n_metadata(st); i++) {
        const char *k = NULL, *v = NULL;
        CHECK_OK(hm_st_metadata_at(st, i, &k, &v));
        CHECK(k && v && json_object_get(meta, k));
        if (i) {
            const char *prev = NULL;
            hm_st_metadata_at(st, i - 1, &prev, NULL);
            CHECK(strcmp(prev, k) < 0);
        }
    }
    CHECK_STATUS(hm_st_metadata_at(st, hm_st_n_metadata(st), NULL, NULL), HM_ERR_INVALID_ARG);
    CHECK(hm_st_metadata_get(st, "no such key") == NULL);
    CHECK(hm_st_find(st, "no.such.tensor") == NULL);
    const hm_st_tensor *none = (const hm_st_tensor *)1;
    CHECK_STATUS(hm_st_get(st, "no.such.tensor", &none), HM_ERR_NOT_FOUND);
    CHECK_CONTAINS(hm_last_error(), "no tensor named 'no.such.tensor'");
    CHECK(none == NULL);
}

static void *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(len > 0 ? (size_t)len : 1);
    *n = len > 0 && fread(p, 1, (size_t)len, f) == (size_t)len ? (size_t)len : 0;
    fclose(f);
    return p;
}

static void test_fixtures(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/manifest.json", g_data);
    json_error_t je;
    json_t *man = json_load_file(path, 0, &je);
    CHECK_MSG(man != NULL, "%s: %s", path, je.text);
    if (!man) return;
    const json_t *models = json_object_get(man, "models");
    CHECK(json_object_size(models) == 3);
    const char *key;
    json_t *model;
    json_object_foreach((json_t *)models, key, model) {
        snprintf(path, sizeof path, "%s/%s", g_data, key);
        hm_safetensors *st = NULL;
        CHECK_OK(hm_st_open(path, &st));
        if (st) check_model(key, st, model);
        hm_st_close(st);
    }

    /* every dtype is present in the dtypes fixture */
    snprintf(path, sizeof path, "%s/dtypes.safetensors", g_data);
    hm_safetensors *st = NULL;
    CHECK_OK(hm_st_open_file(path, &st));
    int seen[HM_ST_DTYPE_COUNT] = {0};
    for (size_t i = 0; i < hm_st_n_tensors(st); i++) seen[hm_st_tensor_at(st, i)->dtype]++;
    for (int d = 0; d < HM_ST_DTYPE_COUNT; d++)
        CHECK_MSG(seen[d] > 0, "dtype %s missing from the fixture", hm_st_dtype_name(d));
    const hm_st_tensor *t = hm_st_find(st, "scalar.f32");
    CHECK(t && t->n_dims == 0 && t->n_elements == 1 && t->nbytes == 4);
    float f = 0;
    if (t) memcpy(&f, t->data, 4);
    CHECK(f == 2.5f);
    t = hm_st_find(st, "empty.i64");
    CHECK(t && t->n_dims == 3 && t->n_elements == 0 && t->nbytes == 0);
    t = hm_st_find(st, "rank8.u8");
    CHECK(t && t->n_dims == 8 && t->n_elements == 16);
    CHECK(strcmp(hm_st_metadata_get(st, "format"), "pt") == 0);
    CHECK(strcmp(hm_st_shard_at(st, 0)->path, path) == 0);

    /* the same bytes from memory give the same tensors */
    size_t n = 0;
    void *bytes = read_all(path, &n);
    CHECK(bytes && n > 0);
    hm_safetensors *mem = NULL;
    CHECK_OK(hm_st_parse_memory(bytes, n, "dtypes (memory)", &mem));
    CHECK(hm_st_n_tensors(mem) == hm_st_n_tensors(st));
    for (size_t i = 0; mem && i < hm_st_n_tensors(st); i++) {
        const hm_st_tensor *a = hm_st_tensor_at(st, i), *b = hm_st_tensor_at(mem, i);
        CHECK(strcmp(a->name, b->name) == 0 && a->dtype == b->dtype && a->nbytes == b->nbytes &&
              a->file_offset == b->file_offset && memcmp(a->data, b->data, a->nbytes) == 0);
        CHECK((const uint8_t *)b->data == (const uint8_t *)bytes + b->file_offset);
    }
    CHECK(mem && strcmp(hm_st_shard_at(mem, 0)->path, "dtypes (memory)") == 0);
    hm_st_close(mem);
    free(bytes);
    hm_st_close(st);

    /* other ways to name the same models */
    snprintf(path, sizeof path, "%s/sharded/model.safetensors.index.json", g_data);
    CHECK_OK(hm_st_open(path, &st));
    CHECK(hm_st_n_shards(st) == 2 && hm_st_n_tensors(st) == 9);
    hm_st_close(st);
    snprintf(path, sizeof path, "%s/sharded/", g_data);
    CHECK_OK(hm_st_open(path, &st));
    CHECK(hm_st_n_shards(st) == 2);
    hm_st_close(st);
    snprintf(path, sizeof path, "%s/single/model.safetensors", g_data);
    CHECK_OK(hm_st_open(path, &st));
    CHECK(hm_st_n_tensors(st) == 2 && hm_st_n_metadata(st) == 1);
    hm_st_close(st);
    /* a shard alone is a valid single file */
    snprintf(path, sizeof path, "%s/sharded/model-00002-of-00002.safetensors", g_data);
    CHECK_OK(hm_st_open(path, &st));
    CHECK(hm_st_n_tensors(st) == 4 && hm_st_find(st, "lm_head.weight"));
    hm_st_close(st);
    json_decref(man);
}

/* ---- malformed files built in memory -------------------------------------------------------- */

typedef struct blob {
    uint8_t *p;
    size_t n;
} blob;

/* Headers and indexes are written with ' for " to stay readable; this turns them into JSON. */
static void unquote(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] == '\'') p[i] = '"';
}

/* 8-byte LE length (len_field, or the header's length when ~0) + header (' -> ") + data_len
 * bytes. */
static blob mk_len(const char *header, size_t header_len, size_t data_len, uint64_t len_field) {
    blob b;
    b.n = 8 + header_len + data_len;
    b.p = malloc(b.n);
    uint64_t v = len_field == ~(uint64_t)0 ? header_len : len_field;
    for (int i = 0; i < 8; i++) b.p[i] = (uint8_t)(v >> (8 * i));
    memcpy(b.p + 8, header, header_len);
    unquote(b.p + 8, header_len);
    for (size_t i = 0; i < data_len; i++) b.p[8 + header_len + i] = (uint8_t)(i * 7 + 1);
    return b;
}

static blob mk(const char *header, size_t data_len) {
    return mk_len(header, strlen(header), data_len, ~(uint64_t)0);
}

/* Parses b as "bad.safetensors" and checks the status, that *out stays NULL and that the message
 * names the file and contains needle. */
static void expect_blob(int line, blob b, hm_status want, const char *needle) {
    hm_safetensors *st = (hm_safetensors *)&b; /* must be reset to NULL */
    hm_status s = hm_st_parse_memory(b.p, b.n, "bad.safetensors", &st);
    const char *msg = hm_last_error();
    t_checks++;
    if (s != want || st != NULL || !strstr(msg, needle) || !strstr(msg, "bad.safetensors")) {
        t_failures++;
        fprintf(stderr, "%s:%d: got %s (%s), want %s with '%s'\n", __FILE__, line, hm_status_str(s),
                msg, hm_status_str(want), needle);
    } else if (g_verbose) {
        printf("  %-40.40s -> %s\n", needle, msg);
    }
    if (s == HM_OK) hm_st_close(st);
    free(b.p);
}

#define EXPECT_BLOB(b, want, needle) expect_blob(__LINE__, (b), (want), (needle))
#define EXPECT_BAD(hdr, data_len, needle)                                                          \
    EXPECT_BLOB(mk((hdr), (data_len)), HM_ERR_FORMAT, (needle))

/* Parses a file that must be valid; the caller closes *st and frees the blob. */
static hm_safetensors *parse_ok(int line, blob b) {
    hm_safetensors *st = NULL;
    hm_status s = hm_st_parse_memory(b.p, b.n, "good.safetensors", &st);
    t_checks++;
    if (s != HM_OK) {
        t_failures++;
        fprintf(stderr, "%s:%d: parse failed: %s\n", __FILE__, line, hm_last_error());
    }
    return st;
}
#define PARSE_OK(b) parse_ok(__LINE__, (b))

static void test_file_level(void) {
    hm_safetensors *st = (hm_safetensors *)1;
    CHECK_STATUS(hm_st_parse_memory(NULL, 0, "empty.safetensors", &st), HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "empty.safetensors: file is 0 bytes, shorter than the 8-byte");
    CHECK(st == NULL);
    CHECK_STATUS(hm_st_parse_memory(NULL, 5, "x", &st), HM_ERR_INVALID_ARG);
    CHECK_STATUS(hm_st_parse_memory("{}", 2, "x", NULL), HM_ERR_INVALID_ARG);
    CHECK_STATUS(hm_st_parse_memory("1234567", 7, NULL, &st), HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "(memory): file is 7 bytes");

    blob b = mk("{}", 0);
    b.n = 9; /* truncated: header length 2, one byte present */
    EXPECT_BLOB(b, HM_ERR_FORMAT,
                "header length 2 (u64 LE at offset 0) is larger than the 1 bytes");
    EXPECT_BLOB(mk_len("{}", 2, 0, 1000), HM_ERR_FORMAT, "header length 1000");
    EXPECT_BLOB(mk_len("{}", 2, 0, (uint64_t)200 << 20), HM_ERR_FORMAT, "is absurd");
    EXPECT_BLOB(mk_len("{}", 2, 0, ~(uint64_t)1), HM_ERR_FORMAT, "is absurd");
    EXPECT_BLOB(mk_len("", 0, 4, 0), HM_ERR_FORMAT, "header is empty");
    EXPECT_BAD(" {}", 0, "header must start with '{' (file offset 8 holds byte 0x20)");
    EXPECT_BAD("[]", 0, "header must start with '{'");
    EXPECT_BAD("{'a\xff':1}", 0, "not valid UTF-8: byte 0xff at file offset 11");
    EXPECT_BAD("{'\xc0\xaf':1}", 0, "not valid UTF-8: byte 0xc0");     /* overlong '/' */
    EXPECT_BAD("{'\xed\xa0\x80':1}", 0, "not valid UTF-8: byte 0xed"); /* surrogate */
    EXPECT_BAD("{'\xf4\x90\x80\x80':1}", 0, "not valid UTF-8");        /* > U+10FFFF */
    EXPECT_BAD("{'\xe2\x82':1}", 0, "not valid UTF-8");                /* cut sequence */
    EXPECT_BAD("{'a':", 0, "header is not valid JSON");
    EXPECT_BAD("{'a':", 0, "line 1, column 5");
    EXPECT_BAD("{\n 'a': x}", 0, "at line 2, column");
    EXPECT_BAD("{} x", 0, "header is not valid JSON");
    EXPECT_BAD("{}\n}", 0, "header is not valid JSON");
    EXPECT_BLOB(mk_len("{'a'\0:1}", 8, 0, ~(uint64_t)0), HM_ERR_FORMAT, "not valid JSON");
    EXPECT_BAD("{'\\u0000':1}", 0, "not valid JSON");
    EXPECT_BAD("{'a':{'dtype':'F32','shape':[1],'data_offsets':[0,4]}"
               ",'a':{'dtype':'F32','shape':[1],'data_offsets':[4,8]}}",
               8, "duplicate");
    EXPECT_BAD("{'x':{'dtype':'U8','shape':[99999999999999999999],'data_offsets':[0,1]}}", 1,
               "not valid JSON");

    /* valid: empty header, space padding (as the reference writer pads to 8 bytes), 0 tensors */
    b = mk("{}      ", 0);
    st = PARSE_OK(b);
    CHECK(hm_st_n_tensors(st) == 0 && hm_st_n_metadata(st) == 0 && hm_st_n_shards(st) == 1);
    CHECK(hm_st_tensor_at(st, 0) == NULL && hm_st_find(st, "a") == NULL);
    hm_st_close(st);
    free(b.p);
}

static void test_entries(void) {
    EXPECT_BAD("{'a':1}", 0, "bad.safetensors: tensor 'a': entry is 1, expected an object");
    EXPECT_BAD("{'a':[]}", 0, "tensor 'a': entry is [], expected an object");
    EXPECT_BAD("{'a':{'dtype':'F32','shape':[1]}}", 4, "tensor 'a': missing key 'data_offsets'");
    EXPECT_BAD("{'a':{'shape':[1],'data_offsets':[0,4]}}", 4, "missing key 'dtype'");
    EXPECT_BAD("{'a':{'dtype':'F32','data_offsets':[0,4]}}", 4, "missing key 'shape'");
    EXPECT_BAD("{'a':{'dtype':'F32','shape':[1],'data_offsets':[0,4],'foo':1}}", 4,
               "tensor 'a': unexpected key 'foo'");
    EXPECT_BAD("{'w':{'dtype':'F17','shape':[1],'data_offsets':[0,4]}}", 4,
               "tensor 'w': unknown dtype 'F17'");
    EXPECT_BAD("{'w':{'dtype':'f32','shape':[1],'data_offsets':[0,4]}}", 4,
               "unknown dtype 'f32' (expected one of F64");
    EXPECT_BLOB(mk("{'w':{'dtype':'F4','shape':[2],'data_offsets':[0,1]}}", 1), HM_ERR_UNSUPPORTED,
                "tensor 'w': dtype 'F4' is valid safetensors but not supported");
    EXPECT_BLOB(mk("{'w':{'dtype':'C64','shape':[1],'data_offsets':[0,8]}}", 8), HM_ERR_UNSUPPORTED,
                "'C64'");
    EXPECT_BAD("{'w':{'dtype':4,'shape':[1],'data_offsets':[0,4]}}", 4,
               "tensor 'w': dtype is 4, expected a string");

    /* shape */
    EXPECT_BAD("{'w':{'dtype':'F32','shape':'2','data_offsets':[0,8]}}", 8,
               "shape is \"2\", expected an array");
    EXPECT_BAD("{'w':{'dtype':'F32','shape':{},'data_offsets':[0,8]}}", 8,
               "shape is an object of 0 keys");
    EXPECT_BAD("{'w':{'dtype':'F32','shape':[2,-2],'data_offsets':[0,8]}}", 8,
               "tensor 'w': shape[1] is -2, expected a non-negative integer");
    EXPECT_BAD("{'w':{'dtype':'F32','shape':[2.0],'data_offsets':[0,8]}}", 8, "shape[0] is 2.0");
    EXPECT_BAD("{'w':{'dtype':'F32','shape':['2'],'data_offsets':[0,8]}}", 8, "shape[0] is \"2\"");
    EXPECT_BAD("{'w':{'dtype':'F32','shape':[null],'data_offsets':[0,8]}}", 8, "shape[0] is null");
    EXPECT_BAD("{'w':{'dtype':'F32','shape':[[2]],'data_offsets':[0,8]}}", 8, "shape[0] is [2]");
    EXPECT_BLOB(mk("{'w':{'dtype':'U8','shape':[1,1,1,1,1,1,1,1,1],'data_offsets':[0,1]}}", 1),
                HM_ERR_UNSUPPORTED, "shape has 9 dimensions; hmoe supports at most 8");
    EXPECT_BAD("{'w':{'dtype':'U8','shape':[4294967296,4294967296],'data_offsets':[0,1]}}", 1,
               "element count of shape [4294967296, 4294967296] overflows 64 bits");
    EXPECT_BAD("{'w':{'dtype':'F32','shape':[4611686018427387904],'data_offsets':[0,1]}}", 1,
               "shape [4611686018427387904] x 4-byte F32 overflows 64 bits");
    /* a zero dimension makes the tensor empty even when the others multiply past 64 bits */
    blob b = mk("{'z':{'dtype':'F32','shape':[4294967296,4294967296,0],'data_offsets':[0,0]}}", 0);
    hm_safetensors *st = PARSE_OK(b);
    const hm_st_tensor *t = hm_st_find(st, "z");
    CHECK(t && t->n_elements == 0 && t->nbytes == 0 && t->n_dims == 3);
    hm_st_close(st);
    free(b.p);

    /* data_offsets */
    EXPECT_BAD("{'w':{'dtype':'F32','shape':[1],'data_offsets':4}}", 4,
               "data_offsets is 4, expected [begin, end] (two integers)");
    EXPECT_BAD("{'w':{'dtype':'F32','shape':[1],'data_offsets':[0,1,2,3,4,5,6,7,8,9]}}", 8,
               "data_offsets is an array of 10 elements, expected [begin, end]");
    EXPECT_BAD("{'w':{'dtype':'F32','data_offsets':[0,4],'shape':'"
               "0123456789012345678901234567890123456789012345678901234567890123456789"
               "0123456789012345678901234567890123456789'}}",
               4, "1234567890..., expected an array of non-negative integers");
    EXPECT_BAD("{'w':{'dtype':'F32','shape':[1],'data_offsets':[0,4,8]}}", 8,
               "data_offsets is [0,4,8], expected");
    EXPECT_BAD("{'w':{'dtype':'F32','shape':[1],'data_offsets':[0]}}", 4,
               "data_offsets is [0], expected");
    EXPECT_BAD("{'w':{'dtype':'F32','shape':[1],'data_offsets':[0,'4']}}", 4,
               "data_offsets[1] is \"4\", expected a non-negative integer");
    EXPECT_BAD("{'w':{'dtype':'F32','shape':[1],'data_offsets':[-4,0]}}", 4,
               "data_offsets[0] is -4");
    EXPECT_BAD("{'w':{'dtype':'F32','shape':[1],'data_offsets':[0,4.0]}}", 4,
               "data_offsets[1] is 4.0");
    blob r = mk(
        "{'model.layers.0.mlp.gate.weight':{'dtype':'U8','shape':[0],'data_offsets':[10,4]}}", 16);
    hm_safetensors *bad = NULL;
    CHECK_STATUS(hm_st_parse_memory(r.p, r.n, "model-00002-of-00003.safetensors", &bad),
                 HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "model-00002-of-00003.safetensors: tensor "
                                    "'model.layers.0.mlp.gate.weight': data_offsets [10, 4] are "
                                    "reversed");
    free(r.p);
    EXPECT_BAD("{'w':{'dtype':'F32','shape':[2],'data_offsets':[0,4]}}", 8,
               "tensor 'w': data_offsets [0, 4] span 4 bytes, but shape [2] of F32 (4 bytes each) "
               "needs 8");
    EXPECT_BAD("{'w':{'dtype':'F32','shape':[],'data_offsets':[0,0]}}", 8,
               "span 0 bytes, but shape [] of F32");
    EXPECT_BAD("{'w':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}", 4,
               "tensor 'w': data_offsets [0, 8] end outside the data section of 4 bytes");
    EXPECT_BAD("{'w':{'dtype':'U8','shape':[0],'data_offsets':[5,5]}}", 4,
               "data_offsets [5, 5] end outside");

    /* layout: overlap, holes */
    EXPECT_BAD("{'a':{'dtype':'U8','shape':[4],'data_offsets':[0,4]}"
               ",'b':{'dtype':'U8','shape':[4],'data_offsets':[2,6]}}",
               6, "tensors 'a' (data_offsets [0, 4]) and 'b' ([2, 6]) overlap");
    EXPECT_BAD("{'b':{'dtype':'U8','shape':[4],'data_offsets':[2,6]}"
               ",'a':{'dtype':'U8','shape':[8],'data_offsets':[0,8]}}",
               8, "tensors 'a' (data_offsets [0, 8]) and 'b' ([2, 6]) overlap");
    EXPECT_BAD("{'a':{'dtype':'U8','shape':[4],'data_offsets':[0,4]}"
               ",'b':{'dtype':'U8','shape':[4],'data_offsets':[0,4]}}",
               4, "overlap");
    EXPECT_BAD("{'a':{'dtype':'U8','shape':[8],'data_offsets':[0,8]}"
               ",'e':{'dtype':'U8','shape':[0],'data_offsets':[4,4]}}",
               8, "tensors 'a' (data_offsets [0, 8]) and 'e' ([4, 4]) overlap");

    /* holes are allowed (and noted at debug level); empty tensors may sit on boundaries */
    FILE *logf = tmpfile();
    hm_log_set_stream(logf);
    hm_log_level old = hm_log_get_level();
    hm_log_set_level(HM_LOG_DEBUG);
    b = mk("{'late':{'dtype':'I16','shape':[2],'data_offsets':[8,12]}"
           ",'e0':{'dtype':'F32','shape':[0],'data_offsets':[0,0]}"
           ",'early':{'dtype':'U8','shape':[2],'data_offsets':[0,2]}"
           ",'e1':{'dtype':'F32','shape':[0,3],'data_offsets':[2,2]}"
           ",'e2':{'dtype':'BOOL','shape':[0],'data_offsets':[12,12]}}",
           16);
    st = PARSE_OK(b);
    hm_log_set_level(old);
    hm_log_set_stream(NULL);
    CHECK(hm_st_n_tensors(st) == 5);
    static const char *const order[] = {"e0", "early", "e1", "late", "e2"};
    for (size_t i = 0; i < 5 && i < hm_st_n_tensors(st); i++)
        CHECK_MSG(strcmp(hm_st_tensor_at(st, i)->name, order[i]) == 0, "tensor %zu is %s", i,
                  hm_st_tensor_at(st, i)->name);
    t = hm_st_find(st, "late");
    CHECK(t && (const uint8_t *)t->data == b.p + hm_st_shard_at(st, 0)->data_start + 8);
    CHECK(t && memcmp(t->data, b.p + b.n - 8, 4) == 0);
    char logbuf[2048] = {0};
    rewind(logf);
    size_t got = fread(logbuf, 1, sizeof logbuf - 1, logf);
    fclose(logf);
    CHECK(got > 0);
    CHECK_CONTAINS(logbuf, "good.safetensors: 6 unused bytes (hole) at data offsets [2, 8) before "
                           "tensor 'late'");
    CHECK_CONTAINS(logbuf, "4 unused bytes (hole) at the end of the data section");
    hm_st_close(st);
    free(b.p);
}

static void test_metadata(void) {
    EXPECT_BAD("{'__metadata__':[]}", 0, "bad.safetensors: __metadata__ is [], expected an object");
    EXPECT_BAD("{'__metadata__':{'format':'pt','n':1}}", 0,
               "__metadata__ key 'n' is 1, expected a string");
    EXPECT_BAD("{'__metadata__':{'a':{}}}", 0, "__metadata__ key 'a' is an object");
    EXPECT_BAD("{'__metadata__':{},'__metadata__':{}}", 0, "duplicate");

    blob b = mk("{'__metadata__':{'z':'last','format':'pt','':'empty key'},"
                "'x':{'dtype':'U8','shape':[2],'data_offsets':[0,2]}}",
                2);
    hm_safetensors *st = PARSE_OK(b);
    CHECK(hm_st_n_metadata(st) == 3);
    const char *k, *v;
    CHECK_OK(hm_st_metadata_at(st, 0, &k, &v));
    CHECK(strcmp(k, "") == 0 && strcmp(v, "empty key") == 0);
    CHECK_OK(hm_st_metadata_at(st, 2, &k, &v));
    CHECK(strcmp(k, "z") == 0 && strcmp(v, "last") == 0);
    CHECK(strcmp(hm_st_metadata_get(st, "format"), "pt") == 0);
    CHECK(hm_st_find(st, "__metadata__") == NULL && hm_st_n_tensors(st) == 1);
    hm_st_close(st);
    free(b.p);
}

/* Names and metadata are UTF-8: multi-byte characters pass through unchanged. */
static void test_utf8_names(void) {
    const char *name = "model.\xe5\xb1\x82.0.gr\xc3\xb6\xc3\x9f\xc3\xa9.\xf0\x9f\x98\x80";
    char hdr[256];
    snprintf(hdr, sizeof hdr,
             "{'__metadata__':{'note':'\xc2\xb5s'},'%s':{'dtype':'U8','shape':[2],"
             "'data_offsets':[0,2]}}",
             name);
    blob b = mk(hdr, 2);
    hm_safetensors *st = PARSE_OK(b);
    const hm_st_tensor *t = hm_st_find(st, name);
    CHECK(t && t->nbytes == 2 && strcmp(t->name, name) == 0);
    CHECK(st && strcmp(hm_st_metadata_get(st, "note"), "\xc2\xb5s") == 0);
    hm_st_close(st);
    free(b.p);
}

static void test_api_edges(void) {
    hm_st_close(NULL);
    CHECK(hm_st_n_tensors(NULL) == 0 && hm_st_n_shards(NULL) == 0 && hm_st_n_metadata(NULL) == 0);
    CHECK(hm_st_tensor_at(NULL, 0) == NULL && hm_st_find(NULL, "x") == NULL);
    CHECK(hm_st_shard_at(NULL, 0) == NULL && hm_st_metadata_get(NULL, "x") == NULL);
    CHECK_STATUS(hm_st_open(NULL, NULL), HM_ERR_INVALID_ARG);
    hm_safetensors *st = (hm_safetensors *)1;
    CHECK_STATUS(hm_st_open(NULL, &st), HM_ERR_INVALID_ARG);
    CHECK(st == NULL);
    CHECK_STATUS(hm_st_open_file(NULL, &st), HM_ERR_INVALID_ARG);
    for (int d = 0; d < HM_ST_DTYPE_COUNT; d++) {
        hm_st_dtype back;
        CHECK_OK(hm_st_dtype_parse(hm_st_dtype_name(d), &back));
        CHECK(back == (hm_st_dtype)d);
        size_t sz = hm_st_dtype_size(d);
        CHECK(sz == 1 || sz == 2 || sz == 4 || sz == 8);
    }
    CHECK(hm_st_dtype_size(HM_ST_DTYPE_COUNT) == 0);
    CHECK(strcmp(hm_st_dtype_name(HM_ST_DTYPE_COUNT), "?") == 0);
    CHECK(hm_st_dtype_size(HM_ST_BF16) == 2 && hm_st_dtype_size(HM_ST_F8_E4M3) == 1);
    CHECK(hm_st_dtype_size(HM_ST_BOOL) == 1 && hm_st_dtype_size(HM_ST_U64) == 8);
}

/* ---- sharded models in a temporary directory ------------------------------------------------ */

static char g_tmp[64];

/* Writes a file into the temporary directory; text files get ' -> " (see unquote). */
static void put_raw(const char *name, const void *data, size_t n) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (!f) return;
    CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
}

static void put(const char *name, const char *text) {
    size_t n = strlen(text);
    uint8_t *p = malloc(n + 1);
    memcpy(p, text, n + 1);
    unquote(p, n);
    put_raw(name, p, n);
    free(p);
}

static void put_st(const char *name, const char *header, size_t data_len) {
    blob b = mk(header, data_len);
    put_raw(name, b.p, b.n);
    free(b.p);
}

static void put_index(const char *weight_map) {
    char buf[1024];
    snprintf(buf, sizeof buf, "{'metadata':{'total_size':12},'weight_map':%s}", weight_map);
    put("model.safetensors.index.json", buf);
}

static void rm(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    unlink(path);
}

/* Opens the temporary directory and expects an error with needle in the message. */
static void expect_dir(int line, hm_status want, const char *needle) {
    hm_safetensors *st = (hm_safetensors *)1;
    hm_status s = hm_st_open(g_tmp, &st);
    const char *msg = hm_last_error();
    t_checks++;
    if (s != want || st != NULL || !strstr(msg, needle)) {
        t_failures++;
        fprintf(stderr, "%s:%d: got %s (%s), want %s with '%s'\n", __FILE__, line, hm_status_str(s),
                msg, hm_status_str(want), needle);
    } else if (g_verbose) {
        printf("  %-40.40s -> %s\n", needle, msg);
    }
    if (s == HM_OK) hm_st_close(st);
}
#define EXPECT_DIR(want, needle) expect_dir(__LINE__, (want), (needle))

#define S1 "model-00001-of-00002.safetensors"
#define S2 "model-00002-of-00002.safetensors"

static void test_sharded(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hmoe_st_XXXXXX");
    CHECK(mkdtemp(g_tmp) != NULL);

    EXPECT_DIR(HM_ERR_NOT_FOUND, "directory holds neither model.safetensors nor "
                                 "model.safetensors.index.json");
    hm_safetensors *st = (hm_safetensors *)1;
    CHECK_STATUS(hm_st_open("/nonexistent/model", &st), HM_ERR_NOT_FOUND);
    CHECK_CONTAINS(hm_last_error(), "/nonexistent/model: cannot open");
    CHECK(st == NULL);

    put_st(S1,
           "{'__metadata__':{'format':'pt','a':'1'},"
           "'x':{'dtype':'F32','shape':[1],'data_offsets':[0,4]}"
           ",'y':{'dtype':'U8','shape':[4],'data_offsets':[4,8]}}",
           8);
    put_st(S2,
           "{'__metadata__':{'format':'pt','a':'2','b':'3'},"
           "'z':{'dtype':'I16','shape':[2],'data_offsets':[0,4]}}",
           4);
    put_index("{'x':'" S1 "','y':'" S1 "','z':'" S2 "'}");
    CHECK_OK(hm_st_open(g_tmp, &st));
    CHECK(hm_st_n_shards(st) == 2 && hm_st_n_tensors(st) == 3);
    const hm_st_tensor *z = hm_st_find(st, "z");
    CHECK(z && z->shard == 1 && z->nbytes == 4);
    CHECK(z && ends_with(hm_st_shard_at(st, z->shard)->path, "/" S2));
    CHECK(hm_st_n_metadata(st) == 3);
    CHECK(strcmp(hm_st_metadata_get(st, "a"), "1") == 0); /* the first shard wins */
    CHECK(strcmp(hm_st_metadata_get(st, "b"), "3") == 0);
    hm_st_close(st);

    /* weight_map disagrees with the shards */
    put_index("{'x':'" S2 "','y':'" S1 "','z':'" S2 "'}");
    EXPECT_DIR(HM_ERR_FORMAT, "weight_map puts tensor 'x' in '" S2 "', but that shard does not "
                              "hold it (it is in '" S1 "')");
    put_index("{'x':'" S1 "','y':'" S1 "','z':'" S1 "'}");
    EXPECT_DIR(HM_ERR_FORMAT, "weight_map puts tensor 'z' in '" S1 "', but that shard does not "
                              "hold it (no shard does)");
    put_index("{'x':'" S1 "','y':'" S1 "','z':'" S2 "','w':'" S2 "'}");
    EXPECT_DIR(HM_ERR_FORMAT, "model.safetensors.index.json: weight_map puts tensor 'w' in '" S2
                              "', but that shard does not hold it (no shard does)");
    put_index("{'x':'" S1 "','z':'" S2 "'}");
    EXPECT_DIR(HM_ERR_FORMAT, "shard '" S1 "' holds tensor 'y', which weight_map does not list");
    put_index("{'x':'" S1 "','y':'" S1 "','z':'" S2 "','q':'missing.safetensors'}");
    EXPECT_DIR(HM_ERR_NOT_FOUND, "shard 'missing.safetensors' named by weight_map: ");
    EXPECT_DIR(HM_ERR_NOT_FOUND, "/missing.safetensors: cannot open");

    /* path traversal and other bad shard names */
    put_index("{'x':'../" S1 "'}");
    EXPECT_DIR(HM_ERR_FORMAT, "weight_map['x'] names shard '../" S1 "': a shard must be a plain "
                              "file name next to the index (no '/' or '..')");
    put_index("{'x':'/etc/passwd'}");
    EXPECT_DIR(HM_ERR_FORMAT, "names shard '/etc/passwd'");
    put_index("{'x':'sub/" S1 "'}");
    EXPECT_DIR(HM_ERR_FORMAT, "names shard 'sub/");
    put_index("{'x':'..'}");
    EXPECT_DIR(HM_ERR_FORMAT, "names shard '..'");
    put_index("{'x':''}");
    EXPECT_DIR(HM_ERR_FORMAT, "names shard ''");
    put_index("{'x':1}");
    EXPECT_DIR(HM_ERR_FORMAT, "weight_map['x'] is 1, expected a shard file name");
    put_index("{}");
    EXPECT_DIR(HM_ERR_FORMAT, "weight_map is an object of 0 keys, expected a non-empty object");
    put("model.safetensors.index.json", "[{'weight_map':{}}]");
    EXPECT_DIR(HM_ERR_FORMAT, "expected a JSON object with a weight_map");
    put_index("[]");
    EXPECT_DIR(HM_ERR_FORMAT, "weight_map is [], expected");
    put_index("{'x':'" S1 "','x':'" S2 "'}");
    EXPECT_DIR(HM_ERR_FORMAT, "duplicate");
    const char *no_wm = "{'metadata':{}}";
    put("model.safetensors.index.json", no_wm);
    EXPECT_DIR(HM_ERR_FORMAT, "weight_map is missing");
    const char *bad_md = "{'metadata':3,'weight_map':{'x':'a'}}";
    put("model.safetensors.index.json", bad_md);
    EXPECT_DIR(HM_ERR_FORMAT, "metadata is 3, expected an object");
    const char *bad_json = "{'weight_map':\n  {'x': }";
    put("model.safetensors.index.json", bad_json);
    EXPECT_DIR(HM_ERR_FORMAT, "model.safetensors.index.json: not valid JSON: ");
    EXPECT_DIR(HM_ERR_FORMAT, "at line 2, column");
    put("model.safetensors.index.json", "");
    EXPECT_DIR(HM_ERR_FORMAT, "model.safetensors.index.json: file is empty");

    /* a tensor in two shards */
    put_st(S2,
           "{'z':{'dtype':'I16','shape':[2],'data_offsets':[0,4]}"
           ",'x':{'dtype':'U8','shape':[1],'data_offsets':[4,5]}}",
           5);
    put_index("{'x':'" S1 "','y':'" S1 "','z':'" S2 "'}");
    EXPECT_DIR(HM_ERR_FORMAT, "tensor 'x' appears twice: in ");
    EXPECT_DIR(HM_ERR_FORMAT, "/" S1 " and in ");

    /* a broken shard: the error names it */
    put_st(S2, "{'z':{'dtype':'I16','shape':[2],'data_offsets':[4,0]}}", 4);
    EXPECT_DIR(HM_ERR_FORMAT, "/" S2 ": tensor 'z': data_offsets [4, 0] are reversed");
    blob b = mk("{'z':{'dtype':'I16','shape':[2],'data_offsets':[0,4]}}", 4);
    put_raw(S2, b.p, 12); /* cut inside the header */
    free(b.p);
    EXPECT_DIR(HM_ERR_FORMAT, "/" S2 ": header length");

    /* model.safetensors is preferred over the index (as transformers does) */
    put_st("model.safetensors", "{'only':{'dtype':'U8','shape':[3],'data_offsets':[0,3]}}", 3);
    CHECK_OK(hm_st_open(g_tmp, &st));
    CHECK(hm_st_n_tensors(st) == 1 && hm_st_find(st, "only"));
    hm_st_close(st);
    /* ...and the index is still reachable by its own name */
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", g_tmp);
    put_st(S2, "{'z':{'dtype':'I16','shape':[2],'data_offsets':[0,4]}}", 4);
    CHECK_OK(hm_st_open(path, &st));
    CHECK(hm_st_n_tensors(st) == 3 && hm_st_n_shards(st) == 2);
    hm_st_close(st);

    /* a directory named like a file */
    rm("model.safetensors");
    snprintf(path, sizeof path, "%s/model.safetensors", g_tmp);
    CHECK(mkdir(path, 0700) == 0);
    EXPECT_DIR(HM_ERR_IO, "model.safetensors: not a regular file");
    rmdir(path);

    rm(S1);
    rm(S2);
    rm("model.safetensors.index.json");
    CHECK(rmdir(g_tmp) == 0);
}

/* Data offsets need not be even: BF16 and F16 tensors at an odd address dequantize exactly (the
 * rows are read through memcpy; UBSan checks the alignment in the sanitizer build). */
static void test_odd_offsets(void) {
    char hdr[256];
    int n = snprintf(hdr, sizeof hdr, "%s",
                     "{\"a\":{\"dtype\":\"BF16\",\"shape\":[5],\"data_offsets\":[1,11]},"
                     "\"b\":{\"dtype\":\"F16\",\"shape\":[5],\"data_offsets\":[11,21]}}");
    if (n % 2) hdr[n++] = ' '; /* an even header: the data section starts 2-aligned, a at +1 */
    uint64_t words[64] = {0}, len = (uint64_t)n;
    uint8_t *file = (uint8_t *)words;
    memcpy(file, &len, 8);
    memcpy(file + 8, hdr, len);
    const float want[5] = {1.0f, -2.5f, 0.375f, 1024.0f, -0.0f};
    for (int i = 0; i < 5; i++) {
        uint16_t b = hm_f32_to_bf16(want[i]), h = hm_f32_to_f16(want[i]);
        memcpy(file + 8 + len + 1 + 2 * i, &b, 2);
        memcpy(file + 8 + len + 11 + 2 * i, &h, 2);
    }
    hm_safetensors *st = NULL;
    CHECK_OK(hm_st_parse_memory(file, 8 + len + 21, "odd.safetensors", &st));
    const hm_st_tensor *a = st ? hm_st_find(st, "a") : NULL, *b = st ? hm_st_find(st, "b") : NULL;
    CHECK(a && b && (uintptr_t)a->data % 2 == 1 && (uintptr_t)b->data % 2 == 1);
    float got[5];
    if (a) {
        CHECK_OK(hm_dequantize_row(HM_TYPE_BF16, a->data, got, 5));
        CHECK(!memcmp(got, want, sizeof got));
    }
    if (b) {
        CHECK_OK(hm_dequantize_row(HM_TYPE_F16, b->data, got, 5));
        CHECK(!memcmp(got, want, sizeof got));
    }
    hm_st_close(st);
}

int main(void) {
    g_verbose = getenv("HMOE_TEST_VERBOSE") != NULL;
    test_odd_offsets();
    test_fixtures();
    test_file_level();
    test_entries();
    test_metadata();
    test_utf8_names();
    test_api_edges();
    test_sharded();
    return test_done("safetensors");
}
