/* logits.c - `hmoe logits`: the logits of every position of a token sequence, as little-endian
 * float32 [n_ids x vocab]. This is the verification interface against reference
 * implementations: keep its output format stable. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/mmap.h" /* hm_outfile: the output file written as every command writes its files */
#include "hmoe.h"

static int usage(void) {
    fprintf(
        stderr,
        "usage: hmoe logits -m MODEL --ids \"1 2 3\" --out FILE [--threads N] [--batch N]\n"
        "                   [--ctx N] [--no-amx] [--load auto|mmap|copy] [--repack auto|on|off]\n"
        "                   [--numa auto|off|N] [--numa-copy auto|on|off]\n"
        "  writes the logits of every position as little-endian float32 [n_ids x vocab]\n");
    return 2;
}

int cmd_logits(int argc, char **argv) {
    const char *model = NULL, *ids_s = NULL, *out = NULL;
    hm_ctx_params cp = hm_ctx_default_params();
    cp.pin_caller = true;
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
        } else if (!strcmp(a, "--ids") && v) {
            ids_s = v, i++;
        } else if ((!strcmp(a, "--out") || !strcmp(a, "-o")) && v) {
            out = v, i++;
        } else {
            usage();
            return cli_usage_error("unknown or incomplete option '%s'", a);
        }
    }
    if (!model || !ids_s || !out) {
        usage();
        return cli_usage_error("-m, --ids and --out are required");
    }
    int32_t *ids;
    int n_ids;
    if (!cli_parse_ids(ids_s, &ids, &n_ids))
        return cli_usage_error("--ids: expected non-negative integers separated by spaces or "
                               "commas, got '%s'",
                               ids_s);
    hm_model *m = NULL;
    hm_ctx *c = NULL;
    float *logits = NULL;
    hm_outfile of = {0};
    int rc = 1;
    /* before the model: a bad --out fails at once */
    if (hm_outfile_open(out, &of) || hm_model_load_ex(model, &mlp, &m)) goto fail;
    if (!cp.n_ctx) cp.n_ctx = n_ids;
    if (hm_ctx_create(m, &cp, &c)) goto fail;
    const int V = (int)hm_model_n_vocab(m), B = hm_ctx_n_batch(c);
    logits = malloc((size_t)B * (size_t)V * sizeof(float));
    if (!logits) {
        fprintf(stderr, "hmoe: out of memory for %d x %d logits\n", B, V);
        goto done;
    }
    for (int i0 = 0; i0 < n_ids; i0 += B) {
        int nb = n_ids - i0 < B ? n_ids - i0 : B;
        if (hm_ctx_decode(c, ids + i0, NULL, nb, NULL, logits)) goto fail;
        if (fwrite(logits, sizeof(float), (size_t)nb * V, of.f) != (size_t)nb * V) {
            fprintf(stderr, "hmoe: writing '%s': %s\n", hm_outfile_name(&of), strerror(errno));
            goto done;
        }
    }
    if (hm_outfile_commit(&of)) goto fail;
    char where[4200];
    hm_outfile_describe(out, where, sizeof where);
    fprintf(stderr, "hmoe: wrote %d x %d float32 logits (%zu bytes) to %s\n", n_ids, V,
            (size_t)n_ids * (size_t)V * sizeof(float), where);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "hmoe: %s\n", hm_last_error());
done:
    hm_outfile_close(&of); /* removes the unfinished temporary */
    free(logits);
    free(ids);
    hm_ctx_free(c);
    hm_model_free(m);
    return rc;
}
