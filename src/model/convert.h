/* convert.h - a Hugging Face model (config.json + *.safetensors, one file or sharded) written as a
 * GGUF file with llama.cpp's tensor names, metadata keys and shapes, optionally quantized.
 *
 * Usage:
 *
 *     hm_convert_params p = hm_convert_default_params();
 *     p.type = HM_TYPE_Q8_0;         // attention, dense MLP, shared experts, embeddings, output
 *     p.experts_type = HM_TYPE_Q4_K; // routed experts
 *     hm_convert_stats stats;
 *     if (hm_convert_hf("/models/Qwen3-30B-A3B", "qwen3-30b.gguf", &p, &stats) != HM_OK)
 *         fprintf(stderr, "%s\n", hm_last_error());
 *
 * Architectures: qwen3_moe, qwen2_moe, mixtral, glm4_moe, deepseek_v2 / deepseek_v3 / kimi_k2
 * and gpt_oss (HF model_type; hm_arch_list(HM_ARCH_NAMED)). Each has a table
 * mapping llama.cpp's GGUF names to the Hugging Face ones (its src/model/arch/ file); adding one
 * means adding a table. Routed experts may be one tensor per expert
 * (mlp.experts.E.gate_proj.weight,
 * ...) or, for the Qwen and GLM models, transformers 5's fused mlp.experts.gate_up_proj /
 * down_proj; either way they are
 * stacked into llama.cpp's 3-D ffn_*_exps (ne = [cols, rows, n_expert], expert E the E-th slab).
 * Mixtral's q/k rows are permuted as llama.cpp's convert_hf_to_gguf.py does (Qwen's are not).
 * DeepSeek's kv_b_proj is split as llama.cpp's DeepseekV2Model does: per head, its nope rows
 * transposed become attn_k_b (ne = [nope, kv_lora, n_head]) and its v rows attn_v_b (ne =
 * [kv_lora, v, n_head]); no attn_kv_b is written, and head_count_kv is 1 (MQA over the latent).
 * gpt-oss's fused experts (arch/gptoss.h) are split as llama.cpp's GptOssModel does: gate_up_proj's
 * even rows become ffn_gate_exps, its odd rows ffn_up_exps (their biases likewise), down_proj
 * ffn_down_exps; as released (MXFP4 "*_blocks" / "*_scales") each row is repacked into GGUF's
 * MXFP4 blocks (hm_mxfp4_from_ocp: the same bits), in transformers' float layout ([E][in][out])
 * each expert is transposed.
 *
 * Checked before the output file is created: config.json parses (hm_hparams_from_hf_config);
 * every tensor of hm_arch_tensor_plan has its source tensor(s) with the expected shape and dtype
 * F32, F16 or BF16 (FP8 and others: HM_ERR_UNSUPPORTED naming the tensor); no source tensor is
 * left over. Missing and left-over tensors are listed together in one HM_ERR_FORMAT message; a
 * wrong shape names the tensor, the shape found and the one expected (both in HF order). Not
 * treated as weights: `*.rotary_emb.inv_freq` buffers (skipped with a warning) and an lm_head
 * identical to the embeddings of a model with tied embeddings (skipped).
 *
 * Types: norms, routers, biases and other 1-D / small tensors are F32 (as llama.cpp keeps them);
 * token embeddings, output and every projection follow `type` (routed experts `experts_type`);
 * a quantized row that is not a whole number of blocks takes hm_type_for_row's fallback.
 * MXFP4 experts stay MXFP4 (byte for byte) unless experts_type names a type (not KEEP or SAME):
 * then their values are converted like any float source.
 * Quantization starts from exact float32 values (BF16/F16 widen exactly); a tensor kept in its
 * own dtype is copied byte for byte.
 *
 * Metadata: hm_hparams_write_gguf (llama.cpp's keys plus the few hmoe needs to read the same
 * hyper-parameters back, e.g. qwen3moe.expert_weights_norm when norm_topk_prob is false). The
 * tokenizer is not converted (tokenizer.json / tokenizer_config.json are ignored).
 *
 * Memory and files: tensors are streamed one chunk of rows at a time (at most one expert slab's
 * rows per chunk), so memory stays bounded whatever the model size; source pages are released as
 * they are consumed. The output is written as OUT.part and renamed to OUT only when complete; on
 * any failure neither name is left behind. */
#ifndef HM_MODEL_CONVERT_H
#define HM_MODEL_CONVERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/hparams.h"
#include "model/arch.h"

#define HM_CONVERT_KEEP (-1) /* keep each tensor's source dtype (F32, F16 or BF16) */
#define HM_CONVERT_SAME (-2) /* experts_type only: whatever `type` is */

/* Called from the converting thread after every chunk written (done <= total, in bytes). */
typedef void (*hm_convert_progress_fn)(uint64_t done, uint64_t total, void *arg);

typedef struct hm_convert_params {
    int type;               /* hm_type of the big matrices, or HM_CONVERT_KEEP (default) */
    int experts_type;       /* hm_type of the routed experts, HM_CONVERT_KEEP, or HM_CONVERT_SAME
                               (default) */
    int n_threads;          /* quantization threads; 0 = one per physical core */
    const char *model_name; /* general.name; NULL = the directory's base name */
    bool dry_run;           /* check everything and fill the stats, write nothing */
    hm_convert_progress_fn progress;
    void *progress_arg;
} hm_convert_params;

hm_convert_params hm_convert_default_params(void);

/* What was (or, with dry_run, would be) written. */
typedef struct hm_convert_stats {
    hm_hparams hp;                                   /* as read from config.json */
    size_t n_tensors;                                /* GGUF tensors */
    size_t n_source_tensors;                         /* safetensors tensors read */
    uint64_t cat_tensors[HM_CAT_COUNT];              /* per hm_tensor_cat */
    uint64_t cat_bytes[HM_CAT_COUNT];                /* tensor data bytes per category */
    uint32_t cat_types[HM_CAT_COUNT][HM_TYPE_COUNT]; /* tensors per category and output type */
    uint64_t source_bytes;                           /* bytes of the source tensors */
    uint64_t total_bytes;                            /* tensor data bytes of the GGUF */
    double seconds;                                  /* wall time of the conversion */
} hm_convert_stats;

/* Whether `type` can be requested as an output type (F32, F16, BF16 or a type with a quantizer).
 */
bool hm_convert_type_supported(int type);

/* Converts the model in hf_path (a directory holding config.json and model.safetensors or
 * model.safetensors.index.json + shards) to out_path. params may be NULL (defaults); stats may be
 * NULL. Errors: HM_ERR_INVALID_ARG (bad parameters), HM_ERR_FORMAT (config, missing, left-over or
 * misshapen tensors, non-finite values when quantizing), HM_ERR_UNSUPPORTED (architecture, dtype),
 * HM_ERR_IO / HM_ERR_NOT_FOUND (files), HM_ERR_NO_MEMORY; hm_last_error() names the file, tensor
 * and what was expected. */
hm_status hm_convert_hf(const char *hf_path, const char *out_path, const hm_convert_params *params,
                        hm_convert_stats *stats);

#endif
