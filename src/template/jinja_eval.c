/* jinja_eval.c - the renderer: evaluates the AST with Python semantics and jinja2's scoping (for
 * loops, macros and call blocks open a scope; if does not). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_int.h"

enum { FLOW_NONE, FLOW_BREAK, FLOW_CONTINUE };

static jv eval(rctx *rc, scope *sc, const node *x);
static int exec(rctx *rc, scope *sc, const node *x);

/* ---- output -----------------------------------------------------------------------------------
 */

static void emit(rctx *rc, const node *at, const char *s, size_t n) {
    if (!n) return;
    jx_step(rc, at, jx_bytes_cost(n));
    if (rc->len + n > rc->p.max_output)
        jx_fail_st(rc, HM_ERR_UNSUPPORTED, at, "output longer than %zu bytes", rc->p.max_output);
    if (rc->len + n + 1 > rc->cap) {
        size_t cap = rc->cap ? rc->cap : 4096;
        while (cap < rc->len + n + 1) cap *= 2;
        char *o = realloc(rc->out, cap);
        if (!o) jx_fail_st(rc, HM_ERR_NO_MEMORY, at, "out of memory");
        rc->out = o;
        rc->cap = cap;
    }
    memcpy(rc->out + rc->len, s, n);
    rc->len += n;
}

static jv capture(rctx *rc, scope *sc, const node *body) {
    size_t mark = rc->len;
    exec(rc, sc, body);
    jv s = jv_str(rc, rc->out ? rc->out + mark : "", rc->len - mark);
    rc->len = mark;
    return s;
}

/* ---- scopes -----------------------------------------------------------------------------------
 */

static scope *scope_new(rctx *rc, scope *parent) {
    scope *s = jx_alloc(rc, sizeof *s);
    memset(s, 0, sizeof *s);
    s->parent = parent;
    return s;
}

static void scope_set(rctx *rc, scope *sc, const char *name, jv v) {
    jd_set(rc, &sc->vars, jv_cstr(rc, name), v);
}

static jv lookup(rctx *rc, scope *sc, const char *name) {
    jv key = {.t = JV_DICT};
    for (scope *s = sc; s; s = s->parent) {
        key.u.d = &s->vars;
        jv *v = jv_dict_find_s(key, name);
        if (v) return *v;
    }
    return jx_global(rc, name);
}

/* ---- operators --------------------------------------------------------------------------------
 */

static _Noreturn void undefined_error(rctx *rc, const node *at, jv v) {
    if (v.flags & JU_UNSAFE) jx_fail(rc, at, "SecurityError: %s", v.u.uname);
    if (v.u.uname) jx_fail(rc, at, "UndefinedError: %s", v.u.uname);
    jx_fail(rc, at, "UndefinedError: value is undefined");
}

