/* jinja_builtins.c - jinja2's filters, tests and globals, Python's str/dict/list methods and
 * attribute lookup as the sandbox allows them (mutating methods are blocked, as in
 * ImmutableSandboxedEnvironment). */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/jinja_int.h"

/* ---- arguments --------------------------------------------------------------------------------
 */

static int arg_index(jargs *a, int pos, const char *kw) {
    int p = 0;
    for (int i = 0; i < a->n; i++) {
        if (a->kw[i]) {
            if (kw && !strcmp(a->kw[i], kw)) return i;
        } else if (p++ == pos)
            return i;
    }
    return -1;
}

jv jx_arg(jargs *a, int pos, const char *kw, jv dflt) {
    int i = arg_index(a, pos, kw);
    return i < 0 ? dflt : a->v[i];
}

bool jx_has_arg(jargs *a, int pos, const char *kw) {
    return arg_index(a, pos, kw) >= 0;
}

static int npositional(jargs *a) {
    int n = 0;
    for (int i = 0; i < a->n; i++)
        if (!a->kw[i]) n++;
    return n;
}

static jstr *want_str(rctx *rc, const node *at, jv v, const char *what) {
    if (v.t != JV_STR) jx_fail(rc, at, "TypeError: %s must be str, not %s", what, jv_typename(v));
    return v.u.s;
}

static int64_t want_int(rctx *rc, const node *at, jv v, const char *what) {
    if (v.t == JV_INT) return v.u.i;
    if (v.t == JV_BOOL) return v.u.b;
    jx_fail(rc, at, "TypeError: %s must be an integer, not %s", what, jv_typename(v));
}

static jv undef_msg(rctx *rc, uint8_t flags, const char *fmt, const char *a, const char *b) {
    char buf[256];
    snprintf(buf, sizeof buf, fmt, a, b);
    jv u = jv_undef();
    u.flags = flags;
    u.u.uname = jx_str_new(rc, buf, strlen(buf))->s;
    return u;
}

static jv str_of(rctx *rc, jv v) {
    return jv_tostring(rc, v);
}

/* float -> int truncating like Python's int(), saturated to int64 (no UB on huge values) */
static int64_t f2i(double f) {
    if (!(f == f)) return 0;
    if (f >= 9.2e18) return INT64_MAX;
    if (f <= -9.2e18) return INT64_MIN;
    return (int64_t)f;
}

/* ---- string helpers ---------------------------------------------------------------------------
 */

static bool py_space(unsigned char c) {
    return c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f);
}

static jv strip_impl(rctx *rc, const node *at, jv self, jv chars, bool left, bool right) {
    const jstr *s = want_str(rc, at, self, "strip() argument");
    size_t b = 0, e = s->len;
    if (chars.t == JV_NONE || chars.t == JV_UNDEF) {
        while (left && b < e && py_space((unsigned char)s->s[b])) b++;
        while (right && e > b && py_space((unsigned char)s->s[e - 1])) e--;
    } else {
        const jstr *c = want_str(rc, at, chars, "strip arg");
        jx_step(rc, at, (uint64_t)jx_bytes_cost(s->len) * (c->len / 8 + 1));
        /* chars are code points; compare UTF-8 sequences */
        for (bool moved = true; left && moved && b < e;) {
            moved = false;
            size_t nb = u8_next(s->s, e, b);
            for (size_t i = 0; i < c->len; i = u8_next(c->s, c->len, i)) {
                size_t ni = u8_next(c->s, c->len, i);
                if (ni - i == nb - b && !memcmp(c->s + i, s->s + b, nb - b)) {
                    b = nb;
                    moved = true;
                    break;
                }
            }
        }
        for (bool moved = true; right && moved && e > b;) {
            moved = false;
            size_t pe = e - 1;
            while (pe > b && ((unsigned char)s->s[pe] & 0xC0) == 0x80) pe--;
            for (size_t i = 0; i < c->len; i = u8_next(c->s, c->len, i)) {
                size_t ni = u8_next(c->s, c->len, i);
                if (ni - i == e - pe && !memcmp(c->s + i, s->s + pe, e - pe)) {
                    e = pe;
                    moved = true;
                    break;
                }
            }
        }
    }
    return jv_str(rc, s->s + b, e - b);
}

static jv case_map(rctx *rc, jv v, int mode) { /* 0 lower 1 upper 2 title 3 capitalize 4 swapcase */
    const jstr *s = v.u.s;
    jstr *r = jx_str_new(rc, s->s, s->len);
    bool prev_cased = false;
    for (size_t i = 0; i < r->len; i++) {
        unsigned char c = (unsigned char)r->s[i];
        switch (mode) {
        case 0:
            r->s[i] = (char)tolower(c);
            break;
        case 1:
            r->s[i] = (char)toupper(c);
            break;
        case 2:
            r->s[i] = (char)(prev_cased ? tolower(c) : toupper(c));
            prev_cased = isalpha(c) || c >= 0x80;
            break;
        case 3:
            r->s[i] = (char)(i == 0 ? toupper(c) : tolower(c));
            break;
        case 4:
            r->s[i] = (char)(isupper(c) ? tolower(c) : toupper(c));
            break;
        }
    }
    return jv_strv(r);
}

static const char *find_sub(const jstr *s, size_t from, const jstr *sub) {
    if (from > s->len) return NULL;
    return memmem(s->s + from, s->len - from, sub->s, sub->len);
}

static jv replace_impl(rctx *rc, const jstr *s, const jstr *old, const jstr *new_, int64_t count) {
    sbuf b;
    sb_init(&b, rc);
    size_t i = 0;
    int64_t done = 0;
    if (!old->len) { /* Python inserts new before every character and at the end */
        for (size_t j = 0;; j = u8_next(s->s, s->len, j)) {
            if (count < 0 || done < count) {
                sb_add(&b, new_->s, new_->len);
                done++;
            }
            if (j >= s->len) break;
            sb_add(&b, s->s + j, u8_next(s->s, s->len, j) - j);
        }
        return sb_val(&b);
    }
    while (count < 0 || done < count) {
        const char *f = find_sub(s, i, old);
        if (!f) break;
        size_t off = (size_t)(f - s->s);
        sb_add(&b, s->s + i, off - i);
        sb_add(&b, new_->s, new_->len);
        i = off + old->len;
        done++;
    }
    sb_add(&b, s->s + i, s->len - i);
    return sb_val(&b);
}

static jv split_impl(rctx *rc, const node *at, const jstr *s, jv sep, int64_t maxsplit,
                     bool right) {
    jv out = jv_list_new(rc, 4, 0);
    if (sep.t == JV_NONE || sep.t == JV_UNDEF) {
        /* whitespace split */
        jv parts = jv_list_new(rc, 4, 0);
        if (!right) {
            size_t i = 0;
            int64_t n = 0;
            while (i < s->len) {
                while (i < s->len && py_space((unsigned char)s->s[i])) i++;
                if (i >= s->len) break;
                if (maxsplit >= 0 && n >= maxsplit) {
                    size_t e = s->len;
                    while (e > i && py_space((unsigned char)s->s[e - 1])) e--;
                    jv_list_push(rc, out, jv_str(rc, s->s + i, e - i));
                    break;
                }
                size_t j = i;
                while (j < s->len && !py_space((unsigned char)s->s[j])) j++;
                jv_list_push(rc, out, jv_str(rc, s->s + i, j - i));
                n++;
                i = j;
            }
            return out;
        }
        size_t e = s->len;
        int64_t n = 0;
        while (e > 0) {
            while (e > 0 && py_space((unsigned char)s->s[e - 1])) e--;
            if (!e) break;
            if (maxsplit >= 0 && n >= maxsplit) {
                size_t b = 0;
                while (b < e && py_space((unsigned char)s->s[b])) b++;
                jv_list_push(rc, parts, jv_str(rc, s->s + b, e - b));
                break;
            }
            size_t b = e;
            while (b > 0 && !py_space((unsigned char)s->s[b - 1])) b--;
            jv_list_push(rc, parts, jv_str(rc, s->s + b, e - b));
            n++;
            e = b;
        }
        for (size_t i = parts.u.l->n; i > 0; i--) jv_list_push(rc, out, parts.u.l->v[i - 1]);
        return out;
    }
    const jstr *d = want_str(rc, at, sep, "separator");
    if (!d->len) jx_fail(rc, at, "ValueError: empty separator");
    if (!right) {
        size_t i = 0;
        int64_t n = 0;
        for (;;) {
            const char *f = (maxsplit < 0 || n < maxsplit) ? find_sub(s, i, d) : NULL;
            if (!f) {
                jv_list_push(rc, out, jv_str(rc, s->s + i, s->len - i));
                return out;
            }
            jv_list_push(rc, out, jv_str(rc, s->s + i, (size_t)(f - s->s) - i));
            i = (size_t)(f - s->s) + d->len;
            n++;
        }
    }
    /* rsplit */
    jv parts = jv_list_new(rc, 4, 0);
    size_t e = s->len;
    int64_t n = 0;
    for (;;) {
        const char *f = NULL;
        if ((maxsplit < 0 || n < maxsplit) && e >= d->len)
            jx_step(rc, at, jx_bytes_cost(e) * (d->len / JX_BYTES_PER_STEP + 1));
        if ((maxsplit < 0 || n < maxsplit) && e >= d->len)
            for (size_t k = e - d->len + 1; k-- > 0;)
                if (!memcmp(s->s + k, d->s, d->len)) {
                    f = s->s + k;
                    break;
                }
        if (!f) {
            jv_list_push(rc, parts, jv_str(rc, s->s, e));
            break;
        }
        size_t off = (size_t)(f - s->s);
        jv_list_push(rc, parts, jv_str(rc, s->s + off + d->len, e - off - d->len));
        e = off;
        n++;
    }
    for (size_t i = parts.u.l->n; i > 0; i--) jv_list_push(rc, out, parts.u.l->v[i - 1]);
    return out;
}

static bool affix(rctx *rc, const node *at, const jstr *s, jv what, bool end) {
    if (what.t == JV_LIST && (what.flags & JL_TUPLE)) {
        for (size_t i = 0; i < what.u.l->n; i++)
            if (affix(rc, at, s, what.u.l->v[i], end)) return true;
        return false;
    }
    const jstr *p = want_str(rc, at, what, end ? "endswith first arg" : "startswith first arg");
    if (p->len > s->len) return false;
    return !memcmp(s->s + (end ? s->len - p->len : 0), p->s, p->len);
}

/* byte offset -> code point index */
static int64_t cp_index(const jstr *s, size_t off) {
    return (int64_t)u8_len(s->s, off);
}

/* str.format with {} / {0} / {name} fields (no format specs beyond plain) */
static jv format_impl(rctx *rc, const node *at, const jstr *fmt, jargs *a) {
    sbuf b;
    sb_init(&b, rc);
    int auto_i = 0;
    for (size_t i = 0; i < fmt->len; i++) {
        char c = fmt->s[i];
        if (c == '{' && i + 1 < fmt->len && fmt->s[i + 1] == '{') {
            sb_addc(&b, '{');
            i++;
        } else if (c == '}' && i + 1 < fmt->len && fmt->s[i + 1] == '}') {
            sb_addc(&b, '}');
            i++;
        } else if (c == '{') {
            size_t e = i + 1;
            while (e < fmt->len && fmt->s[e] != '}') e++;
            if (e >= fmt->len) jx_fail(rc, at, "ValueError: unmatched '{' in format string");
            char field[128];
            snprintf(field, sizeof field, "%.*s", (int)(e - i - 1), fmt->s + i + 1);
            if (strpbrk(field, ":!.["))
                jx_fail(rc, at, "str.format: format specs are not supported");
            jv v;
            if (!field[0])
                v = jx_arg(a, auto_i++, NULL, jv_undef());
            else if (isdigit((unsigned char)field[0]))
                v = jx_arg(a, atoi(field), NULL, jv_undef());
            else
                v = jx_arg(a, 1 << 30, field, jv_undef());
            if (v.t == JV_UNDEF && !jx_has_arg(a, 1 << 30, field))
                jx_fail(rc, at, "IndexError/KeyError: replacement field '%s' has no argument",
                        field);
            jv_to_str(&b, v);
            i = e;
        } else if (c == '}')
            jx_fail(rc, at, "ValueError: Single '}' encountered in format string");
        else
            sb_addc(&b, c);
    }
    return sb_val(&b);
}

