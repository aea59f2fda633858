/* cli.c - the helpers every hmoe subcommand shares (cli.h): option parsing, files, memory
 * checks, benchmark columns, output errors. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/cpu.h"
#include "core/mmap.h"
#include "cpu/nn.h"
#include "hmoe.h"
#include "hmoe_moe.h"

bool cli_parse_size(const char *s, size_t *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno || s[0] == '-') return false;
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    case 't':
    case 'T':
        shift = 40;
        end++;
        break;
    }
    if (shift && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0)) end += strlen(end);
    if (*end) return false;
    if (shift && v > (UINT64_MAX >> shift)) return false;
    *out = (size_t)(v << shift);
    return true;
}

bool cli_parse_int(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_parse_double(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

int cli_parse_list(const char *s, long *out, int max) {
    int n = 0;
    while (s && *s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 1 || v > 65536 || n == max) return -1;
        out[n++] = v;
        if (*end && *end != ',') return -1;
        s = *end ? end + 1 : end;
    }
    return n;
}

int cli_bad_value(const char *cmd, const char *opt, const char *v, const char *expected) {
    if (!v) return cli_usage_error("%s: %s needs a value: %s", cmd, opt, expected);
    return cli_usage_error("%s: bad value '%s' for %s: expected %s", cmd, v, opt, expected);
}

int cli_check_memory(const char *cmd, const char *what, uint64_t bytes, uint64_t *usable) {
    hm_mem_info mi;
    if (usable) *usable = 0;
    if (hm_mem_info_get(&mi) != HM_OK || !mi.available) return 0; /* nothing to go by */
    uint64_t avail = mi.available;
    if (mi.cgroup_limit && mi.cgroup_limit < avail) avail = mi.cgroup_limit;
    if (usable) *usable = (uint64_t)(0.9 * (double)avail);
    if ((double)bytes <= 0.9 * (double)avail) return 0;
    fprintf(stderr, "hmoe: %s: %s need %.2f GB, more than 90%% of the %.2f GB available\n", cmd,
            what, (double)bytes * 1e-9, (double)avail * 1e-9);
    return 1;
}

char *cli_read_file(const char *path, size_t *len) {
    *len = 0;
    if (strcmp(path, "-")) {
        char *buf;
        return hm_file_read_all(path, CLI_MAX_INPUT, true, &buf, len) ? NULL : buf;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *q = cap < CLI_MAX_INPUT ? realloc(buf, cap *= 2) : NULL;
            if (!q) {
                hm_errorf(HM_ERR_NO_MEMORY, "standard input: more than %zu bytes, or out of memory",
                          cap);
                free(buf);
                return NULL;
            }
            buf = q;
        }
        size_t k = fread(buf + n, 1, cap - 1 - n, stdin);
        n += k;
        if (k == 0) {
            if (ferror(stdin)) {
                hm_errorf_errno(HM_ERR_IO, errno, "standard input: read error");
                free(buf);
                return NULL;
            }
            break;
        }
    }
    if (!buf) {
        hm_errorf(HM_ERR_NO_MEMORY, "standard input: out of memory");
        return NULL;
    }
    buf[n] = '\0', *len = n;
    return buf;
}

