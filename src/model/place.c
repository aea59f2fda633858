/* place.c - the hybrid placement of routed experts (place.h). */
#include "model/place.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "quant/types.h"

static const char *const strategy_names[HM_PLACE_COUNT] = {"uniform", "front", "random",
                                                           "frequency"};

const char *hm_place_strategy_name(hm_place_strategy s) {
    return s >= 0 && s < HM_PLACE_COUNT ? strategy_names[s] : "?";
}

int hm_place_strategy_from_name(const char *name) {
    for (int i = 0; i < HM_PLACE_COUNT; i++)
        if (!strcmp(name, strategy_names[i])) return i;
    if (!strcmp(name, "front-loading")) return HM_PLACE_FRONT;
    return -1;
}

static uint64_t mat_bytes(const hm_moe_matrix *mm, int64_t rows, int64_t cols) {
    uint64_t rb = 0;
    if (mm->row_bytes) return (uint64_t)mm->row_bytes * (uint64_t)rows;
    return hm_type_row_bytes(mm->type, (uint64_t)cols, &rb) ? rb * (uint64_t)rows : 0;
}

uint64_t hm_place_expert_bytes(const hm_model *m, int il) {
    const hm_layer *L = &m->layers[il];
    if (!L->moe || !L->experts) return 0;
    const int64_t H = m->hp.hidden, I = m->hp.moe_inter;
    const hm_moe_expert *e = &L->experts[0];
    return mat_bytes(&e->gate, I, H) + mat_bytes(&e->up, I, H) + mat_bytes(&e->down, H, I);
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct rank_item {
    uint64_t count;
    int layer, expert;
} rank_item;

/* most activated first; ties: earlier layer, lower index */
static int rank_cmp(const void *a, const void *b) {
    const rank_item *x = a, *y = b;
    if (x->count != y->count) return x->count < y->count ? 1 : -1;
    if (x->layer != y->layer) return x->layer - y->layer;
    return x->expert - y->expert;
}

/* the q experts of layer il the strategy keeps on the GPU */
static void choose(const hm_place_params *p, int il, int E, int q, uint8_t *g) {
    memset(g, 0, (size_t)E);
    if (q <= 0) return;
    if (q >= E) {
        memset(g, 1, (size_t)E);
        return;
    }
    switch (p->strategy) {
    case HM_PLACE_RANDOM: {
        int *idx = malloc(sizeof(int) * (size_t)E);
        if (!idx) return;
        for (int e = 0; e < E; e++) idx[e] = e;
        uint64_t s = p->seed ^ (0x5851f42d4c957f2dull * (uint64_t)(il + 1));
        for (int i = 0; i < q; i++) { /* partial Fisher-Yates */
            const int j = i + (int)(splitmix64(&s) % (uint64_t)(E - i));
            const int t = idx[i];
            idx[i] = idx[j], idx[j] = t;
            g[idx[i]] = 1;
        }
        free(idx);
        break;
    }
    case HM_PLACE_FREQUENCY: {
        rank_item *r = malloc(sizeof *r * (size_t)E);
        if (!r) return;
        for (int e = 0; e < E; e++)
            r[e] = (rank_item){p->counts[(size_t)il * (size_t)E + (size_t)e], il, e};
        qsort(r, (size_t)E, sizeof *r, rank_cmp);
        for (int i = 0; i < q; i++) g[r[i].expert] = 1;
        free(r);
        break;
    }
    case HM_PLACE_FRONT:
        for (int e = 0; e < q; e++) g[e] = 1;
        break;
    default: /* uniform: evenly over the indices */
        for (int i = 0; i < q; i++) g[(int)((int64_t)i * E / q)] = 1;
        break;
    }
}

/* Applies "REGEX=cuda|cpu" to every MoE layer of the plan. */
static hm_status apply_rule(const hm_model *m, hm_place_plan *pl, const char *rule) {
    const char *eq = strrchr(rule, '=');
    if (!eq || eq == rule)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "placement rule '%s': expected REGEX=cuda or REGEX=cpu", rule);
    const char *dev = eq + 1;
    int to;
    if (!strcmp(dev, "cuda") || !strcmp(dev, "gpu") || !strcmp(dev, "CUDA") ||
        !strcmp(dev, "CUDA0"))
        to = 1;
    else if (!strcmp(dev, "cpu") || !strcmp(dev, "CPU"))
        to = 0;
    else
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "placement rule '%s': unknown device '%s' (cuda or cpu)", rule, dev);
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)rule, (PCRE2_SIZE)(eq - rule), PCRE2_UTF, &err, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return hm_errorf(HM_ERR_INVALID_ARG, "placement rule '%s': at offset %zu: %s", rule,
                         (size_t)off, (const char *)msg);
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) {
        pcre2_code_free(re);
        return hm_errorf(HM_ERR_NO_MEMORY, "placement rule: out of memory");
    }
    static const char *const proj[3] = {"gate", "up", "down"};
    int matched = 0;
    for (int il = 0; il < pl->n_layers; il++) {
        if (!m->layers[il].moe) continue;
        bool hit = false;
        for (int j = 0; j < 3 && !hit; j++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.ffn_%s_exps.weight", il, proj[j]);
            const int rc = pcre2_match(re, (PCRE2_SPTR)name, strlen(name), 0, 0, md, NULL);
            if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
                pcre2_match_data_free(md);
                pcre2_code_free(re);
                return hm_errorf(HM_ERR_INVALID_ARG, "placement rule '%s': match error %d", rule,
                                 rc);
            }
            hit = rc >= 0;
        }
        if (!hit) continue;
        matched++;
        memset(pl->gpu + (size_t)il * (size_t)pl->n_experts, to, (size_t)pl->n_experts);
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    if (!matched)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "placement rule '%s' matches no routed-expert tensor "
                         "(blk.N.ffn_gate_exps.weight, ...); only routed experts are placed",
                         rule);
    return HM_OK;
}

