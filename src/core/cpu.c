/* cpu.c - CPU feature detection (cpuid + XCR0 + AMX permission), topology from sysfs, memory info.
 */
#include "core/cpu.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/log.h"

/* ---------------------------------------------------------------- features */

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static void cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
}
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

#define BIT(r, n) (((r) >> (n)) & 1u)

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA  18

static hm_cpu_features g_feat;
static pthread_once_t g_feat_once = PTHREAD_ONCE_INIT;

static bool amx_perm_granted(void) {
#if defined(__x86_64__) && defined(SYS_arch_prctl)
    unsigned long bitmask = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bitmask) != 0) return false;
    return (bitmask >> XFEATURE_XTILEDATA) & 1ul;
#else
    return false;
#endif
}

hm_status hm_cpu_request_amx(void) {
#if defined(__x86_64__) && defined(SYS_arch_prctl)
    if (amx_perm_granted()) return HM_OK;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        return hm_errorf_errno(HM_ERR_UNSUPPORTED, errno,
                               "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) refused (kernel < 5.16 "
                               "or AMX disabled)");
    return amx_perm_granted() ? HM_OK
                              : hm_errorf(HM_ERR_UNSUPPORTED, "AMX tile permission not granted");
#else
    return hm_errorf(HM_ERR_UNSUPPORTED, "AMX needs x86-64 Linux");
#endif
}

static void detect_features(void) {
    hm_cpu_features *f = &g_feat;
    memset(f, 0, sizeof *f);
#if defined(__x86_64__) || defined(__i386__)
    uint32_t r[4];
    cpuid(0, 0, r);
    uint32_t max_leaf = r[0];
    memcpy(f->vendor + 0, &r[1], 4);
    memcpy(f->vendor + 4, &r[3], 4);
    memcpy(f->vendor + 8, &r[2], 4);
    f->vendor[12] = '\0';

    cpuid(1, 0, r);
    uint32_t eax1 = r[0], ecx1 = r[2];
    f->stepping = (int)(eax1 & 0xf);
    f->model = (int)((eax1 >> 4) & 0xf);
    f->family = (int)((eax1 >> 8) & 0xf);
    if (f->family == 0xf) f->family += (int)((eax1 >> 20) & 0xff);
    if (f->family == 0x6 || f->family >= 0xf) f->model += (int)(((eax1 >> 16) & 0xf) << 4);

    bool osxsave = BIT(ecx1, 27);
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    f->os_avx = (xcr0 & 0x6) == 0x6;
    f->os_avx512 = f->os_avx && (xcr0 & 0xe0) == 0xe0;
    f->os_amx = (xcr0 & (3ull << 17)) == (3ull << 17);

    f->sse42 = BIT(ecx1, 20);
    f->avx = BIT(ecx1, 28) && f->os_avx;
    f->fma = BIT(ecx1, 12) && f->os_avx;
    f->f16c = BIT(ecx1, 29) && f->os_avx;

    if (max_leaf >= 7) {
        cpuid(7, 0, r);
        uint32_t ebx = r[1], ecx = r[2], edx = r[3], max_sub = r[0];
        f->avx2 = BIT(ebx, 5) && f->os_avx;
        f->bmi2 = BIT(ebx, 8);
        f->gfni = BIT(ecx, 8); /* the AVX-512 forms also need os_avx512 (the amx variant checks) */
        f->avx512f = BIT(ebx, 16) && f->os_avx512;
        f->avx512dq = BIT(ebx, 17) && f->os_avx512;
        f->avx512cd = BIT(ebx, 28) && f->os_avx512;
        f->avx512bw = BIT(ebx, 30) && f->os_avx512;
        f->avx512vl = BIT(ebx, 31) && f->os_avx512;
        f->avx512vbmi = BIT(ecx, 1) && f->os_avx512;
        f->avx512vnni = BIT(ecx, 11) && f->os_avx512;
        f->amx_bf16 = BIT(edx, 22) && f->os_amx;
        f->avx512fp16 = BIT(edx, 23) && f->os_avx512;
        f->amx_tile = BIT(edx, 24) && f->os_amx;
        f->amx_int8 = BIT(edx, 25) && f->os_amx;
        if (max_sub >= 1) {
            cpuid(7, 1, r);
            f->avx_vnni = BIT(r[0], 4) && f->os_avx;
            f->avx512bf16 = BIT(r[0], 5) && f->os_avx512;
        }
    }

    cpuid(0x80000000u, 0, r);
    if (r[0] >= 0x80000004u) {
        for (uint32_t i = 0; i < 3; i++) {
            cpuid(0x80000002u + i, 0, r);
            memcpy(f->brand + 16 * i, r, 16);
        }
        f->brand[48] = '\0';
        /* trim leading/trailing blanks */
        char *s = f->brand;
        while (*s == ' ') s++;
        memmove(f->brand, s, strlen(s) + 1);
        for (size_t n = strlen(f->brand); n && f->brand[n - 1] == ' '; n--) f->brand[n - 1] = 0;
    }
    if (f->amx_tile) {
        if (hm_cpu_request_amx() == HM_OK) {
            f->amx_permitted = true;
        } else {
            HM_WARN("CPU has AMX but %s; AMX kernels disabled", hm_last_error());
        }
    }
#endif
}

