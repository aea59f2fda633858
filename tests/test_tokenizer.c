/* test_tokenizer.c - tokenizers against golden files: llama.cpp's test-tokenizer-0 vectors for
 * every vocab GGUF, the same vectors through the HF (Qwen2), tiktoken (Llama-3) and SentencePiece
 * (Llama-2) readers, mistral-common's chat samples, HF tokenizers' ids for the normalizers and
 * long whitespace (tests/data/tokenizer, tests/gen/tokenizer_goldens.py); exact round trips,
 * streaming decode, random UTF-8, threads, and malformed inputs (special ids out of range, invalid
 * UTF-8 token texts, corrupt gzip). Test data: $HMOE_TESTDATA or ../shared/testdata. */
#include <dirent.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "core/timer.h"
#include "format/gguf.h"
#include "test.h"
#include "tokenizer/tokenizer.h"

static char g_data[1024];

/* ---- vector files ------------------------------------------------------------------------------
 */

typedef struct vcase {
    const char *text;
    size_t len;
    int32_t ids[1024];
    size_t n;
} vcase;

typedef struct vectors {
    char *inp, *out;
    vcase *c;
    size_t n;
} vectors;

static void vectors_free(vectors *v) {
    free(v->inp);
    free(v->out);
    free(v->c);
}

static bool vectors_load(const char *inp_path, const char *out_path, vectors *v) {
    memset(v, 0, sizeof *v);
    size_t li, lo;
    v->inp = test_read_file(inp_path, &li);
    v->out = test_read_file(out_path, &lo);
    if (!v->inp || !v->out) return false;
    static const char SEP[] = "\n__ggml_vocab_test__\n";
    v->c = calloc(256, sizeof *v->c);
    const char *p = v->inp, *end = v->inp + li;
    char *line = v->out;
    while (p < end && v->n < 256) {
        const char *s = strstr(p, SEP);
        if (!s) break;
        vcase *c = &v->c[v->n++];
        c->text = p;
        c->len = (size_t)(s - p);
        p = s + strlen(SEP);
        char *nl = strchr(line, '\n');
        if (!nl) return false;
        *nl = 0;
        for (char *q = line; *q;) {
            while (*q == ' ') q++;
            if (!*q) break;
            c->ids[c->n++] = (int32_t)strtol(q, &q, 10);
            if (c->n == 1024) break;
        }
        line = nl + 1;
    }
    return v->n > 0;
}

/* Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF). */
static bool utf8_valid(const char *str, size_t n) {
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k = c < 0x80                 ? 1
                   : c >= 0xC2 && c <= 0xDF ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
        if (!k || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return false;
        if (k > 1) {
            uint8_t d = s[i + 1];
            if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F) || (c == 0xF0 && d < 0x90) ||
                (c == 0xF4 && d > 0x8F))
                return false;
        }
        i += k;
    }
    return true;
}

/* Streams ids through an incremental decoder; checks chunks are whole UTF-8 (when the total is)
 * and that their concatenation is the whole decode. */
static void check_stream(const hm_tokenizer *tok, const int32_t *ids, size_t n, unsigned flags,
                         const char *what) {
    char *whole;
    size_t wl;
    if (hm_tokenizer_decode(tok, ids, n, flags, &whole, &wl) != HM_OK) {
        CHECK_MSG(0, "%s: decode failed: %s", what, hm_last_error());
        return;
    }
    bool valid = utf8_valid(whole, wl);
    hm_detok *d;
    CHECK_OK(hm_detok_new(tok, flags, &d));
    char *acc = malloc(wl + 64);
    size_t al = 0;
    bool chunks_ok = true;
    for (size_t i = 0; i < n; i++) {
        const char *s;
        size_t l;
        if (hm_detok_push(d, ids[i], &s, &l) != HM_OK) break;
        if (valid && !utf8_valid(s, l)) chunks_ok = false;
        if (al + l <= wl) memcpy(acc + al, s, l);
        al += l;
    }
    const char *s;
    size_t l;
    hm_detok_flush(d, &s, &l);
    if (al + l <= wl) memcpy(acc + al, s, l);
    al += l;
    CHECK_MSG(chunks_ok, "%s: a streamed chunk split a UTF-8 sequence", what);
    CHECK_MSG(al == wl && memcmp(acc, whole, wl) == 0, "%s: streamed decode differs", what);
    hm_detok_free(d);
    free(acc);
    free(whole);
}

/* The text as single-byte tokens: the decoder must hold back every partial sequence. */
static void check_stream_bytes(const hm_tokenizer *tok, const char *text, size_t len,
                               const char *what) {
    int32_t *ids = malloc((len + 1) * sizeof *ids);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        int32_t id;
        if (hm_tokenizer_kind(tok) == HM_TOK_BPE) {
            int32_t *t1;
            size_t k;
            if (hm_tokenizer_encode_alloc(tok, &c, 1, 0, &t1, &k) != HM_OK || k != 1) {
                free(t1);
                free(ids);
                return;
            }
            id = t1[0];
            free(t1);
        } else {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", (uint8_t)c);
            id = hm_tokenizer_find(tok, name, 6);
            if (id < 0) {
                free(ids);
                return;
            }
        }
        ids[n++] = id;
    }
    check_stream(tok, ids, n, 0, what);
    free(ids);
}

typedef struct tally {
    int pass, fail;
} tally;

/* Runs every case of a vector file through tok; returns the tally. */
static tally run_vectors(const hm_tokenizer *tok, const vectors *v, const char *name,
                         bool roundtrip) {
    tally t = {0, 0};
    for (size_t i = 0; i < v->n; i++) {
        const vcase *c = &v->c[i];
        int32_t *ids;
        size_t n;
        if (hm_tokenizer_encode_alloc(tok, c->text, c->len, 0, &ids, &n) != HM_OK) {
            CHECK_MSG(0, "%s case %zu: %s", name, i, hm_last_error());
            t.fail++;
            continue;
        }
        bool same = n == c->n && (n == 0 || memcmp(ids, c->ids, n * sizeof *ids) == 0);
        if (same) {
            t.pass++;
        } else {
            t.fail++;
            fprintf(stderr, "%s case %zu '%.40s': got", name, i, c->text);
            for (size_t k = 0; k < n && k < 24; k++) fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n  want");
            for (size_t k = 0; k < c->n && k < 24; k++) fprintf(stderr, " %d", c->ids[k]);
            fprintf(stderr, "\n");
        }
        CHECK(same);
        if (roundtrip) {
            unsigned fl = hm_tokenizer_kind(tok) == HM_TOK_SPM ? HM_DETOK_STRIP_SPACE : 0;
            char *back;
            size_t bl;
            CHECK_OK(hm_tokenizer_decode(tok, c->ids, c->n, fl, &back, &bl));
            CHECK_MSG(bl == c->len && memcmp(back, c->text, bl) == 0,
                      "%s case %zu: decode != input", name, i);
            free(back);
            char what[256];
            snprintf(what, sizeof what, "%s case %zu", name, i);
            check_stream(tok, c->ids, c->n, fl, what);
            check_stream_bytes(tok, c->text, c->len, what);
        }
        free(ids);
    }
    printf("  %-44s %3d/%d cases pass\n", name, t.pass, t.pass + t.fail);
    return t;
}

