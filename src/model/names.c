/* names.c - llama.cpp GGUF tensor names <-> Hugging Face names, per architecture (names.h). */
#include "model/names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/arch/registry.h"

static const hm_name_map k_global[] = {
    {"token_embd.weight", "model.embed_tokens.weight", 0, NULL, 0, 0},
    {"output_norm.weight", "model.norm.weight", 0, NULL, 0, 0},
    {"output.weight", "lm_head.weight", 0, NULL, 0, 0},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* An architecture's table is its descriptor's (src/model/arch/). */
const hm_arch_names *hm_arch_names_find(hm_arch arch) {
    const hm_arch_desc *d = hm_arch_desc_get(arch);
    return d ? d->names : NULL;
}

/* The map entry of a GGUF name; *layer is set for "blk.N." names (else UINT32_MAX). */
const hm_name_map *hm_name_map_find(const hm_arch_names *a, const char *gguf, uint32_t *layer) {
    *layer = UINT32_MAX;
    if (strncmp(gguf, "blk.", 4) != 0) {
        for (size_t i = 0; i < COUNT(k_global); i++)
            if (!strcmp(k_global[i].gguf, gguf)) return &k_global[i];
        return NULL;
    }
    char *end;
    unsigned long il = strtoul(gguf + 4, &end, 10);
    if (end == gguf + 4 || *end != '.' || il >= HM_MAX_LAYERS) return NULL;
    *layer = (uint32_t)il;
    for (size_t i = 0; i < a->n_layer; i++)
        if (!strcmp(a->layer[i].gguf, end + 1)) return &a->layer[i];
    return NULL;
}

/* HF name from a pattern: "model.layers.<layer>." + pattern with "%u" replaced by expert. */
void hm_hf_name(const char *pattern, uint32_t layer, uint32_t expert, char *out, size_t cap) {
    char tail[128];
    const char *pct = strstr(pattern, "%u");
    if (pct)
        snprintf(tail, sizeof tail, "%.*s%u%s", (int)(pct - pattern), pattern, expert, pct + 2);
    else
        snprintf(tail, sizeof tail, "%s", pattern);
    if (layer == UINT32_MAX)
        snprintf(out, cap, "%s", tail);
    else
        snprintf(out, cap, "model.layers.%u.%s", layer, tail);
}
