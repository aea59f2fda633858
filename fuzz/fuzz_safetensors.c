/* fuzz_safetensors.c - libFuzzer target for the safetensors reader (hm_st_parse_memory).
 *
 * Build and run (one core; new inputs go to the first corpus directory, not the committed seeds):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -Iinclude \
 *       -Isrc fuzz/fuzz_safetensors.c src/format/safetensors.c src/core/[a-z]*.c \
 *       -ljansson -lpthread -lm -o build-fuzz/fuzz_safetensors
 *   mkdir -p build-fuzz/corpus
 *   build-fuzz/fuzz_safetensors -dict=fuzz/safetensors.dict -jobs=1 -workers=1 \
 *       -max_total_time=600 build-fuzz/corpus fuzz/corpus/safetensors
 *
 * Each input is parsed twice: as it is, and with its 8-byte header length repaired to end at the
 * last '}' (so that mutations of the JSON reach the entry and layout checks instead of failing
 * the length check). On success every tensor's bytes are read: ASan sees any byte outside the
 * input, and the reported pointers, offsets and sizes are checked against the input bounds. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/safetensors.h"

static void check(int cond) {
    if (!cond) __builtin_trap();
}

static void parse_and_touch(const uint8_t *data, size_t size) {
    hm_safetensors *st = NULL;
    hm_status s = hm_st_parse_memory(data, size, "fuzz.safetensors", &st);
    if (s != HM_OK) {
        check(st == NULL);
        check(hm_last_error()[0] != '\0');
        return;
    }
    check(hm_st_n_shards(st) == 1);
    const hm_st_shard *sh = hm_st_shard_at(st, 0);
    check(sh->base == data && sh->size == size && sh->data_start <= size);
    volatile uint8_t sink = 0;
    uint64_t prev_end = sh->data_start;
    for (size_t i = 0; i < hm_st_n_tensors(st); i++) {
        const hm_st_tensor *t = hm_st_tensor_at(st, i);
        const uint8_t *p = t->data;
        check(t->shard == 0 && t->n_dims <= HM_ST_MAX_DIMS);
        check(t->nbytes == t->n_elements * hm_st_dtype_size(t->dtype));
        check(t->file_offset >= sh->data_start && t->file_offset <= size);
        check(t->nbytes <= size - t->file_offset);
        check(p == data + t->file_offset);
        check(t->file_offset >= prev_end || t->nbytes == 0); /* sorted, no overlap */
        if (t->nbytes) prev_end = t->file_offset + t->nbytes;
        for (uint64_t k = 0; k < t->nbytes; k++) sink ^= p[k];
        check(hm_st_find(st, t->name) == t);
    }
    for (size_t i = 0; i < hm_st_n_metadata(st); i++) {
        const char *k, *v;
        check(hm_st_metadata_at(st, i, &k, &v) == HM_OK);
        check(hm_st_metadata_get(st, k) == v);
    }
    (void)sink;
    hm_st_close(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse_and_touch(data, size);

    if (size < 9 || data[8] != '{') return 0;
    const uint8_t *close = NULL;
    for (size_t i = size; i > 8; i--)
        if (data[i - 1] == '}') {
            close = data + i - 1;
            break;
        }
    if (!close) return 0;
    uint64_t n = (uint64_t)(close - (data + 8)) + 1, old = 0;
    for (int i = 7; i >= 0; i--) old = (old << 8) | data[i];
    if (n == old) return 0;
    uint8_t *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data, size);
    for (int i = 0; i < 8; i++) copy[i] = (uint8_t)(n >> (8 * i));
    parse_and_touch(copy, size);
    free(copy);
    return 0;
}