static int64_t floordiv_i(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static _Noreturn void int_overflow(rctx *rc, const node *at) {
    jx_fail_st(rc, HM_ERR_UNSUPPORTED, at,
               "integer result beyond 64 bits (Python's big integers are not supported)");
}

/* Python's float divmod: the remainder takes the divisor's sign, -0.0 included */
static void float_divmod(double vx, double wx, double *div_out, double *mod_out) {
    double mod = fmod(vx, wx), div = (vx - mod) / wx, fd;
    if (mod != 0) {
        if ((wx < 0) != (mod < 0)) {
            mod += wx;
            div -= 1.0;
        }
    } else
        mod = copysign(0.0, wx);
    if (div != 0) {
        fd = floor(div);
        if (div - fd > 0.5) fd += 1.0;
    } else
        fd = copysign(0.0, vx / wx);
    *div_out = fd;
    *mod_out = mod;
}

/* Python's float ** float */
static jv float_pow(rctx *rc, const node *at, double x, double y) {
    if (x == 0 && y < 0)
        jx_fail(rc, at, "ZeroDivisionError: 0.0 cannot be raised to a negative power");
    if (x < 0 && isfinite(x) && isfinite(y) && y != floor(y))
        jx_fail_st(rc, HM_ERR_UNSUPPORTED, at,
                   "a negative number to a fractional power is complex (not supported)");
    double r = pow(x, y);
    if (isinf(r) && isfinite(x) && isfinite(y))
        jx_fail(rc, at, "OverflowError: (34, 'Numerical result out of range')");
    return jv_float(r);
}

static jv arith(rctx *rc, const node *at, binop op, jv a, jv b) {
    if (a.t == JV_UNDEF) undefined_error(rc, at, a);
    if (b.t == JV_UNDEF) undefined_error(rc, at, b);
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (jv_is_num(a) && jv_is_num(b)) {
        bool ints = a.t != JV_FLOAT && b.t != JV_FLOAT;
        int64_t x = a.t == JV_INT    ? a.u.i
                    : a.t == JV_BOOL ? a.u.b
                                     : 0,
                y = b.t == JV_INT    ? b.u.i
                    : b.t == JV_BOOL ? b.u.b
                                     : 0;
        double fx = jv_num(a), fy = jv_num(b), fd, fm;
        int64_t r;
        switch (op) {
        case OP_ADD:
            if (!ints) return jv_float(fx + fy);
            if (__builtin_add_overflow(x, y, &r)) int_overflow(rc, at);
            return jv_int(r);
        case OP_SUB:
            if (!ints) return jv_float(fx - fy);
            if (__builtin_sub_overflow(x, y, &r)) int_overflow(rc, at);
            return jv_int(r);
        case OP_MUL:
            if (!ints) return jv_float(fx * fy);
            if (__builtin_mul_overflow(x, y, &r)) int_overflow(rc, at);
            return jv_int(r);
        case OP_DIV:
            if (fy == 0) jx_fail(rc, at, "ZeroDivisionError: division by zero");
            return jv_float(fx / fy);
        case OP_FLOORDIV:
            if (ints) {
                if (y == 0)
                    jx_fail(rc, at, "ZeroDivisionError: integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) int_overflow(rc, at);
                return jv_int(floordiv_i(x, y));
            }
            if (fy == 0) jx_fail(rc, at, "ZeroDivisionError: float floor division by zero");
            float_divmod(fx, fy, &fd, &fm);
            return jv_float(fd);
        case OP_MOD:
            if (ints) {
                if (y == 0)
                    jx_fail(rc, at, "ZeroDivisionError: integer division or modulo by zero");
                if (y == -1) return jv_int(0); /* INT64_MIN % -1 included */
                int64_t m = x % y;             /* Python: the sign of the divisor */
                return jv_int(m != 0 && (m < 0) != (y < 0) ? m + y : m);
            }
            if (fy == 0) jx_fail(rc, at, "ZeroDivisionError: float modulo");
            float_divmod(fx, fy, &fd, &fm);
            return jv_float(fm);
        case OP_POW:
            if (ints && y >= 0) {
                int64_t acc = 1, base = x;
                bool ovf = false;
                for (int64_t e = y; e > 0 && !ovf; e >>= 1) {
                    if (e & 1) ovf |= __builtin_mul_overflow(acc, base, &acc);
                    if (e > 1) ovf |= __builtin_mul_overflow(base, base, &base);
                }
                if (!ovf) return jv_int(acc);
                int_overflow(rc, at);
            }
            return float_pow(rc, at, fx, fy);
        }
    }
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) {
        sbuf s;
        sb_init(&s, rc);
        sb_add(&s, a.u.s->s, a.u.s->len);
        sb_add(&s, b.u.s->s, b.u.s->len);
        return sb_val(&s);
    }
    if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST && !((a.flags | b.flags) & JL_ITER) &&
        (a.flags & JL_TUPLE) == (b.flags & JL_TUPLE)) {
        jv l = jv_list_new(rc, a.u.l->n + b.u.l->n, a.flags);
        for (size_t i = 0; i < a.u.l->n; i++) jv_list_push(rc, l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++) jv_list_push(rc, l, b.u.l->v[i]);
        return l;
    }
    if (op == OP_MUL && (a.t == JV_STR || a.t == JV_LIST || b.t == JV_STR || b.t == JV_LIST)) {
        jv seq = a.t == JV_STR || a.t == JV_LIST ? a : b,
           cnt = seq.t == a.t && seq.u.s == a.u.s ? b : a;
        if ((cnt.t == JV_INT || cnt.t == JV_BOOL) && !(seq.t == JV_LIST && (seq.flags & JL_ITER))) {
            int64_t n = cnt.t == JV_INT ? cnt.u.i : cnt.u.b;
            if (n < 0) n = 0;
            if (seq.t == JV_STR) {
                size_t total;
                if (!hm_size_mul(seq.u.s->len, (size_t)n, &total) || total > rc->p.max_memory)
                    jx_alloc(rc, SIZE_MAX); /* fails with the memory limit */
                sbuf s;
                sb_init(&s, rc);
                for (int64_t i = 0; i < n; i++) sb_add(&s, seq.u.s->s, seq.u.s->len);
                return sb_val(&s);
            }
            size_t total;
            if (!hm_size_mul(seq.u.l->n, (size_t)n, &total) ||
                total > rc->p.max_memory / sizeof(jv))
                jx_alloc(rc, SIZE_MAX);
            jv l = jv_list_new(rc, total, seq.flags);
            for (int64_t i = 0; i < n; i++)
                for (size_t j = 0; j < seq.u.l->n; j++) jv_list_push(rc, l, seq.u.l->v[j]);
            return l;
        }
    }
    if (op == OP_ADD && a.t == JV_STR)
        jx_fail(rc, at, "TypeError: can only concatenate str (not \"%s\") to str", jv_typename(b));
    if (op == OP_ADD && a.t == JV_LIST)
        jx_fail(rc, at, "TypeError: can only concatenate list (not \"%s\") to list",
                jv_typename(b));
    jx_fail(rc, at, "TypeError: unsupported operand type(s) for %s: '%s' and '%s'", names[op],
            jv_typename(a), jv_typename(b));
}