static void test_gguf_dir(const char *sub) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/tokenizers/%s", g_data, sub);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char names[64][256];
    int nn = 0;
    while ((e = readdir(d)) && nn < 64) {
        size_t l = strlen(e->d_name);
        if (l > 5 && l < 200 && !strcmp(e->d_name + l - 5, ".gguf"))
            memcpy(names[nn++], e->d_name, l + 1);
    }
    closedir(d);
    for (int i = 0; i < nn; i++) {
        char path[4600], inp[4700], out[4700];
        snprintf(path, sizeof path, "%.4200s/%.200s", dir, names[i]);
        snprintf(inp, sizeof inp, "%s.inp", path);
        snprintf(out, sizeof out, "%s.out", path);
        struct stat sb;
        if (stat(inp, &sb) != 0) continue;
        hm_tokenizer *tok;
        hm_status st = hm_tokenizer_load(path, &tok);
        CHECK_MSG(st == HM_OK, "%s: %s", path, hm_last_error());
        if (st) continue;
        vectors v;
        CHECK_MSG(vectors_load(inp, out, &v), "%s: cannot read vectors", inp);
        char name[300];
        snprintf(name, sizeof name, "%.40s/%.200s", sub, names[i]);
        run_vectors(tok, &v, name, hm_tokenizer_kind(tok) != HM_TOK_WPM);
        vectors_free(&v);
        hm_tokenizer_free(tok);
    }
}

static void test_source(const char *model, const char *vec, const char *label) {
    char path[4200], inp[4300], out[4300];
    snprintf(path, sizeof path, "%s/tokenizers/%s", g_data, model);
    snprintf(inp, sizeof inp, "%s/tokenizers/%s.inp", g_data, vec);
    snprintf(out, sizeof out, "%s/tokenizers/%s.out", g_data, vec);
    hm_tokenizer *tok;
    hm_status st = hm_tokenizer_load(path, &tok);
    CHECK_MSG(st == HM_OK, "%s: %s", path, hm_last_error());
    if (st) return;
    vectors v;
    CHECK(vectors_load(inp, out, &v));
    run_vectors(tok, &v, label, true);
    vectors_free(&v);
    hm_tokenizer_free(tok);
}

/* ---- mistral-common samples -------------------------------------------------------------------
 */

static void test_mistral(void) {
    static const char *const models[4] = {NULL, "tokenizer.model.v1",
                                          "mistral_instruct_tokenizer_240216.model.v2",
                                          "mistral_instruct_tokenizer_240323.model.v3"};
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/tokenizers/mistral-spm/samples", g_data);
    DIR *d = opendir(dir);
    if (!d) return;
    hm_tokenizer *toks[4] = {0};
    for (int ver = 1; ver <= 3; ver++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/tokenizers/mistral-spm/%s", g_data, models[ver]);
        CHECK_OK(hm_tokenizer_load(p, &toks[ver]));
    }
    int pass = 0, total = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        for (int ver = 1; ver <= 3; ver++) {
            const hm_tokenizer *tok = toks[ver];
            char tp[4500], xp[4500];
            snprintf(tp, sizeof tp, "%s/%s/tokens_v%d.json", dir, e->d_name, ver);
            snprintf(xp, sizeof xp, "%s/%s/text_v%d.txt", dir, e->d_name, ver);
            json_t *j = json_load_file(tp, 0, NULL);
            if (!j || !tok) {
                json_decref(j);
                continue;
            }
            json_t *arr = json_object_get(j, "tokens");
            size_t n = json_array_size(arr);
            int32_t *want = malloc((n + 1) * sizeof *want);
            for (size_t i = 0; i < n; i++)
                want[i] = (int32_t)json_integer_value(json_array_get(arr, i));
            json_decref(j);
            /* 1. the raw pieces concatenate to text_vN.txt */
            size_t xl;
            char *expect = test_read_file(xp, &xl);
            char *cat = malloc(1);
            size_t cl = 0;
            for (size_t i = 0; i < n; i++) {
                const char *t = hm_tokenizer_token_text(tok, want[i]);
                size_t l = t ? strlen(t) : 0;
                cat = realloc(cat, cl + l + 1);
                memcpy(cat + cl, t, l);
                cl += l;
            }
            bool known_exception = ver == 2 && !strcmp(e->d_name, "parallel_calls");
            if (!known_exception)
                CHECK_MSG(expect && cl == xl && memcmp(cat, expect, xl) == 0,
                          "%s v%d: pieces != text_v%d.txt", e->d_name, ver, ver);
            free(cat);
            free(expect);
            /* 2. the input text (pieces decoded, the dummy-prefix space after each control token
             * removed) encodes back to exactly the ids */
            char *text = malloc(1);
            size_t tl = 0;
            bool after_ctrl = true;
            for (size_t i = want[0] == hm_tokenizer_bos(tok) ? 1 : 0; i < n; i++) {
                size_t pl;
                const char *p = hm_tokenizer_piece(tok, want[i], HM_DETOK_SPECIAL, &pl);
                bool ctrl = hm_tokenizer_is_control(tok, want[i]);
                if (!ctrl && after_ctrl && pl && p[0] == ' ') p++, pl--;
                after_ctrl = ctrl;
                text = realloc(text, tl + pl + 1);
                memcpy(text + tl, p, pl);
                tl += pl;
            }
            int32_t *got;
            size_t gn;
            CHECK_OK(hm_tokenizer_encode_alloc(
                tok, text, tl, HM_TOK_ADD_SPECIAL | HM_TOK_PARSE_SPECIAL, &got, &gn));
            bool same = gn == n && memcmp(got, want, n * sizeof *got) == 0;
            if (!same) {
                size_t k = 0;
                while (k < n && k < gn && got[k] == want[k]) k++;
                fprintf(stderr, "mistral %s v%d: first difference at %zu (got %d want %d)\n",
                        e->d_name, ver, k, k < gn ? got[k] : -1, k < n ? want[k] : -1);
            }
            CHECK(same);
            pass += same;
            total++;
            free(got);
            free(text);
            free(want);
        }
    }
    closedir(d);
    printf("  %-44s %3d/%d samples pass\n", "mistral-spm/samples (v1, v2, v3)", pass, total);
    for (int ver = 1; ver <= 3; ver++) hm_tokenizer_free(toks[ver]);
}

