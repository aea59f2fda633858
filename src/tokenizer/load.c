/* load.c - the other vocabulary sources: Hugging Face directories (tokenizer.json, or vocab.json
 * + merges.txt, with tokenizer_config.json / added_tokens.json / special_tokens_map.json),
 * tiktoken rank files (plain or gzip), and hm_tokenizer_load, which picks the reader. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/mmap.h"
#include "tokenizer/tok_int.h"

/* ---- extra (added/special) tokens and options collected from HF config files --------------- */

typedef struct added_tok {
    int64_t id;
    char *text;
    bool special, lstrip, rstrip;
} added_tok;

typedef struct extras {
    added_tok *v;
    size_t n, cap;
    char *bos, *eos, *unk, *pad, *eot; /* token texts */
    int add_bos, add_eos;              /* -1 unknown */
    char tok_class[64];
    char pre[48]; /* explicit pre-tokenizer name (tiktoken layouts) */
} extras;

static void extras_free(extras *x) {
    for (size_t i = 0; i < x->n; i++) free(x->v[i].text);
    free(x->v);
    free(x->bos);
    free(x->eos);
    free(x->unk);
    free(x->pad);
    free(x->eot);
    memset(x, 0, sizeof *x);
}

static hm_status extras_add(extras *x, int64_t id, const char *text, size_t len, bool special,
                            bool lstrip, bool rstrip) {
    for (size_t i = 0; i < x->n; i++)
        if (x->v[i].id == id) return HM_OK; /* first source wins */
    if (x->n == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 16;
        added_tok *v = realloc(x->v, cap * sizeof *v);
        if (!v) return hm_errorf(HM_ERR_NO_MEMORY, "tokenizer: out of memory");
        x->v = v;
        x->cap = cap;
    }
    char *s = malloc(len + 1);
    if (!s) return hm_errorf(HM_ERR_NO_MEMORY, "tokenizer: out of memory");
    memcpy(s, text, len);
    s[len] = 0;
    x->v[x->n++] = (added_tok){id, s, special, lstrip, rstrip};
    return HM_OK;
}

static void set_str(char **dst, const char *s) {
    if (*dst || !s) return;
    *dst = strdup(s);
}

/* "bos_token": "<s>" or {"content": "<s>", ...} */
static const char *token_str(json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return json_string_value(json_object_get(v, "content"));
    return NULL;
}

/* A JSON file of a tokenizer: regular files only (a FIFO is refused, never waited on), at most
 * 1 GiB. NULL with err->text set on failure. */
static json_t *read_json(const char *path, size_t flags, json_error_t *err) {
    char *buf = NULL;
    size_t len = 0;
    if (hm_file_read_all(path, (size_t)1 << 30, false, &buf, &len) != HM_OK) {
        memset(err, 0, sizeof *err);
        snprintf(err->text, sizeof err->text, "%s", hm_last_error());
        return NULL;
    }
    json_t *j = json_loadb(buf, len, flags, err);
    free(buf);
    return j;
}

static json_t *load_json(const char *dir, const char *file, size_t flags) {
    char path[4096];
    json_error_t err;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return read_json(path, flags, &err);
}

