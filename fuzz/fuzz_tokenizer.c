/* fuzz_tokenizer.c - libFuzzer target: the first byte picks a reader (vocab.json + merges.txt,
 * SentencePiece protobuf, tiktoken ranks (plain or gzip, inflated by zlib), tokenizer.json with
 * its normalizer, or a small valid vocabulary with or without a normalizer chain) and the rest is
 * its input; every load must succeed or fail cleanly, and whatever loads must encode and decode
 * the fuzzed text without faults. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

static volatile size_t sink;

static void exercise(const hm_tokenizer *tok, const uint8_t *text, size_t n) {
    int32_t *ids;
    size_t k;
    for (unsigned flags = 0; flags < 4; flags++) {
        if (hm_tokenizer_encode_alloc(tok, (const char *)text, n, flags, &ids, &k) != HM_OK)
            continue;
        char *back;
        size_t bl;
        if (hm_tokenizer_decode(tok, ids, k, HM_DETOK_SPECIAL, &back, &bl) == HM_OK) {
            sink += bl;
            free(back);
        }
        hm_detok *d;
        if (hm_detok_new(tok, flags & 1 ? HM_DETOK_REPLACE_INVALID : 0, &d) == HM_OK) {
            const char *s;
            size_t l;
            for (size_t i = 0; i < k; i++)
                if (hm_detok_push(d, ids[i], &s, &l) == HM_OK) sink += l;
            hm_detok_push(d, -1, &s, &l);
            hm_detok_flush(d, &s, &l);
            hm_detok_free(d);
        }
        free(ids);
    }
}

/* A small valid byte-level vocabulary: the 256 bytes (GPT-2 alphabet), a few merges, specials. */
static hm_tokenizer *small_vocab(void) {
    static hm_tokenizer *tok;
    if (tok) return tok;
    static const char vocab[] =
        "{\"a\": 0, \"b\": 1, \"c\": 2, \"\\u0120\": 3, \"ab\": 4, \"abc\": 5, \"\\u0120a\": 6, "
        "\"\\u0120ab\": 7, \"<|end|>\": 8}";
    static const char merges[] = "a b\nab c\n\xC4\xA0 a\n\xC4\xA0"
                                 "a b\n";
    hm_tokenizer_from_hf_memory(vocab, strlen(vocab), merges, strlen(merges), "small", &tok);
    return tok;
}

/* The 256 GPT-2 byte symbols as a tokenizer.json vocabulary, with every normalizer kind. */
static hm_tokenizer *normalizing_vocab(void) {
    static hm_tokenizer *tok;
    if (tok) return tok;
    static char json[8192];
    size_t n = (size_t)snprintf(
        json, sizeof json,
        "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKD\"}, "
        "{\"type\": \"NFC\"}, {\"type\": \"Lowercase\"}, {\"type\": \"Strip\"}, "
        "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"content\": \" \"}, "
        "{\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"\"}, "
        "{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"}, {\"type\": \"NFD\"}]}, "
        "\"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {");
    for (int b = 0; b < 256; b++) {
        int cp = b, k = 0;
        if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
            for (int c = 0; c < b; c++)
                k += !((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255));
            cp = 256 + k;
        }
        n += (size_t)snprintf(json + n, sizeof json - n, "%s\"\\u%04x\": %d", b ? ", " : "", cp, b);
    }
    n += (size_t)snprintf(json + n, sizeof json - n, "}}}");
    hm_tokenizer_from_json_memory(json, n, "normalizing", &tok);
    return tok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    /* 0xF0: tokenizer.json, 0xF1: the normalizing vocabulary; below, the first four modes */
    uint8_t mode = data[0] >= 0xF0 ? 4 + (data[0] & 1) : data[0] % 4;
    data++, size--;
    hm_tokenizer *tok = NULL;
    if (mode == 0) {
        /* vocab.json \0 merges.txt \0 text */
        const uint8_t *z1 = memchr(data, 0, size);
        if (!z1) return 0;
        size_t vl = (size_t)(z1 - data);
        const uint8_t *m = z1 + 1;
        const uint8_t *z2 = memchr(m, 0, size - vl - 1);
        size_t ml = z2 ? (size_t)(z2 - m) : size - vl - 1;
        if (hm_tokenizer_from_hf_memory((const char *)data, vl, (const char *)m, ml, "fuzz",
                                        &tok) == HM_OK) {
            if (z2) exercise(tok, z2 + 1, size - vl - ml - 2);
            hm_tokenizer_free(tok);
        }
    } else if (mode == 1) {
        if (hm_tokenizer_from_spm_memory(data, size, "fuzz", &tok) == HM_OK) {
            static const char T1[] = "Hello \xE2\x96\x81world <s>\xF0\x9F";
            exercise(tok, (const uint8_t *)T1, sizeof T1 - 1);
            hm_tokenizer_free(tok);
        }
    } else if (mode == 2) {
        if (hm_tokenizer_from_tiktoken_memory(data, size, "fuzz", &tok) == HM_OK) {
            static const char T2[] = "Hello, world! 123 \xC3\xA9\xFF";
            exercise(tok, (const uint8_t *)T2, sizeof T2 - 1);
            hm_tokenizer_free(tok);
        }
    } else if (mode == 3) {
        tok = small_vocab();
        if (tok) exercise(tok, data, size);
    } else if (mode == 4) {
        /* tokenizer.json \0 text */
        const uint8_t *z = memchr(data, 0, size);
        size_t jl = z ? (size_t)(z - data) : size;
        if (hm_tokenizer_from_json_memory((const char *)data, jl, "fuzz", &tok) == HM_OK) {
            if (z) exercise(tok, z + 1, size - jl - 1);
            hm_tokenizer_free(tok);
        }
    } else {
        tok = normalizing_vocab();
        if (tok) exercise(tok, data, size);
    }
    return 0;
}
