/* run.c - `hmoe run`: generate from a prompt (text or ids) with a model on the CPU and print the
 * text (and/or ids), then prompt and generation speed. */
#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "hmoe.h"

static int usage(FILE *f) {
    fprintf(
        f, "usage: hmoe run -m MODEL (-p TEXT | --ids \"1 2 3\") [-n N] [options]\n"
           "  MODEL: a .gguf file or a Hugging Face directory (config.json + *.safetensors)\n"
           "  -n N                  tokens to generate (default 32)\n"
           "  --temp T              0 = greedy (default 0)\n"
           "  --top-k K  --top-p P  --min-p P\n"
           "  --repeat-penalty R  --presence-penalty P  --frequency-penalty F\n"
           "  --penalty-last-n N    tokens the penalties look back over (-1 = all; default 64)\n"
           "  --seed S              random seed of the sampler (default 0)\n"
           "  --threads N  --ctx N  --batch N  --no-amx\n"
           "  --device auto|cpu|cuda where the model runs (cuda: GPU --gpu N, with as many\n"
           "                        routed experts as fit, the others on the CPU; auto, the\n"
           "                        default: the GPU when there is one and the model runs there)\n"
           "  --defer K             hybrid: each token's K lowest-weighted CPU experts of a\n"
           "                        layer finish during the next layer (default 0: off)\n"
           "  --dynamic-experts     hybrid: the experts' counts re-rank them as the run goes; the\n"
           "                        hottest CPU expert of a layer swaps with its coldest GPU one\n"
           "  --gpu-prefill-threshold N|auto|off\n"
           "                        hybrid: batches of N+ tokens stream each layer's CPU experts\n"
           "                        to the GPU and compute them there (default auto: where the\n"
           "                        copy is faster than the CPU, both measured at start-up)\n"
           "  --gpu-dtype native|bf16 non-expert weights on the GPU in their own types, or\n"
           "                        expanded to BF16 with batches on BF16 tensor cores\n"
           "  --gpu-experts N|fit   routed experts per layer on the GPU (default fit)\n"
           "  --gpu-mem SIZE        GPU memory the model may take (default: what is free)\n"
           "  --placement uniform|front|random|frequency\n"
           "                        which experts go to the GPU (default uniform)\n"
           "  --place-seed N  --expert-counts FILE (hmoe profile's, for frequency)\n"
           "  --place 'REGEX=cuda|cpu' move whole layers' experts by tensor name (repeatable)\n"
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
 * generation prompt; no_think passes enable_thinking=false (Qwen3). *out is malloc'd. On failure
 * the error is printed and 1 returned. */
static int render_chat(const char *model, const char *user, const char *system, bool no_think,
                       char **out) {
    *out = NULL;
    /* json_pack refuses text that is not UTF-8 (the template would too) */
    json_t *sys = system ? json_pack("{s:s,s:s}", "role", "system", "content", system) : NULL;
    json_t *usr = json_pack("{s:s,s:s}", "role", "user", "content", user);
    json_t *msgs = (!system || sys) && usr ? json_array() : NULL;
    if (msgs && sys) json_array_append(msgs, sys);
    if (msgs) json_array_append(msgs, usr);
    char *text = msgs ? json_dumps(msgs, JSON_COMPACT) : NULL;
    json_decref(sys), json_decref(usr), json_decref(msgs);
    if (!text) {
        fprintf(stderr, "hmoe: --chat: the prompt or --system text is not valid UTF-8\n");
        return 1;
    }
    hm_status st = hm_chat_render(model, text, NULL,
                                  no_think ? "{\"enable_thinking\":false}" : NULL, true, out, NULL);
    free(text);
    if (st) fprintf(stderr, "hmoe: %s\n", hm_last_error());
    return st != HM_OK;
}

/* a finite float (the sampler checks each option's range) */
static bool parse_float(const char *s, float *out) {
    double v;
    if (!cli_parse_double(s, -FLT_MAX, FLT_MAX, &v)) return false;
    *out = (float)v;
    return true;
}

/* hm_generate's callback: the text as it comes (stdout), and the ids kept for --print-ids */
typedef struct run_out {
    int32_t *ids;
    int n;
    bool write_failed;
} run_out;

static bool print_token(int32_t id, const char *text, size_t len, void *user) {
    run_out *o = user;
    if (id != HM_TOKEN_NONE) o->ids[o->n++] = id;
    if (text && len && (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0)) {
        o->write_failed = true;
        return false;
    }
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
    hm_sampler *smp = NULL;
    int32_t *ids = NULL, *gen = NULL;
    int n_ids = 0;

    if (hm_model_load_ex(model, &mlp, &m)) goto fail;
    if (hm_tokenizer_load(tok_path ? tok_path : model, &tok)) {
        if (prompt || tok_path) goto fail;
        fprintf(stderr, "hmoe: no tokenizer (%s): printing ids only\n", hm_last_error());
        tok = NULL;
        print_ids = true;
    }
    if (prompt && chat) { /* the model's chat template around one user turn */
        if (render_chat(model, prompt, system, no_think, &rendered)) goto done;
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
    const int train_ctx = hm_model_n_ctx_train(m);
    if (!cp.n_ctx) {
        long want = (long)n_ids + n_gen;
        cp.n_ctx = train_ctx && want > (long)train_ctx ? train_ctx : (int)want;
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
    if (hm_ctx_device(c) == HM_DEVICE_CUDA) { /* what the hybrid placement chose */
        char place[512];
        hm_ctx_placement(c, place, sizeof place);
        fprintf(stderr, "hmoe: GPU %d: %s\n", cp.gpu, place);
    }
    if (hm_sampler_create(&sp, hm_model_n_vocab(m), &smp)) goto fail;
    if (!(gen = malloc(((size_t)n_gen + 1) * sizeof(int32_t)))) {
        fprintf(stderr, "hmoe: out of memory\n");
        goto done;
    }
    hm_log(HM_LOG_INFO, "run: %d prompt tokens, %ld to generate, %d threads", n_ids, n_gen,
           hm_ctx_n_threads(c));
    run_out ro = {gen, 0, false};
    hm_generate_params gp = hm_generate_default_params();
    gp.n_predict = (int)n_gen;
    gp.ignore_eos = ignore_eos;
    hm_generate_stats gs;
    if (hm_generate(c, smp, tok, ids, n_ids, &gp, print_token, &ro, &gs)) goto fail;
    if (ro.write_failed) {
        rc = cli_stdout_error(); /* no point generating what cannot be written */
        goto done;
    }
    if (tok) fputc('\n', stdout);
    if (print_ids) {
        printf("ids:");
        for (int i = 0; i < ro.n; i++) printf(" %d", gen[i]);
        printf("\n");
    }
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) { /* before the speeds: they would say it worked */
        rc = cli_stdout_error();
        goto done;
    }
    /* generation speed counts the decode steps: the first token comes from the prompt's logits */
    char gen_rate[64] = "-";
    if (gs.n_generated > 1)
        snprintf(gen_rate, sizeof gen_rate, "%.2f tok/s",
                 (double)(gs.n_generated - 1) / (gs.gen_s > 0 ? gs.gen_s : 1e-9));
    fprintf(stderr,
            "hmoe: prompt %d tokens in %.3f s (%.2f tok/s); generated %d tokens in %.3f s (%s)\n",
            n_ids, gs.prompt_s, n_ids / (gs.prompt_s > 0 ? gs.prompt_s : 1e-9), gs.n_generated,
            gs.gen_s, gen_rate);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "hmoe: %s\n", hm_last_error());
done:
    free(rendered);
    free(ids);
    free(gen);
    hm_sampler_free(smp);
    hm_tokenizer_free(tok);
    hm_ctx_free(c);
    hm_model_free(m);
    return rc;
}
