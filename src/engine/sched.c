/* sched.c - the serving engine of sched.h: a queue, slots over the context's sequences, one
 * engine thread that batches every slot's next tokens into one forward pass per step. */
#include "engine/sched.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/timer.h"
#include "engine/jsonp.h"

#define MAX_STOP     16
#define MAX_STOP_LEN 256

struct hm_req {
    /* set at submit, read-only after */
    int32_t *prompt;
    int n_prompt;
    hm_req_params p;
    hm_sampler *smp; /* made at submit; the slot that admits the request takes it */
    char *stop[MAX_STOP];
    atomic_int refs;
    atomic_bool cancel;
    hm_req *next; /* queue link (the scheduler's lock) */

    pthread_mutex_t mu; /* the rest */
    pthread_cond_t cv;
    char *text; /* produced text; [text_read, text_len) not yet polled */
    size_t text_len, text_cap, text_read;
    hm_req_token *toks;
    int n_toks, toks_cap, toks_read;
    bool done;
    hm_finish finish;
    char error[512];
    int n_cached, n_gen;
    double t_submit, t_first, t_done;
    /* the poller's copies (valid until its next poll) */
    char *ptext;
    size_t ptext_cap;
    hm_req_token *ptoks;
    int ptoks_cap;
};

typedef struct slot {
    hm_req *r;      /* NULL: free */
    int32_t *cache; /* the tokens its sequence holds in the KV cache, in order */
    int n_cache;
    uint64_t used;  /* step of the last use (LRU) */
    uint64_t admit; /* admission order: prompts are prefilled first come, first served */
    int n_fed;      /* prompt tokens in the cache (n_prompt: generating) */
    int32_t next;   /* generating: the token to feed next */
    hm_sampler *smp;
    hm_detok *dt;
    char *gen; /* generated text not yet emitted past `emitted` (stop strings) */
    size_t gen_len, gen_cap, emitted;
    hm_jsonp json;
} slot;

struct hm_sched {
    hm_ctx *c;
    const hm_tokenizer *tok;
    hm_sched_params p;
    int n_slots, n_ctx, n_batch, V;
    slot *slots;
    /* the step's batch */
    int32_t *b_tok, *b_seq, *b_slot;
    uint8_t *b_want;
    float *logits, *work;
    bool on_gpu;    /* the context runs on a GPU: sampling candidates cross from it */
    int32_t *c_ids; /* [n_batch][HM_SAMPLER_MAX_CANDIDATES] */
    float *c_vals;  /* [n_batch][HM_SAMPLER_MAX_CANDIDATES] */
    /* json_object: every token's bytes */
    char *pieces;
    uint32_t *piece_off; /* [V + 1] */

    pthread_t thread;
    bool started;
    pthread_mutex_t mu; /* the queue, the flags and the stats */
    pthread_cond_t cv;
    hm_req *q_head, *q_tail;
    int n_queued, n_active;
    bool closing; /* no new requests; finish the others */
    uint64_t step, admits;
    hm_sched_stats st;
};

hm_sched_params hm_sched_default_params(void) {
    hm_sched_params p = {.queue_max = 64, .prefill_chunk = 0};
    return p;
}

hm_req_params hm_req_default_params(void) {
    hm_req_params p = {.sampling = hm_sampler_default_params(), .max_tokens = 16, .logprobs = -1};
    p.sampling.penalty_last_n = -1;
    return p;
}

const char *hm_finish_str(hm_finish f) {
    switch (f) {
    case HM_FINISH_STOP:
        return "stop";
    case HM_FINISH_LENGTH:
        return "length";
    case HM_FINISH_CANCELLED:
        return "cancelled";
    case HM_FINISH_ERROR:
        return "error";
    default:
        return "none";
    }
}

/* ---- requests ------------------------------------------------------------------------------ */

static void req_free(hm_req *r) {
    hm_sampler_free(r->smp); /* never admitted */
    for (int i = 0; i < MAX_STOP; i++) free(r->stop[i]);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->prompt), free(r->text), free(r->toks), free(r->ptext), free(r->ptoks);
    free(r);
}

