/* bench_cuda.c - `hmoe bench cuda`: the GPU kernels of a decode step on a preset's shapes
 * (src/cuda/bench.c), each against the same run's device copy bandwidth. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cuda/cuda.h"
#include "model/arch.h"
#include "quant/types.h"

int bench_cuda(int argc, char **argv) {
    const char *preset = "qwen3-30b-a3b", *at = "q8_0", *et = NULL;
    long gpu = 0, tokens = 1, ctx = 512, iters = 200;
    size_t min_bytes = 0, bw_bytes = 0;
    bool f16 = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--preset") && v)
            preset = argv[++i];
        else if (!strcmp(a, "--type") && v)
            at = argv[++i];
        else if (!strcmp(a, "--experts-type") && v)
            et = argv[++i];
        else if (!strcmp(a, "--gpu") || !strcmp(a, "--tokens") || !strcmp(a, "--ctx") ||
                 !strcmp(a, "--iters")) {
            long *dst = a[2] == 'g' ? &gpu : a[2] == 't' ? &tokens : a[2] == 'c' ? &ctx : &iters;
            const long hi = a[2] == 'g' ? 63 : a[2] == 't' ? 8 : a[2] == 'c' ? 1 << 20 : 100000;
            if (!cli_parse_int(v, a[2] == 'g' ? 0 : 1, hi, dst))
                return cli_bad_value("bench cuda", a, v,
                                     a[2] == 'g'   ? "a GPU index"
                                     : a[2] == 't' ? "1 to 8 tokens per step"
                                     : a[2] == 'c' ? "a number of positions"
                                                   : "a number of launches");
            i++;
        } else if (!strcmp(a, "--min-bytes") || !strcmp(a, "--bw-bytes")) {
            if (!cli_parse_size(v, a[2] == 'm' ? &min_bytes : &bw_bytes))
                return cli_bad_value("bench cuda", a, v, "a size (256M, 1G)");
            i++;
        } else if (!strcmp(a, "--kv") && v && (!strcmp(v, "f16") || !strcmp(v, "f32"))) {
            f16 = !strcmp(argv[++i], "f16");
        } else
            return cli_usage_error("bench cuda: bad option '%s' (--preset P --type T "
                                   "--experts-type T --tokens N --ctx N --kv f32|f16 --iters N "
                                   "--gpu N --min-bytes SIZE --bw-bytes SIZE)",
                                   a);
    }
    const hm_preset *pr = hm_preset_find(preset);
    if (!pr || !pr->hp.n_experts || pr->hp.kv_lora_rank)
        return cli_usage_error("bench cuda: no GQA MoE preset '%s' (qwen3-30b-a3b, "
                               "qwen3-235b-a22b, qwen3-tiny, ...)",
                               preset);
    const int ta = hm_type_from_name(at),
              te = et ? hm_type_from_name(et) : pr->default_experts_type;
    if (ta < 0 || te < 0)
        return cli_usage_error("bench cuda: unknown weight type '%s'", ta < 0 ? at : et);
    const hm_hparams *hp = &pr->hp;
    hm_cuda_bench_params p = {.device = (int)gpu,
                              .hidden = hp->hidden,
                              .n_heads = hp->n_heads,
                              .n_kv_heads = hp->n_kv_heads,
                              .head_dim = hp->head_dim,
                              .n_experts = hp->n_experts,
                              .top_k = hp->n_experts_used,
                              .moe_inter = hp->moe_inter,
                              .vocab = hp->vocab_size,
                              .attn_type = (uint32_t)ta,
                              .experts_type = (uint32_t)te,
                              .tokens = (int)tokens,
                              .ctx = (int)ctx,
                              .kv_f16 = f16,
                              .iters = (int)iters,
                              .min_bytes = min_bytes,
                              .bw_bytes = bw_bytes};
    printf("bench cuda: preset %s (%s)\n", preset, pr->description);
    const hm_status st = hm_cuda_bench(&p, stdout);
    if (st != HM_OK) {
        fprintf(stderr, "hmoe bench cuda: %s\n", hm_last_error());
        return 1;
    }
    return 0;
}
