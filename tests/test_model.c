/* test_model.c - presets equal the real models' configs (parsed by our HF parser, itself checked
 * against transformers), hyper-parameters survive GGUF metadata (write -> read), tensor
 * categories, and llama.cpp's type fallback. */
#include <unistd.h>

#include "format/gguf.h"
#include "model/arch.h"
#include "hparams_check.h"
#include "test.h"

int main(void) {
    static const struct {
        const char *preset, *config;
    } pairs[] = {{"qwen3-30b-a3b", "Qwen3-30B-A3B"},       {"qwen3-235b-a22b", "Qwen3-235B-A22B"},
                 {"deepseek-v2-lite", "DeepSeek-V2-Lite"}, {"deepseek-v3", "DeepSeek-V3"},
                 {"mixtral-8x7b", "Mixtral-8x7B-v0.1"},    {"gpt-oss-20b", "gpt-oss-20b"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const hm_preset *pr = hm_preset_find(pairs[i].preset);
        CHECK(pr != NULL);
        if (!pr) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/data/model_configs/%s", HMOE_SOURCE_DIR,
                 pairs[i].config);
        hm_hparams hf;
        CHECK_OK(hm_hparams_from_hf_config(path, &hf));
        hm_hparams pre = pr->hp;
        /* the presets leave mscale bookkeeping to the parser */
        check_same_hparams(pairs[i].preset, &pre, &hf, true);
    }
    CHECK(hm_preset_find("nope") == NULL && hm_preset_count() == 7);

    /* every preset: metadata written to GGUF reads back the same (no tensors: layer structure
     * from leading_dense_block_count) */
    for (size_t i = 0; i < hm_preset_count(); i++) {
        const hm_preset *pr = hm_preset_at(i);
        char path[] = "/tmp/hmoe_model_XXXXXX";
        int fd = mkstemp(path);
        close(fd);
        hm_gguf_writer *w;
        CHECK_OK(hm_gguf_writer_open(path, &w));
        CHECK_OK(hm_hparams_write_gguf(w, &pr->hp, pr->name));
        CHECK_OK(hm_gguf_writer_finish(w));
        hm_gguf *g;
        CHECK_OK(hm_gguf_open(path, &g));
        hm_hparams back;
        CHECK_OK(hm_hparams_from_gguf(g, &back));
        back.tie_embeddings = pr->hp.tie_embeddings; /* no tensors in this file to tell */
        check_same_hparams(pr->name, &pr->hp, &back, false);
        hm_gguf_close(g);
        unlink(path);
    }

    /* unsupported architectures are named */
    char path[] = "/tmp/hmoe_model_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    hm_gguf_writer *w;
    CHECK_OK(hm_gguf_writer_open(path, &w));
    CHECK_OK(hm_gguf_w_str(w, "general.architecture", "llama"));
    CHECK_OK(hm_gguf_w_uint(w, "llama.block_count", HM_GGUF_UINT32, 2));
    CHECK_OK(hm_gguf_writer_finish(w));
    hm_gguf *g;
    CHECK_OK(hm_gguf_open(path, &g));
    hm_hparams hp;
    CHECK_STATUS(hm_hparams_from_gguf(g, &hp), HM_ERR_UNSUPPORTED);
    CHECK_CONTAINS(hm_last_error(), "'llama' without experts is not supported");
    hm_gguf_close(g);
    unlink(path);

    CHECK(hm_tensor_cat_gguf("blk.3.ffn_up_exps.weight") == HM_CAT_ROUTED);
    CHECK(hm_tensor_cat_gguf("blk.3.ffn_up_shexp.weight") == HM_CAT_SHARED);
    CHECK(hm_tensor_cat_gguf("blk.3.ffn_gate_inp.weight") == HM_CAT_ROUTER);
    CHECK(hm_tensor_cat_gguf("blk.3.exp_probs_b.bias") == HM_CAT_ROUTER);
    CHECK(hm_tensor_cat_gguf("blk.3.attn_k_b.weight") == HM_CAT_ATTN);
    CHECK(hm_tensor_cat_gguf("blk.3.attn_q_norm.weight") == HM_CAT_ATTN);
    CHECK(hm_tensor_cat_gguf("blk.3.ffn_norm.weight") == HM_CAT_NORM);
    CHECK(hm_tensor_cat_gguf("blk.0.ffn_down.weight") == HM_CAT_DENSE);
    CHECK(hm_tensor_cat_gguf("token_embd.weight") == HM_CAT_EMBED);
    CHECK(hm_tensor_cat_gguf("output.weight") == HM_CAT_OUTPUT);
    CHECK(hm_tensor_cat_hf("model.layers.1.mlp.experts.7.down_proj.weight") == HM_CAT_ROUTED);
    CHECK(hm_tensor_cat_hf("model.layers.1.mlp.experts.gate_up_proj") == HM_CAT_ROUTED);
    CHECK(hm_tensor_cat_hf("model.layers.1.mlp.shared_experts.up_proj.weight") == HM_CAT_SHARED);
    CHECK(hm_tensor_cat_hf("model.layers.1.mlp.gate.weight") == HM_CAT_ROUTER);
    CHECK(hm_tensor_cat_hf("model.layers.1.self_attn.q_proj.weight") == HM_CAT_ATTN);
    CHECK(hm_tensor_cat_hf("model.layers.0.mlp.down_proj.weight") == HM_CAT_DENSE);
    CHECK(hm_tensor_cat_hf("lm_head.weight") == HM_CAT_OUTPUT);
    CHECK(hm_type_for_row(HM_TYPE_Q4_K, 1408) == HM_TYPE_Q5_0);
    CHECK(hm_type_for_row(HM_TYPE_Q4_K, 2048) == HM_TYPE_Q4_K);
    CHECK(hm_type_for_row(HM_TYPE_Q6_K, 2880) == HM_TYPE_Q8_0);
    CHECK(hm_type_for_row(HM_TYPE_Q8_0, 100) == HM_TYPE_F16);
    return test_done("model");
}