static bool contains(rctx *rc, const node *at, jv item, jv seq) {
    switch ((jv_type)seq.t) {
    case JV_STR:
        if (item.t != JV_STR)
            jx_fail(rc, at, "TypeError: 'in <string>' requires string as left operand, not %s",
                    jv_typename(item));
        if (!item.u.s->len) return true;
        jx_step(rc, at, jx_bytes_cost(seq.u.s->len));
        return memmem(seq.u.s->s, seq.u.s->len, item.u.s->s, item.u.s->len) != NULL;
    case JV_DICT:
        if (seq.flags) break;
        return jv_dict_has(rc, at, seq, item);
    case JV_LIST:
    case JV_UNDEF: {
        jlist *l = jv_iter(rc, at, seq);
        jx_step(rc, at, l->n);
        for (size_t i = 0; i < l->n; i++)
            if (jv_eq(rc, l->v[i], item)) return true;
        return false;
    }
    default:
        break;
    }
    jx_fail(rc, at, "TypeError: argument of type '%s' is not iterable", jv_typename(seq));
}

static bool compare(rctx *rc, const node *at, const char *op, jv a, jv b) {
    if (!strcmp(op, "==")) return jv_eq(rc, a, b);
    if (!strcmp(op, "!=")) return !jv_eq(rc, a, b);
    if (!strcmp(op, "in")) return contains(rc, at, a, b);
    if (!strcmp(op, "notin")) return !contains(rc, at, a, b);
    int c = jv_cmp(rc, at, a, b);
    if (!strcmp(op, "<")) return c < 0;
    if (!strcmp(op, "<=")) return c <= 0;
    if (!strcmp(op, ">")) return c > 0;
    return c >= 0;
}

/* Python slice of a list or string */
static jv slice(rctx *rc, const node *at, jv obj, jv lo, jv hi, jv step) {
    if (obj.t == JV_UNDEF) undefined_error(rc, at, obj);
    int64_t st = 1;
    if (step.t != JV_NONE && step.t != JV_UNDEF) {
        if (step.t != JV_INT) jx_fail(rc, at, "TypeError: slice indices must be integers or None");
        st = step.u.i;
        if (st == 0) jx_fail(rc, at, "ValueError: slice step cannot be zero");
    }
    bool is_str = obj.t == JV_STR;
    if (!is_str && !(obj.t == JV_LIST && !(obj.flags & JL_ITER)))
        jx_fail(rc, at, "TypeError: '%s' object is not subscriptable", jv_typename(obj));
    const jstr *str = is_str ? obj.u.s : NULL;
    jlist *chars = is_str ? NULL : obj.u.l;
    if (is_str) jx_step(rc, at, jx_bytes_cost(str->len));
    int64_t n = is_str ? (int64_t)u8_len(str->s, str->len) : (int64_t)chars->n;
    int64_t b, e;
    jv bounds[2] = {lo, hi};
    int64_t res[2];
    for (int k = 0; k < 2; k++) {
        jv v = bounds[k];
        if (v.t == JV_NONE || v.t == JV_UNDEF) {
            res[k] = k == 0 ? (st > 0 ? 0 : n - 1) : (st > 0 ? n : -1);
            continue;
        }
        if (v.t != JV_INT && v.t != JV_BOOL)
            jx_fail(rc, at, "TypeError: slice indices must be integers or None");
        int64_t i = v.t == JV_INT ? v.u.i : v.u.b;
        if (i < 0) {
            i += n;
            if (i < 0) i = st > 0 ? 0 : -1;
        } else if (i >= n)
            i = st > 0 ? n : n - 1;
        res[k] = i;
    }
    b = res[0];
    e = res[1];
    if (is_str && st == 1) { /* a plain substring: one copy */
        if (e <= b) return jv_str(rc, "", 0);
        size_t ob = u8_offset(str->s, str->len, (size_t)b);
        size_t oe = ob + u8_offset(str->s + ob, str->len - ob, (size_t)(e - b));
        return jv_str(rc, str->s + ob, oe - ob);
    }
    if (is_str) chars = jv_iter(rc, at, obj);
    jv out = jv_list_new(rc, 0, obj.flags & JL_TUPLE);
    sbuf s;
    sb_init(&s, rc);
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
        if (is_str)
            sb_add(&s, chars->v[i].u.s->s, chars->v[i].u.s->len);
        else
            jv_list_push(rc, out, chars->v[i]);
    }
    return is_str ? sb_val(&s) : out;
}