void hm_place_free(hm_place_plan *pl) {
    if (!pl) return;
    free(pl->gpu);
    free(pl->n_gpu_layer);
    free(pl->moe);
    memset(pl, 0, sizeof *pl);
}

hm_status hm_place_make(const hm_model *m, const hm_place_params *p, hm_place_plan *out) {
    memset(out, 0, sizeof *out);
    const int L = (int)m->hp.n_layers, E = (int)m->hp.n_experts;
    if (p->strategy < 0 || p->strategy >= HM_PLACE_COUNT)
        return hm_errorf(HM_ERR_INVALID_ARG, "placement: unknown strategy %d", (int)p->strategy);
    if (p->strategy == HM_PLACE_FREQUENCY && !p->counts)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "placement: the frequency strategy needs activation counts (hmoe "
                         "profile -m MODEL --prompts FILE writes them)");
    out->n_layers = L, out->n_experts = E;
    out->gpu = calloc((size_t)L * (size_t)(E ? E : 1), 1);
    out->n_gpu_layer = calloc((size_t)(L ? L : 1), sizeof(int));
    out->moe = calloc((size_t)(L ? L : 1), 1);
    int *q = calloc((size_t)(L ? L : 1), sizeof(int));
    uint64_t *eb = calloc((size_t)(L ? L : 1), sizeof(uint64_t));
    hm_status st = HM_OK;
    if (!out->gpu || !out->n_gpu_layer || !out->moe || !q || !eb) {
        st = hm_errorf(HM_ERR_NO_MEMORY, "placement: out of memory");
        goto done;
    }
    uint64_t per_all = 0; /* one expert in every MoE layer */
    int n_moe = 0;
    for (int il = 0; il < L; il++) {
        eb[il] = hm_place_expert_bytes(m, il);
        out->moe[il] = eb[il] > 0;
        per_all += eb[il];
        n_moe += eb[il] > 0;
        out->all_bytes += eb[il] * (uint64_t)E;
    }
    if (!n_moe || !E) goto done; /* a dense model: nothing to place */
    if (p->gpu_experts >= 0) {
        for (int il = 0; il < L; il++)
            q[il] = eb[il] ? (p->gpu_experts < E ? p->gpu_experts : E) : 0;
    } else if (p->strategy == HM_PLACE_FRONT) {
        uint64_t left = p->gpu_budget;
        for (int il = 0; il < L; il++) {
            if (!eb[il]) continue;
            uint64_t n = left / eb[il];
            q[il] = n > (uint64_t)E ? E : (int)n;
            left -= (uint64_t)q[il] * eb[il];
        }
    } else if (p->strategy == HM_PLACE_FREQUENCY) {
        /* the most activated (layer, expert) pairs of all layers while the budget lasts */
        const size_t n = (size_t)L * (size_t)E;
        rank_item *r = malloc(sizeof *r * n);
        if (!r) {
            st = hm_errorf(HM_ERR_NO_MEMORY, "placement: out of memory");
            goto done;
        }
        size_t k = 0;
        for (int il = 0; il < L; il++)
            for (int e = 0; eb[il] && e < E; e++)
                r[k++] = (rank_item){p->counts[(size_t)il * (size_t)E + (size_t)e], il, e};
        qsort(r, k, sizeof *r, rank_cmp);
        uint64_t left = p->gpu_budget;
        for (size_t i = 0; i < k; i++) {
            if (eb[r[i].layer] > left) continue;
            left -= eb[r[i].layer];
            out->gpu[(size_t)r[i].layer * (size_t)E + (size_t)r[i].expert] = 1;
        }
        free(r);
        for (int il = 0; il < L; il++) q[il] = -1; /* chosen already */
    } else { /* uniform, random: the same count everywhere, the remainder from the front */
        const uint64_t n = per_all ? p->gpu_budget / per_all : 0;
        uint64_t left = p->gpu_budget - (n < (uint64_t)E ? n : (uint64_t)E) * per_all;
        for (int il = 0; il < L; il++) {
            if (!eb[il]) continue;
            q[il] = n >= (uint64_t)E ? E : (int)n;
            if (q[il] < E && eb[il] <= left) q[il]++, left -= eb[il];
        }
    }
    for (int il = 0; il < L; il++)
        if (q[il] >= 0) choose(p, il, E, q[il], out->gpu + (size_t)il * (size_t)E);
    for (int i = 0; i < p->n_rules; i++)
        if ((st = apply_rule(m, out, p->rules[i]))) goto done;
    for (int il = 0; il < L; il++) {
        int c = 0;
        for (int e = 0; eb[il] && e < E; e++) c += out->gpu[(size_t)il * (size_t)E + (size_t)e];
        if (!eb[il]) memset(out->gpu + (size_t)il * (size_t)E, 0, (size_t)E);
        out->n_gpu_layer[il] = c;
        out->n_gpu += c;
        out->gpu_bytes += (uint64_t)c * eb[il];
    }
