/* run.c - `hmoe run`: generate from a prompt (text or ids) with a model on the CPU and print the
 * text (and/or ids), then prompt and generation speed. */
#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/log.h"
#include "core/timer.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "template/jinja.h"
#include "tokenizer/tokenizer.h"

static int usage(FILE *f) {
    fprintf(f,
            "usage: hmoe run -m MODEL (-p TEXT | --ids \"1 2 3\") [-n N] [options]\n"
            "  MODEL: a .gguf file or a Hugging Face directory (config.json + *.safetensors)\n"
            "  -n N                  tokens to generate (default 32)\n"
            "  --temp T              0 = greedy (default 0)\n"
            "  --top-k K  --top-p P  --min-p P\n"
            "  --repeat-penalty R  --presence-penalty P  --frequency-penalty F\n"
            "  --penalty-last-n N    tokens the penalties look back over (-1 = all; default 64)\n"
            "  --seed S              random seed of the sampler (default 0)\n"
            "  --threads N  --ctx N  --batch N  --no-amx\n"
            "  --load auto|mmap|copy  compute from the mapped file or from a huge-page copy\n"
            "  --kv f32|f16          KV cache element type (default f32)\n"
            "  --repack auto|on|off  keep an int8 copy of the experts for AMX prefill (auto: when\n"
            "                        it fits in memory)\n"
            "  --numa auto|off|N     routed experts in slices, one per NUMA node (auto: on\n"
            "                        machines with several nodes; N: N slices, emulated on fewer)\n"
            "  --numa-copy auto|on|off\n"
            "                        copy each slice's weights to its node (auto: when it fits)\n"
            "  --bf16-tiles          prompt batches of BF16/F16 weights on AMX BF16 tiles\n"
            "                        (activations rounded to bf16; default: exact float kernels)\n"
            "  --no-idle-prefetch    decode: idle workers do not prefetch the next matmul's\n"
            "                        weights between jobs (to measure what that gains)\n"
            "  --tokenizer PATH      tokenizer to use instead of the model's own\n"
            "  --chat                put -p through the model's chat template as a user turn\n"
            "  --system TEXT         a system turn before it (implies --chat)\n"
            "  --no-think            chat: enable_thinking=false (Qwen3)\n"
            "  --print-ids           also print the generated ids\n"
            "  --ignore-eos          do not stop at end-of-generation tokens\n");
    return f == stderr ? 2 : 0;
}

/* One user turn (after an optional system turn) through the model's chat template, with the
 * generation prompt; no_think passes enable_thinking=false (Qwen3). *out is malloc'd. */
static hm_status render_chat(const char *model, const char *user, const char *system, bool no_think,
                             char **out) {
    hm_chat_template_source src = {0};
    hm_jinja *tpl = NULL;
    hm_status st = hm_chat_template_load(model, &src);
    if (st) return st;
    json_t *msgs = json_array(), *kw = no_think ? json_pack("{s:b}", "enable_thinking", 0) : NULL;
    if (system)
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", system));
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", user));
    if (!(st = hm_jinja_parse(src.template_text, src.template_len,
                              src.origin ? src.origin : "chat_template", &tpl)))
        st = hm_chat_template_apply(tpl, msgs, NULL, true, kw, src.bos_token, src.eos_token, NULL,
                                    out, NULL);
    hm_jinja_free(tpl);
    json_decref(msgs);
    json_decref(kw);
    hm_chat_template_source_free(&src);
    return st;
}

/* a finite float (the sampler checks each option's range) */
static bool parse_float(const char *s, float *out) {
    double v;
    if (!cli_parse_double(s, -FLT_MAX, FLT_MAX, &v)) return false;
    *out = (float)v;
    return true;
}

