/* vocab.c - the tokenizer object: token tables, hash maps, special tokens, pre-tokenizer choice,
 * accessors and (incremental) decoding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/log.h"
#include "tokenizer/tok_int.h"

/* ---- buffers and hashing ----------------------------------------------------------------------
 */

hm_status hm_tbuf_put(hm_tbuf *b, const void *p, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) {
            if (cap > SIZE_MAX / 2)
                return hm_errorf(HM_ERR_NO_MEMORY, "tokenizer: buffer overflow");
            cap *= 2;
        }
        char *q = realloc(b->p, cap);
        if (!q) return hm_errorf(HM_ERR_NO_MEMORY, "tokenizer: out of memory (%zu bytes)", cap);
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return HM_OK;
}

void hm_tbuf_free(hm_tbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static inline uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    return x;
}

int32_t hm_tok_lookup(const hm_tokenizer *t, const char *key, size_t len) {
    if (!t->map.slots) return HM_TOKEN_NONE;
    uint64_t i = hm_tok_hash(key, len) & t->map.mask;
    for (;;) {
        uint32_t v = t->map.slots[i];
        if (!v) return HM_TOKEN_NONE;
        uint32_t id = v - 1;
        if (t->key_len[id] == len && memcmp(t->key_buf->p + t->key_off[id], key, len) == 0)
            return (int32_t)id;
        i = (i + 1) & t->map.mask;
    }
}

/* Inserts id under its key unless the key is already present (the first id wins). */
static void strmap_insert(hm_tokenizer *t, uint32_t id) {
    const char *key = t->key_buf->p + t->key_off[id];
    size_t len = t->key_len[id];
    uint64_t i = hm_tok_hash(key, len) & t->map.mask;
    for (;;) {
        uint32_t v = t->map.slots[i];
        if (!v) {
            t->map.slots[i] = id + 1;
            return;
        }
        uint32_t o = v - 1;
        if (t->key_len[o] == len && memcmp(t->key_buf->p + t->key_off[o], key, len) == 0) return;
        i = (i + 1) & t->map.mask;
    }
}

hm_status hm_tok_merges_reserve(hm_tokenizer *t, uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n + 16) cap *= 2;
    if (cap > (1ull << 32))
        return hm_errorf(HM_ERR_FORMAT, "%s: too many merges (%llu)", t->source,
                         (unsigned long long)n);
    hm_pair_slot *s = malloc(cap * sizeof *s);
    if (!s) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory for merges", t->source);
    for (uint64_t i = 0; i < cap; i++) s[i].key = UINT64_MAX;
    free(t->merges.slots);
    t->merges.slots = s;
    t->merges.mask = cap - 1;
    t->merges.count = 0;
    return HM_OK;
}

static bool pair_find(const hm_pairmap *m, int32_t l, int32_t r, int32_t *rank, int32_t *merged) {
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    uint64_t i = hash_u64(key) & m->mask;
    for (;;) {
        const hm_pair_slot *s = &m->slots[i];
        if (s->key == key) {
            *rank = s->rank;
            *merged = s->merged;
            return true;
        }
        if (s->key == UINT64_MAX) return false;
        i = (i + 1) & m->mask;
    }
}

bool hm_tok_pair_find(const hm_tokenizer *t, int32_t l, int32_t r, int32_t *rank, int32_t *merged);
bool hm_tok_pair_find(const hm_tokenizer *t, int32_t l, int32_t r, int32_t *rank, int32_t *merged) {
    if (!t->merges.slots || l < 0 || r < 0) return false;
    return pair_find(&t->merges, l, r, rank, merged);
}

/* ---- GPT-2 byte alphabet ----------------------------------------------------------------------
 */

