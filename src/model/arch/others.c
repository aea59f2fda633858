/* others.c - the architectures whose configs, GGUF layouts and tensor names hmoe reads (hmoe
 * info, convert) but whose layers it does not build yet. Each moves to a file of its own with its
 * layer builder. */
#include "model/arch/registry.h"

const hm_arch_desc hm_arch_gptoss = {HM_ARCH_GPTOSS,      "gpt_oss", "gpt-oss", "gpt_oss",
                                     "GptOssForCausalLM", NULL,      NULL};