static void req_unref(hm_req *r) {
    if (r && atomic_fetch_sub(&r->refs, 1) == 1) req_free(r);
}

void hm_req_cancel(hm_req *r) {
    if (r) atomic_store(&r->cancel, true);
}

void hm_req_release(hm_req *r) {
    if (!r) return;
    hm_req_cancel(r);
    req_unref(r);
}

bool hm_req_poll(hm_req *r, hm_req_update *u, int timeout_ms) {
    memset(u, 0, sizeof *u);
    pthread_mutex_lock(&r->mu);
    if (timeout_ms != 0) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        if (timeout_ms > 0) {
            dl.tv_sec += timeout_ms / 1000;
            dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
        }
        while (!r->done && r->text_read == r->text_len && r->toks_read == r->n_toks) {
            if (timeout_ms < 0)
                pthread_cond_wait(&r->cv, &r->mu);
            else if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) == ETIMEDOUT)
                break;
        }
    }
    bool any = false;
    const size_t nt = r->text_len - r->text_read;
    size_t pcap = r->ptext_cap;
    if (hm_grow((void **)&r->ptext, &pcap, nt + 1, 1)) {
        r->ptext_cap = pcap;
        if (nt) memcpy(r->ptext, r->text + r->text_read, nt);
        r->ptext[nt] = '\0';
        r->text_read = r->text_len;
        u->text = r->ptext, u->len = nt;
        any |= nt > 0;
    }
    const int nk = r->n_toks - r->toks_read;
    size_t kcap = (size_t)r->ptoks_cap;
    if (nk && hm_grow((void **)&r->ptoks, &kcap, (size_t)nk, sizeof(hm_req_token))) {
        r->ptoks_cap = (int)kcap;
        memcpy(r->ptoks, r->toks + r->toks_read, sizeof(hm_req_token) * (size_t)nk);
        r->toks_read = r->n_toks;
        u->toks = r->ptoks, u->n_toks = nk;
        any = true;
    }
    u->done = r->done && r->text_read == r->text_len && r->toks_read == r->n_toks;
    any |= u->done;
    u->finish = r->finish;
    u->error = r->finish == HM_FINISH_ERROR ? r->error : NULL;
    u->n_prompt = r->n_prompt, u->n_cached = r->n_cached, u->n_gen = r->n_gen;
    u->t_submit = r->t_submit, u->t_first = r->t_first, u->t_done = r->t_done;
    pthread_mutex_unlock(&r->mu);
    return any;
}

/* ---- submit -------------------------------------------------------------------------------- */