static bool gpt2_self(unsigned b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

/* code point (< 324) -> byte, or -1 */
static int gpt2_cp_to_byte(uint32_t cp) {
    static int16_t table[324];
    static bool ready; /* benign race: every thread writes the same values */
    if (!ready) {
        int16_t tmp[324];
        for (int i = 0; i < 324; i++) tmp[i] = -1;
        unsigned k = 0;
        for (unsigned b = 0; b < 256; b++) {
            if (gpt2_self(b))
                tmp[b] = (int16_t)b;
            else
                tmp[256 + k++] = (int16_t)b;
        }
        memcpy(table, tmp, sizeof table);
        __atomic_store_n(&ready, true, __ATOMIC_RELEASE);
    }
    return cp < 324 ? table[cp] : -1;
}

bool hm_tok_gpt2_decode(const char *s, size_t n, hm_tbuf *out) {
    out->n = 0;
    size_t i = 0;
    while (i < n) {
        size_t adv;
        uint32_t cp = hm_utf8_decode((const uint8_t *)s + i, n - i, &adv);
        int b = gpt2_cp_to_byte(cp);
        if (b < 0 || (cp == 0xFFFD && adv == 1)) return false;
        uint8_t c = (uint8_t)b;
        if (hm_tbuf_put(out, &c, 1) != HM_OK) return false;
        i += adv;
    }
    return true;
}

/* ---- building ---------------------------------------------------------------------------------
 */

hm_status hm_tok_alloc(hm_tok_kind kind, uint32_t n, const char *source, hm_tokenizer **out) {
    *out = NULL;
    if (n == 0 || n > HM_TOK_MAX_VOCAB)
        return hm_errorf(HM_ERR_FORMAT, "%s: vocabulary size %u out of range (1..%u)", source, n,
                         HM_TOK_MAX_VOCAB);
    hm_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", source);
    t->kind = kind;
    t->n = n;
    snprintf(t->source, sizeof t->source, "%s", source);
    t->text_off = calloc(n, sizeof *t->text_off);
    t->text_len = calloc(n, sizeof *t->text_len);
    t->piece_off = calloc(n, sizeof *t->piece_off);
    t->piece_len = calloc(n, sizeof *t->piece_len);
    t->score = calloc(n, sizeof *t->score);
    t->type = calloc(n, 1);
    t->flags = calloc(n, 1);
    if (!t->text_off || !t->text_len || !t->piece_off || !t->piece_len || !t->score || !t->type ||
        !t->flags) {
        hm_tokenizer_free(t);
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory for %u tokens", source, n);
    }
    t->bos = t->eos = t->eot = t->eom = t->unk = t->pad = t->sep = HM_TOKEN_NONE;
    t->escape_ws = true;
    for (int i = 0; i < 256; i++) t->byte_id[i] = HM_TOKEN_NONE;
    *out = t;
    return HM_OK;
}

hm_status hm_tok_set(hm_tokenizer *t, uint32_t id, const char *text, size_t len, float score,
                     int type) {
    if (id >= t->n) return hm_errorf(HM_ERR_INTERNAL, "%s: token id %u >= %u", t->source, id, t->n);
    if (len > UINT32_MAX / 2 || t->text.n > UINT32_MAX / 2)
        return hm_errorf(HM_ERR_FORMAT, "%s: vocabulary text too large", t->source);
    t->text_off[id] = (uint32_t)t->text.n;
    t->text_len[id] = (uint32_t)len;
    hm_status st = hm_tbuf_put(&t->text, text, len);
    if (st) return st;
    char nul = 0;
    st = hm_tbuf_put(&t->text, &nul, 1); /* every text NUL-terminated */
    if (st) return st;
    t->score[id] = score;
    t->type[id] = (uint8_t)(type >= HM_TOKT_NORMAL && type <= HM_TOKT_BYTE ? type : HM_TOKT_NORMAL);
    return HM_OK;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* "<0xAB>" -> 0xAB, else -1 */
static int byte_token_value(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int h = hexval(s[3]), l = hexval(s[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
}

/* Replaces every "▁" by a space. */
static hm_status unescape_ws(const char *s, size_t n, hm_tbuf *out) {
    out->n = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && (uint8_t)s[i] == 0xE2 && (uint8_t)s[i + 1] == 0x96 &&
            (uint8_t)s[i + 2] == 0x81) {
            hm_status st = hm_tbuf_put(out, " ", 1);
            if (st) return st;
            i += 3;
        } else {
            hm_status st = hm_tbuf_put(out, s + i, 1);
            if (st) return st;
            i++;
        }
    }
    return HM_OK;
}

static hm_status build_pieces(hm_tokenizer *t) {
    hm_tbuf tmp = {0};
    hm_status st = HM_OK;
    for (uint32_t id = 0; id < t->n && !st; id++) {
        const char *s = t->text.p + t->text_off[id];
        size_t n = t->text_len[id];
        int type = t->type[id];
        const char *p = s;
        size_t pn = n;
        char byte;
        if (type == HM_TOKT_BYTE && byte_token_value(s, n) >= 0) {
            byte = (char)byte_token_value(s, n);
            p = &byte;
            pn = 1;
        } else if (type == HM_TOKT_CONTROL || type == HM_TOKT_UNKNOWN ||
                   type == HM_TOKT_USER_DEFINED || t->raw_bytes) {
            /* as stored */
        } else if (t->kind == HM_TOK_BPE) {
            if (hm_tok_gpt2_decode(s, n, &tmp)) {
                p = tmp.p ? tmp.p : "";
                pn = tmp.n;
            }
        } else {
            st = unescape_ws(s, n, &tmp);
            p = tmp.p ? tmp.p : "";
            pn = tmp.n;
        }
        if (st) break;
        if (t->piece.n > UINT32_MAX / 2) {
            st = hm_errorf(HM_ERR_FORMAT, "%s: vocabulary too large", t->source);
            break;
        }
        t->piece_off[id] = (uint32_t)t->piece.n;
        t->piece_len[id] = (uint32_t)pn;
        st = hm_tbuf_put(&t->piece, p, pn);
    }
    hm_tbuf_free(&tmp);
    return st;
}

static hm_status build_map(hm_tokenizer *t) {
    if (t->kind == HM_TOK_BPE) {
        t->key_buf = &t->piece;
        t->key_off = t->piece_off;
        t->key_len = t->piece_len;
    } else {
        t->key_buf = &t->text;
        t->key_off = t->text_off;
        t->key_len = t->text_len;
    }
    uint64_t cap = 16;
    while (cap < 2ull * t->n) cap *= 2;
    free(t->map.slots);
    t->map.slots = calloc(cap, sizeof *t->map.slots);
    if (!t->map.slots)
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory for the map", t->source);
    t->map.mask = (uint32_t)(cap - 1);
    /* ordinary tokens first so that they own their key when a special token has the same text */
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t id = 0; id < t->n; id++) {
            int ty = t->type[id];
            bool ordinary = ty == HM_TOKT_NORMAL || ty == HM_TOKT_BYTE || ty == HM_TOKT_UNUSED;
            if (ordinary == (pass == 0)) strmap_insert(t, id);
        }
    }
    for (uint32_t id = 0; id < t->n; id++) {
        int ty = t->type[id];
        bool merge = ty == HM_TOKT_NORMAL || ty == HM_TOKT_UNUSED || ty == HM_TOKT_USER_DEFINED;
        if (t->kind == HM_TOK_BPE) merge = true; /* llama.cpp's BPE looks up any token */
        if (merge)
            t->flags[id] |= HM_TF_MERGEABLE;
        else
            t->flags[id] &= (uint8_t)~HM_TF_MERGEABLE;
    }
    for (int b = 0; b < 256; b++) t->byte_id[b] = HM_TOKEN_NONE;
    if (t->kind == HM_TOK_BPE) {
        for (int b = 0; b < 256; b++) {
            char c = (char)b;
            t->byte_id[b] = hm_tok_lookup(t, &c, 1);
        }
    } else {
        for (uint32_t id = 0; id < t->n; id++) {
            int v = byte_token_value(t->text.p + t->text_off[id], t->text_len[id]);
            if (v >= 0 && t->byte_id[v] == HM_TOKEN_NONE) t->byte_id[v] = (int32_t)id;
        }
    }
    return HM_OK;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

hm_status hm_tok_build_specials(hm_tokenizer *t) {
    free(t->specials);
    t->specials = NULL;
    t->n_specials = 0;
    uint32_t k = 0;
    for (uint32_t id = 0; id < t->n; id++) {
        int ty = t->type[id];
        if ((ty == HM_TOKT_CONTROL || ty == HM_TOKT_USER_DEFINED || ty == HM_TOKT_UNKNOWN) &&
            t->text_len[id] > 0)
            k++;
    }
    if (!k) return HM_OK;
    /* order: longest text first, then lowest id (key = (~len, id)) */
    uint64_t *keys = malloc(k * sizeof *keys);
    t->specials = malloc(k * sizeof *t->specials);
    if (!keys || !t->specials) {
        free(keys);
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", t->source);
    }
    for (uint32_t id = 0; id < t->n; id++) {
        int ty = t->type[id];
        if ((ty == HM_TOKT_CONTROL || ty == HM_TOKT_USER_DEFINED || ty == HM_TOKT_UNKNOWN) &&
            t->text_len[id] > 0)
            keys[t->n_specials++] = ((uint64_t)(UINT32_MAX - t->text_len[id]) << 32) | id;
    }
    qsort(keys, t->n_specials, sizeof *keys, cmp_u64);
    for (uint32_t i = 0; i < t->n_specials; i++) t->specials[i] = (int32_t)(uint32_t)keys[i];
    free(keys);
    return HM_OK;
}

int32_t hm_tok_find_text(const hm_tokenizer *t, const char *text, size_t len) {
    if (t->kind != HM_TOK_BPE) {
        int32_t id = hm_tok_lookup(t, text, len);
        if (id >= 0) return id;
    }
    for (uint32_t id = 0; id < t->n; id++)
        if (t->text_len[id] == len && memcmp(t->text.p + t->text_off[id], text, len) == 0)
            return (int32_t)id;
    return HM_TOKEN_NONE;
}

static bool text_is(const hm_tokenizer *t, uint32_t id, const char *s) {
    size_t n = strlen(s);
    return t->text_len[id] == n && memcmp(t->text.p + t->text_off[id], s, n) == 0;
}

/* llama.cpp finds end-of-turn / end-of-generation tokens by their text. */
static void mark_eog(hm_tokenizer *t) {
    static const char *const eot_names[] = {
        "<|eot_id|>",         "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
        "<|end_of_text|>",    "<EOT>",      "_<EOT>",  "[EOT]",         "<｜end▁of▁sentence｜>",
        "<end_of_utterance>", NULL};
    static const char *const eog_names[] = {"<|eot_id|>",
                                            "<|im_end|>",
                                            "<|end|>",
                                            "<|return|>",
                                            "<|call|>",
                                            "<end_of_turn>",
                                            "<|endoftext|>",
                                            "<|eom_id|>",
                                            "<EOT>",
                                            "_<EOT>",
                                            "[EOT]",
                                            "[EOS]",
                                            "<|end_of_text|>",
                                            "<end_of_utterance>",
                                            "<｜end▁of▁sentence｜>",
                                            NULL};
    bool has_return = false, has_call = false;
    int32_t end_id = HM_TOKEN_NONE;
    for (uint32_t id = 0; id < t->n; id++) {
        if (t->eom == HM_TOKEN_NONE && text_is(t, id, "<|eom_id|>")) t->eom = (int32_t)id;
        for (int k = 0; eog_names[k]; k++) {
            if (text_is(t, id, eog_names[k])) {
                t->flags[id] |= HM_TF_EOG;
                if (t->type[id] != HM_TOKT_CONTROL && t->type[id] != HM_TOKT_USER_DEFINED)
                    t->type[id] = HM_TOKT_CONTROL;
            }
        }
        if (text_is(t, id, "<|return|>")) has_return = true;
        if (text_is(t, id, "<|call|>")) has_call = true;
        if (text_is(t, id, "<|end|>")) end_id = (int32_t)id;
        /* gpt-oss: these are always rendered */
        if (text_is(t, id, "<|channel|>") || text_is(t, id, "<|message|>") ||
            text_is(t, id, "<|start|>") || text_is(t, id, "<|constrain|>"))
            t->type[id] = HM_TOKT_USER_DEFINED;
    }
    for (int k = 0; eot_names[k] && t->eot == HM_TOKEN_NONE; k++) /* in priority order */
        t->eot = hm_tok_find_text(t, eot_names[k], strlen(eot_names[k]));
    if (t->eos >= 0) t->flags[t->eos] |= HM_TF_EOG;
    if (t->eot >= 0) t->flags[t->eot] |= HM_TF_EOG;
    if (t->eom >= 0) t->flags[t->eom] |= HM_TF_EOG;
    if (has_return && has_call && end_id >= 0) { /* o200k_harmony: <|end|> is not the end */
        t->flags[end_id] &= (uint8_t)~HM_TF_EOG;
        t->type[end_id] = HM_TOKT_USER_DEFINED;
        if (t->eot == end_id) t->eot = HM_TOKEN_NONE;
    }
}

/* A special id that is not a token of this vocabulary (a default such as SentencePiece's bos 1 in
 * a one-token vocabulary, or a loader bug) is dropped: every later use indexes the tables. */
static void clamp_special(const hm_tokenizer *t, const char *what, int32_t *id) {
    if (*id == HM_TOKEN_NONE || (*id >= 0 && (uint32_t)*id < t->n)) return;
    HM_WARN("%s: %s token id %d is not in the vocabulary (%u tokens): none", t->source, what, *id,
            t->n);
    *id = HM_TOKEN_NONE;
}

static bool utf8_valid(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t adv;
        uint32_t cp = hm_utf8_decode((const uint8_t *)s + i, n - i, &adv);
        if (cp == 0xFFFD && adv == 1) return false;
        i += adv;
    }
    return true;
}

