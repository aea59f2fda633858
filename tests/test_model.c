/* test_model.c - presets equal the real models' configs (parsed by our HF parser, itself checked
 * against transformers), hyper-parameters survive GGUF metadata (write -> read), tensor
 * categories, llama.cpp's type fallback; model loading checks every tensor's type and shape
 * first (synthetic GGUFs with one bad tensor), and loads weights at any byte offset (a shifted
 * BF16 safetensors file gives the aligned file's logits). */
#include <jansson.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/arch.h"
#include "model/model.h"
#include "quant/fp16.h"
#include "hparams_check.h"
#include "test.h"

/* A qwen3-tiny-shaped GGUF (vocabulary 256) with zeroed weights at path; the tensor named
 * bad (NULL: none) gets bad_type (unless < 0) and bad_ne1 rows (unless 0). */
static bool write_tiny(const char *path, const char *bad, int bad_type, uint64_t bad_ne1) {
    hm_hparams hp = hm_preset_find("qwen3-tiny")->hp;
    hp.vocab_size = 256;
    hm_plan_types types = {HM_TYPE_Q4_K, HM_TYPE_Q8_0};
    hm_tensor_spec *ts = NULL;
    size_t n = 0;
    hm_gguf_writer *w = NULL;
    bool ok = hm_arch_tensor_plan(&hp, &types, &ts, &n) == HM_OK &&
              hm_gguf_writer_open(path, &w) == HM_OK &&
              hm_hparams_write_gguf(w, &hp, "tiny") == HM_OK;
    uint64_t *bytes = calloc(n ? n : 1, sizeof *bytes);
    for (size_t i = 0; ok && i < n; i++) {
        if (bad && !strcmp(ts[i].name, bad)) {
            if (bad_type >= 0) ts[i].type = (uint32_t)bad_type;
            if (bad_ne1) ts[i].ne[1] = bad_ne1;
        }
        uint64_t rb = 0;
        ok = hm_type_row_bytes(ts[i].type, ts[i].ne[0], &rb) &&
             hm_gguf_w_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne) == HM_OK;
        bytes[i] = rb * ts[i].ne[1] * (ts[i].n_dims > 2 ? ts[i].ne[2] : 1);
    }
    static uint8_t zeros[1 << 16];
    for (size_t i = 0; ok && i < n; i++)
        for (uint64_t b = bytes[i]; ok && b;) {
            size_t k = b < sizeof zeros ? (size_t)b : sizeof zeros;
            ok = hm_gguf_w_data(w, zeros, k) == HM_OK;
            b -= k;
        }
    if (ok)
        ok = hm_gguf_writer_finish(w) == HM_OK;
    else
        hm_gguf_writer_abort(w);
    CHECK_MSG(ok, "writing %s: %s", path, hm_last_error());
    free(bytes);
    free(ts);
    return ok;
}

/* loading path fails with want, the message naming path and each of the needles */
static void expect_load_error(const char *path, hm_status want, const char *n1, const char *n2) {
    hm_model_params mp = hm_model_default_params();
    mp.load = HM_LOAD_MMAP;
    hm_model *m = (hm_model *)&mp; /* must be reset to NULL */
    CHECK_STATUS(hm_model_load_ex(path, &mp, &m), want);
    CHECK(m == NULL);
    CHECK_CONTAINS(hm_last_error(), path);
    CHECK_CONTAINS(hm_last_error(), n1);
    if (n2) CHECK_CONTAINS(hm_last_error(), n2);
}

/* every tensor's type and shape is checked before anything is read: a bad one in the last layer
 * fails the load, naming the file, the tensor and what was expected */
static void test_load_checks(void) {
    char path[] = "/tmp/hmoe_model_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    if (write_tiny(path, NULL, -1, 0)) {
        hm_model *m = NULL;
        CHECK_OK(hm_model_load(path, &m));
        hm_model_free(m);
    }
    /* a router type without a kernel */
    if (write_tiny(path, "blk.1.ffn_gate_inp.weight", HM_TYPE_IQ2_XXS, 0))
        expect_load_error(path, HM_ERR_UNSUPPORTED,
                          "tensor 'blk.1.ffn_gate_inp.weight' has type IQ2_XXS, which hmoe cannot "
                          "compute yet",
                          "(supported: F32 ");
    /* a type with no dequantizer in a norm */
    if (write_tiny(path, "blk.1.ffn_norm.weight", HM_TYPE_I8, 0))
        expect_load_error(path, HM_ERR_UNSUPPORTED, "tensor 'blk.1.ffn_norm.weight' has type I8",
                          NULL);
    /* a wrong shape */
    if (write_tiny(path, "blk.1.attn_v.weight", -1, 64))
        expect_load_error(path, HM_ERR_FORMAT,
                          "tensor 'blk.1.attn_v.weight' has ne [256, 64, 1, 1]",
                          "expected [256, 128, 1]");
    /* routed experts whose gate and up take different activations cannot share a pass */
    if (write_tiny(path, "blk.1.ffn_up_exps.weight", HM_TYPE_Q8_0, 0))
        expect_load_error(path, HM_ERR_UNSUPPORTED,
                          "layer 1: the experts' gate (Q4_K) and up "
                          "(Q8_0) projections need different activation types",
                          NULL);
    unlink(path);
}

