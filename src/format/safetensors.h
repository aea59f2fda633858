/* safetensors.h - strict, zero-copy reader of safetensors files and sharded Hugging Face models.
 *
 * Format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N, N
 * bytes of UTF-8 JSON starting with '{' (may be padded with trailing spaces), then the data
 * section. The JSON maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} with
 * offsets relative to the data section, plus an optional "__metadata__" string-to-string map.
 * A sharded model is a directory with model.safetensors.index.json whose "weight_map" maps each
 * tensor name to the shard file holding it.
 *
 * Usage:
 *
 *     hm_safetensors *st;
 *     if (hm_st_open("/models/Qwen3-30B-A3B", &st) != HM_OK) {
 *         fprintf(stderr, "%s\n", hm_last_error());
 *         return 1;
 *     }
 *     const hm_st_tensor *t = hm_st_find(st, "model.embed_tokens.weight");
 *     if (t && t->dtype == HM_ST_BF16) use(t->data, t->shape[0], t->shape[1]);
 *     hm_st_close(st);
 *
 * Everything is validated at open (see safetensors.c for the list of rules); a handle that opened
 * describes tensors that lie inside their shard's data section and do not overlap. Holes between
 * tensors are allowed (logged at debug level). Errors are HM_ERR_FORMAT (malformed input),
 * HM_ERR_UNSUPPORTED (valid safetensors hmoe cannot use: sub-byte or complex dtypes, more than
 * HM_ST_MAX_DIMS dimensions), HM_ERR_NOT_FOUND / HM_ERR_IO (files), HM_ERR_NO_MEMORY; the message
 * (hm_last_error) names the file, the tensor, the field and what was expected.
 *
 * A handle is immutable after open: every query may be called from any number of threads at once.
 */
#ifndef HM_FORMAT_SAFETENSORS_H
#define HM_FORMAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* Header lengths above this are rejected as corrupt (the reference implementation uses 100 MB). */
#define HM_ST_MAX_HEADER ((uint64_t)100 << 20)
/* Most dimensions a tensor may have here; the format itself has no limit. */
#define HM_ST_MAX_DIMS 8

typedef enum hm_st_dtype {
    HM_ST_F64 = 0,
    HM_ST_F32,
    HM_ST_F16,
    HM_ST_BF16,
    HM_ST_F8_E4M3, /* float8_e4m3fn: DeepSeek-V3 style FP8 weights */
    HM_ST_F8_E5M2,
    HM_ST_F8_E8M0, /* float8_e8m0fnu: power-of-two scales (MX formats) */
    HM_ST_I8,
    HM_ST_U8,
    HM_ST_I16,
    HM_ST_U16,
    HM_ST_I32,
    HM_ST_U32,
    HM_ST_I64,
    HM_ST_U64,
    HM_ST_BOOL, /* one byte per element */
    HM_ST_DTYPE_COUNT
} hm_st_dtype;

/* The format's spelling ("F32", "BF16", "F8_E4M3", ...); "?" for a value out of range. */
const char *hm_st_dtype_name(hm_st_dtype dt);
/* Bytes per element (1, 2, 4 or 8); 0 for a value out of range. */
size_t hm_st_dtype_size(hm_st_dtype dt);
/* Parses a dtype spelling. HM_ERR_UNSUPPORTED for dtypes of the format that hmoe does not read
 * (F4, F6_E2M3, F6_E3M2, C64), HM_ERR_FORMAT for anything else unknown; the message lists the
 * accepted names. */
hm_status hm_st_dtype_parse(const char *s, hm_st_dtype *out);

/* One tensor. All pointers are owned by the handle and valid until hm_st_close. */
typedef struct hm_st_tensor {
    const char *name; /* NUL-terminated */
    hm_st_dtype dtype;
    uint32_t n_dims;               /* 0 (a scalar) .. HM_ST_MAX_DIMS */
    int64_t shape[HM_ST_MAX_DIMS]; /* shape[0..n_dims), outermost first; the rest are 0 */
    uint64_t n_elements;           /* product of the shape: 1 for a scalar, 0 if a dim is 0 */
    uint64_t nbytes;               /* n_elements * hm_st_dtype_size(dtype) */
    const void *data;              /* nbytes bytes inside the shard's mapping (read-only). When
                                      nbytes is 0 it may point one past the end: do not read */
    uint32_t shard;                /* index for hm_st_shard_at */
    uint64_t file_offset;          /* offset of data within the shard file */
} hm_st_tensor;

