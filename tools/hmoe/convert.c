/* convert.c - `hmoe convert`: a Hugging Face model directory written as a llama.cpp GGUF. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "model/model.h"
#include "core/mmap.h"
#include "core/timer.h"
#include "model/convert.h"

static const char k_usage[] =
    "usage: hmoe convert HF_DIR -o OUT.gguf [--type T] [--experts-type T] [--threads N]\n"
    "                    [--name S] [--dry-run]\n"
    "  HF_DIR            config.json + model.safetensors, or model.safetensors.index.json and\n"
    "                    its shards (qwen3_moe, qwen2_moe, mixtral, glm4_moe, deepseek_v2/v3,\n"
    "                    kimi_k2, gpt_oss; F32, F16, BF16 or F8_E4M3 with block scales;\n"
    "                    gpt-oss's MXFP4 experts)\n"
    "  -o, --output F    the GGUF to write (written as F.part, renamed when complete; a\n"
    "                    symlink's target is written so, a device or FIFO in place)\n"
    "  --type T          embeddings, output, attention, dense and shared-expert matrices:\n"
    "                    f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k iq4_nl iq4_xs\n"
    "                    (default: keep each tensor's source dtype)\n"
    "  --experts-type T  routed experts (default: --type; MXFP4 experts stay MXFP4,\n"
    "                    byte for byte, unless this names a type)\n"
    "                    norms, routers and biases stay f32; rows that are not whole blocks of\n"
    "                    a quantized type use llama.cpp's fallback type\n"
    "  --threads N       quantization threads (default: one per physical core)\n"
    "  --name S          general.name (default: the directory's name)\n"
    "  --dry-run         check the model and print what would be written\n"
    "The tokenizer is not converted yet: tokenizer.json / tokenizer_config.json are ignored and\n"
    "the GGUF says tokenizer.ggml.model = no_vocab (run it with --ids, or --tokenizer HF_DIR).\n";

static int usage_err(const char *msg) {
    return cli_usage_error("convert: %s\n%s", msg, k_usage);
}

typedef struct progress {
    bool tty;
    uint64_t t0, last;
} progress;

static void show_progress(uint64_t done, uint64_t total, void *arg) {
    progress *p = arg;
    uint64_t now = hm_time_ns();
    if (!p->tty || (done < total && now - p->last < 200000000ull)) return;
    p->last = now;
    double s = (double)(now - p->t0) * 1e-9, rate = s > 0 ? (double)done / s : 0;
    fprintf(stderr, "\r%6.2f / %.2f GB  %7.1f MB/s ", (double)done * 1e-9, (double)total * 1e-9,
            rate * 1e-6);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

/* "Q8_0" or "2x F32, 3x Q8_0" for the types a category ended up with. */
static void types_str(const hm_convert_stats *s, int cat, char *out, size_t cap) {
    size_t len = 0, kinds = 0;
    out[0] = '\0';
    for (uint32_t t = 0; t < HM_TYPE_COUNT; t++) kinds += s->cat_types[cat][t] > 0;
    for (uint32_t t = 0; t < HM_TYPE_COUNT && len < cap; t++) {
        uint32_t n = s->cat_types[cat][t];
        if (!n) continue;
        if (kinds > 1)
            len += (size_t)snprintf(out + len, cap - len, "%s%ux %s", len ? ", " : "", n,
                                    hm_type_name(t));
        else
            len += (size_t)snprintf(out + len, cap - len, "%s", hm_type_name(t));
    }
}

static void print_summary(const char *in, const char *out, const hm_convert_stats *s, bool dry) {
    const hm_hparams *hp = &s->hp;
    char where[4200];
    if (!dry) hm_outfile_describe(out, where, sizeof where);
    printf("%s %s -> %s: %s, %u layers, %u experts (top %u), vocab %u\n",
           dry ? "would convert" : "converted", in, dry ? (out ? out : "-") : where,
           hm_arch_name(hp->arch), hp->n_layers, hp->n_experts, hp->n_experts_used, hp->vocab_size);
    printf("  %-16s %8s %14s  %s\n", "category", "tensors", "bytes", "types");
    for (int c = 0; c < HM_CAT_COUNT; c++) {
        if (!s->cat_tensors[c]) continue;
        char types[160];
        types_str(s, c, types, sizeof types);
        printf("  %-16s %8llu %14llu  %s\n", hm_tensor_cat_name((hm_tensor_cat)c),
               (unsigned long long)s->cat_tensors[c], (unsigned long long)s->cat_bytes[c], types);
    }
    printf("  %-16s %8zu %14llu  (%.2f GB from %.2f GB of %zu safetensors tensors)\n", "total",
           s->n_tensors, (unsigned long long)s->total_bytes, (double)s->total_bytes * 1e-9,
           (double)s->source_bytes * 1e-9, s->n_source_tensors);
    if (!dry)
        printf("  %.1f s, %.0f MB/s written\n", s->seconds,
               s->seconds > 0 ? (double)s->total_bytes / s->seconds * 1e-6 : 0.0);
}

static bool parse_type(const char *s, int *out) {
    int t = hm_type_from_name(s);
    if (t < 0 || !hm_convert_type_supported(t)) return false;
    *out = t;
    return true;
}

int cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    hm_convert_params p = hm_convert_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_v = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(k_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--dry-run")) {
            p.dry_run = true;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--type") ||
                   !strcmp(a, "--experts-type") || !strcmp(a, "--threads") ||
                   !strcmp(a, "--name")) {
            if (!has_v) return usage_err("missing value after the last option");
            const char *v = argv[++i];
            long n;
            if (a[1] == 'o' || !strcmp(a, "--output"))
                out = v;
            else if (!strcmp(a, "--name"))
                p.model_name = v;
            else if (!strcmp(a, "--threads")) {
                if (!cli_parse_int(v, 1, 4096, &n)) return usage_err("--threads needs 1..4096");
                p.n_threads = (int)n;
            } else if (!parse_type(v, !strcmp(a, "--type") ? &p.type : &p.experts_type)) {
                return usage_err("unknown or unsupported type (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 "
                                 "q5_1 q4_k q5_k q6_k iq4_nl iq4_xs)");
            }
        } else if (a[0] == '-' && a[1]) {
            return usage_err("unknown option");
        } else if (in) {
            return usage_err("more than one HF_DIR given");
        } else {
            in = a;
        }
    }
    if (!in) return usage_err("HF_DIR is required");
    if (!out && !p.dry_run) return usage_err("-o OUT.gguf is required");
    progress pg = {isatty(2) != 0, hm_time_ns(), 0};
    p.progress = show_progress;
    p.progress_arg = &pg;
    hm_convert_stats *stats = malloc(sizeof *stats);
    if (!stats) {
        fprintf(stderr, "hmoe convert: out of memory\n");
        return 1;
    }
    hm_status st = hm_convert_hf(in, out, &p, stats);
    if (st != HM_OK) {
        if (pg.tty && pg.last) fputc('\n', stderr);
        fprintf(stderr, "hmoe convert: %s\n", hm_last_error());
        free(stats);
        return 1;
    }
    print_summary(in, out, stats, p.dry_run);
    free(stats);
    return 0;
}