hm_submit hm_sched_submit(hm_sched *s, const int32_t *prompt, int n_prompt, const hm_req_params *p,
                          hm_req **out) {
    *out = NULL;
    if (!p || !prompt || n_prompt < 1) {
        hm_errorf(HM_ERR_INVALID_ARG, "the prompt has no tokens");
        return HM_SCHED_INVALID;
    }
    if (n_prompt >= s->n_ctx) {
        hm_errorf(HM_ERR_INVALID_ARG,
                  "the prompt has %d tokens; the context holds %d per sequence (the prompt and at "
                  "least one generated token)",
                  n_prompt, s->n_ctx);
        return HM_SCHED_INVALID;
    }
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= s->V) {
            hm_errorf(HM_ERR_INVALID_ARG,
                      "prompt token %d (at %d) is outside the vocabulary [0, %d)", prompt[i], i,
                      s->V);
            return HM_SCHED_INVALID;
        }
    if (p->max_tokens < 1 || p->n_stop < 0 || p->n_stop > MAX_STOP ||
        p->logprobs > HM_SCHED_MAX_TOP || (p->n_stop && !p->stop)) {
        hm_errorf(HM_ERR_INVALID_ARG,
                  "request: max_tokens %d must be >= 1, stop strings at most %d, top logprobs at "
                  "most %d",
                  p->max_tokens, MAX_STOP, HM_SCHED_MAX_TOP);
        return HM_SCHED_INVALID;
    }
    for (int i = 0; i < p->n_stop; i++) {
        const size_t l = p->stop[i] ? strlen(p->stop[i]) : 0;
        if (l < 1 || l > MAX_STOP_LEN) {
            hm_errorf(HM_ERR_INVALID_ARG, "stop string %d: %zu bytes (1 to %d)", i, l,
                      MAX_STOP_LEN);
            return HM_SCHED_INVALID;
        }
    }
    if (p->json_object && !s->pieces) {
        hm_errorf(HM_ERR_UNSUPPORTED, "json_object needs the model's tokenizer");
        return HM_SCHED_INVALID;
    }
    /* the sampler is made (and its parameters checked) here, not in the engine; the slot that
     * takes the request takes it over */
    hm_sampler *smp = NULL;
    if (hm_sampler_create(&p->sampling, s->V, &smp)) return HM_SCHED_INVALID;

    hm_req *r = calloc(1, sizeof *r);
    if (!r || !(r->prompt = malloc(sizeof(int32_t) * (size_t)n_prompt))) {
        hm_sampler_free(smp);
        free(r);
        hm_errorf(HM_ERR_NO_MEMORY, "out of memory for a request of %d tokens", n_prompt);
        return HM_SCHED_INVALID;
    }
    memcpy(r->prompt, prompt, sizeof(int32_t) * (size_t)n_prompt);
    r->smp = smp;
    r->n_prompt = n_prompt;
    r->p = *p;
    r->p.stop = NULL;
    for (int i = 0; i < p->n_stop; i++)
        if (!(r->stop[i] = strdup(p->stop[i]))) {
            req_free(r);
            hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
            return HM_SCHED_INVALID;
        }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    atomic_init(&r->refs, 2); /* the caller's and the engine's */
    atomic_init(&r->cancel, false);
    r->t_submit = hm_time_s();

    pthread_mutex_lock(&s->mu);
    hm_submit res = HM_SCHED_OK;
    if (s->closing)
        res = HM_SCHED_CLOSED;
    else if (s->n_queued >= s->p.queue_max)
        res = HM_SCHED_BUSY;
    if (res == HM_SCHED_OK) {
        if (s->q_tail)
            s->q_tail->next = r;
        else
            s->q_head = r;
        s->q_tail = r;
        s->n_queued++;
        s->st.n_requests++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (res != HM_SCHED_OK) {
        req_free(r);
        return res;
    }
    *out = r;
    return HM_SCHED_OK;
}

/* ---- the engine: output -------------------------------------------------------------------- */