/* Token texts come from the file as they are. WordPiece looks words up by every length up to
 * max_token_len, so that bound counts only texts its input can ever equal (valid UTF-8): one
 * long invalid text would otherwise make every lookup scan that far. */
static void check_texts(hm_tokenizer *t) {
    uint32_t invalid = 0, first = 0;
    t->max_token_len = 0;
    for (uint32_t id = 0; id < t->n; id++) {
        const char *s = t->text.p + t->text_off[id];
        uint32_t len = t->text_len[id];
        if (!utf8_valid(s, len)) {
            if (!invalid++) first = id;
            if (!t->raw_bytes) continue;
        }
        if (len > t->max_token_len) t->max_token_len = len;
    }
    if (invalid && !t->raw_bytes)
        HM_WARN("%s: %u token texts are not valid UTF-8 (first: id %u)", t->source, invalid, first);
}

hm_status hm_tok_finalize(hm_tokenizer *t, const char *pre) {
    clamp_special(t, "bos", &t->bos);
    clamp_special(t, "eos", &t->eos);
    clamp_special(t, "eot", &t->eot);
    clamp_special(t, "eom", &t->eom);
    clamp_special(t, "unknown", &t->unk);
    clamp_special(t, "padding", &t->pad);
    clamp_special(t, "separator", &t->sep);
    if (t->add_bos && t->bos < 0) t->add_bos = false;
    if (t->add_eos && t->eos < 0) t->add_eos = false;
    mark_eog(t);
    check_texts(t);
    hm_status st = build_pieces(t);
    if (!st) st = build_map(t);
    if (!st) st = hm_tok_build_specials(t);
    if (!st && t->kind == HM_TOK_BPE) st = hm_tok_set_pre(t, pre);
    return st;
}

