/* load_gguf.c - tokenizer from GGUF metadata (tokenizer.ggml.*), with llama.cpp's defaults. */
#include <string.h>

#include "core/log.h"
#include "tokenizer/tok_int.h"

#define KEY_MODEL "tokenizer.ggml.model"

/* Copies a GGUF string into a NUL-terminated buffer (truncating). */
static void str_copy(hm_gguf_str s, char *buf, size_t cap) {
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(buf, s.ptr, n);
    buf[n] = 0;
}

/* A special-token id key. One at or past the vocabulary size is ignored with a warning and the
 * default stays, as llama.cpp does ("bad special token: ... using default id"). */
static void get_id(const hm_gguf *g, const char *key, uint32_t n, int32_t *id) {
    uint64_t v;
    if (hm_gguf_get_uint(g, key, &v) != HM_OK) return;
    if (v < n) {
        *id = (int32_t)v;
        return;
    }
    HM_WARN("%s: %s = %llu is past the vocabulary (%u tokens): ignored, using %d", hm_gguf_name(g),
            key, (unsigned long long)v, n, *id);
}

static void get_flag(const hm_gguf *g, const char *key, bool *b) {
    bool v;
    if (hm_gguf_get_bool(g, key, &v) == HM_OK) *b = v;
}

static hm_status load_merges(hm_tokenizer *t, const hm_gguf *g) {
    const hm_gguf_value *m;
    hm_status st = hm_gguf_get_arr(g, "tokenizer.ggml.merges", &m);
    if (st == HM_ERR_NOT_FOUND)
        return hm_errorf(HM_ERR_FORMAT, "%s: BPE vocabulary without tokenizer.ggml.merges",
                         t->source);
    if (st) return st;
    if (m->arr_type != HM_GGUF_STRING)
        return hm_errorf(HM_ERR_FORMAT, "%s: tokenizer.ggml.merges: expected an array of strings",
                         t->source);
    if (m->arr_n > INT32_MAX) return hm_errorf(HM_ERR_FORMAT, "%s: too many merges", t->source);
    st = hm_tok_merges_reserve(t, m->arr_n);
    for (uint64_t i = 0; i < m->arr_n && !st; i++) {
        hm_gguf_str s = m->arr_strs[i];
        /* "left right": the separator is the first space after the first byte */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp) continue;
        size_t ll = (size_t)(sp - s.ptr);
        st = hm_tok_add_merge(t, s.ptr, ll, sp + 1, s.len - ll - 1, (int32_t)i);
        if (st == HM_ERR_NOT_FOUND) st = HM_OK; /* llama.cpp keeps them; they can never apply */
    }
    return st;
}

