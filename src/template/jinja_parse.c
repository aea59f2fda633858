/* jinja_parse.c - lexer and parser of the Jinja interpreter: jinja2's lexer rules with
 * trim_blocks=True and lstrip_blocks=True, and its expression grammar, into an AST. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_int.h"

#define MAX_NEST 200 /* parser recursion within one expression (about 66 levels of brackets) */

typedef enum {
    T_EOF,
    T_DATA,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_VAR_BEGIN,
    T_VAR_END,
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_OP,
} tok_type;

typedef struct tok {
    tok_type t;
    const char *s; /* T_NAME, T_OP: source text; T_DATA: text */
    size_t len;
    int line, col;
    jv val; /* T_STRING, T_INT, T_FLOAT, T_DATA */
} tok;

typedef struct parser {
    rctx rc; /* arena, error unwinding */
    const char *src;
    size_t n;
    tok *toks;
    size_t ntok, cap, pos;
    int depth;       /* parser recursion in the current expression */
    int block_depth; /* nested block tags */
    int for_depth;   /* nested for loops in the current macro / call body */
    bool soft;       /* inside an if or inline-if: unknown filters/tests fail at run time */
} parser;

static _Noreturn void perr(parser *p, int line, int col, const char *fmt, ...) HM_PRINTF(4, 5);
static _Noreturn void perr(parser *p, int line, int col, const char *fmt, ...) {
    char msg[HM_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    hm_errorf(HM_ERR_FORMAT, "%s:%d:%d: %s", p->rc.tpl->name, line, col, msg);
    p->rc.st = HM_ERR_FORMAT;
    longjmp(p->rc.jb, 1);
}

/* ---- lexer ------------------------------------------------------------------------------------
 */

/* positions are computed incrementally: lexing walks forward */
typedef struct lexpos {
    size_t off;
    int line, col;
} lexpos;

static void advance_to(const parser *p, lexpos *lp, size_t off) {
    for (size_t i = lp->off; i < off && i < p->n; i++) {
        if (p->src[i] == '\n') {
            lp->line++;
            lp->col = 1;
        } else
            lp->col++;
    }
    lp->off = off;
}

static tok *push_tok(parser *p, tok_type t, const char *s, size_t len, const lexpos *lp) {
    if (p->ntok == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 256;
        tok *nt = realloc(p->toks, cap * sizeof(tok));
        if (!nt) jx_fail_st(&p->rc, HM_ERR_NO_MEMORY, NULL, "out of memory");
        p->toks = nt;
        p->cap = cap;
    }
    tok *k = &p->toks[p->ntok++];
    k->t = t;
    k->s = s;
    k->len = len;
    k->line = lp->line;
    k->col = lp->col;
    k->val = jv_undef();
    return k;
}

static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static size_t skip_ws(const parser *p, size_t i) {
    while (i < p->n && is_ws(p->src[i])) i++;
    return i;
}

static bool at(const parser *p, size_t i, const char *s) {
    size_t k = strlen(s);
    return i + k <= p->n && !memcmp(p->src + i, s, k);
}

/* Emits template text src[a..b) with the whitespace control of the tag that follows. */
static void emit_text(parser *p, size_t a, size_t b, char sign, bool lstrip, bool line_starting,
                      lexpos *lp) {
    size_t e = b;
    if (sign == '-') {
        while (e > a && is_ws(p->src[e - 1])) e--;
    } else if (sign != '+' && lstrip) {
        size_t l = e;
        while (l > a && p->src[l - 1] != '\n') l--;
        if ((l > a || line_starting) && l < e) {
            size_t i = l;
            while (i < e && is_ws(p->src[i])) i++;
            if (i == e) e = l;
        }
    }
    if (e > a) {
        advance_to(p, lp, a);
        tok *k = push_tok(p, T_DATA, p->src + a, e - a, lp);
        k->val = jv_str(&p->rc, p->src + a, e - a);
    }
}

static int hexval(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static void put_utf8(sbuf *b, uint32_t cp) {
    char u[4];
    if (cp < 0x80) {
        sb_addc(b, (char)cp);
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        sb_add(b, u, 2);
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        sb_add(b, u, 3);
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        sb_add(b, u, 4);
    }
}

/* Python's unicode-escape decoding of a string literal body; unknown escapes are kept. */
static jv unescape(parser *p, const char *s, size_t n, const lexpos *lp) {
    sbuf b;
    sb_init(&b, &p->rc);
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            sb_addc(&b, s[i]);
            continue;
        }
        char c = s[++i];
        int digits = 0;
        switch (c) {
        case '\n':
            break;
        case '\\':
        case '\'':
        case '"':
            sb_addc(&b, c);
            break;
        case 'n':
            sb_addc(&b, '\n');
            break;
        case 't':
            sb_addc(&b, '\t');
            break;
        case 'r':
            sb_addc(&b, '\r');
            break;
        case 'b':
            sb_addc(&b, '\b');
            break;
        case 'f':
            sb_addc(&b, '\f');
            break;
        case 'v':
            sb_addc(&b, '\v');
            break;
        case 'a':
            sb_addc(&b, '\a');
            break;
        case 'x':
            digits = 2;
            break;
        case 'u':
            digits = 4;
            break;
        case 'U':
            digits = 8;
            break;
        case 'N':
            /* Python's named escapes need the Unicode name database, which is not carried */
            perr(p, lp->line, lp->col,
                 "\\N{...} escapes (Unicode character names) are not supported; write the "
                 "character itself or \\uXXXX");
        default:
            if (c >= '0' && c <= '7') {
                uint32_t v = 0;
                int k = 0;
                while (k < 3 && i < n && s[i] >= '0' && s[i] <= '7')
                    v = v * 8 + (uint32_t)(s[i++] - '0'), k++;
                i--;
                put_utf8(&b, v);
            } else {
                sb_addc(&b, '\\');
                sb_addc(&b, c);
            }
        }
        if (digits) {
            uint32_t v = 0;
            for (int k = 0; k < digits; k++) {
                int h = i + 1 + (size_t)k < n ? hexval(s[i + 1 + k]) : -1;
                if (h < 0) perr(p, lp->line, lp->col, "truncated \\%c escape in string literal", c);
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF)
                perr(p, lp->line, lp->col, "illegal Unicode character in string literal");
            i += (size_t)digits;
            put_utf8(&b, v);
        }
    }
    return sb_val(&b);
}