/* printf-style "%s %d" % args (the format filter), as Python's str % tuple: widths and precisions
 * of any size (bounded by the render's memory), padding counted in code points */
typedef struct pspec {
    bool left, plus, space, alt, zero;
    int64_t width, prec; /* prec -1: none */
    char conv;
} pspec;

/* an operation about to produce n bytes: within the memory budget, and charged as work first */
static void need_bytes(rctx *rc, int64_t n) {
    if (n < 0 || (uint64_t)n > rc->p.max_memory) jx_alloc(rc, SIZE_MAX); /* fails with the limit */
    jx_step(rc, NULL, jx_bytes_cost((size_t)n));
}

static void add_fill(sbuf *b, char c, int64_t n) {
    char chunk[256];
    memset(chunk, c, sizeof chunk);
    for (; n > 0; n -= (int64_t)sizeof chunk)
        sb_add(b, chunk, n < (int64_t)sizeof chunk ? (size_t)n : sizeof chunk);
}

/* sign + prefix + body padded to the width; zeros go after the sign for numbers */
static void pad_field(sbuf *b, const pspec *f, const char *sign, const char *prefix,
                      const char *body, size_t blen, bool numeric) {
    size_t pre = strlen(sign) + strlen(prefix);
    int64_t chars = (int64_t)(pre + u8_len(body, blen));
    int64_t pad = f->width > chars ? f->width - chars : 0;
    need_bytes(b->rc, pad);
    if (!f->left && !(f->zero && numeric)) add_fill(b, ' ', pad);
    sb_adds(b, sign);
    sb_adds(b, prefix);
    if (!f->left && f->zero && numeric) add_fill(b, '0', pad);
    sb_add(b, body, blen);
    if (f->left) add_fill(b, ' ', pad);
}

static int64_t spec_number(rctx *rc, const jstr *fmt, size_t *i) {
    int64_t v = 0;
    while (*i < fmt->len && isdigit((unsigned char)fmt->s[*i])) {
        if (v > ((int64_t)1 << 56)) need_bytes(rc, -1); /* far beyond any memory budget */
        v = v * 10 + (fmt->s[(*i)++] - '0');
    }
    return v;
}

static void format_int(rctx *rc, const node *at, sbuf *b, const pspec *f, jv v) {
    int64_t x;
    if (v.t == JV_INT || v.t == JV_BOOL)
        x = v.t == JV_INT ? v.u.i : v.u.b;
    else if (v.t == JV_FLOAT && strchr("diu", f->conv)) {
        if (isnan(v.u.f)) jx_fail(rc, at, "ValueError: cannot convert float NaN to integer");
        if (isinf(v.u.f))
            jx_fail(rc, at, "OverflowError: cannot convert float infinity to integer");
        if (!(v.u.f >= -9223372036854775808.0 && v.u.f < 9223372036854775808.0))
            jx_fail_st(rc, HM_ERR_UNSUPPORTED, at,
                       "integer result beyond 64 bits (Python's big integers are not supported)");
        x = (int64_t)v.u.f;
    } else if (v.t == JV_FLOAT)
        jx_fail(rc, at, "TypeError: %%%c format: an integer is required, not float", f->conv);
    else
        jx_fail(rc, at, "TypeError: %%%c format: a real number is required, not %s", f->conv,
                jv_typename(v));
    uint64_t m = x < 0 ? 0 - (uint64_t)x : (uint64_t)x;
    int base = f->conv == 'o' ? 8 : (f->conv == 'x' || f->conv == 'X') ? 16 : 10;
    const char *dig = f->conv == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    char tmp[80];
    size_t n = 0;
    do {
        tmp[sizeof tmp - 1 - n++] = dig[m % (uint64_t)base];
        m /= (uint64_t)base;
    } while (m);
    int64_t zeros = f->prec > (int64_t)n ? f->prec - (int64_t)n : 0;
    need_bytes(rc, zeros);
    sbuf body;
    sb_init(&body, rc);
    add_fill(&body, '0', zeros);
    sb_add(&body, tmp + sizeof tmp - n, n);
    const char *sign = x < 0 ? "-" : f->plus ? "+" : f->space ? " " : "";
    const char *prefix = !f->alt ? "" : f->conv == 'o' ? "0o" : f->conv == 'x' ? "0x" : "0X";
    if (base == 10) prefix = "";
    pad_field(b, f, sign, prefix, body.p, body.len, true);
}

/* A double's exact decimal expansion has at most 767 significant and 1074 fractional digits:
 * digits asked beyond that are zeros, appended without asking printf for them. */
#define EXACT_DIGITS 1100

static void format_float(rctx *rc, const node *at, sbuf *b, const pspec *f, jv v) {
    if (!jv_is_num(v)) jx_fail(rc, at, "TypeError: must be real number, not %s", jv_typename(v));
    double x = jv_num(v);
    int64_t prec = f->prec < 0 ? 6 : f->prec, zeros = 0;
    need_bytes(rc, prec);
    bool gstyle = f->conv == 'g' || f->conv == 'G';
    if (prec > EXACT_DIGITS) {
        if (gstyle && f->alt)
            jx_fail(rc, at, "format: %%#g with a precision over %d is not supported", EXACT_DIGITS);
        if (!gstyle && isfinite(x)) zeros = prec - EXACT_DIGITS; /* %g drops trailing zeros */
        prec = EXACT_DIGITS;
    }
    char body[EXACT_DIGITS + 400];
    char cfmt[16];
    snprintf(cfmt, sizeof cfmt, "%%%s.*%c", f->alt ? "#" : "", f->conv);
    const char *sign = x < 0 || (x == 0 && signbit(x)) ? "-" : f->plus ? "+" : f->space ? " " : "";
    if (isnan(x)) sign = f->plus ? "+" : f->space ? " " : ""; /* Python: nan has no sign */
    int n = snprintf(body, sizeof body, cfmt, (int)prec, fabs(x));
    if (n < 0 || (size_t)n >= sizeof body)
        jx_fail_st(rc, HM_ERR_INTERNAL, at, "format: float too long");
    if (!zeros) {
        pad_field(b, f, sign, "", body, (size_t)n, true); /* Python zero-pads inf too */
        return;
    }
    /* the zeros go at the end of the digits: before the exponent of %e */
    sbuf t;
    sb_init(&t, rc);
    const char *e = f->conv == 'e' || f->conv == 'E' ? strchr(body, f->conv) : NULL;
    size_t head = e ? (size_t)(e - body) : (size_t)n;
    sb_add(&t, body, head);
    add_fill(&t, '0', zeros);
    sb_add(&t, body + head, (size_t)n - head);
    pad_field(b, f, sign, "", t.p, t.len, true);
}

static jv percent_format(rctx *rc, const node *at, const jstr *fmt, jv *args, int nargs) {
    sbuf b;
    sb_init(&b, rc);
    int k = 0;
    jx_step(rc, at, jx_bytes_cost(fmt->len));
    for (size_t i = 0; i < fmt->len; i++) {
        char c = fmt->s[i];
        if (c != '%') {
            sb_addc(&b, c);
            continue;
        }
        if (++i >= fmt->len) jx_fail(rc, at, "ValueError: incomplete format");
        if (fmt->s[i] == '(') jx_fail(rc, at, "format: %%(name) mapping keys are not supported");
        pspec f = {.prec = -1};
        for (; i < fmt->len && strchr("-+ #0", fmt->s[i]) && fmt->s[i]; i++) {
            char fl = fmt->s[i];
            f.left |= fl == '-';
            f.plus |= fl == '+';
            f.space |= fl == ' ';
            f.alt |= fl == '#';
            f.zero |= fl == '0';
        }
        if (i < fmt->len && fmt->s[i] == '*')
            jx_fail(rc, at, "format: '*' widths are not supported");
        f.width = spec_number(rc, fmt, &i);
        if (i < fmt->len && fmt->s[i] == '.') {
            i++;
            if (i < fmt->len && fmt->s[i] == '*')
                jx_fail(rc, at, "format: '*' precisions are not supported");
            f.prec = spec_number(rc, fmt, &i);
        }
        while (i < fmt->len && strchr("hlL", fmt->s[i]) && fmt->s[i]) i++; /* ignored, as Python */
        if (i >= fmt->len) jx_fail(rc, at, "ValueError: incomplete format");
        f.conv = fmt->s[i];
        if (f.conv == '%') {
            sb_addc(&b, '%');
            continue;
        }
        if (!f.conv || !strchr("sradiuoxXeEfFgGc", f.conv)) {
            if (f.conv >= 0x20 && f.conv < 0x7f)
                jx_fail(rc, at, "ValueError: unsupported format character '%c' (0x%x) at index %zu",
                        f.conv, (unsigned)f.conv, i);
            jx_fail(rc, at, "ValueError: unsupported format character at index %zu", i);
        }
        if (k >= nargs) jx_fail(rc, at, "TypeError: not enough arguments for format string");
        jv v = args[k++];
        if (f.conv == 's' || f.conv == 'r') {
            sbuf t;
            sb_init(&t, rc);
            if (f.conv == 's')
                jv_to_str(&t, v);
            else
                jv_repr(&t, v);
            size_t len = t.len;
            if (f.prec >= 0) len = u8_offset(t.p ? t.p : "", t.len, (size_t)f.prec);
            pad_field(&b, &f, "", "", t.p ? t.p : "", len, false);
        } else if (f.conv == 'a') {
            jx_fail(rc, at, "format: %%a is not supported");
        } else if (f.conv == 'c') {
            char u[8];
            size_t n;
            if (v.t == JV_STR) {
                if (u8_len(v.u.s->s, v.u.s->len) != 1)
                    jx_fail(rc, at, "TypeError: %%c requires int or char");
                pad_field(&b, &f, "", "", v.u.s->s, v.u.s->len, false);
                continue;
            }
            if (v.t != JV_INT && v.t != JV_BOOL)
                jx_fail(rc, at, "TypeError: %%c requires int or char");
            int64_t cp = v.t == JV_INT ? v.u.i : v.u.b;
            if (cp < 0 || cp > 0x10FFFF)
                jx_fail(rc, at, "OverflowError: %%c arg not in range(0x110000)");
            if (cp < 0x80) {
                u[0] = (char)cp;
                n = 1;
            } else if (cp < 0x800) {
                u[0] = (char)(0xC0 | (cp >> 6));
                u[1] = (char)(0x80 | (cp & 0x3F));
                n = 2;
            } else if (cp < 0x10000) {
                u[0] = (char)(0xE0 | (cp >> 12));
                u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
                u[2] = (char)(0x80 | (cp & 0x3F));
                n = 3;
            } else {
                u[0] = (char)(0xF0 | (cp >> 18));
                u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
                u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
                u[3] = (char)(0x80 | (cp & 0x3F));
                n = 4;
            }
            pad_field(&b, &f, "", "", u, n, false);
        } else if (strchr("diuoxX", f.conv))
            format_int(rc, at, &b, &f, v);
        else
            format_float(rc, at, &b, &f, v);
    }
    if (k < nargs)
        jx_fail(rc, at, "TypeError: not all arguments converted during string formatting");
    return sb_val(&b);
}

