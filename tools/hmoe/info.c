/* info.c - `hmoe info PATH`: what a GGUF file or a Hugging Face directory holds, and the memory
 * each placement needs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "model/model.h"
#include "core/mmap.h"
#include "format/gguf.h"
#include "format/hparams.h"
#include "format/safetensors.h"
#include "jsonw.h"
#include "model/arch.h"

typedef struct tinfo {
    const char *name;
    char type[16];
    uint32_t n_dims;
    uint64_t shape[8]; /* as the file orders them */
    uint64_t elements, bytes;
    hm_tensor_cat cat;
} tinfo;

typedef struct model_info {
    const char *path;
    const char *format; /* "gguf" | "safetensors" */
    char arch[32];
    bool have_hp;
    hm_hparams hp;
    char hp_error[512];
    tinfo *t;
    size_t n;
    uint64_t cat_bytes[HM_CAT_COUNT], cat_params[HM_CAT_COUNT];
    uint64_t total_bytes, total_params;
    hm_gguf *g;
    hm_safetensors *st;
} model_info;

static hm_status load_gguf(model_info *m) {
    hm_status st = hm_gguf_open(m->path, &m->g);
    if (st != HM_OK) return st;
    m->format = "gguf";
    hm_gguf_str a;
    if (hm_gguf_get_str(m->g, "general.architecture", &a) == HM_OK)
        snprintf(m->arch, sizeof m->arch, "%.*s", (int)(a.len < 31 ? a.len : 31), a.ptr);
    m->have_hp = hm_hparams_from_gguf(m->g, &m->hp) == HM_OK;
    if (!m->have_hp) snprintf(m->hp_error, sizeof m->hp_error, "%s", hm_last_error());
    m->n = hm_gguf_n_tensors(m->g);
    m->t = calloc(m->n ? m->n : 1, sizeof(tinfo));
    if (!m->t) return hm_errorf(HM_ERR_NO_MEMORY, "info: out of memory");
    for (size_t i = 0; i < m->n; i++) {
        const hm_gguf_tensor *gt = hm_gguf_tensor_at(m->g, i);
        tinfo *t = &m->t[i];
        t->name = gt->name;
        snprintf(t->type, sizeof t->type, "%s", hm_type_name(gt->type));
        t->n_dims = gt->n_dims;
        for (uint32_t d = 0; d < gt->n_dims; d++) t->shape[d] = gt->ne[d];
        t->elements = gt->n_elements;
        t->bytes = gt->bytes;
        t->cat = hm_tensor_cat_gguf(gt->name);
    }
    return HM_OK;
}