/* appends c to a literal's digits; sets *too_long instead of writing past the buffer */
static void put_digit(char *buf, size_t cap, size_t *bl, char c, bool *too_long) {
    if (*bl < cap - 1)
        buf[(*bl)++] = c;
    else
        *too_long = true;
}

/* number at src[i]: returns end offset; sets *is_float and the value */
static size_t lex_number(parser *p, size_t i, tok *k, const lexpos *lp) {
    const char *s = p->src;
    size_t j = i;
    char buf[512]; /* digits kept; a longer literal is refused, not cut */
    size_t bl = 0;
    bool too_long = false;
    if (s[j] == '0' && j + 1 < p->n && strchr("bBoOxX", s[j + 1]) && s[j + 1]) {
        int base = (s[j + 1] | 32) == 'b' ? 2 : (s[j + 1] | 32) == 'o' ? 8 : 16;
        j += 2;
        while (j < p->n && (hexval(s[j]) >= 0 || s[j] == '_') &&
               (s[j] == '_' || hexval(s[j]) < base)) {
            if (s[j] != '_') put_digit(buf, sizeof buf, &bl, s[j], &too_long);
            j++;
        }
        buf[bl] = '\0';
        if (too_long)
            perr(p, lp->line, lp->col, "numeric literal longer than %zu digits", sizeof buf - 1);
        errno = 0;
        long long v = strtoll(buf, NULL, base);
        if (!bl || errno) perr(p, lp->line, lp->col, "invalid integer literal");
        k->t = T_INT;
        k->val = jv_int(v);
        return j;
    }
    while (j < p->n && (isdigit((unsigned char)s[j]) ||
                        (s[j] == '_' && j + 1 < p->n && isdigit((unsigned char)s[j + 1])))) {
        if (s[j] != '_') put_digit(buf, sizeof buf, &bl, s[j], &too_long);
        j++;
    }
    bool fl = false;
    if (j + 1 < p->n && s[j] == '.' && isdigit((unsigned char)s[j + 1])) {
        fl = true;
        put_digit(buf, sizeof buf, &bl, s[j++], &too_long);
        while (j < p->n && (isdigit((unsigned char)s[j]) ||
                            (s[j] == '_' && j + 1 < p->n && isdigit((unsigned char)s[j + 1])))) {
            if (s[j] != '_') put_digit(buf, sizeof buf, &bl, s[j], &too_long);
            j++;
        }
    }
    if (j < p->n && (s[j] == 'e' || s[j] == 'E')) {
        size_t e = j + 1;
        if (e < p->n && (s[e] == '+' || s[e] == '-')) e++;
        if (e < p->n && isdigit((unsigned char)s[e])) {
            fl = true;
            put_digit(buf, sizeof buf, &bl, 'e', &too_long);
            for (size_t q = j + 1; q < e; q++) put_digit(buf, sizeof buf, &bl, s[q], &too_long);
            j = e;
            while (j < p->n && (isdigit((unsigned char)s[j]) || s[j] == '_')) {
                if (s[j] != '_') put_digit(buf, sizeof buf, &bl, s[j], &too_long);
                j++;
            }
        }
    }
    buf[bl] = '\0';
    if (too_long)
        perr(p, lp->line, lp->col, "numeric literal longer than %zu digits", sizeof buf - 1);
    if (fl) {
        k->t = T_FLOAT;
        k->val = jv_float(strtod(buf, NULL));
    } else {
        errno = 0;
        long long v = strtoll(buf, NULL, 10);
        if (errno) perr(p, lp->line, lp->col, "integer literal out of range");
        k->t = T_INT;
        k->val = jv_int(v);
    }
    return j;
}

static const char *const k_ops2[] = {"//", "**", "==", "!=", "<=", ">="};

/* Tokens inside {{ }} or {% %}; returns the offset after the end tag. */
static size_t lex_tag(parser *p, size_t i, bool block, lexpos *lp, bool *line_starting) {
    char stack[MAX_NEST];
    int sp = 0;
    for (;;) {
        if (sp == 0) {
            size_t e = 0;
            if (block) {
                if (at(p, i, "+%}"))
                    e = i + 3;
                else if (at(p, i, "-%}"))
                    e = skip_ws(p, i + 3);
                else if (at(p, i, "%}")) {
                    e = i + 2;
                    if (e < p->n && p->src[e] == '\n') e++; /* trim_blocks */
                }
            } else {
                if (at(p, i, "-}}"))
                    e = skip_ws(p, i + 3);
                else if (at(p, i, "}}"))
                    e = i + 2;
            }
            if (e) {
                advance_to(p, lp, i);
                push_tok(p, block ? T_BLOCK_END : T_VAR_END, p->src + i, e - i, lp);
                *line_starting = p->src[e - 1] == '\n';
                return e;
            }
        }
        size_t j = skip_ws(p, i);
        if (j != i) {
            i = j;
            continue;
        }
        if (i >= p->n) {
            advance_to(p, lp, i);
            perr(p, lp->line, lp->col, "unexpected end of template, expected '%s'",
                 block ? "end of statement block" : "end of print statement");
        }
        advance_to(p, lp, i);
        char c = p->src[i];
        if (isdigit((unsigned char)c)) {
            tok *k = push_tok(p, T_INT, p->src + i, 0, lp);
            size_t e = lex_number(p, i, k, lp);
            k->len = e - i;
            i = e;
        } else if (isalpha((unsigned char)c) || c == '_') {
            size_t e = i;
            while (e < p->n && (isalnum((unsigned char)p->src[e]) || p->src[e] == '_')) e++;
            push_tok(p, T_NAME, p->src + i, e - i, lp);
            i = e;
        } else if (c == '\'' || c == '"') {
            size_t e = i + 1;
            while (e < p->n && p->src[e] != c) e += p->src[e] == '\\' ? 2 : 1;
            if (e >= p->n) perr(p, lp->line, lp->col, "unexpected char %c: unterminated string", c);
            tok *k = push_tok(p, T_STRING, p->src + i, e + 1 - i, lp);
            k->val = unescape(p, p->src + i + 1, e - i - 1, lp);
            i = e + 1;
        } else {
            size_t len = 0;
            for (size_t o = 0; o < sizeof k_ops2 / sizeof k_ops2[0]; o++)
                if (at(p, i, k_ops2[o])) len = 2;
            if (!len && c && strchr("+-/*%~[](){}<>=.:|,;", c)) len = 1;
            if (!len) {
                if (c >= 0x20 && c < 0x7f) perr(p, lp->line, lp->col, "unexpected char '%c'", c);
                perr(p, lp->line, lp->col, "unexpected char '\\x%02x'", (unsigned char)c);
            }
            if (len == 1 && strchr("([{", c)) {
                if (sp >= MAX_NEST) perr(p, lp->line, lp->col, "brackets nested too deeply");
                stack[sp++] = c == '(' ? ')' : c == '[' ? ']' : '}';
            } else if (len == 1 && strchr(")]}", c)) {
                if (!sp) perr(p, lp->line, lp->col, "unexpected '%c'", c);
                if (stack[--sp] != c)
                    perr(p, lp->line, lp->col, "unexpected '%c', expected '%c'", c, stack[sp]);
            }
            push_tok(p, T_OP, p->src + i, len, lp);
            i += len;
        }
    }
}

