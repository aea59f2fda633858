/* synth.c - `hmoe synth`: a GGUF with a real model's exact tensor names, shapes and metadata
 * (llama.cpp's layout), random but valid weights, and a real tokenizer. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "model/model.h"
#include "core/alloc.h"
#include "core/mmap.h"
#include "core/pool.h"
#include "core/timer.h"
#include "format/gguf.h"
#include "jsonw.h"
#include "model/arch.h"
#include "quant/synth.h"

#define CHUNK_BYTES    (64u << 20) /* one write buffer */
#define SUBCHUNK_BYTES (1u << 20)  /* unit of work and of seeding (thread-count independent) */

/* ---------------------------------------------------------------- vocabulary */

static bool file_exists(const char *p) {
    return access(p, R_OK) == 0;
}

/* Looks for shared/testdata/tokenizers/{gguf-mainline,gguf}/NAME next to the working directory or
 * next to the binary (build/hmoe -> ../../shared). */
static bool find_vocab(const char *name, char *out, size_t cap) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    const char *roots[] = {"..", ".", exe[0] ? exe : NULL};
    const char *ups[] = {"", "/..", "/../.."};
    const char *subs[] = {"gguf-mainline", "gguf"};
    for (size_t r = 0; r < 3; r++)
        for (size_t u = 0; roots[r] && u < 3; u++)
            for (size_t s = 0; s < 2; s++) {
                snprintf(out, cap, "%s%s/shared/testdata/tokenizers/%s/%s", roots[r], ups[u],
                         subs[s], name);
                if (file_exists(out)) return true;
            }
    return false;
}

/* GPT-2's byte -> printable code point map, as UTF-8. */
static void byte_token(int b, char out[8]) {
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = b;
    } else { /* the 68 other bytes map to 256, 257, ... in order */
        int k = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        out[2] = 0;
    }
}

static hm_status write_builtin_vocab(hm_gguf_writer *w, uint32_t vocab) {
    const char *specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    if (vocab < 259)
        return hm_errorf(HM_ERR_INVALID_ARG, "vocab size %u is too small for the byte vocabulary",
                         vocab);
    char **toks = calloc(vocab, sizeof(char *));
    int32_t *types = calloc(vocab, sizeof(int32_t));
    hm_status st = HM_OK;
    if (!toks || !types) st = hm_errorf(HM_ERR_NO_MEMORY, "synth: out of memory");
    for (uint32_t i = 0; st == HM_OK && i < vocab; i++) {
        toks[i] = malloc(24);
        if (!toks[i]) {
            st = hm_errorf(HM_ERR_NO_MEMORY, "synth: out of memory");
            break;
        }
        if (i < 256)
            byte_token((int)i, toks[i]), types[i] = 1; /* NORMAL */
        else if (i < 259)
            snprintf(toks[i], 24, "%s", specials[i - 256]), types[i] = 3; /* CONTROL */
        else
            snprintf(toks[i], 24, "[PAD%u]", i), types[i] = 5; /* UNUSED */
    }
    if (st == HM_OK) st = hm_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    if (st == HM_OK) st = hm_gguf_w_str(w, "tokenizer.ggml.pre", "default");
    if (st == HM_OK)
        st = hm_gguf_w_arr_str(w, "tokenizer.ggml.tokens", vocab, (const char *const *)toks, NULL);
    if (st == HM_OK)
        st = hm_gguf_w_arr(w, "tokenizer.ggml.token_type", HM_GGUF_INT32, vocab, types);
    if (st == HM_OK) st = hm_gguf_w_arr_str(w, "tokenizer.ggml.merges", 0, NULL, NULL);
    if (st == HM_OK) st = hm_gguf_w_uint(w, "tokenizer.ggml.bos_token_id", HM_GGUF_UINT32, 256);
    if (st == HM_OK) st = hm_gguf_w_uint(w, "tokenizer.ggml.eos_token_id", HM_GGUF_UINT32, 256);
    for (uint32_t i = 0; toks && i < vocab; i++) free(toks[i]);
    free(toks);
    free(types);
    return st;
}