/* ---- random UTF-8 round trips, threads, specials ----------------------------------------------
 */

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint32_t next_rand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static size_t random_utf8(char *buf, size_t max_cps) {
    size_t n = 0, k = 1 + next_rand() % max_cps;
    for (size_t i = 0; i < k; i++) {
        uint32_t r = next_rand(), cp;
        switch (r % 6) {
        case 0:
            cp = 0x20 + r / 8 % 95;
            break;
        case 1:
            cp = " \t\n\r"[r / 8 % 4];
            break;
        case 2:
            cp = 0x80 + r / 8 % 0x780;
            break;
        case 3:
            cp = 0x800 + r / 8 % 0xF800;
            break;
        case 4:
            cp = 0x10000 + r / 8 % 0x100000;
            break;
        default:
            cp = '0' + r / 8 % 10;
            break;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
        if (cp < 0x80)
            buf[n++] = (char)cp;
        else if (cp < 0x800)
            buf[n++] = (char)(0xC0 | cp >> 6), buf[n++] = (char)(0x80 | (cp & 63));
        else if (cp < 0x10000)
            buf[n++] = (char)(0xE0 | cp >> 12), buf[n++] = (char)(0x80 | (cp >> 6 & 63)),
            buf[n++] = (char)(0x80 | (cp & 63));
        else
            buf[n++] = (char)(0xF0 | cp >> 18), buf[n++] = (char)(0x80 | (cp >> 12 & 63)),
            buf[n++] = (char)(0x80 | (cp >> 6 & 63)), buf[n++] = (char)(0x80 | (cp & 63));
    }
    return n;
}

static void test_random(const char *model, int iters) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizers/%s", g_data, model);
    hm_tokenizer *tok;
    if (hm_tokenizer_load(path, &tok) != HM_OK) {
        CHECK_MSG(0, "%s: %s", path, hm_last_error());
        return;
    }
    unsigned fl = hm_tokenizer_kind(tok) == HM_TOK_SPM ? HM_DETOK_STRIP_SPACE : 0;
    int bad = 0;
    for (int it = 0; it < iters; it++) {
        char buf[1024];
        size_t n = random_utf8(buf, 64);
        if (it % 7 == 0 && n)
            buf[next_rand() % n] = (char)(0x80 | next_rand() % 0x40); /* stray byte */
        int32_t *ids;
        size_t k;
        char *back;
        size_t bl;
        if (hm_tokenizer_encode_alloc(tok, buf, n, 0, &ids, &k) != HM_OK ||
            hm_tokenizer_decode(tok, ids, k, fl, &back, &bl) != HM_OK) {
            bad++;
            free(ids);
            continue;
        }
        const char *want = buf;
        size_t want_n = n;
        char *again = NULL;
        if (*hm_tokenizer_normalizer(tok)) {
            /* normalized text: decode(encode(x)) is the normal form, a fixed point */
            int32_t *ids2;
            size_t k2;
            if (hm_tokenizer_encode_alloc(tok, back, bl, 0, &ids2, &k2) == HM_OK &&
                hm_tokenizer_decode(tok, ids2, k2, fl, &again, &want_n) == HM_OK)
                want = again;
            else
                want_n = bl + 1;
            free(ids2);
        }
        if (bl != want_n || memcmp(back, want, want_n) != 0) {
            if (!bad++) {
                fprintf(stderr, "%s: no round trip for:", model);
                for (size_t i = 0; i < n; i++) fprintf(stderr, " %02x", (uint8_t)buf[i]);
                fprintf(stderr, "\n  decoded as:");
                for (size_t i = 0; i < bl; i++) fprintf(stderr, " %02x", (uint8_t)back[i]);
                fprintf(stderr, "\n");
            }
        }
        check_stream(tok, ids, k, fl, model);
        free(ids);
        free(back);
        free(again);
    }
    CHECK_MSG(bad == 0, "%s: %d/%d random strings do not round-trip", model, bad, iters);
    printf("  %-44s %3d/%d random strings round-trip\n", model, iters - bad, iters);
    hm_tokenizer_free(tok);
}

typedef struct thr_arg {
    const hm_tokenizer *tok;
    const vectors *v;
    int fails;
} thr_arg;

static void *thr_main(void *p) {
    thr_arg *a = p;
    for (int rep = 0; rep < 20; rep++)
        for (size_t i = 0; i < a->v->n; i++) {
            int32_t *ids;
            size_t n;
            const vcase *c = &a->v->c[i];
            if (hm_tokenizer_encode_alloc(a->tok, c->text, c->len, 0, &ids, &n) != HM_OK ||
                n != c->n || (n && memcmp(ids, c->ids, n * sizeof *ids)))
                a->fails++;
            free(ids);
        }
    return NULL;
}

static void test_qwen2_specials_threads(void) {
    char path[4200], inp[4300], out[4300];
    snprintf(path, sizeof path, "%s/tokenizers/qwen2", g_data);
    hm_tokenizer *tok;
    if (hm_tokenizer_load(path, &tok) != HM_OK) return;
    CHECK(hm_tokenizer_eos(tok) == 151645);
    CHECK(hm_tokenizer_eot(tok) == 151645);
    CHECK(hm_tokenizer_is_eog(tok, 151643) && hm_tokenizer_is_eog(tok, 151645));
    CHECK(hm_tokenizer_is_control(tok, 151644));
    CHECK(!hm_tokenizer_add_bos(tok));
    const char *chat = "<|im_start|>user\nHello<|im_end|>\n";
    int32_t *ids;
    size_t n;
    CHECK_OK(hm_tokenizer_encode_alloc(tok, chat, strlen(chat), HM_TOK_PARSE_SPECIAL, &ids, &n));
    CHECK(n == 6 && ids[0] == 151644 && ids[1] == 872 && ids[2] == 198 && ids[3] == 9707 &&
          ids[4] == 151645 && ids[5] == 198);
    char *back;
    size_t bl;
    CHECK_OK(hm_tokenizer_decode(tok, ids, n, HM_DETOK_SPECIAL, &back, &bl));
    CHECK(bl == strlen(chat) && !memcmp(back, chat, bl));
    free(back);
    CHECK_OK(hm_tokenizer_decode(tok, ids, n, 0, &back, &bl));
    CHECK(bl == 11 && !memcmp(back, "user\nHello\n", 11));
    free(back);
    free(ids);
    /* without parse_special the markers are plain text */
    CHECK_OK(hm_tokenizer_encode_alloc(tok, chat, strlen(chat), 0, &ids, &n));
    CHECK(n > 6 && ids[0] != 151644);
    free(ids);
    /* several threads, one tokenizer */
    snprintf(inp, sizeof inp, "%s/tokenizers/gguf-mainline/ggml-vocab-qwen2.gguf.inp", g_data);
    snprintf(out, sizeof out, "%s/tokenizers/gguf-mainline/ggml-vocab-qwen2.gguf.out", g_data);
    vectors v;
    if (vectors_load(inp, out, &v)) {
        pthread_t th[4];
        thr_arg args[4];
        for (int i = 0; i < 4; i++) {
            args[i] = (thr_arg){tok, &v, 0};
            pthread_create(&th[i], NULL, thr_main, &args[i]);
        }
        int fails = 0;
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            fails += args[i].fails;
        }
        CHECK_MSG(fails == 0, "%d encodes differ under 4 threads", fails);
    }
    vectors_free(&v);
    hm_tokenizer_free(tok);
}

static void test_llama3_and_o200k(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizers/llama3/tokenizer.model", g_data);
    hm_tokenizer *tok;
    if (hm_tokenizer_load(path, &tok) == HM_OK) {
        CHECK(hm_tokenizer_n_vocab(tok) == 128256);
        CHECK(hm_tokenizer_bos(tok) == 128000 && hm_tokenizer_add_bos(tok));
        CHECK(hm_tokenizer_eot(tok) == 128009);
        const char *s = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>";
        int32_t *ids;
        size_t n;
        CHECK_OK(hm_tokenizer_encode_alloc(tok, s, strlen(s),
                                           HM_TOK_ADD_SPECIAL | HM_TOK_PARSE_SPECIAL, &ids, &n));
        CHECK(n == 7 && ids[0] == 128000 && ids[1] == 128006 && ids[2] == 882 && ids[3] == 128007 &&
              ids[4] == 271 && ids[5] == 13347 && ids[6] == 128009);
        free(ids);
        hm_tokenizer_free(tok);
    }
    snprintf(path, sizeof path, "%s/tokenizers/gpt-oss/o200k_base.tiktoken.gz", g_data);
    hm_status st = hm_tokenizer_load(path, &tok);
    CHECK_MSG(st == HM_OK, "%s", hm_last_error());
    if (st) return;
    CHECK(hm_tokenizer_n_vocab(tok) >= 199998);
    CHECK(!strcmp(hm_tokenizer_pre_name(tok), "gpt-4o"));
    int32_t *ids;
    size_t n;
    const char *s = "Hello, world! I'm here.";
    CHECK_OK(hm_tokenizer_encode_alloc(tok, s, strlen(s), 0, &ids, &n));
    /* tiktoken o200k_base: [13225, 11, 2375, 0, 5477, 2105, 13] */
    CHECK(n == 7 && ids[0] == 13225 && ids[1] == 11 && ids[2] == 2375 && ids[3] == 0 &&
          ids[4] == 5477 && ids[5] == 2105 && ids[6] == 13);
    free(ids);
    CHECK(hm_tokenizer_find(tok, "<|channel|>", 11) == 200005);
    hm_tokenizer_free(tok);
}

