/* jinja_value.c - the value model of the Jinja interpreter: arena allocation, Python str()/repr(),
 * equality, ordering, truthiness, json.dumps and conversion from jansson. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_int.h"

/* ---- errors and limits ------------------------------------------------------------------------
 */

static _Noreturn void vfail(rctx *rc, hm_status st, const node *at, const char *fmt, va_list ap) {
    char msg[HM_ERROR_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (at)
        hm_errorf(st, "%s:%d:%d: %s", rc->tpl->name, at->line, at->col, msg);
    else
        hm_errorf(st, "%s: %s", rc->tpl->name, msg);
    rc->st = st;
    longjmp(rc->jb, 1);
}

void jx_fail(rctx *rc, const node *at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(rc, HM_ERR_FORMAT, at, fmt, ap);
}

void jx_fail_st(rctx *rc, hm_status st, const node *at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(rc, st, at, fmt, ap);
}

void jx_step(rctx *rc, const node *at, uint64_t n) {
    rc->steps += n;
    if (rc->steps > rc->p.max_steps)
        jx_fail_st(rc, HM_ERR_UNSUPPORTED, at,
                   "more than %" PRIu64 " steps of work (nodes evaluated, items, bytes / %d)",
                   rc->p.max_steps, JX_BYTES_PER_STEP);
}

uint64_t jv_cost(jv v) {
    switch ((jv_type)v.t) {
    case JV_STR:
        return jx_bytes_cost(v.u.s->len);
    default: /* builtins that walk a container charge its elements themselves */
        return 1;
    }
}

void jx_step_args(rctx *rc, const node *at, jv in, const jargs *a) {
    uint64_t n = jv_cost(in);
    for (int i = 0; i < a->n; i++) n += jv_cost(a->v[i]);
    jx_step(rc, at, n);
}

void jx_value_enter(rctx *rc, const node *at) {
    if (++rc->vdepth > JX_MAX_VALUE_DEPTH)
        jx_fail(rc, at, "RecursionError: value nested deeper than %d levels", JX_MAX_VALUE_DEPTH);
    jx_step(rc, at, 1);
}

void *jx_alloc(rctx *rc, size_t n) {
    if (n > rc->p.max_memory || rc->ar.total > rc->p.max_memory - n)
        jx_fail_st(rc, HM_ERR_UNSUPPORTED, NULL, "render needs more than %zu bytes of memory",
                   rc->p.max_memory);
    jx_step(rc, NULL, jx_bytes_cost(n));
    void *p = hm_arena_alloc(&rc->ar, n ? n : 1, 16);
    if (!p) jx_fail_st(rc, HM_ERR_NO_MEMORY, NULL, "out of memory (%zu bytes)", n);
    return p;
}

jstr *jx_str_new(rctx *rc, const char *s, size_t len) {
    if (len > rc->p.max_memory) jx_alloc(rc, len); /* fails with the limit */
    jstr *r = jx_alloc(rc, sizeof(jstr) + len + 1);
    r->len = len;
    if (len) memcpy(r->s, s, len);
    r->s[len] = '\0';
    return r;
}

jv jv_str(rctx *rc, const char *s, size_t len) {
    return jv_strv(jx_str_new(rc, s, len));
}
jv jv_cstr(rctx *rc, const char *s) {
    return jv_str(rc, s, strlen(s));
}

/* ---- containers -------------------------------------------------------------------------------
 */

jv jv_list_new(rctx *rc, size_t cap, uint8_t flags) {
    jlist *l = jx_alloc(rc, sizeof *l);
    l->n = 0;
    l->cap = cap;
    l->v = cap ? jx_alloc(rc, cap * sizeof(jv)) : NULL;
    return (jv){.t = JV_LIST, .flags = flags, .u.l = l};
}

void jv_list_push(rctx *rc, jv list, jv item) {
    jlist *l = list.u.l;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *v = jx_alloc(rc, cap * sizeof(jv));
        if (l->n) memcpy(v, l->v, l->n * sizeof(jv));
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = item;
}

jv jv_dict_new(rctx *rc, size_t cap, uint8_t flags) {
    jdict *d = jx_alloc(rc, sizeof *d);
    memset(d, 0, sizeof *d);
    if (cap) {
        d->cap = cap;
        d->k = jx_alloc(rc, cap * sizeof(jv));
        d->v = jx_alloc(rc, cap * sizeof(jv));
        d->h = jx_alloc(rc, cap * sizeof(uint64_t));
    }
    return (jv){.t = JV_DICT, .flags = flags, .u.d = d};
}

/* ---- hashing ---------------------------------------------------------------------------------
 */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t mix64(uint64_t x) { /* splitmix64 finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

bool jv_hash(rctx *rc, jv v, uint64_t *out) {
    switch ((jv_type)v.t) {
    case JV_UNDEF:
        *out = 0x5a5a;
        return true;
    case JV_NONE:
        *out = 0xa5a5;
        return true;
    case JV_BOOL:
        *out = mix64((uint64_t)v.u.b);
        return true;
    case JV_INT:
        *out = mix64((uint64_t)v.u.i);
        return true;
    case JV_FLOAT: {
        double f = v.u.f;
        if (f == 0) f = 0; /* -0.0 == 0.0 */
        if (f >= -9.2e18 && f <= 9.2e18 && f == (double)(int64_t)f) {
            *out = mix64((uint64_t)(int64_t)f); /* 2.0 == 2 */
            return true;
        }
        uint64_t bits;
        memcpy(&bits, &f, sizeof bits);
        *out = mix64(bits ^ 0x1234567);
        return true;
    }
    case JV_STR:
        *out = hash_bytes(v.u.s->s, v.u.s->len);
        jx_step(rc, NULL, jx_bytes_cost(v.u.s->len));
        return true;
    case JV_LIST: {
        if (!(v.flags & JL_TUPLE)) return false; /* lists and generators are unhashable */
        jx_value_enter(rc, NULL);
        uint64_t h = 0x345678;
        for (size_t i = 0; i < v.u.l->n; i++) {
            uint64_t e;
            if (!jv_hash(rc, v.u.l->v[i], &e)) return false;
            h = mix64(h ^ e) + i;
        }
        jx_value_leave(rc);
        *out = h;
        return true;
    }
    case JV_DICT:
        if (!v.flags) return false; /* dicts are unhashable; namespaces hash by identity */
        *out = mix64((uint64_t)(uintptr_t)v.u.d);
        return true;
    case JV_FUNC:
        *out = mix64((uint64_t)(uintptr_t)v.u.fn);
        return true;
    }
    return false;
}