/* ---- methods ----------------------------------------------------------------------------------
 */

#define METHOD(name) static jv name(rctx *rc, const node *at, jv self, jargs *a)

METHOD(m_strip) {
    return strip_impl(rc, at, self, jx_arg(a, 0, "chars", jv_none()), true, true);
}
METHOD(m_lstrip) {
    return strip_impl(rc, at, self, jx_arg(a, 0, "chars", jv_none()), true, false);
}
METHOD(m_rstrip) {
    return strip_impl(rc, at, self, jx_arg(a, 0, "chars", jv_none()), false, true);
}
METHOD(m_split) {
    jv mx = jx_arg(a, 1, "maxsplit", jv_int(-1));
    return split_impl(rc, at, self.u.s, jx_arg(a, 0, "sep", jv_none()),
                      want_int(rc, at, mx, "maxsplit"), false);
}
METHOD(m_rsplit) {
    jv mx = jx_arg(a, 1, "maxsplit", jv_int(-1));
    return split_impl(rc, at, self.u.s, jx_arg(a, 0, "sep", jv_none()),
                      want_int(rc, at, mx, "maxsplit"), true);
}
METHOD(m_splitlines) {
    const jstr *s = self.u.s;
    jv out = jv_list_new(rc, 4, 0);
    bool keep = jv_truthy(jx_arg(a, 0, "keepends", jv_bool(false)));
    size_t i = 0;
    while (i < s->len) {
        size_t j = i;
        while (j < s->len && s->s[j] != '\n' && s->s[j] != '\r') j++;
        size_t e = j;
        if (j < s->len) e += (s->s[j] == '\r' && j + 1 < s->len && s->s[j + 1] == '\n') ? 2 : 1;
        jv_list_push(rc, out, jv_str(rc, s->s + i, (keep ? e : j) - i));
        i = e;
    }
    return out;
}
METHOD(m_startswith) {
    return jv_bool(affix(rc, at, self.u.s, jx_arg(a, 0, NULL, jv_undef()), false));
}
METHOD(m_endswith) {
    return jv_bool(affix(rc, at, self.u.s, jx_arg(a, 0, NULL, jv_undef()), true));
}
METHOD(m_replace) {
    const jstr *o = want_str(rc, at, jx_arg(a, 0, NULL, jv_undef()), "replace() argument 1");
    const jstr *n = want_str(rc, at, jx_arg(a, 1, NULL, jv_undef()), "replace() argument 2");
    return replace_impl(rc, self.u.s, o, n,
                        want_int(rc, at, jx_arg(a, 2, "count", jv_int(-1)), "count"));
}
METHOD(m_upper) {
    return case_map(rc, self, 1);
}
METHOD(m_lower) {
    return case_map(rc, self, 0);
}
METHOD(m_title) {
    return case_map(rc, self, 2);
}
METHOD(m_capitalize) {
    return case_map(rc, self, 3);
}
METHOD(m_swapcase) {
    return case_map(rc, self, 4);
}
static jv find_impl(rctx *rc, const node *at, jv self, jargs *a, bool rev, bool raise) {
    const jstr *s = self.u.s,
               *sub = want_str(rc, at, jx_arg(a, 0, NULL, jv_undef()), "find() argument");
    int64_t r = -1;
    if (!rev) {
        const char *f = find_sub(s, 0, sub);
        if (f) r = cp_index(s, (size_t)(f - s->s));
    } else if (sub->len <= s->len) {
        jx_step(rc, at, jx_bytes_cost(s->len) * (sub->len / JX_BYTES_PER_STEP + 1));
        for (size_t k = s->len - sub->len + 1; k-- > 0;)
            if (!memcmp(s->s + k, sub->s, sub->len)) {
                r = cp_index(s, k);
                break;
            }
    }
    if (r < 0 && raise) jx_fail(rc, at, "ValueError: substring not found");
    return jv_int(r);
}
METHOD(m_find) {
    return find_impl(rc, at, self, a, false, false);
}
METHOD(m_rfind) {
    return find_impl(rc, at, self, a, true, false);
}
METHOD(m_sindex) {
    return find_impl(rc, at, self, a, false, true);
}
METHOD(m_scount) {
    const jstr *s = self.u.s,
               *sub = want_str(rc, at, jx_arg(a, 0, NULL, jv_undef()), "count() argument");
    if (!sub->len) return jv_int((int64_t)u8_len(s->s, s->len) + 1);
    int64_t n = 0;
    for (const char *f = find_sub(s, 0, sub); f;
         f = find_sub(s, (size_t)(f - s->s) + sub->len, sub))
        n++;
    return jv_int(n);
}
METHOD(m_join) {
    jlist *l = jv_iter(rc, at, jx_arg(a, 0, NULL, jv_undef()));
    sbuf b;
    sb_init(&b, rc);
    for (size_t i = 0; i < l->n; i++) {
        if (l->v[i].t != JV_STR)
            jx_fail(rc, at, "TypeError: sequence item %zu: expected str instance, %s found", i,
                    jv_typename(l->v[i]));
        if (i) sb_add(&b, self.u.s->s, self.u.s->len);
        sb_add(&b, l->v[i].u.s->s, l->v[i].u.s->len);
    }
    return sb_val(&b);
}
METHOD(m_format) {
    return format_impl(rc, at, self.u.s, a);
}
static jv char_class(jv self, int (*pred)(int), bool need_cased) {
    const jstr *s = self.u.s;
    if (!s->len) return jv_bool(false);
    bool cased = false;
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->s[i];
        if (c >= 0x80) return jv_bool(false);
        if (pred == islower || pred == isupper) {
            if (isalpha(c)) {
                cased = true;
                if (!pred(c)) return jv_bool(false);
            }
        } else if (!pred(c))
            return jv_bool(false);
    }
    return jv_bool(!need_cased || cased);
}
METHOD(m_isdigit) {
    return char_class(self, isdigit, false);
}
METHOD(m_isalpha) {
    return char_class(self, isalpha, false);
}
METHOD(m_isalnum) {
    return char_class(self, isalnum, false);
}
METHOD(m_isspace) {
    return char_class(self, isspace, false);
}
METHOD(m_islower) {
    return char_class(self, islower, true);
}
METHOD(m_isupper) {
    return char_class(self, isupper, true);
}
METHOD(m_zfill) {
    int64_t w = want_int(rc, at, jx_arg(a, 0, NULL, jv_int(0)), "width");
    const jstr *s = self.u.s;
    int64_t len = (int64_t)u8_len(s->s, s->len);
    if (w <= len) return self;
    need_bytes(rc, w);
    sbuf b;
    sb_init(&b, rc);
    size_t i = 0;
    if (s->len && (s->s[0] == '-' || s->s[0] == '+')) sb_addc(&b, s->s[i++]);
    for (int64_t k = 0; k < w - len; k++) sb_addc(&b, '0');
    sb_add(&b, s->s + i, s->len - i);
    return sb_val(&b);
}
static jv partition_impl(rctx *rc, const node *at, jv self, jargs *a, bool rev) {
    const jstr *s = self.u.s,
               *sep = want_str(rc, at, jx_arg(a, 0, NULL, jv_undef()), "partition() argument");
    if (!sep->len) jx_fail(rc, at, "ValueError: empty separator");
    const char *f = NULL;
    if (!rev)
        f = find_sub(s, 0, sep);
    else if (sep->len <= s->len) {
        jx_step(rc, at, jx_bytes_cost(s->len) * (sep->len / JX_BYTES_PER_STEP + 1));
        for (size_t k = s->len - sep->len + 1; k-- > 0;)
            if (!memcmp(s->s + k, sep->s, sep->len)) {
                f = s->s + k;
                break;
            }
    }
    jv t = jv_list_new(rc, 3, JL_TUPLE);
    if (!f) {
        jv e = jv_str(rc, "", 0);
        jv_list_push(rc, t, rev ? e : self);
        jv_list_push(rc, t, e);
        jv_list_push(rc, t, rev ? self : e);
        return t;
    }
    size_t off = (size_t)(f - s->s);
    jv_list_push(rc, t, jv_str(rc, s->s, off));
    jv_list_push(rc, t, jv_strv((jstr *)sep));
    jv_list_push(rc, t, jv_str(rc, s->s + off + sep->len, s->len - off - sep->len));
    return t;
}
METHOD(m_partition) {
    return partition_impl(rc, at, self, a, false);
}
METHOD(m_rpartition) {
    return partition_impl(rc, at, self, a, true);
}
METHOD(m_removeprefix) {
    const jstr *s = self.u.s,
               *p = want_str(rc, at, jx_arg(a, 0, NULL, jv_undef()), "removeprefix() argument");
    if (p->len <= s->len && !memcmp(s->s, p->s, p->len))
        return jv_str(rc, s->s + p->len, s->len - p->len);
    return self;
}
METHOD(m_removesuffix) {
    const jstr *s = self.u.s,
               *p = want_str(rc, at, jx_arg(a, 0, NULL, jv_undef()), "removesuffix() argument");
    if (p->len && p->len <= s->len && !memcmp(s->s + s->len - p->len, p->s, p->len))
        return jv_str(rc, s->s, s->len - p->len);
    return self;
}

METHOD(m_get) {
    jv key = jx_arg(a, 0, NULL, jv_undef());
    if (!jv_dict_has(rc, at, self, key)) return jx_arg(a, 1, NULL, jv_none());
    jv *v = jv_dict_find(rc, self, key);
    return v ? *v : jx_arg(a, 1, NULL, jv_none());
}
METHOD(m_keys) {
    jv l = jv_list_new(rc, self.u.d->n, 0);
    for (size_t i = 0; i < self.u.d->n; i++) jv_list_push(rc, l, self.u.d->k[i]);
    return l;
}
METHOD(m_values) {
    jv l = jv_list_new(rc, self.u.d->n, 0);
    for (size_t i = 0; i < self.u.d->n; i++) jv_list_push(rc, l, self.u.d->v[i]);
    return l;
}
METHOD(m_items) {
    jv l = jv_list_new(rc, self.u.d->n, 0);
    for (size_t i = 0; i < self.u.d->n; i++) {
        jv t = jv_list_new(rc, 2, JL_TUPLE);
        jv_list_push(rc, t, self.u.d->k[i]);
        jv_list_push(rc, t, self.u.d->v[i]);
        jv_list_push(rc, l, t);
    }
    return l;
}
METHOD(m_copy) {
    if (self.t == JV_DICT) {
        jv d = jv_dict_new(rc, self.u.d->n, 0);
        for (size_t i = 0; i < self.u.d->n; i++) jv_dict_set(rc, d, self.u.d->k[i], self.u.d->v[i]);
        return d;
    }
    jv l = jv_list_new(rc, self.u.l->n, self.flags);
    for (size_t i = 0; i < self.u.l->n; i++) jv_list_push(rc, l, self.u.l->v[i]);
    return l;
}
METHOD(m_lindex) {
    jv x = jx_arg(a, 0, NULL, jv_undef());
    jx_step(rc, at, self.u.l->n);
    for (size_t i = 0; i < self.u.l->n; i++)
        if (jv_eq(rc, self.u.l->v[i], x)) return jv_int((int64_t)i);
    jx_fail(rc, at, "ValueError: value is not in list");
}
METHOD(m_lcount) {
    jv x = jx_arg(a, 0, NULL, jv_undef());
    int64_t n = 0;
    jx_step(rc, at, self.u.l->n);
    for (size_t i = 0; i < self.u.l->n; i++) n += jv_eq(rc, self.u.l->v[i], x);
    return jv_int(n);
}

