/* hparams_check.h - one field-by-field comparison of two hm_hparams for the tests (presets
 * against parsed configs, GGUF metadata round trips, conversions). */
#ifndef HMOE_TEST_HPARAMS_CHECK_H
#define HMOE_TEST_HPARAMS_CHECK_H

#include "model/arch.h"
#include "test.h"

/* with_ffn_inter: compare ffn_inter too (a GGUF written from a preset of an all-MoE model does
 * not carry it) */
static void check_same_hparams(const char *what, const hm_hparams *a, const hm_hparams *b,
                               bool with_ffn_inter) {
#define SAME(field)                                                                                \
    CHECK_MSG(a->field == b->field, "%s: " #field ": %g vs %g", what, (double)a->field,            \
              (double)b->field)
    SAME(arch);
    SAME(vocab_size);
    SAME(hidden);
    SAME(n_layers);
    SAME(n_heads);
    SAME(n_kv_heads);
    SAME(head_dim);
    SAME(v_head_dim);
    SAME(n_experts);
    SAME(n_experts_used);
    SAME(moe_inter);
    SAME(n_shared_experts);
    SAME(shared_inter);
    SAME(first_k_dense);
    SAME(q_lora_rank);
    SAME(kv_lora_rank);
    SAME(qk_rope_head_dim);
    SAME(qk_nope_head_dim);
    SAME(rope_dim);
    SAME(rope_theta);
    SAME(rope_type);
    SAME(rope_factor);
    SAME(rope_orig_ctx);
    SAME(norm_topk_prob);
    SAME(gating);
    SAME(routed_scaling);
    SAME(n_group);
    SAME(topk_group);
    SAME(qk_norm);
    SAME(attn_bias);
    SAME(attn_sinks);
    SAME(expert_bias);
    SAME(sliding_window);
    SAME(act);
    SAME(max_ctx);
    SAME(norm_eps);
    SAME(tie_embeddings);
    SAME(score_correction_bias);
    SAME(shared_gate);
    if (with_ffn_inter) SAME(ffn_inter);
#undef SAME
    for (uint32_t il = 0; il < a->n_layers; il++) {
        CHECK_MSG(hm_hparams_layer_is_moe(a, il) == hm_hparams_layer_is_moe(b, il),
                  "%s: layer %u moe", what, il);
        CHECK_MSG(a->layer_dense[il] == b->layer_dense[il], "%s: layer %u dense: %d vs %d", what,
                  il, a->layer_dense[il], b->layer_dense[il]);
        CHECK_MSG(a->layer_sliding[il] == b->layer_sliding[il], "%s: layer %u sliding", what, il);
    }
}

#endif