done:
    free(q);
    free(eb);
    if (st) hm_place_free(out);
    return st;
}

void hm_place_describe(const hm_place_plan *pl, char *buf, size_t cap) {
    int first = -1, same = 1;
    for (int il = 0; il < pl->n_layers; il++) {
        if (!pl->moe || !pl->moe[il]) continue;
        if (first < 0)
            first = pl->n_gpu_layer[il];
        else
            same &= pl->n_gpu_layer[il] == first;
    }
    const double gb = (double)pl->gpu_bytes * 1e-6, all = (double)pl->all_bytes * 1e-6;
    if (!pl->n_experts || first < 0) {
        snprintf(buf, cap, "no routed experts to place");
    } else if (same) {
        snprintf(buf, cap, "%d of %d routed experts per layer on the GPU (%.1f of %.1f MB)", first,
                 pl->n_experts, gb, all);
    } else {
        size_t o = (size_t)snprintf(buf, cap,
                                    "%d routed experts on the GPU (%.1f of %.1f MB), per "
                                    "layer:",
                                    pl->n_gpu, gb, all);
        for (int il = 0; il < pl->n_layers && o < cap; il++)
            o += (size_t)snprintf(buf + o, cap - o, " %d", pl->n_gpu_layer[il]);
    }
}

hm_status hm_place_counts_write(const char *path, int n_layers, int n_experts,
                                const uint64_t *counts) {
    FILE *f = fopen(path, "w");
    if (!f) return hm_errorf(HM_ERR_IO, "%s: %s", path, strerror(errno));
    fprintf(f, "hmoe-expert-counts 1 %d %d\n", n_layers, n_experts);
    for (int il = 0; il < n_layers; il++)
        for (int e = 0; e < n_experts; e++)
            fprintf(f, "%" PRIu64 "%c", counts[(size_t)il * (size_t)n_experts + (size_t)e],
                    e + 1 < n_experts ? ' ' : '\n');
    const bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) return hm_errorf(HM_ERR_IO, "%s: write failed", path);
    return HM_OK;
}