static _Noreturn void unhashable(rctx *rc, const node *at, jv key) {
    jx_fail(rc, at, "TypeError: unhashable type: '%s'", jv_typename(key));
}

static void jd_index_build(rctx *rc, jdict *d) {
    size_t ns = 16;
    while (ns < 2 * d->cap) ns *= 2;
    d->slot = jx_alloc(rc, ns * sizeof(uint32_t));
    memset(d->slot, 0, ns * sizeof(uint32_t));
    d->nslot = ns;
    for (size_t i = 0; i < d->n; i++) {
        size_t j = (size_t)d->h[i] & (ns - 1);
        while (d->slot[j]) j = (j + 1) & (ns - 1);
        d->slot[j] = (uint32_t)(i + 1);
    }
}

/* entry index of key (hash h), or -1 */
static ptrdiff_t jd_lookup(rctx *rc, const jdict *d, jv key, uint64_t h) {
    if (!d->slot) {
        for (size_t i = 0; i < d->n; i++)
            if (d->h[i] == h && jv_eq(rc, d->k[i], key)) return (ptrdiff_t)i;
        return -1;
    }
    for (size_t j = (size_t)h & (d->nslot - 1);; j = (j + 1) & (d->nslot - 1)) {
        uint32_t e = d->slot[j];
        if (!e) return -1;
        if (d->h[e - 1] == h && jv_eq(rc, d->k[e - 1], key)) return (ptrdiff_t)(e - 1);
    }
}

jv *jv_dict_find(rctx *rc, jv dict, jv key) {
    uint64_t h;
    if (!jv_hash(rc, key, &h)) return NULL;
    ptrdiff_t i = jd_lookup(rc, dict.u.d, key, h);
    return i < 0 ? NULL : &dict.u.d->v[i];
}

bool jv_dict_has(rctx *rc, const node *at, jv dict, jv key) {
    uint64_t h;
    if (!jv_hash(rc, key, &h)) unhashable(rc, at, key);
    return jd_lookup(rc, dict.u.d, key, h) >= 0;
}