static void lex(parser *p) {
    size_t i = 0;
    bool line_starting = true;
    lexpos lp = {0, 1, 1};
    while (i < p->n) {
        /* next tag start */
        size_t t = i;
        const char *hit = NULL;
        for (; t + 1 < p->n; t++) {
            if (p->src[t] == '{' &&
                (p->src[t + 1] == '{' || p->src[t + 1] == '%' || p->src[t + 1] == '#')) {
                hit = p->src + t;
                break;
            }
        }
        if (!hit) {
            advance_to(p, &lp, i);
            tok *k = push_tok(p, T_DATA, p->src + i, p->n - i, &lp);
            k->val = jv_str(&p->rc, p->src + i, p->n - i);
            break;
        }
        char kind = hit[1];
        size_t b = t + 2;
        char sign = b < p->n && (p->src[b] == '-' || p->src[b] == '+') ? p->src[b] : 0;
        if (sign) b++;
        /* {% raw %} */
        if (kind == '%') {
            size_t r = skip_ws(p, b);
            if (at(p, r, "raw")) {
                size_t r2 = skip_ws(p, r + 3);
                size_t end = 0;
                if (at(p, r2, "-%}"))
                    end = skip_ws(p, r2 + 3);
                else if (at(p, r2, "%}"))
                    end = r2 + 2;
                if (end) {
                    emit_text(p, i, t, sign, true, line_starting, &lp);
                    /* find {%[-+]? endraw %} */
                    size_t q = end;
                    for (;; q++) {
                        if (q + 1 >= p->n) {
                            advance_to(p, &lp, t);
                            perr(p, lp.line, lp.col, "Missing end of raw directive");
                        }
                        if (p->src[q] != '{' || p->src[q + 1] != '%') continue;
                        size_t s2 = q + 2;
                        char sg =
                            s2 < p->n && (p->src[s2] == '-' || p->src[s2] == '+') ? p->src[s2] : 0;
                        if (sg) s2++;
                        s2 = skip_ws(p, s2);
                        if (!at(p, s2, "endraw")) continue;
                        s2 = skip_ws(p, s2 + 6);
                        size_t e2 = 0;
                        if (at(p, s2, "+%}"))
                            e2 = s2 + 3;
                        else if (at(p, s2, "-%}"))
                            e2 = skip_ws(p, s2 + 3);
                        else if (at(p, s2, "%}")) {
                            e2 = s2 + 2;
                            if (e2 < p->n && p->src[e2] == '\n') e2++;
                        }
                        if (!e2) continue;
                        emit_text(p, end, q, sg, true, p->src[end - 1] == '\n', &lp);
                        line_starting = p->src[e2 - 1] == '\n';
                        i = e2;
                        break;
                    }
                    continue;
                }
            }
        }
        emit_text(p, i, t, sign, kind != '{', line_starting, &lp);
        if (kind == '#') {
            size_t q = b;
            size_t e = 0;
            for (; q + 1 < p->n; q++) {
                if (p->src[q] == '+' && at(p, q, "+#}")) {
                    e = q + 3;
                    break;
                }
                if (p->src[q] == '-' && at(p, q, "-#}")) {
                    e = skip_ws(p, q + 3);
                    break;
                }
                if (at(p, q, "#}")) {
                    e = q + 2;
                    if (e < p->n && p->src[e] == '\n') e++;
                    break;
                }
            }
            if (!e) {
                advance_to(p, &lp, t);
                perr(p, lp.line, lp.col, "Missing end of comment tag");
            }
            line_starting = p->src[e - 1] == '\n';
            i = e;
            continue;
        }
        advance_to(p, &lp, t);
        push_tok(p, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, hit, b - t, &lp);
        i = lex_tag(p, b, kind == '%', &lp, &line_starting);
    }
    advance_to(p, &lp, p->n);
    push_tok(p, T_EOF, p->src + p->n, 0, &lp);
}

/* ---- parser helpers ---------------------------------------------------------------------------
 */

static tok *cur(parser *p) {
    return &p->toks[p->pos];
}
static tok *nexttok(parser *p) {
    tok *k = &p->toks[p->pos];
    if (k->t != T_EOF) p->pos++;
    return k;
}

static bool is_op(const tok *k, const char *op) {
    return k->t == T_OP && k->len == strlen(op) && !memcmp(k->s, op, k->len);
}
static bool is_name(const tok *k, const char *name) {
    return k->t == T_NAME && k->len == strlen(name) && !memcmp(k->s, name, k->len);
}

static const char *tok_desc(const tok *k, char *buf, size_t cap) {
    switch (k->t) {
    case T_EOF:
        return "end of template";
    case T_BLOCK_END:
        return "end of statement block";
    case T_VAR_END:
        return "end of print statement";
    case T_BLOCK_BEGIN:
        return "begin of statement block";
    case T_VAR_BEGIN:
        return "begin of print statement";
    case T_DATA:
        return "template data";
    default:
        snprintf(buf, cap, "%.*s", (int)(k->len > 40 ? 40 : k->len), k->s);
        return buf;
    }
}

static _Noreturn void unexpected(parser *p, const tok *k) {
    char b[64];
    perr(p, k->line, k->col, "unexpected '%s'", tok_desc(k, b, sizeof b));
}

static void expect_op(parser *p, const char *op) {
    tok *k = cur(p);
    char b[64];
    if (!is_op(k, op))
        perr(p, k->line, k->col, "expected '%s', got '%s'", op, tok_desc(k, b, sizeof b));
    nexttok(p);
}

static void expect_type(parser *p, tok_type t) {
    tok *k = cur(p);
    char b[64];
    if (k->t != t) {
        tok dummy = {.t = t};
        char b2[64];
        perr(p, k->line, k->col, "expected '%s', got '%s'", tok_desc(&dummy, b2, sizeof b2),
             tok_desc(k, b, sizeof b));
    }
    nexttok(p);
}