/* ---- malformed inputs -------------------------------------------------------------------------
 */

static void test_bad_inputs(void) {
    hm_tokenizer *tok = (hm_tokenizer *)1;
    /* vocab.json that is not an object */
    CHECK_STATUS(hm_tokenizer_from_hf_memory("[1,2]", 5, "", 0, "bad", &tok), HM_ERR_FORMAT);
    CHECK(tok == NULL);
    CHECK_CONTAINS(hm_last_error(), "object");
    CHECK_STATUS(hm_tokenizer_from_hf_memory("{\"a\": 0", 7, "", 0, "bad", &tok), HM_ERR_FORMAT);
    CHECK_STATUS(hm_tokenizer_from_hf_memory("{\"a\": -1}", 9, "", 0, "bad", &tok), HM_ERR_FORMAT);
    CHECK_STATUS(hm_tokenizer_from_hf_memory("{\"a\": \"x\"}", 10, "", 0, "bad", &tok),
                 HM_ERR_FORMAT);
    /* merges referring to unknown tokens */
    const char *v = "{\"a\": 0, \"b\": 1, \"ab\": 2}";
    const char *m = "#version: 0.2\na b\na c\n";
    CHECK_STATUS(hm_tokenizer_from_hf_memory(v, strlen(v), m, strlen(m), "m", &tok),
                 HM_ERR_NOT_FOUND);
    CHECK_CONTAINS(hm_last_error(), "line 3");
    m = "b a\n";
    CHECK_STATUS(hm_tokenizer_from_hf_memory(v, strlen(v), m, strlen(m), "m", &tok),
                 HM_ERR_NOT_FOUND);
    CHECK_CONTAINS(hm_last_error(), "result");
    m = "ab\n";
    CHECK_STATUS(hm_tokenizer_from_hf_memory(v, strlen(v), m, strlen(m), "m", &tok), HM_ERR_FORMAT);
    /* a good tiny one, then ids out of range for decode */
    m = "a b\n";
    CHECK_OK(hm_tokenizer_from_hf_memory(v, strlen(v), m, strlen(m), "tiny", &tok));
    if (tok) {
        int32_t *ids;
        size_t n;
        CHECK_OK(hm_tokenizer_encode_alloc(tok, "abba", 4, 0, &ids, &n));
        CHECK(n == 3 && ids[0] == 2 && ids[1] == 1 && ids[2] == 0);
        free(ids);
        int32_t bad[] = {0, 3};
        char *text;
        size_t len;
        CHECK_STATUS(hm_tokenizer_decode(tok, bad, 2, 0, &text, &len), HM_ERR_INVALID_ARG);
        CHECK(text == NULL);
        CHECK_CONTAINS(hm_last_error(), "out of range");
        bad[1] = -5;
        CHECK_STATUS(hm_tokenizer_decode(tok, bad, 2, 0, &text, &len), HM_ERR_INVALID_ARG);
        hm_detok *d;
        CHECK_OK(hm_detok_new(tok, 0, &d));
        const char *s;
        CHECK_STATUS(hm_detok_push(d, 99, &s, &len), HM_ERR_INVALID_ARG);
        hm_detok_free(d);
        CHECK(hm_tokenizer_token_text(tok, 7) == NULL);
        hm_tokenizer_free(tok);
    }
    /* tiktoken and SentencePiece garbage */
    CHECK_STATUS(hm_tokenizer_from_tiktoken_memory("YQ== x\n", 7, "tt", &tok), HM_ERR_FORMAT);
    CHECK_STATUS(hm_tokenizer_from_tiktoken_memory("!!! 0\n", 6, "tt", &tok), HM_ERR_FORMAT);
    CHECK_STATUS(hm_tokenizer_from_tiktoken_memory("YQ== 0\nYQ== 0\n", 14, "tt", &tok),
                 HM_ERR_FORMAT);
    static const uint8_t gz[] = {0x1F, 0x8B, 8,    0,    0,    0,    0,    0,    0,    3,
                                 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
    CHECK_STATUS(hm_tokenizer_from_tiktoken_memory(gz, sizeof gz, "gz", &tok), HM_ERR_FORMAT);
    static const uint8_t pb[] = {0x0A, 0x20, 0x0A, 0x03, 'a'};
    CHECK_STATUS(hm_tokenizer_from_spm_memory(pb, sizeof pb, "spm", &tok), HM_ERR_FORMAT);
    /* truncated and corrupted GGUF vocabularies: errors, never a crash */
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizers/gguf/ggml-vocab-gpt-2.gguf", g_data);
    size_t len;
    char *file = test_read_file(path, &len);
    if (file) {
        int ok_count = 0;
        for (size_t cut = 0; cut < len; cut += len / 97 + 1) {
            hm_gguf *g;
            if (hm_gguf_parse_memory(file, cut, "cut", &g) != HM_OK) continue;
            if (hm_tokenizer_from_gguf(g, &tok) == HM_OK) {
                ok_count++;
                hm_tokenizer_free(tok);
            }
            hm_gguf_close(g);
        }
        CHECK(ok_count == 0);
        /* flip bytes in the metadata */
        uint64_t r = 12345;
        for (int it = 0; it < 200; it++) {
            char *copy = malloc(len);
            memcpy(copy, file, len);
            for (int k = 0; k < 4; k++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                copy[(r >> 33) % (len < 4096 ? len : 4096)] ^= (char)(1 + (r >> 20) % 255);
            }
            hm_gguf *g;
            if (hm_gguf_parse_memory(copy, len, "flip", &g) == HM_OK) {
                if (hm_tokenizer_from_gguf(g, &tok) == HM_OK) {
                    int32_t *ids;
                    size_t n;
                    if (hm_tokenizer_encode_alloc(tok, "Hello world", 11, HM_TOK_ADD_SPECIAL, &ids,
                                                  &n) == HM_OK)
                        free(ids);
                    hm_tokenizer_free(tok);
                }
                hm_gguf_close(g);
            }
            free(copy);
        }
        free(file);
    }
    CHECK_STATUS(hm_tokenizer_load("/nonexistent/tokenizer", &tok), HM_ERR_NOT_FOUND);
}

/* ---- hostile vocabularies: special ids out of range, invalid UTF-8 token texts ------------------
 */

static char g_tmp[64]; /* scratch directory (mkdtemp) */

typedef struct kv_id {
    const char *key;
    uint64_t v;
} kv_id;

/* Writes a vocabulary-only GGUF; types and pre may be NULL, ids ends with a NULL key. */
static bool write_vocab_gguf(const char *path, const char *model, const char *pre, uint32_t n,
                             const char *const *toks, const uint64_t *lens, const int32_t *types,
                             const kv_id *ids) {
    hm_gguf_writer *w;
    if (hm_gguf_writer_open(path, &w) != HM_OK) return false;
    hm_status st = hm_gguf_w_str(w, "tokenizer.ggml.model", model);
    if (!st && pre) st = hm_gguf_w_str(w, "tokenizer.ggml.pre", pre);
    if (!st) st = hm_gguf_w_arr_str(w, "tokenizer.ggml.tokens", n, toks, lens);
    if (!st && types) st = hm_gguf_w_arr(w, "tokenizer.ggml.token_type", HM_GGUF_INT32, n, types);
    if (!st && !strcmp(model, "gpt2"))
        st = hm_gguf_w_arr_str(w, "tokenizer.ggml.merges", 0, NULL, NULL);
    for (; ids && ids->key && !st; ids++) st = hm_gguf_w_uint(w, ids->key, HM_GGUF_UINT64, ids->v);
    if (st) {
        hm_gguf_writer_abort(w);
        return false;
    }
    return hm_gguf_writer_finish(w) == HM_OK;
}

/* GPT-2's byte -> printable code point map, as UTF-8: byte b's token text. */
static void gpt2_byte_text(int b, char out[4]) {
    int cp = b, k = 0;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        for (int c = 0; c < b; c++)
            if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 63)), out[2] = 0;
    }
}