static bool file_exists(const char *dir, const char *file) {
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static hm_status read_config(const char *dir, extras *x) {
    hm_status st = HM_OK;
    /* integers as reals: model_max_length is often 1e30 written as an integer */
    json_t *cfg = load_json(dir, "tokenizer_config.json", JSON_DECODE_INT_AS_REAL);
    if (cfg) {
        json_t *dec = json_object_get(cfg, "added_tokens_decoder");
        const char *key;
        json_t *val;
        json_object_foreach(dec, key, val) {
            const char *c = json_string_value(json_object_get(val, "content"));
            char *end;
            long long id = strtoll(key, &end, 10);
            if (!c || *end || id < 0) continue;
            st = extras_add(x, id, c, strlen(c), json_is_true(json_object_get(val, "special")),
                            json_is_true(json_object_get(val, "lstrip")),
                            json_is_true(json_object_get(val, "rstrip")));
            if (st) break;
        }
        json_t *b = json_object_get(cfg, "add_bos_token");
        if (json_is_boolean(b)) x->add_bos = json_is_true(b);
        b = json_object_get(cfg, "add_eos_token");
        if (json_is_boolean(b)) x->add_eos = json_is_true(b);
        set_str(&x->bos, token_str(json_object_get(cfg, "bos_token")));
        set_str(&x->eos, token_str(json_object_get(cfg, "eos_token")));
        set_str(&x->unk, token_str(json_object_get(cfg, "unk_token")));
        set_str(&x->pad, token_str(json_object_get(cfg, "pad_token")));
        const char *cls = json_string_value(json_object_get(cfg, "tokenizer_class"));
        if (cls) snprintf(x->tok_class, sizeof x->tok_class, "%s", cls);
        json_decref(cfg);
    }
    json_t *at = load_json(dir, "added_tokens.json", 0);
    if (at && !st) {
        const char *key;
        json_t *val;
        json_object_foreach(at, key, val) {
            if (!json_is_integer(val) || json_integer_value(val) < 0) continue;
            st = extras_add(x, json_integer_value(val), key, strlen(key), true, false, false);
            if (st) break;
        }
    }
    json_decref(at);
    json_t *sm = load_json(dir, "special_tokens_map.json", 0);
    if (sm) {
        set_str(&x->bos, token_str(json_object_get(sm, "bos_token")));
        set_str(&x->eos, token_str(json_object_get(sm, "eos_token")));
        set_str(&x->unk, token_str(json_object_get(sm, "unk_token")));
        set_str(&x->pad, token_str(json_object_get(sm, "pad_token")));
        json_decref(sm);
    }
    return st;
}

/* After the base vocabulary is set: types of added tokens, named special ids, add_bos/eos. */
static void apply_extras(hm_tokenizer *t, const extras *x) {
    for (size_t i = 0; i < x->n; i++) {
        const added_tok *a = &x->v[i];
        if (a->id < 0 || a->id >= t->n) continue;
        t->type[a->id] = a->special ? HM_TOKT_CONTROL : HM_TOKT_USER_DEFINED;
        if (a->lstrip) t->flags[a->id] |= HM_TF_LSTRIP;
        if (a->rstrip) t->flags[a->id] |= HM_TF_RSTRIP;
    }
    struct {
        const char *s;
        int32_t *id;
    } named[] = {{x->bos, &t->bos}, {x->eos, &t->eos}, {x->unk, &t->unk}, {x->pad, &t->pad}};
    for (int k = 0; k < 4; k++) {
        if (!named[k].s) continue;
        for (uint32_t id = 0; id < t->n; id++)
            if (strcmp(t->text.p + t->text_off[id], named[k].s) == 0) {
                *named[k].id = (int32_t)id;
                break;
            }
    }
    if (x->add_bos >= 0) t->add_bos = x->add_bos;
    if (x->add_eos >= 0) t->add_eos = x->add_eos;
}

/* ---- vocab.json + merges.txt ------------------------------------------------------------------
 */

static const char *pre_for_class(const char *cls) {
    if (strstr(cls, "Qwen2")) return "qwen2";
    return "gpt-2";
}

static hm_status hf_build(json_t *vocab, const char *merges, size_t merges_len, json_t *merges_arr,
                          const extras *x, const char *pre, const char *name, hm_tokenizer **out) {
    *out = NULL;
    if (!json_is_object(vocab))
        return hm_errorf(HM_ERR_FORMAT, "%s: vocab: expected a JSON object {token: id}", name);
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= HM_TOK_MAX_VOCAB)
            return hm_errorf(HM_ERR_FORMAT, "%s: vocab: token '%.64s' has no valid id", name, key);
        if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
    }
    for (size_t i = 0; i < x->n; i++)
        if (x->v[i].id < HM_TOK_MAX_VOCAB && x->v[i].id > max_id) max_id = x->v[i].id;
    if (max_id < 0) return hm_errorf(HM_ERR_FORMAT, "%s: empty vocabulary", name);
    hm_tokenizer *t;
    hm_status st = hm_tok_alloc(HM_TOK_BPE, (uint32_t)max_id + 1, name, &t);
    if (st) return st;
    uint8_t *seen = calloc((size_t)max_id + 1, 1);
    if (!seen) st = hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", name);
    json_object_foreach(vocab, key, val) {
        if (st) break;
        int64_t id = json_integer_value(val);
        if (seen[id]) {
            st = hm_errorf(HM_ERR_FORMAT, "%s: vocab: id %lld used twice", name, (long long)id);
            break;
        }
        seen[id] = 1;
        st = hm_tok_set(t, (uint32_t)id, key, strlen(key), 0.0f, HM_TOKT_NORMAL);
    }
    for (size_t i = 0; i < x->n && !st; i++) {
        if (x->v[i].id >= HM_TOK_MAX_VOCAB || seen[x->v[i].id]) continue;
        seen[x->v[i].id] = 1;
        st = hm_tok_set(t, (uint32_t)x->v[i].id, x->v[i].text, strlen(x->v[i].text), 0.0f,
                        HM_TOKT_CONTROL);
    }
    for (int64_t id = 0; id <= max_id && !st; id++) {
        if (seen[id]) continue;
        char ph[32];
        int n = snprintf(ph, sizeof ph, "[UNUSED_%lld]", (long long)id);
        st = hm_tok_set(t, (uint32_t)id, ph, (size_t)n, 0.0f, HM_TOKT_UNUSED);
    }
    free(seen);
    if (!st) {
        t->escape_ws = false;
        apply_extras(t, x);
        st = hm_tok_finalize(t, pre);
    }
    /* merges: text lines "a b" (after an optional "#version" header) or a JSON array */
    if (!st && merges_arr) {
        size_t n = json_array_size(merges_arr);
        st = hm_tok_merges_reserve(t, n);
        for (size_t i = 0; i < n && !st; i++) {
            json_t *m = json_array_get(merges_arr, i);
            const char *a, *b;
            size_t la, lb;
            const char *sp;
            if (json_is_string(m) && (a = json_string_value(m)) && strlen(a) > 1 &&
                (sp = strchr(a + 1, ' '))) {
                la = (size_t)(sp - a);
                b = sp + 1;
                lb = strlen(b);
            } else if (json_is_array(m) && json_array_size(m) == 2 &&
                       (a = json_string_value(json_array_get(m, 0))) &&
                       (b = json_string_value(json_array_get(m, 1)))) {
                la = strlen(a);
                lb = strlen(b);
            } else {
                st = hm_errorf(HM_ERR_FORMAT, "%s: merges[%zu]: expected \"a b\" or [a, b]", name,
                               i);
                break;
            }
            st = hm_tok_add_merge(t, a, la, b, lb, (int32_t)i);
        }
    } else if (!st && merges) {
        size_t lines = 1;
        for (size_t i = 0; i < merges_len; i++) lines += merges[i] == '\n';
        st = hm_tok_merges_reserve(t, lines);
        int32_t rank = 0;
        size_t line_no = 0;
        for (size_t pos = 0; pos < merges_len && !st;) {
            const char *nl = memchr(merges + pos, '\n', merges_len - pos);
            size_t end = nl ? (size_t)(nl - merges) : merges_len;
            const char *l = merges + pos;
            size_t len = end - pos;
            line_no++;
            pos = end + 1;
            if (len && l[len - 1] == '\r') len--;
            if (len == 0 || (line_no == 1 && len >= 8 && !memcmp(l, "#version", 8))) continue;
            const char *sp = len > 1 ? memchr(l + 1, ' ', len - 1) : NULL;
            if (!sp) {
                st = hm_errorf(HM_ERR_FORMAT, "%s: merges.txt line %zu: expected 'left right'",
                               name, line_no);
                break;
            }
            st = hm_tok_add_merge(t, l, (size_t)(sp - l), sp + 1, len - (size_t)(sp - l) - 1,
                                  rank++);
            if (st) hm_error_prefix(st, "merges.txt line %zu", line_no);
        }
    }
    if (st) {
        hm_tokenizer_free(t);
        return st;
    }
    *out = t;
    return HM_OK;
}