static void req_finish(hm_req *r, hm_finish f, const char *err) {
    pthread_mutex_lock(&r->mu);
    r->done = true;
    r->finish = f;
    r->t_done = hm_time_s();
    if (err) snprintf(r->error, sizeof r->error, "%s", err);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* appends to the request's text; false when out of memory */
static bool req_text(hm_req *r, const char *t, size_t n) {
    if (!n) return true;
    pthread_mutex_lock(&r->mu);
    const bool ok = hm_text_append(&r->text, &r->text_len, &r->text_cap, t, n);
    if (ok) pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return ok;
}

static bool req_token(hm_req *r, const hm_req_token *t) {
    pthread_mutex_lock(&r->mu);
    size_t cap = (size_t)r->toks_cap;
    bool ok = true;
    if (r->p.logprobs >= 0 &&
        (ok = hm_grow((void **)&r->toks, &cap, (size_t)r->n_toks + 1, sizeof(hm_req_token)))) {
        r->toks_cap = (int)cap;
        r->toks[r->n_toks++] = *t;
    }
    r->n_gen++;
    if (r->n_gen == 1) r->t_first = t->t;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return ok;
}

/* The slot's generated text past `emitted`: what cannot be part of a stop string any more goes
 * out; a stop string found ends the text before it (returns true). final: emit all. */
static bool emit_text(slot *sl, bool final) {
    hm_req *r = sl->r;
    const char *g = sl->gen;
    size_t upto = sl->gen_len, hit = (size_t)-1;
    for (int i = 0; i < r->p.n_stop; i++) {
        const size_t l = strlen(r->stop[i]);
        /* a match may start up to l - 1 bytes before the unemitted text */
        const size_t from = sl->emitted >= l - 1 ? sl->emitted - (l - 1) : 0;
        for (size_t k = from; k + l <= sl->gen_len; k++)
            if (!memcmp(g + k, r->stop[i], l)) {
                if (k < hit) hit = k;
                break;
            }
    }
    if (hit != (size_t)-1) {
        if (hit > sl->emitted) req_text(r, g + sl->emitted, hit - sl->emitted);
        sl->emitted = sl->gen_len;
        return true;
    }
    if (!final) /* hold back the longest tail that begins a stop string */
        for (int i = 0; i < r->p.n_stop; i++) {
            const size_t l = strlen(r->stop[i]);
            for (size_t k = l - 1; k > 0; k--) {
                if (k > sl->gen_len) continue;
                if (!memcmp(g + sl->gen_len - k, r->stop[i], k)) {
                    if (sl->gen_len - k < upto) upto = sl->gen_len - k;
                    break;
                }
            }
        }
    if (upto > sl->emitted) {
        req_text(r, g + sl->emitted, upto - sl->emitted);
        sl->emitted = upto;
    }
    return false;
}

static void slot_end(hm_sched *s, slot *sl, hm_finish f, const char *err) {
    hm_req *r = sl->r;
    if (!r) return;
    if (f == HM_FINISH_STOP || f == HM_FINISH_LENGTH) {
        const char *t;
        size_t n;
        if (sl->dt) {
            hm_detok_flush(sl->dt, &t, &n);
            hm_text_append(&sl->gen, &sl->gen_len, &sl->gen_cap, t, n);
        }
        emit_text(sl, true);
    }
    req_finish(r, f, err);
    req_unref(r);
    hm_sampler_free(sl->smp), hm_detok_free(sl->dt);
    sl->smp = NULL, sl->dt = NULL, sl->r = NULL;
    sl->used = s->step;
    pthread_mutex_lock(&s->mu);
    s->n_active--;
    pthread_mutex_unlock(&s->mu);
}

/* ---- the engine: admission ----------------------------------------------------------------- */

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* the free slot whose cache shares the longest prefix with the prompt, else the least recently
 * used free one */
static slot *pick_slot(hm_sched *s, const hm_req *r) {
    slot *best = NULL;
    int best_len = -1;
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->r) continue;
        const int l = common_prefix(sl->cache, sl->n_cache, r->prompt, r->n_prompt);
        if (l > best_len || (l == best_len && sl->used < best->used)) best = sl, best_len = l;
    }
    return best;
}

static hm_status admit(hm_sched *s, slot *sl, hm_req *r) {
    const int seq = (int)(sl - s->slots);
    int keep = common_prefix(sl->cache, sl->n_cache, r->prompt, r->n_prompt);
    if (keep >= r->n_prompt) keep = r->n_prompt - 1; /* the last prompt token gives the logits */
    hm_status st = hm_ctx_seq_truncate(s->c, seq, keep);
    if (st) return st;
    sl->n_cache = keep;
    sl->n_fed = keep;
    sl->r = r;
    sl->admit = s->admits++;
    sl->gen_len = sl->emitted = 0;
    hm_jsonp_init(&sl->json, true);
    sl->smp = r->smp, r->smp = NULL;
    if (s->tok && (st = hm_detok_new(s->tok, HM_DETOK_REPLACE_INVALID, &sl->dt))) return st;
    pthread_mutex_lock(&r->mu);
    r->n_cached = keep;
    pthread_mutex_unlock(&r->mu);
    return HM_OK;
}

/* ---- the engine: sampling ------------------------------------------------------------------ */