hm_status hm_place_counts_read(const char *path, int n_layers, int n_experts, uint64_t **out) {
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f) return hm_errorf(HM_ERR_IO, "%s: %s", path, strerror(errno));
    int ver = 0, L = 0, E = 0;
    if (fscanf(f, "hmoe-expert-counts %d %d %d", &ver, &L, &E) != 3 || ver != 1) {
        fclose(f);
        return hm_errorf(HM_ERR_FORMAT, "%s: not an expert-count file (hmoe profile writes them)",
                         path);
    }
    if (L != n_layers || E != n_experts) {
        fclose(f);
        return hm_errorf(HM_ERR_FORMAT,
                         "%s: counts for %d layers x %d experts, the model has %d x %d", path, L, E,
                         n_layers, n_experts);
    }
    uint64_t *c = calloc((size_t)L * (size_t)E + 1, sizeof *c);
    if (!c) {
        fclose(f);
        return hm_errorf(HM_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    for (size_t i = 0; i < (size_t)L * (size_t)E; i++) {
        if (fscanf(f, "%" SCNu64, &c[i]) != 1) {
            fclose(f);
            free(c);
            return hm_errorf(HM_ERR_FORMAT, "%s: count %zu of %zu missing or not a number", path,
                             i + 1, (size_t)L * (size_t)E);
        }
    }
    fclose(f);
    *out = c;
    return HM_OK;
}

int hm_defer_split(const int32_t *ids, const float *w, int n, int k, const uint8_t *gpu, int K,
                   int32_t *now, int32_t *later) {
    int deferred = 0;
    for (int t = 0; t < n; t++) {
        const int32_t *id = ids + (size_t)t * k;
        const float *wt = w + (size_t)t * k;
        int32_t *a = now + (size_t)t * k, *b = later + (size_t)t * k;
        int cpu = 0;
        for (int j = 0; j < k; j++) {
            const bool on_cpu = id[j] >= 0 && (!gpu || !gpu[id[j]]);
            a[j] = on_cpu ? id[j] : -1;
            b[j] = -1;
            cpu += on_cpu;
        }
        /* the K lowest-weighted of the CPU pairs, one at a time: the lowest weight still in
         * now, the later pair on ties */
        for (int d = 0; d < K && d < cpu; d++) {
            int lo = -1;
            for (int j = 0; j < k; j++)
                if (a[j] >= 0 && (lo < 0 || wt[j] <= wt[lo])) lo = j;
            b[lo] = a[lo], a[lo] = -1;
            deferred++;
        }
    }
    return deferred;
}

int hm_place_stream_threshold(double copy_s, double cpu_tok_s, int min_tokens) {
    const double n = ceil(copy_s * cpu_tok_s);
    if (!(copy_s >= 0) || !(cpu_tok_s > 0) || !isfinite(n) || n >= (double)INT_MAX) return INT_MAX;
    return (int)n > min_tokens ? (int)n : min_tokens;
}

double hm_place_stream_split(double copy_s, double cpu_tok_s, double gpu_s_tok, int n) {
    if (!(copy_s > 0) || !(cpu_tok_s > 0) || !isfinite(copy_s) || !isfinite(cpu_tok_s) || n < 1)
        return 0;
    const double p = (double)n / cpu_tok_s,
                 g = gpu_s_tok > 0 && isfinite(gpu_s_tok) ? (double)n * gpu_s_tok : 0,
                 f = (p + g) / (copy_s + p);
    return f > 0.9 ? 1.0 : f < 0.2 - 1e-9 ? 0.0 : f;
}

double hm_place_stream_plan(double copy_s, double cpu_tok_s, double gpu_s_tok, int n, double force,
                            bool seen) {
    if (force > 0 && force <= 1) return force;
    double f = hm_place_stream_split(copy_s, cpu_tok_s, gpu_s_tok, n);
    if (!(f > 0)) f = 1;
    return f >= 1 && !seen ? 2.0 / 3.0 : f;
}

double hm_place_rate_update(double rate, int n, double cpu_s, double share) {
    if (n < 1 || !(cpu_s > 0) || !isfinite(cpu_s) || !(share > 0) || share > 1) return rate;
    const double t = cpu_s / share / (double)n; /* seconds per token through all of them */
    if (!(rate > 0) || !isfinite(rate)) return 1.0 / t;
    return 2.0 / (1.0 / rate + t);
}

bool hm_dyn_pick(const double *counts, const uint8_t *gpu, int n_layers, int n_experts,
                 double min_gain, int *il, int *in, int *out) {
    double best = 0;
    bool found = false;
    for (int l = 0; l < n_layers; l++) {
        const double *cn = counts + (size_t)l * (size_t)n_experts;
        const uint8_t *g = gpu + (size_t)l * (size_t)n_experts;
        int hot = -1, cold = -1;
        for (int e = 0; e < n_experts; e++) {
            if (!g[e] && (hot < 0 || cn[e] > cn[hot])) hot = e;
            if (g[e] && (cold < 0 || cn[e] < cn[cold])) cold = e;
        }
        if (hot < 0 || cold < 0) continue; /* one side is empty */
        const double gain = cn[hot] - cn[cold];
        if (gain >= min_gain && gain >= 0.25 * cn[cold] && gain > best) {
            best = gain, found = true;
            *il = l, *in = hot, *out = cold;
        }
    }
    return found;
}
