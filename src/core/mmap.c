/* mmap.c - read-only file mapping with madvise hints; user-named input and output files. */
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

/* ---- user-named files ---------------------------------------------------------------------- */

static const char *kind_name(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symlink";
    return "not a plain file";
}

static bool clear_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0;
}

/* Opens path read-only without blocking; accepts a regular file, and with streams also a FIFO,
 * pipe or character device. */
static hm_status open_input(const char *path, bool streams, int *fd, struct stat *st) {
    *fd = -1;
    if (!path) return hm_errorf(HM_ERR_INVALID_ARG, "open: path is NULL");
    int d = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (d < 0) {
        int e = errno;
        return hm_errorf_errno(e == ENOENT ? HM_ERR_NOT_FOUND : HM_ERR_IO, e, "%s: cannot open",
                               path);
    }
    struct stat sb;
    if (fstat(d, &sb) != 0) {
        int e = errno;
        close(d);
        return hm_errorf_errno(HM_ERR_IO, e, "%s: cannot stat", path);
    }
    if (!S_ISREG(sb.st_mode) && !(streams && (S_ISFIFO(sb.st_mode) || S_ISCHR(sb.st_mode)))) {
        close(d);
        return hm_errorf(HM_ERR_IO, "%s: not a regular file (%s)", path, kind_name(sb.st_mode));
    }
    if (!clear_nonblock(d)) {
        int e = errno;
        close(d);
        return hm_errorf_errno(HM_ERR_IO, e, "%s: fcntl", path);
    }
    if (st) *st = sb;
    *fd = d;
    return HM_OK;
}

hm_status hm_file_open_regular(const char *path, int *fd, struct stat *st) {
    return open_input(path, false, fd, st);
}

hm_status hm_file_read_all(const char *path, size_t max_bytes, bool streams, char **out,
                           size_t *len) {
    *out = NULL;
    *len = 0;
    int fd;
    struct stat sb = {0};
    hm_status st = open_input(path, streams, &fd, &sb);
    if (st) return st;
    if (!S_ISREG(sb.st_mode)) sb.st_size = 0;
    if ((uint64_t)sb.st_size > (uint64_t)max_bytes) {
        close(fd);
        return hm_errorf(HM_ERR_FORMAT, "%s: %lld bytes is more than the %zu this file may have",
                         path, (long long)sb.st_size, max_bytes);
    }
    /* the size is a hint: read to the end (the file may grow, /proc files report 0) */
    size_t cap = (size_t)sb.st_size + 1, n = 0;
    char *buf = malloc(cap);
    bool eof = false;
    while (buf && !eof) {
        if (n + 1 == cap && n >= max_bytes) { /* full: only the end of the file may follow */
            char probe;
            ssize_t r = read(fd, &probe, 1);
            if (r < 0 && errno == EINTR) continue;
            if (r != 0) {
                st = r > 0 ? hm_errorf(HM_ERR_FORMAT,
                                       "%s: more than the %zu bytes this file may have", path,
                                       max_bytes)
                           : hm_errorf_errno(HM_ERR_IO, errno, "%s: read error", path);
                break;
            }
            eof = true;
            break;
        }
        if (n + 1 == cap) {
            size_t ncap = cap < max_bytes / 2 ? 2 * cap + 4096 : max_bytes + 1;
            if (ncap > max_bytes + 1) ncap = max_bytes + 1;
            char *q = realloc(buf, ncap);
            if (!q) {
                st = hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory for %zu bytes", path, ncap);
                break;
            }
            buf = q, cap = ncap;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            st = hm_errorf_errno(HM_ERR_IO, errno, "%s: read error", path);
            break;
        }
        eof = r == 0;
        n += (size_t)r;
    }
    close(fd);
    if (!buf) return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory for %zu bytes", path, cap);
    if (!eof) {
        free(buf);
        return st;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return HM_OK;
}

/* ---- output files ---------------------------------------------------------------------------- */

static char *str_cat(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 1);
    if (s) memcpy(s, a, na), memcpy(s + na, b, nb + 1);
    return s;
}

static void outfile_free(hm_outfile *o) {
    free(o->target);
    free(o->tmp);
    memset(o, 0, sizeof *o);
}

/* A device or FIFO: opened as it is, without blocking on a FIFO that has no reader. */
static hm_status open_in_place(const char *path, hm_outfile *o) {
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        if (e == ENXIO) return hm_errorf(HM_ERR_IO, "%s: a FIFO with no reader", path);
        return hm_errorf_errno(HM_ERR_IO, e, "%s: cannot open for writing", path);
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !(S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode)) ||
        !clear_nonblock(fd)) {
        close(fd);
        return hm_errorf(HM_ERR_IO, "%s: changed while it was opened", path);
    }
    o->f = fdopen(fd, "wb");
    if (!o->f) {
        close(fd);
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    o->in_place = true;
    return HM_OK;
}