jv *jv_dict_find_s(jv dict, const char *key) {
    const jdict *d = dict.u.d;
    size_t n = strlen(key);
    uint64_t h = hash_bytes(key, n);
    if (!d->slot) {
        for (size_t i = 0; i < d->n; i++)
            if (d->h[i] == h && d->k[i].t == JV_STR && d->k[i].u.s->len == n &&
                !memcmp(d->k[i].u.s->s, key, n))
                return &d->v[i];
        return NULL;
    }
    for (size_t j = (size_t)h & (d->nslot - 1);; j = (j + 1) & (d->nslot - 1)) {
        uint32_t e = d->slot[j];
        if (!e) return NULL;
        const jv *k = &d->k[e - 1];
        if (d->h[e - 1] == h && k->t == JV_STR && k->u.s->len == n && !memcmp(k->u.s->s, key, n))
            return &d->v[e - 1];
    }
}

void jd_set(rctx *rc, jdict *d, jv key, jv val) {
    uint64_t h;
    if (!jv_hash(rc, key, &h)) unhashable(rc, NULL, key);
    ptrdiff_t i = jd_lookup(rc, d, key, h);
    if (i >= 0) {
        d->v[i] = val;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        if (cap > UINT32_MAX - 1) jx_alloc(rc, SIZE_MAX); /* fails with the memory limit */
        jv *k = jx_alloc(rc, cap * sizeof(jv)), *v = jx_alloc(rc, cap * sizeof(jv));
        uint64_t *hv = jx_alloc(rc, cap * sizeof(uint64_t));
        if (d->n) {
            memcpy(k, d->k, d->n * sizeof(jv));
            memcpy(v, d->v, d->n * sizeof(jv));
            memcpy(hv, d->h, d->n * sizeof(uint64_t));
        }
        d->k = k;
        d->v = v;
        d->h = hv;
        d->cap = cap;
        d->slot = NULL; /* rebuilt below for the new capacity */
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->h[d->n] = h;
    d->n++;
    if (d->n >= JD_INDEX_MIN) {
        if (!d->slot)
            jd_index_build(rc, d);
        else {
            size_t j = (size_t)h & (d->nslot - 1);
            while (d->slot[j]) j = (j + 1) & (d->nslot - 1);
            d->slot[j] = (uint32_t)d->n;
        }
    }
}

void jv_dict_set(rctx *rc, jv dict, jv key, jv val) {
    jd_set(rc, dict.u.d, key, val);
}

/* ---- string builder ---------------------------------------------------------------------------
 */

void sb_init(sbuf *b, rctx *rc) {
    b->rc = rc;
    b->p = NULL;
    b->len = b->cap = 0;
}

void sb_add(sbuf *b, const char *s, size_t n) {
    if (!n) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) {
            if (cap > b->rc->p.max_memory) jx_alloc(b->rc, cap); /* fails with the limit */
            cap *= 2;
        }
        char *p = jx_alloc(b->rc, cap);
        if (b->len) memcpy(p, b->p, b->len);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

void sb_adds(sbuf *b, const char *s) {
    sb_add(b, s, strlen(s));
}
void sb_addc(sbuf *b, char c) {
    sb_add(b, &c, 1);
}

jv sb_val(sbuf *b) {
    /* the builder's buffer becomes the string: copy once into a jstr */
    return jv_str(b->rc, b->p ? b->p : "", b->len);
}

/* ---- UTF-8 ------------------------------------------------------------------------------------
 */

/* Byte length of the (possibly invalid) sequence at s[i]: invalid bytes count as one char. */
size_t u8_next(const char *s, size_t n, size_t i) {
    unsigned char c = (unsigned char)s[i];
    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + k > n) return i + 1;
    for (size_t j = 1; j < k; j++)
        if (((unsigned char)s[i + j] & 0xC0) != 0x80) return i + 1;
    return i + k;
}

size_t u8_len(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i = u8_next(s, n, i)) c++;
    return c;
}

size_t u8_offset(const char *s, size_t n, size_t cp) {
    size_t i = 0;
    while (cp-- && i < n) i = u8_next(s, n, i);
    return i;
}

/* ---- Python semantics -------------------------------------------------------------------------
 */

bool jv_is_num(jv v) {
    return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}

double jv_num(jv v) {
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.t == JV_BOOL ? v.u.b : 0;
}

