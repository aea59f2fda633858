/* test_cpu.c - CPU features against /proc/cpuinfo, topology against nproc/lscpu and a fake
 * sysfs tree, cpulist parsing, ISA selection through HMOE_ISA. */
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cpu.h"
#include "test.h"

static char cpuinfo_flags[16384];

static bool has_flag(const char *name) {
    char pat[64];
    snprintf(pat, sizeof pat, " %s ", name);
    return strstr(cpuinfo_flags, pat) != NULL;
}

static void load_cpuinfo_flags(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[16384];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) == 0) {
            char *colon = strchr(line, ':');
            snprintf(cpuinfo_flags, sizeof cpuinfo_flags, "%s ", colon ? colon : "");
            cpuinfo_flags[0] = ' ';
            char *nl = strchr(cpuinfo_flags, '\n');
            if (nl) *nl = ' ';
            break;
        }
    }
    if (f) fclose(f);
}

static void test_features(void) {
    const hm_cpu_features *f = hm_cpu_features_get();
    CHECK(f == hm_cpu_features_get());
    load_cpuinfo_flags();
    if (!cpuinfo_flags[0]) {
        printf("no /proc/cpuinfo flags: feature oracle skipped\n");
        return;
    }
    struct {
        bool ours;
        const char *flag;
    } v[] = {{f->avx, "avx"},
             {f->avx2, "avx2"},
             {f->fma, "fma"},
             {f->f16c, "f16c"},
             {f->bmi2, "bmi2"},
             {f->gfni, "gfni"},
             {f->avx512f, "avx512f"},
             {f->avx512dq, "avx512dq"},
             {f->avx512bw, "avx512bw"},
             {f->avx512vl, "avx512vl"},
             {f->avx512cd, "avx512cd"},
             {f->avx512vnni, "avx512_vnni"},
             {f->avx512bf16, "avx512_bf16"},
             {f->avx512fp16, "avx512_fp16"},
             {f->avx512vbmi, "avx512vbmi"},
             {f->avx_vnni, "avx_vnni"},
             {f->amx_tile, "amx_tile"},
             {f->amx_int8, "amx_int8"},
             {f->amx_bf16, "amx_bf16"},
             {f->sse42, "sse4_2"}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        CHECK_MSG(v[i].ours == has_flag(v[i].flag), "feature %s: ours %d, /proc/cpuinfo %d",
                  v[i].flag, v[i].ours, has_flag(v[i].flag));
    if (f->amx_tile) CHECK_MSG(f->amx_permitted, "AMX present but tile permission not granted");
    CHECK(strlen(f->vendor) == 12);
    printf("cpu: %s, best kernels %s\n", f->brand, hm_isa_name(hm_isa_best(f)));
}

static void test_isa_select(void) {
    const hm_cpu_features *f = hm_cpu_features_get();
    hm_isa isa;
    CHECK(hm_isa_supported(f, HM_ISA_REF));
    unsetenv("HMOE_ISA");
    CHECK_OK(hm_isa_select(&isa));
    CHECK(isa == hm_isa_best(f));
    setenv("HMOE_ISA", "ref", 1);
    CHECK_OK(hm_isa_select(&isa));
    CHECK(isa == HM_ISA_REF);
    setenv("HMOE_ISA", "sse9", 1);
    CHECK_STATUS(hm_isa_select(&isa), HM_ERR_INVALID_ARG);
    CHECK_CONTAINS(hm_last_error(), "HMOE_ISA: ISA 'sse9' is not one of ref, avx2, avx512, amx");
    for (int i = 0; i < HM_ISA_COUNT; i++) {
        setenv("HMOE_ISA", hm_isa_name((hm_isa)i), 1);
        if (hm_isa_supported(f, (hm_isa)i)) {
            CHECK_OK(hm_isa_select(&isa));
            CHECK(isa == (hm_isa)i);
        } else {
            CHECK_STATUS(hm_isa_select(&isa), HM_ERR_UNSUPPORTED);
            CHECK_CONTAINS(hm_last_error(), "cannot run it");
        }
    }
    unsetenv("HMOE_ISA");
    CHECK_OK(hm_isa_parse("AVX512", &isa));
    CHECK(isa == HM_ISA_AVX512);
    /* the ladder is monotone: supporting a variant implies supporting all below it */
    for (int i = 1; i < HM_ISA_COUNT; i++)
        if (hm_isa_supported(f, (hm_isa)i)) CHECK(hm_isa_supported(f, (hm_isa)(i - 1)));
    /* a Skylake-SP: AVX-512 F/BW/VL/DQ without VNNI runs the AVX2 variant (the AVX-512 dot
     * products use VPDPBUSD, an illegal instruction there) */
    hm_cpu_features skx = {0};
    skx.avx = skx.avx2 = skx.fma = skx.f16c = skx.os_avx = true;
    skx.avx512f = skx.avx512bw = skx.avx512vl = skx.avx512dq = skx.os_avx512 = true;
    CHECK(hm_isa_supported(&skx, HM_ISA_AVX2) && !hm_isa_supported(&skx, HM_ISA_AVX512));
    skx.avx512vnni = true; /* Cascade Lake */
    CHECK(hm_isa_supported(&skx, HM_ISA_AVX512) && !hm_isa_supported(&skx, HM_ISA_AMX));
}

static void test_cpulist(void) {
    int *v, n;
    CHECK_OK(hm_parse_cpulist("0-3,8,10-11\n", &v, &n));
    int want[] = {0, 1, 2, 3, 8, 10, 11};
    CHECK(n == 7 && memcmp(v, want, sizeof want) == 0);
    free(v);
    CHECK_OK(hm_parse_cpulist("5,1,3-4,1", &v, &n));
    int want2[] = {1, 3, 4, 5};
    CHECK(n == 4 && memcmp(v, want2, sizeof want2) == 0);
    free(v);
    CHECK_OK(hm_parse_cpulist("\n", &v, &n));
    CHECK(n == 0);
    free(v);
    const char *bad[] = {"a", "3-1", "1-", "-1", "1,,x", "99999999", "1;2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(hm_parse_cpulist(bad[i], &v, &n) == HM_ERR_FORMAT, "'%s' accepted", bad[i]);
        CHECK(v == NULL);
    }
}

/* 8 CPUs: 4 cores with SMT siblings (c, c+4); node 0 = cores 0,1; node 1 = cores 2,3 */
static void test_fake_sysfs(void) {
    char root[] = "/tmp/hmoe_sysfs_XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    char path[512], text[64];
    for (int c = 0; c < 8; c++) {
        snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d/topology/thread_siblings_list",
                 root, c);
        snprintf(text, sizeof text, "%d,%d\n", c % 4, c % 4 + 4);
        write_text(path, text);
        snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d/topology/physical_package_id",
                 root, c);
        write_text(path, "0\n");
    }
    for (int n = 0; n < 2; n++) {
        snprintf(path, sizeof path, "%s/devices/system/node/node%d/cpulist", root, n);
        write_text(path, n == 0 ? "0-1,4-5\n" : "2-3,6-7\n");
        snprintf(path, sizeof path, "%s/devices/system/node/node%d/meminfo", root, n);
        snprintf(text, sizeof text, "Node %d MemTotal:       %d kB\nNode %d MemFree: 1024 kB\n", n,
                 (n + 1) * 1048576, n);
        write_text(path, text);
    }
    hm_topology t;
    int all[] = {7, 6, 5, 4, 3, 2, 1, 0};
    CHECK_OK(hm_topology_build(root, all, 8, &t));
    CHECK(t.from_sysfs && t.n_cpus == 8 && t.n_cores == 4 && t.n_nodes == 2);
    int want_cores[] = {0, 1, 2, 3};
    CHECK(memcmp(t.core_cpus, want_cores, sizeof want_cores) == 0);
    CHECK(t.nodes[0].id == 0 && t.nodes[0].n_cores == 2 && t.nodes[0].n_cpus == 4);
    CHECK(t.nodes[1].id == 1 && t.nodes[1].core_cpus[0] == 2 && t.nodes[1].core_cpus[1] == 3);
    CHECK(t.nodes[0].mem_total == 1048576ull * 1024 && t.nodes[1].mem_total == 2097152ull * 1024);
    CHECK(t.nodes[1].mem_free == 1024ull * 1024);
    CHECK(t.cpus[4].cpu == 4 && !t.cpus[4].primary && t.cpus[4].core == 0 && t.cpus[4].node == 0);
    CHECK(t.cpus[7].core == 3 && t.cpus[7].node == 1);
    hm_topology_free(&t);

    /* affinity subset: {1, 4, 5, 6} -> cores {1 (with 5), 4, 6}; 4 is the primary of core 0 */
    int some[] = {6, 1, 5, 4};
    CHECK_OK(hm_topology_build(root, some, 4, &t));
    CHECK(t.n_cpus == 4 && t.n_cores == 3 && t.n_nodes == 2);
    int want_some[] = {1, 4, 6};
    CHECK(memcmp(t.core_cpus, want_some, sizeof want_some) == 0);
    CHECK(t.cpus[2].cpu == 5 && !t.cpus[2].primary && t.cpus[2].core == 0);
    hm_topology_free(&t);

    /* no sysfs at all: every CPU is a core on node 0 */
    CHECK_OK(hm_topology_build("/nonexistent", some, 4, &t));
    CHECK(!t.from_sysfs && t.n_cores == 4 && t.n_nodes == 1 && t.nodes[0].id == 0);
    hm_topology_free(&t);
    CHECK_STATUS(hm_topology_build(root, some, 0, &t), HM_ERR_INVALID_ARG);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
}