/* Runs cmd through the shell; returns its exit status (-1 when it did not exit normally) and
 * its output in out. */
static int run_cmd(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Special-token ids at or past the vocabulary size: llama.cpp ignores such a key with a warning
 * ("bad special token ... using default id"), and so does hm; ids that were defaults and do not fit
 * a small vocabulary are dropped. Before, eot/eom were used as they were: heap overflow in
 * mark_eog (vocab.c) and SIGSEGV in `hmoe tokenize` / `hmoe run`. */
static void test_special_ids(void) {
    char bytes[256][4], path[128];
    const char *toks[258];
    int32_t types[258];
    for (int b = 0; b < 256; b++) {
        gpt2_byte_text(b, bytes[b]);
        toks[b] = bytes[b];
        types[b] = HM_TOKT_NORMAL;
    }
    toks[256] = "<|endoftext|>";
    toks[257] = "<|im_end|>";
    types[256] = types[257] = HM_TOKT_CONTROL;
    const kv_id ids[] = {{"tokenizer.ggml.bos_token_id", 256},
                         {"tokenizer.ggml.eos_token_id", 258},
                         {"tokenizer.ggml.eot_token_id", 258},
                         {"tokenizer.ggml.eom_token_id", 1ull << 40},
                         {"tokenizer.ggml.unknown_token_id", 258},
                         {"tokenizer.ggml.padding_token_id", 100000},
                         {"tokenizer.ggml.seperator_token_id", 4000000000u},
                         {NULL, 0}};
    snprintf(path, sizeof path, "%s/special-ids.gguf", g_tmp);
    CHECK(write_vocab_gguf(path, "gpt2", "gpt-2", 258, toks, NULL, types, ids));
    hm_tokenizer *tok;
    hm_status st = hm_tokenizer_load(path, &tok);
    CHECK_MSG(st == HM_OK, "%s", hm_last_error());
    if (!st) {
        CHECK(hm_tokenizer_bos(tok) == 256);
        CHECK(hm_tokenizer_eos(tok) == 11);  /* llama.cpp's BPE default, the key is ignored */
        CHECK(hm_tokenizer_eot(tok) == 257); /* found by its text, as without the key */
        CHECK(hm_tokenizer_unk(tok) == HM_TOKEN_NONE && hm_tokenizer_pad(tok) == HM_TOKEN_NONE);
        int eog = 0;
        for (int32_t id = -3; id < 262; id++) eog += hm_tokenizer_is_eog(tok, id);
        CHECK(eog == 3); /* eos 11 (','), <|endoftext|> and <|im_end|> */
        const char *text = "Hello<|im_end|>";
        int32_t *out;
        size_t n;
        CHECK_OK(hm_tokenizer_encode_alloc(tok, text, strlen(text),
                                           HM_TOK_ADD_SPECIAL | HM_TOK_PARSE_SPECIAL, &out, &n));
        CHECK(n == 6 && out[0] == 'H' && out[4] == 'o' && out[5] == 257);
        free(out);
        hm_tokenizer_free(tok);
    }
    char cmd[512], buf[4096];
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s --text 'Hi<|im_end|>' --special 2>&1", HMOE_BINARY,
             path);
    int rc = run_cmd(cmd, buf, sizeof buf);
    CHECK_MSG(rc == 0, "hmoe tokenize on out-of-range eot/eom: rc %d: %s", rc, buf);
    CHECK_CONTAINS(buf, "72 105 257");

    /* llama.cpp's per-model defaults that a tiny vocabulary does not have */
    const char *one[] = {"\xE2\x96\x81"
                         "a"};
    snprintf(path, sizeof path, "%s/spm-one.gguf", g_tmp);
    CHECK(write_vocab_gguf(path, "llama", NULL, 1, one, NULL, NULL, NULL));
    if (hm_tokenizer_load(path, &tok) == HM_OK) {
        CHECK(hm_tokenizer_bos(tok) == HM_TOKEN_NONE && hm_tokenizer_eos(tok) == HM_TOKEN_NONE);
        CHECK(!hm_tokenizer_add_bos(tok));
        int32_t *out;
        size_t n;
        CHECK_OK(hm_tokenizer_encode_alloc(tok, "a a", 3, HM_TOK_ADD_SPECIAL, &out, &n));
        CHECK(n == 2 && out[0] == 0 && out[1] == 0);
        free(out);
        hm_tokenizer_free(tok);
    } else {
        CHECK_MSG(0, "%s", hm_last_error());
    }
    const char *three[] = {"[UNK]",
                           "\xE2\x96\x81"
                           "a",
                           "a"};
    snprintf(path, sizeof path, "%s/wpm-three.gguf", g_tmp);
    CHECK(write_vocab_gguf(path, "bert", NULL, 3, three, NULL, NULL, NULL));
    if (hm_tokenizer_load(path, &tok) == HM_OK) {
        int32_t *out;
        size_t n;
        CHECK_OK(hm_tokenizer_encode_alloc(tok, "a b", 3, HM_TOK_ADD_SPECIAL, &out, &n));
        CHECK(n == 1 && out[0] == 1); /* no [CLS]/[SEP]/[UNK] ids: "b" has no token */
        free(out);
        hm_tokenizer_free(tok);
    } else {
        CHECK_MSG(0, "%s", hm_last_error());
    }

    /* Hugging Face files name special tokens by text: one that is not in the vocabulary is none */
    char dir[128], f[192];
    snprintf(dir, sizeof dir, "%s/hf-special", g_tmp);
    snprintf(f, sizeof f, "%s/vocab.json", dir);
    write_text(f, "{\"a\": 0, \"b\": 1, \"ab\": 2}");
    snprintf(f, sizeof f, "%s/merges.txt", dir);
    write_text(f, "#version: 0.2\na b\n");
    snprintf(f, sizeof f, "%s/tokenizer_config.json", dir);
    write_text(f, "{\"eos_token\": \"<nope>\", \"bos_token\": {\"content\": \"<|im_end|>\"},"
                  " \"pad_token\": null, \"added_tokens_decoder\": {"
                  "\"3\": {\"content\": \"<|im_end|>\", \"special\": true},"
                  "\"99999999999\": {\"content\": \"<big>\", \"special\": true},"
                  "\"-4\": {\"content\": \"<neg>\", \"special\": true}}}");
    st = hm_tokenizer_load(dir, &tok);
    CHECK_MSG(st == HM_OK, "%s", hm_last_error());
    if (!st) {
        CHECK(hm_tokenizer_n_vocab(tok) == 4);
        CHECK(hm_tokenizer_bos(tok) == 3 && hm_tokenizer_eot(tok) == 3);
        CHECK(hm_tokenizer_eos(tok) == HM_TOKEN_NONE);
        int32_t *out;
        size_t n;
        CHECK_OK(hm_tokenizer_encode_alloc(tok, "ab<|im_end|>", 12,
                                           HM_TOK_ADD_SPECIAL | HM_TOK_PARSE_SPECIAL, &out, &n));
        CHECK(n == 2 && out[0] == 2 && out[1] == 3);
        free(out);
        hm_tokenizer_free(tok);
    }
}