typedef struct method_def {
    const char *name;
    jbuiltin fn;
} method_def;

static const method_def k_str_methods[] = {{"strip", m_strip},
                                           {"lstrip", m_lstrip},
                                           {"rstrip", m_rstrip},
                                           {"split", m_split},
                                           {"rsplit", m_rsplit},
                                           {"splitlines", m_splitlines},
                                           {"startswith", m_startswith},
                                           {"endswith", m_endswith},
                                           {"replace", m_replace},
                                           {"upper", m_upper},
                                           {"lower", m_lower},
                                           {"title", m_title},
                                           {"capitalize", m_capitalize},
                                           {"swapcase", m_swapcase},
                                           {"casefold", m_lower},
                                           {"find", m_find},
                                           {"rfind", m_rfind},
                                           {"index", m_sindex},
                                           {"count", m_scount},
                                           {"join", m_join},
                                           {"format", m_format},
                                           {"isdigit", m_isdigit},
                                           {"isnumeric", m_isdigit},
                                           {"isdecimal", m_isdigit},
                                           {"isalpha", m_isalpha},
                                           {"isalnum", m_isalnum},
                                           {"isspace", m_isspace},
                                           {"islower", m_islower},
                                           {"isupper", m_isupper},
                                           {"zfill", m_zfill},
                                           {"partition", m_partition},
                                           {"rpartition", m_rpartition},
                                           {"removeprefix", m_removeprefix},
                                           {"removesuffix", m_removesuffix},
                                           {NULL, NULL}};
static const method_def k_dict_methods[] = {{"get", m_get},       {"keys", m_keys},
                                            {"values", m_values}, {"items", m_items},
                                            {"copy", m_copy},     {NULL, NULL}};
static const method_def k_list_methods[] = {
    {"index", m_lindex}, {"count", m_lcount}, {"copy", m_copy}, {NULL, NULL}};
static const char *const k_dict_unsafe[] = {"clear",      "pop",    "popitem",
                                            "setdefault", "update", NULL};
static const char *const k_list_unsafe[] = {"append", "clear",  "pop",    "reverse", "insert",
                                            "sort",   "extend", "remove", NULL};

static jbuiltin find_method(const method_def *t, const char *name) {
    for (; t->name; t++)
        if (!strcmp(t->name, name)) return t->fn;
    return NULL;
}

static bool in_list(const char *const *l, const char *name) {
    for (; *l; l++)
        if (!strcmp(*l, name)) return true;
    return false;
}

/* ---- attribute / item lookup ------------------------------------------------------------------
 */

static jv index_seq(rctx *rc, jv obj, int64_t i) {
    if (obj.t == JV_LIST) {
        int64_t n = (int64_t)obj.u.l->n;
        if (i < 0) i += n;
        if (i < 0 || i >= n)
            return undef_msg(rc, 0, "%s object has no element %s", jv_typename(obj), "");
        return obj.u.l->v[i];
    }
    const jstr *s = obj.u.s;
    jx_step(rc, NULL, jx_bytes_cost(s->len));
    int64_t n = (int64_t)u8_len(s->s, s->len);
    if (i < 0) i += n;
    if (i < 0 || i >= n) return undef_msg(rc, 0, "%s object has no element %s", "str", "");
    size_t b = u8_offset(s->s, s->len, (size_t)i);
    return jv_str(rc, s->s + b, u8_next(s->s, s->len, b) - b);
}

static jv method_of(rctx *rc, jv obj, const char *name) {
    jbuiltin fn = NULL;
    if (obj.t == JV_STR) fn = find_method(k_str_methods, name);
    if (obj.t == JV_DICT && !obj.flags) {
        fn = find_method(k_dict_methods, name);
        if (!fn && in_list(k_dict_unsafe, name))
            return undef_msg(rc, JU_UNSAFE, "access to attribute '%s' of '%s' object is unsafe.",
                             name, "dict");
    }
    if (obj.t == JV_LIST && !(obj.flags & JL_ITER)) {
        fn = find_method(k_list_methods, name);
        if (!fn && !(obj.flags & JL_TUPLE) && in_list(k_list_unsafe, name))
            return undef_msg(rc, JU_UNSAFE, "access to attribute '%s' of '%s' object is unsafe.",
                             name, "list");
    }
    if (obj.t == JV_FUNC && obj.u.fn->kind == JF_BUILTIN && obj.u.fn->self.t == JV_DICT &&
        obj.u.fn->self.flags == 0 && !strcmp(name, "next") && !strcmp(obj.u.fn->name, "cycler"))
        return jv_undef();
    if (fn) return jx_builtin_fn(rc, name, fn, obj);
    return jv_undef();
}

jv jx_getattr(rctx *rc, const node *at, jv obj, jv key, bool attr_first) {
    const char *name = key.t == JV_STR ? key.u.s->s : NULL;
    if (name && name[0] == '_' && attr_first)
        return jv_undef(); /* sandbox: no private attributes */
    if (attr_first && name) {
        jv m = method_of(rc, obj, name);
        if (m.t != JV_UNDEF || (m.flags & JU_UNSAFE)) return m;
    }
    switch ((jv_type)obj.t) {
    case JV_DICT: {
        jv *v = jv_dict_find(rc, obj, key);
        if (v) return *v;
        break;
    }
    case JV_LIST:
        if (obj.flags & JL_ITER) break;
        if (key.t == JV_INT || key.t == JV_BOOL)
            return index_seq(rc, obj, key.t == JV_INT ? key.u.i : key.u.b);
        break;
    case JV_STR:
        if (key.t == JV_INT || key.t == JV_BOOL)
            return index_seq(rc, obj, key.t == JV_INT ? key.u.i : key.u.b);
        break;
    case JV_FUNC: {
        /* cycler / joiner state objects expose methods through their dict */
        jv self = obj.u.fn->self;
        if (name && self.t == JV_DICT) {
            jv *v = jv_dict_find_s(self, name);
            if (v && v->t == JV_FUNC) return *v;
        }
        break;
    }
    default:
        break;
    }
    if (!attr_first && name) {
        jv m = method_of(rc, obj, name);
        if (m.t != JV_UNDEF || (m.flags & JU_UNSAFE)) return m;
    }
    char kb[64];
    if (name)
        snprintf(kb, sizeof kb, "'%.50s'", name);
    else {
        sbuf t;
        sb_init(&t, rc);
        jv_repr(&t, key);
        snprintf(kb, sizeof kb, "%.*s", (int)(t.len > 50 ? 50 : t.len), t.p ? t.p : "");
    }
    char tn[48];
    snprintf(tn, sizeof tn, "'%s object'", jv_typename(obj));
    return undef_msg(rc, 0, "%s has no attribute %s", tn, kb);
}

/* ---- calls ------------------------------------------------------------------------------------
 */

jv jx_call(rctx *rc, const node *at, jv fn, jargs *a) {
    if (fn.t == JV_UNDEF) {
        if (fn.flags & JU_UNSAFE) jx_fail(rc, at, "SecurityError: %s", fn.u.uname);
        if (fn.u.uname) jx_fail(rc, at, "UndefinedError: %s", fn.u.uname);
        jx_fail(rc, at, "UndefinedError: called an undefined value");
    }
    if (fn.t != JV_FUNC) jx_fail(rc, at, "TypeError: '%s' object is not callable", jv_typename(fn));
    jfunc *f = fn.u.fn;
    if (f->kind == JF_BUILTIN) {
        if (f->fn != m_startswith && f->fn != m_endswith) /* these compare only the affix */
            jx_step_args(rc, at, f->self, a);
        return f->fn(rc, at, f->self, a);
    }
    return jx_call_macro(rc, at, f, a);
}

/* ---- globals ----------------------------------------------------------------------------------
 */

METHOD(g_range) {
    int np = npositional(a);
    if (np < 1 || np > 3) jx_fail(rc, at, "TypeError: range expected 1 to 3 arguments");
    int64_t lo = 0, hi, st = 1;
    if (np == 1)
        hi = want_int(rc, at, a->v[0], "range() argument");
    else {
        lo = want_int(rc, at, jx_arg(a, 0, NULL, jv_int(0)), "range() argument");
        hi = want_int(rc, at, jx_arg(a, 1, NULL, jv_int(0)), "range() argument");
        if (np == 3) st = want_int(rc, at, jx_arg(a, 2, NULL, jv_int(1)), "range() argument");
    }
    if (st == 0) jx_fail(rc, at, "ValueError: range() arg 3 must not be zero");
    double cnt = st > 0 ? ceil(((double)hi - (double)lo) / (double)st)
                        : ceil(((double)lo - (double)hi) / (double)-st);
    if (cnt < 0) cnt = 0;
    if (cnt > 100000)
        jx_fail(rc, at,
                "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE "
                "(100000).");
    jx_step(rc, at, (uint64_t)cnt);
    jv l = jv_list_new(rc, (size_t)cnt, 0);
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) jv_list_push(rc, l, jv_int(i));
    return l;
}

METHOD(g_dict) {
    jv d = jv_dict_new(rc, (size_t)a->n, 0);
    for (int i = 0; i < a->n; i++) {
        if (!a->kw[i]) {
            jv src = a->v[i];
            if (src.t == JV_DICT && !src.flags) {
                for (size_t k = 0; k < src.u.d->n; k++)
                    jv_dict_set(rc, d, src.u.d->k[k], src.u.d->v[k]);
            } else {
                jlist *l = jv_iter(rc, at, src);
                for (size_t k = 0; k < l->n; k++) {
                    jlist *pr = jv_iter(rc, at, l->v[k]);
                    if (pr->n != 2)
                        jx_fail(rc, at,
                                "ValueError: dictionary update sequence element has wrong length");
                    jv_dict_set(rc, d, pr->v[0], pr->v[1]);
                }
            }
            continue;
        }
        jv_dict_set(rc, d, jv_cstr(rc, a->kw[i]), a->v[i]);
    }
    return d;
}

METHOD(g_namespace) {
    jv d = g_dict(rc, at, self, a);
    for (size_t i = 0; i < d.u.d->n; i++)
        if (d.u.d->k[i].t == JV_STR && d.u.d->k[i].u.s->s[0] == '_')
            jx_fail(rc, at,
                    "SecurityError: Chat templates cannot store underscore-prefixed attributes on "
                    "a namespace");
    d.flags = JD_NS;
    return d;
}

METHOD(g_raise) {
    jv m = jx_arg(a, 0, "message", jv_undef());
    sbuf b;
    sb_init(&b, rc);
    jv_to_str(&b, m);
    sb_addc(&b, '\0');
    jx_fail(rc, at, "raise_exception: %s", b.p);
}

METHOD(g_strftime) {
    jv f = jx_arg(a, 0, "format", jv_undef());
    const jstr *fmt = want_str(rc, at, f, "strftime_now() argument");
    time_t now = rc->p.now ? rc->p.now : time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char out[1024];
    size_t n = fmt->len ? strftime(out, sizeof out, fmt->s, &tm) : 0;
    if (fmt->len && n == 0) jx_fail(rc, at, "strftime_now: result too long or empty");
    return jv_str(rc, out, n);
}