/* Copies tokenizer.* from a vocab GGUF, padding tokens/scores/types to the model's vocab size. */
static hm_status write_vocab_from(hm_gguf_writer *w, const hm_gguf *v, uint32_t vocab) {
    const hm_gguf_value *tokens;
    hm_status st = hm_gguf_get_arr(v, "tokenizer.ggml.tokens", &tokens);
    if (st != HM_OK) return st;
    if (tokens->arr_type != HM_GGUF_STRING)
        return hm_errorf(HM_ERR_FORMAT, "%s: tokenizer.ggml.tokens is not a string array",
                         hm_gguf_name(v));
    uint64_t n = tokens->arr_n;
    if (n > vocab)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "%s has %llu tokens but the model's vocabulary is %u: pass a smaller "
                         "--vocab file or --vocab none (built-in byte vocabulary)",
                         hm_gguf_name(v), (unsigned long long)n, vocab);
    for (uint64_t i = 0; i < hm_gguf_n_kv(v) && st == HM_OK; i++) {
        const hm_gguf_kv *kv = hm_gguf_kv_at(v, i);
        if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10) != 0) continue;
        bool is_tok = hm_gguf_str_eq(kv->key, "tokenizer.ggml.tokens");
        bool is_score = hm_gguf_str_eq(kv->key, "tokenizer.ggml.scores");
        bool is_type = hm_gguf_str_eq(kv->key, "tokenizer.ggml.token_type");
        if (!(is_tok || is_score || is_type) || n == vocab) {
            st = hm_gguf_w_copy_kv(w, NULL, kv);
            continue;
        }
        const hm_gguf_value *a = &kv->val;
        if (a->type != HM_GGUF_ARRAY || a->arr_n != n)
            return hm_errorf(HM_ERR_FORMAT, "%s: %.*s has %llu entries, tokens has %llu",
                             hm_gguf_name(v), (int)kv->key.len, kv->key.ptr,
                             (unsigned long long)a->arr_n, (unsigned long long)n);
        if (is_tok) {
            const char **s = malloc(vocab * sizeof *s);
            uint64_t *len = malloc(vocab * sizeof *len);
            char *pads = malloc((size_t)(vocab - n) * 16 + 1);
            if (!s || !len || !pads) st = hm_errorf(HM_ERR_NO_MEMORY, "synth: out of memory");
            for (uint64_t i2 = 0; st == HM_OK && i2 < vocab; i2++) {
                if (i2 < n) {
                    s[i2] = a->arr_strs[i2].ptr;
                    len[i2] = a->arr_strs[i2].len;
                } else {
                    char *p = pads + (i2 - n) * 16;
                    len[i2] = (uint64_t)snprintf(p, 16, "[PAD%llu]", (unsigned long long)i2);
                    s[i2] = p;
                }
            }
            if (st == HM_OK) st = hm_gguf_w_arr_str(w, "tokenizer.ggml.tokens", vocab, s, len);
            free(s);
            free(len);
            free(pads);
        } else {
            size_t es = hm_gguf_vtype_size(a->arr_type);
            uint8_t *buf = calloc(vocab, es ? es : 1);
            if (!buf || !es) {
                free(buf);
                return hm_errorf(HM_ERR_FORMAT, "%s: unexpected %.*s layout", hm_gguf_name(v),
                                 (int)kv->key.len, kv->key.ptr);
            }
            memcpy(buf, a->arr_raw, n * es);
            if (is_type && es == 4)
                for (uint64_t i2 = n; i2 < vocab; i2++) ((int32_t *)buf)[i2] = 5; /* UNUSED */
            char key[64];
            snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
            st = hm_gguf_w_arr(w, key, a->arr_type, vocab, buf);
            free(buf);
        }
    }
    return st;
}

/* ---------------------------------------------------------------- data generation */

typedef struct fill_job {
    const hm_tensor_spec *t;
    uint64_t tensor_index;
    uint8_t *buf;
    uint64_t offset, bytes; /* range of the tensor's bytes this chunk holds */
    uint64_t block_bytes, block_elems;
    float mean, std;
    uint64_t seed;
    hm_status st; /* first failure */
} fill_job;

static void fill_task(int ith, int nth, void *arg) {
    fill_job *j = arg;
    const uint64_t sub = SUBCHUNK_BYTES / j->block_bytes * j->block_bytes; /* whole blocks */
    uint64_t nsub = (j->bytes + sub - 1) / sub;
    for (uint64_t k = (uint64_t)ith; k < nsub; k += (uint64_t)nth) {
        uint64_t lo = k * sub, hi = lo + sub;
        if (hi > j->bytes) hi = j->bytes;
        uint64_t global_sub = (j->offset + lo) / sub;
        uint64_t seed = j->seed ^ (j->tensor_index * 0x9e3779b97f4a7c15ull) ^
                        (global_sub * 0xc2b2ae3d27d4eb4full);
        hm_status st =
            hm_synth_fill(j->t->type, j->buf + lo, (hi - lo) / j->block_bytes * j->block_elems,
                          j->mean, j->std, seed);
        if (st != HM_OK) j->st = st;
    }
}