int cmd_run(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *ids_s = NULL, *tok_path = NULL, *system = NULL;
    bool chat = false, no_think = false;
    char *rendered = NULL;
    long n_gen = 32;
    bool print_ids = false, ignore_eos = false;
    hm_ctx_params cp = hm_ctx_default_params();
    cp.pin_caller = true;
    hm_model_params mlp = hm_model_default_params();
    hm_sampler_params sp = hm_sampler_default_params();
    sp.temperature = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        float f;
#define FLOAT_OPT(name, field)                                                                     \
    else if (!strcmp(a, name) && v) {                                                              \
        if (!parse_float(v, &f)) return cli_usage_error("bad %s '%s'", name, v);                   \
        field = f, i++;                                                                            \
    }
#define INT_OPT(name, lo, hi, field)                                                               \
    else if (!strcmp(a, name) && v) {                                                              \
        if (!cli_parse_int(v, lo, hi, &n)) return cli_usage_error("bad %s '%s'", name, v);         \
        field = (int)n, i++;                                                                       \
    }
        const int r = cli_ctx_option(argc, argv, &i, &cp, &mlp);
        if (r == 2) return 2;
        if (r == 1) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return usage(stdout);
        else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v)
            model = v, i++;
        else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && v)
            prompt = v, i++;
        else if (!strcmp(a, "--ids") && v)
            ids_s = v, i++;
        else if (!strcmp(a, "--chat"))
            chat = true;
        else if (!strcmp(a, "--system") && v)
            system = v, i++, chat = true;
        else if (!strcmp(a, "--no-think"))
            no_think = true;
        else if (!strcmp(a, "--tokenizer") && v)
            tok_path = v, i++;
        else if (!strcmp(a, "-n") && v) {
            if (!cli_parse_int(v, 0, 1 << 24, &n_gen)) return cli_usage_error("bad -n '%s'", v);
            i++;
        }
        FLOAT_OPT("--temp", sp.temperature)
        FLOAT_OPT("--top-p", sp.top_p)
        FLOAT_OPT("--min-p", sp.min_p)
        FLOAT_OPT("--repeat-penalty", sp.repetition_penalty)
        FLOAT_OPT("--presence-penalty", sp.presence_penalty)
        FLOAT_OPT("--frequency-penalty", sp.frequency_penalty)
        INT_OPT("--top-k", 0, 1 << 30, sp.top_k)
        INT_OPT("--penalty-last-n", -1, 1 << 30, sp.penalty_last_n)
        else if (!strcmp(a, "--seed") && v) {
            char *end;
            unsigned long long s = strtoull(v, &end, 10);
            if (!*v || *end || v[0] == '-') return cli_usage_error("bad --seed '%s'", v);
            sp.seed = s, i++;
        }
        else if (!strcmp(a, "--print-ids")) print_ids = true;
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = true;
        else {
            usage(stderr);
            return cli_usage_error("unknown or incomplete option '%s'", a);
        }
