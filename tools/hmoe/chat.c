/* chat.c - `hmoe chat`: a multi-turn conversation in the terminal through the model's chat
 * template, on the serving engine (one slot: each turn reuses the cached prefix of the last). */
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HMOE_HAVE_EDIT
#include <editline/readline.h>
#endif

#include "cli.h"
#include "core/alloc.h"
#include "core/mmap.h"
#include "engine/sched.h"
#include "hmoe.h"
#include "server/outparse.h"
#include "template/jinja.h"

static int usage(FILE *f) {
    fprintf(
        f, "usage: hmoe chat -m MODEL [options]\n"
           "  --system TEXT         the conversation's system message\n"
           "  -n N                  most tokens per answer (default: the rest of the context)\n"
           "  --temp T  --top-k K  --top-p P  --min-p P  --seed S   (default temp 0.7, top-p 0.9)\n"
           "  --no-think            enable_thinking=false (Qwen3)\n"
           "  --chat-template FILE  a Jinja chat template instead of the model's\n"
           "  --tokenizer PATH      a tokenizer instead of the model's own\n"
           "  and the model options of hmoe run (--threads --ctx --device ...)\n"
           "in the chat: /reset forgets the conversation, /exit (or Ctrl-D) leaves; Ctrl-C stops\n"
           "the answer being written. Thinking is shown dimmed on a terminal.\n");
    return f == stderr ? 2 : 0;
}

static atomic_bool g_stop;
static void on_sigint(int sig) {
    (void)sig;
    atomic_store(&g_stop, true);
}

typedef struct shown {
    bool tty, in_reasoning;
    FILE *out;
    char *answer; /* the content, kept for the history */
    size_t len, cap;
} shown;

static void show(void *user, hm_outkind k, const char *text, size_t len, const char *name,
                 const char *args) {
    shown *s = user;
    if (k == HM_OUTK_TOOL) {
        fprintf(s->out, "\n[tool call] %s(%s)\n", name, args);
        return;
    }
    if (k == HM_OUTK_REASONING && !s->in_reasoning) {
        fputs(s->tty ? "\x1b[2m" : "[thinking] ", s->out);
        s->in_reasoning = true;
    } else if (k == HM_OUTK_CONTENT && s->in_reasoning) {
        fputs(s->tty ? "\x1b[0m\n" : "\n[answer] ", s->out);
        s->in_reasoning = false;
    }
    fwrite(text, 1, len, s->out);
    fflush(s->out);
    if (k == HM_OUTK_CONTENT) hm_text_append(&s->answer, &s->len, &s->cap, text, len);
}

/* one line of input (NULL at the end): with line editing and history on a terminal */
static char *read_line(bool tty) {
#ifdef HMOE_HAVE_EDIT
    if (tty) {
        char *l = readline("> ");
        if (l && *l) add_history(l);
        return l;
    }
#else
    if (tty) fputs("> ", stdout), fflush(stdout);
#endif
    size_t cap = 0;
    char *l = NULL;
    ssize_t n = getline(&l, &cap, stdin);
    if (n < 0) {
        free(l);
        return NULL;
    }
    while (n > 0 && (l[n - 1] == '\n' || l[n - 1] == '\r')) l[--n] = '\0';
    return l;
}

