/* rope.h - rotary embedding frequencies of a model, with its RoPE scaling (linear, dynamic NTK,
 * YaRN with mscale, llama3), as transformers' ROPE_INIT_FUNCTIONS compute them. Backends take
 * the frequencies and the attention factor from here; the rotation itself is theirs. */
#ifndef HMOE_MODEL_ROPE_H
#define HMOE_MODEL_ROPE_H

#include <stdint.h>

#include "format/hparams.h"

/* Inverse frequencies inv[rope_dim / 2] and the factor that multiplies cos and sin (YaRN's
 * attention factor; 1 for the others) for a sequence of seq_len positions. seq_len matters only
 * to dynamic NTK, whose base grows once a sequence passes max_position_embeddings
 * (transformers' _compute_dynamic_ntk_parameters with seq_len = the largest position + 1 of
 * the forward call); 0 gives the frequencies of the original context. */
void hm_rope_freqs(const hm_hparams *hp, int64_t seq_len, float *inv, float *attn_factor);

/* True when the frequencies depend on the sequence length (dynamic NTK past the original
 * context): the caller computes them per sequence and batch then. */
static inline bool hm_rope_dynamic(const hm_hparams *hp, int64_t seq_len) {
    return hp->rope_type == HM_ROPE_DYNAMIC && seq_len > (int64_t)hp->rope_orig_ctx;
}

/* The name of a scaling type as transformers spells it ("default", "linear", ...). */
const char *hm_rope_type_name(hm_rope_type t);

#endif
