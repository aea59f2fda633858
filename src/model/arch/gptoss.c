/* gptoss.c - gpt-oss (20b, 120b), as transformers' GptOssDecoderLayer computes it:
 *   h = x + o_proj(attn(rope(q_proj(rms(x)) + bq), rope(k_proj(...) + bk), v_proj(...) + bv)) + bo
 *   x' = h + moe(rms(h))
 * GQA attention with a learned sink logit per head joining each softmax's denominator, over the
 * last sliding_window positions on the sliding layers (every other one, from layer 0); the NeoX
 * rotation with YaRN (not truncated); a router with a bias whose top-k logits are softmaxed (the
 * renormalised softmax top-k); experts of the clamped SwiGLU (alpha 1.702, limit 7) with biases,
 * MXFP4 in the released checkpoints. Runs from llama.cpp GGUF files and from the Hugging Face
 * checkpoints (model.c repacks their MXFP4 blocks and scales); the CPU and the CUDA backend.
 * `hmoe convert` writes the checkpoints as llama.cpp's gpt-oss GGUFs (the MXFP4 experts repacked
 * byte for byte, as convert_hf_to_gguf.py's GptOssModel does).
 * Fixtures: tests/gen/gptoss_fixtures.py (transformers' logits; the weights written as a llama.cpp
 * GGUF, and one checkpoint as released, in MXFP4). */
#include "model/arch/gptoss.h"

#include <stdio.h>
#include <string.h>

#include "model/arch/arch_builders.h"
#include "model/arch/registry.h"
#include "model/blocks.h"

hm_status hm_gptoss_build(const hm_model *m, const hm_layer *layers, hm_graph *g) {
    return hm_build_layers(m, layers, false, g);
}

/* llama.cpp's gpt-oss names <-> transformers'; the experts and their biases come from the fused
 * gate_up_proj (gate and up rows interleaved) and down_proj, found by hm_gptoss_experts_find */
static const hm_name_map gptoss_layer[] = {
    {"attn_norm.weight", "input_layernorm.weight", 0, NULL, 0, 0},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", 0, NULL, 0, 0},
    HM_NAMES_GQA,
    {"attn_output.bias", "self_attn.o_proj.bias", 0, NULL, 0, 0},
    {"attn_sinks.weight", "self_attn.sinks", 0, NULL, 0, 0},
    {"ffn_gate_inp.weight", "mlp.router.weight", 0, NULL, 0, 0},
    {"ffn_gate_inp.bias", "mlp.router.bias", 0, NULL, 0, 0},
    {"ffn_gate_exps.weight", "mlp.experts.gate_up_proj", HM_MAP_GPTOSS, NULL, HM_GPTOSS_GATE, 0},
    {"ffn_up_exps.weight", "mlp.experts.gate_up_proj", HM_MAP_GPTOSS, NULL, HM_GPTOSS_UP, 0},
    {"ffn_down_exps.weight", "mlp.experts.down_proj", HM_MAP_GPTOSS, NULL, HM_GPTOSS_DOWN, 0},
    {"ffn_gate_exps.bias", "mlp.experts.gate_up_proj_bias", HM_MAP_GPTOSS, NULL, HM_GPTOSS_GATE, 0},
    {"ffn_up_exps.bias", "mlp.experts.gate_up_proj_bias", HM_MAP_GPTOSS, NULL, HM_GPTOSS_UP, 0},
    {"ffn_down_exps.bias", "mlp.experts.down_proj_bias", HM_MAP_GPTOSS, NULL, HM_GPTOSS_DOWN, 0},
};
static const hm_arch_names gptoss_names = {HM_ARCH_GPTOSS, gptoss_layer,
                                           sizeof gptoss_layer / sizeof *gptoss_layer};

const hm_arch_desc hm_arch_gptoss = {HM_ARCH_GPTOSS,      "gpt_oss",       "gpt-oss",    "gpt_oss",
                                     "GptOssForCausalLM", hm_gptoss_build, &gptoss_names};

/* A tensor's dtype and shape against the expected ones, naming both ("U8 [4 x 64 x 1], expected
 * U8 [4 x 64 x 2]"). */
