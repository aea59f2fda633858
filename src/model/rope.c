/* rope.c - rotary frequencies with RoPE scaling, following transformers' modeling_rope_utils
 * (5.x): the arithmetic is float32 where transformers computes on float32 tensors, double where
 * it computes on Python floats. */
#include "model/rope.h"

#include <math.h>

#include "cpu/nn.h"

const char *hm_rope_type_name(hm_rope_type t) {
    switch (t) {
    case HM_ROPE_NONE:
        return "default";
    case HM_ROPE_LINEAR:
        return "linear";
    case HM_ROPE_DYNAMIC:
        return "dynamic";
    case HM_ROPE_YARN:
        return "yarn";
    case HM_ROPE_LLAMA3:
        return "llama3";
    }
    return "unknown";
}

/* _compute_yarn_parameters' get_mscale */
static double yarn_get_mscale(double scale, double mscale) {
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

/* find_correction_dim */
static double yarn_corr_dim(double n_rot, int dim, double base, double orig_ctx) {
    return ((double)dim * log(orig_ctx / (n_rot * 2.0 * M_PI))) / (2.0 * log(base));
}

static void rope_yarn(const hm_hparams *hp, int dim, float *inv, float *attn_factor) {
    const double base = hp->rope_theta, factor = hp->rope_factor;
    const double orig = hp->rope_orig_ctx;
    double af = hp->yarn_attn_factor;
    if (!(af > 0)) {
        if (hp->yarn_mscale > 0 && hp->yarn_mscale_all_dim > 0)
            af = yarn_get_mscale(factor, hp->yarn_mscale) /
                 yarn_get_mscale(factor, hp->yarn_mscale_all_dim);
        else
            af = yarn_get_mscale(factor, 1.0);
    }
    *attn_factor = (float)af;
    const double beta_fast = hp->yarn_beta_fast > 0 ? hp->yarn_beta_fast : 32.0;
    const double beta_slow = hp->yarn_beta_slow > 0 ? hp->yarn_beta_slow : 1.0;
    double lo = yarn_corr_dim(beta_fast, dim, base, orig);
    double hi = yarn_corr_dim(beta_slow, dim, base, orig);
    if (!hp->yarn_no_truncate) lo = floor(lo), hi = ceil(hi);
    lo = fmax(lo, 0.0), hi = fmin(hi, (double)(dim - 1));
    if (lo == hi) hi += 0.001; /* linear_ramp_factor's guard against a zero-width ramp */
    const float flo = (float)lo, span = (float)(hi - lo), ffactor = (float)factor;
    for (int i = 0; i < dim / 2; i++) {
        const float pos_freq = powf((float)base, (float)(2 * i) / (float)dim);
        const float extrap = 1.0f / pos_freq, interp = 1.0f / (ffactor * pos_freq);
        float ramp = ((float)i - flo) / span;
        ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
        const float ef = 1.0f - ramp; /* inv_freq_extrapolation_factor */
        inv[i] = interp * (1.0f - ef) + extrap * ef;
    }
}

static void rope_llama3(const hm_hparams *hp, int dim, float *inv) {
    const float factor = hp->rope_factor;
    const double lo_f = hp->rope_low_freq_factor, hi_f = hp->rope_high_freq_factor;
    const double old = hp->rope_orig_ctx;
    const float lo_wavelen = (float)(old / lo_f), hi_wavelen = (float)(old / hi_f);
    for (int i = 0; i < dim / 2; i++) {
        const float f = inv[i], wavelen = (float)(2.0 * M_PI) / f;
        float out = wavelen > lo_wavelen ? f / factor : f;
        if (!(wavelen < hi_wavelen) && !(wavelen > lo_wavelen)) {
            const float smooth = ((float)old / wavelen - (float)lo_f) / (float)(hi_f - lo_f);
            out = (1.0f - smooth) * out / factor + smooth * out;
        }
        inv[i] = out;
    }
}

void hm_rope_freqs(const hm_hparams *hp, int64_t seq_len, float *inv, float *attn_factor) {
    const int dim = (int)hp->rope_dim;
    *attn_factor = 1.0f;
    switch (hp->rope_type) {
    case HM_ROPE_YARN:
        rope_yarn(hp, dim, inv, attn_factor);
        return;
    case HM_ROPE_DYNAMIC: {
        double base = hp->rope_theta;
        const double mpe = hp->rope_orig_ctx, factor = hp->rope_factor;
        if ((double)seq_len > mpe) {
            base *= pow(factor * (double)seq_len / mpe - (factor - 1.0),
                        (double)dim / (double)(dim - 2));
        }
        hm_rope_inv_freq(inv, dim, (float)base);
        return;
    }
    case HM_ROPE_NONE:
    case HM_ROPE_LINEAR:
    case HM_ROPE_LLAMA3:
        break;
    }
    hm_rope_inv_freq(inv, dim, hp->rope_theta);
    if (hp->rope_type == HM_ROPE_LINEAR)
        for (int i = 0; i < dim / 2; i++) inv[i] /= hp->rope_factor;
    else if (hp->rope_type == HM_ROPE_LLAMA3)
        rope_llama3(hp, dim, inv);
}