int cmd_chat(int argc, char **argv) {
    const char *model = NULL, *tok_path = NULL, *system = NULL, *tpl_file = NULL;
    bool no_think = false;
    long n_max = 0;
    hm_ctx_params cp = hm_ctx_default_params();
    hm_model_params mlp = hm_model_default_params();
    hm_req_params rp = hm_req_default_params();
    rp.sampling.temperature = 0.7f, rp.sampling.top_p = 0.9f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        double d;
        const int r = cli_ctx_option(argc, argv, &i, &cp, &mlp);
        if (r == 2) return 2;
        if (r == 1) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout);
        if (!strcmp(a, "--no-think")) {
            no_think = true;
            continue;
        }
        if (!v) return cli_usage_error("chat: unknown option or missing value: %s", a);
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--system"))
            system = v;
        else if (!strcmp(a, "--tokenizer"))
            tok_path = v;
        else if (!strcmp(a, "--chat-template"))
            tpl_file = v;
        else if (!strcmp(a, "-n")) {
            if (!cli_parse_int(v, 1, 1 << 24, &n_max)) return cli_bad_value("chat", a, v, ">= 1");
        } else if (!strcmp(a, "--temp") || !strcmp(a, "--top-p") || !strcmp(a, "--min-p")) {
            if (!cli_parse_double(v, 0, 100, &d)) return cli_bad_value("chat", a, v, "a number");
            if (!strcmp(a, "--temp")) rp.sampling.temperature = (float)d;
            if (!strcmp(a, "--top-p")) rp.sampling.top_p = (float)d;
            if (!strcmp(a, "--min-p")) rp.sampling.min_p = (float)d;
        } else if (!strcmp(a, "--top-k")) {
            if (!cli_parse_int(v, 0, 1 << 30, &n)) return cli_bad_value("chat", a, v, ">= 0");
            rp.sampling.top_k = (int)n;
        } else if (!strcmp(a, "--seed")) {
            if (!cli_parse_int(v, 0, LONG_MAX, &n)) return cli_bad_value("chat", a, v, ">= 0");
            rp.sampling.seed = (uint64_t)n;
        } else
            return cli_usage_error("chat: unknown option %s", a);
    }
    if (!model) return usage(stderr);
    cp.n_seq = 1;
    hm_model *m = NULL;
    hm_ctx *c = NULL;
    hm_tokenizer *tok = NULL;
    hm_sched *s = NULL;
    hm_jinja *tpl = NULL;
    hm_chat_template_source cs = {0};
    json_t *msgs = json_array(),
           *kwargs = no_think ? json_pack("{s:b}", "enable_thinking", 0) : NULL;
    int rc = 1;
    hm_status st = tpl_file ? hm_file_read_all(tpl_file, (size_t)16 << 20, false, &cs.template_text,
                                               &cs.template_len)
                            : hm_chat_template_load(model, &cs);
    if (!st)
        st = hm_jinja_parse(cs.template_text, cs.template_len,
                            tpl_file ? tpl_file : "chat_template", &tpl);
    if (st || hm_model_load_ex(model, &mlp, &m) ||
        hm_tokenizer_load(tok_path ? tok_path : model, &tok) || hm_ctx_create(m, &cp, &c) ||
        hm_sched_create(c, tok, NULL, &s)) {
        fprintf(stderr, "hmoe: chat: %s\n", hm_last_error());
        goto done;
    }
    const hm_outfmt fmt = hm_outfmt_detect(cs.template_text);
    const bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    if (tty)
        printf("hmoe chat: %s, %d positions; /reset forgets, /exit leaves, Ctrl-C stops an "
               "answer\n",
               hm_model_arch(m), hm_ctx_n_ctx(c));
    if (system)
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", system));
    struct sigaction sa = {.sa_handler = on_sigint}, old;
    sigemptyset(&sa.sa_mask);
    for (;;) {
        char *line = read_line(tty);
        if (!line) break;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) {
            free(line);
            break;
        }
        if (!strcmp(line, "/reset")) {
            json_array_clear(msgs);
            if (system)
                json_array_append_new(msgs,
                                      json_pack("{s:s, s:s}", "role", "system", "content", system));
            printf("(conversation forgotten)\n");
            free(line);
            continue;
        }
        if (!*line) {
            free(line);
            continue;
        }
        json_t *um = json_pack("{s:s, s:s}", "role", "user", "content", line);
        free(line);
        if (!um) {
            fprintf(stderr, "hmoe: chat: the line is not valid UTF-8\n");
            continue;
        }
        json_array_append_new(msgs, um);
        char *prompt = NULL;
        size_t plen = 0;
        int32_t *ids = NULL;
        size_t n = 0;
        st = hm_chat_template_apply(tpl, msgs, NULL, true, kwargs, cs.bos_token, cs.eos_token, NULL,
                                    &prompt, &plen);
        if (!st) st = hm_tokenizer_encode_alloc(tok, prompt, plen, HM_TOK_PARSE_SPECIAL, &ids, &n);
        hm_req *r = NULL;
        if (!st) {
            const int room = hm_ctx_n_ctx(c) - (int)n;
            rp.max_tokens = n_max ? (int)n_max : room > 0 ? room : 1;
            if (hm_sched_submit(s, ids, (int)n, &rp, &r) != HM_SCHED_OK) st = HM_ERR_INVALID_ARG;
        }
        free(ids);
        if (st) {
            fprintf(stderr, "hmoe: chat: %s (/reset starts over)\n", hm_last_error());
            json_array_remove(msgs, json_array_size(msgs) - 1);
            free(prompt);
            continue;
        }
        const size_t pl = strlen(prompt);
        hm_outparse *op = hm_outparse_new(fmt, prompt + (pl > 64 ? pl - 64 : 0));
        free(prompt);
        shown out = {.tty = tty, .out = stdout};
        atomic_store(&g_stop, false);
        sigaction(SIGINT, &sa, &old);
        hm_req_update u;
        do {
            if (atomic_load(&g_stop)) hm_req_cancel(r);
            if (!hm_req_poll(r, &u, 50)) continue;
            if (op) hm_outparse_feed(op, u.text, u.len, u.done, show, &out);
        } while (!u.done);
        sigaction(SIGINT, &old, NULL);
        if (out.in_reasoning && tty) fputs("\x1b[0m", stdout);
        printf(u.finish == HM_FINISH_CANCELLED ? " [stopped]\n" : "\n");
        if (u.finish == HM_FINISH_ERROR) fprintf(stderr, "hmoe: chat: %s\n", u.error);
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "assistant", "content",
                                              out.answer ? out.answer : ""));
        free(out.answer);
        hm_outparse_free(op);
        hm_req_release(r);
    }
    rc = 0;
done:
    hm_sched_free(s);
    hm_ctx_free(c);
    hm_tokenizer_free(tok);
    hm_model_free(m);
    hm_jinja_free(tpl);
    hm_chat_template_source_free(&cs);
    json_decref(msgs), json_decref(kwargs);
    return rc;
}
