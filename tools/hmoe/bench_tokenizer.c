/* bench_tokenizer.c - `hmoe bench tokenizer`: single-thread encode throughput on a realistic mixed
 * text (or a file), validated by an exact decode round trip. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/timer.h"
#include "hmoe.h"
#include "tokenizer/tokenizer.h"

static const char *const WORDS[] = {
    "the",       "of",         "and",       "to",      "in",      "is",    "that",      "for",
    "it",        "with",       "as",        "was",     "on",      "model", "expert",    "token",
    "memory",    "bandwidth",  "inference", "mixture", "router",  "layer", "attention", "weights",
    "quantized", "throughput", "latency",   "kernel",  "GPU",     "CPU",   "Hello",     "World",
    "don't",     "we'll",      "It's",      "naïve",   "café",    "über",  "Straße",    "東京",
    "模型",      "専門家",     "данные",    "модель",  "σύστημα", "λόγος", "مرحبا",     "שלום",
    "नमस्ते",      "🦙",       "🚀",         "✅",       "—",       "…",     "«quoted»",  "3.14159",
    "2024",      "1,000,000",  "0x7f",      "42"};
static const char *const CODE[] = {"int main(void) {\n    return 0;\n}\n",
                                   "for (size_t i = 0; i < n; i++) sum += x[i];\n",
                                   "def forward(self, x):\n        return self.proj(x) * 0.5\n",
                                   "    if (!ptr) return HM_ERR_NO_MEMORY;\n",
                                   "{\"role\": \"user\", \"content\": \"hi\"}\n",
                                   "SELECT id, name FROM users WHERE age >= 18;\n"};

/* Deterministic mixed text: sentences of words with punctuation, numbers, code and non-ASCII. */
static char *make_text(size_t bytes) {
    char *buf = malloc(bytes + 256);
    if (!buf) return NULL;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    size_t n = 0, nw = sizeof WORDS / sizeof WORDS[0], nc = sizeof CODE / sizeof CODE[0];
    int in_sentence = 0;
    while (n < bytes) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        unsigned r = (unsigned)(s >> 32);
        const char *w;
        if (r % 97 == 0) {
            w = CODE[(r >> 8) % nc];
            in_sentence = 0;
        } else {
            w = WORDS[(r >> 8) % nw];
        }
        size_t len = strlen(w);
        if (n + len + 4 > bytes + 200) break;
        if (n && buf[n - 1] != '\n') buf[n++] = ' ';
        memcpy(buf + n, w, len);
        n += len;
        if (++in_sentence > 6 + (int)(r % 11)) {
            static const char P[] = ".,;:!?";
            buf[n++] = P[(r >> 4) % 6];
            if ((r >> 12) % 5 == 0) buf[n++] = '\n';
            in_sentence = 0;
        }
    }
    buf[n] = 0;
    return buf;
}

int bench_tokenizer(int argc, char **argv) {
    const char *model = NULL, *file = NULL;
    long mb = 16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v)
            model = v, i++;
        else if (!strcmp(a, "--file") && v)
            file = v, i++;
        else if (!strcmp(a, "--mb") && cli_parse_int(v, 1, 4096, &mb))
            i++;
        else
            return cli_usage_error("bench tokenizer: unexpected argument '%s'\nusage: hmoe bench "
                                   "tokenizer [-m PATH] [--file F] [--mb N]",
                                   a);
    }
    char def[4096];
    if (!model) {
        const char *td = getenv("HMOE_TESTDATA");
        snprintf(def, sizeof def, "%s/tokenizers/qwen2", td ? td : "../shared/testdata");
        model = def;
    }
    hm_tokenizer *tok;
    double t0 = hm_time_s();
    if (hm_tokenizer_load(model, &tok) != HM_OK) {
        fprintf(stderr, "hmoe: %s\n", hm_last_error());
        return 1;
    }
    double t_load = hm_time_s() - t0;
    size_t len;
    char *text = file ? cli_read_file(file, &len) : make_text((size_t)mb << 20);
    if (!text) {
        fprintf(stderr, "hmoe: %s\n", file ? hm_last_error() : "out of memory for the text");
        hm_tokenizer_free(tok);
        return 1;
    }
    if (!file) len = strlen(text);
    printf("tokenizer bench: vocab %s (%s, pre %s, %u tokens, loaded in %.2f s)\n", model,
           hm_tokenizer_kind_name(tok), hm_tokenizer_pre_name(tok), hm_tokenizer_n_vocab(tok),
           t_load);
    printf("input: %s, %.2f MB, threads=1\n", file ? file : "generated mixed text", len / 1e6);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = 0;
    /* warm-up on the first MB, then the timed run over everything */
    hm_status st =
        hm_tokenizer_encode_alloc(tok, text, len < (1u << 20) ? len : (1u << 20), 0, &ids, &n);
    free(ids);
    double best = 1e30;
    for (int rep = 0; rep < 3 && !st; rep++) {
        ids = NULL;
        t0 = hm_time_s();
        st = hm_tokenizer_encode_alloc(tok, text, len, 0, &ids, &n);
        double dt = hm_time_s() - t0;
        if (dt < best) best = dt;
        if (rep < 2) free(ids);
    }
    if (st) {
        fprintf(stderr, "hmoe: %s\n", hm_last_error());
        rc = 1;
    } else {
        char *back;
        size_t blen;
        bool ok = hm_tokenizer_decode(tok, ids, n, 0, &back, &blen) == HM_OK && blen == len &&
                  memcmp(back, text, len) == 0;
        free(back);
        printf("encode: %zu tokens (%.2f bytes/token), best of 3: %.3f s, %.1f MB/s, %.2f M "
               "tokens/s\n",
               n, n ? (double)len / n : 0.0, best, len / best / 1e6, n / best / 1e6);
        printf("validation: decode(encode(text)) == text: %s\n", ok ? "yes" : "NO");
        if (!ok) rc = 1;
        free(ids);
    }
    free(text);
    hm_tokenizer_free(tok);
    return rc;
}
