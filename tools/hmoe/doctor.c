/* doctor.c - `hmoe doctor`: what this machine offers hmoe, measured, with a verdict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/cpu.h"
#include "core/log.h"
#include "cpu/membw.h"
#include "cpu/ops.h"
#include "cuda/cuda.h"
#include "jsonw.h"

#define MAX_PROBLEMS 16
#define MAX_GPUS     16

typedef struct gpu_report {
    hm_gpu_info info;
    hm_status info_st, selftest_st, bw_st;
    char error[256];
    double h2d_gbs;
} gpu_report;

typedef struct report {
    const hm_cpu_features *f;
    const hm_topology *topo;
    hm_mem_info mem;
    hm_status isa_st;
    hm_isa isa;
    char isa_error[256];
    hm_status amx_st;
    char amx_error[256];
    bool bw_run;
    hm_status bw_st;
    hm_membw_result bw;
    char bw_error[256];
    bool cuda_compiled;
    int n_gpus;
    hm_status gpu_count_st;
    int driver, runtime;
    gpu_report gpus[MAX_GPUS];
    int n_problems;
    char problems[MAX_PROBLEMS][320];
} report;

static void problem(report *r, const char *fmt, const char *arg) {
    if (r->n_problems < MAX_PROBLEMS) snprintf(r->problems[r->n_problems++], 320, fmt, arg);
}

static void collect(report *r, bool run_bw, size_t bw_bytes, bool require_gpu) {
    r->f = hm_cpu_features_get();
    r->topo = hm_topology_get();
    hm_mem_info_get(&r->mem);
    r->isa_st = hm_isa_select(&r->isa);
    if (r->isa_st != HM_OK) {
        snprintf(r->isa_error, sizeof r->isa_error, "%s", hm_last_error());
        problem(r, "kernel variant: %s", r->isa_error);
    } else if (r->isa == HM_ISA_REF) {
        problem(r, "%s",
                "this CPU lacks AVX2+FMA+F16C: only the plain-C kernels run, far too slow "
                "for inference (hmoe needs x86-64 with AVX2)");
    }
    r->amx_st = HM_ERR_UNSUPPORTED;
    if (hm_isa_supported(r->f, HM_ISA_AMX)) {
        r->amx_st = hm_amx_selftest();
        if (r->amx_st != HM_OK) {
            snprintf(r->amx_error, sizeof r->amx_error, "%s", hm_last_error());
            problem(r, "AMX: %s", r->amx_error);
        }
    }
    if (run_bw && r->isa_st == HM_OK) {
        r->bw_run = true;
        hm_membw_params p = hm_membw_default_params();
        p.bytes = bw_bytes;
        r->bw_st = hm_membw_read(&p, &r->bw);
        if (r->bw_st != HM_OK) {
            snprintf(r->bw_error, sizeof r->bw_error, "%s", hm_last_error());
            problem(r, "memory bandwidth test: %s", r->bw_error);
        }
    }
    r->cuda_compiled = hm_cuda_compiled();
    if (r->cuda_compiled) {
        r->gpu_count_st = hm_cuda_device_count(&r->n_gpus);
        if (r->gpu_count_st != HM_OK) problem(r, "GPU: %s", hm_last_error());
        hm_cuda_versions(&r->driver, &r->runtime);
        if (r->n_gpus > MAX_GPUS) r->n_gpus = MAX_GPUS;
        for (int i = 0; i < r->n_gpus; i++) {
            gpu_report *g = &r->gpus[i];
            g->info_st = hm_cuda_device_info(i, &g->info);
            g->selftest_st = g->info_st == HM_OK ? hm_cuda_selftest(i) : g->info_st;
            if (g->selftest_st == HM_OK)
                g->bw_st = hm_cuda_h2d_bandwidth(i, (size_t)256 << 20, 10, &g->h2d_gbs);
            if (g->selftest_st != HM_OK || g->bw_st != HM_OK) {
                snprintf(g->error, sizeof g->error, "GPU %d: %s", i, hm_last_error());
                problem(r, "%s", g->error);
            }
        }
    }
    if (require_gpu && r->n_gpus == 0)
        problem(r, "%s",
                r->cuda_compiled ? "--require-gpu: no usable GPU (driver or device missing)"
                                 : "--require-gpu: this binary was built without CUDA");
}

static double gib(uint64_t b) {
    return (double)b / (double)(1ull << 30);
}

static void feature_list(const hm_cpu_features *f, char *buf, size_t cap) {
    struct {
        bool on;
        const char *name;
    } v[] = {{f->avx2, "avx2"},
             {f->fma, "fma"},
             {f->f16c, "f16c"},
             {f->avx512f, "avx512f"},
             {f->avx512bw, "avx512bw"},
             {f->avx512vl, "avx512vl"},
             {f->avx512dq, "avx512dq"},
             {f->avx512vnni, "avx512_vnni"},
             {f->avx512bf16, "avx512_bf16"},
             {f->avx512fp16, "avx512_fp16"},
             {f->avx512vbmi, "avx512vbmi"},
             {f->gfni, "gfni"},
             {f->avx_vnni, "avx_vnni"},
             {f->amx_tile, "amx_tile"},
             {f->amx_int8, "amx_int8"},
             {f->amx_bf16, "amx_bf16"}};
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i].on && n + strlen(v[i].name) + 2 < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? " " : "", v[i].name);
}

static void print_text(const report *r) {
    const hm_cpu_features *f = r->f;
    char feats[512];
    feature_list(f, feats, sizeof feats);
    printf("hmoe doctor (hmoe %s)\n\n", hm_version());
    printf("CPU\n");
    printf("  model          %s (%s, family %d model %d stepping %d)\n",
           f->brand[0] ? f->brand : "unknown", f->vendor, f->family, f->model, f->stepping);
    printf("  features       %s\n", feats[0] ? feats : "(none of interest)");
    printf("  OS state       avx %s, avx512 %s, amx %s (tile permission %s)\n",
           f->os_avx ? "yes" : "no", f->os_avx512 ? "yes" : "no", f->os_amx ? "yes" : "no",
           f->amx_permitted ? "granted" : (f->amx_tile ? "REFUSED" : "n/a"));
    if (r->isa_st == HM_OK)
        printf("  kernels        %s (best supported: %s%s)\n", hm_isa_name(r->isa),
               hm_isa_name(hm_isa_best(f)), getenv("HMOE_ISA") ? ", forced by HMOE_ISA" : "");
    else
        printf("  kernels        ERROR: %s\n", r->isa_error);
    if (hm_isa_supported(f, HM_ISA_AMX))
        printf("  AMX self-test  %s\n",
               r->amx_st == HM_OK ? "ok (INT8 tile product exact)" : r->amx_error);
    const hm_topology *t = r->topo;
    printf("  topology       %d logical CPUs usable, %d physical cores, %d NUMA node%s%s\n",
           t->n_cpus, t->n_cores, t->n_nodes, t->n_nodes == 1 ? "" : "s",
           t->from_sysfs ? "" : " (sysfs unreadable: assumed)");
    for (int i = 0; i < t->n_nodes; i++) {
        const hm_numa_node *nd = &t->nodes[i];
        printf("  node %-2d        %d cores / %d CPUs, memory %.1f GiB (%.1f free)\n", nd->id,
               nd->n_cores, nd->n_cpus, gib(nd->mem_total), gib(nd->mem_free));
    }
    printf("\nMemory\n");
    printf("  RAM            %.1f GiB total, %.1f GiB available", gib(r->mem.total),
           gib(r->mem.available));
    if (r->mem.cgroup_limit) printf(", cgroup limit %.1f GiB", gib(r->mem.cgroup_limit));
    printf("\n  huge pages     THP %s; %llu x %llu KiB static pages (%llu free)\n",
           r->mem.thp_mode[0] ? r->mem.thp_mode : "unknown",
           (unsigned long long)r->mem.hugepages_total,
           (unsigned long long)(r->mem.hugepage_size >> 10),
           (unsigned long long)r->mem.hugepages_free);
    printf("  caches         L2 %llu KiB, L3 %llu KiB (per instance, cpu0)\n",
           (unsigned long long)(r->mem.l2_bytes >> 10),
           (unsigned long long)(r->mem.l3_bytes >> 10));
    if (r->bw_run && r->bw_st == HM_OK)
        printf("  read bandwidth %.1f GB/s best, %.1f median (%s kernel, %d threads, %.2f GiB, "
               "%d passes)\n",
               r->bw.best_gbs, r->bw.median_gbs, r->bw.kernel, r->bw.threads, gib(r->bw.bytes),
               r->bw.passes);
    else if (r->bw_run)
        printf("  read bandwidth ERROR: %s\n", r->bw_error);
    else
        printf("  read bandwidth not measured (--no-bandwidth)\n");

    printf("\nGPU\n");
    if (!r->cuda_compiled) {
        printf("  CUDA           not compiled in (CPU-only build)\n");
    } else {
        printf("  CUDA           driver %d.%d, runtime %d.%d, %d device%s\n", r->driver / 1000,
               (r->driver % 1000) / 10, r->runtime / 1000, (r->runtime % 1000) / 10, r->n_gpus,
               r->n_gpus == 1 ? "" : "s");
        for (int i = 0; i < r->n_gpus; i++) {
            const gpu_report *g = &r->gpus[i];
            if (g->info_st != HM_OK) {
                printf("  GPU %d          ERROR: %s\n", i, g->error);
                continue;
            }
            printf("  GPU %d          %s, sm_%d%d, %d SMs, %.1f GiB (%.1f free), PCI %02x:%02x\n",
                   i, g->info.name, g->info.cc_major, g->info.cc_minor, g->info.sm_count,
                   gib(g->info.mem_total), gib(g->info.mem_free), g->info.pci_bus,
                   g->info.pci_device);
            if (g->selftest_st == HM_OK && g->bw_st == HM_OK)
                printf("                 self-test ok; pinned host->device %.1f GB/s\n",
                       g->h2d_gbs);
            else
                printf("                 ERROR: %s\n", g->error);
        }
    }
    printf("\n");
    if (r->n_problems == 0) {
        printf("verdict: ok\n");
    } else {
        printf("verdict: %d problem%s\n", r->n_problems, r->n_problems == 1 ? "" : "s");
        for (int i = 0; i < r->n_problems; i++) printf("  - %s\n", r->problems[i]);
    }
}

static void print_json(const report *r) {
    const hm_cpu_features *f = r->f;
    jw w;
    jw_init(&w, stdout);
    jw_obj_begin(&w, NULL);
    jw_str(&w, "version", hm_version());
    jw_obj_begin(&w, "cpu");
    jw_str(&w, "model", f->brand);
    jw_str(&w, "vendor", f->vendor);
    jw_int(&w, "family", f->family);
    jw_int(&w, "model_id", f->model);
    jw_int(&w, "stepping", f->stepping);
    jw_obj_begin(&w, "features");
    jw_bool(&w, "avx2", f->avx2);
    jw_bool(&w, "fma", f->fma);
    jw_bool(&w, "f16c", f->f16c);
    jw_bool(&w, "avx512f", f->avx512f);
    jw_bool(&w, "avx512bw", f->avx512bw);
    jw_bool(&w, "avx512vl", f->avx512vl);
    jw_bool(&w, "avx512dq", f->avx512dq);
    jw_bool(&w, "avx512_vnni", f->avx512vnni);
    jw_bool(&w, "avx512_bf16", f->avx512bf16);
    jw_bool(&w, "avx512_fp16", f->avx512fp16);
    jw_bool(&w, "avx512vbmi", f->avx512vbmi);
    jw_bool(&w, "gfni", f->gfni);
    jw_bool(&w, "avx_vnni", f->avx_vnni);
    jw_bool(&w, "amx_tile", f->amx_tile);
    jw_bool(&w, "amx_int8", f->amx_int8);
    jw_bool(&w, "amx_bf16", f->amx_bf16);
    jw_bool(&w, "amx_permitted", f->amx_permitted);
    jw_obj_end(&w);
    if (r->isa_st == HM_OK)
        jw_str(&w, "kernels", hm_isa_name(r->isa));
    else
        jw_null(&w, "kernels");
    jw_str(&w, "best_kernels", hm_isa_name(hm_isa_best(f)));
    if (hm_isa_supported(f, HM_ISA_AMX)) jw_bool(&w, "amx_selftest_ok", r->amx_st == HM_OK);
    jw_int(&w, "logical_cpus", r->topo->n_cpus);
    jw_int(&w, "physical_cores", r->topo->n_cores);
    jw_arr_begin(&w, "numa_nodes");
    for (int i = 0; i < r->topo->n_nodes; i++) {
        const hm_numa_node *nd = &r->topo->nodes[i];
        jw_obj_begin(&w, NULL);
        jw_int(&w, "id", nd->id);
        jw_int(&w, "cores", nd->n_cores);
        jw_int(&w, "cpus", nd->n_cpus);
        jw_int(&w, "mem_total_bytes", (long long)nd->mem_total);
        jw_arr_begin(&w, "core_cpus");
        for (int k = 0; k < nd->n_cores; k++) jw_int(&w, NULL, nd->core_cpus[k]);
        jw_arr_end(&w);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    jw_obj_begin(&w, "memory");
    jw_int(&w, "total_bytes", (long long)r->mem.total);
    jw_int(&w, "available_bytes", (long long)r->mem.available);
    jw_int(&w, "cgroup_limit_bytes", (long long)r->mem.cgroup_limit);
    jw_str(&w, "thp", r->mem.thp_mode);
    jw_int(&w, "hugepage_bytes", (long long)r->mem.hugepage_size);
    jw_int(&w, "hugepages_total", (long long)r->mem.hugepages_total);
    jw_int(&w, "hugepages_free", (long long)r->mem.hugepages_free);
    jw_int(&w, "l2_bytes", (long long)r->mem.l2_bytes);
    jw_int(&w, "l3_bytes", (long long)r->mem.l3_bytes);
    if (r->bw_run && r->bw_st == HM_OK) {
        jw_obj_begin(&w, "read_bandwidth");
        jw_num(&w, "best_gbs", r->bw.best_gbs);
        jw_num(&w, "median_gbs", r->bw.median_gbs);
        jw_num(&w, "worst_gbs", r->bw.worst_gbs);
        jw_str(&w, "kernel", r->bw.kernel);
        jw_int(&w, "threads", r->bw.threads);
        jw_int(&w, "bytes", (long long)r->bw.bytes);
        jw_int(&w, "passes", r->bw.passes);
        jw_obj_end(&w);
    } else {
        jw_null(&w, "read_bandwidth");
    }
    jw_obj_end(&w);
    jw_obj_begin(&w, "cuda");
    jw_bool(&w, "compiled", r->cuda_compiled);
    jw_int(&w, "driver_version", r->driver);
    jw_int(&w, "runtime_version", r->runtime);
    jw_arr_begin(&w, "gpus");
    for (int i = 0; i < r->n_gpus; i++) {
        const gpu_report *g = &r->gpus[i];
        jw_obj_begin(&w, NULL);
        jw_int(&w, "index", i);
        jw_str(&w, "name", g->info.name);
        jw_int(&w, "mem_total_bytes", (long long)g->info.mem_total);
        jw_int(&w, "mem_free_bytes", (long long)g->info.mem_free);
        char cc[32];
        snprintf(cc, sizeof cc, "%d.%d", g->info.cc_major, g->info.cc_minor);
        jw_str(&w, "compute_capability", cc);
        jw_int(&w, "sm_count", g->info.sm_count);
        jw_bool(&w, "selftest_ok", g->selftest_st == HM_OK);
        if (g->bw_st == HM_OK && g->selftest_st == HM_OK)
            jw_num(&w, "h2d_pinned_gbs", g->h2d_gbs);
        else
            jw_null(&w, "h2d_pinned_gbs");
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    jw_bool(&w, "ok", r->n_problems == 0);
    jw_arr_begin(&w, "problems");
    for (int i = 0; i < r->n_problems; i++) jw_str(&w, NULL, r->problems[i]);
    jw_arr_end(&w);
    jw_obj_end(&w);
}

int cmd_doctor(int argc, char **argv) {
    bool json = false, run_bw = true, require_gpu = false;
    size_t bw_bytes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--no-bandwidth"))
            run_bw = false;
        else if (!strcmp(argv[i], "--require-gpu"))
            require_gpu = true;
        else if (!strcmp(argv[i], "--bw-bytes")) {
            if (i + 1 >= argc || !cli_parse_size(argv[++i], &bw_bytes) || bw_bytes < 4096)
                return cli_usage_error("doctor: --bw-bytes needs a size >= 4096 (e.g. 2G)");
        } else {
            return cli_usage_error("doctor: unknown option '%s' (see hmoe help)", argv[i]);
        }
    }
    static report r;
    memset(&r, 0, sizeof r);
    collect(&r, run_bw, bw_bytes, require_gpu);
    if (json)
        print_json(&r);
    else
        print_text(&r);
    fflush(stdout);
    if (r.n_problems) {
        fprintf(stderr, "hmoe doctor: %d problem%s found (first: %s)\n", r.n_problems,
                r.n_problems == 1 ? "" : "s", r.problems[0]);
        return 1;
    }
    return 0;
}
