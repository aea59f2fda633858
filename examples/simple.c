/* simple.c - the smallest program that embeds libhmoe: load a model, generate from a prompt,
 * print the text as it comes.
 *
 *     cc simple.c $(pkg-config --cflags --libs hmoe) -o simple
 *     ./simple MODEL.gguf "The capital of France is" 64
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hmoe.h>

static bool print_piece(int32_t id, const char *text, size_t len, void *user) {
    (void)id, (void)user;
    return !text || fwrite(text, 1, len, stdout) == len;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL PROMPT [N_TOKENS]\n", argv[0]);
        return 2;
    }
    const int n_predict = argc > 3 ? atoi(argv[3]) : 64;
    hm_model *m = NULL;
    hm_ctx *c = NULL;
    hm_tokenizer *tok = NULL;
    hm_sampler *smp = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = 1;
    hm_model_params mp = hm_model_default_params();
    hm_ctx_params cp = hm_ctx_default_params();
    cp.n_ctx = 512;
    hm_sampler_params sp = hm_sampler_default_params();
    sp.temperature = 0.8f, sp.top_k = 40, sp.seed = 1;
    hm_generate_params gp = hm_generate_default_params();
    gp.n_predict = n_predict;
    if (hm_model_load_ex(argv[1], &mp, &m) || hm_tokenizer_load(argv[1], &tok) ||
        hm_ctx_create(m, &cp, &c) || hm_sampler_create(&sp, hm_model_n_vocab(m), &smp) ||
        hm_tokenizer_encode_alloc(tok, argv[2], strlen(argv[2]), HM_TOK_ADD_SPECIAL, &ids, &n) ||
        hm_generate(c, smp, tok, ids, (int)n, &gp, print_piece, NULL, NULL)) {
        fprintf(stderr, "simple: %s\n", hm_last_error());
    } else {
        printf("\n");
        rc = 0;
    }
    free(ids);
    hm_sampler_free(smp);
    hm_ctx_free(c);
    hm_tokenizer_free(tok);
    hm_model_free(m);
    return rc;
}
