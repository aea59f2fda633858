/* act.c - activation conversion for the kernels: the type each variant's kernels consume for a
 * weight type, and the conversion into it with the quantizers of the variant in use. */
#include <string.h>

#include "cpu/ops.h"
#include "quant/blocks.h"
#include "quant/fp16.h"

uint32_t hm_act_type_for(const hm_cpu_ops *ops, uint32_t t) {
    return ops && ops->act_type ? ops->act_type(t) : hm_act_type_ref(t);
}

size_t hm_act_bytes_for(const hm_cpu_ops *ops, uint32_t wt, int64_t n) {
    uint64_t b = 0;
    return n >= 0 && hm_type_row_bytes(hm_act_type_for(ops, wt), (uint64_t)n, &b) ? (size_t)b : 0;
}

/* Q8_0 blocks q[0..k) (one group, k <= 4) into the Q8_0X4 layout at out (blocks.h): 4-byte runs
 * of codes, + 128 as a XOR of each byte's top bit */
static void q8_0x4_group(const hm_block_q8_0 *q, int k, uint8_t *out) {
    int b = 0;
    for (; b + 1 < k; b += 2) /* a pair: runs of blocks b and b + 1 alternate */
        for (int m = 0; m < HM_QK8_0 / 4; m++)
            for (int h = 0; h < 2; h++) {
                uint32_t r;
                memcpy(&r, q[b + h].qs + 4 * m, sizeof r);
                r ^= 0x80808080u;
                memcpy(out + 32 * b + 8 * m + 4 * h, &r, sizeof r);
            }
    for (int j = 0; b < k && j < HM_QK8_0; j += 4) { /* a lone last block */
        uint32_t r;
        memcpy(&r, q[b].qs + j, sizeof r);
        r ^= 0x80808080u;
        memcpy(out + 32 * b + j, &r, sizeof r);
    }
    for (b = 0; b < k; b++) {
        const float d = hm_f16_to_f32(q[b].d);
        memcpy(out + 32 * k + 4 * b, &d, sizeof d);
    }
}

hm_status hm_act_convert_for(const hm_cpu_ops *ops, uint32_t wt, const float *x, void *out,
                             int64_t n) {
    const uint32_t at = hm_act_type_for(ops, wt);
    uint64_t bytes;
    if (n < 0 || !hm_type_row_bytes(at, (uint64_t)n, &bytes))
        return hm_errorf(HM_ERR_INVALID_ARG,
                         "activations: %lld values is not a whole number of %s "
                         "blocks (needed by %s weights)",
                         (long long)n, hm_type_name(at), hm_type_name(wt));
    /* the quantizers of the variant in use: the same bits as the reference's */
    const hm_cpu_ops *q = hm_cpu_ops_or_ref();
    void (*q8_0)(const float *, void *, int64_t) =
        q->quant_q8_0 ? q->quant_q8_0 : hm_quantize_row_q8_0_ref;
    void (*q8_K)(const float *, void *, int64_t) =
        q->quant_q8_K ? q->quant_q8_K : hm_quantize_row_q8_K_ref;
    if (at == HM_TYPE_Q8_K)
        q8_K(x, out, n);
    else if (at == HM_TYPE_Q8_0)
        q8_0(x, out, n);
    else if (at == HM_TYPE_Q8_KX) {
        q8_K(x, out, n); /* the Q8_K blocks, then their sums */
        const hm_block_q8_K *b = out;
        float *s = (float *)((hm_block_q8_K *)out + n / HM_QK_K);
        for (int64_t i = 0; i < n / HM_QK_K; i++)
            for (int j = 0; j < HM_Q8_KX_SUMS; j++)
                s[HM_Q8_KX_SUMS * i + j] =
                    b[i].d * (float)(b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
    } else if (at == HM_TYPE_Q8_0X4)
        for (int64_t i = 0; i < n; i += 4 * HM_QK8_0) {
            hm_block_q8_0 g[4];
            const int k = n - i >= 4 * HM_QK8_0 ? 4 : (int)((n - i) / HM_QK8_0);
            q8_0(x + i, g, (int64_t)k * HM_QK8_0);
            q8_0x4_group(g, k, (uint8_t *)out + i / HM_QK8_0 * 36);
        }
    else
        memcpy(out, x, (size_t)n * sizeof(float));
    return HM_OK;
}

uint32_t hm_act_type(uint32_t t) {
    return hm_act_type_for(hm_cpu_ops_or_ref(), t);
}

size_t hm_act_bytes(uint32_t wt, int64_t n) {
    return hm_act_bytes_for(hm_cpu_ops_or_ref(), wt, n);
}

hm_status hm_act_convert(uint32_t wt, const float *x, void *out, int64_t n) {
    return hm_act_convert_for(hm_cpu_ops_or_ref(), wt, x, out, n);
}