bool jv_truthy(jv v) {
    switch ((jv_type)v.t) {
    case JV_UNDEF:
    case JV_NONE:
        return false;
    case JV_BOOL:
        return v.u.b;
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0;
    case JV_STR:
        return v.u.s->len != 0;
    case JV_LIST:
        return (v.flags & JL_ITER) || v.u.l->n != 0;
    case JV_DICT:
        return (v.flags & (JD_NS | JD_LOOP)) || v.u.d->n != 0;
    case JV_FUNC:
        return true;
    }
    return false;
}

bool jv_eq(rctx *rc, jv a, jv b) {
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            return (a.t == JV_INT ? a.u.i : a.u.b) == (b.t == JV_INT ? b.u.i : b.u.b);
        if (a.t == JV_INT || b.t == JV_INT) { /* exact, as Python compares int with float */
            int64_t i = a.t == JV_INT ? a.u.i : b.u.i;
            double f = a.t == JV_FLOAT ? a.u.f : b.u.f;
            return f >= -9.3e18 && f < 9.2233720368547758e18 && f == (double)(int64_t)f &&
                   (int64_t)f == i;
        }
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t) return false;
    switch ((jv_type)a.t) {
    case JV_UNDEF:
    case JV_NONE:
        return true;
    case JV_STR:
        if (a.u.s == b.u.s) return true;
        if (a.u.s->len != b.u.s->len) return false;
        jx_step(rc, NULL, jx_bytes_cost(a.u.s->len));
        return !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
    case JV_LIST: {
        if ((a.flags & JL_ITER) || (b.flags & JL_ITER)) return a.u.l == b.u.l;
        if ((a.flags & JL_TUPLE) != (b.flags & JL_TUPLE) || a.u.l->n != b.u.l->n) return false;
        if (a.u.l == b.u.l) return true;
        jx_value_enter(rc, NULL);
        jx_step(rc, NULL, a.u.l->n);
        bool eq = true;
        for (size_t i = 0; i < a.u.l->n && eq; i++) eq = jv_eq(rc, a.u.l->v[i], b.u.l->v[i]);
        jx_value_leave(rc);
        return eq;
    }
    case JV_DICT: {
        if (a.flags || b.flags) return a.u.d == b.u.d;
        if (a.u.d->n != b.u.d->n) return false;
        if (a.u.d == b.u.d) return true;
        jx_value_enter(rc, NULL);
        jx_step(rc, NULL, a.u.d->n);
        bool eq = true;
        for (size_t i = 0; i < a.u.d->n && eq; i++) {
            jv *o = jv_dict_find(rc, b, a.u.d->k[i]);
            eq = o && jv_eq(rc, a.u.d->v[i], *o);
        }
        jx_value_leave(rc);
        return eq;
    }
    case JV_FUNC:
        return a.u.fn == b.u.fn;
    default:
        return false;
    }
}

const char *jv_typename(jv v) {
    switch ((jv_type)v.t) {
    case JV_UNDEF:
        return "Undefined";
    case JV_NONE:
        return "NoneType";
    case JV_BOOL:
        return "bool";
    case JV_INT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STR:
        return "str";
    case JV_LIST:
        return v.flags & JL_TUPLE ? "tuple" : v.flags & JL_ITER ? "generator" : "list";
    case JV_DICT:
        return v.flags & JD_NS ? "Namespace" : v.flags & JD_LOOP ? "LoopContext" : "dict";
    case JV_FUNC:
        return "function";
    }
    return "object";
}

int jv_cmp(rctx *rc, const node *at, jv a, jv b) {
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_INT ? a.u.i : a.u.b, y = b.t == JV_INT ? b.u.i : b.u.b;
            return x < y ? -1 : x > y;
        }
        double x = jv_num(a), y = jv_num(b);
        /* NaN is unordered: every comparison is false, as in Python (sort keeps the order) */
        return x < y ? -1 : x > y;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        jx_step(rc, at, jx_bytes_cost(n));
        int c = memcmp(a.u.s->s, b.u.s->s, n);
        if (c) return c < 0 ? -1 : 1;
        return a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
    }
    if (a.t == JV_LIST && b.t == JV_LIST && !((a.flags | b.flags) & JL_ITER) &&
        (a.flags & JL_TUPLE) == (b.flags & JL_TUPLE)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        jx_value_enter(rc, at);
        jx_step(rc, at, n);
        for (size_t i = 0; i < n; i++) {
            if (jv_eq(rc, a.u.l->v[i], b.u.l->v[i])) continue;
            int c = jv_cmp(rc, at, a.u.l->v[i], b.u.l->v[i]);
            jx_value_leave(rc);
            return c;
        }
        jx_value_leave(rc);
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    if (a.t == JV_UNDEF || b.t == JV_UNDEF) jx_fail(rc, at, "undefined value in comparison");
    jx_fail(rc, at, "TypeError: '<' not supported between instances of '%s' and '%s'",
            jv_typename(a), jv_typename(b));
}