METHOD(cycler_next) {
    jv items = *jv_dict_find_s(self, "items");
    jv *pos = jv_dict_find_s(self, "pos");
    if (!items.u.l->n) jx_fail(rc, at, "cycler: no items");
    jv r = items.u.l->v[pos->u.i % (int64_t)items.u.l->n];
    pos->u.i++;
    jv *cur = jv_dict_find_s(self, "current");
    *cur = items.u.l->v[pos->u.i % (int64_t)items.u.l->n];
    return r;
}
METHOD(cycler_reset) {
    jv_dict_find_s(self, "pos")->u.i = 0;
    return jv_none();
}
METHOD(g_cycler) {
    jv st = jv_dict_new(rc, 5, 0);
    jv items = jv_list_new(rc, (size_t)a->n, 0);
    for (int i = 0; i < a->n; i++)
        if (!a->kw[i]) jv_list_push(rc, items, a->v[i]);
    jv_dict_set(rc, st, jv_cstr(rc, "items"), items);
    jv_dict_set(rc, st, jv_cstr(rc, "pos"), jv_int(0));
    jv_dict_set(rc, st, jv_cstr(rc, "current"), items.u.l->n ? items.u.l->v[0] : jv_undef());
    jv_dict_set(rc, st, jv_cstr(rc, "next"), jx_builtin_fn(rc, "next", cycler_next, st));
    jv_dict_set(rc, st, jv_cstr(rc, "reset"), jx_builtin_fn(rc, "reset", cycler_reset, st));
    return jx_builtin_fn(rc, "cycler", NULL, st);
}
METHOD(joiner_call) {
    jv *used = jv_dict_find_s(self, "used");
    if (!used->u.b) {
        used->u.b = true;
        return jv_str(rc, "", 0);
    }
    return *jv_dict_find_s(self, "sep");
}
METHOD(g_joiner) {
    jv st = jv_dict_new(rc, 2, 0);
    jv_dict_set(rc, st, jv_cstr(rc, "sep"), jx_arg(a, 0, "sep", jv_str(rc, ", ", 2)));
    jv_dict_set(rc, st, jv_cstr(rc, "used"), jv_bool(false));
    return jx_builtin_fn(rc, "joiner", joiner_call, st);
}

jv jx_global(rctx *rc, const char *name) {
    static const method_def globals[] = {{"range", g_range},           {"dict", g_dict},
                                         {"namespace", g_namespace},   {"raise_exception", g_raise},
                                         {"strftime_now", g_strftime}, {"cycler", g_cycler},
                                         {"joiner", g_joiner},         {NULL, NULL}};
    jbuiltin fn = find_method(globals, name);
    if (fn) return jx_builtin_fn(rc, name, fn, jv_none());
    char msg[128];
    snprintf(msg, sizeof msg, "'%.100s' is undefined", name);
    jv u = jv_undef();
    u.u.uname = jx_str_new(rc, msg, strlen(msg))->s;
    return u;
}

/* ---- filters ----------------------------------------------------------------------------------
 */

#define FILTER(name) static jv name(rctx *rc, const node *at, jv in, jargs *a)

static void need_defined(rctx *rc, const node *at, jv v) {
    if (v.t == JV_UNDEF) {
        if (v.flags & JU_UNSAFE) jx_fail(rc, at, "SecurityError: %s", v.u.uname);
        jx_fail(rc, at, "UndefinedError: %s", v.u.uname ? v.u.uname : "value is undefined");
    }
}

static jstr *cstr_j(rctx *rc, const char *s) {
    return jx_str_new(rc, s, strlen(s));
}

/* transformers' tojson: json.dumps(x, ensure_ascii=False, indent, separators, sort_keys) */
FILTER(f_tojson) {
    jv ind = jx_arg(a, 0, "indent", jv_none());
    const jstr *indent = NULL;
    if (ind.t == JV_STR)
        indent = ind.u.s;
    else if (ind.t != JV_NONE) { /* an int: that many spaces (none when negative) */
        int64_t n = want_int(rc, at, ind, "indent");
        if (n < 0) n = 0;
        need_bytes(rc, n);
        jstr *sp = jx_str_new(rc, "", 0);
        if (n) {
            sp = jx_alloc(rc, sizeof(jstr) + (size_t)n + 1);
            sp->len = (size_t)n;
            memset(sp->s, ' ', (size_t)n);
            sp->s[n] = '\0';
        }
        indent = sp;
    }
    const jstr *isep = cstr_j(rc, indent ? "," : ", "), *ksep = cstr_j(rc, ": ");
    jv seps = jx_arg(a, 1 << 30, "separators", jv_none());
    if (seps.t != JV_NONE) {
        if (seps.t != JV_LIST || (seps.flags & JL_ITER) || seps.u.l->n != 2 ||
            seps.u.l->v[0].t != JV_STR || seps.u.l->v[1].t != JV_STR)
            jx_fail(rc, at, "tojson: separators must be a pair of strings");
        isep = seps.u.l->v[0].u.s;
        ksep = seps.u.l->v[1].u.s;
    }
    bool sort = jv_truthy(jx_arg(a, 1 << 30, "sort_keys", jv_bool(false)));
    if (jv_truthy(jx_arg(a, 1 << 30, "ensure_ascii", jv_bool(false))))
        jx_fail(rc, at, "tojson: ensure_ascii=True is not supported");
    sbuf b;
    sb_init(&b, rc);
    jv_to_json(rc, at, &b, in, indent, isep, ksep, sort);
    return sb_val(&b);
}

FILTER(f_string) {
    return str_of(rc, in);
}

FILTER(f_trim) {
    jv s = str_of(rc, in);
    return strip_impl(rc, at, s, jx_arg(a, 0, "chars", jv_none()), true, true);
}

FILTER(f_length) {
    (void)a;
    return jv_int(jv_len(rc, at, in));
}

static jv attr_path(rctx *rc, const node *at, jv item, jv attr) {
    /* "a.b" and integer parts, as jinja's make_attrgetter */
    if (attr.t == JV_INT) return jx_getattr(rc, at, item, attr, false);
    const jstr *s = want_str(rc, at, attr, "attribute");
    size_t i = 0;
    while (i <= s->len) {
        size_t j = i;
        while (j < s->len && s->s[j] != '.') j++;
        jv key = jv_str(rc, s->s + i, j - i);
        bool digits = j > i;
        for (size_t k = i; k < j; k++) digits &= isdigit((unsigned char)s->s[k]) != 0;
        if (digits) key = jv_int(strtoll(key.u.s->s, NULL, 10));
        if (item.t == JV_UNDEF) need_defined(rc, at, item);
        item = jx_getattr(rc, at, item, key, false);
        i = j + 1;
    }
    return item;
}

FILTER(f_join) {
    jlist *l = jv_iter(rc, at, in);
    jv d = jx_arg(a, 0, "d", jv_str(rc, "", 0));
    jv attr = jx_arg(a, 1, "attribute", jv_none());
    jstr *sep = want_str(rc, at, jv_tostring(rc, d), "join separator");
    sbuf b;
    sb_init(&b, rc);
    for (size_t i = 0; i < l->n; i++) {
        if (i) sb_add(&b, sep->s, sep->len);
        jv v = attr.t == JV_NONE ? l->v[i] : attr_path(rc, at, l->v[i], attr);
        jv_to_str(&b, v);
    }
    return sb_val(&b);
}

FILTER(f_upper) {
    return case_map(rc, str_of(rc, in), 1);
}
FILTER(f_lower) {
    return case_map(rc, str_of(rc, in), 0);
}
FILTER(f_capitalize) {
    return case_map(rc, str_of(rc, in), 3);
}
FILTER(f_title) {
    /* jinja: words split on spaces, brackets, braces; each word capitalized */
    jv s = str_of(rc, in);
    jstr *r = jx_str_new(rc, s.u.s->s, s.u.s->len);
    bool start = true;
    for (size_t i = 0; i < r->len; i++) {
        unsigned char c = (unsigned char)r->s[i];
        if (isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
            start = true; /* jinja: re.split(r"([-\s({\[<]+)") then capitalize each piece */
            continue;
        }
        r->s[i] = (char)(start ? toupper(c) : tolower(c));
        start = false;
    }
    return jv_strv(r);
}

FILTER(f_replace) {
    jv s = str_of(rc, in);
    jv o = str_of(rc, jx_arg(a, 0, "old", jv_undef())),
       n = str_of(rc, jx_arg(a, 1, "new", jv_undef()));
    jv cnt = jx_arg(a, 2, "count", jv_none());
    return replace_impl(rc, s.u.s, o.u.s, n.u.s,
                        cnt.t == JV_NONE ? -1 : want_int(rc, at, cnt, "count"));
}

FILTER(f_default) {
    jv d = jx_arg(a, 0, "default_value", jv_str(rc, "", 0));
    bool boolean = jv_truthy(jx_arg(a, 1, "boolean", jv_bool(false)));
    if (in.t == JV_UNDEF || (boolean && !jv_truthy(in))) return d;
    return in;
}

FILTER(f_list) {
    (void)a;
    jlist *l = jv_iter(rc, at, in);
    jv out = jv_list_new(rc, l->n, 0);
    for (size_t i = 0; i < l->n; i++) jv_list_push(rc, out, l->v[i]);
    return out;
}

FILTER(f_items) {
    (void)a;
    if (in.t == JV_UNDEF) return jv_list_new(rc, 0, JL_ITER);
    if (in.t != JV_DICT || in.flags)
        jx_fail(rc, at, "TypeError: Can only get item pairs from a mapping.");
    jv l = m_items(rc, at, in, a);
    l.flags = JL_ITER;
    return l;
}

static jv sort_key(rctx *rc, jv v, bool case_sensitive) {
    if (!case_sensitive && v.t == JV_STR) return case_map(rc, v, 0);
    return v;
}

/* stable merge sort of keys with jv_cmp */
static void msort(rctx *rc, const node *at, jv *keys, jv *vals, size_t n, jv *tk, jv *tv,
                  bool rev) {
    if (n < 2) return;
    size_t h = n / 2;
    msort(rc, at, keys, vals, h, tk, tv, rev);
    msort(rc, at, keys + h, vals + h, n - h, tk, tv, rev);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c = jv_cmp(rc, at, keys[j], keys[i]);
        bool take_right = rev ? c > 0 : c < 0;
        if (take_right) {
            tk[k] = keys[j];
            tv[k++] = vals[j++];
        } else {
            tk[k] = keys[i];
            tv[k++] = vals[i++];
        }
    }
    while (i < h) {
        tk[k] = keys[i];
        tv[k++] = vals[i++];
    }
    while (j < n) {
        tk[k] = keys[j];
        tv[k++] = vals[j++];
    }
    memcpy(keys, tk, n * sizeof(jv));
    memcpy(vals, tv, n * sizeof(jv));
}

static jv sorted(rctx *rc, const node *at, jlist *l, bool rev, bool cs, jv attr, int by_dict_part) {
    size_t n = l->n;
    jx_step(rc, at, n * 4); /* n log n comparisons */
    jv *keys = jx_alloc(rc, (n + 1) * sizeof(jv)), *vals = jx_alloc(rc, (n + 1) * sizeof(jv));
    jv *tk = jx_alloc(rc, (n + 1) * sizeof(jv)), *tv = jx_alloc(rc, (n + 1) * sizeof(jv));
    for (size_t i = 0; i < n; i++) {
        jv k = l->v[i];
        if (by_dict_part >= 0)
            k = k.u.l->v[by_dict_part];
        else if (attr.t != JV_NONE)
            k = attr_path(rc, at, k, attr);
        keys[i] = sort_key(rc, k, cs);
        vals[i] = l->v[i];
    }
    msort(rc, at, keys, vals, n, tk, tv, rev);
    jv out = jv_list_new(rc, n, 0);
    for (size_t i = 0; i < n; i++) jv_list_push(rc, out, vals[i]);
    return out;
}