#undef FLOAT_OPT
#undef INT_OPT
    }
    if (!model || (!prompt == !ids_s)) {
        usage(stderr);
        return cli_usage_error("-m and exactly one of -p or --ids are required");
    }

    int rc = 1;
    hm_model *m = NULL;
    hm_ctx *c = NULL;
    hm_tokenizer *tok = NULL;
    hm_detok *dt = NULL;
    hm_sampler *smp = NULL;
    int32_t *ids = NULL, *gen = NULL;
    float *logits = NULL;
    int n_ids = 0;

    if (hm_model_load_ex(model, &mlp, &m)) goto fail;
    if (hm_tokenizer_load(tok_path ? tok_path : model, &tok)) {
        if (prompt || tok_path) goto fail;
        fprintf(stderr, "hmoe: no tokenizer (%s): printing ids only\n", hm_last_error());
        tok = NULL;
        print_ids = true;
    }
    if (prompt && chat) { /* the model's chat template around one user turn */
        if (render_chat(model, prompt, system, no_think, &rendered)) goto fail;
        prompt = rendered;
        hm_log(HM_LOG_DEBUG, "run: chat prompt:\n%s", rendered);
    }
    if (prompt) {
        size_t n = 0;
        /* a rendered chat carries its own special tokens (and BOS where the template has one) */
        if (hm_tokenizer_encode_alloc(tok, prompt, strlen(prompt),
                                      chat ? HM_TOK_PARSE_SPECIAL : HM_TOK_ADD_SPECIAL, &ids, &n))
            goto fail;
        if (n == 0) {
            fprintf(stderr, "hmoe: the prompt encodes to no tokens\n");
            goto done;
        }
        n_ids = (int)n;
    } else if (!cli_parse_ids(ids_s, &ids, &n_ids)) {
        rc = cli_usage_error("--ids: expected non-negative integers separated by spaces or commas");
        goto done;
    }
    if (!cp.n_ctx) {
        long want = (long)n_ids + n_gen;
        cp.n_ctx = m->hp.max_ctx && want > (long)m->hp.max_ctx ? (int)m->hp.max_ctx : (int)want;
    }
    if ((long)n_ids + n_gen > cp.n_ctx) {
        fprintf(stderr,
                "hmoe: prompt (%d tokens) + %ld generated tokens do not fit in the context of %d "
                "positions (--ctx)\n",
                n_ids, n_gen, cp.n_ctx);
        goto done;
    }
    /* the window holds at most the context's tokens: a larger --penalty-last-n means the same */
    if (sp.penalty_last_n > cp.n_ctx) sp.penalty_last_n = cp.n_ctx;
    if (hm_ctx_create(m, &cp, &c)) goto fail;
    if (hm_sampler_create(&sp, (int32_t)m->hp.vocab_size, &smp)) goto fail;
    if (tok && hm_detok_new(tok, HM_DETOK_REPLACE_INVALID, &dt)) goto fail;
    const int V = (int)m->hp.vocab_size, B = hm_ctx_n_batch(c);
    logits = malloc((size_t)V * sizeof(float));
    gen = malloc(((size_t)n_gen + 1) * sizeof(int32_t));
    uint8_t *want = calloc((size_t)B, 1);
    if (!logits || !gen || !want) {
        free(want);
        fprintf(stderr, "hmoe: out of memory\n");
        goto done;
    }
    for (int i = 0; i < n_ids; i++) hm_sampler_accept(smp, ids[i]);

    hm_log(HM_LOG_INFO, "run: %d prompt tokens, %ld to generate, %d threads", n_ids, n_gen,
           hm_ctx_n_threads(c));
    double t0 = hm_time_s();
    for (int i0 = 0; i0 < n_ids; i0 += B) {
        int nb = n_ids - i0 < B ? n_ids - i0 : B;
        memset(want, 0, (size_t)B);
        want[nb - 1] = i0 + nb == n_ids;
        if (hm_ctx_decode(c, ids + i0, NULL, nb, want, logits)) {
            free(want);
            goto fail;
        }
    }
    free(want);
    double t1 = hm_time_s();
    long n_done = 0;
    for (; n_done < n_gen; n_done++) {
        int32_t t;
        if (hm_sampler_sample(smp, logits, &t)) goto fail;
        gen[n_done] = t;
        hm_sampler_accept(smp, t);
        if (dt) {
            const char *s;
            size_t len;
            if (hm_detok_push(dt, t, &s, &len)) goto fail;
            if (fwrite(s, 1, len, stdout) != len || fflush(stdout) != 0) {
                rc = cli_stdout_error(); /* no point generating what cannot be written */
                goto done;
            }
        }
        if (!ignore_eos && tok && hm_tokenizer_is_eog(tok, t)) {
            n_done++;
            break;
        }
        if (n_done + 1 < n_gen && hm_ctx_decode(c, &t, NULL, 1, NULL, logits)) goto fail;
    }
    double t2 = hm_time_s();
    if (dt) {
        const char *s;
        size_t len;
        hm_detok_flush(dt, &s, &len);
        fwrite(s, 1, len, stdout);
        fputc('\n', stdout);
    }
    if (print_ids) {
        printf("ids:");
        for (long i = 0; i < n_done; i++) printf(" %d", gen[i]);
        printf("\n");
    }
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) { /* before the speeds: they would say it worked */
        rc = cli_stdout_error();
        goto done;
    }
    /* generation speed counts the decode steps: the first token comes from the prompt's logits */
    char gen_rate[64] = "-";
    if (n_done > 1)
        snprintf(gen_rate, sizeof gen_rate, "%.2f tok/s",
                 (double)(n_done - 1) / (t2 - t1 > 0 ? t2 - t1 : 1e-9));
    fprintf(stderr,
            "hmoe: prompt %d tokens in %.3f s (%.2f tok/s); generated %ld tokens in %.3f s (%s)\n",
            n_ids, t1 - t0, n_ids / (t1 - t0 > 0 ? t1 - t0 : 1e-9), n_done, t2 - t1, gen_rate);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "hmoe: %s\n", hm_last_error());
done:
    free(rendered);
    free(ids);
    free(gen);
    free(logits);
    hm_detok_free(dt);
    hm_sampler_free(smp);
    hm_tokenizer_free(tok);
    hm_ctx_free(c);
    hm_model_free(m);
    return rc;
}
