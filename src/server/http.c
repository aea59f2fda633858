/* http.c - the routes of server.h on libmicrohttpd: request bodies, authentication, the OpenAI
 * responses (whole and as server-sent events), client disconnects, metrics and shutdown. */
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "core/alloc.h"
#include "core/mmap.h"
#include "core/status.h"
#include "core/timer.h"
#include "server/oai.h"
#include "server/outparse.h"
#include "server/server.h"
#include "template/jinja.h"

#if MHD_VERSION < 0x00097002
typedef int hm_mhd_result;
#else
typedef enum MHD_Result hm_mhd_result;
#endif

/* ---- metrics ------------------------------------------------------------------------------- */

enum { R_CHAT, R_COMPL, R_MODELS, R_HEALTH, R_METRICS, R_OTHER, R_COUNT };
static const char *const k_routes[R_COUNT] = {
    "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "other"};
static const int k_codes[] = {200, 400, 401, 404, 405, 413, 429, 500, 503};
#define N_CODES 9
static const double k_ttft_b[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double k_tpot_b[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
#define N_TTFT 10
#define N_TPOT 9

typedef struct hist {
    uint64_t b[16], n;
    double sum;
} hist;

static void hist_add(hist *h, const double *bounds, int nb, double v) {
    for (int i = 0; i < nb; i++)
        if (v <= bounds[i]) h->b[i]++;
    h->n++;
    h->sum += v;
}

struct hm_server {
    struct MHD_Daemon *d;
    hm_sched *s;
    const hm_tokenizer *tok;
    int32_t V;
    int n_ctx;
    hm_server_params p;
    char *host, *api_key, *model_name;
    hm_jinja *tpl;
    char *bos, *eos, *tpl_error;
    hm_outfmt fmt;
    int port;
    atomic_int inflight; /* requests between submit and the end of their response */
    atomic_bool draining;
    atomic_uint_fast64_t ids;
    pthread_mutex_t mu; /* metrics */
    uint64_t codes[R_COUNT][N_CODES];
    hist ttft, tpot;
    uint64_t rate_tokens;
    double rate_t, rate;
};

static void count(hm_server *srv, int route, unsigned code) {
    pthread_mutex_lock(&srv->mu);
    for (int i = 0; i < N_CODES; i++)
        if (k_codes[i] == (int)code) srv->codes[route][i]++;
    pthread_mutex_unlock(&srv->mu);
}

static void observe(hm_server *srv, const hm_req_update *u) {
    if (u->n_gen < 1 || u->t_first <= 0) return;
    pthread_mutex_lock(&srv->mu);
    hist_add(&srv->ttft, k_ttft_b, N_TTFT, u->t_first - u->t_submit);
    if (u->n_gen > 1 && u->t_done > u->t_first)
        hist_add(&srv->tpot, k_tpot_b, N_TPOT, (u->t_done - u->t_first) / (u->n_gen - 1));
    pthread_mutex_unlock(&srv->mu);
}

/* ---- responses ----------------------------------------------------------------------------- */

static hm_mhd_result send_text(hm_server *srv, struct MHD_Connection *c, int route, unsigned code,
                               char *body, const char *ctype, const char *retry_after) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (retry_after) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, retry_after);
    if (code == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    hm_mhd_result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    count(srv, route, code);
    return ret;
}

static hm_mhd_result send_json(hm_server *srv, struct MHD_Connection *c, int route, unsigned code,
                               json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) return MHD_NO;
    return send_text(srv, c, route, code, s, "application/json", NULL);
}

static json_t *error_json(const char *msg, const char *type, const char *param, const char *code) {
    json_t *e = json_object();
    json_t *m = json_string(msg); /* NULL when msg is not UTF-8 (a template's error text) */
    json_object_set_new(e, "message", m ? m : json_string("(the message was not UTF-8)"));
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "param", param && *param ? json_string(param) : json_null());
    json_object_set_new(e, "code", code ? json_string(code) : json_null());
    json_t *o = json_object();
    json_object_set_new(o, "error", e);
    return o;
}

static hm_mhd_result send_error(hm_server *srv, struct MHD_Connection *c, int route, unsigned code,
                                const char *msg, const char *param, const char *ecode) {
    const char *type = code == 401   ? "authentication_error"
                       : code == 429 ? "rate_limit_error"
                       : code >= 500 ? "server_error"
                                     : "invalid_request_error";
    json_t *j = error_json(msg, type, param, ecode);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) return MHD_NO;
    return send_text(srv, c, route, code, s, "application/json", code == 429 ? "1" : NULL);
}

/* ---- token text for logprobs --------------------------------------------------------------- */

/* a token's text as JSON (bytes that are not UTF-8 written as "\xNN", as OpenAI does) and its
 * bytes */