const hm_cpu_features *hm_cpu_features_get(void) {
    pthread_once(&g_feat_once, detect_features);
    return &g_feat;
}

static const char *const isa_names[HM_ISA_COUNT] = {"ref", "avx2", "avx512", "amx"};

const char *hm_isa_name(hm_isa isa) {
    return (unsigned)isa < HM_ISA_COUNT ? isa_names[isa] : "?";
}

hm_status hm_isa_parse(const char *s, hm_isa *out) {
    for (int i = 0; s && i < HM_ISA_COUNT; i++) {
        if (strcasecmp(s, isa_names[i]) == 0) {
            *out = (hm_isa)i;
            return HM_OK;
        }
    }
    return hm_errorf(HM_ERR_INVALID_ARG, "ISA '%s' is not one of ref, avx2, avx512, amx",
                     s ? s : "(null)");
}

bool hm_isa_supported(const hm_cpu_features *f, hm_isa isa) {
    bool avx2 = f->avx2 && f->fma && f->f16c;
    /* the AVX-512 dot products use VPDPBUSD: CPUs without VNNI (Skylake-SP) run the AVX2 variant */
    bool avx512 = avx2 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni;
    switch (isa) {
    case HM_ISA_REF:
        return true;
    case HM_ISA_AVX2:
        return avx2;
    case HM_ISA_AVX512:
        return avx512;
    case HM_ISA_AMX:
        /* every AMX CPU has GFNI and VBMI; the amx variant's Q4_K and Q8_0 kernels use them */
        return avx512 && f->gfni && f->avx512vbmi && f->amx_tile && f->amx_int8 && f->amx_bf16 &&
               f->amx_permitted;
    default:
        return false;
    }
}

hm_isa hm_isa_best(const hm_cpu_features *f) {
    for (int i = HM_ISA_COUNT - 1; i > 0; i--)
        if (hm_isa_supported(f, (hm_isa)i)) return (hm_isa)i;
    return HM_ISA_REF;
}

hm_status hm_isa_select(hm_isa *out) {
    const hm_cpu_features *f = hm_cpu_features_get();
    const char *env = getenv("HMOE_ISA");
    if (env && *env) {
        hm_isa isa = HM_ISA_REF;
        if (hm_isa_parse(env, &isa) != HM_OK)
            return hm_error_prefix(HM_ERR_INVALID_ARG, "HMOE_ISA");
        if (!hm_isa_supported(f, isa))
            return hm_errorf(HM_ERR_UNSUPPORTED,
                             "HMOE_ISA=%s: this CPU (%s) cannot run it; the best it supports is %s",
                             env, f->brand[0] ? f->brand : "unknown", hm_isa_name(hm_isa_best(f)));
        *out = isa;
        return HM_OK;
    }
    *out = hm_isa_best(f);
    return HM_OK;
}

/* ---------------------------------------------------------------- topology */

