/* serve.c - `hmoe serve`: the OpenAI-compatible server (src/server) over one context whose
 * sequences are the server's parallel slots. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/sched.h"
#include "hmoe.h"
#include "server/server.h"

static int usage(FILE *f) {
    fprintf(
        f, "usage: hmoe serve -m MODEL [options]\n"
           "  --host ADDR           address to listen on (default 127.0.0.1)\n"
           "  --port N              port (default 8080; 0 = any free one, printed)\n"
           "  --api-key KEY         require \"Authorization: Bearer KEY\" on /v1/ routes\n"
           "                        (default: $HMOE_API_KEY when set)\n"
           "  --parallel N          requests decoded together (KV cache slots; default 4)\n"
           "  --ctx N               positions per slot (default min(training context, 4096))\n"
           "  --batch N             tokens per forward pass (default 512)\n"
           "  --prefill-chunk N     prompt tokens per step while others decode (default: --batch)\n"
           "  --queue N             requests waiting for a slot before 429 (default 64)\n"
           "  --name NAME           the model id clients name (default: the file's name)\n"
           "  --chat-template FILE  a Jinja chat template instead of the model's\n"
           "  --tokenizer PATH      a tokenizer instead of the model's own\n"
           "  --max-body SIZE       largest request body (default 16M)\n"
           "  --max-conn N          open connections at most (default 256)\n"
           "  --timeout S           idle connections are closed after S seconds (default 600)\n"
           "  and the model options of hmoe run: --threads --device --gpu-experts --gpu-mem\n"
           "  --gpu-dtype\n"
           "  --placement --place ... --kv --load --repack --numa (hmoe run --help)\n"
           "routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,\n"
           "        GET /metrics. SIGINT/SIGTERM finish the requests in flight, then exit; a\n"
           "        second one exits at once.\n");
    return f == stderr ? 2 : 0;
}

#ifndef HMOE_HAVE_SERVER
int cmd_serve(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "hmoe: serve: this build has no HTTP server (libmicrohttpd-dev was not found "
                    "when it was configured; scripts/deps.sh installs it)\n");
    usage(stderr);
    return 1;
}
#else
/* the id clients send: the model file's or directory's last path component */
static const char *default_name(const char *path, char *buf, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t a = n;
    while (a > 0 && path[a - 1] != '/') a--;
    snprintf(buf, cap, "%.*s", (int)(n - a), path + a);
    return buf;
}

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *tok_path = NULL;
    hm_server_params sp = hm_server_default_params();
    sp.api_key = getenv("HMOE_API_KEY");
    hm_sched_params schp = hm_sched_default_params();
    hm_ctx_params cp = hm_ctx_default_params();
    hm_model_params mlp = hm_model_default_params();
    cp.n_seq = 4;
    char namebuf[256];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        size_t sz;
        const int r = cli_ctx_option(argc, argv, &i, &cp, &mlp);
        if (r == 2) return 2;
        if (r == 1) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout);
        if (!v) return cli_usage_error("serve: unknown option or missing value: %s", a);
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--host"))
            sp.host = v;
        else if (!strcmp(a, "--port")) {
            if (!cli_parse_int(v, 0, 65535, &n)) return cli_bad_value("serve", a, v, "0..65535");
            sp.port = (int)n;
        } else if (!strcmp(a, "--api-key"))
            sp.api_key = v;
        else if (!strcmp(a, "--parallel")) {
            if (!cli_parse_int(v, 1, 256, &n)) return cli_bad_value("serve", a, v, "1..256");
            cp.n_seq = (int)n;
        } else if (!strcmp(a, "--prefill-chunk")) {
            if (!cli_parse_int(v, 1, 1 << 20, &n)) return cli_bad_value("serve", a, v, ">= 1");
            schp.prefill_chunk = (int)n;
        } else if (!strcmp(a, "--queue")) {
            if (!cli_parse_int(v, 1, 1 << 20, &n)) return cli_bad_value("serve", a, v, ">= 1");
            schp.queue_max = (int)n;
        } else if (!strcmp(a, "--name"))
            sp.model_name = v;
        else if (!strcmp(a, "--chat-template"))
            sp.chat_template_file = v;
        else if (!strcmp(a, "--tokenizer"))
            tok_path = v;
        else if (!strcmp(a, "--max-body")) {
            if (!cli_parse_size(v, &sz) || sz < 1024)
                return cli_bad_value("serve", a, v, "a size >= 1K");
            sp.max_body = sz;
        } else if (!strcmp(a, "--max-conn")) {
            if (!cli_parse_int(v, 1, 100000, &n)) return cli_bad_value("serve", a, v, "1..100000");
            sp.max_conn = (int)n;
        } else if (!strcmp(a, "--timeout")) {
            if (!cli_parse_int(v, 1, 86400, &n)) return cli_bad_value("serve", a, v, "1..86400");
            sp.timeout_s = (int)n;
        } else
            return cli_usage_error("serve: unknown option %s", a);
    }
    if (!model) return usage(stderr);
    if (!sp.model_name) sp.model_name = default_name(model, namebuf, sizeof namebuf);
    sp.model_path = model;
    /* the signals are taken by sigwait below: every thread started from here on blocks them */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    hm_model *m = NULL;
    hm_ctx *c = NULL;
    hm_tokenizer *tok = NULL;
    hm_sched *s = NULL;
    hm_server *srv = NULL;
    int rc = 1;
    if (hm_model_load_ex(model, &mlp, &m) || hm_tokenizer_load(tok_path ? tok_path : model, &tok) ||
        hm_ctx_create(m, &cp, &c) || hm_sched_create(c, tok, &schp, &s) ||
        hm_server_start(s, tok, &sp, &srv)) {
        fprintf(stderr, "hmoe: serve: %s\n", hm_last_error());
        goto done;
    }
    char place[256];
    hm_ctx_placement(c, place, sizeof place);
    printf("hmoe serve: listening on http://%s:%d  model '%s' (%s), %d slots x %d positions, "
           "batch %d, chat format %s, placement: %s%s\n",
           sp.host, hm_server_port(srv), sp.model_name, hm_model_arch(m), hm_ctx_n_seq(c),
           hm_ctx_n_ctx(c), hm_ctx_n_batch(c), hm_server_chat_format(srv), place,
           sp.api_key && *sp.api_key ? ", API key required" : "");
    fflush(stdout);
    int sig = 0;
    sigwait(&sigs, &sig);
    printf("hmoe serve: %s: finishing the requests in flight (again to exit now)\n",
           sig == SIGINT ? "SIGINT" : "SIGTERM");
    fflush(stdout);
    signal(SIGINT, SIG_DFL), signal(SIGTERM, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &sigs, NULL);
    const int left = hm_server_drain(srv, 3600);
    printf("hmoe serve: stopped%s\n", left ? " with requests still open" : "");
    rc = 0;
done:
    hm_server_stop(srv);
    hm_sched_free(s);
    hm_ctx_free(c);
    hm_tokenizer_free(tok);
    hm_model_free(m);
    return rc;
}
#endif