typedef struct progress {
    bool tty;
    uint64_t total, done, t0, last;
} progress;

static void progress_show(progress *p, bool final) {
    if (!p->tty) return;
    uint64_t now = hm_time_ns();
    if (!final && now - p->last < 200000000ull) return;
    p->last = now;
    double s = (double)(now - p->t0) * 1e-9, rate = s > 0 ? (double)p->done / s : 0;
    double eta = rate > 0 ? (double)(p->total - p->done) / rate : 0;
    int width = 30, fill = p->total ? (int)((double)p->done / (double)p->total * width) : width;
    fprintf(stderr, "\r[%.*s%*s] %6.2f / %.2f GB  %7.1f MB/s  ETA %4.0f s ", fill,
            "##############################", width - fill, "", (double)p->done * 1e-9,
            (double)p->total * 1e-9, rate * 1e-6, eta);
    if (final) fputc('\n', stderr);
    fflush(stderr);
}

static float init_std(const hm_tensor_spec *t) {
    if (t->init == HM_INIT_NORM) return 0.0f;
    if (t->init == HM_INIT_SMALL) return 0.02f;
    double fan_in = (double)t->ne[0];
    return (float)(0.5 / sqrt(fan_in > 1 ? fan_in : 1));
}

/* ---------------------------------------------------------------- command */

static int usage_err(const char *msg) {
    return cli_usage_error(
        "synth: %s\nusage: hmoe synth --preset NAME -o FILE [--layers N] [--experts N] "
        "[--experts-type T] [--dense-type T] [--seed S] [--vocab FILE|none] [--vocab-size N] "
        "[--threads N] [--plan]\npresets: see `hmoe synth --list`",
        msg);
}

