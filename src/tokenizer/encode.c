/* encode.c - text -> ids: special-token partition, pre-tokenizer split, byte-level BPE merges
 * (priority queue over adjacent pairs, O(n log n) per word), SentencePiece score merges with
 * byte fallback, and WordPiece longest-match. Scratch lives in a per-call context, so one
 * tokenizer serves any number of threads. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/tok_int.h"

bool hm_tok_pair_find(const hm_tokenizer *t, int32_t l, int32_t r, int32_t *rank, int32_t *merged);

typedef struct sym {
    uint32_t start, len;
    int32_t id;
    int32_t prev, next;
} sym;

typedef struct cand {
    uint64_t key; /* smaller first */
    int32_t left, right;
    uint32_t size;
    int32_t merged;
} cand;

typedef struct frag {
    size_t off, len;
    int32_t token; /* HM_TOKEN_NONE for raw text */
} frag;

typedef struct span {
    size_t off, len;
} span;

typedef struct enc {
    const hm_tokenizer *t;
    int32_t *out;
    size_t n_out, cap_out;
    sym *syms;
    size_t cap_syms;
    cand *heap;
    size_t n_heap, cap_heap;
    frag *frags;
    size_t n_frags, cap_frags;
    span *spans[2];
    size_t n_spans[2], cap_spans[2];
    pcre2_match_data *md[HM_TOK_MAX_REGEX];
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    hm_tbuf scratch;
    hm_tbuf norm[2]; /* normalizer output */
    /* word -> ids cache for this call (natural text repeats its words); enabled after a few
     * hundred words so that short prompts do not pay for it */
    struct wc_slot {
        uint64_t hash;
        uint32_t word_off, ids_off;
        uint16_t word_len, n_ids;
    } * wc;
    uint32_t wc_mask, wc_used;
    hm_tbuf wc_words;
    int32_t *wc_ids;
    size_t n_wc_ids, cap_wc_ids;
    size_t n_words;
    hm_status st;
} enc;

#define WC_SLOTS    (1u << 14)
#define WC_MAX_WORD 32
#define WC_AFTER    256

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static void fail_oom(enc *e) {
    if (!e->st)
        e->st = hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory while encoding", e->t->source);
}

static void push_id(enc *e, int32_t id) {
    if (id < 0) return;
    if (!grow((void **)&e->out, &e->cap_out, e->n_out + 1, sizeof *e->out)) {
        fail_oom(e);
        return;
    }
    e->out[e->n_out++] = id;
}

/* ---- priority queue of merge candidates ------------------------------------------------------ */

static inline bool cand_less(const cand *a, const cand *b) {
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

static void heap_push(enc *e, cand c) {
    if (!grow((void **)&e->heap, &e->cap_heap, e->n_heap + 1, sizeof *e->heap)) {
        fail_oom(e);
        return;
    }
    size_t i = e->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &e->heap[p])) break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = c;
}

static cand heap_pop(enc *e) {
    cand top = e->heap[0];
    cand last = e->heap[--e->n_heap];
    size_t i = 0, n = e->n_heap;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= n) break;
        size_t m = l + 1 < n && cand_less(&e->heap[l + 1], &e->heap[l]) ? l + 1 : l;
        if (!cand_less(&e->heap[m], &last)) break;
        e->heap[i] = e->heap[m];
        i = m;
    }
    if (n) e->heap[i] = last;
    return top;
}

/* Merges the linked symbols syms[0..ns) best candidate first: try_pair queues the merge of two
 * neighbours (BPE by merge rank, SentencePiece by score); stale candidates (a side already merged
 * away) are skipped when popped. */
