/* test_alloc.c - aligned allocation, large buffers, arenas, overflow handling. */
#include <stdint.h>

#include "core/alloc.h"
#include "core/cpu.h"
#include "test.h"

int main(void) {
    for (size_t align = 8; align <= 4096; align *= 2) {
        void *p = hm_malloc_aligned(1000, align, "t");
        CHECK(p && ((uintptr_t)p % align) == 0);
        memset(p, 1, 1000);
        hm_free(p);
    }
    CHECK(hm_malloc_aligned(10, 3, "odd align") == NULL);
    CHECK_CONTAINS(hm_last_error(), "odd align: alignment 3");
    CHECK(hm_malloc_aligned(SIZE_MAX - 10, 64, "huge") == NULL);
    CHECK_CONTAINS(hm_last_error(), "huge: cannot allocate");
    CHECK(hm_calloc_aligned(SIZE_MAX / 2, 4, 64, "overflow") == NULL);
    CHECK_CONTAINS(hm_last_error(), "overflows");
    unsigned char *z = hm_calloc_aligned(100, 3, 64, "zeros");
    int nonzero = 0;
    for (int i = 0; i < 300; i++) nonzero += z[i] != 0;
    CHECK(nonzero == 0);
    hm_free(z);
    hm_free(NULL);

    size_t s;
    CHECK(!hm_size_mul(SIZE_MAX, 2, &s));
    CHECK(hm_size_mul(1u << 20, 1u << 10, &s) && s == (size_t)1 << 30);
    CHECK(!hm_size_add(SIZE_MAX, 1, &s));
    CHECK(hm_align_up(65, 64) == 128 && hm_align_up(64, 64) == 64 && hm_align_up(0, 64) == 0);

    hm_large big;
    CHECK_OK(hm_large_alloc(5 << 20, true, "big", &big));
    CHECK(big.ptr && big.size == 5 << 20 && big.mapped >= big.size);
    CHECK(((uintptr_t)big.ptr % 4096) == 0);
    ((unsigned char *)big.ptr)[big.size - 1] = 7;
    CHECK(((unsigned char *)big.ptr)[0] == 0);
#if defined(__linux__)
    {
        /* touched, the buffer is resident: the process's anonymous memory covers it, its huge
         * pages are a part of that (how many is the kernel's choice), the mode one of THP's */
        memset(big.ptr, 1, big.size);
        const uint64_t anon = hm_mem_anon_bytes(), huge = hm_mem_anon_huge_bytes();
        CHECK_MSG(anon >= (uint64_t)big.size && huge <= anon, "anon %llu, huge %llu",
                  (unsigned long long)anon, (unsigned long long)huge);
        hm_mem_info mi;
        CHECK_OK(hm_mem_info_get(&mi));
        const char *mode = mi.thp_mode;
        CHECK(strlen(mode) < sizeof mi.thp_mode); /* terminated inside its array */
        CHECK_MSG(!mode[0] || !strcmp(mode, "always") || !strcmp(mode, "madvise") ||
                      !strcmp(mode, "never"),
                  "THP mode '%s'", mode);
    }
#endif
    hm_large_free(&big);
    CHECK(big.ptr == NULL);
    {
        /* a block past HM_HUGE_MIN: advised for huge pages (a hint), usable like any other;
         * advising nothing or less than one aligned 2 MiB page does nothing */
        const size_t n = HM_HUGE_MIN + 12345;
        unsigned char *b = hm_malloc_aligned(n, 64, "huge test");
        CHECK(b != NULL && ((uintptr_t)b % 64) == 0);
        if (b) {
            memset(b, 3, n);
            CHECK(b[0] == 3 && b[n - 1] == 3);
        }
        hm_advise_huge(NULL, 0);
        hm_advise_huge(b, 4096);
        hm_free(b);
    }
    hm_large_free(&big); /* twice is harmless */
    CHECK_STATUS(hm_large_alloc(SIZE_MAX - 100, false, "too big", &big), HM_ERR_NO_MEMORY);
    CHECK_CONTAINS(hm_last_error(), "too big");

    hm_arena a;
    hm_arena_init(&a, 256, "test arena");
    uintptr_t prev_end = 0;
    for (int i = 0; i < 100; i++) {
        size_t align = (size_t)1 << (i % 7);
        unsigned char *p = hm_arena_alloc(&a, (size_t)(i % 13) + 1, align);
        CHECK(p && ((uintptr_t)p % align) == 0);
        memset(p, i, (size_t)(i % 13) + 1);
        (void)prev_end;
    }
    /* allocations larger than the chunk get their own chunk */
    unsigned char *bigp = hm_arena_alloc(&a, 10000, 64);
    CHECK(bigp && ((uintptr_t)bigp % 64) == 0);
    memset(bigp, 0xab, 10000);
    hm_arena_mark m = hm_arena_get_mark(&a);
    size_t before = a.total;
    void *q1 = hm_arena_alloc(&a, 5000, 16);
    CHECK(q1 != NULL);
    hm_arena_rollback(&a, m);
    CHECK(a.total == before);
    void *q2 = hm_arena_alloc(&a, 8, 8);
    CHECK(q2 != NULL);
    CHECK(hm_arena_alloc(&a, 8, 6) == NULL);
    CHECK_CONTAINS(hm_last_error(), "test arena: alignment 6");
    CHECK(hm_arena_alloc(&a, SIZE_MAX - 8, 64) == NULL);
    CHECK_CONTAINS(hm_last_error(), "test arena");
    hm_arena_reset(&a);
    CHECK(a.total == 0);
    void *r = hm_arena_alloc(&a, 100, 64);
    CHECK(r != NULL);
    hm_arena_free(&a);
    hm_arena_free(&a);
    /* growable arrays and texts */
    {
        int32_t *ga = NULL;
        size_t cap = 0;
        for (size_t i = 0; i < 1000; i++) {
            CHECK(hm_grow((void **)&ga, &cap, i + 1, sizeof *ga) && cap >= i + 1);
            ga[i] = (int32_t)i;
        }
        CHECK(ga[999] == 999 && ga[0] == 0);
        size_t gcap = cap;
        CHECK(!hm_grow((void **)&ga, &gcap, SIZE_MAX / 2, sizeof *ga) &&
              gcap == cap); /* overflow */
        free(ga);
        char *t = NULL;
        size_t len = 0, tcap = 0;
        CHECK(hm_text_append(&t, &len, &tcap, "", 0) && len == 0 && t && t[0] == '\0');
        for (int i = 0; i < 300; i++) CHECK(hm_text_append(&t, &len, &tcap, "abc", 3));
        CHECK(len == 900 && strlen(t) == 900 && !memcmp(t + 897, "abc", 3));
        free(t);
    }
    return test_done("alloc");
}