hm_status hm_parse_cpulist(const char *s, int **out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    if (!s) return hm_errorf(HM_ERR_INVALID_ARG, "cpulist: NULL");
    int cap = 16, n = 0;
    int *v = malloc(sizeof(int) * (size_t)cap);
    if (!v) return hm_errorf(HM_ERR_NO_MEMORY, "cpulist: out of memory");
    const char *p = s;
    while (*p && isspace((unsigned char)*p)) p++;
    while (*p && *p != '\n') {
        char *end;
        errno = 0;
        long a = strtol(p, &end, 10), b;
        if (end == p || a < 0 || a > 65535 || errno) goto bad;
        p = end;
        b = a;
        if (*p == '-') {
            p++;
            b = strtol(p, &end, 10);
            if (end == p || b < a || b > 65535) goto bad;
            p = end;
        }
        for (long c = a; c <= b; c++) {
            if (n == cap) {
                int *nv = realloc(v, sizeof(int) * (size_t)(cap *= 2));
                if (!nv) {
                    free(v);
                    return hm_errorf(HM_ERR_NO_MEMORY, "cpulist: out of memory");
                }
                v = nv;
            }
            v[n++] = (int)c;
        }
        if (*p == ',')
            p++;
        else if (*p && *p != '\n' && !isspace((unsigned char)*p))
            goto bad;
        while (*p == ' ') p++;
    }
    /* sort + unique (lists are short) */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            int t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (m == 0 || v[m - 1] != v[i]) v[m++] = v[i];
    *out = v;
    *n_out = m;
    return HM_OK;
bad:
    free(v);
    return hm_errorf(HM_ERR_FORMAT, "cpulist '%s' is malformed", s);
}

