/* jsonp.c - the JSON prefix recognizer of jsonp.h: a pushdown automaton over bytes. */
#include "engine/jsonp.h"

#include <string.h>

enum {
    S_VALUE,     /* a value (top level, after ':', ',' in an array, '[') */
    S_ARR_FIRST, /* after '[': a value or ']' */
    S_OBJ_FIRST, /* after '{': a key or '}' */
    S_KEY,       /* after ',' in an object: a key */
    S_COLON,     /* after a key */
    S_AFTER,     /* after a value inside a container: ',' or the closing bracket */
    S_STR,       /* inside a string value */
    S_KSTR,      /* inside a key */
    S_ESC,       /* after '\' (sub: 1 = key) */
    S_UHEX,      /* in \uXXXX (sub: digits read, +8 = key) */
    S_NUM,       /* inside a number (sub: the number's state) */
    S_LIT,       /* inside true/false/null (sub: bytes matched) */
    S_DONE,      /* the top-level value is complete */
};

enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

static bool is_ws(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

void hm_jsonp_init(hm_jsonp *p, bool object_only) {
    memset(p, 0, sizeof *p);
    p->st = S_VALUE;
    p->object_only = object_only;
}

bool hm_jsonp_done(const hm_jsonp *p) {
    return p->st == S_DONE;
}

/* a value ended: what follows depends on the container holding it */
static void value_end(hm_jsonp *p) {
    p->st = p->depth ? S_AFTER : S_DONE;
}

/* can a number in state n end here? */
static bool num_complete(int n) {
    return n == N_ZERO || n == N_INT || n == N_FRAC || n == N_EXP;
}

static bool begin_value(hm_jsonp *p, unsigned char c) {
    if (p->object_only && p->depth == 0 && c != '{') return false;
    switch (c) {
    case '{':
    case '[':
        if (p->depth >= HM_JSONP_DEPTH) return false;
        p->stack[p->depth++] = c;
        p->st = c == '{' ? S_OBJ_FIRST : S_ARR_FIRST;
        return true;
    case '"':
        p->st = S_STR;
        return true;
    case '-':
        p->st = S_NUM, p->sub = N_MINUS;
        return true;
    case '0':
        p->st = S_NUM, p->sub = N_ZERO;
        return true;
    case 't':
    case 'f':
    case 'n':
        p->st = S_LIT, p->lit = c, p->sub = 1;
        return true;
    default:
        if (c >= '1' && c <= '9') {
            p->st = S_NUM, p->sub = N_INT;
            return true;
        }
        return false;
    }
}

static bool close_container(hm_jsonp *p, unsigned char c) {
    if (!p->depth || p->stack[p->depth - 1] != (c == '}' ? '{' : '[')) return false;
    p->depth--;
    value_end(p);
    return true;
}

static bool hexd(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool step(hm_jsonp *p, unsigned char c) {
    switch (p->st) {
    case S_VALUE:
        /* json_object: the object opens at once (a model left free to emit leading whitespace
         * may never stop) */
        if (is_ws(c)) return !(p->object_only && p->depth == 0);
        return begin_value(p, c);
    case S_ARR_FIRST:
        if (is_ws(c)) return true;
        if (c == ']') return close_container(p, c);
        return begin_value(p, c);
    case S_OBJ_FIRST:
    case S_KEY:
        if (is_ws(c)) return true;
        if (c == '}' && p->st == S_OBJ_FIRST) return close_container(p, c);
        if (c != '"') return false;
        p->st = S_KSTR;
        return true;
    case S_COLON:
        if (is_ws(c)) return true;
        if (c != ':') return false;
        p->st = S_VALUE;
        return true;
    case S_AFTER:
        if (is_ws(c)) return true;
        if (c == ',') {
            p->st = p->stack[p->depth - 1] == '{' ? S_KEY : S_VALUE;
            return true;
        }
        if (c == '}' || c == ']') return close_container(p, c);
        return false;
    case S_STR:
    case S_KSTR:
        if (c < 0x20) return false;
        if (c == '\\') {
            p->sub = p->st == S_KSTR;
            p->st = S_ESC;
        } else if (c == '"') {
            if (p->st == S_KSTR)
                p->st = S_COLON;
            else
                value_end(p);
        }
        return true;
    case S_ESC: {
        const bool key = p->sub;
        if (c == 'u') {
            p->st = S_UHEX, p->sub = key ? 8 : 0;
            return true;
        }
        if (!strchr("\"\\/bfnrt", c) || !c) return false;
        p->st = key ? S_KSTR : S_STR;
        return true;
    }
    case S_UHEX:
        if (!hexd(c)) return false;
        if ((++p->sub & 7) == 4) p->st = (p->sub & 8) ? S_KSTR : S_STR;
        return true;
    case S_NUM: {
        const bool digit = c >= '0' && c <= '9';
        switch (p->sub) {
        case N_MINUS:
            if (c == '0') return p->sub = N_ZERO, true;
            if (digit) return p->sub = N_INT, true;
            return false;
        case N_ZERO:
        case N_INT:
            if (digit && p->sub == N_INT) return true;
            if (c == '.') return p->sub = N_DOT, true;
            if (c == 'e' || c == 'E') return p->sub = N_E, true;
            break;
        case N_DOT:
            return digit ? (p->sub = N_FRAC, true) : false;
        case N_FRAC:
            if (digit) return true;
            if (c == 'e' || c == 'E') return p->sub = N_E, true;
            break;
        case N_E:
            if (c == '+' || c == '-') return p->sub = N_ESIGN, true;
            return digit ? (p->sub = N_EXP, true) : false;
        case N_ESIGN:
            return digit ? (p->sub = N_EXP, true) : false;
        case N_EXP:
            if (digit) return true;
            break;
        }
        /* the number ends at c, which the container then reads */
        if (!num_complete(p->sub)) return false;
        value_end(p);
        if (p->st == S_DONE) return is_ws(c);
        return step(p, c);
    }
    case S_LIT: {
        const char *word = p->lit == 't' ? "true" : p->lit == 'f' ? "false" : "null";
        if (c != (unsigned char)word[p->sub]) return false;
        if (!word[++p->sub]) value_end(p);
        return true;
    }
    case S_DONE:
        return is_ws(c);
    }
    return false;
}

bool hm_jsonp_feed(hm_jsonp *p, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        const bool in_str = p->st == S_STR || p->st == S_KSTR || p->st == S_ESC || p->st == S_UHEX;
        if (!step(p, c)) return false;
        if (in_str || !is_ws(c))
            p->ws = 0;
        else if (++p->ws > HM_JSONP_WS)
            return false;
    }
    return true;
}