typedef void (*try_pair_fn)(enc *e, const char *w, int32_t l, int32_t r);
static void merge_symbols(enc *e, const char *w, size_t ns, try_pair_fn try_pair) {
    e->n_heap = 0;
    for (size_t i = 1; i < ns; i++) try_pair(e, w, (int32_t)i - 1, (int32_t)i);
    while (e->n_heap) {
        cand c = heap_pop(e);
        sym *a = &e->syms[c.left], *b = &e->syms[c.right];
        if (!a->len || !b->len || a->next != c.right || a->len + b->len != c.size) continue;
        a->len += b->len;
        a->id = c.merged;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0) e->syms[b->next].prev = c.left;
        try_pair(e, w, a->prev, c.left);
        try_pair(e, w, c.left, a->next);
    }
}

/* ---- byte-level BPE ---------------------------------------------------------------------------
 */

static void bpe_try_pair(enc *e, const char *w, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const sym *a = &e->syms[l], *b = &e->syms[r];
    int32_t rank, merged;
    if (e->t->bpe_mode == HM_BPE_MERGES) {
        if (!hm_tok_pair_find(e->t, a->id, b->id, &rank, &merged)) return;
    } else {
        merged = hm_tok_lookup(e->t, w + a->start, a->len + b->len);
        if (merged < 0) return;
        rank = merged;
    }
    cand c = {(uint64_t)(uint32_t)rank, l, r, a->len + b->len, merged};
    heap_push(e, c);
}

static void bpe_word_uncached(enc *e, const char *w, size_t n) {
    const hm_tokenizer *t = e->t;
    if (n == 0) return;
    if (n == 1) {
        push_id(e, t->byte_id[(uint8_t)w[0]]);
        return;
    }
    if (t->ignore_merges || t->bpe_mode == HM_BPE_RANKS) {
        /* llama3 (ignore_merges) and tiktoken: a word that is a token is taken whole */
        int32_t id = hm_tok_lookup(t, w, n);
        if (id >= 0) {
            push_id(e, id);
            return;
        }
    }
    if (t->bpe_mode == HM_BPE_MERGES && t->merges.count == 0) { /* nothing merges: the bytes */
        if (!grow((void **)&e->out, &e->cap_out, e->n_out + n, sizeof *e->out)) {
            fail_oom(e);
            return;
        }
        for (size_t i = 0; i < n; i++) push_id(e, t->byte_id[(uint8_t)w[i]]);
        return;
    }
    if (n > UINT32_MAX / 2 || !grow((void **)&e->syms, &e->cap_syms, n, sizeof *e->syms)) {
        fail_oom(e);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        e->syms[i] = (sym){(uint32_t)i, 1, t->byte_id[(uint8_t)w[i]], (int32_t)i - 1,
                           i + 1 < n ? (int32_t)i + 1 : -1};
    }
    merge_symbols(e, w, n, bpe_try_pair);
    for (int32_t i = 0; i >= 0; i = e->syms[i].next) {
        const sym *s = &e->syms[i];
        if (s->id >= 0) {
            push_id(e, s->id);
        } else {
            for (uint32_t k = 0; k < s->len; k++) push_id(e, t->byte_id[(uint8_t)w[s->start + k]]);
        }
    }
}

