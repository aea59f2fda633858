/* router.c - the routers: top-k experts and their weights from a token's router logits. */
#include <math.h>
#include <string.h>

#include "hmoe_moe.h"
#include "core/status.h"

/* indices of the k largest v[0..n) (ties: lower index first), in descending order */
static void topk(const float *v, int n, int k, int32_t *ids) {
    for (int j = 0; j < k; j++) ids[j] = -1;
    for (int i = 0; i < n; i++) {
        int j = k;
        while (j > 0 && (ids[j - 1] < 0 || v[i] > v[ids[j - 1]])) j--;
        if (j >= k) continue;
        memmove(ids + j + 1, ids + j, sizeof *ids * (size_t)(k - j - 1));
        ids[j] = i;
    }
}

hm_status hm_router_softmax_topk(const float *logits, int n, int k, bool renorm, int32_t *ids,
                                 float *w) {
    if (n < 1 || k < 1 || k > n)
        return hm_errorf(HM_ERR_INVALID_ARG, "router: top-%d of %d experts", k, n);
    float mx = logits[0];
    for (int i = 1; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)logits[i] - mx);
    topk(logits, n, k, ids);
    double sel = 0;
    for (int j = 0; j < k; j++) {
        w[j] = (float)(exp((double)logits[ids[j]] - mx) / sum);
        sel += w[j];
    }
    if (renorm)
        for (int j = 0; j < k; j++) w[j] = (float)(w[j] / sel);
    return HM_OK;
}

hm_status hm_router_sigmoid_group_topk(const float *logits, const float *bias, int n, int n_group,
                                       int topk_group, int k, bool renorm, float scale,
                                       int32_t *ids, float *w) {
    if (n < 1 || n_group < 1 || n % n_group || topk_group < 1 || topk_group > n_group || k < 1 ||
        k > n / n_group * topk_group || n > 4096)
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "router: top-%d of %d experts in %d groups (top %d groups)", k, n, n_group,
                         topk_group);
    float s[4096], choice[4096], gscore[4096];
    int32_t gids[4096];
    for (int i = 0; i < n; i++) {
        s[i] = 1.0f / (1.0f + expf(-logits[i]));
        choice[i] = s[i] + (bias ? bias[i] : 0.0f);
    }
    const int per = n / n_group;
    for (int g = 0; g < n_group; g++) {
        int32_t t2[2];
        topk(choice + g * per, per, per < 2 ? 1 : 2, t2);
        gscore[g] = choice[g * per + t2[0]] + (per < 2 ? 0.0f : choice[g * per + t2[1]]);
    }
    topk(gscore, n_group, topk_group, gids);
    for (int i = 0; i < n; i++) { /* experts of dropped groups can never win */
        bool kept = false;
        for (int j = 0; j < topk_group; j++) kept |= gids[j] == i / per;
        if (!kept) choice[i] = -INFINITY;
    }
    topk(choice, n, k, ids);
    double sum = 0;
    for (int j = 0; j < k; j++) sum += s[ids[j]];
    for (int j = 0; j < k; j++)
        w[j] = (float)((renorm ? s[ids[j]] / (sum + 1e-20) : s[ids[j]]) * scale);
    return HM_OK;
}