/* One mapped file of the model (a single-file model has exactly one shard). */
typedef struct hm_st_shard {
    const char *path;    /* as opened (directory + file name), or the name given to parse_memory */
    const uint8_t *base; /* the whole file: size bytes (NULL when size is 0) */
    uint64_t size;
    uint64_t data_start; /* 8 + header length: where the data section begins */
    size_t n_tensors;
} hm_st_shard;

typedef struct hm_safetensors hm_safetensors;

/* Opens a model: path is a safetensors file, an index file (any name ending in ".json", e.g.
 * model.safetensors.index.json), or a directory holding model.safetensors (preferred, as
 * transformers does) or model.safetensors.index.json.
 * Every shard is mmapped read-only (hm_file_map) and validated; with an index, every shard named
 * by weight_map must exist next to it, hold exactly the tensors weight_map assigns to it, and no
 * tensor may appear in two shards. Shard names containing '/' or ".." are rejected.
 * On success *out owns the mappings; free it with hm_st_close. On failure *out is NULL, nothing
 * is leaked and hm_last_error() says why. */
hm_status hm_st_open(const char *path, hm_safetensors **out);

/* Opens exactly one safetensors file, whatever its name. Same ownership as hm_st_open. */
hm_status hm_st_open_file(const char *path, hm_safetensors **out);

/* Parses a safetensors image already in memory. The handle BORROWS data: the caller keeps it
 * readable and unchanged until hm_st_close, and tensor data pointers point into it. name (may be
 * NULL: "(memory)") is used in error messages and as the shard path; it is copied. */
hm_status hm_st_parse_memory(const void *data, size_t size, const char *name, hm_safetensors **out);

/* Unmaps and frees everything; NULL is a no-op. Pointers obtained from the handle die with it. */
void hm_st_close(hm_safetensors *st);

/* Tensors are numbered 0..n-1 in order of shard, then of file offset (the order that reads each
 * file front to back). hm_st_tensor_at returns NULL for i >= n. */
size_t hm_st_n_tensors(const hm_safetensors *st);
const hm_st_tensor *hm_st_tensor_at(const hm_safetensors *st, size_t i);

/* Lookup by exact name in O(log n); NULL when absent (no error is set). */
const hm_st_tensor *hm_st_find(const hm_safetensors *st, const char *name);
/* Like hm_st_find, but HM_ERR_NOT_FOUND with a message naming the tensor and the model. */
hm_status hm_st_get(const hm_safetensors *st, const char *name, const hm_st_tensor **out);

/* The block scales of an FP8 E4M3 weight t as DeepSeek-V3 and Qwen3-*-FP8 store them: the tensor
 * "<t's name>_scale_inv" of [ceil(rows / 128)][ceil(cols / 128)] F32 or BF16 values
 * (w ~ fp8 * scale). HM_ERR_UNSUPPORTED when t is not 2-D or has no such tensor, HM_ERR_FORMAT
 * for a wrong shape or dtype; the message names both tensors. */
hm_status hm_st_fp8_scales(const hm_safetensors *st, const hm_st_tensor *t,
                           const hm_st_tensor **out);
/* Value i of a scale tensor hm_st_fp8_scales returned, as a float. */
float hm_st_scale_at(const hm_st_tensor *s, size_t i);

/* Shards, in order of file name. hm_st_shard_at returns NULL for i >= n. */
size_t hm_st_n_shards(const hm_safetensors *st);
const hm_st_shard *hm_st_shard_at(const hm_safetensors *st, size_t i);

/* The "__metadata__" maps of all shards merged (e.g. {"format": "pt"}), sorted by key; where
 * shards disagree on a key, the first shard's value is kept. Strings are owned by the handle. */
size_t hm_st_n_metadata(const hm_safetensors *st);
/* Returns HM_ERR_INVALID_ARG for i >= n; key/value may be NULL when not wanted. */
hm_status hm_st_metadata_at(const hm_safetensors *st, size_t i, const char **key,
                            const char **value);
/* The value of key, or NULL when absent. */
const char *hm_st_metadata_get(const hm_safetensors *st, const char *key);

#endif
