/* bench_e2e.c - `hmoe bench e2e`: whole-model prompt processing and decode speed on the CPU for a
 * model file (a synth preset of a real model's shapes, or a real one), against the bandwidth
 * roofline of the same run: decode reads every dense weight, the output layer and the top-k
 * experts of every MoE layer once per token. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "hmoe.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* the prompt's token ids: splitmix64 from seed 1, the ids quant/synth.h's hm_rng_next gives
 * (this program uses the public header only), so figures compare across versions */
static uint64_t next_id(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int bench_e2e(int argc, char **argv) {
    const char *model = NULL;
    long n_prompt = 512, n_gen = 128, reps = 1, seqs = 1;
    hm_ctx_params cp = hm_ctx_default_params();
    cp.pin_caller = true;
    hm_model_params mlp = hm_model_default_params();
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r = cli_ctx_option(argc, argv, &i, &cp, &mlp);
        if (r == 2) return 2;
        if (r == 1) continue;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) {
            model = v, i++;
        } else if (!strcmp(a, "-p") && v) {
            if (!cli_parse_int(v, 0, 1 << 20, &n_prompt)) return cli_usage_error("bad -p '%s'", v);
            i++;
        } else if (!strcmp(a, "-n") && v) {
            if (!cli_parse_int(v, 0, 1 << 20, &n_gen)) return cli_usage_error("bad -n '%s'", v);
            i++;
        } else if (!strcmp(a, "--seqs") && v) {
            if (!cli_parse_int(v, 1, 256, &seqs)) return cli_usage_error("bad --seqs '%s'", v);
            i++;
        } else if (!strcmp(a, "--reps") && v) {
            if (!cli_parse_int(v, 1, 1000, &reps)) return cli_usage_error("bad --reps '%s'", v);
            i++;
        } else {
            fprintf(
                stderr,
                "usage: hmoe bench e2e -m MODEL [-p 512] [-n 128] [--seqs B] [--reps N] "
                "[--threads N] [--batch N] [--no-amx]\n"
                "       [--device auto|cpu|cuda] [--gpu N] [--gpu-experts N|fit] [--gpu-mem SIZE]\n"
                "       [--placement S] [--place-seed N] [--expert-counts F] [--place R] [--load "
                "auto|mmap|copy] "
                "[--kv f32|f16] [--gpu-dtype native|bf16] [--defer K] [--dynamic-experts] "
                "[--gpu-prefill-threshold "
                "N|auto|off] [--repack auto|on|off] "
                "[--bf16-tiles] [--no-idle-prefetch]\n"
                "       [--numa auto|off|N] [--numa-copy auto|on|off]\n");
            return cli_usage_error("unknown or incomplete option '%s'", a);
        }
    }
    if (!model) return cli_usage_error("bench e2e: -m MODEL is required");
    hm_model *m = NULL;
    hm_ctx *c = NULL;
    int32_t *ids = NULL, *seq_buf = NULL, *own = NULL;
    float *logits = NULL;
    hm_sampler *smp = NULL;
    int rc = 1;
    double t_load = now_s();
    if (hm_model_load_ex(model, &mlp, &m)) goto fail;
    t_load = now_s() - t_load;
    cp.n_ctx = (int)(n_prompt + n_gen + 1);
    cp.n_seq = (int)seqs;
    if (!cp.n_batch) cp.n_batch = n_prompt > 0 && n_prompt < 512 ? (int)n_prompt : 512;
    double t_ctx = now_s();
    if (hm_ctx_create(m, &cp, &c)) goto fail;
    t_ctx = now_s() - t_ctx;
    hm_model_info mi;
    hm_model_get_info(m, &mi);
    const uint64_t dense_b = mi.decode_dense_bytes, exp_b = mi.decode_expert_bytes;
    printf("bench e2e: %s (%s), %d layers, hidden %d, %d experts top-%d of %dx%d (%s), vocab %d\n",
           model, mi.arch, mi.n_layers, mi.hidden, mi.n_experts, mi.n_experts_used, mi.hidden,
           mi.moe_inter, mi.expert_type, (int)mi.n_vocab);
    printf("config: device %s, prompt %ld tokens (batch %d), generate %ld, %d threads, amx %s, "
           "weights %s, "
           "KV cache %s, decode idle prefetch %s, load %.2f s, context %.2f s (weights repacked "
           "for int8 prefill: %.1f MB)\n",
           hm_ctx_device(c) == HM_DEVICE_CUDA ? "cuda" : "cpu", n_prompt, hm_ctx_n_batch(c), n_gen,
           hm_ctx_n_threads(c), cp.no_amx ? "off" : "auto",
           hm_model_copied(m) ? "copied to huge pages" : "mmapped", cp.kv_f16 ? "f16" : "f32",
           cp.no_idle_prefetch ? "off" : "on", t_load, t_ctx,
           (double)hm_ctx_repacked_bytes(c) * 1e-6);
    if (hm_ctx_device(c) == HM_DEVICE_CUDA) {
        char place[512];
        hm_ctx_placement(c, place, sizeof place);
        printf("placement: %s\n", place);
    }
    if (hm_ctx_numa_slices(c) > 1)
        printf("numa: routed experts in %d slices, weights copied to their nodes: %.1f MB\n",
               hm_ctx_numa_slices(c), (double)hm_ctx_numa_copy_bytes(c) * 1e-6);
    cli_print_huge_pages("");
    printf("decode reads per token: %.3f GB (dense+output %.3f GB, experts %.3f GB)\n",
           (double)(dense_b + exp_b) * 1e-9, (double)dense_b * 1e-9, (double)exp_b * 1e-9);

    /* the bound: the memory the weights are read from (host DRAM, or the GPU's) */
    const bool on_gpu = hm_ctx_device(c) == HM_DEVICE_CUDA;
    const char *bw_what =
        on_gpu ? "GPU memory copy (read + write, best of 5)" : "streaming read (median of 9)";
    double bw_med, bw_best;
    if (on_gpu ? hm_measure_gpu_bandwidth(cp.gpu, &bw_med)
               : hm_measure_read_bandwidth(9, &bw_med, &bw_best))
        goto fail;
    if (on_gpu) bw_best = bw_med;
    const double roof = bw_med * 1e9 / (double)(dense_b + exp_b);
    printf("roofline: same-run %s %.1f GB/s (best %.1f) -> decode <= %.1f tok/s\n", bw_what, bw_med,
           bw_best, roof);
    /* hybrid: the CPU's experts stream from host memory while the GPU computes its own */
    const double share = hm_ctx_gpu_expert_share(c);
    const bool hybrid = on_gpu && share < 1.0;
    double cbw = 0, cbw_best = 0;
    if (hybrid && hm_measure_read_bandwidth(9, &cbw, &cbw_best)) goto fail;

    const int V = (int)mi.n_vocab;
    hm_sampler_params sp = hm_sampler_default_params();
    sp.temperature = 0; /* greedy: the sampler's argmax, as `hmoe run --temp 0` takes it */
    if (hm_sampler_create(&sp, V, &smp)) goto fail;
    ids = malloc(((size_t)n_prompt + 1) * sizeof *ids);
    logits = malloc((size_t)seqs * (size_t)V * sizeof(float));
    seq_buf = malloc((size_t)hm_ctx_n_batch(c) * sizeof *seq_buf); /* a prompt chunk's sequence */
    own = malloc((size_t)hm_ctx_n_batch(c) * sizeof *own);         /* and its tokens */
    int32_t tok[256], seq_of[256], cand_id[256];
    float cand_v[256];
    if (!ids || !logits || !seq_buf || !own) {
        fprintf(stderr, "hmoe bench e2e: out of memory\n");
        goto done;
    }
    uint64_t s = 1;
    for (long i = 0; i < n_prompt; i++) ids[i] = (int32_t)(next_id(&s) % (uint64_t)mi.n_vocab);
    double best_pp = 0, best_tg = 0;
    for (long r = 0; r < reps; r++) {
        for (int q = 0; q < (int)seqs; q++) hm_ctx_seq_reset(c, q);
        const int B = hm_ctx_n_batch(c);
        hm_ctx_perf_reset(c);
        double t0 = now_s();
        for (long i0 = 0; i0 < n_prompt; i0 += B) {
            int nb = (int)(n_prompt - i0 < B ? n_prompt - i0 : B);
            if (hm_ctx_decode(c, ids + i0, NULL, nb, NULL, NULL)) goto fail;
        }
        double t1 = now_s();
        hm_ctx_perf pp_perf, tg_perf;
        hm_ctx_perf_get(c, &pp_perf);
        /* --seqs B: the other sequences get prompts of their own, untimed (the same prompt would
         * give every sequence the same tokens and experts); decode steps then take one token of
         * every sequence */
        tok[0] = n_prompt ? ids[n_prompt - 1] : 1, seq_of[0] = 0;
        for (int q = 1; q < (int)seqs; q++) {
            uint64_t sq = 1 + (uint64_t)q * 7919;
            int32_t last = 1;
            for (long i0 = 0; i0 < n_prompt; i0 += B) {
                const int nb = (int)(n_prompt - i0 < B ? n_prompt - i0 : B);
                for (int j = 0; j < nb; j++)
                    seq_buf[j] = q, own[j] = (int32_t)(next_id(&sq) % (uint64_t)mi.n_vocab);
                if (hm_ctx_decode(c, own, seq_buf, nb, NULL, NULL)) goto fail;
                last = own[nb - 1];
            }
            tok[q] = last, seq_of[q] = q;
        }
        hm_ctx_perf_reset(c);
        const double t1d = now_s();
        for (long g = 0; g < n_gen; g++) {
            if (on_gpu) { /* as hm_generate: the argmax selected on the GPU, one id per row */
                if (hm_ctx_decode_top(c, tok, seq_of, (int)seqs, NULL, 1, cand_id, cand_v))
                    goto fail;
                for (int q = 0; q < (int)seqs; q++)
                    if (hm_sampler_sample_candidates(smp, cand_id + q, cand_v + q, 1, &tok[q]))
                        goto fail;
                continue;
            }
            if (hm_ctx_decode(c, tok, seq_of, (int)seqs, NULL, logits)) goto fail;
            for (int q = 0; q < (int)seqs; q++)
                if (hm_sampler_sample(smp, logits + (size_t)q * (size_t)V, &tok[q])) goto fail;
        }
        double t2 = now_s();
        hm_ctx_perf_get(c, &tg_perf);
        double pp = n_prompt ? (double)n_prompt / (t1 - t0) : 0,
               tg = n_gen ? (double)(n_gen * seqs) / (t2 - t1d) : 0;
        printf("rep %ld: pp%ld %.1f tok/s (%.3f s), tg%ld %.2f tok/s (%.1f ms/step of %ld "
               "token%s)\n",
               r, n_prompt, pp, t1 - t0, n_gen, tg, n_gen ? (t2 - t1d) * 1e3 / (double)n_gen : 0,
               seqs, seqs > 1 ? "s" : "");
        printf("  %-18s %12s %12s %14s %14s\n", "part", "prompt ms", "ms/token", "of it alone",
               "of it waiting");
        const double pt = n_gen ? 1e3 / (double)n_gen : 0;
        for (int k = 0; k < HM_PROF_COUNT; k++)
            printf("  %-18s %12.1f %12.3f %14.3f %14.3f\n", hm_prof_name(k),
                   pp_perf.part_s[k] * 1e3, tg_perf.part_s[k] * pt, tg_perf.alone_s[k] * pt,
                   tg_perf.wait_s[k] * pt);
        if (n_gen) { /* where a decode step's time goes, as the calling thread sees it */
            const double per = 1e3 / (double)n_gen;
            printf("  decode pool: %.1f jobs/token; ms/token: %.3f in jobs (own share %.3f, "
                   "dispatch + waiting for the slowest %.3f), %.3f on the calling thread alone\n",
                   (double)tg_perf.pool_jobs / (double)n_gen, tg_perf.pool_run_s * per,
                   tg_perf.pool_own_s * per, (tg_perf.pool_run_s - tg_perf.pool_own_s) * per,
                   (t2 - t1d) * 1e3 / (double)n_gen - tg_perf.pool_run_s * per);
        }
        double mla_pp = 0, mla_tg = 0;
        for (int k = 0; k < HM_MLA_PHASES; k++)
            mla_pp += pp_perf.mla_phase_s[k], mla_tg += tg_perf.mla_phase_s[k];
        if (mla_pp > 0 || mla_tg > 0) { /* the latent attention's phases (in "attention") */
            printf("  latent attention (prompt ms / ms per token):");
            for (int k = 0; k < HM_MLA_PHASES; k++)
                printf(" %s %.1f / %.3f", hm_mla_phase_name(k), pp_perf.mla_phase_s[k] * 1e3,
                       tg_perf.mla_phase_s[k] * pt);
            printf("\n");
        }
        if (tg_perf.hyb_layers && n_gen) { /* the hybrid hand-off, per decode step */
            const double per = 1e3 / (double)n_gen;
            const double step = (t2 - t1d) * per, wait = tg_perf.hyb_gpu_wait_s * per,
                         span = tg_perf.hyb_cpu_span_s * per;
            printf("  hybrid hand-off ms/step: GPU waiting for the CPU experts %.3f (%.0f%% of "
                   "%.1f layers waited for), CPU experts from submit to done <= %.3f, step %.3f\n",
                   wait, 100.0 * (double)tg_perf.hyb_blocked / (double)tg_perf.hyb_layers,
                   (double)tg_perf.hyb_layers / (double)n_gen, span, step);
            /* the rest of the step: the GPU's own work and the hand-off's copies and host
             * functions (the GPU busy), and the time no CPU experts ran (the CPU waiting) */
            printf("  hybrid split ms/step: the GPU's part (step less its wait) %.3f, no CPU "
                   "experts running >= %.3f\n",
                   step - wait, step - span > 0 ? step - span : 0.0);
        }
        if (tg_perf.hyb_streamed) /* decode steps at or above the layerwise threshold */
            printf("  layerwise in decode: %llu layers' CPU experts streamed to the GPU over %ld "
                   "steps, %.2f GB (--gpu-prefill-threshold sets where streaming starts)\n",
                   (unsigned long long)tg_perf.hyb_streamed, n_gen,
                   (double)tg_perf.hyb_stream_bytes * 1e-9);
        if (pp_perf.hyb_streamed) /* layerwise prefill: the copies against the prompt's time */
            printf("  layerwise prefill: %llu layers' CPU experts streamed to the GPU, %.2f GB, "
                   "%.1f GB/s over the prompt's time\n",
                   (unsigned long long)pp_perf.hyb_streamed,
                   (double)pp_perf.hyb_stream_bytes * 1e-9,
                   (double)pp_perf.hyb_stream_bytes * 1e-9 / (t1 - t0));
        if (pp_perf.moe_batches) {
            printf("  prompt experts (ms):");
            for (int k = 0; k < pp_perf.n_moe_phases; k++)
                printf(" %s %.1f", pp_perf.moe_phase_name[k], pp_perf.moe_phase_s[k] * 1e3);
            printf("\n  prompt routing per layer and batch: %.1f tokens, %.1f of %d experts "
                   "used, busiest %.1f tokens (mean %.1f)\n",
                   pp_perf.moe_tokens, pp_perf.moe_active, mi.n_experts, pp_perf.moe_busiest,
                   pp_perf.moe_active > 0
                       ? pp_perf.moe_tokens * mi.n_experts_used / pp_perf.moe_active
                       : 0);
        }
        if (pp > best_pp) best_pp = pp;
        if (tg > best_tg) best_tg = tg;
    }
    /* the bandwidth again after the runs: on a shared machine it drifts, and the decode's share
     * is taken against the mean of the two measurements that bracket it */
    double bw2_med, bw2_best;
    if (on_gpu ? hm_measure_gpu_bandwidth(cp.gpu, &bw2_med)
               : hm_measure_read_bandwidth(9, &bw2_med, &bw2_best))
        goto fail;
    if (on_gpu) bw2_best = bw2_med;
    const double bw_mean = 0.5 * (bw_med + bw2_med);
    printf("roofline after the runs: same-run %s %.1f GB/s (best %.1f); mean of before and after "
           "%.1f GB/s -> decode <= %.1f tok/s\n",
           bw_what, bw2_med, bw2_best, bw_mean, bw_mean * 1e9 / (double)(dense_b + exp_b));
    /* a step of B tokens (--seqs) reads the dense weights once and, with routing spread evenly,
     * each layer's distinct experts among B x k picks: E (1 - (1 - k/E)^B) of them; the bounds
     * below are per step, in tokens per second */
    double uni = 1.0;
    if (seqs > 1 && mi.n_experts_used > 0) {
        const double E = mi.n_experts, k = mi.n_experts_used;
        uni = E * (1.0 - pow(1.0 - k / E, (double)seqs)) / k;
        printf("batch of %ld sequences: a step reads about %.3f GB (experts x %.1f of one "
               "token's, even routing)\n",
               seqs, ((double)dense_b + (double)exp_b * uni) * 1e-9, uni);
    }
    const double step_b = (double)dense_b + (double)exp_b * uni;
    const double gbs = best_tg / (double)seqs * step_b * 1e-9;
    if (hybrid) {
        double cbw2 = 0;
        if (hm_measure_read_bandwidth(9, &cbw2, &cbw_best)) goto fail;
        const double cm = 0.5 * (cbw + cbw2), ge = (double)exp_b * uni * share,
                     ce = (double)exp_b * uni * (1.0 - share);
        /* the dense part on the GPU, then the experts of both sides overlapped */
        const double t = ((double)dense_b / (bw_mean * 1e9) +
                          fmax(ge / (bw_mean * 1e9), cm > 0 ? ce / (cm * 1e9) : 0)) /
                         (double)seqs;
        printf("hybrid: %.1f%% of the routed experts' bytes on the GPU; per decode step %.3f GB "
               "from host memory (same-run read %.1f GB/s, mean of before and after) -> decode "
               "<= %.1f tok/s\n",
               100 * share, ce * 1e-9, cm, t > 0 ? 1 / t : 0);
        printf("result: pp%ld %.1f tok/s; tg%ld %.2f tok/s = %.1f%% of the hybrid bound (%.1f "
               "tok/s)\n",
               n_prompt, best_pp, n_gen, best_tg, t > 0 ? 100 * best_tg * t : 0, t > 0 ? 1 / t : 0);
    } else {
        printf("result: pp%ld %.1f tok/s; tg%ld %.2f tok/s = %.1f GB/s = %.1f%% of the same-run "
               "%s bandwidth (%.1f GB/s, mean of before and after)\n",
               n_prompt, best_pp, n_gen, best_tg, gbs, bw_mean > 0 ? 100 * gbs / bw_mean : 0,
               on_gpu ? "GPU" : "read", bw_mean);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "hmoe bench e2e: %s\n", hm_last_error());
done:
    free(ids);
    free(seq_buf), free(own);
    free(logits);
    hm_sampler_free(smp);
    hm_ctx_free(c);
    hm_model_free(m);
    return rc;
}