static void bpe_word(enc *e, const char *w, size_t n) {
    if (n < 2 || n > WC_MAX_WORD) {
        bpe_word_uncached(e, w, n);
        return;
    }
    if (!e->wc && ++e->n_words > WC_AFTER) {
        e->wc = calloc(WC_SLOTS, sizeof *e->wc);
        e->wc_mask = WC_SLOTS - 1;
    }
    if (!e->wc) {
        bpe_word_uncached(e, w, n);
        return;
    }
    uint64_t h = hm_tok_hash(w, n) | 1; /* 0 marks an empty slot */
    uint32_t i = (uint32_t)h & e->wc_mask;
    for (;;) {
        struct wc_slot *s = &e->wc[i];
        if (!s->hash) break;
        if (s->hash == h && s->word_len == n && !memcmp(e->wc_words.p + s->word_off, w, n)) {
            if (!grow((void **)&e->out, &e->cap_out, e->n_out + s->n_ids, sizeof *e->out)) {
                fail_oom(e);
                return;
            }
            memcpy(e->out + e->n_out, e->wc_ids + s->ids_off, s->n_ids * sizeof *e->out);
            e->n_out += s->n_ids;
            return;
        }
        i = (i + 1) & e->wc_mask;
    }
    size_t before = e->n_out;
    bpe_word_uncached(e, w, n);
    size_t k = e->n_out - before;
    if (e->st || k == 0 || e->wc_used * 2 > WC_SLOTS || e->wc_words.n > UINT32_MAX / 2) return;
    if (!grow((void **)&e->wc_ids, &e->cap_wc_ids, e->n_wc_ids + k, sizeof *e->wc_ids) ||
        hm_tbuf_put(&e->wc_words, w, n) != HM_OK)
        return; /* the cache is an optimisation: no memory, no caching */
    memcpy(e->wc_ids + e->n_wc_ids, e->out + before, k * sizeof *e->wc_ids);
    e->wc[i] = (struct wc_slot){h, (uint32_t)(e->wc_words.n - n), (uint32_t)e->n_wc_ids,
                                (uint16_t)n, (uint16_t)k};
    e->n_wc_ids += k;
    e->wc_used++;
}

static bool span_push(enc *e, int which, size_t off, size_t len) {
    if (!len) return true;
    if (!grow((void **)&e->spans[which], &e->cap_spans[which], e->n_spans[which] + 1,
              sizeof(span))) {
        fail_oom(e);
        return false;
    }
    e->spans[which][e->n_spans[which]++] = (span){off, len};
    return true;
}

/* PCRE2's default match limit (10M steps per call) fails on a few MB of consecutive whitespace:
 * `\s*[\r\n]+` walks a whole whitespace run before it gives up, so one call needs steps in
 * proportion to the run it starts in. The table regexes are linear in that run, so a limit that
 * grows with the text keeps any text tokenizable and still stops a runaway match. */
#define MATCH_STEPS_PER_BYTE 64
#define MATCH_LIMIT_MIN      10000000u

static uint32_t match_limit_for(size_t len) {
    if (len >= UINT32_MAX / MATCH_STEPS_PER_BYTE) return UINT32_MAX;
    uint32_t l = (uint32_t)len * MATCH_STEPS_PER_BYTE;
    return l < MATCH_LIMIT_MIN ? MATCH_LIMIT_MIN : l;
}

/* Runs regex ri over s[0..n) from start. */
static int regex_match(enc *e, int ri, const char *s, size_t n, size_t start) {
    pcre2_code *re = (pcre2_code *)e->t->re[ri];
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, start, 0, e->md[ri], e->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !e->jit) {
        e->jit = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
        if (!e->jit) return PCRE2_ERROR_NOMEMORY;
        pcre2_jit_stack_assign(e->mctx, NULL, e->jit);
        rc = pcre2_match(re, (PCRE2_SPTR)s, n, start, 0, e->md[ri], e->mctx);
    }
    return rc;
}

/* Splits s[0..n) with regex ri; pieces go to spans[which] (offsets relative to base). */
static void regex_split(enc *e, int ri, const char *s, size_t n, size_t base, int which,
                        bool direct) {
    size_t pos = 0, gap = 0;
    while (pos < n && !e->st) {
        int rc = regex_match(e, ri, s, n, pos);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            if (pcre2_get_error_message(rc, msg, sizeof msg) < 0) msg[0] = 0;
            e->st = hm_errorf(rc == PCRE2_ERROR_NOMEMORY ? HM_ERR_NO_MEMORY : HM_ERR_INTERNAL,
                              "%s: pre-tokenizer '%s' regex %d failed at byte %zu of a %zu-byte "
                              "piece: %s (%d)",
                              e->t->source, e->t->pre_name, ri, pos, n, (const char *)msg, rc);
            return;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md[ri]);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: step over one character */
            pos = ms + hm_utf8_len((uint8_t)s[ms]);
            if (pos > n) pos = n;
            continue;
        }
        if (direct) {
            if (ms > gap) bpe_word(e, s + gap, ms - gap);
            bpe_word(e, s + ms, me - ms);
        } else {
            if (ms > gap && !span_push(e, which, base + gap, ms - gap)) return;
            if (!span_push(e, which, base + ms, me - ms)) return;
        }
        gap = pos = me;
    }
    if (n > gap) {
        if (direct)
            bpe_word(e, s + gap, n - gap);
        else
            span_push(e, which, base + gap, n - gap);
    }
}