/* Token texts that are not valid UTF-8 (a 64 KiB one here) do not count in WordPiece's longest
 * token (which bounds the lengths each word is looked up by: counted, a long word would take
 * minutes), and words over 100 characters are [UNK] (Hugging Face WordPiece's
 * max_input_chars_per_word), so the work per word is bounded. */
static void test_invalid_vocab(void) {
    enum { N = 107, BIG = 65536 };
    char names[100][16], path[128];
    const char *toks[N];
    uint64_t lens[N];
    int32_t types[N];
    char *big = malloc(BIG);
    memset(big, 0xFF, BIG);
    for (int i = 0; i < N; i++) types[i] = HM_TOKT_NORMAL;
    for (int i = 0; i < 100; i++) {
        snprintf(names[i], sizeof names[i], i ? "[unused%d]" : "[PAD]", i);
        toks[i] = names[i];
    }
    toks[100] = "[UNK]", toks[101] = "[CLS]", toks[102] = "[SEP]";
    types[0] = types[100] = types[101] = types[102] = HM_TOKT_CONTROL;
    toks[103] = "\xE2\x96\x81"
                "a",
    toks[104] = "a", toks[105] = "aa", toks[106] = big;
    for (int i = 0; i < N; i++) lens[i] = i == 106 ? BIG : strlen(toks[i]);
    snprintf(path, sizeof path, "%s/wpm-invalid.gguf", g_tmp);
    bool ok = write_vocab_gguf(path, "bert", NULL, N, toks, lens, types, NULL);
    free(big);
    CHECK(ok);
    hm_tokenizer *tok;
    hm_status st = hm_tokenizer_load(path, &tok);
    CHECK_MSG(st == HM_OK, "%s", hm_last_error());
    if (st) return;
    size_t len = 20000;
    char *text = malloc(len + 8);
    memset(text, 'a', len);
    int32_t *ids;
    size_t n;
    /* 100 characters: greedy longest match ("▁a", then "aa"...) */
    CHECK_OK(hm_tokenizer_encode_alloc(tok, text, 100, HM_TOK_ADD_SPECIAL, &ids, &n));
    bool want = n == 53 && ids[0] == 101 && ids[1] == 103 && ids[51] == 104 && ids[52] == 102;
    for (size_t i = 2; want && i < 51; i++) want = ids[i] == 105;
    CHECK_MSG(want, "100 a's: %zu ids", n);
    free(ids);
    CHECK_OK(hm_tokenizer_encode_alloc(tok, text, 101, HM_TOK_ADD_SPECIAL, &ids, &n));
    CHECK(n == 3 && ids[0] == 101 && ids[1] == 100 && ids[2] == 102);
    free(ids);
    memcpy(text + len, " aa", 3);
    double t0 = hm_time_s();
    CHECK_OK(hm_tokenizer_encode_alloc(tok, text, len + 3, HM_TOK_ADD_SPECIAL, &ids, &n));
    double dt = hm_time_s() - t0;
    CHECK(n == 5 && ids[1] == 100 && ids[2] == 103 && ids[3] == 104);
    CHECK_MSG(dt < 5.0, "a 20000-character word took %.1f s", dt);
    free(ids);
    free(text);
    hm_tokenizer_free(tok);

    /* byte-level BPE with texts outside the GPT-2 alphabet and invalid UTF-8: loads, encodes */
    char bytes[256][4];
    const char *bt[259];
    for (int b = 0; b < 256; b++) gpt2_byte_text(b, bytes[b]), bt[b] = bytes[b];
    bt[256] = "\xC3", bt[257] = "\xFF\xFE", bt[258] = "ok\xE2\x82";
    snprintf(path, sizeof path, "%s/bpe-invalid.gguf", g_tmp);
    CHECK(write_vocab_gguf(path, "gpt2", "qwen2", 259, bt, NULL, NULL, NULL));
    if (hm_tokenizer_load(path, &tok) == HM_OK) {
        const char *s = "ok \xC3\xFF\xFE \xE2\x82";
        CHECK_OK(hm_tokenizer_encode_alloc(tok, s, strlen(s), 0, &ids, &n));
        char *back;
        size_t bl;
        CHECK_OK(hm_tokenizer_decode(tok, ids, n, 0, &back, &bl));
        CHECK(bl == strlen(s) && !memcmp(back, s, bl));
        free(back);
        free(ids);
        hm_tokenizer_free(tok);
    } else {
        CHECK_MSG(0, "%s", hm_last_error());
    }
}

/* ---- normalizers and long whitespace against Hugging Face tokenizers ---------------------------
 */

typedef struct named_tok {
    char name[64];
    hm_tokenizer *tok;
} named_tok;

static hm_tokenizer *tok_by_name(named_tok *cache, int *n, const char *name) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(cache[i].name, name)) return cache[i].tok;
    char path[4300];
    if (!strcmp(name, "qwen2"))
        snprintf(path, sizeof path, "%s/tokenizers/qwen2", g_data);
    else
        snprintf(path, sizeof path, "%s/tests/data/tokenizer/%s", HMOE_SOURCE_DIR, name);
    hm_tokenizer *tok = NULL;
    hm_status st = hm_tokenizer_load(path, &tok);
    CHECK_MSG(st == HM_OK, "%s: %s", path, hm_last_error());
    if (*n < 32) {
        snprintf(cache[*n].name, sizeof cache[*n].name, "%s", name);
        cache[(*n)++].tok = tok;
    }
    return tok;
}

/* The 1 MB text of tests/gen/tokenizer_goldens.py mixed_ws_text(): the same xorshift64 and tables.
 */
static char *mixed_ws_text(size_t *len) {
    static const char *const words[] = {
        "hello", "world", "Qwen", "caf\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
        "x1",    "2024",  "!!",   "don't",       "\xC3\x85ngstr\xC3\xB6m"};
    static const char *const ws[] = {" ", "  ", "\t", "\n", "\r\n", " \n ", "\n\n", "\xE3\x80\x80"};
    uint64_t x = 0x9E3779B97F4A7C15ull;
    size_t cap = 1100000, n = 0;
    char *s = malloc(cap + 64 * 8 + 21000);
    memset(s, ' ', 400000);
    memcpy(s + 400000, "end", 3);
    n = 400003;
    while (n < 1000000) {
#define RND() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, (uint32_t)(x >> 32))
        uint32_t r = RND() % 100;
        if (r < 45) {
            const char *w = words[RND() % 10];
            memcpy(s + n, w, strlen(w)), n += strlen(w);
        } else if (r < 95) {
            const char *w = ws[RND() % 8];
            uint32_t k = 1 + RND() % 64;
            for (uint32_t i = 0; i < k; i++) memcpy(s + n, w, strlen(w)), n += strlen(w);
        } else {
            uint32_t k = 1000 + RND() % 20000;
            memset(s + n, ' ', k), n += k;
        }
#undef RND
    }
    *len = n;
    return s;
}

