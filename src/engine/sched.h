/* sched.h - the serving engine: one thread owns a context and runs the tokens of every request
 * through it in shared batches (continuous batching). Requests arrive through a bounded queue
 * from any thread; each takes one of the context's sequences (a slot) while it runs; its output
 * comes back through the request's own channel, polled by whoever submitted it.
 *
 *     hm_sched *s;
 *     hm_sched_create(ctx, tok, NULL, &s);          // starts the engine thread
 *     hm_req_params rp = hm_req_default_params();
 *     rp.max_tokens = 64;
 *     hm_req *r;
 *     if (hm_sched_submit(s, ids, n, &rp, &r) == HM_SCHED_BUSY) ... answer "try later" ...
 *     hm_req_update u;
 *     do {
 *         hm_req_poll(r, &u, 100);                  // new text and tokens since the last poll
 *         fwrite(u.text, 1, u.len, stdout);
 *     } while (!u.done);
 *     hm_req_release(r);                           // cancels it when it is still running
 *     hm_sched_free(s);                            // finishes what runs, then stops
 *
 * Each step the engine gives every generating slot one token and fills the rest of the batch
 * with prompt chunks of the slots that are still prefilling (long prompts are cut into chunks
 * interleaved with decoding, at most prefill_chunk tokens of them per step). A slot keeps the
 * tokens its sequence holds in the KV cache after its request ends: a new request takes the
 * free slot whose cache shares the longest prefix with its prompt and computes only the rest
 * (the prefix cache); with no shared prefix it takes the least recently used slot.
 *
 * Text: the engine detokenizes, holds back text that may begin a stop string, and ends a request
 * at the first stop string (which is not part of the text), at an end-of-generation token (not
 * reported unless ignore_eos), at max_tokens or when the slot's sequence is full.
 *
 * Threads: submit, poll, cancel and release may be called from any thread; a request is polled
 * by one thread at a time. The context belongs to the engine thread from create to free. */
#ifndef HM_ENGINE_SCHED_H
#define HM_ENGINE_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hmoe.h"

#define HM_SCHED_MAX_TOP 20 /* top_logprobs at most (OpenAI's limit) */

typedef struct hm_sched hm_sched;
typedef struct hm_req hm_req;

typedef struct hm_sched_params {
    int queue_max;     /* requests waiting for a slot before submit answers busy (default 64) */
    int prefill_chunk; /* prompt tokens per step at most (0: the context's n_batch) */
} hm_sched_params;

hm_sched_params hm_sched_default_params(void);

typedef struct hm_req_params {
    hm_sampler_params sampling; /* penalties see the generated tokens only (OpenAI's semantics) */
    int max_tokens;             /* > 0 */
    const char *const *stop;    /* strings that end the text (copied at submit) */
    int n_stop;                 /* at most 16 */
    int logprobs;               /* -1: none; 0..HM_SCHED_MAX_TOP: the chosen token's log
                                   probability and that many most likely alternatives */
    bool ignore_eos;
    bool json_object; /* the text is one JSON object: tokens that cannot continue one are
                         masked (and generation ends when the object closes) */
} hm_req_params;

hm_req_params hm_req_default_params(void); /* default sampling, 16 tokens, no stop, no logprobs */

typedef enum hm_finish {
    HM_FINISH_NONE = 0,
    HM_FINISH_STOP,      /* an end-of-generation token, a stop string, or the JSON object closed */
    HM_FINISH_LENGTH,    /* max_tokens, or the sequence is full */
    HM_FINISH_CANCELLED, /* hm_req_cancel / hm_req_release before the end */
    HM_FINISH_ERROR,     /* the forward pass failed (the message is in the update) */
} hm_finish;

const char *hm_finish_str(hm_finish f); /* "stop", "length", "cancelled", "error" */

typedef struct hm_req_token {
    int32_t id;
    float logprob; /* log softmax of the model's logits (before penalties and temperature) */
    int n_top;
    int32_t top_id[HM_SCHED_MAX_TOP];
    float top_lp[HM_SCHED_MAX_TOP];
    double t; /* when it was sampled (hm_time_s) */
} hm_req_token;

typedef struct hm_req_update {
    const char *text; /* text completed since the last poll (valid until the next poll) */
    size_t len;
    const hm_req_token *toks; /* tokens generated since the last poll (same lifetime) */
    int n_toks;
    bool done;
    hm_finish finish;
    const char *error; /* HM_FINISH_ERROR: what failed */
    /* counts so far */
    int n_prompt, n_cached, n_gen; /* n_cached: prompt tokens reused from the prefix cache */
    double t_submit, t_first, t_done;
} hm_req_update;

/* Submit results. */
typedef enum hm_submit {
    HM_SCHED_OK = 0,
    HM_SCHED_BUSY,    /* the queue is full */
    HM_SCHED_CLOSED,  /* the engine is stopping */
    HM_SCHED_INVALID, /* bad parameters or a prompt that does not fit (hm_last_error says) */
} hm_submit;

/* The context (its sequences are the slots) and the tokenizer stay the caller's and must outlive
 * the scheduler; the context must not be used by anyone else meanwhile. */
hm_status hm_sched_create(hm_ctx *c, const hm_tokenizer *tok, const hm_sched_params *p,
                          hm_sched **out);
/* Stops taking requests, finishes those queued and running, joins the engine thread. */
void hm_sched_free(hm_sched *s);
/* Stops taking requests (submit answers HM_SCHED_CLOSED); the engine finishes the others. */
void hm_sched_close(hm_sched *s);
/* Whether nothing is queued or running. */
bool hm_sched_idle(hm_sched *s);

hm_submit hm_sched_submit(hm_sched *s, const int32_t *prompt, int n_prompt, const hm_req_params *p,
                          hm_req **out);

/* Waits up to timeout_ms (0: no wait; < 0: until something comes) for new output; returns true
 * when *u has new text, tokens, or the end. */
bool hm_req_poll(hm_req *r, hm_req_update *u, int timeout_ms);
void hm_req_cancel(hm_req *r);
/* Drops the caller's reference (cancelling the request when it still runs). NULL is a no-op. */
void hm_req_release(hm_req *r);

typedef struct hm_sched_stats {
    int n_slots, n_active, n_queued;
    int kv_used;     /* positions held by the slots' sequences (prefix cache included) */
    int kv_capacity; /* slots x positions per sequence */
    uint64_t n_requests, n_prompt_tokens, n_cached_tokens, n_gen_tokens, n_steps;
    double busy_s; /* time in forward passes */
} hm_sched_stats;

void hm_sched_get_stats(hm_sched *s, hm_sched_stats *out);

#endif