static bool read_small_file(const char *path, char *buf, size_t cap) {
    FILE *fp = fopen(path, "r");
    if (!fp) return false;
    size_t n = fread(buf, 1, cap - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return n > 0;
}

static bool read_long(const char *path, long *out) {
    char buf[64];
    if (!read_small_file(path, buf, sizeof buf)) return false;
    char *end;
    *out = strtol(buf, &end, 10);
    return end != buf;
}

static uint64_t node_meminfo(const char *root, int node, const char *key) {
    char path[512], buf[4096];
    snprintf(path, sizeof path, "%s/devices/system/node/node%d/meminfo", root, node);
    if (!read_small_file(path, buf, sizeof buf)) return 0;
    char *p = strstr(buf, key);
    if (!p) return 0;
    p += strlen(key);
    while (*p == ':' || *p == ' ') p++;
    return (uint64_t)strtoull(p, NULL, 10) * 1024;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

void hm_topology_free(hm_topology *t) {
    if (!t) return;
    for (int i = 0; i < t->n_nodes; i++) free(t->nodes[i].core_cpus);
    free(t->nodes);
    free(t->cpus);
    free(t->core_cpus);
    memset(t, 0, sizeof *t);
}

hm_status hm_topology_build(const char *root, const int *allowed_in, int n_allowed,
                            hm_topology *t) {
    memset(t, 0, sizeof *t);
    if (n_allowed <= 0) return hm_errorf(HM_ERR_INVALID_ARG, "topology: no usable CPUs");
    int *allowed = malloc(sizeof(int) * (size_t)n_allowed);
    int *sib_key = malloc(sizeof(int) * (size_t)n_allowed);
    t->cpus = calloc((size_t)n_allowed, sizeof(hm_cpu_info));
    if (!allowed || !sib_key || !t->cpus) goto oom;
    memcpy(allowed, allowed_in, sizeof(int) * (size_t)n_allowed);
    qsort(allowed, (size_t)n_allowed, sizeof(int), cmp_int);
    t->n_cpus = n_allowed;

    char path[512], buf[4096];
    bool any_sysfs = false;
    for (int i = 0; i < n_allowed; i++) {
        int c = allowed[i];
        hm_cpu_info *ci = &t->cpus[i];
        ci->cpu = c;
        sib_key[i] = c;
        snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d/topology/thread_siblings_list",
                 root, c);
        if (read_small_file(path, buf, sizeof buf)) {
            int *sib, ns;
            if (hm_parse_cpulist(buf, &sib, &ns) == HM_OK && ns > 0) {
                sib_key[i] = sib[0];
                any_sysfs = true;
            }
            free(sib);
        }
        long v;
        snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d/topology/physical_package_id",
                 root, c);
        ci->package = read_long(path, &v) && v >= 0 ? (int)v : 0;
    }
    /* NUMA nodes: scan node ids 0..1023 that exist. */
    int max_node = -1;
    for (int i = 0; i < n_allowed; i++) t->cpus[i].node = -1;
    for (int node = 0; node < 1024; node++) {
        snprintf(path, sizeof path, "%s/devices/system/node/node%d/cpulist", root, node);
        if (!read_small_file(path, buf, sizeof buf)) continue;
        int *list, nl;
        if (hm_parse_cpulist(buf, &list, &nl) != HM_OK) continue;
        for (int k = 0; k < nl; k++) {
            int *hit = bsearch(&list[k], allowed, (size_t)n_allowed, sizeof(int), cmp_int);
            if (hit) t->cpus[hit - allowed].node = node;
        }
        free(list);
        if (node > max_node) max_node = node;
    }
    for (int i = 0; i < n_allowed; i++)
        if (t->cpus[i].node < 0) t->cpus[i].node = 0;
    t->from_sysfs = any_sysfs;

    /* primary thread = first allowed CPU with a given sibling key */
    for (int i = 0; i < n_allowed; i++) {
        t->cpus[i].primary = true;
        for (int j = 0; j < i; j++)
            if (sib_key[j] == sib_key[i]) {
                t->cpus[i].primary = false;
                break;
            }
    }
    /* nodes that have usable CPUs, in id order */
    int n_ids = (max_node < 0 ? 0 : max_node) + 1;
    t->nodes = calloc((size_t)n_ids, sizeof(hm_numa_node));
    t->core_cpus = malloc(sizeof(int) * (size_t)n_allowed);
    if (!t->nodes || !t->core_cpus) goto oom;
    for (int node = 0; node < n_ids; node++) {
        int nc = 0, ncore = 0;
        for (int i = 0; i < n_allowed; i++)
            if (t->cpus[i].node == node) {
                nc++;
                ncore += t->cpus[i].primary;
            }
        if (!nc) continue;
        hm_numa_node *nd = &t->nodes[t->n_nodes++];
        nd->id = node;
        nd->n_cpus = nc;
        nd->core_cpus = malloc(sizeof(int) * (size_t)ncore);
        if (!nd->core_cpus) goto oom;
        for (int i = 0; i < n_allowed; i++) {
            if (t->cpus[i].node != node || !t->cpus[i].primary) continue;
            nd->core_cpus[nd->n_cores++] = t->cpus[i].cpu;
            t->core_cpus[t->n_cores++] = t->cpus[i].cpu;
        }
        nd->mem_total = node_meminfo(root, node, "MemTotal");
        nd->mem_free = node_meminfo(root, node, "MemFree");
    }
    /* core index of every CPU: index of its primary in core_cpus */
    for (int i = 0; i < n_allowed; i++) {
        int prim = t->cpus[i].cpu;
        for (int j = 0; j < n_allowed; j++)
            if (sib_key[j] == sib_key[i] && t->cpus[j].primary) prim = t->cpus[j].cpu;
        for (int k = 0; k < t->n_cores; k++)
            if (t->core_cpus[k] == prim) t->cpus[i].core = k;
    }
    free(allowed);
    free(sib_key);
    return HM_OK;
oom:
    free(allowed);
    free(sib_key);
    hm_topology_free(t);
    return hm_errorf(HM_ERR_NO_MEMORY, "topology: out of memory");
}

static hm_topology g_topo;
static pthread_once_t g_topo_once = PTHREAD_ONCE_INIT;

static void detect_topology(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    int n = 0, *cpus = NULL;
    long ncfg = sysconf(_SC_NPROCESSORS_CONF);
    if (ncfg < 1) ncfg = 1;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) {
        cpus = malloc(sizeof(int) * CPU_SETSIZE);
        for (int c = 0; cpus && c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set)) cpus[n++] = c;
    } else {
        cpus = malloc(sizeof(int) * (size_t)ncfg);
        for (int c = 0; cpus && c < ncfg; c++) cpus[n++] = c;
    }
    /* HMOE_SYSFS_ROOT: another sysfs tree (tests: a fake multi-node machine) */
    const char *root = getenv("HMOE_SYSFS_ROOT");
    if (!root || !*root) root = "/sys";
    if (!cpus || hm_topology_build(root, cpus, n, &g_topo) != HM_OK) {
        /* last resort: one CPU, one core, one node (keeps callers simple) */
        static int zero = 0;
        static hm_cpu_info ci = {0, 0, 0, 0, true};
        static hm_numa_node nd = {0, 1, 1, &zero, 0, 0};
        g_topo.n_cpus = 1;
        g_topo.cpus = &ci;
        g_topo.n_cores = 1;
        g_topo.core_cpus = &zero;
        g_topo.n_nodes = 1;
        g_topo.nodes = &nd;
        HM_WARN("topology detection failed (%s); assuming one CPU", hm_last_error());
    }
    free(cpus);
}

