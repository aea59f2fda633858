/* outparse.c - the streaming splitter of outparse.h: marker search over a held-back buffer. */
#include "server/outparse.h"

#include "core/alloc.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

enum { S_CONTENT, S_REASONING, S_TOOL, S_HEADER, S_MSG };

struct hm_outparse {
    hm_outfmt fmt;
    int st;
    char *buf; /* text not yet classified */
    size_t len, cap;
    char *body; /* S_TOOL: the call's body so far; S_MSG: a tool call's arguments */
    size_t blen, bcap;
    char *ws; /* trailing whitespace of content or reasoning, held until text follows */
    size_t wlen, wcap;
    bool started; /* some content or reasoning text has come out of the current run */
    int n_tools;
    /* harmony: the current message */
    char channel[32];
    char recipient[128];
};

static const char *const k_think_open = "<think>", *const k_think_close = "</think>";

typedef struct marks {
    const char *open, *close;
    const char *drop[2]; /* markers removed from content */
} marks;

static marks fmt_marks(hm_outfmt f) {
    marks m = {NULL, NULL, {NULL, NULL}};
    if (f == HM_OUT_HERMES || f == HM_OUT_GLM) m.open = "<tool_call>", m.close = "</tool_call>";
    if (f == HM_OUT_DEEPSEEK) {
        m.open = "<\xef\xbd\x9ctool\xe2\x96\x81"
                 "call\xe2\x96\x81"
                 "begin\xef\xbd\x9c>";
        m.close = "<\xef\xbd\x9ctool\xe2\x96\x81"
                  "call\xe2\x96\x81"
                  "end\xef\xbd\x9c>";
        m.drop[0] = "<\xef\xbd\x9ctool\xe2\x96\x81"
                    "calls\xe2\x96\x81"
                    "begin\xef\xbd\x9c>";
        m.drop[1] = "<\xef\xbd\x9ctool\xe2\x96\x81"
                    "calls\xe2\x96\x81"
                    "end\xef\xbd\x9c>";
    }
    return m;
}
static const char *const k_ds_sep = "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>";

hm_outfmt hm_outfmt_detect(const char *t) {
    if (!t) return HM_OUT_PLAIN;
    if (strstr(t, "<|channel|>") && strstr(t, "<|message|>")) return HM_OUT_HARMONY;
    if (strstr(t, fmt_marks(HM_OUT_DEEPSEEK).open) || strstr(t, k_ds_sep)) return HM_OUT_DEEPSEEK;
    if (strstr(t, "<tool_call>") && strstr(t, "<arg_key>")) return HM_OUT_GLM;
    if (strstr(t, "<tool_call>") || strstr(t, "<think>") || strstr(t, "</think>"))
        return HM_OUT_HERMES;
    return HM_OUT_PLAIN;
}

const char *hm_outfmt_name(hm_outfmt f) {
    static const char *const n[] = {"plain", "hermes", "glm", "deepseek", "harmony"};
    return (unsigned)f < 5 ? n[f] : "?";
}

bool hm_outfmt_needs_special(hm_outfmt f) {
    return f == HM_OUT_DEEPSEEK || f == HM_OUT_HARMONY;
}