static char *pstrdup(parser *p, const char *s, size_t n) {
    jstr *j = jx_str_new(&p->rc, s, n);
    return j->s;
}

static node *mk(parser *p, node_kind kind, const tok *k) {
    node *x = jx_alloc(&p->rc, sizeof *x);
    memset(x, 0, sizeof *x);
    x->kind = (uint8_t)kind;
    x->line = k->line;
    x->col = k->col;
    return x;
}

/* growable node arrays during parsing */
typedef struct nvec {
    node **v;
    const char **names;
    int n, cap;
} nvec;

static void nv_push(parser *p, nvec *a, node *x, const char *name) {
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 4;
        node **v = jx_alloc(&p->rc, (size_t)cap * sizeof(node *));
        const char **nm = jx_alloc(&p->rc, (size_t)cap * sizeof(char *));
        if (a->n) {
            memcpy(v, a->v, (size_t)a->n * sizeof(node *));
            memcpy(nm, a->names, (size_t)a->n * sizeof(char *));
        }
        a->v = v;
        a->names = nm;
        a->cap = cap;
    }
    a->v[a->n] = x;
    a->names[a->n] = name;
    a->n++;
}

static void nv_attach(node *x, nvec *a) {
    x->kids = a->v;
    x->names = a->names;
    x->n = a->n;
}

static void enter(parser *p, const tok *k) {
    if (++p->depth > MAX_NEST)
        perr(p, k->line, k->col, "template nested too deeply (limit %d)", MAX_NEST);
}

/* ---- expressions ------------------------------------------------------------------------------
 */

static node *parse_expr(parser *p, bool with_condexpr);
static node *parse_tuple(parser *p, bool with_condexpr, const char *extra_end,
                         bool explicit_parens);
static node *parse_or(parser *p);
static node *parse_unary(parser *p, bool with_filter);
static node *parse_primary(parser *p);
static node *parse_postfix(parser *p, node *x);

static void parse_call_args(parser *p, nvec *args) {
    expect_op(p, "(");
    bool first = true;
    while (!is_op(cur(p), ")")) {
        if (!first) expect_op(p, ",");
        if (is_op(cur(p), ")")) break;
        first = false;
        tok *k = cur(p);
        if (is_op(k, "*") || is_op(k, "**"))
            perr(p, k->line, k->col, "*args / **kwargs in calls are not supported");
        if (k->t == T_NAME && is_op(&p->toks[p->pos + 1], "=")) {
            const char *nm = pstrdup(p, k->s, k->len);
            p->pos += 2;
            nv_push(p, args, parse_expr(p, true), nm);
        } else {
            for (int i = 0; i < args->n; i++)
                if (args->names[i])
                    perr(p, k->line, k->col, "positional argument follows keyword argument");
            nv_push(p, args, parse_expr(p, true), NULL);
        }
    }
    expect_op(p, ")");
}

/* a filter or test name at the current token, dotted parts included (e.g. "ns.name") */
static char *dotted_name(parser *p) {
    tok *k = cur(p);
    if (k->t != T_NAME) unexpected(p, k);
    nexttok(p);
    size_t len = k->len;
    while (is_op(cur(p), ".") && p->toks[p->pos + 1].t == T_NAME) {
        tok *d = &p->toks[p->pos + 1];
        len = (size_t)(d->s + d->len - k->s);
        p->pos += 2;
    }
    return pstrdup(p, k->s, len);
}

static node *parse_filter(parser *p, node *x, bool start_inline) {
    while (is_op(cur(p), "|") || start_inline) {
        if (!start_inline) nexttok(p);
        start_inline = false;
        tok *k = cur(p);
        node *f = mk(p, E_FILTER, k);
        f->a = x;
        f->name = dotted_name(p);
        if (!jx_find_filter(f->name)) {
            if (!p->soft) perr(p, k->line, k->col, "No filter named '%s'.", f->name);
            f->runtime_check = true;
        }
        nvec args = {0};
        if (is_op(cur(p), "(")) parse_call_args(p, &args);
        nv_attach(f, &args);
        x = f;
    }
    return x;
}

static node *parse_test(parser *p, node *x) {
    tok *is = nexttok(p); /* 'is' */
    bool neg = false;
    if (is_name(cur(p), "not")) {
        nexttok(p);
        neg = true;
    }
    node *t = mk(p, E_TEST, is);
    t->a = x;
    t->neg = neg;
    tok *k = cur(p);
    t->name = dotted_name(p);
    nvec args = {0};
    tok *c = cur(p);
    if (is_op(c, "(")) {
        parse_call_args(p, &args);
    } else if ((c->t == T_NAME || c->t == T_STRING || c->t == T_INT || c->t == T_FLOAT ||
                is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) perr(p, c->line, c->col, "You cannot chain multiple tests with is");
        node *arg = parse_postfix(p, parse_primary(p));
        nv_push(p, &args, arg, NULL);
    }
    nv_attach(t, &args);
    if (!jx_find_test(t->name)) {
        if (!p->soft) perr(p, k->line, k->col, "No test named '%s'.", t->name);
        t->runtime_check = true;
    }
    return t;
}

static node *parse_filter_expr(parser *p, node *x) {
    for (;;) {
        tok *k = cur(p);
        if (is_op(k, "|"))
            x = parse_filter(p, x, false);
        else if (is_name(k, "is"))
            x = parse_test(p, x);
        else if (is_op(k, "(")) {
            node *c = mk(p, E_CALL, k);
            c->a = x;
            nvec args = {0};
            parse_call_args(p, &args);
            nv_attach(c, &args);
            x = c;
        } else
            return x;
    }
}

static node *parse_subscribed(parser *p) {
    tok *k = cur(p);
    node *parts[3] = {NULL, NULL, NULL};
    if (is_op(k, ":")) {
        nexttok(p);
    } else {
        node *x = parse_expr(p, true);
        if (!is_op(cur(p), ":")) return x;
        nexttok(p);
        parts[0] = x;
    }
    if (!is_op(cur(p), "]") && !is_op(cur(p), ",") && !is_op(cur(p), ":"))
        parts[1] = parse_expr(p, true);
    if (is_op(cur(p), ":")) {
        nexttok(p);
        if (!is_op(cur(p), "]") && !is_op(cur(p), ",")) parts[2] = parse_expr(p, true);
    }
    node *s = mk(p, E_SLICE, k);
    s->b = parts[0];
    s->c = parts[1];
    s->d = parts[2];
    return s;
}