FILTER(f_sort) {
    bool rev = jv_truthy(jx_arg(a, 0, "reverse", jv_bool(false)));
    bool cs = jv_truthy(jx_arg(a, 1, "case_sensitive", jv_bool(false)));
    jv attr = jx_arg(a, 2, "attribute", jv_none());
    return sorted(rc, at, jv_iter(rc, at, in), rev, cs, attr, -1);
}

FILTER(f_dictsort) {
    if (in.t != JV_DICT || in.flags) jx_fail(rc, at, "TypeError: dictsort expects a mapping");
    bool cs = jv_truthy(jx_arg(a, 0, "case_sensitive", jv_bool(false)));
    jv by = jx_arg(a, 1, "by", jv_str(rc, "key", 3));
    bool rev = jv_truthy(jx_arg(a, 2, "reverse", jv_bool(false)));
    int part = by.t == JV_STR && !strcmp(by.u.s->s, "value") ? 1 : 0;
    jv items = m_items(rc, at, in, a);
    return sorted(rc, at, items.u.l, rev, cs, jv_none(), part);
}

static jv select_impl(rctx *rc, const node *at, jv in, jargs *a, bool attr_mode, bool keep) {
    jlist *l = jv_iter(rc, at, in);
    jv out = jv_list_new(rc, l->n, JL_ITER);
    int base = attr_mode ? 1 : 0;
    jv attr = attr_mode ? jx_arg(a, 0, NULL, jv_undef()) : jv_none();
    jv tname = jx_arg(a, base, NULL, jv_none());
    jtest t = NULL;
    if (tname.t == JV_STR) {
        t = strlen(tname.u.s->s) == tname.u.s->len ? jx_find_test(tname.u.s->s) : NULL;
        if (!t) jx_fail(rc, at, "TemplateRuntimeError: No test named '%s' found.", tname.u.s->s);
    }
    /* remaining positional args go to the test */
    jargs ta = {0};
    ta.v = jx_alloc(rc, (size_t)(a->n + 1) * sizeof(jv));
    ta.kw = jx_alloc(rc, (size_t)(a->n + 1) * sizeof(char *));
    int p = 0;
    for (int i = 0; i < a->n; i++) {
        if (a->kw[i]) continue;
        if (p++ <= base) continue;
        ta.v[ta.n] = a->v[i];
        ta.kw[ta.n++] = NULL;
    }
    jx_step(rc, at, l->n);
    for (size_t i = 0; i < l->n; i++) {
        jv v = attr_mode ? attr_path(rc, at, l->v[i], attr) : l->v[i];
        bool r = t ? t(rc, at, v, &ta) : jv_truthy(v);
        if (r == keep) jv_list_push(rc, out, l->v[i]);
    }
    return out;
}

FILTER(f_select) {
    return select_impl(rc, at, in, a, false, true);
}
FILTER(f_reject) {
    return select_impl(rc, at, in, a, false, false);
}
FILTER(f_selectattr) {
    return select_impl(rc, at, in, a, true, true);
}
FILTER(f_rejectattr) {
    return select_impl(rc, at, in, a, true, false);
}

FILTER(f_map) {
    jlist *l = jv_iter(rc, at, in);
    jv out = jv_list_new(rc, l->n, JL_ITER);
    jx_step(rc, at, l->n);
    if (jx_has_arg(a, 1 << 30, "attribute")) {
        jv attr = jx_arg(a, 1 << 30, "attribute", jv_undef());
        jv dflt = jx_arg(a, 1 << 30, "default", jv_undef());
        for (size_t i = 0; i < l->n; i++) {
            jv v = attr_path(rc, at, l->v[i], attr);
            if (v.t == JV_UNDEF && jx_has_arg(a, 1 << 30, "default")) v = dflt;
            jv_list_push(rc, out, v);
        }
        return out;
    }
    jv fname = jx_arg(a, 0, NULL, jv_undef());
    if (fname.t != JV_STR) jx_fail(rc, at, "map: expected a filter name or attribute=");
    jfilter f = strlen(fname.u.s->s) == fname.u.s->len ? jx_find_filter(fname.u.s->s) : NULL;
    if (!f) jx_fail(rc, at, "TemplateRuntimeError: No filter named '%s' found.", fname.u.s->s);
    jargs fa = {0};
    fa.v = jx_alloc(rc, (size_t)(a->n + 1) * sizeof(jv));
    fa.kw = jx_alloc(rc, (size_t)(a->n + 1) * sizeof(char *));
    bool skipped = false;
    for (int i = 0; i < a->n; i++) {
        if (!a->kw[i] && !skipped) {
            skipped = true;
            continue;
        }
        fa.v[fa.n] = a->v[i];
        fa.kw[fa.n++] = a->kw[i];
    }
    for (size_t i = 0; i < l->n; i++) {
        jx_step_args(rc, at, l->v[i], &fa);
        jv_list_push(rc, out, f(rc, at, l->v[i], &fa));
    }
    return out;
}

FILTER(f_first) {
    (void)a;
    jlist *l = jv_iter(rc, at, in);
    return l->n ? l->v[0] : undef_msg(rc, 0, "No first item, sequence was empty.%s%s", "", "");
}

FILTER(f_last) {
    (void)a;
    if (in.t == JV_LIST && (in.flags & JL_ITER))
        jx_fail(rc, at, "TypeError: 'generator' object is not reversible");
    jlist *l = jv_iter(rc, at, in);
    return l->n ? l->v[l->n - 1]
                : undef_msg(rc, 0, "No last item, sequence was empty.%s%s", "", "");
}

/* Python's int(s, base): 0 ok, 1 ValueError, 2 beyond int64 (a big integer in Python) */
static int py_parse_int(const jstr *str, int64_t base, int64_t *out) {
    const char *s = str->s, *e = str->s + str->len;
    if (base != 0 && (base < 2 || base > 36)) return 1;
    while (s < e && py_space((unsigned char)*s)) s++;
    while (e > s && py_space((unsigned char)e[-1])) e--;
    bool neg = false;
    if (s < e && (*s == '+' || *s == '-')) neg = *s++ == '-';
    int b = (int)base;
    bool prefixed = false;
    if (e - s >= 2 && s[0] == '0') {
        char c = (char)(s[1] | 32);
        int pb = c == 'x' ? 16 : c == 'o' ? 8 : c == 'b' ? 2 : 0;
        if (pb && (b == 0 || b == pb)) {
            b = pb;
            s += 2;
            prefixed = true;
        }
    }
    if (b == 0) b = 10;
    bool leading_zero = base == 0 && !prefixed && s < e && *s == '0';
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    bool any = false, big = false, nonzero = false, prev_us = !prefixed;
    for (; s < e; s++) {
        if (*s == '_') {
            if (prev_us) return 1; /* no leading or doubled underscores */
            prev_us = true;
            continue;
        }
        int d = isdigit((unsigned char)*s)   ? *s - '0'
                : isalpha((unsigned char)*s) ? ((unsigned char)*s | 32) - 'a' + 10
                                             : 99;
        if (d >= b) return 1;
        prev_us = false;
        any = true;
        nonzero |= d != 0;
        if (v > (lim - (uint64_t)d) / (uint64_t)b)
            big = true;
        else
            v = v * (uint64_t)b + (uint64_t)d;
    }
    if (!any || prev_us) return 1;
    if (leading_zero && nonzero) return 1; /* int('010', 0) */
    if (big) return 2;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* Python's float(s): decimal digits with single underscores between them, inf, nan */
static bool py_parse_float(rctx *rc, const jstr *str, double *out) {
    const char *s = str->s, *e = str->s + str->len;
    while (s < e && py_space((unsigned char)*s)) s++;
    while (e > s && py_space((unsigned char)e[-1])) e--;
    size_t n = (size_t)(e - s);
    char *buf = jx_alloc(rc, n + 1);
    size_t k = 0;
    const char *p = s;
    if (p < e && (*p == '+' || *p == '-')) buf[k++] = *p++;
    size_t rest = (size_t)(e - p);
    static const char *const words[] = {"inf", "infinity", "nan"};
    for (int w = 0; w < 3; w++)
        if (rest == strlen(words[w]) && !strncasecmp(p, words[w], rest)) {
            memcpy(buf + k, p, rest);
            buf[k + rest] = '\0';
            *out = strtod(buf, NULL);
            return true;
        }
    bool digits = false, exp = false, dot = false;
    for (; p < e; p++) {
        char c = *p;
        if (isdigit((unsigned char)c)) {
            digits = true;
            buf[k++] = c;
        } else if (c == '_') {
            /* only between two digits */
            if (p == s || !isdigit((unsigned char)p[-1]) || p + 1 >= e ||
                !isdigit((unsigned char)p[1]))
                return false;
        } else if (c == '.' && !dot && !exp) {
            dot = true;
            buf[k++] = c;
        } else if ((c == 'e' || c == 'E') && digits && !exp) {
            exp = true;
            buf[k++] = c;
            if (p + 1 < e && (p[1] == '+' || p[1] == '-')) buf[k++] = *++p;
            if (p + 1 >= e || !isdigit((unsigned char)p[1])) return false;
        } else
            return false;
    }
    if (!digits) return false;
    buf[k] = '\0';
    *out = strtod(buf, NULL);
    return true;
}

/* Python's int(float) for the int filter; ValueError (nan) gives the default */
static jv float_to_int(rctx *rc, const node *at, double f, jv dflt) {
    if (isnan(f)) return dflt;
    if (isinf(f)) jx_fail(rc, at, "OverflowError: cannot convert float infinity to integer");
    if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0))
        jx_fail_st(rc, HM_ERR_UNSUPPORTED, at,
                   "int: %g is beyond 64 bits (Python's big integers are not supported)", f);
    return jv_int((int64_t)f);
}

/* jinja2's do_int: int(value, base) for strings, int(value) otherwise, then int(float(value)),
 * then the default */
FILTER(f_int) {
    jv d = jx_arg(a, 0, "default", jv_int(0));
    jv base = jx_arg(a, 1, "base", jv_int(10));
    if (in.t == JV_INT) return in;
    if (in.t == JV_BOOL) return jv_int(in.u.b);
    if (in.t == JV_FLOAT) return float_to_int(rc, at, in.u.f, d);
    if (in.t != JV_STR) return d;
    int64_t v;
    if (base.t == JV_INT || base.t == JV_BOOL) {
        int r = py_parse_int(in.u.s, base.t == JV_INT ? base.u.i : base.u.b, &v);
        if (r == 0) return jv_int(v);
        if (r == 2)
            jx_fail_st(rc, HM_ERR_UNSUPPORTED, at,
                       "int: '%.40s' is beyond 64 bits (Python's big integers are not supported)",
                       in.u.s->s);
    }
    double f; /* the fallback int(float(value)) also gives the default on OverflowError */
    if (py_parse_float(rc, in.u.s, &f) && !isinf(f)) return float_to_int(rc, at, f, d);
    return d;
}