static uint64_t fnv1a64_ids(const int32_t *ids, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++)
            h = (h ^ (((uint32_t)ids[i] >> (8 * b)) & 0xFF)) * 0x100000001B3ull;
    return h;
}

/* HF tokenizers' ids for decomposed, precomposed and compatibility text through every normalizer
 * tokenizer.json declares (byte-level vocabularies without merges: the ids are the normalized
 * bytes) and through Qwen2's vocabulary, which normalizes with NFC. */
static void test_normalizers(void) {
    char path[4300];
    snprintf(path, sizeof path, "%s/tests/data/tokenizer/expected.json", HMOE_SOURCE_DIR);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    CHECK_MSG(root != NULL, "%s line %d: %s", path, err.line, err.text);
    if (!root) return;
    named_tok cache[32];
    int n_cache = 0, pass = 0, fail = 0;
    json_t *cases = json_object_get(root, "cases");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "tokenizer"));
        json_t *text = json_object_get(c, "text"), *want = json_object_get(c, "ids");
        hm_tokenizer *tok = tok_by_name(cache, &n_cache, name);
        if (!tok) continue;
        int32_t *ids;
        size_t n;
        bool same = hm_tokenizer_encode_alloc(tok, json_string_value(text),
                                              json_string_length(text), 0, &ids, &n) == HM_OK &&
                    n == json_array_size(want);
        for (size_t k = 0; same && k < n; k++)
            same = ids[k] == json_integer_value(json_array_get(want, k));
        if (same) {
            pass++;
        } else if (!fail++ || fail < 6) {
            fprintf(stderr, "%s '%s': got", name, json_string_value(text));
            for (size_t k = 0; k < n && k < 24; k++) fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n");
        }
        free(ids);
    }
    CHECK_MSG(fail == 0, "%d/%d normalizer cases differ from HF tokenizers", fail, pass + fail);
    printf("  %-44s %3d/%d cases pass\n", "normalizers (tests/data/tokenizer)", pass, pass + fail);

    /* the names, what GGUF pre-tokenizers imply, and bytes that are not UTF-8 */
    hm_tokenizer *t = tok_by_name(cache, &n_cache, "sequence.json");
    if (t) CHECK(!strcmp(hm_tokenizer_normalizer(t), "NFKD+Lowercase+Strip+Prepend"));
    t = tok_by_name(cache, &n_cache, "qwen2");
    if (t) CHECK(!strcmp(hm_tokenizer_normalizer(t), "NFC"));
    t = tok_by_name(cache, &n_cache, "qwen2-split.json");
    if (t) CHECK(!strcmp(hm_tokenizer_normalizer(t), "")); /* "normalizer": null */
    static const char *const ggufs[][2] = {{"gguf-mainline/ggml-vocab-qwen2.gguf", "NFC"},
                                           {"gguf-mainline/ggml-vocab-qwen35.gguf", ""}};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/tokenizers/%s", g_data, ggufs[i][0]);
        if (hm_tokenizer_load(path, &t) != HM_OK) continue;
        CHECK_MSG(!strcmp(hm_tokenizer_normalizer(t), ggufs[i][1]), "%s: normalizer '%s'",
                  ggufs[i][0], hm_tokenizer_normalizer(t));
        hm_tokenizer_free(t);
    }
    t = tok_by_name(cache, &n_cache, "nfc.json");
    if (t) {
        int32_t *ids;
        size_t n;
        const char *s = "e\xCC\xFF"
                        "e\xCC\x81";
        CHECK_OK(hm_tokenizer_encode_alloc(t, s, strlen(s), 0, &ids, &n));
        CHECK(n == 5 && ids[0] == 'e' && ids[1] == 0xCC && ids[2] == 0xFF && ids[3] == 0xC3 &&
              ids[4] == 0xA9);
        free(ids);
    }
    snprintf(path, sizeof path, "%s/tests/data/tokenizer/unsupported.json", HMOE_SOURCE_DIR);
    CHECK_STATUS(hm_tokenizer_load(path, &t), HM_ERR_UNSUPPORTED);
    CHECK_CONTAINS(hm_last_error(), "BertNormalizer");

    /* 1 MB of whitespace runs mixed with words: HF's ids, by count and hash */
    json_t *mw = json_object_get(root, "mixed_ws");
    t = tok_by_name(cache, &n_cache, "qwen2");
    size_t len;
    char *text = mixed_ws_text(&len);
    CHECK(len == (size_t)json_integer_value(json_object_get(mw, "bytes")));
    int32_t *ids;
    size_t n;
    if (t && hm_tokenizer_encode_alloc(t, text, len, 0, &ids, &n) == HM_OK) {
        char hash[24];
        snprintf(hash, sizeof hash, "%016llx", (unsigned long long)fnv1a64_ids(ids, n));
        CHECK_MSG(n == (size_t)json_integer_value(json_object_get(mw, "n_ids")) &&
                      !strcmp(hash, json_string_value(json_object_get(mw, "fnv1a64"))),
                  "mixed whitespace: %zu ids, hash %s", n, hash);
        free(ids);
    } else {
        CHECK_MSG(0, "mixed whitespace: %s", hm_last_error());
    }
    free(text);

    /* 10 MB of spaces: past PCRE2's default match limit (and HF's onig retry limit, so no HF
     * ids); with no merges the ids are the bytes: 10M spaces, then "x" */
    t = tok_by_name(cache, &n_cache, "qwen2-split.json");
    len = 10u << 20;
    text = malloc(len + 1);
    memset(text, ' ', len);
    text[len] = 'x';
    if (t && hm_tokenizer_encode_alloc(t, text, len + 1, 0, &ids, &n) == HM_OK) {
        bool ok = n == len + 1 && ids[len] == 'x';
        for (size_t i = 0; ok && i < len; i++) ok = ids[i] == ' ';
        CHECK_MSG(ok, "10 MB of spaces: %zu ids", n);
        free(ids);
    } else {
        CHECK_MSG(0, "10 MB of spaces: %s", hm_last_error());
    }
    free(text);
    for (int i = 0; i < n_cache; i++) hm_tokenizer_free(cache[i].tok);
    json_decref(root);
}

/* ---- .tiktoken.gz through zlib: members, corruption ------------------------------------------
 */

static size_t gzip_buf(const char *in, size_t n, uint8_t *out, size_t cap) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) return 0;
    zs.next_in = (Bytef *)(uintptr_t)in;
    zs.avail_in = (uInt)n;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    int rc = deflate(&zs, Z_FINISH);
    size_t k = cap - zs.avail_out;
    deflateEnd(&zs);
    return rc == Z_STREAM_END ? k : 0;
}