/* ---- expressions ------------------------------------------------------------------------------
 */

static void eval_args(rctx *rc, scope *sc, const node *x, jargs *a, int extra) {
    a->n = x->n;
    a->v = jx_alloc(rc, (size_t)(x->n + extra + 1) * sizeof(jv));
    a->kw = jx_alloc(rc, (size_t)(x->n + extra + 1) * sizeof(char *));
    for (int i = 0; i < x->n; i++) {
        a->v[i + extra] = eval(rc, sc, x->kids[i]);
        a->kw[i + extra] = x->names[i];
    }
    a->n += extra;
}

static jv apply_filter(rctx *rc, scope *sc, const node *f, jv in) {
    jfilter fn = jx_find_filter(f->name);
    if (!fn) jx_fail(rc, f, "TemplateRuntimeError: No filter named '%s' found.", f->name);
    jargs a;
    eval_args(rc, sc, f, &a, 0);
    /* these take constant time whatever their input; the others are linear in a string input */
    if (strcmp(f->name, "default") && strcmp(f->name, "d") && strcmp(f->name, "safe") &&
        strcmp(f->name, "string"))
        jx_step_args(rc, f, in, &a);
    return fn(rc, f, in, &a);
}

/* a filter chain built by parse_filter over an inner value (filter blocks, set blocks) */
static jv apply_chain(rctx *rc, scope *sc, const node *f, jv in) {
    if (!f) return in;
    if (f->a) in = apply_chain(rc, sc, f->a, in);
    return apply_filter(rc, sc, f, in);
}

static jv make_list(rctx *rc, scope *sc, const node *x, uint8_t flags) {
    jv l = jv_list_new(rc, (size_t)x->n, flags);
    for (int i = 0; i < x->n; i++) jv_list_push(rc, l, eval(rc, sc, x->kids[i]));
    return l;
}

/* one step per node and a bound on the frames, whatever the input */
static void frame_enter(rctx *rc, const node *x) {
    if (++rc->nest > JX_MAX_NEST)
        jx_fail_st(rc, HM_ERR_UNSUPPORTED, x, "template evaluation nested deeper than %d frames",
                   JX_MAX_NEST);
    jx_step(rc, x, 1);
}

static jv eval_node(rctx *rc, scope *sc, const node *x);

static jv eval(rctx *rc, scope *sc, const node *x) {
    frame_enter(rc, x);
    jv v = eval_node(rc, sc, x);
    rc->nest--;
    return v;
}