static node *parse_postfix(parser *p, node *x) {
    for (;;) {
        tok *k = cur(p);
        if (is_op(k, ".")) {
            nexttok(p);
            tok *a = nexttok(p);
            if (a->t == T_NAME) {
                node *g = mk(p, E_ATTR, k);
                g->a = x;
                g->name = pstrdup(p, a->s, a->len);
                x = g;
            } else if (a->t == T_INT) {
                node *g = mk(p, E_ITEM, k);
                g->a = x;
                g->b = mk(p, E_CONST, a);
                g->b->val = a->val;
                x = g;
            } else
                perr(p, a->line, a->col, "expected name or number");
        } else if (is_op(k, "[")) {
            nexttok(p);
            nvec idx = {0};
            while (!is_op(cur(p), "]")) {
                if (idx.n) {
                    expect_op(p, ",");
                    if (is_op(cur(p), "]")) break;
                }
                nv_push(p, &idx, parse_subscribed(p), NULL);
            }
            expect_op(p, "]");
            if (idx.n == 0) perr(p, k->line, k->col, "expected subscript expression");
            node *g;
            if (idx.n == 1 && idx.v[0]->kind == E_SLICE) {
                g = idx.v[0];
                g->a = x;
            } else {
                g = mk(p, E_ITEM, k);
                g->a = x;
                if (idx.n == 1)
                    g->b = idx.v[0];
                else {
                    g->b = mk(p, E_TUPLE, k);
                    nv_attach(g->b, &idx);
                }
            }
            x = g;
        } else if (is_op(k, "(")) {
            node *c = mk(p, E_CALL, k);
            c->line = x->line;
            c->col = x->col;
            c->a = x;
            nvec args = {0};
            parse_call_args(p, &args);
            nv_attach(c, &args);
            x = c;
        } else
            return x;
    }
}

static node *parse_primary(parser *p) {
    tok *k = cur(p);
    enter(p, k);
    node *x;
    if (k->t == T_NAME) {
        nexttok(p);
        x = mk(p, E_CONST, k);
        if (is_name(k, "true") || is_name(k, "True"))
            x->val = jv_bool(true);
        else if (is_name(k, "false") || is_name(k, "False"))
            x->val = jv_bool(false);
        else if (is_name(k, "none") || is_name(k, "None"))
            x->val = jv_none();
        else {
            x->kind = E_NAME;
            x->name = pstrdup(p, k->s, k->len);
        }
    } else if (k->t == T_STRING) {
        nexttok(p);
        x = mk(p, E_CONST, k);
        x->val = k->val;
        if (cur(p)->t == T_STRING) {
            sbuf b;
            sb_init(&b, &p->rc);
            sb_add(&b, k->val.u.s->s, k->val.u.s->len);
            while (cur(p)->t == T_STRING) {
                tok *s = nexttok(p);
                sb_add(&b, s->val.u.s->s, s->val.u.s->len);
            }
            x->val = sb_val(&b);
        }
    } else if (k->t == T_INT || k->t == T_FLOAT) {
        nexttok(p);
        x = mk(p, E_CONST, k);
        x->val = k->val;
    } else if (is_op(k, "(")) {
        nexttok(p);
        x = parse_tuple(p, true, NULL, true);
        expect_op(p, ")");
    } else if (is_op(k, "[")) {
        nexttok(p);
        x = mk(p, E_LIST, k);
        nvec items = {0};
        while (!is_op(cur(p), "]")) {
            if (items.n) expect_op(p, ",");
            if (is_op(cur(p), "]")) break;
            nv_push(p, &items, parse_expr(p, true), NULL);
        }
        expect_op(p, "]");
        nv_attach(x, &items);
    } else if (is_op(k, "{")) {
        nexttok(p);
        x = mk(p, E_DICT, k);
        nvec items = {0};
        while (!is_op(cur(p), "}")) {
            if (items.n) expect_op(p, ",");
            if (is_op(cur(p), "}")) break;
            nv_push(p, &items, parse_expr(p, true), NULL);
            expect_op(p, ":");
            nv_push(p, &items, parse_expr(p, true), NULL);
        }
        expect_op(p, "}");
        nv_attach(x, &items);
    } else
        unexpected(p, k);
    p->depth--;
    return x;
}

static node *parse_unary(parser *p, bool with_filter) {
    tok *k = cur(p);
    enter(p, k);
    node *x;
    if (is_op(k, "-") || is_op(k, "+")) {
        nexttok(p);
        x = mk(p, is_op(k, "-") ? E_NEG : E_POS, k);
        x->a = parse_unary(p, false);
    } else
        x = parse_primary(p);
    x = parse_postfix(p, x);
    if (with_filter) x = parse_filter_expr(p, x);
    p->depth--;
    return x;
}

static node *bin(parser *p, const tok *k, binop op, node *a, node *b) {
    node *x = mk(p, E_BIN, k);
    x->op = (uint8_t)op;
    x->a = a;
    x->b = b;
    return x;
}

static node *parse_pow(parser *p) {
    node *x = parse_unary(p, true);
    while (is_op(cur(p), "**")) {
        tok *k = nexttok(p);
        x = bin(p, k, OP_POW, x, parse_unary(p, true));
    }
    return x;
}

static node *parse_math2(parser *p) {
    node *x = parse_pow(p);
    for (;;) {
        tok *k = cur(p);
        binop op;
        if (is_op(k, "*"))
            op = OP_MUL;
        else if (is_op(k, "/"))
            op = OP_DIV;
        else if (is_op(k, "//"))
            op = OP_FLOORDIV;
        else if (is_op(k, "%"))
            op = OP_MOD;
        else
            return x;
        nexttok(p);
        x = bin(p, k, op, x, parse_pow(p));
    }
}

static node *parse_concat(parser *p) {
    node *x = parse_math2(p);
    if (!is_op(cur(p), "~")) return x;
    node *c = mk(p, E_CONCAT, cur(p));
    nvec items = {0};
    nv_push(p, &items, x, NULL);
    while (is_op(cur(p), "~")) {
        nexttok(p);
        nv_push(p, &items, parse_math2(p), NULL);
    }
    nv_attach(c, &items);
    return c;
}

static node *parse_math1(parser *p) {
    node *x = parse_concat(p);
    for (;;) {
        tok *k = cur(p);
        if (!is_op(k, "+") && !is_op(k, "-")) return x;
        nexttok(p);
        x = bin(p, k, is_op(k, "+") ? OP_ADD : OP_SUB, x, parse_concat(p));
    }
}