void hm_tokenizer_free(hm_tokenizer *t) {
    if (!t) return;
    free(t->text_off);
    free(t->text_len);
    free(t->piece_off);
    free(t->piece_len);
    free(t->score);
    free(t->type);
    free(t->flags);
    hm_tbuf_free(&t->text);
    hm_tbuf_free(&t->piece);
    free(t->map.slots);
    free(t->merges.slots);
    free(t->specials);
    for (int i = 0; i < t->n_re; i++) pcre2_code_free((pcre2_code *)t->re[i]);
    hm_tok_norm_clear(t);
    free(t);
}

/* ---- accessors --------------------------------------------------------------------------------
 */

hm_tok_kind hm_tokenizer_kind(const hm_tokenizer *t) {
    return t->kind;
}
const char *hm_tokenizer_kind_name(const hm_tokenizer *t) {
    return t->kind == HM_TOK_BPE ? "bpe" : t->kind == HM_TOK_SPM ? "spm" : "wpm";
}
const char *hm_tokenizer_pre_name(const hm_tokenizer *t) {
    return t->pre_name;
}
uint32_t hm_tokenizer_n_vocab(const hm_tokenizer *t) {
    return t->n;
}
int32_t hm_tokenizer_bos(const hm_tokenizer *t) {
    return t->bos;
}
int32_t hm_tokenizer_eos(const hm_tokenizer *t) {
    return t->eos;
}
int32_t hm_tokenizer_eot(const hm_tokenizer *t) {
    return t->eot;
}
int32_t hm_tokenizer_unk(const hm_tokenizer *t) {
    return t->unk;
}
int32_t hm_tokenizer_pad(const hm_tokenizer *t) {
    return t->pad;
}
bool hm_tokenizer_add_bos(const hm_tokenizer *t) {
    return t->add_bos;
}
bool hm_tokenizer_add_eos(const hm_tokenizer *t) {
    return t->add_eos;
}