hm_status hm_tokenizer_from_hf_memory(const char *vocab_json, size_t vocab_len,
                                      const char *merges_txt, size_t merges_len, const char *name,
                                      hm_tokenizer **out) {
    *out = NULL;
    json_error_t err;
    json_t *v = json_loadb(vocab_json, vocab_len, JSON_REJECT_DUPLICATES, &err);
    if (!v) return hm_errorf(HM_ERR_FORMAT, "%s: vocab.json line %d: %s", name, err.line, err.text);
    extras x = {.add_bos = -1, .add_eos = -1};
    hm_status st = hf_build(v, merges_txt, merges_len, NULL, &x, "gpt-2", name, out);
    json_decref(v);
    return st;
}

/* Known split patterns of tokenizer.json -> llama.cpp pre-tokenizer names. */
static const char *pre_from_pattern(const char *re) {
    if (!re) return NULL;
    if (strstr(re, "\\p{N}{1,3}") && strstr(re, "\\p{Lu}")) return "gpt-4o";
    if (strstr(re, "[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}|")) return "qwen35";
    if (strstr(re, "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}")) return "llama3";
    if (strstr(re, "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|")) return "qwen2";
    return NULL;
}

static void find_patterns(json_t *pt, const char **pre) {
    if (!json_is_object(pt) || *pre) return;
    json_t *pat = json_object_get(pt, "pattern");
    const char *re = json_string_value(json_object_get(pat, "Regex"));
    if (re) *pre = pre_from_pattern(re);
    json_t *list = json_object_get(pt, "pretokenizers");
    for (size_t i = 0; i < json_array_size(list); i++) find_patterns(json_array_get(list, i), pre);
}