hm_status hm_tokenizer_from_gguf(const hm_gguf *g, hm_tokenizer **out) {
    *out = NULL;
    const char *name = hm_gguf_name(g);
    hm_gguf_str s;
    hm_status st = hm_gguf_get_str(g, KEY_MODEL, &s);
    if (st == HM_ERR_NOT_FOUND)
        return hm_errorf(HM_ERR_NOT_FOUND, "%s: no tokenizer (key %s absent)", name, KEY_MODEL);
    if (st) return st;
    char model[32], pre[64] = "";
    str_copy(s, model, sizeof model);
    if (hm_gguf_get_str(g, "tokenizer.ggml.pre", &s) == HM_OK) str_copy(s, pre, sizeof pre);

    /* llama.cpp's "no_vocab" (and "none"): a model written without a tokenizer */
    if (!strcmp(model, "no_vocab") || !strcmp(model, "none"))
        return hm_errorf(HM_ERR_NOT_FOUND, "%s: no tokenizer (%s = '%s')", name, KEY_MODEL, model);
    hm_tok_kind kind;
    if (!strcmp(model, "gpt2"))
        kind = HM_TOK_BPE;
    else if (!strcmp(model, "llama"))
        kind = HM_TOK_SPM;
    else if (!strcmp(model, "bert"))
        kind = HM_TOK_WPM;
    else
        return hm_errorf(HM_ERR_UNSUPPORTED, "%s: %s = '%s' is not supported (gpt2, llama, bert)",
                         name, KEY_MODEL, model);

    const hm_gguf_value *toks, *scores = NULL, *types = NULL;
    st = hm_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks);
    if (st) return st;
    if (toks->arr_type != HM_GGUF_STRING)
        return hm_errorf(HM_ERR_FORMAT, "%s: tokenizer.ggml.tokens: expected an array of strings",
                         name);
    if (toks->arr_n == 0 || toks->arr_n > HM_TOK_MAX_VOCAB)
        return hm_errorf(HM_ERR_FORMAT, "%s: tokenizer.ggml.tokens: %llu tokens (1..%u)", name,
                         (unsigned long long)toks->arr_n, HM_TOK_MAX_VOCAB);
    uint32_t n = (uint32_t)toks->arr_n;
    if (hm_gguf_get_arr(g, "tokenizer.ggml.scores", &scores) == HM_OK) {
        if ((scores->arr_type != HM_GGUF_FLOAT32 && scores->arr_type != HM_GGUF_INT32) ||
            scores->arr_n < n)
            return hm_errorf(HM_ERR_FORMAT,
                             "%s: tokenizer.ggml.scores: expected %u float32/int32 values", name,
                             n);
    }
    if (hm_gguf_get_arr(g, "tokenizer.ggml.token_type", &types) == HM_OK) {
        if (types->arr_type != HM_GGUF_INT32 || types->arr_n < n)
            return hm_errorf(HM_ERR_FORMAT, "%s: tokenizer.ggml.token_type: expected %u int32",
                             name, n);
    }

    hm_tokenizer *t;
    st = hm_tok_alloc(kind, n, name, &t);
    if (st) return st;
    for (uint32_t i = 0; i < n && !st; i++) {
        hm_gguf_str w = toks->arr_strs[i];
        float sc = scores ? (float)hm_gguf_arr_float(scores, i) : 0.0f;
        int ty = types ? (int)hm_gguf_arr_int(types, i) : HM_TOKT_NORMAL;
        st = hm_tok_set(t, i, w.ptr, (size_t)w.len, sc, ty);
    }
    /* llama.cpp's defaults per model, then the keys */
    if (kind == HM_TOK_SPM) {
        t->bos = 1, t->eos = 2, t->unk = 0;
        t->add_bos = true, t->add_space_prefix = true;
    } else if (kind == HM_TOK_WPM) {
        t->bos = 101, t->unk = 100, t->sep = 102, t->pad = 0;
        t->add_bos = true, t->add_sep = true;
        t->lowercase = false;
    } else {
        t->bos = 11, t->eos = 11;
        t->escape_ws = false;
        static const char *const llama3[] = {"llama3",  "llama-v3",  "llama-bpe",
                                             "falcon3", "falcon-h1", "pixtral",
                                             "tekken",  "chameleon", NULL};
        for (int k = 0; llama3[k]; k++)
            if (!strcmp(pre, llama3[k])) t->add_bos = true;
    }
    get_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos);
    get_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos);
    get_id(g, "tokenizer.ggml.eot_token_id", n, &t->eot);
    get_id(g, "tokenizer.ggml.eom_token_id", n, &t->eom);
    get_id(g, "tokenizer.ggml.unknown_token_id", n, &t->unk);
    get_id(g, "tokenizer.ggml.seperator_token_id", n, &t->sep);
    get_id(g, "tokenizer.ggml.padding_token_id", n, &t->pad);
    get_flag(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
    get_flag(g, "tokenizer.ggml.add_eos_token", &t->add_eos);
    get_flag(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
    get_flag(g, "tokenizer.ggml.remove_extra_whitespaces", &t->remove_extra_ws);
    if (kind == HM_TOK_WPM) {
        /* BertNormalizer: lowercase (and strip accents unless told otherwise) */
        t->lowercase = true; /* bert-style vocabularies in GGUF are uncased unless marked */
        get_flag(g, "tokenizer.ggml.lowercase", &t->lowercase);
        t->strip_accents = t->lowercase;
        get_flag(g, "tokenizer.ggml.strip_accents", &t->strip_accents);
    }
    if (!st) st = hm_tok_finalize(t, pre);
    if (!st && kind == HM_TOK_BPE) st = load_merges(t, g);
    if (st) {
        hm_tokenizer_free(t);
        return st;
    }
    *out = t;
    return HM_OK;
}
