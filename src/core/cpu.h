/* cpu.h - what this CPU can do (ISA features usable under this OS) and how it is laid out
 * (logical CPUs, physical cores, NUMA nodes), detected once. */
#ifndef HM_CORE_CPU_H
#define HM_CORE_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* ISA features, each true only when the CPU has it AND the OS saves its register state. */
typedef struct hm_cpu_features {
    bool sse42, avx, avx2, fma, f16c, bmi2, gfni;
    bool avx512f, avx512dq, avx512bw, avx512vl, avx512cd;
    bool avx512vnni, avx512bf16, avx512fp16, avx512vbmi;
    bool avx_vnni;
    bool amx_tile, amx_int8, amx_bf16;
    bool amx_permitted; /* Linux granted XTILEDATA to this process (see hm_cpu_request_amx) */
    bool os_avx, os_avx512, os_amx; /* XCR0 state bits */
    char vendor[13];
    char brand[49];
    int family, model, stepping;
} hm_cpu_features;

/* Kernel variants, in increasing order of capability. */
typedef enum hm_isa {
    HM_ISA_REF = 0, /* plain C */
    HM_ISA_AVX2,    /* AVX2 + FMA + F16C */
    HM_ISA_AVX512,  /* AVX-512 F/BW/VL/DQ + VNNI */
    HM_ISA_AMX,     /* AVX-512 + AMX-TILE/INT8/BF16 + GFNI + VBMI */
    HM_ISA_COUNT
} hm_isa;

const char *hm_isa_name(hm_isa isa);
hm_status hm_isa_parse(const char *s, hm_isa *out);

/* Detected features (computed on first call; thread-safe). AMX tile permission is requested from
 * the kernel during detection when the CPU has AMX. */
const hm_cpu_features *hm_cpu_features_get(void);

/* Best variant this CPU supports. */
hm_isa hm_isa_best(const hm_cpu_features *f);
bool hm_isa_supported(const hm_cpu_features *f, hm_isa isa);
/* The variant kernels will use: HMOE_ISA if set (error if the CPU cannot run it or the name is
 * unknown), else hm_isa_best. */
hm_status hm_isa_select(hm_isa *out);

/* Asks Linux for AMX tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
 * must precede the first tile instruction in the process. Idempotent. */
hm_status hm_cpu_request_amx(void);

/* ---- topology ---- */

typedef struct hm_cpu_info {
    int cpu;      /* logical CPU number (as sched_setaffinity takes it) */
    int core;     /* index of its physical core in hm_topology.cores order */
    int node;     /* NUMA node */
    int package;  /* socket */
    bool primary; /* first hardware thread of its core */
} hm_cpu_info;

typedef struct hm_numa_node {
    int id;
    int n_cpus;         /* usable logical CPUs */
    int n_cores;        /* usable physical cores */
    int *core_cpus;     /* [n_cores] one logical CPU per physical core (the primary thread) */
    uint64_t mem_total; /* bytes, 0 if unknown */
    uint64_t mem_free;
} hm_numa_node;

typedef struct hm_topology {
    int n_cpus;        /* logical CPUs this process may run on (affinity mask) */
    hm_cpu_info *cpus; /* [n_cpus] sorted by cpu number */
    int n_cores;       /* physical cores among them */
    int *core_cpus;    /* [n_cores] primary logical CPU of each core, node-major order */
    int n_nodes;
    hm_numa_node *nodes; /* [n_nodes] only nodes with usable CPUs */
    bool from_sysfs;     /* false: sysfs unreadable, each CPU treated as a core on node 0 */
} hm_topology;

/* Detected once, never freed (process lifetime). */
const hm_topology *hm_topology_get(void);
/* Builds a topology from a sysfs-like tree rooted at root ("/sys" normally), limited to the given
 * CPUs; for tests. Free with hm_topology_free. */
hm_status hm_topology_build(const char *sysfs_root, const int *allowed, int n_allowed,
                            hm_topology *out);
void hm_topology_free(hm_topology *t);

/* Parses a Linux cpulist ("0-3,8,10-11") into a sorted list of unique numbers. On success *out
 * is malloc'd (free with free()). */
hm_status hm_parse_cpulist(const char *s, int **out, int *n_out);

/* ---- memory ---- */

typedef struct hm_mem_info {
    uint64_t total, available; /* bytes (MemTotal, MemAvailable) */
    uint64_t cgroup_limit;     /* bytes, 0 when none */
    uint64_t hugepage_size;    /* bytes of one static huge page */
    uint64_t hugepages_total, hugepages_free;
    char thp_mode[16]; /* transparent huge pages: always|madvise|never|"" */
    uint64_t l3_bytes; /* last-level cache of cpu0 (per instance), 0 if unknown */
    uint64_t l2_bytes;
} hm_mem_info;

hm_status hm_mem_info_get(hm_mem_info *out);

/* Bytes of this process's anonymous memory backed by transparent huge pages (AnonHugePages of
 * /proc/self/smaps_rollup); 0 when unknown. */
uint64_t hm_mem_anon_huge_bytes(void);
/* Bytes of this process's resident anonymous memory (Anonymous of the same file); 0 when unknown.
 */
uint64_t hm_mem_anon_bytes(void);

/* Pins the calling thread to one logical CPU. */
hm_status hm_thread_pin(int cpu);

#endif