static void print_plan(const hm_preset *pr, const hm_hparams *hp, const hm_tensor_spec *ts,
                       size_t n) {
    jw w;
    jw_init(&w, stdout);
    jw_obj_begin(&w, NULL);
    jw_str(&w, "preset", pr->name);
    jw_str(&w, "architecture", hm_arch_gguf_name(hp->arch));
    jw_int(&w, "n_layers", hp->n_layers);
    jw_int(&w, "n_experts", hp->n_experts);
    jw_int(&w, "vocab_size", hp->vocab_size);
    uint64_t total = 0;
    jw_arr_begin(&w, "tensors");
    for (size_t i = 0; i < n; i++) {
        uint64_t row, bytes;
        hm_type_row_bytes(ts[i].type, ts[i].ne[0], &row);
        bytes = row * ts[i].ne[1] * ts[i].ne[2] * ts[i].ne[3];
        total += bytes;
        jw_obj_begin(&w, NULL);
        jw_str(&w, "name", ts[i].name);
        jw_str(&w, "type", hm_type_name(ts[i].type));
        jw_arr_begin(&w, "ne");
        for (uint32_t d = 0; d < ts[i].n_dims; d++) jw_int(&w, NULL, (long long)ts[i].ne[d]);
        jw_arr_end(&w);
        jw_str(&w, "category", hm_tensor_cat_name(ts[i].cat));
        jw_int(&w, "bytes", (long long)bytes);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_int(&w, "total_bytes", (long long)total);
    jw_obj_end(&w);
}

int cmd_synth(int argc, char **argv) {
    const char *preset = NULL, *out = NULL, *vocab = NULL;
    long layers = -1, experts = -1, threads = 0, vocab_size = -1;
    int et = -1, dtype = HM_TYPE_Q8_0;
    unsigned long long seed = 42;
    bool plan_only = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--list")) {
            for (size_t k = 0; k < hm_preset_count(); k++)
                printf("%-18s %s\n", hm_preset_at(k)->name, hm_preset_at(k)->description);
            return 0;
        } else if (!strcmp(a, "--plan")) {
            plan_only = true;
        } else if (!v) {
            return usage_err("missing value after the last option");
        } else if (!strcmp(a, "--preset"))
            preset = argv[++i];
        else if (!strcmp(a, "-o") || !strcmp(a, "--output"))
            out = argv[++i];
        else if (!strcmp(a, "--vocab"))
            vocab = argv[++i];
        else if (!strcmp(a, "--layers")) {
            if (!cli_parse_int(argv[++i], 1, HM_MAX_LAYERS, &layers))
                return usage_err("--layers needs 1..512");
        } else if (!strcmp(a, "--vocab-size")) {
            if (!cli_parse_int(argv[++i], 259, 1 << 24, &vocab_size))
                return usage_err("--vocab-size needs 259..16777216");
        } else if (!strcmp(a, "--experts")) {
            if (!cli_parse_int(argv[++i], 1, 4096, &experts))
                return usage_err("--experts needs 1..4096");
        } else if (!strcmp(a, "--threads")) {
            if (!cli_parse_int(argv[++i], 1, 4096, &threads))
                return usage_err("--threads needs 1..4096");
        } else if (!strcmp(a, "--seed")) {
            char *end;
            seed = strtoull(argv[++i], &end, 10);
            if (*end || !*argv[i]) return usage_err("--seed needs a number");
        } else if (!strcmp(a, "--experts-type") || !strcmp(a, "--dense-type")) {
            int t = hm_type_from_name(argv[++i]);
            if (t < 0 || !hm_synth_supported((uint32_t)t))
                return usage_err("type must be one of f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k "
                                 "q3_k q4_k q5_k q6_k iq4_nl iq4_xs mxfp4");
            if (!strcmp(a, "--experts-type"))
                et = t;
            else
                dtype = t;
        } else {
            return usage_err("unknown option");
        }
    }
    if (!preset) return usage_err("--preset is required");
    const hm_preset *pr = hm_preset_find(preset);
    if (!pr) {
        fprintf(stderr, "hmoe synth: unknown preset '%s'; known:\n", preset);
        for (size_t k = 0; k < hm_preset_count(); k++)
            fprintf(stderr, "  %s\n", hm_preset_at(k)->name);
        return 2;
    }
    if (!out && !plan_only) return usage_err("-o FILE is required");
    hm_hparams hp = pr->hp;
    if (layers > 0) hp.n_layers = (uint32_t)layers;
    if (vocab_size > 0) hp.vocab_size = (uint32_t)vocab_size; /* e.g. the --vocab file's size */
    if (experts > 0) {
        hp.n_experts = (uint32_t)experts;
        if (hp.n_experts_used > hp.n_experts) hp.n_experts_used = hp.n_experts;
        if (hp.n_group && hp.n_experts % hp.n_group) hp.n_group = hp.topk_group = 0;
    }
    hm_plan_types types = {et >= 0 ? et : pr->default_experts_type, dtype};
    hm_tensor_spec *ts = NULL;
    size_t n_t = 0;
    if (hm_arch_tensor_plan(&hp, &types, &ts, &n_t) != HM_OK) {
        fprintf(stderr, "hmoe synth: %s\n", hm_last_error());
        return 1;
    }
    if (plan_only) {
        print_plan(pr, &hp, ts, n_t);
        free(ts);
        return 0;
    }

    /* vocabulary */
    hm_gguf *vg = NULL;
    char vpath[PATH_MAX];
    bool builtin = vocab && !strcmp(vocab, "none");
    if (!builtin) {
        if (vocab)
            snprintf(vpath, sizeof vpath, "%s", vocab);
        else if (!(pr->vocab_hint && find_vocab(pr->vocab_hint, vpath, sizeof vpath)) &&
                 !find_vocab("ggml-vocab-qwen2.gguf", vpath, sizeof vpath))
            builtin = true;
        if (!builtin && hm_gguf_open(vpath, &vg) != HM_OK) {
            fprintf(stderr, "hmoe synth: vocab: %s\n", hm_last_error());
            free(ts);
            return 1;
        }
        const hm_gguf_value *tok;
        if (!vocab && vg && hm_gguf_get_arr(vg, "tokenizer.ggml.tokens", &tok) == HM_OK &&
            tok->arr_n > hp.vocab_size) {
            hm_gguf_close(vg); /* default vocab does not fit this model: use the byte vocab */
            vg = NULL;
            builtin = true;
        }
    }

    hm_gguf_writer *w;
    hm_status st = hm_gguf_writer_open(out, &w);
    if (st != HM_OK) {
        fprintf(stderr, "hmoe synth: %s\n", hm_last_error());
        hm_gguf_close(vg);
        free(ts);
        return 1;
    }
    char desc[256];
    snprintf(desc, sizeof desc, "hmoe synth --preset %s --seed %llu: RANDOM WEIGHTS (shapes only)",
             pr->name, seed);
    st = hm_hparams_write_gguf(w, &hp, pr->name);
    if (st == HM_OK) st = hm_gguf_w_str(w, "general.description", desc);
    if (st == HM_OK)
        st = builtin ? write_builtin_vocab(w, hp.vocab_size)
                     : write_vocab_from(w, vg, hp.vocab_size);
    uint64_t total = 0;
    for (size_t i = 0; st == HM_OK && i < n_t; i++) {
        st = hm_gguf_w_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne);
        uint64_t row;
        hm_type_row_bytes(ts[i].type, ts[i].ne[0], &row);
        total += row * ts[i].ne[1] * ts[i].ne[2] * ts[i].ne[3];
    }
    fprintf(stderr,
            "hmoe synth: %s -> %s: %zu tensors, %.2f GB, experts %s, other weights %s, vocab %s\n",
            pr->name, out, n_t, (double)total * 1e-9, hm_type_name((uint32_t)types.experts),
            hm_type_name((uint32_t)types.dense), builtin ? "built-in bytes" : vpath);

    hm_pool *pool = NULL;
    hm_large bufs[2] = {{0}};
    if (st == HM_OK) {
        hm_pool_params pp = hm_pool_default_params();
        pp.n_threads = (int)threads;
        pp.async = true;
        pp.pin = false;
        st = hm_pool_create(&pp, &pool);
    }
    if (st == HM_OK) st = hm_large_alloc(CHUNK_BYTES, true, "synth buffer", &bufs[0]);
    if (st == HM_OK) st = hm_large_alloc(CHUNK_BYTES, true, "synth buffer", &bufs[1]);
    progress pg = {isatty(2), total, 0, hm_time_ns(), 0};
    /* pipeline: the pool fills buffer (k+1)%2 while this thread writes buffer k%2 */
    fill_job jobs[2];
    int cur = -1;
    for (size_t i = 0; st == HM_OK && i <= n_t; i++) {
        uint64_t row = 0, bytes = 0, off = 0;
        const hm_type_info *ti = i < n_t ? hm_type_get(ts[i].type) : NULL;
        if (i < n_t) {
            hm_type_row_bytes(ts[i].type, ts[i].ne[0], &row);
            bytes = row * ts[i].ne[1] * ts[i].ne[2] * ts[i].ne[3];
        }
        do {
            /* next chunk to generate (none after the last tensor) */
            int nxt = cur < 0 ? 0 : 1 - cur;
            bool gen = i < n_t;
            if (gen) {
                fill_job *j = &jobs[nxt];
                /* chunks hold whole sub-chunks, so seeding does not depend on chunking */
                uint64_t sub = SUBCHUNK_BYTES / ti->bytes * ti->bytes;
                uint64_t chunk = CHUNK_BYTES / sub * sub;
                uint64_t len = bytes - off < chunk ? bytes - off : chunk;
                *j = (fill_job){&ts[i],
                                i,
                                bufs[nxt].ptr,
                                off,
                                len,
                                ti->bytes,
                                ti->block,
                                ts[i].init == HM_INIT_NORM ? 1.0f : 0.0f,
                                init_std(&ts[i]),
                                seed,
                                HM_OK};
                st = hm_pool_submit(pool, fill_task, j);
                off += len;
            }
            if (st == HM_OK && cur >= 0) { /* write the previous chunk meanwhile */
                st = hm_gguf_w_data(w, jobs[cur].buf, jobs[cur].bytes);
                pg.done += jobs[cur].bytes;
                progress_show(&pg, false);
            }
            if (gen) {
                hm_pool_wait(pool);
                if (st == HM_OK && jobs[nxt].st != HM_OK) st = jobs[nxt].st;
                cur = nxt;
            } else {
                cur = -1;
            }
        } while (st == HM_OK && i < n_t && off < bytes);
    }
    progress_show(&pg, true);
    double secs = (double)(hm_time_ns() - pg.t0) * 1e-9;
    hm_pool_free(pool);
    hm_large_free(&bufs[0]);
    hm_large_free(&bufs[1]);
    hm_gguf_close(vg);
    free(ts);
    if (st != HM_OK) {
        fprintf(stderr, "hmoe synth: %s\n", hm_last_error());
        hm_gguf_writer_abort(w);
        return 1;
    }
    if (hm_gguf_writer_finish(w) != HM_OK) {
        fprintf(stderr, "hmoe synth: %s\n", hm_last_error());
        return 1;
    }
    char where[4200];
    hm_outfile_describe(out, where, sizeof where);
    fprintf(stderr, "hmoe synth: wrote %.2f GB to %s in %.1f s (%.0f MB/s); weights are random\n",
            (double)total * 1e-9, where, secs, (double)total / secs * 1e-6);
    return 0;
}
