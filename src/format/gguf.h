/* gguf.h - GGUF (v2/v3) reader over a read-only mapping, strictly validated, and a streaming
 * writer. Tensor names, metadata keys and type ids are llama.cpp's.
 *
 * Reader ownership: hm_gguf_open maps the file and owns the mapping; every pointer handed out
 * (strings, arrays, tensor data) points into it and lives until hm_gguf_close. Strings are NOT
 * NUL-terminated (hm_gguf_str has a length), except tensor names (hm_gguf_tensor.name).
 * hm_gguf_parse_memory parses a caller-owned buffer that must outlive the handle. */
#ifndef HM_FORMAT_GGUF_H
#define HM_FORMAT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "quant/types.h"

#define HM_GGUF_MAGIC             0x46554747u /* "GGUF" little-endian */
#define HM_GGUF_DEFAULT_ALIGNMENT 32
#define HM_GGUF_MAX_DIMS          4
#define HM_GGUF_MAX_NAME          63 /* ggml's GGML_MAX_NAME - 1 */
#define HM_GGUF_MAX_DEPTH         8  /* nesting of arrays in arrays */

typedef enum hm_gguf_vtype {
    HM_GGUF_UINT8 = 0,
    HM_GGUF_INT8 = 1,
    HM_GGUF_UINT16 = 2,
    HM_GGUF_INT16 = 3,
    HM_GGUF_UINT32 = 4,
    HM_GGUF_INT32 = 5,
    HM_GGUF_FLOAT32 = 6,
    HM_GGUF_BOOL = 7,
    HM_GGUF_STRING = 8,
    HM_GGUF_ARRAY = 9,
    HM_GGUF_UINT64 = 10,
    HM_GGUF_INT64 = 11,
    HM_GGUF_FLOAT64 = 12,
    HM_GGUF_VTYPE_COUNT
} hm_gguf_vtype;

typedef struct hm_gguf_str {
    const char *ptr;
    uint64_t len;
} hm_gguf_str;

typedef struct hm_gguf_value hm_gguf_value;
struct hm_gguf_value {
    hm_gguf_vtype type;
    union {
        uint64_t u; /* UINT8..UINT64 */
        int64_t i;  /* INT8..INT64 */
        double f;   /* FLOAT32, FLOAT64 */
        bool b;
        hm_gguf_str s;
    } v;
    /* ARRAY */
    hm_gguf_vtype arr_type;
    uint64_t arr_n;
    const uint8_t *arr_raw;   /* packed little-endian elements (fixed-size element types) */
    hm_gguf_str *arr_strs;    /* [arr_n] when arr_type == STRING */
    hm_gguf_value *arr_items; /* [arr_n] when arr_type == ARRAY */
    /* the encoded value (type id excluded) as it sits in the file, for exact copies */
    const uint8_t *raw;
    uint64_t raw_len;
};

typedef struct hm_gguf_kv {
    hm_gguf_str key;
    hm_gguf_value val;
    uint64_t offset; /* file offset of the key */
} hm_gguf_kv;

typedef struct hm_gguf_tensor {
    char name[HM_GGUF_MAX_NAME + 1];
    uint32_t n_dims;
    uint64_t ne[HM_GGUF_MAX_DIMS]; /* ne[0] is the contiguous dimension; unused dims are 1 */
    uint32_t type;                 /* hm_type id */
    uint64_t offset;               /* from the start of the data section */
    uint64_t n_elements;
    uint64_t bytes;
    const uint8_t *data;
    uint64_t info_offset; /* file offset of its tensor-info record */
} hm_gguf_tensor;

typedef struct hm_gguf hm_gguf;

hm_status hm_gguf_open(const char *path, hm_gguf **out);
hm_status hm_gguf_parse_memory(const void *data, size_t size, const char *name, hm_gguf **out);
void hm_gguf_close(hm_gguf *g); /* NULL is a no-op */

const char *hm_gguf_name(const hm_gguf *g); /* path or the name given */
uint32_t hm_gguf_version(const hm_gguf *g);
uint32_t hm_gguf_alignment(const hm_gguf *g);
uint64_t hm_gguf_data_offset(const hm_gguf *g);
uint64_t hm_gguf_file_size(const hm_gguf *g);

uint64_t hm_gguf_n_kv(const hm_gguf *g);
const hm_gguf_kv *hm_gguf_kv_at(const hm_gguf *g, uint64_t i);
const hm_gguf_kv *hm_gguf_find_kv(const hm_gguf *g, const char *key); /* NULL when absent */