static hm_status check_st(const char *path, const hm_st_tensor *t, hm_st_dtype dtype,
                          uint32_t n_dims, const int64_t *want) {
    bool ok = t->dtype == dtype && t->n_dims == n_dims;
    for (uint32_t i = 0; ok && i < n_dims; i++) ok = t->shape[i] == want[i];
    if (ok) return HM_OK;
    char got[128] = "", exp[128] = "";
    for (uint32_t i = 0; i < t->n_dims && i < HM_ST_MAX_DIMS; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? " x " : "",
                 (long long)t->shape[i]);
    for (uint32_t i = 0; i < n_dims; i++)
        snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%lld", i ? " x " : "",
                 (long long)want[i]);
    return hm_errorf(HM_ERR_FORMAT, "%s: tensor '%s' is %s [%s], expected %s [%s]", path, t->name,
                     hm_st_dtype_name(t->dtype), got, hm_st_dtype_name(dtype), exp);
}

static bool is_float(hm_st_dtype dt) {
    return dt == HM_ST_F32 || dt == HM_ST_F16 || dt == HM_ST_BF16;
}

static hm_status float_dtype(const char *path, const hm_st_tensor *t) {
    if (is_float(t->dtype)) return HM_OK;
    return hm_errorf(HM_ERR_UNSUPPORTED,
                     "%s: tensor '%s' has dtype %s (gpt-oss's experts are read as MXFP4 blocks "
                     "and scales, or as F32, F16 or BF16)",
                     path, t->name, hm_st_dtype_name(t->dtype));
}

hm_status hm_gptoss_experts_find(const hm_safetensors *st, const char *path, const hm_hparams *hp,
                                 unsigned il, int p, bool bias, hm_gptoss_experts *out) {
    memset(out, 0, sizeof *out);
    const bool down = p == HM_GPTOSS_DOWN;
    const int64_t E = hp->n_experts, H = hp->hidden, I = hp->moe_inter;
    const int64_t R = down ? H : 2 * I, C = down ? I : H;
    const char *proj = down ? "down_proj" : "gate_up_proj";
    out->rows_packed = R, out->cols = C;
    char bn[160], sn[160], fn[160];
    snprintf(bn, sizeof bn, "model.layers.%u.mlp.experts.%s_blocks", il, proj);
    snprintf(sn, sizeof sn, "model.layers.%u.mlp.experts.%s_scales", il, proj);
    snprintf(fn, sizeof fn, "model.layers.%u.mlp.experts.%s%s", il, proj, bias ? "_bias" : "");
    hm_status s;
    if (bias) {
        if (!(out->bias = hm_st_find(st, fn))) {
            snprintf(out->missing, sizeof out->missing, "%s", fn);
            return hm_errorf(HM_ERR_NOT_FOUND, "%s: tensor '%s' is missing (needed by gpt_oss)",
                             path, fn);
        }
        const int64_t want[2] = {E, R};
        if ((s = float_dtype(path, out->bias)) ||
            (s = check_st(path, out->bias, out->bias->dtype, 2, want)))
            return s;
        return HM_OK;
    }
    if ((out->blocks = hm_st_find(st, bn))) {
        if (!(out->scales = hm_st_find(st, sn))) {
            snprintf(out->missing, sizeof out->missing, "%s", sn);
            return hm_errorf(HM_ERR_NOT_FOUND, "%s: tensor '%s' is missing (with '%s')", path, sn,
                             bn);
        }
        if (C % 32)
            return hm_errorf(HM_ERR_FORMAT, "%s: '%s': %lld inputs are not whole 32-blocks", path,
                             bn, (long long)C);
        const int64_t G = C / 32, wb[4] = {E, R, G, 16}, ws[3] = {E, R, G};
        if ((s = check_st(path, out->blocks, HM_ST_U8, 4, wb)) ||
            (s = check_st(path, out->scales, HM_ST_U8, 3, ws)))
            return s;
        return HM_OK;
    }
    if (!(out->w = hm_st_find(st, fn))) {
        snprintf(out->missing, sizeof out->missing, "%s", bn);
        return hm_errorf(HM_ERR_NOT_FOUND,
                         "%s: the experts' tensor '%s' (MXFP4, with '%s') or '%s' is missing", path,
                         bn, sn, fn);
    }
    const int64_t want[3] = {E, C, R};
    if ((s = float_dtype(path, out->w)) || (s = check_st(path, out->w, out->w->dtype, 3, want)))
        return s;
    return HM_OK;
}
