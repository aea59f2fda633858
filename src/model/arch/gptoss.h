/* gptoss.h - gpt-oss's routed experts in a Hugging Face checkpoint, found and checked once for
 * the loader (model.c, which binds them) and the converter (convert.c, which writes them as
 * llama.cpp's ffn_{gate,up,down}_exps). */
#ifndef HM_MODEL_ARCH_GPTOSS_H
#define HM_MODEL_ARCH_GPTOSS_H

#include <stdbool.h>
#include <stdint.h>

#include "format/hparams.h"
#include "format/safetensors.h"

/* The projections: gate and up share the fused gate_up_proj (their rows interleaved), down is
 * down_proj. */
enum { HM_GPTOSS_GATE = 0, HM_GPTOSS_UP = 1, HM_GPTOSS_DOWN = 2 };

/* One layer's fused tensor of a projection, in either layout:
 *   as released: MXFP4 in "<proj>_blocks" [E][R][C/32][16] (U8; values 2j and 2j + 1 in the low
 *   and high nibbles of byte j) and "<proj>_scales" [E][R][C/32] (U8, E8M0 exponents);
 *   transformers' float save: "<proj>" [E][C][R] (F32, F16 or BF16; each expert transposed);
 * or its bias "<proj>_bias" [E][R] (F32, F16 or BF16); R the packed outputs (2 x intermediate
 * for gate_up, gate and up interleaved; hidden for down), C the inputs. */
typedef struct hm_gptoss_experts {
    const hm_st_tensor *blocks, *scales; /* the weights as released, else NULL */
    const hm_st_tensor *w;               /* the weights in the float layout, else NULL */
    const hm_st_tensor *bias;            /* the bias (when asked for), else NULL */
    int64_t rows_packed, cols;           /* R, C */
    char missing[160];                   /* HM_ERR_NOT_FOUND: the name of the missing tensor */
} hm_gptoss_experts;

/* Finds and checks layer il's weights (bias false) or bias (bias true) of projection p
 * (HM_GPTOSS_*) in st: presence, dtypes and shapes against hp (n_experts, hidden, moe_inter).
 * HM_ERR_NOT_FOUND names the missing tensor (also in out->missing), HM_ERR_FORMAT the tensor, its
 * dtype and shape and the expected ones, HM_ERR_UNSUPPORTED a dtype that cannot be read; every
 * message starts with path. */
hm_status hm_gptoss_experts_find(const hm_safetensors *st, const char *path, const hm_hparams *hp,
                                 unsigned il, int p, bool bias, hm_gptoss_experts *out);

/* The packed row (of rows_packed) that holds row r of projection p: gate 2r, up 2r + 1, down r. */
static inline uint64_t hm_gptoss_row(int p, uint64_t r) {
    return p == HM_GPTOSS_DOWN ? r : 2 * r + (uint64_t)p;
}

#endif