static node *parse_compare(parser *p) {
    tok *k0 = cur(p);
    node *x = parse_math1(p);
    nvec ops = {0};
    for (;;) {
        tok *k = cur(p);
        const char *op = NULL;
        static const char *const cmps[] = {"==", "!=", "<", "<=", ">", ">="};
        for (size_t i = 0; i < 6; i++)
            if (is_op(k, cmps[i])) op = cmps[i];
        if (op) {
            nexttok(p);
        } else if (is_name(k, "in")) {
            nexttok(p);
            op = "in";
        } else if (is_name(k, "not") && is_name(&p->toks[p->pos + 1], "in")) {
            p->pos += 2;
            op = "notin";
        } else
            break;
        if (!ops.n) nv_push(p, &ops, x, NULL);
        nv_push(p, &ops, parse_math1(p), op);
    }
    if (!ops.n) return x;
    node *c = mk(p, E_COMPARE, k0);
    nv_attach(c, &ops);
    return c;
}

static node *parse_not(parser *p) {
    tok *k = cur(p);
    if (is_name(k, "not")) {
        nexttok(p);
        enter(p, k);
        node *x = mk(p, E_NOT, k);
        x->a = parse_not(p);
        p->depth--;
        return x;
    }
    return parse_compare(p);
}

static node *parse_and(parser *p) {
    node *x = parse_not(p);
    while (is_name(cur(p), "and")) {
        tok *k = nexttok(p);
        node *y = mk(p, E_AND, k);
        y->a = x;
        y->b = parse_not(p);
        x = y;
    }
    return x;
}

static node *parse_or(parser *p) {
    node *x = parse_and(p);
    while (is_name(cur(p), "or")) {
        tok *k = nexttok(p);
        node *y = mk(p, E_OR, k);
        y->a = x;
        y->b = parse_and(p);
        x = y;
    }
    return x;
}

static node *parse_expr(parser *p, bool with_condexpr) {
    tok *k0 = cur(p);
    enter(p, k0);
    node *x;
    if (!with_condexpr) {
        x = parse_or(p);
    } else {
        x = parse_or(p);
        while (is_name(cur(p), "if")) {
            tok *k = nexttok(p);
            bool soft = p->soft;
            p->soft = true;
            node *c = mk(p, E_COND, k);
            c->b = x;
            c->a = parse_or(p);
            if (is_name(cur(p), "else")) {
                nexttok(p);
                c->c = parse_expr(p, true);
            }
            p->soft = soft;
            x = c;
        }
    }
    p->depth--;
    return x;
}

static bool tuple_end(parser *p, const char *extra_end) {
    tok *k = cur(p);
    return k->t == T_VAR_END || k->t == T_BLOCK_END || k->t == T_EOF || is_op(k, ")") ||
           (extra_end && is_name(k, extra_end));
}

static node *parse_tuple(parser *p, bool with_condexpr, const char *extra_end,
                         bool explicit_parens) {
    tok *k0 = cur(p);
    nvec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n) expect_op(p, ",");
        if (tuple_end(p, extra_end)) break;
        nv_push(p, &items, parse_expr(p, with_condexpr), NULL);
        if (is_op(cur(p), ","))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (items.n) return items.v[0];
        if (!explicit_parens) {
            char b[64];
            perr(p, k0->line, k0->col, "Expected an expression, got '%s'",
                 tok_desc(k0, b, sizeof b));
        }
    }
    node *t = mk(p, E_TUPLE, k0);
    nv_attach(t, &items);
    return t;
}

/* assignment target: name, tuple of names, or (with_ns) name.attr */
static node *parse_target(parser *p, bool with_ns, const char *extra_end) {
    tok *k = cur(p);
    if (with_ns && k->t == T_NAME && is_op(&p->toks[p->pos + 1], ".") &&
        p->toks[p->pos + 2].t == T_NAME) {
        node *x = mk(p, E_ATTR, k);
        x->a = mk(p, E_NAME, k);
        x->a->name = pstrdup(p, k->s, k->len);
        x->name = pstrdup(p, p->toks[p->pos + 2].s, p->toks[p->pos + 2].len);
        p->pos += 3;
        return x;
    }
    nvec items = {0};
    bool is_tuple = false, paren = false;
    if (is_op(k, "(")) {
        nexttok(p);
        paren = true;
    }
    for (;;) {
        if (items.n) expect_op(p, ",");
        tok *t = cur(p);
        if (t->t != T_NAME || (extra_end && is_name(t, extra_end))) {
            if (items.n) break;
            char b[64];
            perr(p, t->line, t->col, "can't assign to '%s'", tok_desc(t, b, sizeof b));
        }
        nexttok(p);
        node *nm = mk(p, E_NAME, t);
        nm->name = pstrdup(p, t->s, t->len);
        nv_push(p, &items, nm, NULL);
        if (is_op(cur(p), ","))
            is_tuple = true;
        else
            break;
    }
    if (paren) expect_op(p, ")");
    if (!is_tuple && !paren) return items.v[0];
    node *x = mk(p, E_TUPLE, k);
    nv_attach(x, &items);
    return x;
}

/* ---- statements -------------------------------------------------------------------------------
 */

static node *subparse(parser *p, const char *const *end_tags, const char **found, const tok *opener,
                      const char *block);

static void expect_block_end(parser *p) {
    expect_type(p, T_BLOCK_END);
}

static void parse_macro_sig(parser *p, node *m) {
    nvec params = {0};
    expect_op(p, "(");
    while (!is_op(cur(p), ")")) {
        if (params.n) expect_op(p, ",");
        tok *k = cur(p);
        if (k->t != T_NAME) unexpected(p, k);
        nexttok(p);
        node *dflt = NULL;
        if (is_op(cur(p), "=")) {
            nexttok(p);
            dflt = parse_expr(p, true);
        }
        nv_push(p, &params, dflt, pstrdup(p, k->s, k->len));
    }
    expect_op(p, ")");
    nv_attach(m, &params);
}

/* AST walks use an explicit stack: a tree can be far deeper than the C stack allows before its
 * depth has been checked. */
typedef struct walk_item {
    const node *x;
    int depth;
} walk_item;

typedef struct walk {
    parser *p;
    walk_item *v;
    size_t n, cap;
} walk;

static void walk_push(walk *w, const node *x, int depth) {
    if (!x) return;
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        walk_item *v = realloc(w->v, cap * sizeof *v);
        if (!v) {
            free(w->v);
            w->v = NULL;
            jx_fail_st(&w->p->rc, HM_ERR_NO_MEMORY, NULL, "out of memory");
        }
        w->v = v;
        w->cap = cap;
    }
    w->v[w->n++] = (walk_item){x, depth};
}