static jv eval_node(rctx *rc, scope *sc, const node *x) {
    switch ((node_kind)x->kind) {
    case E_CONST:
        return x->val;
    case E_NAME:
        return lookup(rc, sc, x->name);
    case E_ATTR: {
        jv o = eval(rc, sc, x->a);
        if (o.t == JV_UNDEF) undefined_error(rc, x, o);
        return jx_getattr(rc, x, o, jv_cstr(rc, x->name), true);
    }
    case E_ITEM: {
        jv o = eval(rc, sc, x->a);
        if (o.t == JV_UNDEF) undefined_error(rc, x, o);
        return jx_getattr(rc, x, o, eval(rc, sc, x->b), false);
    }
    case E_SLICE: {
        if (!x->a) jx_fail(rc, x, "TypeError: a slice is not a valid index inside a tuple");
        jv o = eval(rc, sc, x->a);
        jv lo = x->b ? eval(rc, sc, x->b) : jv_none(), hi = x->c ? eval(rc, sc, x->c) : jv_none(),
           st = x->d ? eval(rc, sc, x->d) : jv_none();
        return slice(rc, x, o, lo, hi, st);
    }
    case E_CALL: {
        jv fn = eval(rc, sc, x->a);
        jargs a;
        eval_args(rc, sc, x, &a, 0);
        return jx_call(rc, x, fn, &a);
    }
    case E_FILTER:
        return apply_filter(rc, sc, x, x->a ? eval(rc, sc, x->a) : jv_undef());
    case E_TEST: {
        jtest t = jx_find_test(x->name);
        if (!t) jx_fail(rc, x, "TemplateRuntimeError: No test named '%s' found.", x->name);
        jv in = eval(rc, sc, x->a);
        jargs a;
        eval_args(rc, sc, x, &a, 0);
        bool r = t(rc, x, in, &a); /* tests that walk their input charge it themselves */
        return jv_bool(x->neg ? !r : r);
    }
    case E_NEG:
    case E_POS: {
        jv v = eval(rc, sc, x->a);
        if (v.t == JV_UNDEF) undefined_error(rc, x, v);
        if (v.t == JV_FLOAT) return jv_float(x->kind == E_NEG ? -v.u.f : v.u.f);
        if (v.t == JV_INT || v.t == JV_BOOL) {
            int64_t i = v.t == JV_INT ? v.u.i : v.u.b;
            if (x->kind == E_NEG && i == INT64_MIN) int_overflow(rc, x);
            return jv_int(x->kind == E_NEG ? -i : i);
        }
        jx_fail(rc, x, "TypeError: bad operand type for unary %c: '%s'",
                x->kind == E_NEG ? '-' : '+', jv_typename(v));
    }
    case E_NOT:
        return jv_bool(!jv_truthy(eval(rc, sc, x->a)));
    case E_BIN:
        return arith(rc, x, (binop)x->op, eval(rc, sc, x->a), eval(rc, sc, x->b));
    case E_AND: {
        jv a = eval(rc, sc, x->a);
        return jv_truthy(a) ? eval(rc, sc, x->b) : a;
    }
    case E_OR: {
        jv a = eval(rc, sc, x->a);
        return jv_truthy(a) ? a : eval(rc, sc, x->b);
    }
    case E_COMPARE: {
        jv left = eval(rc, sc, x->kids[0]);
        for (int i = 1; i < x->n; i++) {
            jv right = eval(rc, sc, x->kids[i]);
            if (!compare(rc, x, x->names[i], left, right)) return jv_bool(false);
            left = right;
        }
        return jv_bool(true);
    }
    case E_COND:
        if (jv_truthy(eval(rc, sc, x->a))) return eval(rc, sc, x->b);
        return x->c ? eval(rc, sc, x->c) : jv_undef();
    case E_LIST:
        return make_list(rc, sc, x, 0);
    case E_TUPLE:
        return make_list(rc, sc, x, JL_TUPLE);
    case E_DICT: {
        jv d = jv_dict_new(rc, (size_t)x->n / 2, 0);
        for (int i = 0; i + 1 < x->n; i += 2)
            jv_dict_set(rc, d, eval(rc, sc, x->kids[i]), eval(rc, sc, x->kids[i + 1]));
        return d;
    }
    case E_CONCAT: {
        sbuf s;
        sb_init(&s, rc);
        for (int i = 0; i < x->n; i++) jv_to_str(&s, eval(rc, sc, x->kids[i]));
        return sb_val(&s);
    }
    default:
        break;
    }
    jx_fail_st(rc, HM_ERR_INTERNAL, x, "node %d is not an expression", x->kind);
}

/* ---- assignment -------------------------------------------------------------------------------
 */

static void assign(rctx *rc, scope *sc, const node *target, jv v) {
    if (target->kind == E_NAME) {
        scope_set(rc, sc, target->name, v);
    } else if (target->kind == E_TUPLE) {
        jlist *l = jv_iter(rc, target, v);
        if ((int)l->n != target->n || l->n != (size_t)target->n)
            jx_fail(rc, target, "ValueError: %s values to unpack (expected %d, got %zu)",
                    l->n > (size_t)target->n ? "too many" : "not enough", target->n, l->n);
        for (int i = 0; i < target->n; i++) assign(rc, sc, target->kids[i], l->v[i]);
    } else if (target->kind == E_ATTR) {
        jv ns = lookup(rc, sc, target->a->name);
        if (ns.t != JV_DICT || !(ns.flags & JD_NS))
            jx_fail(rc, target,
                    "TemplateRuntimeError: cannot assign attribute on non-namespace object");
        if (target->name[0] == '_')
            jx_fail(rc, target,
                    "SecurityError: Chat templates cannot store underscore-prefixed attributes on "
                    "a namespace");
        jv_dict_set(rc, ns, jv_cstr(rc, target->name), v);
    } else
        jx_fail(rc, target, "cannot assign to this expression");
}

