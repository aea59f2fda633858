/* mmap.h - the files hmoe opens: read-only memory mapping of large files (model weights) with
 * access hints; inputs that must be regular files (never blocking on a FIFO); output files
 * written whole (a temporary next to a regular file, renamed over it when complete; devices and
 * FIFOs written in place; symlinks followed, never replaced). */
#ifndef HM_CORE_MMAP_H
#define HM_CORE_MMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#include "core/status.h"

typedef enum hm_map_advice {
    HM_MAP_NORMAL = 0,
    HM_MAP_SEQUENTIAL, /* read once front to back (loading, checksumming) */
    HM_MAP_RANDOM,     /* expert weights: no read-ahead beyond what is touched */
    HM_MAP_WILLNEED,   /* start reading now */
    HM_MAP_HUGEPAGE,   /* ask for transparent huge pages (file-backed THP needs kernel support) */
} hm_map_advice;

typedef struct hm_map_params {
    hm_map_advice advice;
    bool populate; /* MAP_POPULATE: fault every page in at map time */
} hm_map_params;

/* A mapped file. data is NULL for an empty file (size 0); reading data[0..size) is always safe. */
typedef struct hm_mapped_file {
    const uint8_t *data;
    size_t size;
    char *path; /* owned copy, for error messages */
} hm_mapped_file;

hm_map_params hm_map_default_params(void);

/* Maps path read-only. On failure *out is zeroed and the error names the path and the reason.
 * Unmap with hm_file_unmap (safe on a zeroed or already unmapped object). */
hm_status hm_file_map(const char *path, const hm_map_params *params, hm_mapped_file *out);
void hm_file_unmap(hm_mapped_file *f);

/* Applies advice to [offset, offset+len) of the mapping (rounded out to whole pages). */
hm_status hm_file_advise(const hm_mapped_file *f, size_t offset, size_t len, hm_map_advice advice);

/* ---- user-named files ---------------------------------------------------------------------- */

/* Opens path read-only without blocking (O_NONBLOCK, cleared again once open: a FIFO would block
 * a plain open until a writer comes) and refuses anything that is not a regular file: directory,
 * FIFO, device, socket ("PATH: not a regular file (a FIFO)"). *fd is the open descriptor (close
 * it), st (may be NULL) its fstat. On failure *fd is -1 and the error names the path:
 * HM_ERR_NOT_FOUND when it does not exist, else HM_ERR_IO. */
hm_status hm_file_open_regular(const char *path, int *fd, struct stat *st);

/* Reads a whole file of at most max_bytes into a malloc'd, NUL-terminated buffer (*len without
 * the NUL; the caller frees *out). A regular file (hm_file_open_regular), and with streams also a
 * pipe, FIFO or character device (/dev/stdin, a shell's <(...)), read to its end; the open never
 * blocks: a FIFO that has no writer at that moment reads as empty. More than max_bytes is
 * HM_ERR_FORMAT naming the limit. On failure *out is NULL. */
hm_status hm_file_read_all(const char *path, size_t max_bytes, bool streams, char **out,
                           size_t *len);

/* An output file being written. Where the bytes go depends on what path is when opened:
 *  - nothing, or a regular file: PATH.part is written and renamed over PATH by commit (an
 *    existing file's permission bits are kept), so PATH is either the old file or the whole new
 *    one, never a cut one;
 *  - a symlink: followed; its target is written as above (TARGET.part in the target's directory,
 *    renamed over TARGET), so the link stays a link; a dangling symlink is refused;
 *  - a character device (/dev/null, /dev/full) or a FIFO with a reader: written in place; a FIFO
 *    with no reader is refused at once rather than blocking;
 *  - a directory, block device or socket: refused.
 * Lifetime: hm_outfile_open, writes to f, hm_outfile_commit, then always hm_outfile_close (after
 * a failure or without a commit it removes PATH.part; safe on a zeroed struct). */
typedef struct hm_outfile {
    FILE *f;      /* write here (NULL after commit) */
    char *target; /* the file the bytes end up in: path, or a symlink's resolved target */
    char *tmp;    /* TARGET.part until committed; NULL when written in place */
    bool in_place;
    bool committed;
} hm_outfile;

/* On failure *o is zeroed and the error names the path and why. */
hm_status hm_outfile_open(const char *path, hm_outfile *o);
/* The name write errors should give: the temporary's, or the target's when in place. */
const char *hm_outfile_name(const hm_outfile *o);
/* Flushes, fsyncs a regular file, closes and renames into place; errors name the file. After a
 * failure nothing was renamed: call hm_outfile_close, which removes the temporary. */
hm_status hm_outfile_commit(hm_outfile *o);
void hm_outfile_close(hm_outfile *o);

/* What a write to path did, for a "wrote ... to X" line: "PATH", "TARGET (through the symlink
 * PATH)", or "PATH (a character device, written in place)" / "(a FIFO, ...)". */
void hm_outfile_describe(const char *path, char *buf, size_t cap);

#endif