static void test_gzip(void) {
    /* "a" "b" "ab" "c" as ranks 0..3, in two gzip members */
    const char *p1 = "YQ== 0\nYg== 1\n", *p2 = "YWI= 2\nYw== 3\n";
    uint8_t gz[512];
    size_t k1 = gzip_buf(p1, strlen(p1), gz, sizeof gz);
    size_t k2 = gzip_buf(p2, strlen(p2), gz + k1, sizeof gz - k1);
    CHECK(k1 && k2);
    hm_tokenizer *tok;
    hm_status st = hm_tokenizer_from_tiktoken_memory(gz, k1 + k2, "two-members", &tok);
    CHECK_MSG(st == HM_OK, "%s", hm_last_error());
    if (!st) {
        CHECK(hm_tokenizer_find(tok, "ab", 2) == 2 && hm_tokenizer_find(tok, "c", 1) == 3);
        hm_tokenizer_free(tok);
    }
    memcpy(gz + k1 + k2, "junk", 4);
    CHECK_STATUS(hm_tokenizer_from_tiktoken_memory(gz, k1 + k2 + 4, "junk", &tok), HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "trailing");
    CHECK(tok == NULL);

    char path[4300];
    snprintf(path, sizeof path, "%s/tokenizers/gpt-oss/o200k_base.tiktoken.gz", g_data);
    size_t len;
    uint8_t *file = (uint8_t *)test_read_file(path, &len);
    if (!file) return;
    CHECK_STATUS(hm_tokenizer_from_tiktoken_memory(file, len / 2, "half.gz", &tok), HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "truncated gzip");
    CHECK_STATUS(hm_tokenizer_from_tiktoken_memory(file, len - 4, "no-size.gz", &tok),
                 HM_ERR_FORMAT);
    file[len / 2] ^= 0x55;
    CHECK_STATUS(hm_tokenizer_from_tiktoken_memory(file, len, "flipped.gz", &tok), HM_ERR_FORMAT);
    CHECK_CONTAINS(hm_last_error(), "corrupt gzip data");
    free(file);
}

/* ---- the CLI ----------------------------------------------------------------------------------
 */

static void test_cli(void) {
    char cmd[9000], outbuf[4096];
    snprintf(cmd, sizeof cmd,
             "%s tokenize -m %s/tokenizers/qwen2 --text 'Hello, world!' && "
             "%s detokenize -m %s/tokenizers/qwen2 --ids '9707 11 1879 0' && "
             "%s detokenize -m %s/tokenizers/qwen2 --ids '9707 999999' 2>&1; echo rc=$?",
             HMOE_BINARY, g_data, HMOE_BINARY, g_data, HMOE_BINARY, g_data);
    FILE *p = popen(cmd, "r");
    if (!p) return;
    size_t n = fread(outbuf, 1, sizeof outbuf - 1, p);
    outbuf[n] = 0;
    pclose(p);
    CHECK_CONTAINS(outbuf, "9707 11 1879 0\nHello, world!");
    CHECK_CONTAINS(outbuf, "out of range");
    CHECK_CONTAINS(outbuf, "rc=1");
}

/* data/demo-vocab.gguf (scripts/demo_vocab.py: make run's vocabulary) gives HF tokenizers' ids */
static void test_demo_vocab(void) {
    size_t len;
    char *txt = test_read_file(HMOE_SOURCE_DIR "/data/demo-vocab.expected.json", &len);
    json_t *j = txt ? json_loadb(txt, len, 0, NULL) : NULL;
    free(txt);
    hm_tokenizer *tok = NULL;
    CHECK_OK(hm_tokenizer_load(HMOE_SOURCE_DIR "/data/demo-vocab.gguf", &tok));
    CHECK(j != NULL);
    if (!tok || !j) {
        hm_tokenizer_free(tok);
        json_decref(j);
        return;
    }
    json_t *samples = json_object_get(j, "samples");
    CHECK(json_array_size(samples) >= 5);
    for (size_t i = 0; i < json_array_size(samples); i++) {
        json_t *e = json_array_get(samples, i), *want = json_object_get(e, "ids");
        const char *text = json_string_value(json_object_get(e, "text"));
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK_OK(hm_tokenizer_encode_alloc(tok, text, strlen(text), 0, &ids, &n));
        bool same = n == json_array_size(want);
        for (size_t k = 0; same && k < n; k++)
            same = ids[k] == (int32_t)json_integer_value(json_array_get(want, k));
        CHECK_MSG(same, "demo vocab: '%s' tokenizes differently from HF (%zu ids)", text, n);
        free(ids);
    }
    hm_tokenizer_free(tok);
    json_decref(j);
}

/* A FIFO as tokenizer.json or vocab.json is refused naming it, never waited on */
static void test_fifo_files(void) {
    static const char *const names[] = {"tokenizer.json", "vocab.json"};
    for (int i = 0; i < 2; i++) {
        char dir[] = "/tmp/hmoe-tokfifo-XXXXXX", path[300], merges[300];
        if (!mkdtemp(dir)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(merges, sizeof merges, "%s/merges.txt", dir);
        CHECK(mkfifo(path, 0600) == 0);
        FILE *f = i ? fopen(merges, "w") : NULL;
        if (f) fputs("#version: 0.2\na b\n", f), fclose(f);
        alarm(20);
        hm_tokenizer *tok = NULL;
        hm_status st = hm_tokenizer_load(dir, &tok);
        alarm(0);
        CHECK_MSG(st != HM_OK, "a FIFO as %s was read", names[i]);
        CHECK_CONTAINS(hm_last_error(), names[i]);
        hm_tokenizer_free(tok);
        unlink(path), unlink(merges);
        rmdir(dir);
    }
}

int main(void) {
    test_demo_vocab();
    test_fifo_files();
    const char *env = getenv("HMOE_TESTDATA");
    if (env)
        snprintf(g_data, sizeof g_data, "%s", env);
    else
        snprintf(g_data, sizeof g_data, "%s/../shared/testdata", HMOE_SOURCE_DIR);
    char probe[4200];
    struct stat sb;
    snprintf(probe, sizeof probe, "%s/tokenizers", g_data);
    if (stat(probe, &sb) != 0)
        return test_skip("tokenizer", "no test data (set HMOE_TESTDATA or put it in "
                                      "../shared/testdata/tokenizers)");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hmoe-tok-XXXXXX");
    if (!mkdtemp(g_tmp)) return test_skip("tokenizer", "mkdtemp failed");
    test_bad_inputs();
    test_special_ids();
    test_invalid_vocab();
    test_gzip();
    test_normalizers();
    test_gguf_dir("gguf");
    test_gguf_dir("gguf-mainline");
    test_source("qwen2", "gguf-mainline/ggml-vocab-qwen2.gguf", "qwen2 vocab.json+merges.txt");
    test_source("llama3/tokenizer.model", "gguf-mainline/ggml-vocab-llama-bpe.gguf",
                "llama3 tiktoken tokenizer.model");
    test_source("llama2-spm/tokenizer.model", "gguf/ggml-vocab-llama-spm.gguf",
                "llama2-spm SentencePiece tokenizer.model");
    test_mistral();
    test_llama3_and_o200k();
    test_qwen2_specials_threads();
    test_random("qwen2", 300);
    test_random("llama3/tokenizer.model", 300);
    test_random("gguf/ggml-vocab-gpt-2.gguf", 300);
    test_random("llama2-spm/tokenizer.model", 300);
    test_random("gguf/ggml-vocab-deepseek-llm.gguf", 200);
    test_cli();
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s", g_tmp);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    return test_done("tokenizer");
}