/* ---- macros -----------------------------------------------------------------------------------
 */

jv jx_call_macro(rctx *rc, const node *at, jfunc *f, jargs *a) {
    const node *m = f->macro;
    if (++rc->depth > rc->p.max_depth)
        jx_fail_st(rc, HM_ERR_UNSUPPORTED, at, "macro calls nested deeper than %d",
                   rc->p.max_depth);
    jx_step(rc, at, 1);
    scope *sc = scope_new(rc, f->closure);
    int npos = 0;
    for (int i = 0; i < a->n; i++)
        if (!a->kw[i]) npos++;
    jv varargs = jv_list_new(rc, 0, JL_TUPLE), kwargs = jv_dict_new(rc, 0, 0);
    bool *bound = jx_alloc(rc, (size_t)m->n + 1);
    memset(bound, 0, (size_t)m->n + 1);
    int pi = 0;
    for (int i = 0; i < a->n; i++) {
        if (a->kw[i]) continue;
        if (pi < m->n) {
            scope_set(rc, sc, m->names[pi], a->v[i]);
            bound[pi++] = true;
        } else if (m->uses & 1)
            jv_list_push(rc, varargs, a->v[i]);
        else
            jx_fail(rc, at, "TypeError: macro '%s' takes not more than %d argument(s)",
                    m->name ? m->name : "caller", m->n);
    }
    for (int i = 0; i < a->n; i++) {
        if (!a->kw[i]) continue;
        int k;
        for (k = 0; k < m->n; k++)
            if (!strcmp(m->names[k], a->kw[i])) break;
        if (k < m->n) {
            if (bound[k])
                jx_fail(rc, at, "TypeError: macro '%s' got multiple values for argument '%s'",
                        m->name ? m->name : "caller", a->kw[i]);
            scope_set(rc, sc, m->names[k], a->v[i]);
            bound[k] = true;
        } else if (!strcmp(a->kw[i], "caller") && m->kind == S_MACRO && (m->uses & 4)) {
            scope_set(rc, sc, "caller", a->v[i]);
        } else if (m->uses & 2)
            jv_dict_set(rc, kwargs, jv_cstr(rc, a->kw[i]), a->v[i]);
        else
            jx_fail(rc, at, "TypeError: macro '%s' takes no keyword argument '%s'",
                    m->name ? m->name : "caller", a->kw[i]);
    }
    for (int k = 0; k < m->n; k++)
        if (!bound[k])
            scope_set(rc, sc, m->names[k], m->kids[k] ? eval(rc, sc, m->kids[k]) : jv_undef());
    if (m->uses & 1) scope_set(rc, sc, "varargs", varargs);
    if (m->uses & 2) scope_set(rc, sc, "kwargs", kwargs);
    if (f->caller.t != JV_UNDEF) scope_set(rc, sc, "caller", f->caller);
    jv out = capture(rc, sc, m->body);
    rc->depth--;
    return out;
}

/* ---- statements -------------------------------------------------------------------------------
 */

static jv loop_cycle(rctx *rc, const node *at, jv self, jargs *a) {
    if (a->n == 0) jx_fail(rc, at, "TypeError: no items for cycling given");
    jv *i0 = jv_dict_find_s(self, "index0");
    return a->v[(i0 ? i0->u.i : 0) % a->n];
}

static jv loop_changed(rctx *rc, const node *at, jv self, jargs *a) {
    jv cur = jv_list_new(rc, (size_t)a->n, 0);
    for (int i = 0; i < a->n; i++) jv_list_push(rc, cur, a->v[i]);
    jv *last = jv_dict_find_s(self, "_last_changed");
    if (last && jv_eq(rc, *last, cur)) return jv_bool(false);
    jv_dict_set(rc, self, jv_cstr(rc, "_last_changed"), cur);
    return jv_bool(true);
}

jv jx_builtin_fn(rctx *rc, const char *name, jbuiltin fn, jv self) {
    jfunc *f = jx_alloc(rc, sizeof *f);
    memset(f, 0, sizeof *f);
    f->kind = JF_BUILTIN;
    f->name = name;
    f->fn = fn;
    f->self = self;
    f->caller = jv_undef();
    return (jv){.t = JV_FUNC, .u.fn = f};
}

static void set_s(rctx *rc, jv d, const char *k, jv v) {
    jv_dict_set(rc, d, jv_cstr(rc, k), v);
}

