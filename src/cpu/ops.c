/* ops.c - picks the kernel variant once from CPU features (or HMOE_ISA) and logs it. */
#include "cpu/ops.h"

#include <pthread.h>
#include <stdio.h>

#include "core/log.h"

const hm_cpu_ops *hm_cpu_ops_for(hm_isa isa) {
    switch (isa) {
    case HM_ISA_REF:
        return &hm_ops_ref;
#if defined(__x86_64__)
    case HM_ISA_AVX2:
        return &hm_ops_avx2;
    case HM_ISA_AVX512:
        return &hm_ops_avx512;
    case HM_ISA_AMX:
        return &hm_ops_amx;
#endif
    default:
        return NULL;
    }
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const hm_cpu_ops *g_ops;
static hm_status g_status;
static char g_error[HM_ERROR_MAX];

static void select_once(void) {
    hm_isa isa;
    g_status = hm_isa_select(&isa);
    if (g_status != HM_OK) {
        snprintf(g_error, sizeof g_error, "%s", hm_last_error());
        return;
    }
    g_ops = hm_cpu_ops_for(isa);
    if (!g_ops) {
        g_status = HM_ERR_UNSUPPORTED;
        snprintf(g_error, sizeof g_error, "kernel variant %s is not compiled into this binary",
                 hm_isa_name(isa));
        return;
    }
    HM_INFO("cpu kernels: %s", g_ops->name);
}

hm_status hm_cpu_ops_get(const hm_cpu_ops **out) {
    pthread_once(&g_once, select_once);
    *out = g_ops;
    if (g_status != HM_OK) return hm_errorf(g_status, "%s", g_error);
    return HM_OK;
}

const hm_cpu_ops *hm_cpu_ops_or_ref(void) {
    pthread_once(&g_once, select_once);
    return g_ops ? g_ops : &hm_ops_ref;
}

#if defined(__x86_64__)
/* here, compiled for any x86-64: amx.c's code may not run before AMX is known to be there */
hm_status hm_amx_selftest(void) {
    if (!hm_isa_supported(hm_cpu_features_get(), HM_ISA_AMX))
        return hm_errorf(HM_ERR_UNSUPPORTED, "AMX self-test: AMX not usable on this CPU/OS");
    return hm_amx_selftest_tiles();
}
#endif

bool hm_i8_matmul_ok(const hm_cpu_ops *ops) {
    if (!ops || !ops->i8_matmul) return false;
    return ops->isa == HM_ISA_AMX || ops->isa == HM_ISA_AVX512; /* both imply VNNI */
}
