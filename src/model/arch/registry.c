/* registry.c - the list of architectures (registry.h). */
#include "model/arch/registry.h"

#include <stdio.h>
#include <string.h>

static const hm_arch_desc *const all[] = {&hm_arch_qwen3moe,  &hm_arch_qwen2moe, &hm_arch_mixtral,
                                          &hm_arch_deepseek2, &hm_arch_gptoss,   &hm_arch_glm4moe};

const hm_arch_desc *hm_arch_desc_get(hm_arch arch) {
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]->arch == arch) return all[i];
    return NULL;
}

const char *hm_arch_list(hm_arch_filter f) {
    static _Thread_local char list[256]; /* per thread: messages are built on any thread */
    size_t o = 0;
    list[0] = '\0';
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        const bool in = f == HM_ARCH_RUNS ? all[i]->build != NULL : all[i]->names != NULL;
        if (in && o < sizeof list)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "", all[i]->name);
    }
    return list;
}
