/* generate.c - the generation loop (hmoe.h hm_generate): the prompt in batches, then sample,
 * report and feed back one token at a time. */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "core/timer.h"

hm_generate_params hm_generate_default_params(void) {
    hm_generate_params p = {.n_predict = 128, .seq = 0, .ignore_eos = false};
    return p;
}

static hm_status check_args(const hm_ctx *c, const hm_sampler *smp, const int32_t *prompt,
                            int n_prompt, const hm_generate_params *p) {
    if (!c || !smp || !p) return hm_errorf(HM_ERR_INVALID_ARG, "generate: no context or sampler");
    if (n_prompt < 1 || !prompt)
        return hm_errorf(HM_ERR_INVALID_ARG, "generate: the prompt has no tokens");
    if (p->n_predict < 0)
        return hm_errorf(HM_ERR_INVALID_ARG, "generate: n_predict %d < 0", p->n_predict);
    if (p->seq < 0 || p->seq >= hm_ctx_n_seq(c))
        return hm_errorf(HM_ERR_INVALID_ARG, "generate: sequence %d is outside [0, %d)", p->seq,
                         hm_ctx_n_seq(c));
    const long need = (long)hm_ctx_seq_len(c, p->seq) + n_prompt + p->n_predict;
    if (need > hm_ctx_n_ctx(c))
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "generate: %d cached + %d prompt + %d generated tokens do not fit the "
                         "context of %d positions",
                         hm_ctx_seq_len(c, p->seq), n_prompt, p->n_predict, hm_ctx_n_ctx(c));
    return HM_OK;
}

/* What a step hands the sampler: on a GPU, when the sampler takes them, the wanted row's
 * candidates (only those cross from the device), else its logits. */
typedef struct step_out {
    float *logits;
    int32_t ids[HM_SAMPLER_MAX_CANDIDATES];
    float vals[HM_SAMPLER_MAX_CANDIDATES];
    int k; /* candidates of the last step, 0: logits */
} step_out;

static hm_status step(hm_ctx *c, const hm_sampler *smp, const int32_t *tok, const int32_t *seq,
                      int n, const uint8_t *want, step_out *o) {
    o->k = hm_ctx_device(c) == HM_DEVICE_CUDA ? hm_sampler_candidates(smp) : 0;
    return o->k ? hm_ctx_decode_top(c, tok, seq, n, want, o->k, o->ids, o->vals)
                : hm_ctx_decode(c, tok, seq, n, want, o->logits);
}

static hm_status sample(hm_sampler *smp, const step_out *o, int32_t *t) {
    return o->k ? hm_sampler_sample_candidates(smp, o->ids, o->vals, o->k, t)
                : hm_sampler_sample(smp, o->logits, t);
}

/* the prompt in batches of the context's n_batch; only the last position's output is kept */
static hm_status run_prompt(hm_ctx *c, const hm_sampler *smp, const int32_t *prompt, int n_prompt,
                            int seq, step_out *o) {
    const int B = hm_ctx_n_batch(c);
    uint8_t *want = calloc((size_t)B, 1);
    int32_t *seqs = malloc(sizeof(int32_t) * (size_t)B);
    if (!want || !seqs) {
        free(want), free(seqs);
        return hm_errorf(HM_ERR_NO_MEMORY, "generate: out of memory");
    }
    for (int i = 0; i < B; i++) seqs[i] = seq;
    hm_status st = HM_OK;
    for (int i0 = 0; i0 < n_prompt && !st; i0 += B) {
        const int nb = n_prompt - i0 < B ? n_prompt - i0 : B;
        memset(want, 0, (size_t)B);
        want[nb - 1] = i0 + nb == n_prompt;
        st = step(c, smp, prompt + i0, seqs, nb, want, o);
    }
    free(want), free(seqs);
    return st;
}

hm_status hm_generate(hm_ctx *c, hm_sampler *smp, const hm_tokenizer *tok, const int32_t *prompt,
                      int n_prompt, const hm_generate_params *p, hm_token_fn fn, void *user,
                      hm_generate_stats *stats) {
    hm_generate_stats s = {.n_prompt = n_prompt};
    if (stats) *stats = s;
    hm_status st = check_args(c, smp, prompt, n_prompt, p);
    if (st) return st;
    for (int i = 0; i < n_prompt && !st; i++) st = hm_sampler_accept(smp, prompt[i]);
    if (st) return st;
    /* the vocabulary of the logits is the sampler's; the model's is the same (hm_sampler_create
     * was given hm_model_n_vocab) */
    hm_detok *dt = NULL;
    if (tok && (st = hm_detok_new(tok, HM_DETOK_REPLACE_INVALID, &dt))) return st;
    const int32_t V = hm_ctx_n_vocab(c);
    step_out *o = calloc(1, sizeof *o);
    if (!o || !(o->logits = malloc(sizeof(float) * (size_t)V))) {
        hm_detok_free(dt);
        free(o);
        return hm_errorf(HM_ERR_NO_MEMORY, "generate: out of memory for %d logits", V);
    }
    const double t0 = hm_time_s();
    st = run_prompt(c, smp, prompt, n_prompt, p->seq, o);
    const double t1 = hm_time_s();
    s.prompt_s = t1 - t0;
    for (int k = 0; !st && k < p->n_predict; k++) {
        int32_t t;
        if ((st = sample(smp, o, &t)) || (st = hm_sampler_accept(smp, t))) break;
        s.n_generated++;
        const char *text = NULL;
        size_t len = 0;
        if (dt && (st = hm_detok_push(dt, t, &text, &len))) break;
        if (fn && !fn(t, text, len, user)) {
            s.stopped = true;
            break;
        }
        if (!p->ignore_eos && tok && hm_tokenizer_is_eog(tok, t)) {
            s.eog = true;
            break;
        }
        if (k + 1 < p->n_predict) st = step(c, smp, &t, &p->seq, 1, NULL, o);
    }
    s.gen_s = hm_time_s() - t1;
    if (!st && dt && fn && !s.stopped) {
        const char *text;
        size_t len;
        hm_detok_flush(dt, &text, &len);
        if (len) fn(HM_TOKEN_NONE, text, len, user);
    }
    hm_detok_free(dt);
    free(o->logits), free(o);
    if (stats) *stats = s;
    return st;
}