static int count_unique_lscpu(const char *fields, int col_count) {
    /* counts unique field tuples among CPUs in our affinity mask */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "lscpu -p=CPU,%s 2>/dev/null", fields);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof set, &set);
    char line[256], seen[4096][32];
    int n = 0, lines = 0;
    while (fgets(line, sizeof line, p)) {
        if (line[0] == '#') continue;
        lines++;
        int cpu = atoi(line);
        if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set)) continue;
        char *rest = strchr(line, ',');
        if (!rest) continue;
        char key[32];
        snprintf(key, sizeof key, "%s", rest + 1);
        int dup = 0;
        for (int i = 0; i < n; i++) dup |= strcmp(seen[i], key) == 0;
        if (!dup && n < 4096) snprintf(seen[n++], 32, "%s", key);
    }
    (void)col_count;
    pclose(p);
    return lines ? n : -1;
}

static void test_real_topology(void) {
    const hm_topology *t = hm_topology_get();
    CHECK(t->n_cpus >= 1 && t->n_cores >= 1 && t->n_cores <= t->n_cpus && t->n_nodes >= 1);
    int sum_cores = 0, sum_cpus = 0;
    for (int i = 0; i < t->n_nodes; i++) {
        sum_cores += t->nodes[i].n_cores;
        sum_cpus += t->nodes[i].n_cpus;
    }
    CHECK(sum_cores == t->n_cores && sum_cpus == t->n_cpus);
    FILE *p = popen("nproc", "r");
    int nproc = -1;
    if (p) {
        if (fscanf(p, "%d", &nproc) != 1) nproc = -1;
        pclose(p);
    }
    if (nproc > 0) CHECK_MSG(nproc == t->n_cpus, "nproc %d, ours %d", nproc, t->n_cpus);
    int cores = count_unique_lscpu("CORE,SOCKET", 2);
    if (cores > 0) CHECK_MSG(cores == t->n_cores, "lscpu cores %d, ours %d", cores, t->n_cores);
    int nodes = count_unique_lscpu("NODE", 1);
    if (nodes > 0) CHECK_MSG(nodes == t->n_nodes, "lscpu nodes %d, ours %d", nodes, t->n_nodes);
    printf("topology: %d cpus, %d cores, %d nodes (nproc %d, lscpu cores %d nodes %d)\n", t->n_cpus,
           t->n_cores, t->n_nodes, nproc, cores, nodes);

    hm_mem_info m;
    CHECK_OK(hm_mem_info_get(&m));
    CHECK(m.total > 0 && m.available > 0 && m.available <= m.total);
    CHECK_OK(hm_thread_pin(t->core_cpus[0]));
    CHECK(sched_getcpu() == t->core_cpus[0]);
    CHECK_STATUS(hm_thread_pin(-1), HM_ERR_INVALID_ARG);
}

int main(void) {
    test_features();
    test_isa_select();
    test_cpulist();
    test_fake_sysfs();
    test_real_topology();
    return test_done("cpu");
}