static void token_text(hm_server *srv, int32_t id, json_t **text, json_t **bytes) {
    char *t = NULL;
    size_t n = 0;
    if (hm_tokenizer_decode(srv->tok, &id, 1, HM_DETOK_SPECIAL, &t, &n)) {
        hm_error_clear();
        n = 0;
    }
    *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)t[i]));
    json_t *s = t ? json_stringn(t, n) : json_string("");
    if (!s) { /* not UTF-8: escape every byte >= 0x80 */
        char *e = malloc(n * 4 + 1), *w = e;
        for (size_t i = 0; e && i < n; i++) {
            const unsigned char b = (unsigned char)t[i];
            if (b < 0x80)
                *w++ = (char)b;
            else
                w += sprintf(w, "\\x%02x", b);
        }
        if (w) *w = '\0';
        s = json_string(e ? e : "");
        free(e);
    }
    *text = s;
    free(t);
}

/* chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]} */
static json_t *chat_logprobs(hm_server *srv, const hm_req_token *t, int n) {
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        json_t *e = json_object(), *tx, *by, *top = json_array();
        token_text(srv, t[i].id, &tx, &by);
        json_object_set_new(e, "token", tx);
        json_object_set_new(e, "logprob", json_real(t[i].logprob));
        json_object_set_new(e, "bytes", by);
        for (int k = 0; k < t[i].n_top; k++) {
            json_t *o = json_object(), *ttx, *tby;
            token_text(srv, t[i].top_id[k], &ttx, &tby);
            json_object_set_new(o, "token", ttx);
            json_object_set_new(o, "logprob", json_real(t[i].top_lp[k]));
            json_object_set_new(o, "bytes", tby);
            json_array_append_new(top, o);
        }
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(arr, e);
    }
    json_t *o = json_object();
    json_object_set_new(o, "content", arr);
    return o;
}

/* completions: {"tokens", "token_logprobs", "top_logprobs": [{text: lp}], "text_offset"} */
static json_t *compl_logprobs(hm_server *srv, const hm_req_token *t, int n, size_t *offset) {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (int i = 0; i < n; i++) {
        json_t *tx, *by;
        token_text(srv, t[i].id, &tx, &by);
        json_decref(by);
        json_array_append_new(offs, json_integer((json_int_t)*offset));
        *offset += json_string_length(tx);
        json_array_append_new(toks, tx);
        json_array_append_new(lps, json_real(t[i].logprob));
        json_t *m = json_object();
        for (int k = 0; k < t[i].n_top; k++) {
            json_t *ttx, *tby;
            token_text(srv, t[i].top_id[k], &ttx, &tby);
            json_object_set_new(m, json_string_value(ttx), json_real(t[i].top_lp[k]));
            json_decref(ttx), json_decref(tby);
        }
        json_array_append_new(tops, m);
    }
    json_t *o = json_object();
    json_object_set_new(o, "tokens", toks);
    json_object_set_new(o, "token_logprobs", lps);
    json_object_set_new(o, "top_logprobs", tops);
    json_object_set_new(o, "text_offset", offs);
    return o;
}

static json_t *usage_json(const hm_req_update *u) {
    json_t *o = json_object(), *d = json_object();
    json_object_set_new(o, "prompt_tokens", json_integer(u->n_prompt));
    json_object_set_new(o, "completion_tokens", json_integer(u->n_gen));
    json_object_set_new(o, "total_tokens", json_integer(u->n_prompt + u->n_gen));
    json_object_set_new(d, "cached_tokens", json_integer(u->n_cached));
    json_object_set_new(o, "prompt_tokens_details", d);
    return o;
}

/* ---- one completion: shared by the whole and the streamed answers -------------------------- */

typedef struct job {
    hm_server *srv;
    hm_req *r;
    hm_oai_req q;
    hm_outparse *op;
    int fd;
    char id[48];
    json_int_t created;
    /* whole answers: what the parser gave */
    char *content, *reasoning;
    size_t clen, ccap, rlen, rcap;
    json_t *tools, *lp; /* tool_calls, logprob entries (chat) */
    size_t text_offset; /* completions' logprobs */
    /* streams */
    json_t *deltas; /* this poll's deltas (chat) */
    char *out;      /* SSE bytes not yet given to MHD */
    size_t olen, ocap, opos;
    bool role_sent, done;
    hm_req_update last;
} job;

static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    char ch;
    return (p.revents & POLLIN) && recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* the parser's output: into the whole answer, or as this poll's stream deltas */
