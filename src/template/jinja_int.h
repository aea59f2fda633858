/* jinja_int.h - internals of the Jinja interpreter: value model, AST, render context. */
#ifndef HM_TEMPLATE_JINJA_INT_H
#define HM_TEMPLATE_JINJA_INT_H

#include <setjmp.h>

#include "core/alloc.h"
#include "template/jinja.h"

/* ---- values ---------------------------------------------------------------------------------
 * Python semantics. Everything a render creates lives in its arena and dies with it, so values
 * are plain structs copied by value, and errors unwind with longjmp (nothing to release). Strings
 * are immutable; lists and dicts are never mutated after construction except namespaces. */
typedef enum jv_type {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_FUNC,
} jv_type;

enum {
    JL_TUPLE = 1, /* list flags: a tuple (repr with parentheses) */
    JL_ITER = 2,  /* a generator/iterator (map, select, items...): no len, no JSON, always true */
    JD_NS = 1,    /* dict flags: a namespace() (attribute assignment, not a mapping) */
    JD_LOOP = 2,  /* the loop variable of a for (not a mapping either) */
    JU_UNSAFE = 1 /* undefined flags: a sandbox-blocked attribute (calling it is an error) */
};

typedef struct jstr {
    size_t len;
    char s[]; /* len bytes + NUL */
} jstr;

typedef struct jv {
    uint8_t t;
    uint8_t flags;
    union {
        bool b;
        int64_t i;
        double f;
        jstr *s;
        struct jlist *l;
        struct jdict *d;
        struct jfunc *fn;
        const char *uname; /* JV_UNDEF: the name or message, for errors (may be NULL) */
    } u;
} jv;

typedef struct jlist {
    size_t n, cap;
    jv *v;
} jlist;

/* Insertion-ordered; from JD_INDEX_MIN entries on, an open-addressing index (slot = entry + 1,
 * 0 empty) over the keys' hashes makes lookup O(1). Entries are never removed. */
typedef struct jdict {
    size_t n, cap;
    jv *k, *v;
    uint64_t *h;    /* [cap] hash of k[i] */
    uint32_t *slot; /* [nslot] or NULL below JD_INDEX_MIN entries */
    size_t nslot;   /* power of two, >= 2 * cap */
} jdict;

#define JD_INDEX_MIN 8

struct rctx;
struct node;
typedef struct jargs {
    int n;
    jv *v;
    const char **kw; /* [n]: NULL for positional */
} jargs;

typedef jv (*jbuiltin)(struct rctx *rc, const struct node *at, jv self, jargs *a);

typedef enum { JF_BUILTIN, JF_MACRO, JF_CALLER } jf_kind;

typedef struct jfunc {
    jf_kind kind;
    const char *name;
    jbuiltin fn;              /* JF_BUILTIN: global function or bound method */
    jv self;                  /* bound object (method) or state (cycler, loop, joiner) */
    const struct node *macro; /* JF_MACRO / JF_CALLER: the definition */
    struct scope *closure;    /* scope the macro was defined in */
    jv caller;                /* JF_MACRO called from a call block: the caller() */
} jfunc;

/* ---- AST ------------------------------------------------------------------------------------ */
typedef enum node_kind {
    /* expressions */
    E_CONST,
    E_NAME,
    E_ATTR,   /* a.name */
    E_ITEM,   /* a[b] */
    E_SLICE,  /* a[b:c:d], NULL parts omitted */
    E_CALL,   /* a(kids; names) */
    E_FILTER, /* a | name(kids; names); a == NULL inside filter blocks */
    E_TEST,   /* a is [not] name(kids) */
    E_NEG,
    E_POS,
    E_NOT,
    E_BIN, /* a op b */
    E_AND,
    E_OR,
    E_COMPARE, /* kids[0] op[0] kids[1] op[1] kids[2] ... (ops in names as strings) */
    E_COND,    /* b if a else c */
    E_LIST,
    E_TUPLE,
    E_DICT,   /* kids: k0 v0 k1 v1 ... */
    E_CONCAT, /* kids joined with ~ */
    /* statements */
    S_BODY,        /* kids */
    S_TEXT,        /* val */
    S_PRINT,       /* a */
    S_IF,          /* a cond, body, else_body (an S_IF for elif) */
    S_FOR,         /* target b, iter a, filter c, body, else_body */
    S_SET,         /* target b = a */
    S_SETBLOCK,    /* target b, body, filter chain c (E_FILTER with a == inner) */
    S_MACRO,       /* name, params names[n] with defaults kids[n] (NULL: none), body */
    S_CALLBLOCK,   /* a: the E_CALL; caller params names/kids; body */
    S_FILTERBLOCK, /* c filter chain, body */
    S_BREAK,
    S_CONTINUE,
} node_kind;