/* log-softmax of row: the chosen token's and the n most likely (descending, ties to lower ids) */
static void logprobs(const float *row, int V, int32_t chosen, int n, hm_req_token *t) {
    float mx = -INFINITY;
    for (int i = 0; i < V; i++)
        if (row[i] > mx) mx = row[i];
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)(row[i] - mx));
    const float lse = mx + (float)log(sum);
    t->logprob = row[chosen] - lse;
    t->n_top = 0;
    for (int i = 0; i < V; i++) {
        const float v = row[i];
        int k = t->n_top;
        if (k == n && (k == 0 || v <= row[t->top_id[k - 1]])) continue;
        if (k < n)
            t->n_top++;
        else
            k--;
        while (k > 0 && row[t->top_id[k - 1]] < v) {
            t->top_id[k] = t->top_id[k - 1];
            k--;
        }
        t->top_id[k] = i;
    }
    for (int k = 0; k < t->n_top; k++) t->top_lp[k] = row[t->top_id[k]] - lse;
}

/* json_object: -inf for every token whose bytes cannot continue the object */
static void json_mask(hm_sched *s, const slot *sl, float *row) {
    for (int v = 0; v < s->V; v++) {
        const uint32_t a = s->piece_off[v], b = s->piece_off[v + 1];
        hm_jsonp j = sl->json;
        if (a == b || !hm_jsonp_feed(&j, s->pieces + a, b - a)) row[v] = -INFINITY;
    }
}

static void took(hm_sched *s, slot *sl, hm_status st, hm_req_token t, const float *row);

/* one row's sampling candidates (from the GPU) for a slot whose sampler takes them */
static void take_candidates(hm_sched *s, slot *sl, const int32_t *ids, const float *vals, int k) {
    hm_req_token t = {.t = 0};
    const hm_status st = hm_sampler_sample_candidates(sl->smp, ids, vals, k, &t.id);
    took(s, sl, st, t, NULL);
}

/* whether a slot's next token can come from its row's candidates: a sampler that takes them, no
 * logprobs and no JSON mask (both need the whole row); how many it needs */
static int slot_candidates(const slot *sl) {
    if (sl->r->p.logprobs >= 0 || sl->r->p.json_object) return 0;
    return hm_sampler_candidates(sl->smp);
}

/* one row of logits for a slot: sample, report, decide whether it goes on */
static void take_row(hm_sched *s, slot *sl, const float *row) {
    hm_req *r = sl->r;
    float *work = s->work;
    memcpy(work, row, sizeof(float) * (size_t)s->V);
    if (r->p.json_object) {
        json_mask(s, sl, work);
        bool any = false;
        for (int v = 0; v < s->V && !any; v++) any = work[v] > -INFINITY;
        if (!any) {
            slot_end(s, sl, HM_FINISH_STOP, NULL);
            return;
        }
    }
    hm_req_token t = {.t = 0};
    const hm_status st = hm_sampler_sample(sl->smp, work, &t.id);
    took(s, sl, st, t, row);
}

/* a sampled token (st: how the sample went): recorded, reported, and whether the slot goes on;
 * row: its logits, for logprobs (NULL when it came from candidates) */
