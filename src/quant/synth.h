/* synth.h - random but valid quantized blocks (for `hmoe synth` and kernel tests): any type whose
 * layout we know, with dequantized values of roughly a requested standard deviation. */
#ifndef HM_QUANT_SYNTH_H
#define HM_QUANT_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

/* splitmix64: a tiny counter-based generator; the same seed gives the same stream. */
static inline uint64_t hm_rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

bool hm_synth_supported(uint32_t type);
/* Fills n_elems elements (a whole number of blocks) of `type` at dst. value_std is the target
 * standard deviation of the dequantized values (for F32/F16/BF16: uniform in +-std*sqrt(3));
 * mean is added to float types only (norm weights use mean 1, std 0). */
hm_status hm_synth_fill(uint32_t type, void *dst, uint64_t n_elems, float mean, float value_std,
                        uint64_t seed);

#endif