static bool is_expr_kind(const node *x) {
    return x->kind < S_BODY;
}

/* pushes the children of x; expression children one deeper than an expression parent */
static void walk_kids(walk *w, const node *x, int depth) {
    const node *kids[6] = {x->a, x->b, x->c, x->d, x->body, x->else_body};
    for (int i = 0; i < 6; i++)
        if (kids[i])
            walk_push(w, kids[i], is_expr_kind(kids[i]) ? (is_expr_kind(x) ? depth + 1 : 1) : 0);
    for (int i = 0; i < x->n; i++)
        if (x->kids[i])
            walk_push(w, x->kids[i],
                      is_expr_kind(x->kids[i]) ? (is_expr_kind(x) ? depth + 1 : 1) : 0);
}

/* does the subtree mention name (varargs / kwargs / caller) as a variable? */
static bool mentions(parser *p, const node *root, const char *name) {
    walk w = {p, NULL, 0, 0};
    bool found = false;
    walk_kids(&w, root, 0);
    while (w.n && !found) {
        const node *x = w.v[--w.n].x;
        if (x->kind == E_NAME && !strcmp(x->name, name)) found = true;
        if (x->kind != S_MACRO) walk_kids(&w, x, 0); /* nested macros have their own */
    }
    free(w.v);
    return found || (root->kind == E_NAME && !strcmp(root->name, name));
}

/* jinja2 compiles expressions to Python, which fails on about 200 nested parentheses; deeper
 * trees (long operator, filter or attribute chains) are refused here as well */
static void check_expr_depth(parser *p, const node *root) {
    walk w = {p, NULL, 0, 0};
    walk_push(&w, root, 0);
    while (w.n) {
        walk_item it = w.v[--w.n];
        if (it.depth > JX_MAX_EXPR_DEPTH) {
            free(w.v);
            perr(p, it.x->line, it.x->col, "expression nested too deeply (limit %d levels)",
                 JX_MAX_EXPR_DEPTH);
        }
        walk_kids(&w, it.x, it.depth);
    }
    free(w.v);
}

static void enter_block(parser *p, const tok *k) {
    if (++p->block_depth > JX_MAX_BLOCK_DEPTH)
        perr(p, k->line, k->col, "blocks nested too deeply (limit %d)", JX_MAX_BLOCK_DEPTH);
}

static node *parse_statement(parser *p) {
    nexttok(p); /* block begin */
    tok *k = cur(p);
    if (k->t != T_NAME) perr(p, k->line, k->col, "tag name expected");
    nexttok(p);
    int saved_depth = p->depth;
    p->depth = 0; /* each tag's expressions have their own recursion budget */
    node *x;
    const char *found;
    bool soft = p->soft;
    if (is_name(k, "if")) {
        x = mk(p, S_IF, k);
        node *cur_if = x;
        p->soft = true;
        for (;;) {
            cur_if->a = parse_tuple(p, false, NULL, false);
            expect_block_end(p);
            static const char *const ends[] = {"elif", "else", "endif", NULL};
            cur_if->body = subparse(p, ends, &found, k, "if");
            if (!strcmp(found, "elif")) {
                node *e = mk(p, S_IF, cur(p));
                nexttok(p);
                cur_if->else_body = e;
                cur_if = e;
                continue;
            }
            if (!strcmp(found, "else")) {
                nexttok(p);
                expect_block_end(p);
                static const char *const ends2[] = {"endif", NULL};
                cur_if->else_body = subparse(p, ends2, &found, k, "if");
            }
            nexttok(p); /* endif */
            break;
        }
        p->soft = soft;
    } else if (is_name(k, "for")) {
        x = mk(p, S_FOR, k);
        if (++p->for_depth > JX_MAX_FOR_DEPTH)
            perr(p, k->line, k->col,
                 "for loops nested too deeply (limit %d in one macro; Python: too many statically "
                 "nested blocks)",
                 JX_MAX_FOR_DEPTH);
        x->b = parse_target(p, false, "in");
        if (!is_name(cur(p), "in")) perr(p, cur(p)->line, cur(p)->col, "expected 'in'");
        nexttok(p);
        x->a = parse_tuple(p, false, "recursive", false);
        bool outer_soft = p->soft;
        p->soft = false;
        if (is_name(cur(p), "if")) {
            nexttok(p);
            x->c = parse_expr(p, true);
        }
        if (is_name(cur(p), "recursive"))
            perr(p, cur(p)->line, cur(p)->col, "recursive for loops are not supported");
        expect_block_end(p);
        static const char *const ends[] = {"endfor", "else", NULL};
        x->body = subparse(p, ends, &found, k, "for");
        p->soft = outer_soft;
        if (!strcmp(found, "else")) {
            nexttok(p);
            expect_block_end(p);
            static const char *const ends2[] = {"endfor", NULL};
            x->else_body = subparse(p, ends2, &found, k, "for");
        }
        nexttok(p);
        p->for_depth--;
    } else if (is_name(k, "set")) {
        node *target = parse_target(p, true, NULL);
        if (is_op(cur(p), "=")) {
            nexttok(p);
            x = mk(p, S_SET, k);
            x->b = target;
            x->a = parse_tuple(p, true, NULL, false);
        } else {
            x = mk(p, S_SETBLOCK, k);
            x->b = target;
            if (target->kind != E_NAME && target->kind != E_ATTR)
                perr(p, k->line, k->col, "block set needs a single target");
            if (is_op(cur(p), "|")) x->c = parse_filter(p, NULL, false);
            expect_block_end(p);
            p->soft = false;
            static const char *const ends[] = {"endset", NULL};
            x->body = subparse(p, ends, &found, k, "set");
            p->soft = soft;
            nexttok(p);
        }
    } else if (is_name(k, "macro")) {
        x = mk(p, S_MACRO, k);
        tok *nm = cur(p);
        if (nm->t != T_NAME) unexpected(p, nm);
        nexttok(p);
        x->name = pstrdup(p, nm->s, nm->len);
        parse_macro_sig(p, x);
        expect_block_end(p);
        p->soft = false;
        static const char *const ends[] = {"endmacro", NULL};
        int for_depth = p->for_depth;
        p->for_depth = 0; /* a macro is a function of its own in jinja2's generated code */
        x->body = subparse(p, ends, &found, k, "macro");
        p->for_depth = for_depth;
        p->soft = soft;
        nexttok(p);
        x->uses = (mentions(p, x->body, "varargs") ? 1u : 0u) |
                  (mentions(p, x->body, "kwargs") ? 2u : 0u) |
                  (mentions(p, x->body, "caller") ? 4u : 0u);
    } else if (is_name(k, "call")) {
        x = mk(p, S_CALLBLOCK, k);
        if (is_op(cur(p), "(")) parse_macro_sig(p, x);
        x->a = parse_expr(p, true);
        if (x->a->kind != E_CALL) perr(p, k->line, k->col, "expected call");
        expect_block_end(p);
        p->soft = false;
        static const char *const ends[] = {"endcall", NULL};
        int for_depth = p->for_depth;
        p->for_depth = 0;
        x->body = subparse(p, ends, &found, k, "call");
        p->for_depth = for_depth;
        p->soft = soft;
        nexttok(p);
        x->uses = (mentions(p, x->body, "varargs") ? 1u : 0u) |
                  (mentions(p, x->body, "kwargs") ? 2u : 0u);
    } else if (is_name(k, "filter")) {
        x = mk(p, S_FILTERBLOCK, k);
        x->c = parse_filter(p, NULL, true);
        expect_block_end(p);
        p->soft = false;
        static const char *const ends[] = {"endfilter", NULL};
        x->body = subparse(p, ends, &found, k, "filter");
        p->soft = soft;
        nexttok(p);
    } else if (is_name(k, "generation")) {
        expect_block_end(p);
        static const char *const ends[] = {"endgeneration", NULL};
        x = subparse(p, ends, &found, k, "generation");
        nexttok(p);
    } else if (is_name(k, "break") || is_name(k, "continue")) {
        x = mk(p, is_name(k, "break") ? S_BREAK : S_CONTINUE, k);
    } else {
        static const char *const unsupported[] = {"include", "extends", "import",     "from",
                                                  "block",   "with",    "autoescape", "do",
                                                  "trans",   NULL};
        for (int i = 0; unsupported[i]; i++)
            if (is_name(k, unsupported[i]))
                perr(p, k->line, k->col, "the '%s' tag is not supported", unsupported[i]);
        perr(p, k->line, k->col, "Encountered unknown tag '%.*s'.",
             (int)(k->len > 40 ? 40 : k->len), k->s);
    }
    expect_block_end(p);
    p->depth = saved_depth;
    return x;
}