/* Python's float repr: the shortest string that round-trips, fixed notation when the decimal
 * exponent is in [-4, 16), else d.ddde+XX. */
void fmt_float(char *buf, size_t cap, double f) {
    if (isnan(f)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp: [-]d.ddde[+-]XX */
    char digits[32];
    int nd = 0, neg = tmp[0] == '-';
    const char *p = tmp + neg;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int e = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    char out[64];
    int o = 0;
    if (neg) out[o++] = '-';
    if (e >= -4 && e < 16) {
        if (e < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -e - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        } else {
            for (int i = 0; i <= e; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > e + 1)
                for (int i = e + 1; i < nd; i++) out[o++] = digits[i];
            else
                out[o++] = '0';
        }
        out[o] = '\0';
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    snprintf(buf, cap, "%s", out);
}

static void repr_str(sbuf *b, const jstr *s) {
    bool sq = memchr(s->s, '\'', s->len) != NULL, dq = memchr(s->s, '"', s->len) != NULL;
    char q = sq && !dq ? '"' : '\'';
    sb_addc(b, q);
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->s[i];
        char esc[8];
        if (c == (unsigned char)q || c == '\\') {
            sb_addc(b, '\\');
            sb_addc(b, (char)c);
        } else if (c == '\n')
            sb_adds(b, "\\n");
        else if (c == '\r')
            sb_adds(b, "\\r");
        else if (c == '\t')
            sb_adds(b, "\\t");
        else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", c);
            sb_adds(b, esc);
        } else
            sb_addc(b, (char)c);
    }
    sb_addc(b, q);
}

void jv_repr(sbuf *b, jv v) {
    rctx *rc = b->rc;
    switch ((jv_type)v.t) {
    case JV_STR:
        repr_str(b, v.u.s);
        return;
    case JV_LIST:
        if (v.flags & JL_ITER) {
            sb_adds(b, "<generator object>");
            return;
        }
        jx_value_enter(rc, NULL);
        sb_addc(b, v.flags & JL_TUPLE ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) sb_adds(b, ", ");
            jv_repr(b, v.u.l->v[i]);
        }
        if ((v.flags & JL_TUPLE) && v.u.l->n == 1) sb_addc(b, ',');
        sb_addc(b, v.flags & JL_TUPLE ? ')' : ']');
        jx_value_leave(rc);
        return;
    case JV_DICT: {
        if (v.flags & JD_NS) sb_adds(b, "<Namespace ");
        /* a namespace can hold itself: Python prints a dict already being printed as {...} */
        if (v.flags & JD_NS)
            for (int i = 0; i < rc->nprinting; i++)
                if (rc->printing[i] == v.u.d) {
                    sb_adds(b, "{...}>");
                    return;
                }
        jx_value_enter(rc, NULL);
        if (v.flags & JD_NS) rc->printing[rc->nprinting++] = v.u.d;
        sb_addc(b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) sb_adds(b, ", ");
            jv_repr(b, v.u.d->k[i]);
            sb_adds(b, ": ");
            jv_repr(b, v.u.d->v[i]);
        }
        sb_addc(b, '}');
        if (v.flags & JD_NS) {
            sb_addc(b, '>');
            rc->nprinting--;
        }
        jx_value_leave(rc);
        return;
    }
    default:
        jv_to_str(b, v);
    }
}

void jv_to_str(sbuf *b, jv v) {
    char tmp[64];
    switch ((jv_type)v.t) {
    case JV_UNDEF:
        return;
    case JV_NONE:
        sb_adds(b, "None");
        return;
    case JV_BOOL:
        sb_adds(b, v.u.b ? "True" : "False");
        return;
    case JV_INT:
        snprintf(tmp, sizeof tmp, "%" PRId64, v.u.i);
        sb_adds(b, tmp);
        return;
    case JV_FLOAT:
        fmt_float(tmp, sizeof tmp, v.u.f);
        sb_adds(b, tmp);
        return;
    case JV_STR:
        sb_add(b, v.u.s->s, v.u.s->len);
        return;
    case JV_LIST:
    case JV_DICT:
        jv_repr(b, v);
        return;
    case JV_FUNC:
        sb_adds(b, "<function ");
        sb_adds(b, v.u.fn->name ? v.u.fn->name : "?");
        sb_addc(b, '>');
        return;
    }
}

