/* profile.c - `hmoe profile`: how often each routed expert is chosen over a file of prompts,
 * written as the expert-count file the frequency placement reads (--expert-counts). The prompts
 * run on the CPU backend (it counts every routing decision); -n N also generates N greedy tokens
 * per prompt, so decode's routing is counted too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hmoe.h"

static int usage(void) {
    fprintf(stderr,
            "usage: hmoe profile -m MODEL --prompts FILE [-o COUNTS] [-n N] [--threads N]\n"
            "                    [--batch N] [--ctx N] [--tokenizer PATH] [--load auto|mmap|copy]\n"
            "  counts the routed experts each layer chooses over the prompts (one per line; -n N\n"
            "  greedy tokens after each) and writes them to COUNTS (default expert-counts.txt),\n"
            "  the file `--placement frequency --expert-counts COUNTS` reads\n");
    return 2;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

int cmd_profile(int argc, char **argv) {
    const char *model = NULL, *prompts = NULL, *out = "expert-counts.txt", *tok_path = NULL;
    long n_gen = 0;
    hm_ctx_params cp = hm_ctx_default_params();
    hm_model_params mlp = hm_model_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r = cli_ctx_option(argc, argv, &i, &cp, &mlp);
        if (r == 2) return 2;
        if (r == 1) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) {
            model = v, i++;
        } else if (!strcmp(a, "--prompts") && v) {
            prompts = v, i++;
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--out")) && v) {
            out = v, i++;
        } else if (!strcmp(a, "--tokenizer") && v) {
            tok_path = v, i++;
        } else if (!strcmp(a, "-n") && v) {
            if (!cli_parse_int(v, 0, 1 << 20, &n_gen)) return cli_usage_error("bad -n '%s'", v);
            i++;
        } else {
            usage();
            return cli_usage_error("unknown or incomplete option '%s'", a);
        }
    }
    if (!model || !prompts) {
        usage();
        return cli_usage_error("-m and --prompts are required");
    }
    if (cp.device == HM_DEVICE_CUDA)
        return cli_usage_error("profile counts on the CPU backend: leave out --device cuda");
    cp.device = HM_DEVICE_CPU;
    size_t len = 0;
    char *text = cli_read_file(prompts, &len);
    if (!text) {
        fprintf(stderr, "hmoe profile: %s\n", hm_last_error());
        return 1;
    }
    hm_model *m = NULL;
    hm_ctx *c = NULL;
    hm_tokenizer *tok = NULL;
    float *logits = NULL;
    int32_t *ids = NULL;
    int rc = 1, n_prompts = 0;
    long n_tokens = 0;
    if (hm_model_load_ex(model, &mlp, &m) || hm_tokenizer_load(tok_path ? tok_path : model, &tok))
        goto fail;
    if (!cp.n_ctx) cp.n_ctx = 4096;
    if (hm_ctx_create(m, &cp, &c)) goto fail;
    const int V = (int)hm_model_n_vocab(m), B = hm_ctx_n_batch(c), C = hm_ctx_n_ctx(c);
    if (!(logits = malloc(sizeof(float) * (size_t)V))) {
        fprintf(stderr, "hmoe: out of memory\n");
        goto done;
    }
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (!*line) continue;
        size_t n = 0;
        free(ids);
        ids = NULL;
        if (hm_tokenizer_encode_alloc(tok, line, strlen(line), HM_TOK_ADD_SPECIAL, &ids, &n))
            goto fail;
        if (n == 0) continue;
        if ((long)n + n_gen > C) {
            fprintf(stderr, "hmoe: prompt %d: %zu tokens + %ld exceed the context (%d; --ctx)\n",
                    n_prompts + 1, n, n_gen, C);
            goto done;
        }
        hm_ctx_seq_reset(c, 0);
        for (size_t i0 = 0; i0 < n; i0 += (size_t)B) {
            const int nb = n - i0 < (size_t)B ? (int)(n - i0) : B;
            const bool last = i0 + (size_t)nb == n;
            /* only the last row's logits, for the first generated token */
            uint8_t *w = NULL;
            if (last && n_gen) {
                w = calloc((size_t)nb, 1);
                if (!w) goto done;
                w[nb - 1] = 1;
            }
            const hm_status st =
                hm_ctx_decode(c, ids + i0, NULL, nb, w, last && n_gen ? logits : NULL);
            free(w);
            if (st) goto fail;
        }
        int32_t t = n_gen ? argmax(logits, V) : 0;
        for (long g = 0; g < n_gen; g++) {
            if (hm_ctx_decode(c, &t, NULL, 1, NULL, g + 1 < n_gen ? logits : NULL)) goto fail;
            if (g + 1 < n_gen) t = argmax(logits, V);
        }
        n_prompts++;
        n_tokens += (long)n + n_gen;
    }
    if (!n_prompts) {
        fprintf(stderr, "hmoe: %s: no prompts (one per line)\n", prompts);
        goto done;
    }
    if (hm_ctx_write_expert_counts(c, out)) goto fail;
    printf("profile: %d prompts, %ld tokens routed through %d layers; counts in %s\n", n_prompts,
           n_tokens, hm_model_n_layers(m), out);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "hmoe profile: %s\n", hm_last_error());
done:
    free(text);
    free(ids);
    free(logits);
    hm_ctx_free(c);
    hm_tokenizer_free(tok);
    hm_model_free(m);
    return rc;
}