hm_tok_type hm_tokenizer_token_type(const hm_tokenizer *t, int32_t id) {
    if (id < 0 || (uint32_t)id >= t->n) return (hm_tok_type)0;
    return (hm_tok_type)t->type[id];
}
bool hm_tokenizer_is_control(const hm_tokenizer *t, int32_t id) {
    return hm_tokenizer_token_type(t, id) == HM_TOKT_CONTROL;
}
bool hm_tokenizer_is_special(const hm_tokenizer *t, int32_t id) {
    hm_tok_type ty = hm_tokenizer_token_type(t, id);
    return ty == HM_TOKT_CONTROL || ty == HM_TOKT_UNKNOWN || ty == HM_TOKT_USER_DEFINED;
}
bool hm_tokenizer_is_eog(const hm_tokenizer *t, int32_t id) {
    if (id < 0 || (uint32_t)id >= t->n) return false;
    return t->flags[id] & HM_TF_EOG;
}
int32_t hm_tokenizer_find(const hm_tokenizer *t, const char *text, size_t len) {
    return hm_tok_find_text(t, text, len);
}

const char *hm_tokenizer_token_text(const hm_tokenizer *t, int32_t id) {
    if (id < 0 || (uint32_t)id >= t->n) {
        hm_errorf(HM_ERR_INVALID_ARG, "%s: token id %d out of range (vocabulary of %u)", t->source,
                  id, t->n);
        return NULL;
    }
    return t->text.p + t->text_off[id];
}