jv jv_tostring(rctx *rc, jv v) {
    if (v.t == JV_STR) return v;
    sbuf b;
    sb_init(&b, rc);
    jv_to_str(&b, v);
    return sb_val(&b);
}

/* ---- JSON -------------------------------------------------------------------------------------
 */

static jv from_json(rctx *rc, const json_t *j, int level) {
    if (level > JX_MAX_JSON_DEPTH)
        jx_fail(rc, NULL, "context value nested deeper than %d levels", JX_MAX_JSON_DEPTH);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jv d = jv_dict_new(rc, json_object_size(j), 0);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v)
            jv_dict_set(rc, d, jv_cstr(rc, k), from_json(rc, v, level + 1));
        return d;
    }
    case JSON_ARRAY: {
        jv l = jv_list_new(rc, json_array_size(j), 0);
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) jv_list_push(rc, l, from_json(rc, v, level + 1));
        return l;
    }
    case JSON_STRING:
        return jv_str(rc, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return jv_int(json_integer_value(j));
    case JSON_REAL:
        return jv_float(json_real_value(j));
    case JSON_TRUE:
        return jv_bool(true);
    case JSON_FALSE:
        return jv_bool(false);
    case JSON_NULL:
        break;
    }
    return jv_none();
}

jv jv_from_json(rctx *rc, const json_t *j) {
    return from_json(rc, j, 0);
}

static void json_str(sbuf *b, const char *s, size_t n) {
    sb_addc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        switch (c) {
        case '"':
            sb_adds(b, "\\\"");
            break;
        case '\\':
            sb_adds(b, "\\\\");
            break;
        case '\n':
            sb_adds(b, "\\n");
            break;
        case '\r':
            sb_adds(b, "\\r");
            break;
        case '\t':
            sb_adds(b, "\\t");
            break;
        case '\b':
            sb_adds(b, "\\b");
            break;
        case '\f':
            sb_adds(b, "\\f");
            break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                sb_adds(b, esc);
            } else
                sb_addc(b, (char)c);
        }
    }
    sb_addc(b, '"');
}

typedef struct json_fmt {
    const jstr *indent; /* NULL: no newlines */
    const jstr *isep, *ksep;
    bool sort;
} json_fmt;

static void json_nl(sbuf *b, const jstr *indent, int level) {
    sb_addc(b, '\n');
    for (int i = 0; i < level; i++) sb_add(b, indent->s, indent->len);
}