typedef enum binop {
    OP_ADD,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
} binop;

typedef struct node {
    uint8_t kind;
    uint8_t op;
    bool neg;           /* E_TEST: is not */
    bool runtime_check; /* E_FILTER/E_TEST: unknown name, fails only when evaluated */
    int line, col;
    struct node *a, *b, *c, *d;
    struct node *body, *else_body;
    struct node **kids;
    const char **names;
    int n;
    const char *name;
    uint32_t uses; /* S_MACRO: bit 0 varargs, bit 1 kwargs, bit 2 caller referenced */
    jv val;
} node;

struct hm_jinja {
    hm_arena arena; /* AST, literals */
    node *root;
    char *name;
};

/* Nesting limits (docs/templates.md). Expressions and blocks are limited when parsing, values
 * while they are printed, compared, hashed or serialized (jinja2 fails with RecursionError around
 * there), and eval/exec frames at run time so that no input can exhaust the C stack. */
#define JX_MAX_EXPR_DEPTH  100  /* nodes from an expression's root to its deepest leaf */
#define JX_MAX_BLOCK_DEPTH 64   /* nested block tags */
#define JX_MAX_FOR_DEPTH   20   /* nested for loops in one macro / call body (Python's limit) */
#define JX_MAX_VALUE_DEPTH 500  /* nested lists / dicts / tuples in one operation */
#define JX_MAX_JSON_DEPTH  4096 /* nesting of a JSON context value */
#define JX_MAX_NEST        4096 /* eval/exec frames of one render */

/* ---- render ---------------------------------------------------------------------------------- */
typedef struct scope {
    struct scope *parent;
    jdict vars;
} scope;

typedef struct rctx {
    const hm_jinja *tpl;
    hm_jinja_params p;
    hm_arena ar;
    jmp_buf jb;
    hm_status st;
    char *out;
    size_t len, cap;
    uint64_t steps; /* work done: AST nodes evaluated, elements, bytes / JX_BYTES_PER_STEP */
    int depth;      /* nested macro / caller calls */
    int nest;       /* nested eval/exec frames (C stack) */
    int vdepth;     /* nesting of the value being printed, compared, hashed or serialized */
    int nprinting;  /* namespaces being printed (cycle detection) */
    struct jdict *printing[JX_MAX_VALUE_DEPTH + 1];
    scope *globals;
} rctx;

/* Fails the render: formats "name:line:col: msg" into the last error and longjmps. */
_Noreturn void jx_fail(rctx *rc, const node *at, const char *fmt, ...) HM_PRINTF(3, 4);
_Noreturn void jx_fail_st(rctx *rc, hm_status st, const node *at, const char *fmt, ...)
    HM_PRINTF(4, 5);
void jx_step(rctx *rc, const node *at, uint64_t n);
/* Work per byte: string scans and copies count one step per JX_BYTES_PER_STEP bytes. */
#define JX_BYTES_PER_STEP 16
static inline uint64_t jx_bytes_cost(size_t n) {
    return n / JX_BYTES_PER_STEP + 1;
}
/* a value's size as the work of passing it to a builtin: the bytes of a string, else 1 */
uint64_t jv_cost(jv v);
struct jargs;
/* charges a builtin call: the sizes of its input and arguments */
void jx_step_args(rctx *rc, const struct node *at, jv in, const struct jargs *a);

void jx_value_enter(rctx *rc, const node *at);
static inline void jx_value_leave(rctx *rc) {
    rc->vdepth--;
}

/* arena */
void *jx_alloc(rctx *rc, size_t n);
jstr *jx_str_new(rctx *rc, const char *s, size_t len);

