/* fuzz_hfconfig.c - libFuzzer target: any bytes given as a config.json must parse into validated
 * hyper-parameters or fail with a message; never crash. */
#include <stddef.h>
#include <stdint.h>

#include "format/hparams.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hm_hparams hp;
    if (hm_hparams_from_hf_json((const char *)data, size, "fuzz.json", &hp) == HM_OK) {
        volatile uint32_t s = 0;
        for (uint32_t il = 0; il < hp.n_layers && il < HM_MAX_LAYERS; il++)
            s += hm_hparams_layer_is_moe(&hp, il) + hp.layer_sliding[il];
        (void)s;
    }
    return 0;
}
