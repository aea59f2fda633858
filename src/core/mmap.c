/* mmap.c - read-only file mapping with madvise hints. */
#include "core/mmap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

hm_map_params hm_map_default_params(void) {
    hm_map_params p = {HM_MAP_NORMAL, false};
    return p;
}

static int advice_flag(hm_map_advice a) {
    switch (a) {
    case HM_MAP_SEQUENTIAL:
        return MADV_SEQUENTIAL;
    case HM_MAP_RANDOM:
        return MADV_RANDOM;
    case HM_MAP_WILLNEED:
        return MADV_WILLNEED;
#ifdef MADV_HUGEPAGE
    case HM_MAP_HUGEPAGE:
        return MADV_HUGEPAGE;
#endif
    default:
        return MADV_NORMAL;
    }
}

hm_status hm_file_map(const char *path, const hm_map_params *params, hm_mapped_file *out) {
    memset(out, 0, sizeof *out);
    if (!path) return hm_errorf(HM_ERR_INVALID_ARG, "mmap: path is NULL");
    hm_map_params p = params ? *params : hm_map_default_params();
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return hm_errorf_errno(e == ENOENT ? HM_ERR_NOT_FOUND : HM_ERR_IO, e, "%s: cannot open",
                               path);
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return hm_errorf_errno(HM_ERR_IO, e, "%s: cannot stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return hm_errorf(HM_ERR_IO, "%s: not a regular file", path);
    }
    out->path = strdup(path);
    if (!out->path) {
        close(fd);
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    out->size = (size_t)st.st_size;
    if (out->size > 0) {
        int flags = MAP_PRIVATE;
#ifdef MAP_POPULATE
        if (p.populate) flags |= MAP_POPULATE;
#endif
        void *m = mmap(NULL, out->size, PROT_READ, flags, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            hm_file_unmap(out);
            return hm_errorf_errno(HM_ERR_IO, e, "%s: mmap of %lld bytes failed", path,
                                   (long long)st.st_size);
        }
        out->data = m;
        if (p.advice != HM_MAP_NORMAL) madvise(m, out->size, advice_flag(p.advice));
    }
    close(fd); /* the mapping keeps the file referenced */
    return HM_OK;
}

void hm_file_unmap(hm_mapped_file *f) {
    if (!f) return;
    if (f->data) munmap((void *)f->data, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

hm_status hm_file_advise(const hm_mapped_file *f, size_t offset, size_t len, hm_map_advice advice) {
    if (!f || offset > f->size || len > f->size - offset)
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: advise range [%zu, +%zu) outside a %zu-byte file",
                         f && f->path ? f->path : "(null)", offset, len, f ? f->size : 0);
    if (len == 0) return HM_OK;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = ((uintptr_t)f->data + offset) & ~(uintptr_t)(page - 1);
    uintptr_t end = (uintptr_t)f->data + offset + len;
    if (madvise((void *)start, end - start, advice_flag(advice)) != 0)
        return hm_errorf_errno(HM_ERR_SYSTEM, errno, "%s: madvise", f->path);
    return HM_OK;
}