FILTER(f_float) {
    jv d = jx_arg(a, 0, "default", jv_float(0));
    if (in.t == JV_FLOAT) return in;
    if (in.t == JV_INT || in.t == JV_BOOL) return jv_float(jv_num(in));
    double f;
    if (in.t == JV_STR && py_parse_float(rc, in.u.s, &f)) return jv_float(f);
    return d;
}

FILTER(f_safe) {
    (void)a;
    return in.t == JV_STR ? in : str_of(rc, in);
}

FILTER(f_indent) {
    jv w = jx_arg(a, 0, "width", jv_int(4));
    bool first = jv_truthy(jx_arg(a, 1, "first", jv_bool(false)));
    bool blank = jv_truthy(jx_arg(a, 2, "blank", jv_bool(false)));
    jv pad;
    if (w.t == JV_STR)
        pad = w;
    else {
        int64_t n = want_int(rc, at, w, "width");
        if (n < 0) n = 0;
        need_bytes(rc, n);
        char *sp = jx_alloc(rc, (size_t)n + 1);
        memset(sp, ' ', (size_t)n);
        pad = jv_str(rc, sp, (size_t)n);
    }
    jv s = str_of(rc, in);
    /* jinja: s += "\n" is NOT done; lines split on newlines, rejoined with "\n" + pad */
    jv lines = m_splitlines(rc, at, s, &(jargs){0});
    sbuf b;
    sb_init(&b, rc);
    jlist *l = lines.u.l;
    /* str.splitlines drops a trailing empty line: jinja appends "\n" when s ends with a newline */
    bool trailing_nl =
        s.u.s->len && (s.u.s->s[s.u.s->len - 1] == '\n' || s.u.s->s[s.u.s->len - 1] == '\r');
    for (size_t i = 0; i < l->n; i++) {
        const jstr *line = l->v[i].u.s;
        if (i > 0) {
            sb_addc(&b, '\n');
            if (blank || line->len) sb_add(&b, pad.u.s->s, pad.u.s->len);
        } else if (first && (blank || line->len))
            sb_add(&b, pad.u.s->s, pad.u.s->len);
        sb_add(&b, line->s, line->len);
    }
    if (trailing_nl) sb_addc(&b, '\n');
    return sb_val(&b);
}

FILTER(f_abs) {
    (void)a;
    if (in.t == JV_INT) {
        if (in.u.i == INT64_MIN)
            jx_fail_st(rc, HM_ERR_UNSUPPORTED, at,
                       "integer result beyond 64 bits (Python's big integers are not supported)");
        return jv_int(in.u.i < 0 ? -in.u.i : in.u.i);
    }
    if (in.t == JV_BOOL) return jv_int(in.u.b);
    if (in.t == JV_FLOAT) return jv_float(fabs(in.u.f));
    jx_fail(rc, at, "TypeError: bad operand type for abs(): '%s'", jv_typename(in));
}

/* Python's round(int, ndigits < 0): half to even at 10**-ndigits */
static jv round_int(int64_t v, int64_t nd) {
    if (nd >= 0) return jv_int(v);
    if (nd < -19) return jv_int(0); /* |v| < 10**20 / 2 */
    if (nd == -19) /* 10**19 is beyond int64: 0, or +-10**19 when |v| > 5 * 10**18 */
        return v > 5000000000000000000 || v < -5000000000000000000 ? jv_undef() : jv_int(0);
    int64_t m = 1;
    for (int64_t i = 0; i < -nd; i++) m *= 10;
    int64_t q = v / m, r = v % m; /* truncated */
    if (r < 0) {
        q--;
        r += m;
    }
    if (r * 2 > m || (r * 2 == m && (q & 1))) q++;
    int64_t out;
    if (__builtin_mul_overflow(q, m, &out)) return jv_undef(); /* beyond int64 */
    return jv_int(out);
}

/* Python's round(float, ndigits): correctly rounded, half to even on the exact binary value */
static double round_float(rctx *rc, const node *at, double x, int64_t nd) {
    if (!isfinite(x) || x == 0 || nd > 323) return x;
    if (nd < -308) return 0.0 * x;
    char buf[1200];
    if (nd >= 0) {
        snprintf(buf, sizeof buf, "%.*f", (int)nd, x); /* glibc: exact, ties to even */
        return strtod(buf, NULL);
    }
    /* decimal exponent of x, then keep exp + 1 + nd significant digits */
    snprintf(buf, sizeof buf, "%.800e", x);
    int e10 = atoi(strchr(buf, 'e') + 1);
    int64_t keep = (int64_t)e10 + 1 + nd;
    double r;
    if (keep >= 1) {
        snprintf(buf, sizeof buf, "%.*e", (int)keep - 1, x);
        r = strtod(buf, NULL);
    } else if (keep == 0) { /* rounds to 0 or to 10**-nd: compare with the half */
        const char *d = buf + (buf[0] == '-');
        bool up = d[0] > '5';
        if (d[0] == '5') {
            const char *t = d + 2;
            while (*t == '0') t++;
            up = *t != 'e'; /* above the half; exactly the half goes to 0 (even) */
        }
        snprintf(buf, sizeof buf, "%se%d", up ? "1" : "0", (int)-nd);
        r = copysign(strtod(buf, NULL), x);
    } else
        r = 0.0 * x;
    if (isinf(r)) jx_fail(rc, at, "OverflowError: rounded value too large to represent");
    return r;
}

/* jinja2's do_round: round(value, precision) for "common" (an int stays an int), else
 * math.ceil/floor(value * 10**precision) / 10**precision */
FILTER(f_round) {
    int64_t prec = want_int(rc, at, jx_arg(a, 0, "precision", jv_int(0)), "precision");
    jv m = jx_arg(a, 1, "method", jv_str(rc, "common", 6));
    const char *method = m.t == JV_STR ? m.u.s->s : "";
    bool common = !strcmp(method, "common"), up = !strcmp(method, "ceil");
    if (!common && !up && strcmp(method, "floor"))
        jx_fail(rc, at, "FilterArgumentError: method must be common, ceil or floor");
    if (!jv_is_num(in))
        jx_fail(rc, at, "TypeError: type %s doesn't define __round__ method", jv_typename(in));
    if (common) {
        if (in.t != JV_FLOAT) {
            jv r = round_int(in.t == JV_INT ? in.u.i : in.u.b, prec);
            if (r.t == JV_UNDEF)
                jx_fail_st(
                    rc, HM_ERR_UNSUPPORTED, at,
                    "integer result beyond 64 bits (Python's big integers are not supported)");
            return r;
        }
        return jv_float(round_float(rc, at, in.u.f, prec));
    }
    if (in.t != JV_FLOAT && prec >= 0) /* exact in Python: int * 10**p / 10**p */
        return jv_float((double)(in.t == JV_INT ? in.u.i : in.u.b));
    if (prec > 308) jx_fail(rc, at, "OverflowError: int too large to convert to float");
    double scale = pow(10.0, (double)prec), v = jv_num(in) * scale;
    if (scale == 0) jx_fail(rc, at, "ZeroDivisionError: float division by zero");
    if (isnan(v)) jx_fail(rc, at, "ValueError: cannot convert float NaN to integer");
    if (isinf(v)) jx_fail(rc, at, "OverflowError: cannot convert float infinity to integer");
    return jv_float((up ? ceil(v) : floor(v)) / scale);
}

/* jinja2's do_unique: a set of the keys seen (unhashable keys fail, as in Python) */
FILTER(f_unique) {
    jlist *l = jv_iter(rc, at, in);
    bool cs = jv_truthy(jx_arg(a, 0, "case_sensitive", jv_bool(false)));
    jv attr = jx_arg(a, 1, "attribute", jv_none());
    jv out = jv_list_new(rc, l->n, JL_ITER), seen = jv_dict_new(rc, 0, 0);
    jx_step(rc, at, l->n);
    for (size_t i = 0; i < l->n; i++) {
        jv k = attr.t == JV_NONE ? l->v[i] : attr_path(rc, at, l->v[i], attr);
        k = sort_key(rc, k, cs);
        if (jv_dict_has(rc, at, seen, k)) continue;
        jv_dict_set(rc, seen, k, jv_none());
        jv_list_push(rc, out, l->v[i]);
    }
    return out;
}

FILTER(f_reverse) {
    (void)a;
    if (in.t == JV_STR) {
        jlist *c = jv_iter(rc, at, in);
        sbuf b;
        sb_init(&b, rc);
        for (size_t i = c->n; i > 0; i--) sb_add(&b, c->v[i - 1].u.s->s, c->v[i - 1].u.s->len);
        return sb_val(&b);
    }
    jlist *l = jv_iter(rc, at, in);
    jv out = jv_list_new(rc, l->n, JL_ITER);
    for (size_t i = l->n; i > 0; i--) jv_list_push(rc, out, l->v[i - 1]);
    return out;
}

FILTER(f_sum) {
    jlist *l = jv_iter(rc, at, in);
    jv attr = jx_arg(a, 0, "attribute", jv_none());
    jv acc = jx_arg(a, 1, "start", jv_int(0));
    jx_step(rc, at, l->n);
    for (size_t i = 0; i < l->n; i++) {
        jv v = attr.t == JV_NONE ? l->v[i] : attr_path(rc, at, l->v[i], attr);
        if (!jv_is_num(v) || !jv_is_num(acc))
            jx_fail(rc, at, "TypeError: unsupported operand type(s) for +: '%s' and '%s'",
                    jv_typename(acc), jv_typename(v));
        int64_t r;
        if (acc.t != JV_FLOAT && v.t != JV_FLOAT) {
            if (__builtin_add_overflow(acc.t == JV_INT ? acc.u.i : acc.u.b,
                                       v.t == JV_INT ? v.u.i : v.u.b, &r))
                jx_fail_st(rc, HM_ERR_UNSUPPORTED, at,
                           "integer result beyond 64 bits (Python's big integers are not "
                           "supported)");
            acc = jv_int(r);
        } else
            acc = jv_float(jv_num(acc) + jv_num(v));
    }
    return acc;
}

static jv minmax(rctx *rc, const node *at, jv in, jargs *a, int sign) {
    jlist *l = jv_iter(rc, at, in);
    bool cs = jv_truthy(jx_arg(a, 0, "case_sensitive", jv_bool(false)));
    jv attr = jx_arg(a, 1, "attribute", jv_none());
    if (!l->n) return undef_msg(rc, 0, "No aggregated item, sequence was empty.%s%s", "", "");
    jx_step(rc, at, l->n);
    jv best = l->v[0];
    jv bk = sort_key(rc, attr.t == JV_NONE ? best : attr_path(rc, at, best, attr), cs);
    for (size_t i = 1; i < l->n; i++) {
        jv k = sort_key(rc, attr.t == JV_NONE ? l->v[i] : attr_path(rc, at, l->v[i], attr), cs);
        if (jv_cmp(rc, at, k, bk) * sign > 0) {
            best = l->v[i];
            bk = k;
        }
    }
    return best;
}

FILTER(f_min) {
    return minmax(rc, at, in, a, -1);
}
FILTER(f_max) {
    return minmax(rc, at, in, a, 1);
}