static int exec_for(rctx *rc, scope *sc, const node *x) {
    jv seq = eval(rc, sc, x->a);
    jlist *items = jv_iter(rc, x->a, seq);
    scope *ls = scope_new(rc, sc);
    if (x->c) { /* {% for a in b if cond %}: filtered before loop.* is computed */
        jv kept = jv_list_new(rc, items->n, 0);
        for (size_t i = 0; i < items->n; i++) {
            jx_step(rc, x, 1);
            assign(rc, ls, x->b, items->v[i]);
            if (jv_truthy(eval(rc, ls, x->c))) jv_list_push(rc, kept, items->v[i]);
        }
        items = kept.u.l;
    }
    if (!items->n) return x->else_body ? exec(rc, sc, x->else_body) : FLOW_NONE;
    jv loop = jv_dict_new(rc, 16, JD_LOOP);
    int64_t n = (int64_t)items->n;
    set_s(rc, loop, "length", jv_int(n));
    set_s(rc, loop, "depth", jv_int(1));
    set_s(rc, loop, "depth0", jv_int(0));
    set_s(rc, loop, "cycle", jx_builtin_fn(rc, "loop.cycle", loop_cycle, loop));
    set_s(rc, loop, "changed", jx_builtin_fn(rc, "loop.changed", loop_changed, loop));
    /* the per-iteration values are updated in place: the dict never grows past its capacity */
    static const char *const k_iter_keys[] = {"index", "index0", "revindex", "revindex0",
                                              "first", "last",   "previtem", "nextitem"};
    jv *slot[8];
    for (int k = 0; k < 8; k++) {
        set_s(rc, loop, k_iter_keys[k], jv_undef());
        slot[k] = jv_dict_find_s(loop, k_iter_keys[k]);
    }
    for (int64_t i = 0; i < n; i++) {
        jx_step(rc, x, 1);
        *slot[0] = jv_int(i + 1);
        *slot[1] = jv_int(i);
        *slot[2] = jv_int(n - i);
        *slot[3] = jv_int(n - i - 1);
        *slot[4] = jv_bool(i == 0);
        *slot[5] = jv_bool(i == n - 1);
        *slot[6] = i > 0 ? items->v[i - 1] : jv_undef();
        *slot[7] = i + 1 < n ? items->v[i + 1] : jv_undef();
        scope *is = scope_new(rc, sc); /* jinja2: assignments do not survive an iteration */
        scope_set(rc, is, "loop", loop);
        assign(rc, is, x->b, items->v[i]);
        int fl = exec(rc, is, x->body);
        if (fl == FLOW_BREAK) break;
    }
    return FLOW_NONE;
}

static int exec_node(rctx *rc, scope *sc, const node *x);

static int exec(rctx *rc, scope *sc, const node *x) {
    frame_enter(rc, x);
    int fl = exec_node(rc, sc, x);
    rc->nest--;
    return fl;
}

