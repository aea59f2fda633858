/* fuzz_place.c - libFuzzer target: any bytes as an expert-count file (hm_place_counts_read,
 * for a model of 3 layers x 8 experts) and as a placement rule ("REGEX=device", compiled with
 * PCRE2 and matched against a model's expert tensor names) are read or refused with a message;
 * never crash or hang. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "model/place.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the count file */
    char path[] = "/tmp/hmoe-fuzz-place-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return 0;
    const bool ok = write(fd, data, size) == (ssize_t)size;
    close(fd);
    uint64_t *counts = NULL;
    if (ok && hm_place_counts_read(path, 3, 8, &counts) == HM_OK) {
        volatile uint64_t s = 0;
        for (int i = 0; i < 24; i++) s += counts[i];
        (void)s;
    }
    free(counts);
    unlink(path);
    /* the same bytes as a rule over a 3-layer model whose middle layer is dense */
    static hm_layer layers[3];
    static hm_moe_expert experts[8];
    static hm_model m;
    m.hp.n_layers = 3, m.hp.n_experts = 8, m.hp.n_experts_used = 2;
    m.hp.hidden = 64, m.hp.moe_inter = 32;
    for (int e = 0; e < 8; e++)
        experts[e].gate.type = experts[e].up.type = experts[e].down.type = 0; /* F32 */
    layers[0].moe = layers[2].moe = true;
    layers[0].experts = layers[2].experts = experts;
    m.layers = layers;
    char *rule = malloc(size + 1);
    if (!rule) return 0;
    memcpy(rule, data, size);
    rule[size] = '\0';
    const char *rules[1] = {rule};
    hm_place_params p = {.gpu_experts = 3, .rules = rules, .n_rules = 1};
    hm_place_plan plan;
    if (hm_place_make(&m, &p, &plan) == HM_OK) hm_place_free(&plan);
    free(rule);
    return 0;
}