static void on_out(void *user, hm_outkind k, const char *text, size_t len, const char *name,
                   const char *args) {
    job *j = user;
    const bool stream = j->q.stream;
    if (k == HM_OUTK_TOOL) {
        json_t *fn = json_pack("{s:s, s:s}", "name", name, "arguments", args);
        char cid[40];
        snprintf(cid, sizeof cid, "call_%016llx%08x",
                 (unsigned long long)atomic_fetch_add(&j->srv->ids, 1) * 0x9e3779b97f4a7c15ull,
                 (unsigned)json_array_size(j->tools));
        json_t *call = json_pack("{s:s, s:s, s:o}", "id", cid, "type", "function", "function", fn);
        if (!call) return;
        if (stream) {
            json_object_set_new(call, "index", json_integer((json_int_t)json_array_size(j->tools)));
            json_t *d = json_object();
            json_object_set_new(d, "tool_calls", json_pack("[O]", call));
            json_array_append_new(j->deltas, d);
        }
        json_array_append_new(j->tools, call);
        return;
    }
    if (!len) return;
    if (stream) {
        json_t *s = json_stringn(text, len);
        if (!s) return;
        json_t *d = json_object();
        json_object_set_new(d, k == HM_OUTK_REASONING ? "reasoning_content" : "content", s);
        json_array_append_new(j->deltas, d);
    } else if (k == HM_OUTK_REASONING)
        hm_text_append(&j->reasoning, &j->rlen, &j->rcap, text, len);
    else
        hm_text_append(&j->content, &j->clen, &j->ccap, text, len);
}

static const char *finish_reason(const job *j, hm_finish f) {
    if (f == HM_FINISH_LENGTH) return "length";
    if (json_array_size(j->tools)) return "tool_calls";
    return "stop";
}

static void job_free(job *j) {
    if (!j) return;
    hm_req_release(j->r);
    hm_oai_req_free(&j->q);
    hm_outparse_free(j->op);
    free(j->content), free(j->reasoning), free(j->out);
    json_decref(j->tools), json_decref(j->lp), json_decref(j->deltas);
    if (j->srv) atomic_fetch_sub(&j->srv->inflight, 1);
    free(j);
}

/* ---- the streamed answer ------------------------------------------------------------------- */

static void sse(job *j, json_t *chunk) {
    char *s = json_dumps(chunk, JSON_COMPACT);
    json_decref(chunk);
    if (!s) return;
    hm_text_append(&j->out, &j->olen, &j->ocap, "data: ", 6);
    hm_text_append(&j->out, &j->olen, &j->ocap, s, strlen(s));
    hm_text_append(&j->out, &j->olen, &j->ocap, "\n\n", 2);
    free(s);
}

static json_t *chunk_base(job *j) {
    json_t *c = json_object();
    json_object_set_new(c, "id", json_string(j->id));
    json_object_set_new(
        c, "object",
        json_string(j->q.kind == HM_OAI_CHAT ? "chat.completion.chunk" : "text_completion"));
    json_object_set_new(c, "created", json_integer(j->created));
    json_object_set_new(c, "model", json_string(j->srv->model_name));
    json_object_set_new(c, "system_fingerprint", json_null());
    if (j->q.include_usage) json_object_set_new(c, "usage", json_null());
    return c;
}