static void took(hm_sched *s, slot *sl, hm_status st, hm_req_token t, const float *row) {
    hm_req *r = sl->r;
    if (!st) st = hm_sampler_accept(sl->smp, t.id);
    if (st) {
        slot_end(s, sl, HM_FINISH_ERROR, hm_last_error());
        return;
    }
    if (r->p.logprobs >= 0 && row) logprobs(row, s->V, t.id, r->p.logprobs, &t);
    t.t = hm_time_s();
    const bool eog = s->tok && !r->p.ignore_eos && hm_tokenizer_is_eog(s->tok, t.id);
    if (!eog || r->p.logprobs < 0)
        req_token(r, &t);
    else { /* the end token counts as generated but is not reported */
        pthread_mutex_lock(&r->mu);
        if (++r->n_gen == 1) r->t_first = t.t;
        pthread_mutex_unlock(&r->mu);
    }
    if (eog) {
        slot_end(s, sl, HM_FINISH_STOP, NULL);
        return;
    }
    if (r->p.json_object) {
        const uint32_t a = s->piece_off[t.id], b = s->piece_off[t.id + 1];
        hm_jsonp_feed(&sl->json, s->pieces + a, b - a);
    }
    if (sl->dt) {
        const char *txt;
        size_t n;
        if (hm_detok_push(sl->dt, t.id, &txt, &n) == HM_OK && n) {
            if (!hm_text_append(&sl->gen, &sl->gen_len, &sl->gen_cap, txt, n)) {
                slot_end(s, sl, HM_FINISH_ERROR, "out of memory for the generated text");
                return;
            }
        }
        if (emit_text(sl, false)) {
            slot_end(s, sl, HM_FINISH_STOP, NULL);
            return;
        }
    }
    if (r->p.json_object && hm_jsonp_done(&sl->json)) {
        slot_end(s, sl, HM_FINISH_STOP, NULL);
        return;
    }
    if (r->n_gen >= r->p.max_tokens || sl->n_cache >= s->n_ctx) {
        slot_end(s, sl, HM_FINISH_LENGTH, NULL);
        return;
    }
    sl->next = t.id;
}

/* ---- the engine: the loop ------------------------------------------------------------------ */

/* one step: every generating slot's next token, then prompt chunks; false when idle */
static bool step(hm_sched *s) {
    int n = 0;
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->r) continue;
        if (atomic_load(&sl->r->cancel)) {
            slot_end(s, sl, HM_FINISH_CANCELLED, NULL);
            continue;
        }
        if (sl->n_fed < sl->r->n_prompt) continue;
        s->b_tok[n] = sl->next, s->b_seq[n] = i, s->b_slot[n] = i, s->b_want[n] = 1;
        n++;
    }
    const int chunk = s->p.prefill_chunk > 0 ? s->p.prefill_chunk : s->n_batch;
    int budget = chunk;
    while (n < s->n_batch && budget > 0) { /* the earliest admitted prompt first */
        slot *first = NULL;
        for (int i = 0; i < s->n_slots; i++) {
            slot *sl = &s->slots[i];
            if (!sl->r || sl->n_fed >= sl->r->n_prompt) continue;
            bool queued = false; /* already in this batch */
            for (int k = 0; k < n && !queued; k++) queued = s->b_slot[k] == i;
            if (!queued && (!first || sl->admit < first->admit)) first = sl;
        }
        if (!first) break;
        const int i = (int)(first - s->slots);
        int take = first->r->n_prompt - first->n_fed;
        if (take > s->n_batch - n) take = s->n_batch - n;
        if (take > budget) take = budget;
        for (int k = 0; k < take; k++) {
            s->b_tok[n] = first->r->prompt[first->n_fed + k];
            s->b_seq[n] = i, s->b_slot[n] = i;
            s->b_want[n] = first->n_fed + k == first->r->n_prompt - 1;
            n++;
        }
        budget -= take;
    }
    if (!n) return false;
    /* on a GPU: the wanted rows' candidates cross instead of their logits when every one of
     * their samplers takes them (the batch's largest k) */
    int kc = s->on_gpu ? HM_SAMPLER_MAX_CANDIDATES + 1 : 0, kmax = 0;
    for (int k = 0; k < n && kc; k++) {
        if (!s->b_want[k]) continue;
        const int w = slot_candidates(&s->slots[s->b_slot[k]]);
        if (!w) kc = 0;
        if (w > kmax) kmax = w;
    }
    kc = kc ? kmax : 0;
    const double t0 = hm_time_s();
    hm_status st =
        kc ? hm_ctx_decode_top(s->c, s->b_tok, s->b_seq, n, s->b_want, kc, s->c_ids, s->c_vals)
           : hm_ctx_decode(s->c, s->b_tok, s->b_seq, n, s->b_want, s->logits);
    const double t1 = hm_time_s();
    s->step++;
    int n_prompt_tok = 0, n_gen_tok = 0;
    if (st) { /* nothing was added to the caches: every slot of the batch fails */
        const char *msg = hm_last_error();
        for (int k = 0; k < n; k++) {
            slot *sl = &s->slots[s->b_slot[k]];
            if (sl->r) slot_end(s, sl, HM_FINISH_ERROR, msg);
        }
    } else {
        int row = 0;
        for (int k = 0; k < n; k++) {
            slot *sl = &s->slots[s->b_slot[k]];
            sl->cache[sl->n_cache++] = s->b_tok[k];
            sl->used = s->step;
            if (sl->n_fed < sl->r->n_prompt) {
                sl->n_fed++;
                n_prompt_tok++;
            } else
                n_gen_tok++;
            if (!s->b_want[k]) continue;
            if (kc)
                take_candidates(s, sl, s->c_ids + (size_t)row * kc, s->c_vals + (size_t)row * kc,
                                kc);
            else
                take_row(s, sl, s->logits + (size_t)row * (size_t)s->V);
            row++;
        }
    }
    int used = 0;
    for (int i = 0; i < s->n_slots; i++) used += s->slots[i].n_cache;
    pthread_mutex_lock(&s->mu);
    s->st.kv_used = used;
    s->st.n_steps++;
    s->st.busy_s += t1 - t0;
    s->st.n_prompt_tokens += (uint64_t)n_prompt_tok;
    s->st.n_gen_tokens += (uint64_t)n_gen_tok;
    pthread_mutex_unlock(&s->mu);
    return true;
}

