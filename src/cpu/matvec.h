/* matvec.h - y = W x for a few tokens (decode) over a row range: the unit of work a thread takes.
 * Weights are read once per call whatever the token count (tokens are the inner loop). */
#ifndef HM_CPU_MATVEC_H
#define HM_CPU_MATVEC_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/ops.h"

/* A weight matrix as GGUF stores it: `rows` rows of `cols` elements (ne0 = cols contiguous). */
typedef struct hm_matrix {
    uint32_t type;
    const void *data;
    int64_t rows, cols;
    size_t row_bytes;
} hm_matrix;

/* Fails (naming the type and cols) when cols is not a whole number of blocks. */
hm_status hm_matrix_init(hm_matrix *m, uint32_t type, const void *data, int64_t rows, int64_t cols);

/* HM_OK when weights of `type` can be multiplied; else HM_ERR_UNSUPPORTED naming the tensor and
 * its type (files with such tensors still open: the error comes when the tensor is used). */
hm_status hm_kernel_check(uint32_t type, const char *tensor_name);

/* The variant's kernel for type, else the reference one; NULL if no kernel exists at all. */
hm_vec_dot_fn hm_vec_dot_for(const hm_cpu_ops *ops, uint32_t type);

/* y[t * y_stride + r] = W[r] . x_t for r in [r0, r1) and t < n_tok, where x_t starts at
 * xq + t * x_stride bytes (activations converted with hm_act_convert for W's type). */
void hm_matvec_rows(hm_vec_dot_fn dot, const hm_matrix *w, const void *xq, size_t x_stride,
                    int n_tok, float *y, size_t y_stride, int64_t r0, int64_t r1);

#endif