uint64_t hm_gguf_n_tensors(const hm_gguf *g);
const hm_gguf_tensor *hm_gguf_tensor_at(const hm_gguf *g, uint64_t i);
const hm_gguf_tensor *hm_gguf_find_tensor(const hm_gguf *g, const char *name);

/* Typed getters: HM_ERR_NOT_FOUND when the key is absent, HM_ERR_FORMAT when it has another type
 * or does not fit; the message names the file and the key. get_uint accepts any integer type
 * holding a value >= 0; get_float accepts FLOAT32/FLOAT64 (and integers). */
hm_status hm_gguf_get_uint(const hm_gguf *g, const char *key, uint64_t *out);
hm_status hm_gguf_get_int(const hm_gguf *g, const char *key, int64_t *out);
hm_status hm_gguf_get_float(const hm_gguf *g, const char *key, double *out);
hm_status hm_gguf_get_bool(const hm_gguf *g, const char *key, bool *out);
hm_status hm_gguf_get_str(const hm_gguf *g, const char *key, hm_gguf_str *out);
/* Array of any element type: returns the value (arr_type, arr_n, ...). */
hm_status hm_gguf_get_arr(const hm_gguf *g, const char *key, const hm_gguf_value **out);

/* Element i of a fixed-size numeric array, converted. */
uint64_t hm_gguf_arr_uint(const hm_gguf_value *arr, uint64_t i);
int64_t hm_gguf_arr_int(const hm_gguf_value *arr, uint64_t i);
double hm_gguf_arr_float(const hm_gguf_value *arr, uint64_t i);

const char *hm_gguf_vtype_name(uint32_t t);
size_t hm_gguf_vtype_size(uint32_t t); /* bytes of a fixed-size scalar; 0 for STRING/ARRAY */
bool hm_gguf_str_eq(hm_gguf_str s, const char *c);

/* ---- writer -------------------------------------------------------------------------------
 * Metadata and tensor infos are buffered (small); tensor data is streamed in the order the
 * tensors were declared, any chunk size, in constant memory. The file is written as an hm_outfile
 * (core/file.h): as PATH.part, renamed to PATH by hm_gguf_writer_finish only when every byte has
 * been written, so an interrupted write never leaves a truncated file under the final name (a
 * symlink's target is written that way and the link kept; a device or FIFO is written in place). */
typedef struct hm_gguf_writer hm_gguf_writer;

hm_status hm_gguf_writer_open(const char *path, hm_gguf_writer **out);
hm_status hm_gguf_w_uint(hm_gguf_writer *w, const char *key, hm_gguf_vtype type, uint64_t v);
hm_status hm_gguf_w_int(hm_gguf_writer *w, const char *key, hm_gguf_vtype type, int64_t v);
hm_status hm_gguf_w_f32(hm_gguf_writer *w, const char *key, float v);
hm_status hm_gguf_w_f64(hm_gguf_writer *w, const char *key, double v);
hm_status hm_gguf_w_bool(hm_gguf_writer *w, const char *key, bool v);
hm_status hm_gguf_w_str(hm_gguf_writer *w, const char *key, const char *v);
/* Array of fixed-size elements, packed little-endian (as they would sit in memory on x86). */
hm_status hm_gguf_w_arr(hm_gguf_writer *w, const char *key, hm_gguf_vtype elem, uint64_t n,
                        const void *data);
/* Array of strings; lens may be NULL (then strlen). */
hm_status hm_gguf_w_arr_str(hm_gguf_writer *w, const char *key, uint64_t n, const char *const *strs,
                            const uint64_t *lens);
/* Copies a key/value from a reader exactly (any type, nested arrays included); key NULL keeps the
 * original key. */
hm_status hm_gguf_w_copy_kv(hm_gguf_writer *w, const char *key, const hm_gguf_kv *kv);
/* Declares a tensor (all metadata must be added before the first tensor). */
hm_status hm_gguf_w_tensor(hm_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const uint64_t *ne);
/* Appends data of the declared tensors, in declaration order. */
hm_status hm_gguf_w_data(hm_gguf_writer *w, const void *data, size_t bytes);
/* Bytes still expected for the tensor being written (0 when all are complete). */
uint64_t hm_gguf_w_pending(const hm_gguf_writer *w);
/* Completes the file: checks every tensor got all its bytes, flushes, renames into place. Frees w
 * whatever the outcome (on failure the partial file is removed). */
hm_status hm_gguf_writer_finish(hm_gguf_writer *w);
/* Abandons the file (removes PATH.part) and frees w. NULL is a no-op. */
void hm_gguf_writer_abort(hm_gguf_writer *w);

#endif
