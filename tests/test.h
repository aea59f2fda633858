/* test.h - minimal test harness: CHECK macros that count failures and keep going. */
#ifndef HMOE_TEST_H
#define HMOE_TEST_H

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hmoe.h"

static int t_checks, t_failures;

/* Sets environment variable name to v for a stretch of a test; returns the value to give back to
 * env_pop (NULL: it was unset). */
static inline char *env_push(const char *name, const char *v) {
    const char *old = getenv(name);
    char *saved = old ? strdup(old) : NULL;
    setenv(name, v, 1);
    return saved;
}
static inline void env_pop(const char *name, char *saved) {
    if (saved)
        setenv(name, saved, 1);
    else
        unsetenv(name);
    free(saved);
}

/* The *_tiles CTest entries run a test again with HMOE_TILE_MIN_TOKENS=5: the int8 tile paths
 * from 5 tokens for every format, as the per-format crossovers (hm_tile_min_tokens) would leave
 * most small test batches on the matvec kernels. On a CPU without an int8 matmul that run has
 * nothing to add: skipped (exit 77). Needs cpu/ops.h. */
#define TILES_OR_SKIP()                                                                            \
    do {                                                                                           \
        const hm_cpu_ops *ops_;                                                                    \
        if (getenv("HMOE_TILE_MIN_TOKENS") &&                                                      \
            (hm_cpu_ops_get(&ops_) != HM_OK || !hm_i8_matmul_ok(ops_))) {                          \
            printf("skipped: HMOE_TILE_MIN_TOKENS set and no int8 matmul on this CPU\n");          \
            return 77;                                                                             \
        }                                                                                          \
    } while (0)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        t_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            t_failures++;                                                                          \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        t_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            t_failures++;                                                                          \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        hm_status st_ = (expr);                                                                    \
        CHECK_MSG(st_ == HM_OK, "%s: %s", hm_status_str(st_), hm_last_error());                    \
    } while (0)

#define CHECK_STATUS(expr, want)                                                                   \
    do {                                                                                           \
        hm_status st_ = (expr);                                                                    \
        CHECK_MSG(st_ == (want), "got %s (%s), want %s", hm_status_str(st_), hm_last_error(),      \
                  hm_status_str(want));                                                            \
    } while (0)

#define CHECK_CONTAINS(hay, needle)                                                                \
    CHECK_MSG(strstr((hay), (needle)) != NULL, "'%s' does not contain '%s'", (hay), (needle))

/* Reads a whole file, NUL-terminated (*len without the NUL when len is not NULL); NULL if it
 * cannot be opened or read. The caller frees. */
static inline char *test_read_file(const char *path, size_t *len) {
    if (len) *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (!b) return NULL;
    b[n] = '\0';
    if (len) *len = (size_t)n;
    return b;
}

static inline int test_done(const char *name) {
    printf("%s: %d checks, %d failed\n", name, t_checks, t_failures);
    return t_failures ? 1 : 0;
}

static inline int test_skip(const char *name, const char *why) {
    printf("%s: skipped: %s\n", name, why);
    return 77;
}

/* Writes text to path, making the directories on the way. */
static inline void write_text(char *path, const char *text) {
    for (char *q = path + 1; *q; q++)
        if (*q == '/') *q = 0, mkdir(path, 0755), *q = '/';
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (f) fputs(text, f), fclose(f);
}

/* A fake two-node machine for HMOE_SYSFS_ROOT (root: a mkdtemp template, filled in): every CPU
 * of the affinity mask its own core on package 0; node 0 = the first of them, node 1 = the rest.
 * Remove it with rm -rf. */
static inline void fake_numa_sysfs(char *root) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    CHECK(mkdtemp(root) != NULL);
    char path[512], text[32], nodes[2][8192] = {"", ""};
    for (int i = 0; i < CPU_SETSIZE; i++) {
        if (!CPU_ISSET(i, &set)) continue;
        snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d/topology/thread_siblings_list",
                 root, i);
        snprintf(text, sizeof text, "%d\n", i);
        write_text(path, text);
        snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d/topology/physical_package_id",
                 root, i);
        write_text(path, "0\n");
        char *list = nodes[nodes[0][0] != 0];
        const size_t o = strlen(list);
        if (o + 16 < sizeof nodes[0])
            snprintf(list + o, sizeof nodes[0] - o, "%s%d", o ? "," : "", i);
    }
    for (int n = 0; n < 2; n++) {
        snprintf(path, sizeof path, "%s/devices/system/node/node%d/cpulist", root, n);
        strcat(nodes[n], "\n");
        write_text(path, nodes[n]);
    }
}

#endif