/* fixture a (F32) written as BF16 safetensors in dir, every tensor shifted by `shift` bytes */
static bool write_bf16_copy(const char *fixture, const char *dir, int shift) {
    hm_safetensors *st = NULL;
    char p[1024];
    if (hm_st_open(fixture, &st) != HM_OK) return false;
    json_t *hdr = json_object();
    uint64_t off = (uint64_t)shift;
    for (size_t i = 0; i < hm_st_n_tensors(st); i++) {
        const hm_st_tensor *t = hm_st_tensor_at(st, i);
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->n_dims; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        json_object_set_new(hdr, t->name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype", "BF16", "shape", shape,
                                      "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + 2 * t->n_elements)));
        off += 2 * t->n_elements;
    }
    char *text = json_dumps(hdr, JSON_COMPACT);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    FILE *f = fopen(p, "wb");
    bool ok = f && text;
    if (ok) {
        uint64_t n = strlen(text);
        ok = fwrite(&n, 8, 1, f) == 1 && fwrite(text, 1, n, f) == n;
        for (int k = 0; ok && k < shift; k++) ok = fputc(0x55, f) != EOF;
        for (size_t i = 0; ok && i < hm_st_n_tensors(st); i++) {
            const hm_st_tensor *t = hm_st_tensor_at(st, i);
            for (uint64_t e = 0; ok && e < t->n_elements; e++) {
                float x;
                memcpy(&x, (const uint8_t *)t->data + 4 * e, 4);
                uint16_t b = hm_f32_to_bf16(x);
                ok = fwrite(&b, 2, 1, f) == 1;
            }
        }
    }
    if (f && fclose(f)) ok = false;
    free(text);
    json_decref(hdr);
    hm_st_close(st);
    snprintf(p, sizeof p, "cp %s/config.json %s/", fixture, dir);
    return ok && system(p) == 0;
}

/* logits of ids 1 2 3 [3][vocab] (malloc'd) and the model's realigned bytes */
static float *logits_of(const char *dir, size_t *realigned) {
    hm_model_params mp = hm_model_default_params();
    mp.load = HM_LOAD_MMAP;
    hm_model *m = NULL;
    hm_ctx *c = NULL;
    float *lg = NULL;
    hm_ctx_params cp = hm_ctx_default_params();
    cp.n_threads = 1, cp.n_ctx = 8, cp.n_batch = 8;
    const int32_t ids[3] = {1, 2, 3};
    if (hm_model_load_ex(dir, &mp, &m) == HM_OK && hm_ctx_create(m, &cp, &c) == HM_OK) {
        lg = malloc(sizeof(float) * 3 * m->hp.vocab_size);
        if (hm_ctx_decode(c, ids, NULL, 3, NULL, lg) != HM_OK) free(lg), lg = NULL;
        *realigned = m->realigned_bytes;
    }
    CHECK_MSG(lg != NULL, "%s: %s", dir, hm_last_error());
    hm_ctx_free(c);
    hm_model_free(m);
    return lg;
}

static void test_misaligned_weights(void) {
    const char *fixture = HMOE_SOURCE_DIR "/tests/data/qwen3moe/a";
    char a[] = "/tmp/hmoe_model_a_XXXXXX", b[] = "/tmp/hmoe_model_b_XXXXXX";
    CHECK(mkdtemp(a) && mkdtemp(b));
    CHECK(write_bf16_copy(fixture, a, 0));
    CHECK(write_bf16_copy(fixture, b, 1)); /* every BF16 weight at an odd address */
    size_t ra = 1, rb = 0;
    float *la = logits_of(a, &ra), *lb = logits_of(b, &rb);
    CHECK(ra == 0 && rb > 0);
    if (la && lb) CHECK_MSG(!memcmp(la, lb, sizeof(float) * 3 * 512), "shifted logits differ");
    free(la), free(lb);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", a, b);
    CHECK(system(cmd) == 0);
}

int main(void) {
    static const struct {
        const char *preset, *config;
    } pairs[] = {{"qwen3-30b-a3b", "Qwen3-30B-A3B"},
                 {"qwen3-235b-a22b", "Qwen3-235B-A22B"},
                 {"deepseek-v2-lite", "DeepSeek-V2-Lite"},
                 {"deepseek-v3", "DeepSeek-V3"},
                 {"mixtral-8x7b", "Mixtral-8x7B-v0.1"},
                 {"gpt-oss-20b", "gpt-oss-20b"},
                 {"qwen1.5-moe-a2.7b", "Qwen1.5-MoE-A2.7B-Chat-GPTQ-Int4"},
                 {"glm-4.5-air", "GLM-4.5-Air"}};
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
    CHECK(hm_preset_find("nope") == NULL && hm_preset_count() == 9);

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
    test_load_checks();
    test_misaligned_weights();
    return test_done("model");
}