static bool is_ws(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

hm_outparse *hm_outparse_new(hm_outfmt fmt, const char *prompt_tail) {
    hm_outparse *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->fmt = fmt;
    p->st = fmt == HM_OUT_HARMONY ? S_HEADER : S_CONTENT;
    if (fmt != HM_OUT_PLAIN && fmt != HM_OUT_HARMONY && prompt_tail) {
        /* a generation prompt that opens <think> (and does not close it) starts in reasoning */
        const char *o = NULL, *c = NULL;
        for (const char *q = prompt_tail; (q = strstr(q, k_think_open)); q++) o = q;
        for (const char *q = prompt_tail; (q = strstr(q, k_think_close)); q++) c = q;
        if (o && (!c || c < o)) p->st = S_REASONING;
    }
    return p;
}

void hm_outparse_free(hm_outparse *p) {
    if (!p) return;
    free(p->buf), free(p->body), free(p->ws);
    free(p);
}

int hm_outparse_n_tools(const hm_outparse *p) {
    return p->n_tools;
}

/* text of a content or reasoning run: leading whitespace of a run dropped, trailing whitespace
 * held until more text follows (and dropped where the run ends) */
static void out_text(hm_outparse *p, hm_outkind k, const char *s, size_t n, hm_out_fn fn, void *u) {
    size_t a = 0, b = n;
    if (!p->started)
        while (a < n && is_ws(s[a])) a++;
    if (a == n) return;
    while (b > a && is_ws(s[b - 1])) b--;
    if (b > a) {
        if (p->wlen) fn(u, k, p->ws, p->wlen, NULL, NULL);
        p->wlen = 0;
        fn(u, k, s + a, b - a, NULL, NULL);
        p->started = true;
    }
    if (b < n) hm_text_append(&p->ws, &p->wlen, &p->wcap, s + b, n - b);
}

static void end_run(hm_outparse *p) {
    p->started = false;
    p->wlen = 0;
}

static char *dup_range(const char *s, size_t n) {
    char *r = malloc(n + 1);
    if (r) memcpy(r, s, n), r[n] = '\0';
    return r;
}

static char *trim(char *s) {
    while (is_ws(*s)) s++;
    size_t n = strlen(s);
    while (n && is_ws(s[n - 1])) s[--n] = '\0';
    return s;
}

/* a tool call body in the format; true when it parsed (fn was called) */
static bool emit_tool(hm_outparse *p, const char *body, size_t n, hm_out_fn fn, void *u) {
    char *copy = dup_range(body, n);
    if (!copy) return false;
    char *b = trim(copy);
    json_t *args = NULL;
    char *name = NULL;
    if (p->fmt == HM_OUT_HERMES) {
        json_t *j = json_loads(b, JSON_REJECT_DUPLICATES, NULL);
        json_t *nm = json_object_get(j, "name"), *a = json_object_get(j, "arguments");
        if (json_is_string(nm)) {
            name = strdup(json_string_value(nm));
            if (json_is_string(a)) /* arguments given as a JSON string */
                args = json_loads(json_string_value(a), 0, NULL);
            else
                args = a ? json_incref(a) : json_object();
        }
        json_decref(j);
    } else if (p->fmt == HM_OUT_GLM) {
        char *k = strstr(b, "<arg_key>");
        char *nl = strchr(b, '\n');
        char *end = k && (!nl || k < nl) ? k : nl ? nl : b + strlen(b);
        name = dup_range(b, (size_t)(end - b));
        args = json_object();
        for (char *q = end; name && args && (q = strstr(q, "<arg_key>"));) {
            q += 9;
            char *ke = strstr(q, "</arg_key>");
            char *v = ke ? strstr(ke, "<arg_value>") : NULL;
            char *ve = v ? strstr(v, "</arg_value>") : NULL;
            if (!ve) {
                json_decref(args), args = NULL;
                break;
            }
            char *key = dup_range(q, (size_t)(ke - q));
            char *val = dup_range(v + 11, (size_t)(ve - v - 11));
            json_t *jv = val ? json_loads(val, JSON_DECODE_ANY, NULL) : NULL;
            if (key && val) json_object_set_new(args, trim(key), jv ? jv : json_string(val));
            free(key), free(val);
            q = ve + 12;
        }
    } else if (p->fmt == HM_OUT_DEEPSEEK) {
        char *sep = strstr(b, k_ds_sep);
        if (sep) {
            *sep = '\0';
            char *rest = sep + strlen(k_ds_sep);
            if (!strcmp(trim(b), "function")) { /* V3/R1: name\n```json\n{...}\n``` */
                char *nl = strchr(rest, '\n');
                if (nl) {
                    name = dup_range(rest, (size_t)(nl - rest));
                    char *js = strstr(nl, "```json");
                    js = js ? js + 7 : nl;
                    char *fe = strstr(js, "```");
                    if (fe) *fe = '\0';
                    args = json_loads(trim(js), 0, NULL);
                }
            } else {
                name = strdup(trim(b));
                args = json_loads(trim(rest), 0, NULL);
            }
        }
    } else if (p->fmt == HM_OUT_HARMONY) {
        name = strdup(p->recipient + (strncmp(p->recipient, "functions.", 10) ? 0 : 10));
        args = json_loads(b, JSON_DECODE_ANY, NULL);
        if (!args) args = json_string(b); /* not JSON: passed on as written */
    }
    bool ok = name && *trim(name) && json_is_object(args);
    if (p->fmt == HM_OUT_HARMONY) ok = name && *name && args;
    if (ok) {
        char *a = json_is_string(args) ? strdup(json_string_value(args)) : json_dumps(args, 0);
        if (a) {
            fn(u, HM_OUTK_TOOL, NULL, 0, trim(name), a);
            p->n_tools++;
        }
        free(a);
    }
    json_decref(args);
    free(name), free(copy);
    return ok;
}

/* the earliest of the markers in buf[0..len): its index (or -1) and position */
static int find_first(const char *buf, size_t len, const char *const *m, int nm, size_t *at) {
    int best = -1;
    size_t bp = 0;
    for (int i = 0; i < nm; i++) {
        if (!m[i]) continue;
        const size_t ml = strlen(m[i]);
        for (size_t k = 0; k + ml <= len; k++)
            if (buf[k] == m[i][0] && !memcmp(buf + k, m[i], ml)) {
                if (best < 0 || k < bp) best = i, bp = k;
                break;
            }
    }
    *at = bp;
    return best;
}

/* how many trailing bytes of buf may begin one of the markers */
static size_t partial_tail(const char *buf, size_t len, const char *const *m, int nm) {
    size_t hold = 0;
    for (int i = 0; i < nm; i++) {
        if (!m[i]) continue;
        const size_t ml = strlen(m[i]);
        for (size_t k = ml - 1 < len ? ml - 1 : len; k > hold; k--)
            if (!memcmp(buf + len - k, m[i], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

static void consume(hm_outparse *p, size_t n) {
    memmove(p->buf, p->buf + n, p->len - n);
    p->len -= n;
}

static void feed_markers(hm_outparse *p, bool final, hm_out_fn fn, void *u) {
    const marks mk = fmt_marks(p->fmt);
    for (;;) {
        const char *m[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
        if (p->st == S_CONTENT) {
            m[0] = k_think_open, m[1] = k_think_close, m[2] = mk.open, m[3] = mk.drop[0],
            m[4] = mk.drop[1];
        } else if (p->st == S_REASONING) {
            m[0] = k_think_close;
        } else {
            m[0] = mk.close;
        }
        if (p->fmt == HM_OUT_PLAIN) m[0] = m[1] = m[2] = NULL;
        size_t at;
        const int w = find_first(p->buf, p->len, m, 6, &at);
        const size_t upto = w >= 0 ? at : p->len - (final ? 0 : partial_tail(p->buf, p->len, m, 6));
        if (p->st == S_TOOL)
            hm_text_append(&p->body, &p->blen, &p->bcap, p->buf, upto);
        else
            out_text(p, p->st == S_REASONING ? HM_OUTK_REASONING : HM_OUTK_CONTENT, p->buf, upto,
                     fn, u);
        consume(p, upto);
        if (w < 0) break;
        consume(p, strlen(m[w]));
        if (p->st == S_CONTENT && w == 0) {
            p->st = S_REASONING, end_run(p);
        } else if (p->st == S_CONTENT && w == 2) {
            p->st = S_TOOL, p->blen = 0, end_run(p);
        } else if (p->st == S_REASONING || (p->st == S_CONTENT && w == 1)) {
            p->st = S_CONTENT, end_run(p);
        } else if (p->st == S_TOOL) {
            if (!emit_tool(p, p->body ? p->body : "", p->blen, fn, u)) {
                /* not a call after all: the text as the model wrote it */
                fn(u, HM_OUTK_CONTENT, mk.open, strlen(mk.open), NULL, NULL);
                if (p->blen) fn(u, HM_OUTK_CONTENT, p->body, p->blen, NULL, NULL);
                fn(u, HM_OUTK_CONTENT, mk.close, strlen(mk.close), NULL, NULL);
            }
            p->st = S_CONTENT, p->blen = 0, end_run(p);
        }
    }
    if (final && p->st == S_TOOL) { /* generation ended inside a call (no closing marker) */
        if (!emit_tool(p, p->body ? p->body : "", p->blen, fn, u)) {
            fn(u, HM_OUTK_CONTENT, mk.open, strlen(mk.open), NULL, NULL);
            if (p->blen) fn(u, HM_OUTK_CONTENT, p->body, p->blen, NULL, NULL);
        }
        p->st = S_CONTENT, p->blen = 0;
    }
}

/* harmony: <|channel|>NAME [to=RECIPIENT] [<|constrain|>T]<|message|>TEXT<|end|>|<|call|>|... */
static void harmony_header(hm_outparse *p, const char *h, size_t n) {
    char *s = dup_range(h, n);
    p->channel[0] = p->recipient[0] = '\0';
    if (!s) return;
    char *c = strstr(s, "<|channel|>");
    if (c) {
        c += 11;
        size_t k = 0;
        while (c[k] && !is_ws(c[k]) && c[k] != '<' && k + 1 < sizeof p->channel) k++;
        memcpy(p->channel, c, k), p->channel[k] = '\0';
    }
    char *t = strstr(s, "to=");
    if (t) {
        t += 3;
        size_t k = 0;
        while (t[k] && !is_ws(t[k]) && t[k] != '<' && k + 1 < sizeof p->recipient) k++;
        memcpy(p->recipient, t, k), p->recipient[k] = '\0';
    }
    free(s);
}

static void harmony_end_message(hm_outparse *p, hm_out_fn fn, void *u) {
    if (p->recipient[0]) {
        if (!emit_tool(p, p->body ? p->body : "", p->blen, fn, u) && p->blen)
            fn(u, HM_OUTK_CONTENT, p->body, p->blen, NULL, NULL);
    }
    p->blen = 0;
    end_run(p);
    p->st = S_HEADER;
}

static void feed_harmony(hm_outparse *p, bool final, hm_out_fn fn, void *u) {
    static const char *const ends[4] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
    static const char *const msg[1] = {"<|message|>"};
    for (;;) {
        size_t at;
        if (p->st == S_HEADER) {
            if (find_first(p->buf, p->len, msg, 1, &at) < 0) {
                if (final) p->len = 0; /* a header without a message says nothing */
                return;
            }
            harmony_header(p, p->buf, at);
            consume(p, at + 11);
            p->st = S_MSG, p->blen = 0, end_run(p);
            continue;
        }
        const int w = find_first(p->buf, p->len, ends, 4, &at);
        const size_t upto =
            w >= 0 ? at : p->len - (final ? 0 : partial_tail(p->buf, p->len, ends, 4));
        if (p->recipient[0])
            hm_text_append(&p->body, &p->blen, &p->bcap, p->buf, upto);
        else
            out_text(p, !strcmp(p->channel, "analysis") ? HM_OUTK_REASONING : HM_OUTK_CONTENT,
                     p->buf, upto, fn, u);
        consume(p, upto);
        if (w < 0) {
            if (final) harmony_end_message(p, fn, u);
            return;
        }
        if (w < 3) consume(p, strlen(ends[w])); /* <|start|> begins the next header */
        harmony_end_message(p, fn, u);
    }
}

void hm_outparse_feed(hm_outparse *p, const char *text, size_t len, bool final, hm_out_fn fn,
                      void *user) {
    if (len && !hm_text_append(&p->buf, &p->len, &p->cap, text, len)) return;
    if (!p->buf) return;
    if (p->fmt == HM_OUT_HARMONY)
        feed_harmony(p, final, fn, user);
    else
        feed_markers(p, final, fn, user);
}