const hm_topology *hm_topology_get(void) {
    pthread_once(&g_topo_once, detect_topology);
    return &g_topo;
}

hm_status hm_thread_pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (cpu < 0 || cpu >= CPU_SETSIZE) return hm_errorf(HM_ERR_INVALID_ARG, "pin: bad cpu %d", cpu);
    CPU_SET(cpu, &set);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (rc != 0) return hm_errorf_errno(HM_ERR_SYSTEM, rc, "pin thread to cpu %d", cpu);
    return HM_OK;
}

/* ---------------------------------------------------------------- memory */

static uint64_t meminfo_value(const char *buf, const char *key) {
    const char *p = buf;
    size_t kl = strlen(key);
    while ((p = strstr(p, key)) != NULL) {
        if ((p == buf || p[-1] == '\n') && p[kl] == ':') {
            p += kl + 1;
            uint64_t v = strtoull(p, (char **)&p, 10);
            while (*p == ' ') p++;
            return strncmp(p, "kB", 2) == 0 ? v * 1024 : v;
        }
        p += kl;
    }
    return 0;
}

static uint64_t parse_cache_size(const char *s) {
    char *end;
    uint64_t v = strtoull(s, &end, 10);
    if (*end == 'K')
        v <<= 10;
    else if (*end == 'M')
        v <<= 20;
    return v;
}

/* one field of /proc/self/smaps_rollup, in bytes; 0 when unknown */
static uint64_t smaps_rollup_value(const char *key) {
    static char buf[4096];
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    const uint64_t v =
        read_small_file("/proc/self/smaps_rollup", buf, sizeof buf) ? meminfo_value(buf, key) : 0;
    pthread_mutex_unlock(&mu);
    return v;
}

uint64_t hm_mem_anon_huge_bytes(void) {
    return smaps_rollup_value("AnonHugePages");
}

uint64_t hm_mem_anon_bytes(void) {
    return smaps_rollup_value("Anonymous");
}

hm_status hm_mem_info_get(hm_mem_info *m) {
    memset(m, 0, sizeof *m);
    static char buf[16384];
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    /* HMOE_MEMINFO: another meminfo file (tests: a machine with little memory available) */
    const char *info = getenv("HMOE_MEMINFO");
    if (!info || !*info) info = "/proc/meminfo";
    bool ok = read_small_file(info, buf, sizeof buf);
    if (ok) {
        m->total = meminfo_value(buf, "MemTotal");
        m->available = meminfo_value(buf, "MemAvailable");
        m->hugepage_size = meminfo_value(buf, "Hugepagesize");
        m->hugepages_total = meminfo_value(buf, "HugePages_Total");
        m->hugepages_free = meminfo_value(buf, "HugePages_Free");
    }
    pthread_mutex_unlock(&mu);
    if (!ok) return hm_errorf_errno(HM_ERR_IO, errno, "%s: cannot read", info);
    char s[256];
    if (read_small_file("/sys/kernel/mm/transparent_hugepage/enabled", s, sizeof s)) {
        char *a = strchr(s, '['), *b = a ? strchr(a, ']') : NULL;
        if (a && b && b - a - 1 < (long)sizeof m->thp_mode) {
            memcpy(m->thp_mode, a + 1, (size_t)(b - a - 1));
            m->thp_mode[b - a - 1] = '\0';
        }
    }
    if (read_small_file("/sys/fs/cgroup/memory.max", s, sizeof s) && isdigit((unsigned char)s[0]))
        m->cgroup_limit = strtoull(s, NULL, 10);
    for (int idx = 0; idx < 8; idx++) {
        char path[128], lv[16], sz[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", idx);
        if (!read_small_file(path, lv, sizeof lv)) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", idx);
        if (!read_small_file(path, sz, sizeof sz)) continue;
        if (atoi(lv) == 3) m->l3_bytes = parse_cache_size(sz);
        if (atoi(lv) == 2) m->l2_bytes = parse_cache_size(sz);
    }
    return HM_OK;
}