FILTER(f_batch) {
    int64_t n = want_int(rc, at, jx_arg(a, 0, "linecount", jv_undef()), "linecount");
    if (n <= 0) jx_fail(rc, at, "batch: linecount must be positive");
    jv fill = jx_arg(a, 1, "fill_with", jv_none());
    bool do_fill = jx_has_arg(a, 1, "fill_with");
    jlist *l = jv_iter(rc, at, in);
    jv out = jv_list_new(rc, 4, JL_ITER), cur = jv_list_new(rc, 0, 0);
    for (size_t i = 0; i < l->n; i++) {
        if ((int64_t)cur.u.l->n == n) {
            jv_list_push(rc, out, cur);
            cur = jv_list_new(rc, 0, 0);
        }
        jv_list_push(rc, cur, l->v[i]);
    }
    if (cur.u.l->n) {
        if (do_fill)
            while ((int64_t)cur.u.l->n < n) jv_list_push(rc, cur, fill);
        jv_list_push(rc, out, cur);
    }
    return out;
}

FILTER(f_wordcount) {
    (void)a;
    jv s = str_of(rc, in);
    int64_t n = 0;
    bool inw = false;
    for (size_t i = 0; i < s.u.s->len; i++) {
        unsigned char c = (unsigned char)s.u.s->s[i];
        bool w = isalnum(c) || c == '_' || c >= 0x80;
        if (w && !inw) n++;
        inw = w;
    }
    return jv_int(n);
}

FILTER(f_center) {
    int64_t w = want_int(rc, at, jx_arg(a, 0, "width", jv_int(80)), "width");
    jv s = str_of(rc, in);
    int64_t len = (int64_t)u8_len(s.u.s->s, s.u.s->len);
    if (w <= len) return s;
    need_bytes(rc, w);
    int64_t pad = w - len, left = pad / 2 + (pad & w & 1);
    sbuf b;
    sb_init(&b, rc);
    add_fill(&b, ' ', left);
    sb_add(&b, s.u.s->s, s.u.s->len);
    add_fill(&b, ' ', pad - left);
    return sb_val(&b);
}

FILTER(f_escape) {
    (void)a;
    jv s = str_of(rc, in);
    sbuf b;
    sb_init(&b, rc);
    for (size_t i = 0; i < s.u.s->len; i++) {
        char c = s.u.s->s[i];
        switch (c) {
        case '&':
            sb_adds(&b, "&amp;");
            break;
        case '<':
            sb_adds(&b, "&lt;");
            break;
        case '>':
            sb_adds(&b, "&gt;");
            break;
        case '"':
            sb_adds(&b, "&#34;");
            break;
        case '\'':
            sb_adds(&b, "&#39;");
            break;
        default:
            sb_addc(&b, c);
        }
    }
    return sb_val(&b);
}

FILTER(f_format) {
    jv s = str_of(rc, in);
    int np = npositional(a);
    jv *args = jx_alloc(rc, (size_t)(np + 1) * sizeof(jv));
    int k = 0;
    for (int i = 0; i < a->n; i++)
        if (!a->kw[i]) args[k++] = a->v[i];
    return percent_format(rc, at, s.u.s, args, np);
}

FILTER(f_attr) {
    jv name = jx_arg(a, 0, "name", jv_undef());
    return jx_getattr(rc, at, in, name, true);
}

FILTER(f_pprint) {
    (void)a;
    sbuf b;
    sb_init(&b, rc);
    jv_repr(&b, in);
    return sb_val(&b);
}

typedef struct filter_def {
    const char *name;
    jfilter fn;
} filter_def;

static const filter_def k_filters[] = {{"abs", f_abs},
                                       {"attr", f_attr},
                                       {"batch", f_batch},
                                       {"capitalize", f_capitalize},
                                       {"center", f_center},
                                       {"count", f_length},
                                       {"d", f_default},
                                       {"default", f_default},
                                       {"dictsort", f_dictsort},
                                       {"e", f_escape},
                                       {"escape", f_escape},
                                       {"first", f_first},
                                       {"float", f_float},
                                       {"format", f_format},
                                       {"indent", f_indent},
                                       {"int", f_int},
                                       {"items", f_items},
                                       {"join", f_join},
                                       {"last", f_last},
                                       {"length", f_length},
                                       {"list", f_list},
                                       {"lower", f_lower},
                                       {"map", f_map},
                                       {"max", f_max},
                                       {"min", f_min},
                                       {"pprint", f_pprint},
                                       {"reject", f_reject},
                                       {"rejectattr", f_rejectattr},
                                       {"replace", f_replace},
                                       {"reverse", f_reverse},
                                       {"round", f_round},
                                       {"safe", f_safe},
                                       {"select", f_select},
                                       {"selectattr", f_selectattr},
                                       {"sort", f_sort},
                                       {"string", f_string},
                                       {"sum", f_sum},
                                       {"title", f_title},
                                       {"tojson", f_tojson},
                                       {"trim", f_trim},
                                       {"unique", f_unique},
                                       {"upper", f_upper},
                                       {"wordcount", f_wordcount},
                                       {NULL, NULL}};

jfilter jx_find_filter(const char *name) {
    for (const filter_def *f = k_filters; f->name; f++)
        if (!strcmp(f->name, name)) return f->fn;
    return NULL;
}

/* ---- tests ------------------------------------------------------------------------------------
 */

#define TEST(name) static bool name(rctx *rc, const node *at, jv in, jargs *a)

TEST(t_defined) {
    return in.t != JV_UNDEF;
}
TEST(t_undefined) {
    return in.t == JV_UNDEF;
}
TEST(t_none) {
    return in.t == JV_NONE;
}
TEST(t_string) {
    return in.t == JV_STR;
}
TEST(t_number) {
    return in.t == JV_INT || in.t == JV_FLOAT || in.t == JV_BOOL;
}
TEST(t_integer) {
    return in.t == JV_INT;
}
TEST(t_float) {
    return in.t == JV_FLOAT;
}
TEST(t_boolean) {
    return in.t == JV_BOOL;
}
TEST(t_mapping) {
    return in.t == JV_DICT && !in.flags;
}
TEST(t_iterable) {
    return in.t == JV_STR || in.t == JV_LIST || (in.t == JV_DICT && !in.flags) || in.t == JV_UNDEF;
}
TEST(t_sequence) {
    return in.t == JV_STR || (in.t == JV_LIST && !(in.flags & JL_ITER)) ||
           (in.t == JV_DICT && !in.flags) || in.t == JV_UNDEF;
}
TEST(t_callable) {
    return in.t == JV_FUNC;
}
TEST(t_true) {
    return in.t == JV_BOOL && in.u.b;
}
TEST(t_false) {
    return in.t == JV_BOOL && !in.u.b;
}
static int64_t int_of(rctx *rc, const node *at, jv v) {
    if (v.t == JV_FLOAT) return f2i(v.u.f);
    return want_int(rc, at, v, "value");
}
TEST(t_even) {
    return int_of(rc, at, in) % 2 == 0;
}
TEST(t_odd) {
    return int_of(rc, at, in) % 2 != 0;
}
TEST(t_divisibleby) {
    int64_t d = int_of(rc, at, jx_arg(a, 0, "num", jv_undef()));
    if (!d) jx_fail(rc, at, "ZeroDivisionError: integer division or modulo by zero");
    return int_of(rc, at, in) % d == 0;
}
TEST(t_eq) {
    return jv_eq(rc, in, jx_arg(a, 0, "other", jv_undef()));
}
TEST(t_ne) {
    return !jv_eq(rc, in, jx_arg(a, 0, "other", jv_undef()));
}
TEST(t_lt) {
    return jv_cmp(rc, at, in, jx_arg(a, 0, "other", jv_undef())) < 0;
}
TEST(t_le) {
    return jv_cmp(rc, at, in, jx_arg(a, 0, "other", jv_undef())) <= 0;
}
TEST(t_gt) {
    return jv_cmp(rc, at, in, jx_arg(a, 0, "other", jv_undef())) > 0;
}
TEST(t_ge) {
    return jv_cmp(rc, at, in, jx_arg(a, 0, "other", jv_undef())) >= 0;
}
TEST(t_in) {
    jv seq = jx_arg(a, 0, "seq", jv_undef());
    if (seq.t == JV_STR) {
        if (in.t != JV_STR)
            jx_fail(rc, at, "TypeError: 'in <string>' requires string as left operand");
        jx_step(rc, at, jx_bytes_cost(seq.u.s->len));
        return memmem(seq.u.s->s, seq.u.s->len, in.u.s->s, in.u.s->len) != NULL || !in.u.s->len;
    }
    if (seq.t == JV_DICT && !seq.flags) return jv_dict_has(rc, at, seq, in);
    jlist *l = jv_iter(rc, at, seq);
    jx_step(rc, at, l->n);
    for (size_t i = 0; i < l->n; i++)
        if (jv_eq(rc, l->v[i], in)) return true;
    return false;
}
TEST(t_lower) {
    jx_step(rc, at, jv_cost(in));
    return jv_truthy(char_class(jv_tostring(rc, in), islower, true));
}
TEST(t_upper) {
    jx_step(rc, at, jv_cost(in));
    return jv_truthy(char_class(jv_tostring(rc, in), isupper, true));
}
TEST(t_sameas) {
    jv o = jx_arg(a, 0, "other", jv_undef());
    if (in.t != o.t) return false;
    switch ((jv_type)in.t) {
    case JV_NONE:
    case JV_UNDEF:
        return true;
    case JV_BOOL:
        return in.u.b == o.u.b;
    case JV_INT:
        return in.u.i == o.u.i && in.u.i >= -5 && in.u.i <= 256; /* CPython small-int cache */
    case JV_STR:
        return in.u.s == o.u.s;
    case JV_LIST:
        return in.u.l == o.u.l;
    case JV_DICT:
        return in.u.d == o.u.d;
    case JV_FUNC:
        return in.u.fn == o.u.fn;
    default:
        return false;
    }
}
TEST(t_escaped) {
    return false;
}
TEST(t_filter) {
    return in.t == JV_STR && strlen(in.u.s->s) == in.u.s->len && jx_find_filter(in.u.s->s);
}
TEST(t_test) {
    return in.t == JV_STR && strlen(in.u.s->s) == in.u.s->len && jx_find_test(in.u.s->s);
}

typedef struct test_def {
    const char *name;
    jtest fn;
} test_def;

static const test_def k_tests[] = {{"defined", t_defined},
                                   {"undefined", t_undefined},
                                   {"none", t_none},
                                   {"string", t_string},
                                   {"number", t_number},
                                   {"integer", t_integer},
                                   {"float", t_float},
                                   {"boolean", t_boolean},
                                   {"mapping", t_mapping},
                                   {"iterable", t_iterable},
                                   {"sequence", t_sequence},
                                   {"callable", t_callable},
                                   {"true", t_true},
                                   {"false", t_false},
                                   {"even", t_even},
                                   {"odd", t_odd},
                                   {"divisibleby", t_divisibleby},
                                   {"eq", t_eq},
                                   {"equalto", t_eq},
                                   {"==", t_eq},
                                   {"ne", t_ne},
                                   {"!=", t_ne},
                                   {"lt", t_lt},
                                   {"lessthan", t_lt},
                                   {"<", t_lt},
                                   {"le", t_le},
                                   {"<=", t_le},
                                   {"gt", t_gt},
                                   {"greaterthan", t_gt},
                                   {">", t_gt},
                                   {"ge", t_ge},
                                   {">=", t_ge},
                                   {"in", t_in},
                                   {"lower", t_lower},
                                   {"upper", t_upper},
                                   {"sameas", t_sameas},
                                   {"escaped", t_escaped},
                                   {"filter", t_filter},
                                   {"test", t_test},
                                   {NULL, NULL}};

jtest jx_find_test(const char *name) {
    for (const test_def *t = k_tests; t->name; t++)
        if (!strcmp(t->name, name)) return t->fn;
    return NULL;
}