static void chat_chunk(job *j, json_t *delta, json_t *logprobs, const char *finish) {
    json_t *c = chunk_base(j), *ch = json_object();
    json_object_set_new(ch, "index", json_integer(0));
    json_object_set_new(ch, "delta", delta);
    json_object_set_new(ch, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(c, "choices", json_pack("[o]", ch));
    sse(j, c);
}

static void compl_chunk(job *j, const char *text, size_t len, json_t *logprobs,
                        const char *finish) {
    json_t *c = chunk_base(j), *ch = json_object();
    json_t *t = json_stringn(text, len);
    json_object_set_new(ch, "text", t ? t : json_string(""));
    json_object_set_new(ch, "index", json_integer(0));
    json_object_set_new(ch, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(c, "choices", json_pack("[o]", ch));
    sse(j, c);
}

/* turns one poll of the request into SSE bytes */
static void stream_update(job *j, const hm_req_update *u) {
    hm_server *srv = j->srv;
    const bool chat = j->q.kind == HM_OAI_CHAT;
    json_t *lp = NULL;
    if (u->n_toks && j->q.logprobs)
        lp = chat ? chat_logprobs(srv, u->toks, u->n_toks)
                  : compl_logprobs(srv, u->toks, u->n_toks, &j->text_offset);
    if (chat) {
        if (!j->role_sent) {
            chat_chunk(j, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL, NULL);
            j->role_sent = true;
        }
        hm_outparse_feed(j->op, u->text, u->len, u->done, on_out, j);
        size_t i;
        json_t *d;
        json_array_foreach(j->deltas, i, d) {
            chat_chunk(j, json_incref(d), lp, NULL);
            lp = NULL;
        }
        json_array_clear(j->deltas);
        if (lp) chat_chunk(j, json_pack("{s:s}", "content", ""), lp, NULL);
    } else if (u->len || lp) {
        compl_chunk(j, u->text, u->len, lp, NULL);
    }
    if (!u->done) return;
    if (u->finish == HM_FINISH_ERROR) {
        sse(j, error_json(u->error ? u->error : "generation failed", "server_error", NULL, NULL));
    } else if (chat) {
        chat_chunk(j, json_object(), NULL, finish_reason(j, u->finish));
    } else {
        compl_chunk(j, "", 0, NULL, finish_reason(j, u->finish));
    }
    if (j->q.include_usage && u->finish != HM_FINISH_ERROR) {
        json_t *c = chunk_base(j);
        json_object_set_new(c, "choices", json_array());
        json_object_set_new(c, "usage", usage_json(u));
        sse(j, c);
    }
    hm_text_append(&j->out, &j->olen, &j->ocap, "data: [DONE]\n\n", 14);
    j->done = true;
    observe(srv, u);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    job *j = cls;
    (void)pos;
    while (j->opos == j->olen) {
        if (j->done) return MHD_CONTENT_READER_END_OF_STREAM;
        j->olen = j->opos = 0;
        if (client_gone(j->fd)) {
            hm_req_cancel(j->r);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        hm_req_update u;
        if (hm_req_poll(j->r, &u, 100)) stream_update(j, &u);
    }
    size_t n = j->olen - j->opos;
    if (n > max) n = max;
    memcpy(buf, j->out + j->opos, n);
    j->opos += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    job *j = cls;
    if (!j->done) hm_req_cancel(j->r);
    job_free(j);
}

/* ---- the whole answer ---------------------------------------------------------------------- */

static json_t *whole_answer(job *j, const hm_req_update *u) {
    const bool chat = j->q.kind == HM_OAI_CHAT;
    json_t *o = json_object(), *ch = json_object();
    json_object_set_new(o, "id", json_string(j->id));
    json_object_set_new(o, "object", json_string(chat ? "chat.completion" : "text_completion"));
    json_object_set_new(o, "created", json_integer(j->created));
    json_object_set_new(o, "model", json_string(j->srv->model_name));
    json_object_set_new(o, "system_fingerprint", json_null());
    json_object_set_new(ch, "index", json_integer(0));
    json_t *content = j->content ? json_stringn(j->content, j->clen) : NULL;
    if (chat) {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("assistant"));
        json_object_set_new(m, "content",
                            content                     ? content
                            : json_array_size(j->tools) ? json_null()
                                                        : json_string(""));
        if (j->reasoning) {
            json_t *rs = json_stringn(j->reasoning, j->rlen);
            json_object_set_new(m, "reasoning_content", rs ? rs : json_null());
        }
        if (json_array_size(j->tools)) json_object_set(m, "tool_calls", j->tools);
        json_object_set_new(ch, "message", m);
        json_object_set_new(ch, "logprobs", j->lp ? json_incref(j->lp) : json_null());
    } else {
        json_object_set_new(ch, "text", content ? content : json_string(""));
        json_object_set_new(ch, "logprobs", j->lp ? json_incref(j->lp) : json_null());
    }
    json_object_set_new(ch, "finish_reason", json_string(finish_reason(j, u->finish)));
    json_object_set_new(o, "choices", json_pack("[o]", ch));
    json_object_set_new(o, "usage", usage_json(u));
    return o;
}

static hm_mhd_result answer_whole(job *j, struct MHD_Connection *c, int route) {
    hm_server *srv = j->srv;
    const bool chat = j->q.kind == HM_OAI_CHAT;
    hm_req_update u;
    json_t *lp_all = NULL; /* chat: the content entries; completions: their fields merged */
    for (;;) {
        if (client_gone(j->fd)) {
            hm_req_cancel(j->r);
            job_free(j);
            return MHD_NO; /* nobody to answer */
        }
        if (!hm_req_poll(j->r, &u, 100)) continue;
        if (chat)
            hm_outparse_feed(j->op, u.text, u.len, u.done, on_out, j);
        else
            hm_text_append(&j->content, &j->clen, &j->ccap, u.text, u.len);
        if (u.n_toks && j->q.logprobs) {
            json_t *part = chat ? chat_logprobs(srv, u.toks, u.n_toks)
                                : compl_logprobs(srv, u.toks, u.n_toks, &j->text_offset);
            if (!lp_all) {
                lp_all = part;
            } else {
                const char *k;
                json_t *v;
                json_object_foreach(part, k, v) json_array_extend(json_object_get(lp_all, k), v);
                json_decref(part);
            }
        }
        if (u.done) break;
    }
    observe(srv, &u);
    if (u.finish == HM_FINISH_ERROR) {
        json_decref(lp_all);
        hm_mhd_result ret =
            send_error(srv, c, route, 500, u.error ? u.error : "generation failed", NULL, NULL);
        job_free(j);
        return ret;
    }
    if (j->q.logprobs)
        j->lp = lp_all ? lp_all
                : chat ? json_pack("{s:[]}", "content")
                       : compl_logprobs(srv, NULL, 0, &j->text_offset);
    json_t *o = whole_answer(j, &u);
    job_free(j);
    return send_json(srv, c, route, 200, o);
}

/* ---- completions --------------------------------------------------------------------------- */

static hm_mhd_result completion(hm_server *srv, struct MHD_Connection *c, int route,
                                const char *body, size_t len) {
    job *j = calloc(1, sizeof *j);
    if (!j) return send_error(srv, c, route, 500, "out of memory", NULL, NULL);
    const hm_oai_kind kind = route == R_CHAT ? HM_OAI_CHAT : HM_OAI_COMPLETION;
    hm_status st = hm_oai_parse(body, len, kind, &j->q);
    if (st) {
        hm_mhd_result ret = send_error(srv, c, route, 400, hm_last_error(), j->q.param, NULL);
        free(j);
        return ret;
    }
    hm_oai_req *q = &j->q;
    char msg[512];
    hm_mhd_result ret;
    if (q->model && strcmp(q->model, srv->model_name)) {
        snprintf(msg, sizeof msg, "The model '%.200s' does not exist (this server has '%.200s')",
                 q->model, srv->model_name);
        ret = send_error(srv, c, route, 404, msg, "model", "model_not_found");
        hm_oai_req_free(q), free(j);
        return ret;
    }
    /* the prompt's tokens */
    int32_t *ids = NULL;
    size_t n = 0;
    char *rendered = NULL;
    if (kind == HM_OAI_CHAT) {
        if (!srv->tpl) {
            ret = send_error(srv, c, route, 400, srv->tpl_error, "messages", NULL);
            hm_oai_req_free(q), free(j);
            return ret;
        }
        size_t rl = 0;
        st = hm_chat_template_apply(srv->tpl, q->messages, q->tools, true, q->kwargs, srv->bos,
                                    srv->eos, NULL, &rendered, &rl);
        if (!st)
            st = hm_tokenizer_encode_alloc(srv->tok, rendered, rl, HM_TOK_PARSE_SPECIAL, &ids, &n);
    } else if (q->prompt) {
        st = hm_tokenizer_encode_alloc(srv->tok, q->prompt, strlen(q->prompt),
                                       HM_TOK_ADD_SPECIAL | HM_TOK_PARSE_SPECIAL, &ids, &n);
    } else {
        ids = q->prompt_ids, n = (size_t)q->n_prompt_ids;
        q->prompt_ids = NULL;
    }
    if (st) {
        ret = send_error(srv, c, route, 400, hm_last_error(), "messages", NULL);
        free(rendered), free(ids), hm_oai_req_free(q), free(j);
        return ret;
    }
    if (n == 0) {
        ret = send_error(srv, c, route, 400, "the prompt has no tokens", "prompt", NULL);
        free(rendered), free(ids), hm_oai_req_free(q), free(j);
        return ret;
    }
    hm_req_params rp = hm_req_default_params();
    rp.sampling = q->sampling;
    const int room = srv->n_ctx - (int)n;
    rp.max_tokens = q->max_tokens > 0 ? q->max_tokens : room > 0 ? room : 1;
    rp.stop = (const char *const *)q->stop;
    rp.n_stop = q->n_stop;
    rp.logprobs = q->logprobs ? q->top_logprobs : -1;
    rp.ignore_eos = q->ignore_eos;
    rp.json_object = q->json_object;
    const hm_submit sub =
        n > (size_t)INT32_MAX ? HM_SCHED_INVALID : hm_sched_submit(srv->s, ids, (int)n, &rp, &j->r);
    free(ids);
    if (sub != HM_SCHED_OK) {
        free(rendered);
        hm_oai_req_free(q), free(j);
        if (sub == HM_SCHED_BUSY)
            return send_error(srv, c, route, 429, "the server is busy: its queue is full; retry",
                              NULL, "rate_limit_exceeded");
        if (sub == HM_SCHED_CLOSED)
            return send_error(srv, c, route, 503, "the server is shutting down", NULL, NULL);
        const bool too_long = n >= (size_t)srv->n_ctx;
        return send_error(srv, c, route, 400, hm_last_error(), too_long ? "messages" : NULL,
                          too_long ? "context_length_exceeded" : NULL);
    }
    atomic_fetch_add(&srv->inflight, 1);
    j->srv = srv;
    j->tools = json_array();
    j->deltas = json_array();
    j->created = (json_int_t)time(NULL);
    snprintf(j->id, sizeof j->id, "%s-%016llx", kind == HM_OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)(atomic_fetch_add(&srv->ids, 1) + 1) * 0x9e3779b97f4a7c15ull);
    const size_t rl = rendered ? strlen(rendered) : 0;
    j->op = hm_outparse_new(kind == HM_OAI_CHAT ? srv->fmt : HM_OUT_PLAIN,
                            rendered ? rendered + (rl > 64 ? rl - 64 : 0) : NULL);
    free(rendered);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    if (!j->op) {
        job_free(j);
        return send_error(srv, c, route, 500, "out of memory", NULL, NULL);
    }
    if (!q->stream) return answer_whole(j, c, route);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, j, stream_free);
    if (!r) {
        job_free(j);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    count(srv, route, 200);
    return ret;
}

/* ---- the small routes ---------------------------------------------------------------------- */

static hm_mhd_result models(hm_server *srv, struct MHD_Connection *c) {
    json_t *m =
        json_pack("{s:s, s:s, s:I, s:s, s:i}", "id", srv->model_name, "object", "model", "created",
                  (json_int_t)0, "owned_by", "hmoe", "max_model_len", srv->n_ctx);
    return send_json(srv, c, R_MODELS, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", m));
}

static void metric(char **o, size_t *l, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void metric(char **o, size_t *l, size_t *cap, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0)
        hm_text_append(o, l, cap, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static void hist_out(char **o, size_t *l, size_t *cap, const char *name, const char *help,
                     const hist *h, const double *b, int nb) {
    metric(o, l, cap, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < nb; i++)
        metric(o, l, cap, "%s_bucket{le=\"%g\"} %llu\n", name, b[i], (unsigned long long)h->b[i]);
    metric(o, l, cap, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
           (unsigned long long)h->n, name, h->sum, name, (unsigned long long)h->n);
}

static hm_mhd_result metrics(hm_server *srv, struct MHD_Connection *c) {
    hm_sched_stats st;
    hm_sched_get_stats(srv->s, &st);
    char *o = NULL;
    size_t l = 0, cap = 0;
    pthread_mutex_lock(&srv->mu);
    const double now = hm_time_s();
    if (now - srv->rate_t >= 1.0) { /* generated tokens per second since the previous sample */
        if (srv->rate_t > 0)
            srv->rate = (double)(st.n_gen_tokens - srv->rate_tokens) / (now - srv->rate_t);
        srv->rate_t = now, srv->rate_tokens = st.n_gen_tokens;
    }
    metric(&o, &l, &cap,
           "# HELP hmoe_requests_total HTTP requests answered, by route and status.\n"
           "# TYPE hmoe_requests_total counter\n");
    for (int r = 0; r < R_COUNT; r++)
        for (int k = 0; k < N_CODES; k++)
            if (srv->codes[r][k])
                metric(&o, &l, &cap, "hmoe_requests_total{route=\"%s\",code=\"%d\"} %llu\n",
                       k_routes[r], k_codes[k], (unsigned long long)srv->codes[r][k]);
    hist_out(&o, &l, &cap, "hmoe_time_to_first_token_seconds",
             "From a request's arrival in the queue to its first generated token.", &srv->ttft,
             k_ttft_b, N_TTFT);
    hist_out(&o, &l, &cap, "hmoe_time_per_output_token_seconds",
             "A request's mean time between generated tokens after the first.", &srv->tpot,
             k_tpot_b, N_TPOT);
    const double rate = srv->rate;
    pthread_mutex_unlock(&srv->mu);
    metric(&o, &l, &cap,
           "# HELP hmoe_prompt_tokens_total Prompt tokens computed (cached ones excluded).\n"
           "# TYPE hmoe_prompt_tokens_total counter\nhmoe_prompt_tokens_total %llu\n"
           "# HELP hmoe_cached_prompt_tokens_total Prompt tokens reused from the prefix cache.\n"
           "# TYPE hmoe_cached_prompt_tokens_total counter\nhmoe_cached_prompt_tokens_total %llu\n",
           (unsigned long long)st.n_prompt_tokens, (unsigned long long)st.n_cached_tokens);
    metric(&o, &l, &cap,
           "# HELP hmoe_generation_tokens_total Tokens generated.\n"
           "# TYPE hmoe_generation_tokens_total counter\nhmoe_generation_tokens_total %llu\n"
           "# HELP hmoe_engine_busy_seconds_total Time in forward passes.\n"
           "# TYPE hmoe_engine_busy_seconds_total counter\nhmoe_engine_busy_seconds_total %.6f\n",
           (unsigned long long)st.n_gen_tokens, st.busy_s);
    metric(&o, &l, &cap,
           "# HELP hmoe_queue_depth Requests waiting for a slot.\n# TYPE hmoe_queue_depth gauge\n"
           "hmoe_queue_depth %d\n# HELP hmoe_requests_running Requests holding a slot.\n"
           "# TYPE hmoe_requests_running gauge\nhmoe_requests_running %d\n",
           st.n_queued, st.n_active);
    metric(&o, &l, &cap,
           "# HELP hmoe_kv_cache_usage_ratio KV cache positions held (prefix cache included).\n"
           "# TYPE hmoe_kv_cache_usage_ratio gauge\nhmoe_kv_cache_usage_ratio %.6f\n"
           "# HELP hmoe_generation_tokens_per_second Generated tokens per second, between "
           "scrapes at least 1 s apart.\n# TYPE hmoe_generation_tokens_per_second gauge\n"
           "hmoe_generation_tokens_per_second %.3f\n",
           st.kv_capacity ? (double)st.kv_used / st.kv_capacity : 0.0, rate);
    if (!o) return MHD_NO;
    return send_text(srv, c, R_METRICS, 200, o, "text/plain; version=0.0.4", NULL);
}

/* ---- dispatch ------------------------------------------------------------------------------ */

typedef struct conn {
    char *body;
    size_t len, cap;
    bool too_big;
} conn;

static int route_of(const char *url) {
    for (int r = 0; r < R_OTHER; r++)
        if (!strcmp(url, k_routes[r])) return r;
    return R_OTHER;
}

static bool authorized(hm_server *srv, struct MHD_Connection *c) {
    if (!srv->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    const char *k = h + 7, *want = srv->api_key;
    const size_t nk = strlen(k), nw = strlen(want);
    unsigned diff = nk != nw;
    for (size_t i = 0; i < nw; i++) diff |= (unsigned)(want[i] ^ (i < nk ? k[i] : 0));
    return !diff;
}

static hm_mhd_result handler(void *cls, struct MHD_Connection *c, const char *url,
                             const char *method, const char *version, const char *upload,
                             size_t *upload_size, void **con_cls) {
    hm_server *srv = cls;
    (void)version;
    conn *cn = *con_cls;
    const int route = route_of(url);
    const bool post = !strcmp(method, "POST");
    if (!cn) {
        if (!(cn = calloc(1, sizeof *cn))) return MHD_NO;
        *con_cls = cn;
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > srv->p.max_body) cn->too_big = true;
        if (!cn->too_big) return MHD_YES;
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", srv->p.max_body);
        return send_error(srv, c, route, 413, msg, NULL, NULL);
    }
    if (*upload_size) {
        if (!cn->too_big && cn->len + *upload_size > srv->p.max_body) {
            cn->too_big = true;
            free(cn->body), cn->body = NULL, cn->len = cn->cap = 0;
        }
        if (!cn->too_big && !hm_text_append(&cn->body, &cn->len, &cn->cap, upload, *upload_size))
            return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    if (cn->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", srv->p.max_body);
        return send_error(srv, c, route, 413, msg, NULL, NULL);
    }
    if (route == R_HEALTH) {
        const bool drain = atomic_load(&srv->draining);
        return send_json(srv, c, route, drain ? 503 : 200,
                         json_pack("{s:s}", "status", drain ? "shutting down" : "ok"));
    }
    if (route == R_OTHER) {
        char msg[300];
        snprintf(msg, sizeof msg, "no route %.200s %.40s", method, url);
        return send_error(srv, c, route, 404, msg, NULL, "not_found");
    }
    if (!authorized(srv, c))
        return send_error(srv, c, route, 401,
                          "missing or incorrect API key (Authorization: Bearer)", NULL,
                          "invalid_api_key");
    const bool want_post = route == R_CHAT || route == R_COMPL;
    if (want_post != post || (!post && strcmp(method, "GET") && strcmp(method, "HEAD"))) {
        char msg[160];
        snprintf(msg, sizeof msg, "%.40s %s: use %s", method, url, want_post ? "POST" : "GET");
        return send_error(srv, c, route, 405, msg, NULL, NULL);
    }
    if (route == R_MODELS) return models(srv, c);
    if (route == R_METRICS) return metrics(srv, c);
    if (atomic_load(&srv->draining))
        return send_error(srv, c, route, 503, "the server is shutting down", NULL, NULL);
    return completion(srv, c, route, cn->body ? cn->body : "", cn->len);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    conn *cn = *con_cls;
    if (cn) free(cn->body), free(cn);
    *con_cls = NULL;
}

/* ---- start / stop -------------------------------------------------------------------------- */

hm_server_params hm_server_default_params(void) {
    hm_server_params p = {.host = "127.0.0.1",
                          .port = 8080,
                          .model_name = NULL,
                          .max_body = (size_t)16 << 20,
                          .max_conn = 256,
                          .timeout_s = 600};
    return p;
}

static hm_status load_template(hm_server *srv) {
    hm_chat_template_source cs = {0};
    hm_status st;
    if (srv->p.chat_template_file) {
        st = hm_file_read_all(srv->p.chat_template_file, (size_t)16 << 20, false, &cs.template_text,
                              &cs.template_len);
        if (st) return st;
        hm_chat_template_source ms = {0}; /* the model's tokens still name bos/eos */
        if (srv->p.model_path && hm_chat_template_load(srv->p.model_path, &ms) == HM_OK) {
            cs.bos_token = ms.bos_token, cs.eos_token = ms.eos_token;
            ms.bos_token = ms.eos_token = NULL;
        }
        hm_error_clear();
        hm_chat_template_source_free(&ms);
    } else {
        st = srv->p.model_path ? hm_chat_template_load(srv->p.model_path, &cs) : HM_ERR_NOT_FOUND;
        if (st == HM_ERR_NOT_FOUND) { /* completions still work */
            char msg[600];
            snprintf(msg, sizeof msg,
                     "this model has no chat template (%s); use /v1/completions or start the "
                     "server with --chat-template FILE",
                     srv->p.model_path ? hm_last_error() : "no model path");
            srv->tpl_error = strdup(msg);
            hm_error_clear();
            return srv->tpl_error ? HM_OK : hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
        }
        if (st) return st;
    }
    st = hm_jinja_parse(cs.template_text, cs.template_len,
                        srv->p.chat_template_file ? srv->p.chat_template_file
                        : cs.origin               ? cs.origin
                                                  : "chat_template",
                        &srv->tpl);
    if (!st) {
        srv->fmt = hm_outfmt_detect(cs.template_text);
        srv->bos = cs.bos_token, srv->eos = cs.eos_token;
        cs.bos_token = cs.eos_token = NULL;
    }
    hm_chat_template_source_free(&cs);
    return st;
}

static void server_free(hm_server *srv) {
    hm_jinja_free(srv->tpl);
    free(srv->bos), free(srv->eos), free(srv->tpl_error);
    free(srv->host), free(srv->api_key), free(srv->model_name);
    pthread_mutex_destroy(&srv->mu);
    free(srv);
}

hm_status hm_server_start(hm_sched *s, const hm_tokenizer *tok, const hm_server_params *p,
                          hm_server **out) {
    *out = NULL;
    if (!s || !tok) return hm_errorf(HM_ERR_INVALID_ARG, "server: a scheduler and a tokenizer");
    hm_server *srv = calloc(1, sizeof *srv);
    if (!srv) return hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
    pthread_mutex_init(&srv->mu, NULL);
    srv->p = p ? *p : hm_server_default_params();
    srv->s = s, srv->tok = tok;
    hm_sched_stats st;
    hm_sched_get_stats(s, &st);
    srv->n_ctx = st.n_slots ? st.kv_capacity / st.n_slots : 0;
    srv->host = strdup(srv->p.host ? srv->p.host : "127.0.0.1");
    srv->model_name = strdup(srv->p.model_name ? srv->p.model_name : "hmoe");
    srv->api_key = srv->p.api_key && *srv->p.api_key ? strdup(srv->p.api_key) : NULL;
    if (!srv->p.max_body) srv->p.max_body = (size_t)16 << 20;
    if (srv->p.max_conn < 1) srv->p.max_conn = 256;
    if (srv->p.timeout_s < 1) srv->p.timeout_s = 600;
    hm_status rs = load_template(srv);
    if (rs) {
        server_free(srv);
        return rs;
    }
    struct sockaddr_in a4 = {.sin_family = AF_INET};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6};
    const bool v6 = strchr(srv->host, ':') != NULL;
    if (srv->p.port < 0 || srv->p.port > 65535 ||
        (v6 ? inet_pton(AF_INET6, srv->host, &a6.sin6_addr)
            : inet_pton(AF_INET, srv->host, &a4.sin_addr)) != 1) {
        rs = hm_errorf(HM_ERR_INVALID_ARG,
                       "server: --host %s --port %d: give a numeric IPv4 or IPv6 address and a "
                       "port in [0, 65535]",
                       srv->host, srv->p.port);
        server_free(srv);
        return rs;
    }
    a4.sin_port = htons((uint16_t)srv->p.port);
    a6.sin6_port = htons((uint16_t)srv->p.port);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (v6) flags |= MHD_USE_IPv6;
    srv->d = MHD_start_daemon(
        flags, (uint16_t)srv->p.port, NULL, NULL, handler, srv, MHD_OPTION_SOCK_ADDR,
        v6 ? (struct sockaddr *)&a6 : (struct sockaddr *)&a4, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)srv->p.max_conn, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)srv->p.timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, completed, srv, MHD_OPTION_THREAD_STACK_SIZE, (size_t)4 << 20,
        MHD_OPTION_END);
    if (!srv->d) {
        rs = hm_errorf(HM_ERR_SYSTEM, "server: cannot listen on %s port %d (in use?)", srv->host,
                       srv->p.port);
        server_free(srv);
        return rs;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->d, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = di ? di->port : srv->p.port;
    *out = srv;
    return HM_OK;
}

int hm_server_port(const hm_server *srv) {
    return srv->port;
}

const char *hm_server_chat_format(const hm_server *srv) {
    return srv->tpl ? hm_outfmt_name(srv->fmt) : "none (no chat template)";
}

int hm_server_drain(hm_server *srv, double timeout_s) {
    atomic_store(&srv->draining, true);
    hm_sched_close(srv->s);
    const double t0 = hm_time_s();
    while ((atomic_load(&srv->inflight) > 0 || !hm_sched_idle(srv->s)) &&
           hm_time_s() - t0 < timeout_s) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return atomic_load(&srv->inflight);
}

void hm_server_stop(hm_server *srv) {
    if (!srv) return;
    if (srv->d) MHD_stop_daemon(srv->d);
    server_free(srv);
}
