/* mmap.h - read-only memory mapping of large files (model weights), with access hints. */
#ifndef HM_CORE_MMAP_H
#define HM_CORE_MMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

#endif