static void bpe_text(enc *e, const char *s, size_t n) {
    const hm_tokenizer *t = e->t;
    if (e->mctx) pcre2_set_match_limit(e->mctx, match_limit_for(n));
    if (t->n_re == 0) {
        bpe_word(e, s, n);
        return;
    }
    if (t->n_re == 1) {
        regex_split(e, 0, s, n, 0, 0, true);
        return;
    }
    e->n_spans[0] = 0;
    span_push(e, 0, 0, n);
    int cur = 0;
    for (int ri = 0; ri < t->n_re && !e->st; ri++) {
        int nxt = cur ^ 1;
        e->n_spans[nxt] = 0;
        for (size_t k = 0; k < e->n_spans[cur] && !e->st; k++) {
            span sp = e->spans[cur][k];
            regex_split(e, ri, s + sp.off, sp.len, sp.off, nxt, false);
        }
        cur = nxt;
    }
    for (size_t k = 0; k < e->n_spans[cur] && !e->st; k++)
        bpe_word(e, s + e->spans[cur][k].off, e->spans[cur][k].len);
}

/* ---- SentencePiece BPE ------------------------------------------------------------------------
 */

/* float -> unsigned key, ascending with the float (total order without NaN) */
static inline uint32_t float_key(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static void spm_try_pair(enc *e, const char *w, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const sym *a = &e->syms[l], *b = &e->syms[r];
    int32_t id = hm_tok_lookup(e->t, w + a->start, a->len + b->len);
    if (id < 0 || !(e->t->flags[id] & HM_TF_MERGEABLE)) return;
    /* highest score first: invert the ascending key */
    cand c = {(uint64_t)(UINT32_MAX - float_key(e->t->score[id])), l, r, a->len + b->len, id};
    heap_push(e, c);
}

static void spm_emit_bytes(enc *e, const char *p, size_t n) {
    for (size_t k = 0; k < n; k++) {
        int32_t b = e->t->byte_id[(uint8_t)p[k]];
        push_id(e, b >= 0 ? b : e->t->unk);
    }
}

/* Tokenizes the escaped text w[0..n) ("▁" for spaces). */
static void spm_word(enc *e, const char *w, size_t n) {
    const hm_tokenizer *t = e->t;
    if (!n) return;
    if (!grow((void **)&e->syms, &e->cap_syms, n, sizeof *e->syms)) {
        fail_oom(e);
        return;
    }
    size_t ns = 0;
    for (size_t off = 0; off < n;) {
        size_t len = hm_utf8_len((uint8_t)w[off]);
        if (len > n - off) len = n - off;
        e->syms[ns] = (sym){(uint32_t)off, (uint32_t)len, HM_TOKEN_NONE, (int32_t)ns - 1, -1};
        if (ns) e->syms[ns - 1].next = (int32_t)ns;
        ns++;
        off += len;
    }
    merge_symbols(e, w, ns, spm_try_pair);
    for (int32_t i = 0; i >= 0; i = e->syms[i].next) {
        const sym *s = &e->syms[i];
        int32_t id = s->id >= 0 ? s->id : hm_tok_lookup(t, w + s->start, s->len);
        if (id >= 0 && (t->flags[id] & HM_TF_MERGEABLE))
            push_id(e, id);
        else
            spm_emit_bytes(e, w + s->start, s->len);
    }
}

static void spm_text(enc *e, const char *s, size_t n, bool prefix) {
    hm_tbuf *b = &e->scratch;
    b->n = 0;
    static const char LOWER[] = "\xE2\x96\x81";
    hm_status st = HM_OK;
    if (prefix) st = hm_tbuf_put(b, e->t->escape_ws ? LOWER : " ", e->t->escape_ws ? 3 : 1);
    size_t run = 0;
    for (size_t i = 0; i < n && !st; i++) {
        if (s[i] == ' ' && e->t->escape_ws) {
            if (i > run) st = hm_tbuf_put(b, s + run, i - run);
            if (!st) st = hm_tbuf_put(b, LOWER, 3);
            run = i + 1;
        }
    }
    if (!st && n > run) st = hm_tbuf_put(b, s + run, n - run);
    if (st) {
        e->st = st;
        return;
    }
    spm_word(e, b->p, b->n);
}

/* ---- WordPiece --------------------------------------------------------------------------------
 */

static bool is_chinese(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Hugging Face WordPiece's max_input_chars_per_word: a longer word is the unknown token. It also
 * bounds the longest-match search below to O(word * max_token_len). */
#define WPM_MAX_WORD_CHARS 100

static void wpm_word(enc *e, const char *w, size_t n) {
    const hm_tokenizer *t = e->t;
    size_t before = e->n_out;
    size_t chars = 0;
    for (size_t i = 3; i < n; i++) chars += ((uint8_t)w[i] & 0xC0) != 0x80; /* after the "▁" */
    if (chars > WPM_MAX_WORD_CHARS) {
        push_id(e, t->unk);
        return;
    }
    for (size_t i = 0; i < n;) {
        size_t j = n < i + t->max_token_len ? n : i + t->max_token_len;
        int32_t id = HM_TOKEN_NONE;
        for (; j > i; j--) {
            id = hm_tok_lookup(t, w + i, j - i);
            if (id >= 0) break;
        }
        if (id < 0) {
            e->n_out = before;
            break;
        }
        push_id(e, id);
        i = j;
    }
    if (e->n_out == before) push_id(e, t->unk);
}

static void wpm_text(enc *e, const char *s, size_t n) {
    const hm_tokenizer *t = e->t;
    hm_tbuf *w = &e->scratch;
    static const char LOWER[] = "\xE2\x96\x81";
    w->n = 0;
    hm_status st = hm_tbuf_put(w, LOWER, 3);
    for (size_t i = 0; i < n && !st;) {
        size_t adv;
        uint32_t cp = hm_utf8_decode((const uint8_t *)s + i, n - i, &adv);
        i += adv;
        if (hm_uni_is_whitespace(cp)) {
            if (w->n > 3) wpm_word(e, w->p, w->n);
            w->n = 3;
            continue;
        }
        if (cp == 0 || cp == 0xFFFD || hm_uni_is_control(cp)) continue;
        uint32_t cps[4];
        size_t k = 1;
        cps[0] = cp;
        if (t->strip_accents) {
            if (hm_uni_is_mark(cp)) continue;
            k = hm_uni_strip_accents(cp, cps);
        }
        for (size_t q = 0; q < k && !st; q++) {
            uint32_t c = t->lowercase ? hm_uni_tolower(cps[q]) : cps[q];
            char u[4];
            size_t ul = hm_utf8_encode(c, u);
            if (hm_uni_is_punct(c) || (c < 0x7F && hm_uni_is_symbol(c)) || is_chinese(c)) {
                if (w->n > 3) wpm_word(e, w->p, w->n);
                w->n = 3;
                st = hm_tbuf_put(w, u, ul);
                if (!st) wpm_word(e, w->p, w->n);
                w->n = 3;
            } else {
                st = hm_tbuf_put(w, u, ul);
            }
        }
    }
    if (!st && w->n > 3) wpm_word(e, w->p, w->n);
    if (st) e->st = st;
}

/* ---- special tokens ---------------------------------------------------------------------------
 */

static bool frag_push(enc *e, frag *list, size_t *n, size_t *cap, frag f) {
    (void)list;
    if (!grow((void **)&e->frags, cap, *n + 1, sizeof(frag))) {
        fail_oom(e);
        return false;
    }
    e->frags[(*n)++] = f;
    return true;
}

/* Splits the text on special-token texts, longest token first over the whole text (llama.cpp's
 * tokenizer_st_partition). Result: e->frags. */
static void partition(enc *e, const char *text, size_t len, bool parse_special) {
    const hm_tokenizer *t = e->t;
    e->n_frags = 0;
    if (!len) return;
    frag first = {0, len, HM_TOKEN_NONE};
    if (!frag_push(e, e->frags, &e->n_frags, &e->cap_frags, first)) return;
    frag *tmp = NULL;
    size_t cap_tmp = 0;
    for (uint32_t k = 0; k < t->n_specials && !e->st; k++) {
        int32_t id = t->specials[k];
        int ty = t->type[id];
        if (!parse_special && (ty == HM_TOKT_CONTROL || ty == HM_TOKT_UNKNOWN)) continue;
        const char *st = t->text.p + t->text_off[id];
        size_t sl = t->text_len[id];
        if (sl > len || !memmem(text, len, st, sl)) continue;
        /* rebuild the list into tmp */
        size_t n_tmp = 0;
        bool ok = true;
        for (size_t f = 0; f < e->n_frags && ok; f++) {
            frag fr = e->frags[f];
            if (fr.token != HM_TOKEN_NONE) {
                ok = grow((void **)&tmp, &cap_tmp, n_tmp + 1, sizeof *tmp);
                if (ok) tmp[n_tmp++] = fr;
                continue;
            }
            size_t off = fr.off, end = fr.off + fr.len;
            while (ok && off < end) {
                const char *m = memmem(text + off, end - off, st, sl);
                if (!m) {
                    ok = grow((void **)&tmp, &cap_tmp, n_tmp + 1, sizeof *tmp);
                    if (ok) tmp[n_tmp++] = (frag){off, end - off, HM_TOKEN_NONE};
                    break;
                }
                size_t mo = (size_t)(m - text);
                size_t left_end = mo;
                if (t->flags[id] & HM_TF_LSTRIP)
                    while (left_end > off && isspace((uint8_t)text[left_end - 1])) left_end--;
                ok = grow((void **)&tmp, &cap_tmp, n_tmp + 2, sizeof *tmp);
                if (!ok) break;
                if (left_end > off) tmp[n_tmp++] = (frag){off, left_end - off, HM_TOKEN_NONE};
                tmp[n_tmp++] = (frag){mo, sl, id};
                off = mo + sl;
                if (t->flags[id] & HM_TF_RSTRIP)
                    while (off < end && isspace((uint8_t)text[off])) off++;
            }
        }
        if (!ok) {
            fail_oom(e);
            break;
        }
        if (!grow((void **)&e->frags, &e->cap_frags, n_tmp, sizeof *e->frags)) {
            fail_oom(e);
            break;
        }
        memcpy(e->frags, tmp, n_tmp * sizeof *tmp);
        e->n_frags = n_tmp;
    }
    free(tmp);
}

/* ---- entry points -----------------------------------------------------------------------------
 */

static void enc_free(enc *e) {
    free(e->out);
    free(e->syms);
    free(e->heap);
    free(e->frags);
    free(e->spans[0]);
    free(e->spans[1]);
    for (int i = 0; i < HM_TOK_MAX_REGEX; i++)
        if (e->md[i]) pcre2_match_data_free(e->md[i]);
    if (e->mctx) pcre2_match_context_free(e->mctx);
    if (e->jit) pcre2_jit_stack_free(e->jit);
    hm_tbuf_free(&e->scratch);
    hm_tbuf_free(&e->norm[0]);
    hm_tbuf_free(&e->norm[1]);
    free(e->wc);
    free(e->wc_ids);
    hm_tbuf_free(&e->wc_words);
}

/* The normalized text of a fragment (the fragment itself without a normalizer). */
static bool normalize(enc *e, const char *s, size_t n, const char **res, size_t *res_len) {
    hm_status st = hm_tok_normalize(e->t, s, n, e->norm, res, res_len);
    if (st && !e->st) e->st = st;
    return !st;
}

static hm_status run(enc *e, const char *text, size_t len, unsigned flags) {
    const hm_tokenizer *t = e->t;
    for (int i = 0; i < t->n_re; i++) {
        e->md[i] = pcre2_match_data_create_from_pattern((pcre2_code *)t->re[i], NULL);
        if (!e->md[i]) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", t->source);
    }
    if (t->n_re) {
        e->mctx = pcre2_match_context_create(NULL);
        if (!e->mctx) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", t->source);
    }
    bool add = flags & HM_TOK_ADD_SPECIAL;
    partition(e, text, len, flags & HM_TOK_PARSE_SPECIAL);
    if (e->st) return e->st;
    if (t->kind == HM_TOK_SPM) {
        bool prev_special = true; /* the dummy prefix goes on the first text and after specials */
        if (add && t->add_bos) push_id(e, t->bos);
        for (size_t f = 0; f < e->n_frags && !e->st; f++) {
            frag fr = e->frags[f];
            if (fr.token != HM_TOKEN_NONE) {
                push_id(e, fr.token);
                prev_special = true;
            } else {
                const char *s;
                size_t n;
                if (!normalize(e, text + fr.off, fr.len, &s, &n)) break;
                spm_text(e, s, n, t->add_space_prefix && prev_special);
                prev_special = false;
            }
        }
        if (add && t->add_eos) push_id(e, t->eos);
    } else if (t->kind == HM_TOK_WPM) {
        if (add) push_id(e, t->bos);
        for (size_t f = 0; f < e->n_frags && !e->st; f++) {
            frag fr = e->frags[f];
            if (fr.token != HM_TOKEN_NONE)
                push_id(e, fr.token);
            else
                wpm_text(e, text + fr.off, fr.len);
        }
        if (add) push_id(e, t->sep);
    } else {
        if (add && t->add_bos) push_id(e, t->bos);
        for (size_t f = 0; f < e->n_frags && !e->st; f++) {
            frag fr = e->frags[f];
            const char *s;
            size_t n;
            if (fr.token != HM_TOKEN_NONE)
                push_id(e, fr.token);
            else if (normalize(e, text + fr.off, fr.len, &s, &n))
                bpe_text(e, s, n);
        }
        if (add && t->add_eos) push_id(e, t->eos);
    }
    return e->st;
}

hm_status hm_tokenizer_encode_alloc(const hm_tokenizer *tok, const char *text, size_t len,
                                    unsigned flags, int32_t **ids, size_t *n_out) {
    *ids = NULL;
    *n_out = 0;
    if (!tok || (!text && len)) return hm_errorf(HM_ERR_INVALID_ARG, "tokenizer: NULL argument");
    enc e = {.t = tok};
    hm_status st = run(&e, text, len, flags);
    if (!st) {
        *ids = e.out;
        *n_out = e.n_out;
        e.out = NULL;
        if (!*n_out) {
            free(*ids);
            *ids = NULL;
        }
    }
    enc_free(&e);
    return st;
}

hm_status hm_tokenizer_encode(const hm_tokenizer *tok, const char *text, size_t len, unsigned flags,
                              int32_t *ids, size_t cap, size_t *n_out) {
    int32_t *all;
    size_t n;
    hm_status st = hm_tokenizer_encode_alloc(tok, text, len, flags, &all, &n);
    *n_out = n;
    if (st) return st;
    if (n) memcpy(ids, all, (n < cap ? n : cap) * sizeof *ids);
    free(all);
    return HM_OK;
}
