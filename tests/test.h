/* test.h - minimal test harness: CHECK macros that count failures and keep going. */
#ifndef HMOE_TEST_H
#define HMOE_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hmoe.h"

static int t_checks, t_failures;

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

#endif