static char *dup_json_str(json_t *v, size_t *len) {
    *len = json_string_length(v);
    char *s = malloc(*len + 1);
    if (s) memcpy(s, json_string_value(v), *len + 1);
    return s;
}

/* One tokenizer.json "normalizer" object (a Sequence is flattened) appended to t's steps. */
static hm_status add_normalizer(hm_tokenizer *t, json_t *n, const char *path, int depth) {
    if (json_is_null(n)) return HM_OK;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (!type) return hm_errorf(HM_ERR_FORMAT, "%s: normalizer without a \"type\"", path);
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list) || depth > 8)
            return hm_errorf(HM_ERR_FORMAT,
                             "%s: normalizer Sequence: expected a \"normalizers\" "
                             "array (at most 8 deep)",
                             path);
        hm_status st = HM_OK;
        for (size_t i = 0; i < json_array_size(list) && !st; i++)
            st = add_normalizer(t, json_array_get(list, i), path, depth + 1);
        return st;
    }
    static const struct {
        const char *name;
        hm_norm_kind kind;
    } kinds[] = {{"NFC", HM_NORM_NFC},
                 {"NFD", HM_NORM_NFD},
                 {"NFKC", HM_NORM_NFKC},
                 {"NFKD", HM_NORM_NFKD},
                 {"Lowercase", HM_NORM_LOWERCASE},
                 {"Strip", HM_NORM_STRIP},
                 {"Prepend", HM_NORM_PREPEND},
                 {"Replace", HM_NORM_REPLACE}};
    hm_norm_step step = {0};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(type, kinds[i].name)) step.kind = kinds[i].kind;
    if (!step.kind)
        return hm_errorf(HM_ERR_UNSUPPORTED,
                         "%s: normalizer type '%s' is not supported (NFC, NFD, NFKC, NFKD, "
                         "Lowercase, Strip, Prepend, Replace, Sequence)",
                         path, type);
    hm_status st = HM_OK;
    if (step.kind == HM_NORM_STRIP) {
        json_t *l = json_object_get(n, "strip_left"), *r = json_object_get(n, "strip_right");
        step.left = !json_is_boolean(l) || json_is_true(l);
        step.right = !json_is_boolean(r) || json_is_true(r);
    } else if (step.kind == HM_NORM_PREPEND) {
        json_t *p = json_object_get(n, "prepend");
        if (!json_is_string(p))
            return hm_errorf(HM_ERR_FORMAT, "%s: normalizer Prepend: expected a \"prepend\" string",
                             path);
        step.content = dup_json_str(p, &step.content_len);
        if (!step.content) st = hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", path);
    } else if (step.kind == HM_NORM_REPLACE) {
        json_t *pat = json_object_get(n, "pattern"), *c = json_object_get(n, "content");
        json_t *lit = json_object_get(pat, "String"), *rx = json_object_get(pat, "Regex");
        if (!json_is_string(c) || (!json_is_string(lit) && !json_is_string(rx)))
            return hm_errorf(HM_ERR_FORMAT,
                             "%s: normalizer Replace: expected \"pattern\": {\"String\" or "
                             "\"Regex\": ...} and a \"content\" string",
                             path);
        step.content = dup_json_str(c, &step.content_len);
        if (!step.content) st = hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", path);
        if (!st && json_is_string(lit)) {
            step.pattern = dup_json_str(lit, &step.pattern_len);
            if (!step.pattern) st = hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", path);
        } else if (!st) {
            int err;
            PCRE2_SIZE off;
            step.re =
                pcre2_compile((PCRE2_SPTR)json_string_value(rx), json_string_length(rx),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, NULL);
            if (!step.re) {
                PCRE2_UCHAR msg[128];
                pcre2_get_error_message(err, msg, sizeof msg);
                st = hm_errorf(HM_ERR_UNSUPPORTED, "%s: normalizer Replace regex: %s at %zu", path,
                               (const char *)msg, (size_t)off);
            }
        }
    }
    if (!st) st = hm_tok_norm_add(t, &step);
    if (st) {
        free(step.content);
        free(step.pattern);
        if (step.re) pcre2_code_free((pcre2_code *)step.re);
    }
    return st;
}

