/* server.h - the OpenAI-compatible HTTP server (libmicrohttpd, one thread per connection) over
 * the serving engine (engine/sched.h): HTTP threads read and check requests, render the chat
 * template, tokenize, post to the engine's queue and stream what comes back; the engine thread
 * alone touches the model.
 *
 * Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
 * GET /metrics (Prometheus text). Errors are OpenAI's JSON ({"error": {"message", "type",
 * "param", "code"}}) with the matching status: 400 bad JSON or fields or a prompt longer than the
 * context, 401 a wrong API key, 404 an unknown route or model, 405 a wrong method, 413 a body
 * over the limit, 429 (with Retry-After) a full queue, 503 while shutting down. */
#ifndef HM_SERVER_SERVER_H
#define HM_SERVER_SERVER_H

#include <stddef.h>

#include "engine/sched.h"
#include "hmoe.h"

typedef struct hm_server hm_server;

typedef struct hm_server_params {
    const char *host;       /* address to listen on (default 127.0.0.1) */
    int port;               /* 0: any free port (hm_server_port says which) */
    const char *api_key;    /* NULL: none; else "Authorization: Bearer KEY" on /v1/ routes */
    const char *model_name; /* the id /v1/models lists and requests may name */
    const char *model_path; /* where the chat template comes from */
    const char *chat_template_file; /* a Jinja file that replaces the model's template */
    size_t max_body;                /* bytes of a request body (default 16 MiB) */
    int max_conn;                   /* open connections at most (default 256) */
    int timeout_s;                  /* an idle connection is closed after this (default 600) */
} hm_server_params;

hm_server_params hm_server_default_params(void);

/* Starts listening. The scheduler and the tokenizer must outlive the server. A model without a
 * chat template serves /v1/completions; /v1/chat/completions then answers 400 saying so. */
hm_status hm_server_start(hm_sched *s, const hm_tokenizer *tok, const hm_server_params *p,
                          hm_server **out);
int hm_server_port(const hm_server *srv);
const char *hm_server_chat_format(const hm_server *srv); /* the tool-call format in use */
/* Stops taking requests (new ones get 503), waits up to timeout_s for those in flight to finish
 * and their responses to be sent; returns how many were still open. */
int hm_server_drain(hm_server *srv, double timeout_s);
/* Closes every connection and frees the server. */
void hm_server_stop(hm_server *srv);

#endif
