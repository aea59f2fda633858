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
                   "more than %" PRIu64 " steps (loop iterations, calls)", rc->p.max_steps);
}

void *jx_alloc(rctx *rc, size_t n) {
    if (n > rc->p.max_memory || rc->ar.total > rc->p.max_memory - n)
        jx_fail_st(rc, HM_ERR_UNSUPPORTED, NULL, "render needs more than %zu bytes of memory",
                   rc->p.max_memory);
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
    }
    return (jv){.t = JV_DICT, .flags = flags, .u.d = d};
}

static jv *jd_find(const jdict *d, jv key) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], key)) return &d->v[i];
    return NULL;
}

jv *jv_dict_find(jv dict, jv key) {
    return jd_find(dict.u.d, key);
}

jv *jv_dict_find_s(jv dict, const char *key) {
    const jdict *d = dict.u.d;
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s->len == n && !memcmp(d->k[i].u.s->s, key, n))
            return &d->v[i];
    return NULL;
}

void jd_set(rctx *rc, jdict *d, jv key, jv val) {
    jv *slot = jd_find(d, key);
    if (slot) {
        *slot = val;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jv *k = jx_alloc(rc, cap * sizeof(jv)), *v = jx_alloc(rc, cap * sizeof(jv));
        if (d->n) {
            memcpy(k, d->k, d->n * sizeof(jv));
            memcpy(v, d->v, d->n * sizeof(jv));
        }
        d->k = k;
        d->v = v;
        d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
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

bool jv_eq(jv a, jv b) {
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            return (a.t == JV_INT ? a.u.i : a.u.b) == (b.t == JV_INT ? b.u.i : b.u.b);
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t) return false;
    switch ((jv_type)a.t) {
    case JV_UNDEF:
    case JV_NONE:
        return true;
    case JV_STR:
        return a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
    case JV_LIST:
        if ((a.flags & JL_ITER) || (b.flags & JL_ITER)) return a.u.l == b.u.l;
        if ((a.flags & JL_TUPLE) != (b.flags & JL_TUPLE) || a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_eq(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case JV_DICT:
        if (a.flags || b.flags) return a.u.d == b.u.d;
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = jd_find(b.u.d, a.u.d->k[i]);
            if (!o || !jv_eq(a.u.d->v[i], *o)) return false;
        }
        return true;
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
        return x < y ? -1 : x > y;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->s, b.u.s->s, n);
        if (c) return c < 0 ? -1 : 1;
        return a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
    }
    if (a.t == JV_LIST && b.t == JV_LIST && !((a.flags | b.flags) & JL_ITER) &&
        (a.flags & JL_TUPLE) == (b.flags & JL_TUPLE)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_eq(a.u.l->v[i], b.u.l->v[i])) continue;
            return jv_cmp(rc, at, a.u.l->v[i], b.u.l->v[i]);
        }
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
    switch ((jv_type)v.t) {
    case JV_STR:
        repr_str(b, v.u.s);
        return;
    case JV_LIST:
        if (v.flags & JL_ITER) {
            sb_adds(b, "<generator object>");
            return;
        }
        sb_addc(b, v.flags & JL_TUPLE ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) sb_adds(b, ", ");
            jv_repr(b, v.u.l->v[i]);
        }
        if ((v.flags & JL_TUPLE) && v.u.l->n == 1) sb_addc(b, ',');
        sb_addc(b, v.flags & JL_TUPLE ? ')' : ']');
        return;
    case JV_DICT:
        if (v.flags & JD_NS) sb_adds(b, "<Namespace ");
        sb_addc(b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) sb_adds(b, ", ");
            jv_repr(b, v.u.d->k[i]);
            sb_adds(b, ": ");
            jv_repr(b, v.u.d->v[i]);
        }
        sb_addc(b, '}');
        if (v.flags & JD_NS) sb_addc(b, '>');
        return;
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

jv jv_from_json(rctx *rc, const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jv d = jv_dict_new(rc, json_object_size(j), 0);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v)
            jv_dict_set(rc, d, jv_cstr(rc, k), jv_from_json(rc, v));
        return d;
    }
    case JSON_ARRAY: {
        jv l = jv_list_new(rc, json_array_size(j), 0);
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) jv_list_push(rc, l, jv_from_json(rc, v));
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

static void json_nl(sbuf *b, int indent, int level) {
    sb_addc(b, '\n');
    for (int i = 0; i < indent * level; i++) sb_addc(b, ' ');
}

static void to_json(rctx *rc, const node *at, sbuf *b, jv v, int indent, const char *isep,
                    const char *ksep, bool sort, int level) {
    char tmp[64];
    if (level > 256) jx_fail(rc, at, "tojson: nesting too deep");
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
        json_str(b, v.u.s->s, v.u.s->len);
        return;
    case JV_LIST:
        if (v.flags & JL_ITER) break;
        if (!v.u.l->n) {
            sb_adds(b, "[]");
            return;
        }
        sb_addc(b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) sb_adds(b, isep);
            if (indent >= 0) json_nl(b, indent, level + 1);
            to_json(rc, at, b, v.u.l->v[i], indent, isep, ksep, sort, level + 1);
        }
        if (indent >= 0) json_nl(b, indent, level);
        sb_addc(b, ']');
        return;
    case JV_DICT: {
        if (v.flags) break;
        const jdict *d = v.u.d;
        if (!d->n) {
            sb_adds(b, "{}");
            return;
        }
        size_t *order = jx_alloc(rc, d->n * sizeof(size_t));
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (sort) /* insertion sort: dicts in templates are small */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0 && jv_cmp(rc, at, d->k[order[j - 1]], d->k[order[j]]) > 0;
                     j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        sb_addc(b, '{');
        for (size_t i = 0; i < d->n; i++) {
            jv k = d->k[order[i]];
            if (i) sb_adds(b, isep);
            if (indent >= 0) json_nl(b, indent, level + 1);
            if (k.t == JV_STR)
                json_str(b, k.u.s->s, k.u.s->len);
            else if (k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_BOOL || k.t == JV_NONE) {
                sbuf kb;
                sb_init(&kb, rc);
                to_json(rc, at, &kb, k, -1, isep, ksep, sort, level + 1);
                sb_addc(b, '"');
                sb_add(b, kb.p, kb.len);
                sb_addc(b, '"');
            } else
                jx_fail(rc, at, "TypeError: keys must be str, int, float, bool or None, not %s",
                        jv_typename(k));
            sb_adds(b, ksep);
            to_json(rc, at, b, d->v[order[i]], indent, isep, ksep, sort, level + 1);
        }
        if (indent >= 0) json_nl(b, indent, level);
        sb_addc(b, '}');
        return;
    }
    default:
        break;
    }
    jx_fail(rc, at, "TypeError: Object of type %s is not JSON serializable", jv_typename(v));
}

void jv_to_json(rctx *rc, const node *at, sbuf *b, jv v, int indent, const char *item_sep,
                const char *key_sep, bool sort_keys) {
    to_json(rc, at, b, v, indent, item_sep, key_sep, sort_keys, 0);
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