static int exec_node(rctx *rc, scope *sc, const node *x) {
    switch ((node_kind)x->kind) {
    case S_BODY:
        for (int i = 0; i < x->n; i++) {
            int fl = exec(rc, sc, x->kids[i]);
            if (fl) return fl;
        }
        return FLOW_NONE;
    case S_TEXT:
        emit(rc, x, x->val.u.s->s, x->val.u.s->len);
        return FLOW_NONE;
    case S_PRINT: {
        jv v = eval(rc, sc, x->a);
        if (v.t == JV_STR) {
            emit(rc, x, v.u.s->s, v.u.s->len);
        } else {
            sbuf b;
            sb_init(&b, rc);
            jv_to_str(&b, v);
            emit(rc, x, b.p, b.len);
        }
        return FLOW_NONE;
    }
    case S_IF:
        if (jv_truthy(eval(rc, sc, x->a))) return exec(rc, sc, x->body);
        return x->else_body ? exec(rc, sc, x->else_body) : FLOW_NONE;
    case S_FOR:
        return exec_for(rc, sc, x);
    case S_SET:
        assign(rc, sc, x->b, eval(rc, sc, x->a));
        return FLOW_NONE;
    case S_SETBLOCK: {
        scope *inner = scope_new(rc, sc);
        jv v = apply_chain(rc, sc, x->c, capture(rc, inner, x->body));
        assign(rc, sc, x->b, v);
        return FLOW_NONE;
    }
    case S_MACRO: {
        jfunc *f = jx_alloc(rc, sizeof *f);
        memset(f, 0, sizeof *f);
        f->kind = JF_MACRO;
        f->name = x->name;
        f->macro = x;
        f->closure = sc;
        f->caller = jv_undef();
        scope_set(rc, sc, x->name, (jv){.t = JV_FUNC, .u.fn = f});
        return FLOW_NONE;
    }
    case S_CALLBLOCK: {
        jfunc *caller = jx_alloc(rc, sizeof *caller);
        memset(caller, 0, sizeof *caller);
        caller->kind = JF_CALLER;
        caller->name = "caller";
        caller->macro = x;
        caller->closure = sc;
        caller->caller = jv_undef();
        const node *call = x->a;
        jv fn = eval(rc, sc, call->a);
        jargs a;
        eval_args(rc, sc, call, &a, 0);
        jv cv = (jv){.t = JV_FUNC, .u.fn = caller};
        jv out;
        if (fn.t == JV_FUNC && fn.u.fn->kind == JF_MACRO) {
            jfunc copy = *fn.u.fn;
            copy.caller = cv;
            out = jx_call_macro(rc, call, &copy, &a);
        } else {
            jargs b = a;
            b.v = jx_alloc(rc, (size_t)(a.n + 1) * sizeof(jv));
            b.kw = jx_alloc(rc, (size_t)(a.n + 1) * sizeof(char *));
            memcpy(b.v, a.v, (size_t)a.n * sizeof(jv));
            memcpy(b.kw, a.kw, (size_t)a.n * sizeof(char *));
            b.v[a.n] = cv;
            b.kw[a.n] = "caller";
            b.n++;
            out = jx_call(rc, call, fn, &b);
        }
        jv s = jv_tostring(rc, out);
        emit(rc, x, s.u.s->s, s.u.s->len);
        return FLOW_NONE;
    }
    case S_FILTERBLOCK: {
        scope *inner = scope_new(rc, sc);
        jv v = jv_tostring(rc, apply_chain(rc, sc, x->c, capture(rc, inner, x->body)));
        emit(rc, x, v.u.s->s, v.u.s->len);
        return FLOW_NONE;
    }
    case S_BREAK:
        return FLOW_BREAK;
    case S_CONTINUE:
        return FLOW_CONTINUE;
    default:
        break;
    }
    jx_fail_st(rc, HM_ERR_INTERNAL, x, "node %d is not a statement", x->kind);
}

/* ---- entry points -----------------------------------------------------------------------------
 */

static time_t env_now(void) {
    const char *s = getenv("HMOE_TEMPLATE_NOW");
    if (!s || !*s) return 0;
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int n = sscanf(s, "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                   &tm.tm_min, &tm.tm_sec);
    if (n < 3) return 0;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_isdst = -1;
    return mktime(&tm);
}

hm_jinja_params hm_jinja_default_params(void) {
    hm_jinja_params p;
    p.max_output = (size_t)64 << 20;
    p.max_memory = (size_t)512 << 20;
    p.max_steps = 10000000;
    p.max_depth = 64;
    p.now = env_now();
    return p;
}

hm_status hm_jinja_render(const hm_jinja *tpl, const json_t *ctx, const hm_jinja_params *params,
                          char **out, size_t *out_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!tpl) return hm_errorf(HM_ERR_INVALID_ARG, "hm_jinja_render: NULL template");
    if (ctx && !json_is_object(ctx))
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: render context must be a JSON object", tpl->name);
    rctx *rc = calloc(1, sizeof *rc);
    if (!rc) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", tpl->name);
    rc->tpl = tpl;
    rc->p = params ? *params : hm_jinja_default_params();
    hm_arena_init(&rc->ar, 64 << 10, "template render");
    hm_status st = HM_OK;
    if (setjmp(rc->jb) == 0) {
        rc->globals = scope_new(rc, NULL);
        if (ctx) {
            const char *k;
            json_t *v;
            json_object_foreach((json_t *)ctx, k, v)
                scope_set(rc, rc->globals, k, jv_from_json(rc, v));
        }
        exec(rc, rc->globals, tpl->root);
        emit(rc, NULL, "", 0);
        if (!rc->out) {
            rc->out = malloc(1);
            if (!rc->out) jx_fail_st(rc, HM_ERR_NO_MEMORY, NULL, "out of memory");
        }
        rc->out[rc->len] = '\0';
    } else {
        st = rc->st;
    }
    hm_arena_free(&rc->ar);
    if (st == HM_OK) {
        *out = rc->out;
        if (out_len) *out_len = rc->len;
    } else
        free(rc->out);
    free(rc);
    return st;
}