static void *engine(void *arg) {
    hm_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->q_head && !s->n_active && !s->closing) pthread_cond_wait(&s->cv, &s->mu);
        if (s->closing && !s->q_head && !s->n_active) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        /* admit queued requests into free slots */
        hm_req *adm[64];
        int na = 0;
        while (s->q_head && s->n_active + na < s->n_slots && na < 64) {
            hm_req *r = s->q_head;
            s->q_head = r->next;
            if (!s->q_head) s->q_tail = NULL;
            r->next = NULL;
            s->n_queued--;
            adm[na++] = r;
        }
        s->n_active += na;
        pthread_mutex_unlock(&s->mu);
        for (int k = 0; k < na; k++) {
            hm_req *r = adm[k];
            slot *sl = pick_slot(s, r);
            hm_status st = admit(s, sl, r);
            if (st) {
                sl->r = r;
                slot_end(s, sl, HM_FINISH_ERROR, hm_last_error());
                continue;
            }
            pthread_mutex_lock(&s->mu);
            s->st.n_cached_tokens += (uint64_t)sl->n_cache;
            pthread_mutex_unlock(&s->mu);
        }
        step(s);
    }
    return NULL;
}

/* ---- create / free / stats ----------------------------------------------------------------- */

static hm_status build_pieces(hm_sched *s) {
    const uint32_t nt = hm_tokenizer_n_vocab(s->tok);
    size_t cap = 0, len = 0;
    if (!(s->piece_off = calloc((size_t)s->V + 1, sizeof(uint32_t))))
        return hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
    for (int32_t v = 0; v < s->V; v++) {
        s->piece_off[v] = (uint32_t)len;
        if ((uint32_t)v >= nt) continue;
        char *t = NULL;
        size_t n = 0;
        if (hm_tokenizer_decode(s->tok, &v, 1, 0, &t, &n)) {
            hm_error_clear();
            continue;
        }
        if (!hm_grow((void **)&s->pieces, &cap, len + n + 1, 1)) {
            free(t);
            return hm_errorf(HM_ERR_NO_MEMORY, "out of memory for the vocabulary's text");
        }
        memcpy(s->pieces + len, t, n);
        len += n;
        free(t);
    }
    s->piece_off[s->V] = (uint32_t)len;
    if (!s->pieces && !(s->pieces = malloc(1))) return hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
    return HM_OK;
}