void cli_print_huge_pages(const char *indent) {
    const uint64_t anon = hm_mem_anon_bytes(), huge = hm_mem_anon_huge_bytes();
    if (!anon) return; /* not Linux, or no smaps_rollup */
    hm_mem_info mi;
    const char *mode = hm_mem_info_get(&mi) == HM_OK && mi.thp_mode[0] ? mi.thp_mode : "unknown";
    printf("%smemory: %.2f GB anonymous resident, %.2f GB of it on transparent huge pages (%.0f%%; "
           "THP mode %s; weights are madvised)\n",
           indent, (double)anon * 1e-9, (double)huge * 1e-9, 100.0 * (double)huge / (double)anon,
           mode);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void cli_print_read_columns(double *ratio, double *rsec, int passes, size_t rbytes) {
    if (passes <= 0 || !rbytes) {
        printf(" %10s %10s\n", "-", "-");
        return;
    }
    qsort(ratio, (size_t)passes, sizeof(double), cmp_double);
    qsort(rsec, (size_t)passes, sizeof(double), cmp_double);
    printf(" %10.1f %9.1f%%\n", (double)rbytes / rsec[passes / 2] * 1e-9,
           100.0 * ratio[passes / 2]);
}

bool cli_parse_load(const char *s, int *out) {
    if (!strcmp(s, "auto"))
        *out = 0;
    else if (!strcmp(s, "mmap"))
        *out = 1;
    else if (!strcmp(s, "copy"))
        *out = 2;
    else
        return false;
    return true;
}

int cli_ctx_option(int argc, char **argv, int *i, hm_ctx_params *cp, hm_model_params *mp) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    long n;
    int lm;
    if (!strcmp(a, "--no-amx")) {
        cp->no_amx = true;
        return 1;
    }
    if (!strcmp(a, "--dynamic-experts")) {
        cp->dynamic_experts = true;
        return 1;
    }
    if (!strcmp(a, "--bf16-tiles")) {
        cp->bf16_tiles = true;
        return 1;
    }
    if (!strcmp(a, "--no-idle-prefetch")) {
        cp->no_idle_prefetch = true;
        return 1;
    }
    if (!v) return 0;
    if (!strcmp(a, "--threads")) {
        if (!cli_parse_int(v, 1, 4096, &n)) return cli_usage_error("bad --threads '%s'", v);
        cp->n_threads = (int)n;
    } else if (!strcmp(a, "--batch")) {
        if (!cli_parse_int(v, 1, 65536, &n)) return cli_usage_error("bad --batch '%s'", v);
        cp->n_batch = (int)n;
    } else if (!strcmp(a, "--ctx")) {
        if (!cli_parse_int(v, 1, 1 << 24, &n)) return cli_usage_error("bad --ctx '%s'", v);
        cp->n_ctx = (int)n;
    } else if (!strcmp(a, "--device")) {
        if (!strcmp(v, "auto"))
            cp->device = HM_DEVICE_AUTO;
        else if (!strcmp(v, "cpu"))
            cp->device = HM_DEVICE_CPU;
        else if (!strcmp(v, "cuda"))
            cp->device = HM_DEVICE_CUDA;
        else
            return cli_usage_error("bad --device '%s' (auto|cpu|cuda)", v);
    } else if (!strcmp(a, "--gpu-experts")) {
        if (!strcmp(v, "fit"))
            cp->gpu_experts = HM_GPU_EXPERTS_FIT;
        else if (cli_parse_int(v, 0, 1 << 20, &n))
            cp->gpu_experts = (int)n;
        else
            return cli_usage_error("bad --gpu-experts '%s' (N per layer, or fit)", v);
    } else if (!strcmp(a, "--gpu-mem")) {
        size_t b;
        if (!cli_parse_size(v, &b) || !b)
            return cli_usage_error("bad --gpu-mem '%s' (bytes, or with K/M/G)", v);
        cp->gpu_mem = b;
    } else if (!strcmp(a, "--placement")) {
        static const char *const names[] = {"uniform", "front", "random", "frequency"};
        int k = -1;
        for (int j = 0; j < 4; j++)
            if (!strcmp(v, names[j])) k = j;
        if (k < 0)
            return cli_usage_error("bad --placement '%s' (uniform|front|random|frequency)", v);
        cp->placement = (hm_place_strategy)k;
    } else if (!strcmp(a, "--place-seed")) {
        if (!cli_parse_int(v, 0, 0x7fffffffL, &n))
            return cli_usage_error("bad --place-seed '%s'", v);
        cp->place_seed = (uint64_t)n;
    } else if (!strcmp(a, "--expert-counts")) {
        cp->expert_counts = v;
    } else if (!strcmp(a, "--place")) {
        /* the rules live as long as argv; the array for the whole run */
        static const char *rules[64];
        if (cp->n_place_rules >= 64) return cli_usage_error("more than 64 --place rules");
        if (!strchr(v, '=')) return cli_usage_error("bad --place '%s' (REGEX=cuda|cpu)", v);
        rules[cp->n_place_rules++] = v;
        cp->place_rules = rules;
    } else if (!strcmp(a, "--gpu")) {
        if (!cli_parse_int(v, 0, 255, &n)) return cli_usage_error("bad --gpu '%s'", v);
        cp->gpu = (int)n;
    } else if (!strcmp(a, "--defer")) {
        if (!cli_parse_int(v, 0, 64, &n)) return cli_usage_error("bad --defer '%s' (0..64)", v);
        cp->defer = (int)n;
    } else if (!strcmp(a, "--gpu-prefill-threshold")) {
        if (!strcmp(v, "auto"))
            cp->gpu_prefill_threshold = HM_PREFILL_STREAM_AUTO;
        else if (!strcmp(v, "off"))
            cp->gpu_prefill_threshold = HM_PREFILL_STREAM_OFF;
        else if (cli_parse_int(v, 1, 1 << 30, &n))
            cp->gpu_prefill_threshold = (int)n;
        else
            return cli_usage_error("bad --gpu-prefill-threshold '%s' (tokens, auto or off)", v);
    } else if (!strcmp(a, "--gpu-dtype")) {
        if (strcmp(v, "native") && strcmp(v, "bf16"))
            return cli_usage_error("bad --gpu-dtype '%s' (native|bf16)", v);
        cp->gpu_bf16 = !strcmp(v, "bf16");
    } else if (!strcmp(a, "--kv")) {
        if (strcmp(v, "f32") && strcmp(v, "f16"))
            return cli_usage_error("bad --kv '%s' (f32|f16)", v);
        cp->kv_f16 = !strcmp(v, "f16");
    } else if (!strcmp(a, "--repack") || !strcmp(a, "--numa-copy")) {
        if (strcmp(v, "auto") && strcmp(v, "on") && strcmp(v, "off"))
            return cli_usage_error("bad %s '%s' (auto|on|off)", a, v);
        hm_repack_mode *mode = !strcmp(a, "--repack") ? &cp->repack : &cp->numa_copy;
        *mode = !strcmp(v, "on")    ? HM_REPACK_ON
                : !strcmp(v, "off") ? HM_REPACK_OFF
                                    : HM_REPACK_AUTO;
    } else if (!strcmp(a, "--numa")) {
        if (!strcmp(v, "auto"))
            cp->numa = 0;
        else if (!strcmp(v, "off"))
            cp->numa = 1;
        else if (cli_parse_int(v, 2, 64, &n))
            cp->numa = (int)n;
        else
            return cli_usage_error("bad --numa '%s' (auto|off|N slices, 2..64)", v);
    } else if (!strcmp(a, "--load")) {
        if (!cli_parse_load(v, &lm)) return cli_usage_error("bad --load '%s' (auto|mmap|copy)", v);
        mp->load = (hm_load_mode)lm;
    } else {
        return 0;
    }
    (*i)++;
    return 1;
}

int cli_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("hmoe: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

void cli_fmt_bytes(uint64_t bytes, char *buf, size_t cap) {
    if (bytes >= 1000000000u)
        snprintf(buf, cap, "%.2f GB", (double)bytes * 1e-9);
    else
        snprintf(buf, cap, "%.2f MB", (double)bytes * 1e-6);
}

int cli_stdout_error(void) {
    const int e = errno;
    fprintf(stderr, "hmoe: writing the standard output: %s\n", e ? strerror(e) : "write error");
    return 1;
}

bool cli_parse_ids(const char *s, int32_t **ids, int *n) {
    *ids = NULL;
    *n = 0;
    size_t cap = 0;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX ||
            (*end && *end != ' ' && *end != ',' && *end != '\t' && *end != '\n')) {
            free(*ids);
            *ids = NULL;
            *n = 0;
            return false;
        }
        if ((size_t)*n == cap) {
            cap = cap ? 2 * cap : 64;
            int32_t *q = realloc(*ids, cap * sizeof *q);
            if (!q) {
                free(*ids);
                *ids = NULL;
                return false;
            }
            *ids = q;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
    return *n > 0;
}