static inline jv jv_undef(void) {
    return (jv){.t = JV_UNDEF};
}
static inline jv jv_none(void) {
    return (jv){.t = JV_NONE};
}
static inline jv jv_bool(bool b) {
    return (jv){.t = JV_BOOL, .u.b = b};
}
static inline jv jv_int(int64_t i) {
    return (jv){.t = JV_INT, .u.i = i};
}
static inline jv jv_float(double f) {
    return (jv){.t = JV_FLOAT, .u.f = f};
}
static inline jv jv_strv(jstr *s) {
    return (jv){.t = JV_STR, .u.s = s};
}
jv jv_str(rctx *rc, const char *s, size_t len);
jv jv_cstr(rctx *rc, const char *s);
jv jv_list_new(rctx *rc, size_t cap, uint8_t flags);
void jv_list_push(rctx *rc, jv list, jv item);
jv jv_dict_new(rctx *rc, size_t cap, uint8_t flags);
/* Lookup: NULL when absent or when key is unhashable (jinja2's getitem then gives undefined). */
jv *jv_dict_find(rctx *rc, jv dict, jv key);
jv *jv_dict_find_s(jv dict, const char *key);
/* Membership as Python's `key in dict`: TypeError when the key is unhashable. */
bool jv_dict_has(rctx *rc, const node *at, jv dict, jv key);
void jv_dict_set(rctx *rc, jv dict, jv key, jv val);
void jd_set(rctx *rc, jdict *d, jv key, jv val); /* TypeError when key is unhashable */
/* hash(v) as far as equality goes (1 == 1.0 == True); false when v is unhashable */
bool jv_hash(rctx *rc, jv v, uint64_t *out);

/* string builder in the arena */
typedef struct sbuf {
    rctx *rc;
    char *p;
    size_t len, cap;
} sbuf;
void sb_init(sbuf *b, rctx *rc);
void sb_add(sbuf *b, const char *s, size_t n);
void sb_adds(sbuf *b, const char *s);
void sb_addc(sbuf *b, char c);
jv sb_val(sbuf *b);

/* Python semantics */
bool jv_truthy(jv v);
bool jv_eq(rctx *rc, jv a, jv b);
int jv_cmp(rctx *rc, const node *at, jv a, jv b); /* <0 0 >0; TypeError when unordered */
const char *jv_typename(jv v);
void jv_to_str(sbuf *b, jv v);  /* str(v); recursive namespaces print as {...} */
void jv_repr(sbuf *b, jv v);    /* repr(v) */
jv jv_tostring(rctx *rc, jv v); /* str(v) as a value */
void fmt_float(char *buf, size_t cap, double f);
bool jv_is_num(jv v);
double jv_num(jv v);
jv jv_from_json(rctx *rc, const json_t *j);
/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys); indent NULL: None, else the
 * string each level is indented by */
void jv_to_json(rctx *rc, const node *at, sbuf *b, jv v, const jstr *indent, const jstr *item_sep,
                const jstr *key_sep, bool sort_keys);

/* UTF-8 code points */
size_t u8_len(const char *s, size_t n);
size_t u8_offset(const char *s, size_t n, size_t cp); /* byte offset of code point cp */
size_t u8_next(const char *s, size_t n, size_t i);    /* byte index after the char at i */

/* iteration: materialises v as a list of items (dict keys, string chars); fails on non-iterables */
jlist *jv_iter(rctx *rc, const node *at, jv v);
int64_t jv_len(rctx *rc, const node *at, jv v);

/* builtins (jinja_builtins.c) */
typedef jv (*jfilter)(rctx *rc, const node *at, jv in, jargs *a);
jfilter jx_find_filter(const char *name);
typedef bool (*jtest)(rctx *rc, const node *at, jv in, jargs *a);
jtest jx_find_test(const char *name);
/* A builtin function value (self: the bound object of a method, or undefined) */
jv jx_builtin_fn(rctx *rc, const char *name, jbuiltin fn, jv self);
jv jx_global(rctx *rc, const char *name); /* range, dict, namespace, ...; undefined if none */
jv jx_getattr(rctx *rc, const node *at, jv obj, jv key, bool attr_first);
jv jx_call(rctx *rc, const node *at, jv fn, jargs *a);
jv jx_arg(jargs *a, int pos, const char *kw, jv dflt);
bool jx_has_arg(jargs *a, int pos, const char *kw);
jv jx_call_macro(rctx *rc, const node *at, jfunc *f, jargs *a);

#endif