/* A parsed tokenizer.json; dir (NULL: none) holds the HF config files next to it. */
static hm_status tokenizer_json_build(json_t *root, const char *path, const char *dir,
                                      hm_tokenizer **out) {
    *out = NULL;
    extras x = {.add_bos = -1, .add_eos = -1};
    hm_status st = dir ? read_config(dir, &x) : HM_OK;
    json_t *model = json_object_get(root, "model");
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!st && (!type || strcmp(type, "BPE") != 0))
        st = hm_errorf(HM_ERR_UNSUPPORTED, "%s: model.type '%s': only BPE is supported", path,
                       type ? type : "?");
    if (!st && json_is_true(json_object_get(model, "byte_fallback")))
        st = hm_errorf(HM_ERR_UNSUPPORTED,
                       "%s: SentencePiece-style BPE (byte_fallback) in "
                       "tokenizer.json is not supported; use tokenizer.model",
                       path);
    json_t *added = json_object_get(root, "added_tokens");
    for (size_t i = 0; i < json_array_size(added) && !st; i++) {
        json_t *a = json_array_get(added, i);
        const char *c = json_string_value(json_object_get(a, "content"));
        json_t *id = json_object_get(a, "id");
        if (!c || !json_is_integer(id)) continue;
        st = extras_add(
            &x, json_integer_value(id), c, strlen(c), json_is_true(json_object_get(a, "special")),
            json_is_true(json_object_get(a, "lstrip")), json_is_true(json_object_get(a, "rstrip")));
    }
    const char *pre = NULL;
    find_patterns(json_object_get(root, "pre_tokenizer"), &pre);
    if (!pre) pre = pre_for_class(x.tok_class);
    if (!st)
        st = hf_build(json_object_get(model, "vocab"), NULL, 0, json_object_get(model, "merges"),
                      &x, pre, path, out);
    if (!st && json_is_true(json_object_get(model, "ignore_merges"))) (*out)->ignore_merges = true;
    if (!st) { /* the declared normalizer replaces the one the pre-tokenizer name implies */
        hm_tok_norm_clear(*out);
        st = add_normalizer(*out, json_object_get(root, "normalizer"), path, 0);
        if (st) {
            hm_tokenizer_free(*out);
            *out = NULL;
        }
    }
    extras_free(&x);
    return st;
}

static hm_status load_tokenizer_json(const char *path, const char *dir, hm_tokenizer **out) {
    *out = NULL;
    json_error_t err;
    json_t *root = read_json(path, 0, &err);
    if (!root) return hm_errorf(HM_ERR_FORMAT, "%s line %d: %s", path, err.line, err.text);
    hm_status st = tokenizer_json_build(root, path, dir, out);
    json_decref(root);
    return st;
}

hm_status hm_tokenizer_from_json_memory(const char *json, size_t len, const char *name,
                                        hm_tokenizer **out) {
    *out = NULL;
    json_error_t err;
    json_t *root = json_loadb(json, len, 0, &err);
    if (!root) return hm_errorf(HM_ERR_FORMAT, "%s line %d: %s", name, err.line, err.text);
    hm_status st = tokenizer_json_build(root, name, NULL, out);
    json_decref(root);
    return st;
}

/* ---- tiktoken ---------------------------------------------------------------------------------
 */

#define GUNZIP_MAX (512u << 20) /* refuse to inflate beyond 512 MiB (decompression bombs) */

/* Inflates gzip data (every member, as gunzip does) with zlib into out (NUL-terminated). */
static hm_status gunzip(const uint8_t *in, size_t n, const char *name, hm_tbuf *out) {
    out->n = 0;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: zlib: cannot start inflating", name);
    hm_status st = HM_OK;
    zs.next_in = (Bytef *)(uintptr_t)in; /* zlib's API is not const; it only reads the input */
    zs.avail_in = n > UINT32_MAX ? UINT32_MAX : (uInt)n;
    size_t left = n - zs.avail_in; /* input not yet handed to zlib */
    for (;;) {
        if (out->cap - out->n < (1u << 16) + 1) {
            size_t cap = out->cap ? out->cap * 2 : (n * 4 > (1u << 20) ? n * 4 : (1u << 20));
            char *p = realloc(out->p, cap);
            if (!p) {
                st = hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory inflating gzip", name);
                break;
            }
            out->p = p;
            out->cap = cap;
        }
        size_t room = out->cap - out->n - 1;
        zs.next_out = (Bytef *)out->p + out->n;
        zs.avail_out = room > UINT32_MAX ? UINT32_MAX : (uInt)room;
        uInt before = zs.avail_out;
        int rc = inflate(&zs, Z_NO_FLUSH);
        out->n += before - zs.avail_out;
        if (out->n > GUNZIP_MAX) {
            st = hm_errorf(HM_ERR_FORMAT, "%s: gzip data inflates past %u MiB", name,
                           GUNZIP_MAX >> 20);
            break;
        }
        bool refilled = false;
        if (zs.avail_in == 0 && left) {
            zs.avail_in = left > UINT32_MAX ? UINT32_MAX : (uInt)left;
            left -= zs.avail_in;
            refilled = true;
        }
        if (rc == Z_STREAM_END) {
            if (zs.avail_in == 0) break;
            if (zs.avail_in < 2 || zs.next_in[0] != 0x1F || zs.next_in[1] != 0x8B) {
                st =
                    hm_errorf(HM_ERR_FORMAT, "%s: %zu bytes of trailing data after the gzip stream",
                              name, (size_t)zs.avail_in + left);
                break;
            }
            inflateReset(&zs); /* another gzip member follows */
            continue;
        }
        if (rc == Z_OK || (rc == Z_BUF_ERROR && refilled)) continue;
        if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
            st = hm_errorf(HM_ERR_FORMAT, "%s: truncated gzip data (%zu bytes inflated)", name,
                           out->n);
        } else {
            st = hm_errorf(rc == Z_MEM_ERROR ? HM_ERR_NO_MEMORY : HM_ERR_FORMAT,
                           "%s: corrupt gzip data near input byte %zu: %s", name,
                           (size_t)(zs.next_in - in), zs.msg ? zs.msg : "zlib error");
        }
        break;
    }
    inflateEnd(&zs);
    if (!st && out->p) out->p[out->n] = 0;
    return st;
}