static void to_json(rctx *rc, const node *at, sbuf *b, jv v, const json_fmt *f, int level) {
    char tmp[64];
    switch ((jv_type)v.t) {
    case JV_NONE:
        sb_adds(b, "null");
        return;
    case JV_BOOL:
        sb_adds(b, v.u.b ? "true" : "false");
        return;
    case JV_INT:
        jv_to_str(b, v);
        return;
    case JV_FLOAT:
        if (isnan(v.u.f))
            sb_adds(b, "NaN");
        else if (isinf(v.u.f))
            sb_adds(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else {
            fmt_float(tmp, sizeof tmp, v.u.f);
            sb_adds(b, tmp);
        }
        return;
    case JV_STR:
        jx_step(rc, at, jx_bytes_cost(v.u.s->len));
        json_str(b, v.u.s->s, v.u.s->len);
        return;
    case JV_LIST:
        if (v.flags & JL_ITER) break;
        if (!v.u.l->n) {
            sb_adds(b, "[]");
            return;
        }
        jx_value_enter(rc, at);
        sb_addc(b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) sb_add(b, f->isep->s, f->isep->len);
            if (f->indent) json_nl(b, f->indent, level + 1);
            to_json(rc, at, b, v.u.l->v[i], f, level + 1);
        }
        if (f->indent) json_nl(b, f->indent, level);
        sb_addc(b, ']');
        jx_value_leave(rc);
        return;
    case JV_DICT: {
        if (v.flags) break;
        const jdict *d = v.u.d;
        if (!d->n) {
            sb_adds(b, "{}");
            return;
        }
        jx_value_enter(rc, at);
        size_t *order = jx_alloc(rc, d->n * sizeof(size_t));
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (f->sort) { /* merge sort of the key order: a dict can be large */
            size_t *tmpo = jx_alloc(rc, d->n * sizeof(size_t));
            for (size_t w = 1; w < d->n; w *= 2)
                for (size_t lo = 0; lo < d->n; lo += 2 * w) {
                    size_t mid = lo + w < d->n ? lo + w : d->n,
                           hi = lo + 2 * w < d->n ? lo + 2 * w : d->n, i = lo, j = mid, k = lo;
                    while (i < mid && j < hi)
                        tmpo[k++] = jv_cmp(rc, at, d->k[order[j]], d->k[order[i]]) < 0 ? order[j++]
                                                                                       : order[i++];
                    while (i < mid) tmpo[k++] = order[i++];
                    while (j < hi) tmpo[k++] = order[j++];
                    memcpy(order + lo, tmpo + lo, (hi - lo) * sizeof(size_t));
                }
        }
        sb_addc(b, '{');
        for (size_t i = 0; i < d->n; i++) {
            jv k = d->k[order[i]];
            if (i) sb_add(b, f->isep->s, f->isep->len);
            if (f->indent) json_nl(b, f->indent, level + 1);
            if (k.t == JV_STR)
                json_str(b, k.u.s->s, k.u.s->len);
            else if (k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_BOOL || k.t == JV_NONE) {
                sbuf kb;
                sb_init(&kb, rc);
                to_json(rc, at, &kb, k, f, level + 1);
                sb_addc(b, '"');
                sb_add(b, kb.p, kb.len);
                sb_addc(b, '"');
            } else
                jx_fail(rc, at, "TypeError: keys must be str, int, float, bool or None, not %s",
                        jv_typename(k));
            sb_add(b, f->ksep->s, f->ksep->len);
            to_json(rc, at, b, d->v[order[i]], f, level + 1);
        }
        if (f->indent) json_nl(b, f->indent, level);
        sb_addc(b, '}');
        jx_value_leave(rc);
        return;
    }
    default:
        break;
    }
    jx_fail(rc, at, "TypeError: Object of type %s is not JSON serializable", jv_typename(v));
}

void jv_to_json(rctx *rc, const node *at, sbuf *b, jv v, const jstr *indent, const jstr *item_sep,
                const jstr *key_sep, bool sort_keys) {
    json_fmt f = {indent, item_sep, key_sep, sort_keys};
    to_json(rc, at, b, v, &f, 0);
}

/* ---- iteration --------------------------------------------------------------------------------
 */

jlist *jv_iter(rctx *rc, const node *at, jv v) {
    switch ((jv_type)v.t) {
    case JV_UNDEF: {
        if (v.flags & JU_UNSAFE) jx_fail(rc, at, "SecurityError: %s", v.u.uname);
        jlist *l = jx_alloc(rc, sizeof *l);
        memset(l, 0, sizeof *l);
        return l;
    }
    case JV_LIST:
        return v.u.l;
    case JV_DICT: {
        if (v.flags) break;
        jv l = jv_list_new(rc, v.u.d->n, 0);
        for (size_t i = 0; i < v.u.d->n; i++) jv_list_push(rc, l, v.u.d->k[i]);
        return l.u.l;
    }
    case JV_STR: {
        const jstr *s = v.u.s;
        jv l = jv_list_new(rc, s->len, 0);
        for (size_t i = 0; i < s->len;) {
            size_t j = u8_next(s->s, s->len, i);
            jv_list_push(rc, l, jv_str(rc, s->s + i, j - i));
            i = j;
        }
        return l.u.l;
    }
    default:
        break;
    }
    jx_fail(rc, at, "TypeError: '%s' object is not iterable", jv_typename(v));
}

int64_t jv_len(rctx *rc, const node *at, jv v) {
    switch ((jv_type)v.t) {
    case JV_UNDEF:
        return 0;
    case JV_STR:
        return (int64_t)u8_len(v.u.s->s, v.u.s->len);
    case JV_LIST:
        if (v.flags & JL_ITER) break;
        return (int64_t)v.u.l->n;
    case JV_DICT:
        if (v.flags) break;
        return (int64_t)v.u.d->n;
    default:
        break;
    }
    jx_fail(rc, at, "TypeError: object of type '%s' has no len()", jv_typename(v));
}
