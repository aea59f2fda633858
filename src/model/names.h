/* names.h - which Hugging Face tensor each llama.cpp GGUF tensor comes from, per architecture:
 * one table shared by the converter (HF -> GGUF) and the loader (a model bound by GGUF names
 * from an HF directory). Layer tensors are named after "blk.N." / "model.layers.N."; routed
 * experts are one HF tensor per expert ("%u" in the pattern) or transformers 5's fused form. */
#ifndef HM_MODEL_NAMES_H
#define HM_MODEL_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/hparams.h"

enum {
    HM_MAP_EXPERTS = 1,   /* one HF tensor per expert: "%u" in hf is the expert index */
    HM_MAP_PERMUTE_Q = 2, /* llama.cpp's LlamaModel.permute of q rows (n_heads) */
    HM_MAP_PERMUTE_K = 4, /* the same for k (n_kv_heads) */
};

typedef struct hm_name_map {
    const char *gguf; /* after "blk.N." for layer tensors, else the whole name */
    const char *hf;   /* after "model.layers.N." for layer tensors, else the whole name */
    unsigned flags;
    /* transformers 5 stores all experts in one [n_expert, n_parts * rows, cols] parameter; this
     * tensor is row block `part` of each expert's slice */
    const char *fused;
    uint32_t part, n_parts;
} hm_name_map;

typedef struct hm_arch_names {
    hm_arch arch;
    const hm_name_map *layer;
    size_t n_layer;
} hm_arch_names;

/* The table of arch (its descriptor's, src/model/arch/), NULL when there is none. */
const hm_arch_names *hm_arch_names_find(hm_arch arch);
/* The entry of a GGUF name; *layer is set for "blk.N." names (else UINT32_MAX). NULL if the name
 * is not in the table. */
const hm_name_map *hm_name_map_find(const hm_arch_names *a, const char *gguf, uint32_t *layer);
/* HF name from a pattern: "model.layers.<layer>." (layer != UINT32_MAX) + pattern with "%u"
 * replaced by expert. */
void hm_hf_name(const char *pattern, uint32_t layer, uint32_t expert, char *out, size_t cap);

#endif