/* o->target: a regular file or nothing yet. Writes TARGET.part with the old file's mode bits. */
static hm_status open_tmp(hm_outfile *o, const struct stat *old) {
    if (!(o->tmp = str_cat(o->target, ".part")))
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", o->target);
    /* O_NOFOLLOW + O_NONBLOCK: a symlink or FIFO left at TARGET.part is refused, not followed */
    int fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP)
            return hm_errorf(HM_ERR_IO, "%s: a symlink is in the way of the temporary file",
                             o->tmp);
        return hm_errorf_errno(HM_ERR_IO, e, "%s: cannot create (as %s)", o->target, o->tmp);
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return hm_errorf_errno(HM_ERR_IO, e, "%s: cannot stat", o->tmp);
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return hm_errorf(HM_ERR_IO, "%s: %s is in the way of the temporary file", o->tmp,
                         kind_name(sb.st_mode));
    }
    if (!clear_nonblock(fd) || (old && fchmod(fd, old->st_mode & 07777) != 0)) {
        int e = errno;
        close(fd);
        unlink(o->tmp);
        return hm_errorf_errno(HM_ERR_IO, e, "%s: cannot set up", o->tmp);
    }
    if (!(o->f = fdopen(fd, "wb"))) {
        close(fd);
        unlink(o->tmp);
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", o->tmp);
    }
    return HM_OK;
}

static hm_status outfile_open(const char *path, hm_outfile *o) {
    struct stat ls, sb;
    if (lstat(path, &ls) != 0) {
        if (errno != ENOENT) return hm_errorf_errno(HM_ERR_IO, errno, "%s", path);
        if (!(o->target = strdup(path))) return hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
        return open_tmp(o, NULL);
    }
    sb = ls;
    if (S_ISLNK(ls.st_mode) && stat(path, &sb) != 0) {
        int e = errno;
        return e == ENOENT ? hm_errorf(HM_ERR_IO,
                                       "%s: a symlink to a missing file (not followed: create "
                                       "the target or remove the link)",
                                       path)
                           : hm_errorf_errno(HM_ERR_IO, e, "%s", path);
    }
    if (S_ISREG(sb.st_mode)) {
        if (S_ISLNK(ls.st_mode)) {
            char *real = realpath(path, NULL);
            if (!real) return hm_errorf_errno(HM_ERR_IO, errno, "%s: cannot resolve", path);
            o->target = real;
        } else if (!(o->target = strdup(path))) {
            return hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
        }
        return open_tmp(o, &sb);
    }
    if (!S_ISCHR(sb.st_mode) && !S_ISFIFO(sb.st_mode))
        return hm_errorf(HM_ERR_IO,
                         "%s: %s, not a file, character device or FIFO: refusing to write to it",
                         path, kind_name(sb.st_mode));
    if (!(o->target = strdup(path))) return hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
    return open_in_place(path, o);
}

hm_status hm_outfile_open(const char *path, hm_outfile *o) {
    memset(o, 0, sizeof *o);
    if (!path || !*path) return hm_errorf(HM_ERR_INVALID_ARG, "output file: no path given");
    hm_status st = outfile_open(path, o);
    if (st) outfile_free(o);
    return st;
}

const char *hm_outfile_name(const hm_outfile *o) {
    return o->tmp ? o->tmp : o->target ? o->target : "(no file)";
}

hm_status hm_outfile_commit(hm_outfile *o) {
    if (!o->f) return hm_errorf(HM_ERR_INVALID_ARG, "%s: not open", hm_outfile_name(o));
    const char *name = hm_outfile_name(o);
    hm_status st = HM_OK;
    if (fflush(o->f) != 0)
        st = hm_errorf_errno(HM_ERR_IO, errno, "%s: write failed", name);
    else if (ferror(o->f))
        st = hm_errorf(HM_ERR_IO, "%s: write failed", name);
    else if (!o->in_place && fsync(fileno(o->f)) != 0 && errno != EINVAL)
        st = hm_errorf_errno(HM_ERR_IO, errno, "%s: fsync failed", name);
    if (fclose(o->f) != 0 && st == HM_OK)
        st = hm_errorf_errno(HM_ERR_IO, errno, "%s: close failed", name);
    o->f = NULL;
    if (st == HM_OK && o->tmp && rename(o->tmp, o->target) != 0)
        st = hm_errorf_errno(HM_ERR_IO, errno, "%s: cannot rename into place", o->target);
    o->committed = st == HM_OK;
    return st;
}

void hm_outfile_close(hm_outfile *o) {
    if (!o) return;
    if (o->f) fclose(o->f);
    if (o->tmp && !o->committed) unlink(o->tmp);
    outfile_free(o);
}

void hm_outfile_describe(const char *path, char *buf, size_t cap) {
    struct stat ls, sb;
    if (!cap) return;
    if (lstat(path, &ls) != 0 || stat(path, &sb) != 0) {
        snprintf(buf, cap, "%s", path);
        return;
    }
    if (S_ISREG(sb.st_mode)) {
        char *real = S_ISLNK(ls.st_mode) ? realpath(path, NULL) : NULL;
        if (real)
            snprintf(buf, cap, "%s (through the symlink %s)", real, path);
        else
            snprintf(buf, cap, "%s", path);
        free(real);
        return;
    }
    snprintf(buf, cap, "%s (%s, written in place)", path, kind_name(sb.st_mode));
}

/* ---- mapping --------------------------------------------------------------------------------- */

hm_status hm_file_map(const char *path, const hm_map_params *params, hm_mapped_file *out) {
    memset(out, 0, sizeof *out);
    if (!path) return hm_errorf(HM_ERR_INVALID_ARG, "mmap: path is NULL");
    hm_map_params p = params ? *params : hm_map_default_params();
    int fd;
    struct stat st;
    hm_status s = hm_file_open_regular(path, &fd, &st); /* never blocks on a FIFO */
    if (s) return s;
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
