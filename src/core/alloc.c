/* alloc.c - aligned allocation, page-backed large buffers, bump arenas. */
#include "core/alloc.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static bool is_pow2(size_t x) {
    return x && !(x & (x - 1));
}

void *hm_malloc_aligned(size_t size, size_t align, const char *what) {
    if (!is_pow2(align) || align < sizeof(void *)) {
        hm_errorf(HM_ERR_INVALID_ARG, "%s: alignment %zu is not a power of two >= %zu",
                  what ? what : "alloc", align, sizeof(void *));
        return NULL;
    }
    void *p = NULL;
    size_t rounded = hm_align_up(size ? size : 1, align);
    if (rounded < size || posix_memalign(&p, align, rounded) != 0) {
        hm_errorf(HM_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes (aligned to %zu)",
                  what ? what : "alloc", size, align);
        return NULL;
    }
    if (rounded >= HM_HUGE_MIN) hm_advise_huge(p, rounded);
    return p;
}

void hm_advise_huge(void *p, size_t size) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20, a = ((uintptr_t)p + huge - 1) & ~(huge - 1),
                    e = ((uintptr_t)p + size) & ~(huge - 1);
    if (p && e > a) madvise((void *)a, e - a, MADV_HUGEPAGE); /* a hint: failure is no error */
#else
    (void)p, (void)size;
#endif
}

void *hm_calloc_aligned(size_t n, size_t elem, size_t align, const char *what) {
    size_t size;
    if (!hm_size_mul(n, elem, &size)) {
        hm_errorf(HM_ERR_NO_MEMORY, "%s: %zu x %zu bytes overflows size_t", what ? what : "alloc",
                  n, elem);
        return NULL;
    }
    void *p = hm_malloc_aligned(size, align, what);
    if (p) memset(p, 0, size);
    return p;
}

void hm_free(void *p) {
    free(p);
}

hm_status hm_large_alloc(size_t size, bool huge, const char *what, hm_large *out) {
    memset(out, 0, sizeof *out);
    if (!what) what = "buffer";
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t align = huge ? (size_t)2 << 20 : page;
    size_t mapped = hm_align_up(size ? size : 1, align);
    if (mapped < size) return hm_errorf(HM_ERR_NO_MEMORY, "%s: size %zu overflows", what, size);
    void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return hm_errorf_errno(HM_ERR_NO_MEMORY, errno, "%s: mmap of %zu bytes failed", what,
                               mapped);
    if (huge) hm_advise_huge(p, mapped);
    out->ptr = p;
    out->size = size;
    out->mapped = mapped;
    return HM_OK;
}

void hm_large_free(hm_large *b) {
    if (b && b->ptr) munmap(b->ptr, b->mapped);
    if (b) memset(b, 0, sizeof *b);
}

struct hm_arena_chunk {
    hm_arena_chunk *prev;
    size_t cap;  /* bytes in data[] */
    size_t used; /* bytes handed out from data[] */
    _Alignas(HM_CACHE_LINE) unsigned char data[];
};

void hm_arena_init(hm_arena *a, size_t chunk_size, const char *name) {
    memset(a, 0, sizeof *a);
    a->chunk_size = chunk_size ? chunk_size : (size_t)1 << 20;
    a->name = name ? name : "arena";
}

static void *chunk_take(hm_arena_chunk *c, size_t size, size_t align) {
    uintptr_t base = (uintptr_t)c->data;
    uintptr_t p = (base + c->used + align - 1) & ~(uintptr_t)(align - 1);
    size_t off = (size_t)(p - base);
    if (off > c->cap || c->cap - off < size) return NULL;
    c->used = off + size;
    return (void *)p;
}

void *hm_arena_alloc(hm_arena *a, size_t size, size_t align) {
    if (!is_pow2(align)) {
        hm_errorf(HM_ERR_INVALID_ARG, "%s: alignment %zu is not a power of two", a->name, align);
        return NULL;
    }
    void *p = a->head ? chunk_take(a->head, size, align) : NULL;
    if (!p) {
        size_t need, cap = a->chunk_size;
        if (!hm_size_add(size, align, &need)) {
            hm_errorf(HM_ERR_NO_MEMORY, "%s: request of %zu bytes overflows", a->name, size);
            return NULL;
        }
        if (need > cap) cap = need;
        size_t bytes;
        if (!hm_size_add(sizeof(hm_arena_chunk), cap, &bytes)) {
            hm_errorf(HM_ERR_NO_MEMORY, "%s: request of %zu bytes overflows", a->name, size);
            return NULL;
        }
        hm_arena_chunk *c = hm_malloc_aligned(bytes, HM_CACHE_LINE, a->name);
        if (!c) {
            hm_errorf(HM_ERR_NO_MEMORY, "%s: cannot allocate a chunk of %zu bytes", a->name, bytes);
            return NULL;
        }
        c->prev = a->head;
        c->cap = cap;
        c->used = 0;
        a->head = c;
        p = chunk_take(c, size, align);
    }
    a->total += size;
    return p;
}

hm_arena_mark hm_arena_get_mark(const hm_arena *a) {
    hm_arena_mark m = {a->head, a->head ? a->head->used : 0, a->total};
    return m;
}

void hm_arena_rollback(hm_arena *a, hm_arena_mark m) {
    while (a->head && a->head != m.chunk) {
        hm_arena_chunk *prev = a->head->prev;
        hm_free(a->head);
        a->head = prev;
    }
    if (a->head) a->head->used = m.used;
    a->total = m.total;
}

void hm_arena_reset(hm_arena *a) {
    while (a->head && a->head->prev) {
        hm_arena_chunk *prev = a->head->prev;
        hm_free(a->head);
        a->head = prev;
    }
    if (a->head) a->head->used = 0;
    a->total = 0;
}

void hm_arena_free(hm_arena *a) {
    while (a->head) {
        hm_arena_chunk *prev = a->head->prev;
        hm_free(a->head);
        a->head = prev;
    }
    a->total = 0;
}

bool hm_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap : 64, bytes;
    while (n < need)
        if (!hm_size_mul(n, 2, &n)) return false;
    if (!hm_size_mul(n, elem, &bytes)) return false;
    void *q = realloc(*p, bytes);
    if (!q) return false;
    *p = q, *cap = n;
    return true;
}

bool hm_text_append(char **p, size_t *len, size_t *cap, const char *s, size_t n) {
    size_t need;
    if (!hm_size_add(*len, n, &need) || !hm_size_add(need, 1, &need) ||
        !hm_grow((void **)p, cap, need, 1))
        return false;
    if (n) memcpy(*p + *len, s, n);
    *len += n;
    (*p)[*len] = '\0';
    return true;
}
