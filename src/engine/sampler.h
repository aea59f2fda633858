/* sampler.h - picks the next token from a row of logits: repetition/presence/frequency penalties,
 * greedy, top-k, temperature, top-p, min-p and a seeded, reproducible draw.
 *
 * Usage:
 *
 *     hm_sampler_params p = hm_sampler_default_params();
 *     p.temperature = 0.7f;
 *     p.top_p = 0.9f;
 *     p.seed = 42;
 *     hm_sampler *s;
 *     if (hm_sampler_create(&p, n_vocab, &s) != HM_OK) fail(hm_last_error());
 *     for (int i = 0; i < n_prompt; i++) hm_sampler_accept(s, prompt[i]);
 *     for (;;) {
 *         const float *logits = ...;                  // [n_vocab], last position
 *         int32_t tok;
 *         if (hm_sampler_sample(s, logits, &tok) != HM_OK) fail(hm_last_error());
 *         hm_sampler_accept(s, tok);                  // sample() does not record it
 *         ...
 *     }
 *     hm_sampler_free(s);
 *
 * The chain, in this order (the default chain of llama.cpp's common sampler, less the rarely used
 * samplers):
 *   1. penalties over the last penalty_last_n accepted tokens, once per distinct token t with
 *      count c > 0:  l = l > 0 ? l / repetition_penalty : l * repetition_penalty;
 *                    l -= frequency_penalty * c + presence_penalty;
 *   2. greedy (temperature < HM_SAMPLER_GREEDY_TEMP): the argmax, ties to the lowest id; steps 3-8
 *      are skipped and the RNG is not advanced;
 *   3. top-k: the k largest logits, ties to the lowest id (k >= n_vocab keeps all);
 *   4. temperature: l / temperature;
 *   5. softmax over what top-k kept;
 *   6. top-p: the smallest set of most likely tokens (ties to the lowest id) whose cumulative
 *      probability is >= top_p. Sums are in floating point, so "reaches top_p" is tested with a
 *      relative slack of 1e-6: a boundary met exactly in real arithmetic is not lost to rounding;
 *   7. min-p: keep tokens with p >= min_p * p_max (p_max is the most likely token, which every step
 *      keeps; the test is on the same probabilities as top-p, so renormalising after top-p does
 *      not change it);
 *   8. draw one token from what is left, in proportion to its probability, with the sampler's own
 *      splitmix64 stream (hm_rng_next) and our own exp (plain float operations, not libm's): the
 *      same seed, history and logits give the same tokens on every run and machine.
 * Tokens whose logit is -inf (masked) are never drawn.
 *
 * Cost: a few linear passes over the vocabulary, no sort. Exact cuts (top-k, top-p) use radix
 * selection on the float bits: a histogram of the candidates, then two more over the boundary
 * bucket. Top-k scans once, keeping a buffer of tokens above a rising threshold; top-p selects
 * among the tokens that can be in the nucleus only (p >= (1 - top_p) / n for n candidates: those
 * below cannot reach 1 - top_p together); min-p alone drops tokens by logit before any exp. Greedy,
 * top-k and min-p cost about one pass; top-p and plain sampling add an exp over the vocabulary.
 *
 * Threading: a sampler is per-sequence mutable state; use it from one thread at a time. Different
 * samplers are independent. */
#ifndef HM_ENGINE_SAMPLER_H
#define HM_ENGINE_SAMPLER_H

#include <stdint.h>

#include "core/status.h"

/* hm_sampler_params, HM_SAMPLER_GREEDY_TEMP and the sampler's functions are public (hmoe.h). */

/* temperature 1, top_k 0, top_p 1, min_p 0, no penalties (window 64), seed 0: plain sampling
 * from the softmax. */
hm_sampler_params hm_sampler_default_params(void);

/* Checks the parameters (the message names the field and its allowed range) and allocates all
 * the scratch a sample needs: 12 bytes per vocabulary entry, 12 more when a penalty is on, plus
 * the penalty window's start (its 4 bytes per token grow with the tokens accepted, up to
 * penalty_last_n: a window larger than the context costs no more than the context). params NULL
 * = defaults; the sampler keeps its own copy. On failure *out is NULL and nothing is left
 * allocated. */
hm_status hm_sampler_create(const hm_sampler_params *params, int32_t n_vocab, hm_sampler **out);
void hm_sampler_free(hm_sampler *s); /* NULL is a no-op */

/* Records a token (from the prompt or generated) in the penalty window. Fails when token is not
 * in [0, n_vocab), and with HM_ERR_NO_MEMORY when the window cannot grow. */
hm_status hm_sampler_accept(hm_sampler *s, int32_t token);

/* Samples one token from logits [n_vocab] (read only; the caller keeps them) into *out. Fails
 * with HM_ERR_INVALID_ARG, *out = -1, naming the index when a logit is NaN or +inf, when every
 * logit is -inf (nothing can be drawn), and when the penalties overflow a logit. Does not record
 * the token: call hm_sampler_accept with it. */
hm_status hm_sampler_sample(hm_sampler *s, const float *logits, int32_t *out);

/* How many candidates a sample needs, for a GPU context that selects them there
 * (hm_ctx_decode_top): 1 when greedy (the argmax), top_k when top-k is on (up to
 * HM_SAMPLER_MAX_CANDIDATES) and no penalty applies now, else 0: every logit (hm_sampler_sample).
 * Changes as tokens are accepted (penalties). */
int hm_sampler_candidates(const hm_sampler *s);

/* The same token, and the same step of the random stream, as hm_sampler_sample on the whole row,
 * from its k >= hm_sampler_candidates(s) candidates: the row's k largest logits (ties to the
 * lower token) in ascending token order, as hm_ctx_decode_top returns them (a batch of several
 * samplers asks for the largest k of them). Fails when k is smaller, when the tokens are not
 * ascending and in range, and as hm_sampler_sample does on NaN, +inf and all -inf. */
hm_status hm_sampler_sample_candidates(hm_sampler *s, const int32_t *ids, const float *vals,
                                       int32_t k, int32_t *out);

/* Forgets the history and restarts the random stream from the seed. */
void hm_sampler_reset(hm_sampler *s);

#endif
