/* alloc.h - aligned heap allocation, bump arenas, and large page-backed buffers. */
#ifndef HM_CORE_ALLOC_H
#define HM_CORE_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define HM_CACHE_LINE 64

/* Overflow-checked size arithmetic: return false (and leave *out unspecified) on overflow. */
static inline bool hm_size_mul(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool hm_size_add(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
static inline size_t hm_align_up(size_t x, size_t a) {
    return (x + a - 1) & ~(a - 1);
}

/* Aligned allocation; align must be a power of two (>= sizeof(void *)). Returns NULL and sets the
 * last error (naming `what`) on failure. Free with hm_free (NULL is a no-op). Blocks of
 * HM_HUGE_MIN bytes and more ask for transparent huge pages on their 2 MiB-aligned interior
 * (hm_advise_huge): activation and scratch buffers are walked row by row with strides of KiBs,
 * and on 4 KiB pages every row would cost a TLB miss. */
void *hm_malloc_aligned(size_t size, size_t align, const char *what);

/* Growable arrays (realloc'd, capacity doubling): *p has room for at least need elements of elem
 * bytes afterwards; false (with *p and *cap unchanged) when the memory or the size runs out. */
bool hm_grow(void **p, size_t *cap, size_t need, size_t elem);
/* Appends s[0..n) to the text *p of *len bytes, keeping it NUL-terminated; false when out of
 * memory (nothing appended). */
bool hm_text_append(char **p, size_t *len, size_t *cap, const char *s, size_t n);
void *hm_calloc_aligned(size_t n, size_t elem, size_t align, const char *what);
void hm_free(void *p);

#define HM_HUGE_MIN ((size_t)4 << 20)
/* madvise(MADV_HUGEPAGE) on the whole 2 MiB pages inside [p, p + size): a hint for the pages not
 * yet touched (THP "madvise" mode backs only advised ranges with huge pages); no-op without it */
void hm_advise_huge(void *p, size_t size);

/* Large buffers straight from mmap (page aligned, zero filled, lazily backed). With huge = true,
 * transparent huge pages are requested (MADV_HUGEPAGE) - a hint the kernel may ignore. */
typedef struct hm_large {
    void *ptr;
    size_t size;   /* bytes usable */
    size_t mapped; /* bytes mapped (size rounded up to the page) */
} hm_large;

hm_status hm_large_alloc(size_t size, bool huge, const char *what, hm_large *out);
void hm_large_free(hm_large *b);

/* Bump arena: many small allocations freed together. Allocation is O(1); memory comes from
 * chunks of at least chunk_size bytes; hm_arena_reset keeps the first chunk for reuse. */
typedef struct hm_arena_chunk hm_arena_chunk;
typedef struct hm_arena {
    hm_arena_chunk *head; /* current chunk, linked to older ones */
    size_t chunk_size;
    size_t total; /* bytes handed out since init/reset */
    const char *name;
} hm_arena;

/* Position in an arena, to roll back to. */
typedef struct hm_arena_mark {
    hm_arena_chunk *chunk;
    size_t used;
    size_t total;
} hm_arena_mark;

void hm_arena_init(hm_arena *a, size_t chunk_size, const char *name);
/* Returns NULL (last error set) on failure; align is a power of two. */
void *hm_arena_alloc(hm_arena *a, size_t size, size_t align);
hm_arena_mark hm_arena_get_mark(const hm_arena *a);
void hm_arena_rollback(hm_arena *a, hm_arena_mark m);
void hm_arena_reset(hm_arena *a);
void hm_arena_free(hm_arena *a);

#endif
