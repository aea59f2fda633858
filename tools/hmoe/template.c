/* template.c - `hmoe template`: renders a model's chat template (or a template file) for a
 * conversation, exactly as transformers' apply_chat_template(tokenize=False) would. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "template/jinja.h"

static const char k_usage[] =
    "usage: hmoe template (-m PATH | --template FILE) --messages JSON [--add-generation-prompt]\n"
    "                     [--tools JSON] [--kwargs JSON] [--bos-token S] [--eos-token S]\n"
    "  PATH: a .gguf file or a Hugging Face directory; JSON: literal JSON or @file\n";

/* literal JSON or @file; NULL (message printed) on error */
static json_t *json_arg(const char *opt, const char *v) {
    json_error_t je;
    json_t *j;
    if (v[0] == '@') {
        size_t len;
        char *text = cli_read_file(v + 1, &len);
        if (!text) {
            fprintf(stderr, "hmoe: %s: %s\n", opt, hm_last_error());
            return NULL;
        }
        j = json_loadb(text, len, JSON_DECODE_ANY, &je);
        free(text);
        if (!j)
            fprintf(stderr, "hmoe: %s %s: %s (line %d, column %d)\n", opt, v, je.text, je.line,
                    je.column);
    } else {
        j = json_loads(v, JSON_DECODE_ANY, &je);
        if (!j)
            fprintf(stderr, "hmoe: %s: invalid JSON: %s (column %d)\n", opt, je.text, je.column);
    }
    return j;
}

int cmd_template(int argc, char **argv) {
    const char *model = NULL, *tfile = NULL, *messages = NULL, *tools = NULL, *kwargs = NULL;
    const char *bos = NULL, *eos = NULL;
    bool agp = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(k_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--add-generation-prompt"))
            agp = true;
        else if (!has_val &&
                 (!strcmp(a, "-m") || !strcmp(a, "--template") || !strcmp(a, "--messages") ||
                  !strcmp(a, "--tools") || !strcmp(a, "--kwargs") || !strcmp(a, "--bos-token") ||
                  !strcmp(a, "--eos-token")))
            return cli_usage_error("template: %s needs a value\n%s", a, k_usage);
        else if (!strcmp(a, "-m"))
            model = argv[++i];
        else if (!strcmp(a, "--template"))
            tfile = argv[++i];
        else if (!strcmp(a, "--messages"))
            messages = argv[++i];
        else if (!strcmp(a, "--tools"))
            tools = argv[++i];
        else if (!strcmp(a, "--kwargs"))
            kwargs = argv[++i];
        else if (!strcmp(a, "--bos-token"))
            bos = argv[++i];
        else if (!strcmp(a, "--eos-token"))
            eos = argv[++i];
        else
            return cli_usage_error("template: unknown option '%s'\n%s", a, k_usage);
    }
    if (!model == !tfile)
        return cli_usage_error("template: give exactly one of -m PATH or --template FILE\n%s",
                               k_usage);
    if (!messages) return cli_usage_error("template: --messages is required\n%s", k_usage);

    int rc = 1;
    hm_chat_template_source src = {0};
    hm_jinja *tpl = NULL;
    json_t *jm = NULL, *jt = NULL, *jk = NULL;
    char *out = NULL;
    if (model) {
        if (hm_chat_template_load(model, &src) != HM_OK) {
            fprintf(stderr, "hmoe: %s\n", hm_last_error());
            goto done;
        }
    } else {
        src.template_text = cli_read_file(tfile, &src.template_len);
        if (!src.template_text) {
            fprintf(stderr, "hmoe: --template: %s\n", hm_last_error());
            goto done;
        }
        src.origin = strdup(tfile);
    }
    if (!(jm = json_arg("--messages", messages))) goto done;
    if (!json_is_array(jm)) {
        fprintf(stderr, "hmoe: --messages: expected a JSON array of messages\n");
        goto done;
    }
    if (tools && !(jt = json_arg("--tools", tools))) goto done;
    if (jt && json_is_null(jt)) {
        json_decref(jt);
        jt = NULL;
    }
    if (kwargs && !(jk = json_arg("--kwargs", kwargs))) goto done;
    if (jk && !json_is_object(jk)) {
        fprintf(stderr, "hmoe: --kwargs: expected a JSON object\n");
        goto done;
    }
    if (hm_jinja_parse(src.template_text, src.template_len, src.origin ? src.origin : "template",
                       &tpl) != HM_OK) {
        fprintf(stderr, "hmoe: %s\n", hm_last_error());
        goto done;
    }
    size_t len;
    if (hm_chat_template_apply(tpl, jm, jt, agp, jk, bos ? bos : src.bos_token,
                               eos ? eos : src.eos_token, NULL, &out, &len) != HM_OK) {
        fprintf(stderr, "hmoe: %s\n", hm_last_error());
        goto done;
    }
    if (fwrite(out, 1, len, stdout) != len || fflush(stdout) != 0) {
        cli_stdout_error();
        goto done;
    }
    rc = 0;
done:
    free(out);
    hm_jinja_free(tpl);
    json_decref(jm);
    json_decref(jt);
    json_decref(jk);
    hm_chat_template_source_free(&src);
    return rc;
}
