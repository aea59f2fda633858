/* registry.h - the architectures hmoe knows, one descriptor each (src/model/arch/<arch>.c), in
 * one list (registry.c). Adding an architecture: its file with its descriptor and layer builder,
 * and its line in the list. What a descriptor does not hold yet lives in the shared tables it
 * names: the HF config keys (format/hfconfig.c), the GGUF layout and metadata (model/arch.c) and
 * the HF <-> GGUF tensor names (model/names.c), each keyed by hm_arch. */
#ifndef HM_MODEL_ARCH_REGISTRY_H
#define HM_MODEL_ARCH_REGISTRY_H

#include "model/graph.h"
#include "model/model.h"
#include "model/names.h"

typedef struct hm_arch_desc {
    hm_arch arch;
    const char *name;      /* HF spelling, as messages print it ("qwen3_moe") */
    const char *gguf_name; /* GGUF general.architecture ("qwen3moe") */
    const char *hf_types;  /* the HF model_type values it answers to, comma separated */
    const char *hf_class;  /* transformers' class, the oracle of its tests */
    /* the forward graph over the layer views given; NULL: read, inspected and converted, not
     * run yet */
    hm_status (*build)(const hm_model *m, const hm_layer *layers, hm_graph *g);
    /* GGUF <-> HF tensor names of its layers (names.h); NULL: its HF checkpoints are not bound
     * or converted yet */
    const hm_arch_names *names;
} hm_arch_desc;

/* The descriptor of arch; NULL for HM_ARCH_UNKNOWN or an out-of-range value. */
const hm_arch_desc *hm_arch_desc_get(hm_arch arch);
/* The architectures that run (HM_ARCH_RUNS: "qwen3_moe") or whose HF tensors are bound and
 * converted (HM_ARCH_NAMED), for messages; the string is the calling thread's until its next call
 */
typedef enum hm_arch_filter { HM_ARCH_RUNS, HM_ARCH_NAMED } hm_arch_filter;
const char *hm_arch_list(hm_arch_filter f);

/* qwen3_moe's tensor names, which qwen2_moe shares */
extern const hm_arch_names hm_qwen_moe_names;

extern const hm_arch_desc hm_arch_qwen3moe, hm_arch_qwen2moe, hm_arch_mixtral, hm_arch_deepseek2,
    hm_arch_gptoss, hm_arch_glm4moe;

#endif