const char *hm_tokenizer_piece(const hm_tokenizer *t, int32_t id, unsigned flags, size_t *len) {
    if (id < 0 || (uint32_t)id >= t->n) {
        *len = 0;
        hm_errorf(HM_ERR_INVALID_ARG, "%s: token id %d out of range (vocabulary of %u)", t->source,
                  id, t->n);
        return NULL;
    }
    int ty = t->type[id];
    if (!(flags & HM_DETOK_SPECIAL) && (ty == HM_TOKT_CONTROL || ty == HM_TOKT_UNKNOWN)) {
        *len = 0;
        return "";
    }
    *len = t->piece_len[id];
    return t->piece.p + t->piece_off[id];
}

/* The piece of the token at position pos of a sequence (dummy-prefix rule applied). */
static const char *seq_piece(const hm_tokenizer *t, int32_t id, unsigned flags, bool first,
                             size_t *len) {
    const char *p = hm_tokenizer_piece(t, id, flags, len);
    if (p && first && (flags & HM_DETOK_STRIP_SPACE) && t->add_space_prefix && *len &&
        p[0] == ' ') {
        p++;
        (*len)--;
    }
    return p;
}

hm_status hm_tokenizer_decode(const hm_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                              char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    hm_tbuf b = {0};
    hm_status st = hm_tbuf_put(&b, "", 0);
    for (size_t i = 0; i < n && !st; i++) {
        size_t pl;
        const char *p = seq_piece(t, ids[i], flags, i == 0, &pl);
        if (!p) {
            st = hm_errorf(HM_ERR_INVALID_ARG,
                           "%s: token id %d (position %zu) out of range (vocabulary of %u)",
                           t->source, ids[i], i, t->n);
            break;
        }
        st = hm_tbuf_put(&b, p, pl);
    }
    if (st) {
        hm_tbuf_free(&b);
        return st;
    }
    *text = b.p;
    *len = b.n;
    return HM_OK;
}