static void sched_destroy(hm_sched *s) {
    for (int i = 0; s->slots && i < s->n_slots; i++) {
        free(s->slots[i].cache), free(s->slots[i].gen);
        hm_sampler_free(s->slots[i].smp), hm_detok_free(s->slots[i].dt);
    }
    free(s->slots), free(s->b_tok), free(s->b_seq), free(s->b_slot), free(s->b_want);
    free(s->logits), free(s->work), free(s->pieces), free(s->piece_off);
    free(s->c_ids), free(s->c_vals);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

hm_status hm_sched_create(hm_ctx *c, const hm_tokenizer *tok, const hm_sched_params *p,
                          hm_sched **out) {
    *out = NULL;
    if (!c) return hm_errorf(HM_ERR_INVALID_ARG, "sched: no context");
    hm_sched *s = calloc(1, sizeof *s);
    if (!s) return hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->c = c, s->tok = tok;
    s->p = p ? *p : hm_sched_default_params();
    if (s->p.queue_max < 1) s->p.queue_max = 1;
    s->n_slots = hm_ctx_n_seq(c), s->n_ctx = hm_ctx_n_ctx(c), s->n_batch = hm_ctx_n_batch(c);
    s->V = hm_ctx_n_vocab(c);
    if (s->n_batch < s->n_slots) {
        sched_destroy(s);
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "sched: a batch of %d tokens cannot hold one token of each of %d "
                         "sequences",
                         s->n_batch, s->n_slots);
    }
    const size_t B = (size_t)s->n_batch;
    s->slots = calloc((size_t)s->n_slots, sizeof(slot));
    s->b_tok = malloc(B * sizeof(int32_t)), s->b_seq = malloc(B * sizeof(int32_t));
    s->b_slot = malloc(B * sizeof(int32_t)), s->b_want = malloc(B);
    s->logits = malloc(B * (size_t)s->V * sizeof(float));
    s->on_gpu = hm_ctx_device(c) == HM_DEVICE_CUDA;
    s->c_ids = malloc(B * HM_SAMPLER_MAX_CANDIDATES * sizeof(int32_t));
    s->c_vals = malloc(B * HM_SAMPLER_MAX_CANDIDATES * sizeof(float));
    s->work = malloc((size_t)s->V * sizeof(float));
    bool ok = s->slots && s->b_tok && s->b_seq && s->b_slot && s->b_want && s->logits && s->work &&
              s->c_ids && s->c_vals;
    for (int i = 0; ok && i < s->n_slots; i++) {
        ok = (s->slots[i].cache = malloc(sizeof(int32_t) * (size_t)s->n_ctx)) != NULL;
        hm_ctx_seq_reset(c, i);
    }
    if (!ok) {
        sched_destroy(s);
        return hm_errorf(HM_ERR_NO_MEMORY, "sched: out of memory for %d slots", s->n_slots);
    }
    hm_status st = tok ? build_pieces(s) : HM_OK;
    if (st) {
        sched_destroy(s);
        return st;
    }
    s->st.n_slots = s->n_slots;
    s->st.kv_capacity = s->n_slots * s->n_ctx;
    if (pthread_create(&s->thread, NULL, engine, s)) {
        sched_destroy(s);
        return hm_errorf(HM_ERR_SYSTEM, "sched: cannot start the engine thread");
    }
    s->started = true;
    *out = s;
    return HM_OK;
}

void hm_sched_close(hm_sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->closing = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

bool hm_sched_idle(hm_sched *s) {
    pthread_mutex_lock(&s->mu);
    const bool idle = !s->q_head && !s->n_active;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

void hm_sched_free(hm_sched *s) {
    if (!s) return;
    hm_sched_close(s);
    if (s->started) pthread_join(s->thread, NULL);
    sched_destroy(s);
}

void hm_sched_get_stats(hm_sched *s, hm_sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    out->n_active = s->n_active;
    out->n_queued = s->n_queued;
    pthread_mutex_unlock(&s->mu);
}