static hm_status load_hf(model_info *m) {
    hm_status st = hm_st_open(m->path, &m->st);
    if (st != HM_OK) return st;
    m->format = "safetensors";
    struct stat sb;
    char cfg[4096];
    if (stat(m->path, &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(cfg, sizeof cfg, "%s", m->path);
    else {
        snprintf(cfg, sizeof cfg, "%s", m->path);
        char *slash = strrchr(cfg, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(cfg, sizeof cfg, ".");
    }
    m->have_hp = hm_hparams_from_hf_config(cfg, &m->hp) == HM_OK;
    if (!m->have_hp)
        snprintf(m->hp_error, sizeof m->hp_error, "%s", hm_last_error());
    else
        snprintf(m->arch, sizeof m->arch, "%s", m->hp.model_type);
    m->n = hm_st_n_tensors(m->st);
    m->t = calloc(m->n ? m->n : 1, sizeof(tinfo));
    if (!m->t) return hm_errorf(HM_ERR_NO_MEMORY, "info: out of memory");
    for (size_t i = 0; i < m->n; i++) {
        const hm_st_tensor *s = hm_st_tensor_at(m->st, i);
        tinfo *t = &m->t[i];
        t->name = s->name;
        snprintf(t->type, sizeof t->type, "%s", hm_st_dtype_name(s->dtype));
        t->n_dims = s->n_dims;
        for (uint32_t d = 0; d < s->n_dims && d < 8; d++) t->shape[d] = (uint64_t)s->shape[d];
        t->elements = s->n_elements;
        t->bytes = s->nbytes;
        t->cat = hm_tensor_cat_hf(s->name);
    }
    return HM_OK;
}

static bool looks_gguf(const char *path) {
    int fd;
    if (hm_file_open_regular(path, &fd, NULL)) return false; /* a FIFO is not waited on */
    char magic[4] = {0};
    ssize_t n = read(fd, magic, 4);
    close(fd);
    return n == 4 && !memcmp(magic, "GGUF", 4);
}

static double gb(uint64_t b) {
    return (double)b * 1e-9;
}

/* bytes of KV cache per token (f16), MLA caches the latent */
static uint64_t kv_bytes_per_token(const hm_hparams *hp) {
    uint64_t per_layer = hp->arch == HM_ARCH_DEEPSEEK2
                             ? (uint64_t)(hp->kv_lora_rank + hp->qk_rope_head_dim)
                             : (uint64_t)hp->n_kv_heads * (hp->head_dim + hp->v_head_dim);
    return per_layer * hp->n_layers * 2;
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    bool json = false, tensors = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--tensors"))
            tensors = true;
        else if (argv[i][0] == '-')
            return cli_usage_error("info: unknown option '%s'", argv[i]);
        else if (!path)
            path = argv[i];
        else
            return cli_usage_error("info: one PATH only");
    }
    if (!path)
        return cli_usage_error(
            "info: usage: hmoe info PATH (GGUF file or HF directory) [--tensors] [--json]");
    model_info m;
    memset(&m, 0, sizeof m);
    m.path = path;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "hmoe info: %s: no such file or directory\n", path);
        return 1;
    }
    if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode)) {
        fprintf(stderr, "hmoe info: %s: not a regular file or directory\n", path);
        return 1;
    }
    hm_status st = !S_ISDIR(sb.st_mode) && looks_gguf(path) ? load_gguf(&m) : load_hf(&m);
    if (st != HM_OK) {
        fprintf(stderr, "hmoe info: %s\n", hm_last_error());
        free(m.t);
        hm_gguf_close(m.g);
        hm_st_close(m.st);
        return 1;
    }
    for (size_t i = 0; i < m.n; i++) {
        m.cat_bytes[m.t[i].cat] += m.t[i].bytes;
        m.cat_params[m.t[i].cat] += m.t[i].elements;
        m.total_bytes += m.t[i].bytes;
        m.total_params += m.t[i].elements;
    }
    const hm_hparams *hp = &m.hp;
    uint64_t routed = m.cat_params[HM_CAT_ROUTED];
    uint64_t active = m.total_params - routed;
    if (m.have_hp && hp->n_experts) active += routed / hp->n_experts * hp->n_experts_used;
    uint64_t gpu_part = m.total_bytes - m.cat_bytes[HM_CAT_ROUTED];

    if (json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj_begin(&w, NULL);
        jw_str(&w, "path", path);
        jw_str(&w, "format", m.format);
        jw_str(&w, "architecture", m.arch);
        if (m.have_hp) {
            jw_obj_begin(&w, "hparams");
            jw_int(&w, "vocab_size", hp->vocab_size);
            jw_int(&w, "hidden", hp->hidden);
            jw_int(&w, "n_layers", hp->n_layers);
            jw_int(&w, "n_heads", hp->n_heads);
            jw_int(&w, "n_kv_heads", hp->n_kv_heads);
            jw_int(&w, "head_dim", hp->head_dim);
            jw_int(&w, "n_experts", hp->n_experts);
            jw_int(&w, "n_experts_used", hp->n_experts_used);
            jw_int(&w, "n_shared_experts", hp->n_shared_experts);
            jw_int(&w, "moe_inter", hp->moe_inter);
            jw_int(&w, "ffn_inter", hp->ffn_inter);
            int dense = 0;
            for (uint32_t il = 0; il < hp->n_layers; il++)
                dense += !hm_hparams_layer_is_moe(hp, il);
            jw_int(&w, "dense_layers", dense);
            jw_bool(&w, "tie_embeddings", hp->tie_embeddings);
            jw_int(&w, "max_ctx", hp->max_ctx);
            jw_int(&w, "kv_bytes_per_token", (long long)kv_bytes_per_token(hp));
            jw_obj_end(&w);
        } else {
            jw_str(&w, "hparams_error", m.hp_error);
        }
        jw_int(&w, "n_tensors", (long long)m.n);
        jw_int(&w, "params_total", (long long)m.total_params);
        jw_int(&w, "params_active", (long long)active);
        jw_int(&w, "bytes_total", (long long)m.total_bytes);
        jw_obj_begin(&w, "bytes_by_category");
        for (int c = 0; c < HM_CAT_COUNT; c++)
            jw_int(&w, hm_tensor_cat_name((hm_tensor_cat)c), (long long)m.cat_bytes[c]);
        jw_obj_end(&w);
        jw_obj_begin(&w, "placement");
        jw_int(&w, "all_gpu_bytes", (long long)m.total_bytes);
        jw_int(&w, "experts_cpu_gpu_bytes", (long long)gpu_part);
        jw_int(&w, "experts_cpu_cpu_bytes", (long long)m.cat_bytes[HM_CAT_ROUTED]);
        jw_obj_end(&w);
        if (tensors) {
            jw_arr_begin(&w, "tensors");
            for (size_t i = 0; i < m.n; i++) {
                jw_obj_begin(&w, NULL);
                jw_str(&w, "name", m.t[i].name);
                jw_str(&w, "type", m.t[i].type);
                jw_arr_begin(&w, "shape");
                for (uint32_t d = 0; d < m.t[i].n_dims; d++)
                    jw_int(&w, NULL, (long long)m.t[i].shape[d]);
                jw_arr_end(&w);
                jw_int(&w, "bytes", (long long)m.t[i].bytes);
                jw_str(&w, "category", hm_tensor_cat_name(m.t[i].cat));
                jw_obj_end(&w);
            }
            jw_arr_end(&w);
        }
        jw_obj_end(&w);
    } else {
        printf("%s (%s)\n", path, m.format);
        printf("  architecture   %s\n", m.arch[0] ? m.arch : "?");
        if (m.have_hp) {
            int dense = 0;
            for (uint32_t il = 0; il < hp->n_layers; il++)
                dense += !hm_hparams_layer_is_moe(hp, il);
            printf("  layers         %u (%d dense), hidden %u, vocab %u, context %u\n",
                   hp->n_layers, dense, hp->hidden, hp->vocab_size, hp->max_ctx);
            printf("  attention      %u heads, %u kv heads, head dim %u%s\n", hp->n_heads,
                   hp->n_kv_heads, hp->head_dim, hp->arch == HM_ARCH_DEEPSEEK2 ? " (MLA)" : "");
            printf("  experts        %u routed (top-%u) of %ux%u, %u shared\n", hp->n_experts,
                   hp->n_experts_used, hp->hidden, hp->moe_inter, hp->n_shared_experts);
        } else {
            printf("  hyper-params   unavailable: %s\n", m.hp_error);
        }
        printf("  parameters     %.2f B total, %.2f B active per token\n",
               (double)m.total_params * 1e-9, (double)active * 1e-9);
        printf("  tensors        %zu, %.2f GB\n", m.n, gb(m.total_bytes));
        for (int c = 0; c < HM_CAT_COUNT; c++)
            if (m.cat_bytes[c])
                printf("    %-14s %9.3f GB  %8.3f B params\n", hm_tensor_cat_name((hm_tensor_cat)c),
                       gb(m.cat_bytes[c]), (double)m.cat_params[c] * 1e-9);
        printf("  memory         all on GPU: %.2f GB; experts on CPU: GPU %.2f GB + CPU %.2f GB\n",
               gb(m.total_bytes), gb(gpu_part), gb(m.cat_bytes[HM_CAT_ROUTED]));
        if (m.have_hp)
            printf("                 KV cache (f16): %.1f KiB per token, %.2f GB at 32k tokens\n",
                   (double)kv_bytes_per_token(hp) / 1024, gb(kv_bytes_per_token(hp) * 32768));
        if (tensors) {
            printf("\n%-44s %-8s %-28s %12s  %s\n", "tensor", "type", "shape", "bytes", "category");
            for (size_t i = 0; i < m.n; i++) {
                char shape[64] = "";
                size_t o = 0;
                for (uint32_t d = 0; d < m.t[i].n_dims; d++)
                    o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%llu", d ? " x " : "",
                                          (unsigned long long)m.t[i].shape[d]);
                printf("%-44s %-8s %-28s %12llu  %s\n", m.t[i].name, m.t[i].type, shape,
                       (unsigned long long)m.t[i].bytes, hm_tensor_cat_name(m.t[i].cat));
            }
        }
    }
    free(m.t);
    hm_gguf_close(m.g);
    hm_st_close(m.st);
    return 0;
}