/* ---- incremental decoder ----------------------------------------------------------------------
 */

struct hm_detok {
    const hm_tokenizer *tok;
    unsigned flags;
    bool started;
    uint8_t held[4];
    size_t n_held;
    hm_tbuf out;
};

hm_status hm_detok_new(const hm_tokenizer *tok, unsigned flags, hm_detok **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return hm_errorf(HM_ERR_NO_MEMORY, "tokenizer: out of memory for a decoder");
    (*out)->tok = tok;
    (*out)->flags = flags;
    return HM_OK;
}

void hm_detok_free(hm_detok *d) {
    if (!d) return;
    hm_tbuf_free(&d->out);
    free(d);
}

/* Expected length of a sequence starting with c; 0 when c cannot start one. */
static size_t lead_len(uint8_t c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* Whether byte c may follow the prefix held[0..k) of a well-formed sequence. */
static bool cont_ok(const uint8_t *held, size_t k, uint8_t c) {
    if ((c & 0xC0) != 0x80) return false;
    if (k == 1) {
        uint8_t l = held[0];
        if (l == 0xE0 && c < 0xA0) return false;
        if (l == 0xED && c > 0x9F) return false;
        if (l == 0xF0 && c < 0x90) return false;
        if (l == 0xF4 && c > 0x8F) return false;
    }
    return true;
}

static hm_status emit_invalid(hm_detok *d, const uint8_t *p, size_t n) {
    if (!(d->flags & HM_DETOK_REPLACE_INVALID)) return hm_tbuf_put(&d->out, p, n);
    for (size_t i = 0; i < n; i++) {
        hm_status st = hm_tbuf_put(&d->out, "\xEF\xBF\xBD", 3);
        if (st) return st;
    }
    return HM_OK;
}

/* Feeds one byte through the UTF-8 hold-back state machine. */
static hm_status feed_byte(hm_detok *d, uint8_t c) {
    if (d->n_held) {
        if (cont_ok(d->held, d->n_held, c)) {
            d->held[d->n_held++] = c;
            if (d->n_held == lead_len(d->held[0])) {
                hm_status st = hm_tbuf_put(&d->out, d->held, d->n_held);
                d->n_held = 0;
                return st;
            }
            return HM_OK;
        }
        hm_status st = emit_invalid(d, d->held, d->n_held); /* broken: release as is */
        d->n_held = 0;
        if (st) return st;
    }
    size_t need = lead_len(c);
    if (need == 1) return hm_tbuf_put(&d->out, &c, 1);
    if (need == 0) return emit_invalid(d, &c, 1);
    d->held[0] = c;
    d->n_held = 1;
    return HM_OK;
}

hm_status hm_detok_push(hm_detok *d, int32_t id, const char **text, size_t *len) {
    d->out.n = 0;
    *text = "";
    *len = 0;
    size_t pl;
    const char *p = seq_piece(d->tok, id, d->flags, !d->started, &pl);
    if (!p)
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: token id %d out of range (vocabulary of %u)",
                         d->tok->source, id, d->tok->n);
    d->started = true;
    for (size_t i = 0; i < pl; i++) {
        hm_status st = feed_byte(d, (uint8_t)p[i]);
        if (st) return st;
    }
    *text = d->out.p ? d->out.p : "";
    *len = d->out.n;
    return HM_OK;
}