static int b64val(uint8_t c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes base64 s[0..n) into out (at most 3n/4 bytes); -1 when malformed. */
static long b64_decode(const char *s, size_t n, uint8_t *out) {
    uint32_t acc = 0;
    int nb = 0;
    long k = 0;
    size_t i = 0;
    for (; i < n && s[i] != '='; i++) {
        int v = b64val((uint8_t)s[i]);
        if (v < 0) return -1;
        acc = (acc << 6) | (uint32_t)v;
        nb += 6;
        if (nb >= 8) {
            nb -= 8;
            out[k++] = (uint8_t)(acc >> nb);
        }
    }
    for (; i < n; i++)
        if (s[i] != '=') return -1;
    return k;
}

/* Llama-3's 256 special tokens (llama-models models/llama3/tokenizer.py). */
static hm_status llama3_specials(extras *x, int64_t base) {
    static const char *const names[] = {"<|begin_of_text|>",
                                        "<|end_of_text|>",
                                        "<|reserved_special_token_0|>",
                                        "<|reserved_special_token_1|>",
                                        "<|finetune_right_pad_id|>",
                                        "<|step_id|>",
                                        "<|start_header_id|>",
                                        "<|end_header_id|>",
                                        "<|eom_id|>",
                                        "<|eot_id|>",
                                        "<|python_tag|>",
                                        "<|image|>"};
    hm_status st = HM_OK;
    for (int i = 0; i < 256 && !st; i++) {
        char buf[64];
        const char *s = buf;
        if (i < 12)
            s = names[i];
        else
            snprintf(buf, sizeof buf, "<|reserved_special_token_%d|>", i - 10);
        st = extras_add(x, base + i, s, strlen(s), true, false, false);
    }
    set_str(&x->bos, "<|begin_of_text|>");
    set_str(&x->eos, "<|end_of_text|>");
    if (x->add_bos < 0) x->add_bos = 1;
    return st;
}

static hm_status tiktoken_build(const char *data, size_t size, extras *x, const char *name,
                                hm_tokenizer **out) {
    *out = NULL;
    /* pass 1: validate, find the largest rank */
    int64_t max_rank = -1;
    size_t lines = 0;
    for (size_t pos = 0; pos < size;) {
        const char *nl = memchr(data + pos, '\n', size - pos);
        size_t end = nl ? (size_t)(nl - data) : size;
        const char *l = data + pos;
        size_t len = end - pos;
        pos = end + 1;
        lines++;
        if (len && l[len - 1] == '\r') len--;
        if (!len) continue;
        const char *sp = memchr(l, ' ', len);
        char num[24];
        size_t nl_len = sp ? len - (size_t)(sp - l) - 1 : 0;
        if (!sp || nl_len == 0 || nl_len >= sizeof num)
            return hm_errorf(HM_ERR_FORMAT, "%s line %zu: expected 'base64 rank'", name, lines);
        memcpy(num, sp + 1, nl_len);
        num[nl_len] = 0;
        char *e;
        long long r = strtoll(num, &e, 10);
        if (*e || r < 0 || r >= HM_TOK_MAX_VOCAB)
            return hm_errorf(HM_ERR_FORMAT, "%s line %zu: bad rank '%s'", name, lines, num);
        if (r > max_rank) max_rank = r;
    }
    if (max_rank < 0) return hm_errorf(HM_ERR_FORMAT, "%s: no tokens", name);
    int64_t n_ranks = max_rank + 1;
    hm_status st = HM_OK;
    if (n_ranks == 128000 && x->n == 0) {
        st = llama3_specials(x, 128000);
        snprintf(x->pre, sizeof x->pre, "llama3");
    } else if (!x->pre[0]) {
        snprintf(x->pre, sizeof x->pre, "%s", n_ranks >= 199998 ? "gpt-4o" : "llama3");
    }
    if (st) return st;
    int64_t n = n_ranks;
    for (size_t i = 0; i < x->n; i++)
        if (x->v[i].id < HM_TOK_MAX_VOCAB && x->v[i].id + 1 > n) n = x->v[i].id + 1;
    hm_tokenizer *t;
    st = hm_tok_alloc(HM_TOK_BPE, (uint32_t)n, name, &t);
    if (st) return st;
    t->raw_bytes = true;
    t->escape_ws = false;
    t->bpe_mode = HM_BPE_RANKS;
    uint8_t *seen = calloc((size_t)n, 1);
    uint8_t *buf = malloc(size + 4);
    if (!seen || !buf) st = hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", name);
    size_t line = 0;
    for (size_t pos = 0; pos < size && !st;) {
        const char *nl = memchr(data + pos, '\n', size - pos);
        size_t end = nl ? (size_t)(nl - data) : size;
        const char *l = data + pos;
        size_t len = end - pos;
        pos = end + 1;
        line++;
        if (len && l[len - 1] == '\r') len--;
        if (!len) continue;
        const char *sp = memchr(l, ' ', len);
        char num[24];
        size_t nl_len = len - (size_t)(sp - l) - 1; /* validated in pass 1 */
        memcpy(num, sp + 1, nl_len);
        num[nl_len] = 0;
        long long r = strtoll(num, NULL, 10);
        long k = b64_decode(l, (size_t)(sp - l), buf);
        if (k <= 0) {
            st = hm_errorf(HM_ERR_FORMAT, "%s line %zu: bad base64 token", name, line);
            break;
        }
        if (seen[r]) {
            st = hm_errorf(HM_ERR_FORMAT, "%s line %zu: rank %lld given twice", name, line, r);
            break;
        }
        seen[r] = 1;
        st = hm_tok_set(t, (uint32_t)r, (const char *)buf, (size_t)k, 0.0f, HM_TOKT_NORMAL);
    }
    for (size_t i = 0; i < x->n && !st; i++) {
        const added_tok *a = &x->v[i];
        if (a->id >= n || seen[a->id]) continue;
        seen[a->id] = 1;
        st = hm_tok_set(t, (uint32_t)a->id, a->text, strlen(a->text), 0.0f, HM_TOKT_CONTROL);
    }
    for (int64_t id = 0; id < n && !st; id++) {
        if (seen[id]) continue;
        char ph[32];
        int k = snprintf(ph, sizeof ph, "<|reserved_%lld|>", (long long)id);
        st = hm_tok_set(t, (uint32_t)id, ph, (size_t)k, 0.0f, HM_TOKT_UNUSED);
    }
    free(seen);
    free(buf);
    if (!st) {
        apply_extras(t, x);
        st = hm_tok_finalize(t, x->pre);
    }
    if (st) {
        hm_tokenizer_free(t);
        return st;
    }
    *out = t;
    return HM_OK;
}

hm_status hm_tokenizer_from_tiktoken_memory(const void *data, size_t size, const char *name,
                                            hm_tokenizer **out) {
    extras x = {.add_bos = -1, .add_eos = -1};
    hm_tbuf plain = {0};
    const uint8_t *d = data;
    hm_status st = HM_OK;
    if (size >= 2 && d[0] == 0x1F && d[1] == 0x8B) {
        st = gunzip(d, size, name, &plain);
        data = plain.p;
        size = plain.n;
    }
    if (!st)
        st = tiktoken_build(data, size, &x, name, out);
    else
        *out = NULL;
    hm_tbuf_free(&plain);
    extras_free(&x);
    return st;
}

/* ---- detection --------------------------------------------------------------------------------
 */

typedef enum { F_UNKNOWN, F_GGUF, F_GZIP, F_SPM, F_TIKTOKEN, F_JSON } file_kind;

static file_kind sniff(const uint8_t *d, size_t n) {
    if (n >= 4 && !memcmp(d, "GGUF", 4)) return F_GGUF;
    if (n >= 2 && d[0] == 0x1F && d[1] == 0x8B) return F_GZIP;
    if (n >= 1 && d[0] == 0x0A) return F_SPM;
    size_t i = 0;
    while (i < n && i < 64 && (d[i] == ' ' || d[i] == '\n' || d[i] == '\t' || d[i] == '\r')) i++;
    if (i < n && d[i] == '{') return F_JSON;
    for (i = 0; i < n && i < 512 && b64val(d[i]) >= 0; i++) {
    }
    while (i < n && d[i] == '=') i++;
    if (i > 0 && i < n && d[i] == ' ' && i + 1 < n && d[i + 1] >= '0' && d[i + 1] <= '9')
        return F_TIKTOKEN;
    return F_UNKNOWN;
}

static void dir_of(const char *path, char *dir, size_t cap) {
    snprintf(dir, cap, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, cap, ".");
}

static hm_status load_file(const char *path, const char *dir, hm_tokenizer **out) {
    hm_mapped_file f;
    hm_map_params mp = hm_map_default_params();
    mp.advice = HM_MAP_SEQUENTIAL;
    hm_status st = hm_file_map(path, &mp, &f);
    if (st) return st;
    file_kind k = sniff(f.data, f.size);
    extras x = {.add_bos = -1, .add_eos = -1};
    hm_tbuf plain = {0};
    switch (k) {
    case F_GGUF: {
        hm_file_unmap(&f);
        hm_gguf *g;
        st = hm_gguf_open(path, &g);
        if (!st) st = hm_tokenizer_from_gguf(g, out);
        hm_gguf_close(g);
        return st;
    }
    case F_SPM:
        st = hm_tokenizer_from_spm_memory(f.data, f.size, path, out);
        break;
    case F_GZIP:
    case F_TIKTOKEN:
        st = read_config(dir, &x);
        if (!st && k == F_GZIP) st = gunzip(f.data, f.size, path, &plain);
        if (!st)
            st = tiktoken_build(k == F_GZIP ? plain.p : (const char *)f.data,
                                k == F_GZIP ? plain.n : f.size, &x, path, out);
        break;
    case F_JSON:
        hm_file_unmap(&f);
        return load_tokenizer_json(path, dir, out);
    default:
        st = hm_errorf(HM_ERR_FORMAT,
                       "%s: not a tokenizer file (GGUF, SentencePiece .model, tiktoken ranks, "
                       "tokenizer.json)",
                       path);
    }
    hm_tbuf_free(&plain);
    extras_free(&x);
    hm_file_unmap(&f);
    return st;
}

static hm_status load_dir(const char *dir, hm_tokenizer **out) {
    char path[4096];
    if (file_exists(dir, "tokenizer.json")) {
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        return load_tokenizer_json(path, dir, out);
    }
    if (file_exists(dir, "vocab.json") && file_exists(dir, "merges.txt")) {
        extras x = {.add_bos = -1, .add_eos = -1};
        hm_status st = read_config(dir, &x);
        hm_mapped_file mf = {0};
        json_error_t err;
        snprintf(path, sizeof path, "%s/vocab.json", dir);
        json_t *v = st ? NULL : read_json(path, JSON_REJECT_DUPLICATES, &err);
        if (!st && !v) st = hm_errorf(HM_ERR_FORMAT, "%s line %d: %s", path, err.line, err.text);
        snprintf(path, sizeof path, "%s/merges.txt", dir);
        if (!st) st = hm_file_map(path, NULL, &mf);
        if (!st)
            st = hf_build(v, (const char *)mf.data, mf.size, NULL, &x, pre_for_class(x.tok_class),
                          dir, out);
        hm_file_unmap(&mf);
        json_decref(v);
        extras_free(&x);
        return st;
    }
    static const char *const files[] = {"tokenizer.model", "tokenizer.model.v3",
                                        "tokenizer.model.v1", NULL};
    for (int i = 0; files[i]; i++) {
        if (file_exists(dir, files[i])) {
            snprintf(path, sizeof path, "%s/%s", dir, files[i]);
            return load_file(path, dir, out);
        }
    }
    return hm_errorf(HM_ERR_NOT_FOUND,
                     "%s: no tokenizer.json, vocab.json + merges.txt or tokenizer.model", dir);
}

hm_status hm_tokenizer_load(const char *path, hm_tokenizer **out) {
    *out = NULL;
    struct stat sb;
    if (!path || stat(path, &sb) != 0)
        return hm_errorf(HM_ERR_NOT_FOUND, "%s: no such file or directory", path ? path : "(null)");
    if (S_ISDIR(sb.st_mode)) return load_dir(path, out);
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    return load_file(path, dir, out);
}
