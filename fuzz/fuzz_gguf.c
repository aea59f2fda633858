/* fuzz_gguf.c - libFuzzer target: any byte string must parse or fail cleanly, and everything a
 * successful parse hands out must be readable. */
#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"

static volatile uint64_t sink;

static void touch_value(const hm_gguf_value *v) {
    sink += v->raw_len ? v->raw[v->raw_len - 1] : 0;
    if (v->type == HM_GGUF_STRING && v->v.s.len) sink += (uint8_t)v->v.s.ptr[v->v.s.len - 1];
    if (v->type != HM_GGUF_ARRAY) return;
    for (uint64_t i = 0; i < v->arr_n; i++) {
        if (v->arr_type == HM_GGUF_STRING) {
            if (v->arr_strs[i].len) sink += (uint8_t)v->arr_strs[i].ptr[v->arr_strs[i].len - 1];
        } else if (v->arr_type == HM_GGUF_ARRAY) {
            touch_value(&v->arr_items[i]);
        } else {
            double f = hm_gguf_arr_float(v, i);
            sink += hm_gguf_arr_uint(v, i) + (uint64_t)hm_gguf_arr_int(v, i) + (f > 1.0);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hm_gguf *g;
    if (hm_gguf_parse_memory(data, size, "fuzz", &g) != HM_OK) return 0;
    for (uint64_t i = 0; i < hm_gguf_n_kv(g); i++) {
        const hm_gguf_kv *kv = hm_gguf_kv_at(g, i);
        char key[128];
        size_t n = kv->key.len < sizeof key - 1 ? kv->key.len : sizeof key - 1;
        for (size_t k = 0; k < n; k++) key[k] = kv->key.ptr[k];
        key[n] = 0;
        sink += hm_gguf_find_kv(g, key) != NULL;
        touch_value(&kv->val);
    }
    for (uint64_t i = 0; i < hm_gguf_n_tensors(g); i++) {
        const hm_gguf_tensor *t = hm_gguf_tensor_at(g, i);
        sink += hm_gguf_find_tensor(g, t->name) == t;
        if (t->bytes) sink += t->data[0] + t->data[t->bytes - 1];
    }
    uint64_t u;
    hm_gguf_get_uint(g, "general.alignment", &u);
    hm_gguf_close(g);
    return 0;
}