void hm_detok_flush(hm_detok *d, const char **text, size_t *len) {
    d->out.n = 0;
    if (d->n_held && emit_invalid(d, d->held, d->n_held) != HM_OK) d->out.n = 0;
    d->n_held = 0;
    d->started = false;
    *text = d->out.p ? d->out.p : "";
    *len = d->out.n;
}

/* ---- merges -----------------------------------------------------------------------------------
 */

static int32_t key_of_text(hm_tokenizer *t, const char *s, size_t n, hm_tbuf *tmp) {
    if (t->raw_bytes || t->kind != HM_TOK_BPE) return hm_tok_lookup(t, s, n);
    if (!hm_tok_gpt2_decode(s, n, tmp)) return hm_tok_lookup(t, s, n);
    return hm_tok_lookup(t, tmp->p ? tmp->p : "", tmp->n);
}

hm_status hm_tok_add_merge(hm_tokenizer *t, const char *left, size_t llen, const char *right,
                           size_t rlen, int32_t rank) {
    hm_tbuf tmp = {0};
    int32_t l = key_of_text(t, left, llen, &tmp);
    int32_t r = key_of_text(t, right, rlen, &tmp);
    int32_t m = HM_TOKEN_NONE;
    if (l >= 0 && r >= 0) {
        /* the merged token: the two keys side by side */
        size_t a = t->key_len[l], b = t->key_len[r];
        char small[256];
        char *buf = a + b <= sizeof small ? small : malloc(a + b);
        if (!buf) {
            hm_tbuf_free(&tmp);
            return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", t->source);
        }
        memcpy(buf, t->key_buf->p + t->key_off[l], a);
        memcpy(buf + a, t->key_buf->p + t->key_off[r], b);
        m = hm_tok_lookup(t, buf, a + b);
        if (buf != small) free(buf);
    }
    hm_tbuf_free(&tmp);
    if (l < 0 || r < 0 || m < 0)
        return hm_errorf(HM_ERR_NOT_FOUND, "%s: merge %d '%.*s %.*s': %s is not a token", t->source,
                         rank, (int)(llen > 64 ? 64 : llen), left, (int)(rlen > 64 ? 64 : rlen),
                         right,
                         l < 0   ? "the left side"
                         : r < 0 ? "the right side"
                                 : "the result");
    if (!t->merges.slots || t->merges.count * 2 + 2 > t->merges.mask) {
        /* grow: re-insert */
        hm_pairmap old = t->merges;
        t->merges.slots = NULL;
        hm_status st = hm_tok_merges_reserve(t, old.count * 2 + 64);
        if (st) {
            t->merges = old;
            return st;
        }
        if (old.slots) {
            for (uint64_t i = 0; i <= old.mask; i++) {
                if (old.slots[i].key == UINT64_MAX) continue;
                uint64_t j = hash_u64(old.slots[i].key) & t->merges.mask;
                while (t->merges.slots[j].key != UINT64_MAX) j = (j + 1) & t->merges.mask;
                t->merges.slots[j] = old.slots[i];
                t->merges.count++;
            }
        }
        free(old.slots);
    }
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    uint64_t j = hash_u64(key) & t->merges.mask;
    while (t->merges.slots[j].key != UINT64_MAX) {
        if (t->merges.slots[j].key == key) return HM_OK; /* first rank wins */
        j = (j + 1) & t->merges.mask;
    }
    t->merges.slots[j] = (hm_pair_slot){key, rank, m};
    t->merges.count++;
    t->bpe_mode = HM_BPE_MERGES;
    return HM_OK;
}