static node *subparse(parser *p, const char *const *end_tags, const char **found, const tok *opener,
                      const char *block) {
    tok *k0 = cur(p);
    node *body = mk(p, S_BODY, k0);
    nvec items = {0};
    for (;;) {
        tok *k = cur(p);
        if (k->t == T_EOF) {
            if (!end_tags) break;
            char want[128] = "";
            for (int i = 0; end_tags[i]; i++)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s'%s'", i ? " or " : "",
                         end_tags[i]);
            perr(p, opener->line, opener->col,
                 "Unexpected end of template. Jinja was looking for the following tags: %s. The "
                 "innermost block that needs to be closed is '%s'.",
                 want, block);
        } else if (k->t == T_DATA) {
            nexttok(p);
            node *t = mk(p, S_TEXT, k);
            t->val = k->val;
            nv_push(p, &items, t, NULL);
        } else if (k->t == T_VAR_BEGIN) {
            nexttok(p);
            node *x = mk(p, S_PRINT, k);
            x->a = parse_tuple(p, true, NULL, false);
            expect_type(p, T_VAR_END);
            nv_push(p, &items, x, NULL);
        } else if (k->t == T_BLOCK_BEGIN) {
            tok *nm = &p->toks[p->pos + 1];
            if (end_tags && nm->t == T_NAME) {
                for (int i = 0; end_tags[i]; i++)
                    if (is_name(nm, end_tags[i])) {
                        *found = end_tags[i];
                        p->pos++; /* now at the tag name; the caller consumes it */
                        nv_attach(body, &items);
                        return body;
                    }
            }
            enter_block(p, nm);
            nv_push(p, &items, parse_statement(p), NULL);
            p->block_depth--;
        } else
            unexpected(p, k);
    }
    nv_attach(body, &items);
    return body;
}

/* ---- entry point ------------------------------------------------------------------------------
 */

hm_status hm_jinja_parse(const char *src, size_t len, const char *name, hm_jinja **out) {
    *out = NULL;
    if (!src && len) return hm_errorf(HM_ERR_INVALID_ARG, "hm_jinja_parse: NULL source");
    hm_jinja *tpl = calloc(1, sizeof *tpl);
    if (!tpl) return hm_errorf(HM_ERR_NO_MEMORY, "template: out of memory");
    tpl->name = strdup(name ? name : "template");
    /* jinja2: newlines are normalised to \n and one trailing newline is dropped */
    char *norm = malloc(len + 1);
    if (!tpl->name || !norm) {
        free(norm);
        hm_jinja_free(tpl);
        return hm_errorf(HM_ERR_NO_MEMORY, "template: out of memory");
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else
            norm[n++] = src[i];
    }
    if (n && norm[n - 1] == '\n') n--;
    norm[n] = '\0';

    parser *p = calloc(1, sizeof *p);
    if (!p) {
        free(norm);
        hm_jinja_free(tpl);
        return hm_errorf(HM_ERR_NO_MEMORY, "template: out of memory");
    }
    p->rc.tpl = tpl;
    p->rc.p = hm_jinja_default_params();
    p->rc.p.max_memory = (size_t)1 << 30;
    p->rc.p.max_steps = UINT64_MAX; /* parsing is linear in the source */
    hm_arena_init(&p->rc.ar, 64 << 10, "template");
    p->src = norm;
    p->n = n;
    hm_status st = HM_OK;
    if (setjmp(p->rc.jb) == 0) {
        lex(p);
        const char *found = NULL;
        tpl->root = subparse(p, NULL, &found, NULL, NULL);
        check_expr_depth(p, tpl->root);
    } else {
        st = p->rc.st;
    }
    tpl->arena = p->rc.ar;
    free(p->toks);
    free(p);
    free(norm);
    if (st != HM_OK) {
        hm_jinja_free(tpl);
        return st;
    }
    *out = tpl;
    return HM_OK;
}

void hm_jinja_free(hm_jinja *tpl) {
    if (!tpl) return;
    hm_arena_free(&tpl->arena);
    free(tpl->name);
    free(tpl);
}

const char *hm_jinja_name(const hm_jinja *tpl) {
    return tpl->name;
}
