/* normalize.c - the text normalizers of Hugging Face tokenizer.json (NFC, NFD, NFKC, NFKD,
 * Lowercase, Strip, Prepend, Replace, Sequence), applied to each text fragment before
 * pre-tokenization. Unicode tables: norm_data.h (gen_norm.py). Bytes that are not valid UTF-8 pass
 * through unchanged and block composition, so encoding stays byte-exact for any input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/norm_data.h"
#include "tokenizer/tok_int.h"

/* A byte that is not part of valid UTF-8, carried through the code point buffers. */
#define RAW_BYTE 0x110000u

enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7 };
enum { L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = 11172 };

/* ---- code point buffer ------------------------------------------------------------------------
 */

typedef struct cpbuf {
    uint32_t *p;
    size_t n, cap;
} cpbuf;

static bool cp_reserve(cpbuf *b, size_t more) {
    if (b->n + more <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + more) cap *= 2;
    uint32_t *q = realloc(b->p, cap * sizeof *q);
    if (!q) return false;
    b->p = q;
    b->cap = cap;
    return true;
}

/* ---- table lookups ----------------------------------------------------------------------------
 */

static unsigned ccc_of(uint32_t cp) {
    if (cp < 0x300 || cp >= RAW_BYTE) return 0;
    size_t lo = 0, hi = sizeof NORM_CCC / sizeof NORM_CCC[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t c = NORM_CCC[mid] >> 8;
        if (c == cp) return NORM_CCC[mid] & 0xFF;
        if (c < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

static const uint32_t *decomp_of(const uint32_t (*tab)[3], size_t n, uint32_t cp, size_t *len) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tab[mid][0] == cp) {
            *len = tab[mid][2];
            return NORM_POOL + tab[mid][1];
        }
        if (tab[mid][0] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The primary composite of a + b, or 0. */
static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE &&
        b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    size_t lo = 0, hi = sizeof NORM_COMPOSE / sizeof NORM_COMPOSE[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uint32_t *e = NORM_COMPOSE[mid];
        if (e[0] == a && e[1] == b) return e[2];
        if (e[0] < a || (e[0] == a && e[1] < b))
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

/* ---- NFD / NFKD / NFC / NFKC ------------------------------------------------------------------
 */

static bool decompose(cpbuf *b, uint32_t cp, bool compat) {
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        uint32_t s = cp - S_BASE;
        if (!cp_reserve(b, 3)) return false;
        b->p[b->n++] = L_BASE + s / N_COUNT;
        b->p[b->n++] = V_BASE + (s % N_COUNT) / T_COUNT;
        if (s % T_COUNT) b->p[b->n++] = T_BASE + s % T_COUNT;
        return true;
    }
    size_t len = 0;
    const uint32_t *d = NULL;
    if (cp >= 0xA0 && cp < RAW_BYTE)
        d = compat ? decomp_of(NORM_COMPAT, sizeof NORM_COMPAT / sizeof NORM_COMPAT[0], cp, &len)
                   : decomp_of(NORM_CANON, sizeof NORM_CANON / sizeof NORM_CANON[0], cp, &len);
    if (!d) d = &cp, len = 1;
    if (!cp_reserve(b, len)) return false;
    memcpy(b->p + b->n, d, len * sizeof *d);
    b->n += len;
    return true;
}

/* Canonical ordering: each run of non-starters sorted by class, stable. */
static void reorder(uint32_t *p, size_t n) {
    for (size_t i = 1; i < n; i++) {
        unsigned c = ccc_of(p[i]);
        if (!c) continue;
        uint32_t x = p[i];
        size_t j = i;
        while (j > 0 && ccc_of(p[j - 1]) > c) {
            p[j] = p[j - 1];
            j--;
        }
        p[j] = x;
    }
}

/* Canonical composition in place; returns the new length. */
static size_t compose(uint32_t *p, size_t n) {
    size_t out = 0;
    long starter = -1;
    unsigned last_ccc = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = p[i];
        unsigned cc = ccc_of(c);
        if (starter >= 0 && ((size_t)starter == out - 1 || (last_ccc && last_ccc < cc))) {
            uint32_t k = compose_pair(p[starter], c);
            if (k) {
                p[starter] = k;
                continue;
            }
        }
        if (cc == 0) starter = c >= RAW_BYTE ? -1 : (long)out;
        last_ccc = cc;
        p[out++] = c;
    }
    return out;
}

/* Normalizes one segment s[0..n) (it starts with a starter or at the text start). */
static hm_status form_segment(const char *s, size_t n, bool compat, bool comp, cpbuf *cps,
                              hm_tbuf *out) {
    cps->n = 0;
    for (size_t i = 0; i < n;) {
        size_t adv;
        uint32_t cp = hm_utf8_decode((const uint8_t *)s + i, n - i, &adv);
        if (cp == 0xFFFD && adv == 1) cp = RAW_BYTE + (uint8_t)s[i];
        if (!decompose(cps, cp, compat))
            return hm_errorf(HM_ERR_NO_MEMORY, "normalize: out of memory");
        i += adv;
    }
    reorder(cps->p, cps->n);
    size_t k = comp ? compose(cps->p, cps->n) : cps->n;
    for (size_t i = 0; i < k; i++) {
        char u[4];
        size_t ul = 1;
        if (cps->p[i] >= RAW_BYTE)
            u[0] = (char)(cps->p[i] - RAW_BYTE);
        else
            ul = hm_utf8_encode(cps->p[i], u);
        hm_status st = hm_tbuf_put(out, u, ul);
        if (st) return st;
    }
    return HM_OK;
}

/* ASCII is left as is by every form and no composition has an ASCII second half, so the text
 * is cut before each ASCII byte and only the runs around non-ASCII text are processed. */
static hm_status unicode_form(const char *s, size_t n, bool compat, bool comp, hm_tbuf *out) {
    out->n = 0;
    hm_status st = hm_tbuf_put(out, "", 0);
    cpbuf cps = {0};
    for (size_t i = 0; i < n && !st;) {
        size_t j = i;
        while (j < n && (uint8_t)s[j] < 0x80) j++;
        size_t seg = j < n && j > i ? j - 1 : j; /* the ASCII starter before non-ASCII text */
        st = hm_tbuf_put(out, s + i, seg - i);
        if (st || j == n) break;
        size_t k = j;
        while (k < n && (uint8_t)s[k] >= 0x80) k++;
        st = form_segment(s + seg, k - seg, compat, comp, &cps, out);
        i = k;
    }
    free(cps.p);
    return st;
}

/* ---- the other steps --------------------------------------------------------------------------
 */

static hm_status lowercase(const char *s, size_t n, hm_tbuf *out) {
    out->n = 0;
    hm_status st = hm_tbuf_put(out, "", 0);
    for (size_t i = 0; i < n && !st;) {
        size_t adv;
        uint32_t cp = hm_utf8_decode((const uint8_t *)s + i, n - i, &adv);
        if (cp < 0x80 || (cp == 0xFFFD && adv == 1)) {
            char c = cp < 0x80 ? (char)hm_uni_tolower(cp) : s[i];
            st = hm_tbuf_put(out, &c, 1);
            i += adv;
            continue;
        }
        i += adv;
        char u[12];
        size_t ul = 0;
        for (size_t m = 0; m < sizeof NORM_LOWER_MULTI / sizeof NORM_LOWER_MULTI[0]; m++)
            if (NORM_LOWER_MULTI[m][0] == cp)
                for (int q = 1; q < 4 && NORM_LOWER_MULTI[m][q]; q++)
                    ul += hm_utf8_encode(NORM_LOWER_MULTI[m][q], u + ul);
        if (!ul) ul = hm_utf8_encode(hm_uni_tolower(cp), u);
        st = hm_tbuf_put(out, u, ul);
    }
    return st;
}

static hm_status strip(const char *s, size_t n, bool left, bool right, hm_tbuf *out) {
    size_t start = n, end = 0; /* first non-whitespace byte, end of the last one */
    for (size_t i = 0; i < n;) {
        size_t adv;
        uint32_t cp = hm_utf8_decode((const uint8_t *)s + i, n - i, &adv);
        bool ws = !(cp == 0xFFFD && adv == 1) && hm_uni_is_whitespace(cp);
        if (!ws && start == n) start = i;
        i += adv;
        if (!ws) end = i;
    }
    if (!left) start = 0;
    if (!right) end = n;
    if (end < start) end = start; /* only whitespace */
    out->n = 0;
    return hm_tbuf_put(out, s + start, end - start);
}

static hm_status replace_string(const hm_norm_step *r, const char *s, size_t n, hm_tbuf *out) {
    out->n = 0;
    hm_status st = hm_tbuf_put(out, "", 0);
    size_t pos = 0;
    while (!st && r->pattern_len && pos < n) {
        const char *m = memmem(s + pos, n - pos, r->pattern, r->pattern_len);
        if (!m) break;
        st = hm_tbuf_put(out, s + pos, (size_t)(m - s) - pos);
        if (!st) st = hm_tbuf_put(out, r->content, r->content_len);
        pos = (size_t)(m - s) + r->pattern_len;
    }
    if (!st) st = hm_tbuf_put(out, s + pos, n - pos);
    return st;
}

static hm_status replace_regex(const hm_norm_step *r, const char *s, size_t n, hm_tbuf *out) {
    out->n = 0;
    pcre2_code *re = r->re;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return hm_errorf(HM_ERR_NO_MEMORY, "normalize: out of memory");
    hm_status st = hm_tbuf_put(out, "", 0);
    size_t pos = 0, copied = 0;
    while (!st && pos <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            st = hm_errorf(HM_ERR_INTERNAL, "normalize: Replace regex failed (%d)", rc);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        st = hm_tbuf_put(out, s + copied, ov[0] - copied);
        if (!st) st = hm_tbuf_put(out, r->content, r->content_len);
        copied = ov[1];
        if (ov[1] > ov[0]) {
            pos = ov[1];
        } else { /* empty match: step over one character */
            if (ov[1] >= n) break;
            pos = ov[1] + hm_utf8_len((uint8_t)s[ov[1]]);
            if (pos > n) pos = n;
        }
    }
    if (!st) st = hm_tbuf_put(out, s + copied, n - copied);
    pcre2_match_data_free(md);
    return st;
}

static hm_status apply_step(const hm_norm_step *st, const char *s, size_t n, hm_tbuf *out) {
    switch (st->kind) {
    case HM_NORM_NFC:
        return unicode_form(s, n, false, true, out);
    case HM_NORM_NFD:
        return unicode_form(s, n, false, false, out);
    case HM_NORM_NFKC:
        return unicode_form(s, n, true, true, out);
    case HM_NORM_NFKD:
        return unicode_form(s, n, true, false, out);
    case HM_NORM_LOWERCASE:
        return lowercase(s, n, out);
    case HM_NORM_STRIP:
        return strip(s, n, st->left, st->right, out);
    case HM_NORM_PREPEND:
        out->n = 0;
        if (n) {
            hm_status e = hm_tbuf_put(out, st->content, st->content_len);
            if (e) return e;
        }
        return hm_tbuf_put(out, s, n);
    case HM_NORM_REPLACE:
        return st->re ? replace_regex(st, s, n, out) : replace_string(st, s, n, out);
    }
    return hm_errorf(HM_ERR_INTERNAL, "normalize: step kind %d", (int)st->kind);
}

hm_status hm_tok_normalize(const hm_tokenizer *t, const char *s, size_t n, hm_tbuf bufs[2],
                           const char **res, size_t *res_len) {
    const char *cur = s;
    size_t cur_n = n;
    for (int i = 0; i < t->n_norm; i++) {
        hm_tbuf *dst = cur == bufs[0].p ? &bufs[1] : &bufs[0];
        hm_status st = apply_step(&t->norm[i], cur, cur_n, dst);
        if (st) return st;
        cur = dst->p ? dst->p : "";
        cur_n = dst->n;
    }
    *res = cur;
    *res_len = cur_n;
    return HM_OK;
}

hm_status hm_tok_norm_add(hm_tokenizer *t, const hm_norm_step *step) {
    if (t->n_norm >= HM_TOK_MAX_NORM)
        return hm_errorf(HM_ERR_UNSUPPORTED, "%s: more than %d normalizer steps", t->source,
                         HM_TOK_MAX_NORM);
    t->norm[t->n_norm++] = *step;
    size_t k = strlen(t->norm_name);
    snprintf(t->norm_name + k, sizeof t->norm_name - k, "%s%s", k ? "+" : "",
             hm_tok_norm_name(step->kind));
    return HM_OK;
}

const char *hm_tokenizer_normalizer(const hm_tokenizer *t) {
    return t->norm_name;
}

void hm_tok_norm_clear(hm_tokenizer *t) {
    for (int i = 0; i < t->n_norm; i++) {
        free(t->norm[i].pattern);
        free(t->norm[i].content);
        if (t->norm[i].re) pcre2_code_free((pcre2_code *)t->norm[i].re);
    }
    t->n_norm = 0;
    t->norm_name[0] = 0;
}

const char *hm_tok_norm_name(hm_norm_kind k) {
    static const char *const names[] = {"?",         "NFC",   "NFD",     "NFKC",   "NFKD",
                                        "Lowercase", "Strip", "Prepend", "Replace"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}
