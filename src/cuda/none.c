/* none.c - the GPU entry points of a CPU-only build (HMOE_CUDA=OFF or no nvcc). */
#include <string.h>

#include "cuda/cuda.h"

static hm_status no_cuda(void) {
    return hm_errorf(HM_ERR_UNSUPPORTED, "this hmoe was built without CUDA (HMOE_CUDA=OFF or no "
                                         "nvcc at build time)");
}

bool hm_cuda_compiled(void) {
    return false;
}
hm_status hm_cuda_device_count(int *n) {
    *n = 0;
    return HM_OK;
}
hm_status hm_cuda_versions(int *driver, int *runtime) {
    *driver = *runtime = 0;
    return no_cuda();
}
hm_status hm_cuda_device_info(int dev, hm_gpu_info *out) {
    (void)dev;
    (void)out;
    return no_cuda();
}
hm_status hm_cuda_h2d_bandwidth(int dev, size_t bytes, int reps, double *gbs) {
    (void)dev, (void)bytes, (void)reps;
    *gbs = 0;
    return no_cuda();
}
hm_status hm_cuda_mem_bandwidth(int dev, size_t bytes, int reps, double *gbs) {
    (void)dev, (void)bytes, (void)reps;
    *gbs = 0;
    return no_cuda();
}
hm_status hm_cuda_bench(const hm_cuda_bench_params *p, FILE *out) {
    (void)p, (void)out;
    return no_cuda();
}
hm_status hm_cuda_selftest(int dev) {
    (void)dev;
    return no_cuda();
}

hm_status hm_cuda_ctx_create(const hm_model *m, const hm_graph *g, const hm_cuda_ctx_params *p,
                             hm_cuda_ctx **out) {
    (void)m, (void)g, (void)p;
    *out = NULL;
    return hm_errorf(HM_ERR_UNSUPPORTED, "--device cuda: this hmoe was built without CUDA "
                                         "(HMOE_CUDA=OFF or no nvcc at build time)");
}
hm_status hm_cuda_ctx_measure(const hm_model *m, const hm_graph *g, const hm_cuda_ctx_params *p,
                              size_t *total, size_t *experts, size_t *free_bytes, size_t *stream) {
    (void)m, (void)g, (void)p;
    *total = *experts = *free_bytes = *stream = 0;
    return hm_errorf(HM_ERR_UNSUPPORTED, "--device cuda: this hmoe was built without CUDA "
                                         "(HMOE_CUDA=OFF or no nvcc at build time)");
}
void hm_cuda_ctx_free(hm_cuda_ctx *c) {
    (void)c;
}
hm_status hm_cuda_ctx_decode(hm_cuda_ctx *c, int n, const int32_t *tokens, const int32_t *seq,
                             const int32_t *pos, const float *cs, const int32_t *rows, int nw,
                             float *logits) {
    (void)c, (void)n, (void)tokens, (void)seq, (void)pos, (void)cs, (void)rows, (void)nw,
        (void)logits;
    return no_cuda();
}
hm_status hm_cuda_ctx_decode_top(hm_cuda_ctx *c, int n, const int32_t *tokens, const int32_t *seq,
                                 const int32_t *pos, const float *cs, const int32_t *rows, int nw,
                                 int k, int32_t *ids, float *vals, int *bad) {
    (void)c, (void)n, (void)tokens, (void)seq, (void)pos, (void)cs, (void)rows, (void)nw, (void)k,
        (void)ids, (void)vals, (void)bad;
    return no_cuda();
}
void hm_cuda_ctx_hybrid_times(hm_cuda_ctx *c, hm_cuda_hybrid_times *t) {
    (void)c;
    memset(t, 0, sizeof *t);
}
static bool none_supports(void *self, const hm_node *nd) {
    (void)self, (void)nd;
    return false;
}
static hm_status none_compute(void *self, const hm_graph *g, int n) {
    (void)self, (void)g, (void)n;
    return no_cuda();
}
static const hm_backend_i none_i = {"cuda (not built)", none_supports, none_compute};
hm_backend hm_cuda_ctx_backend(hm_cuda_ctx *c) {
    return (hm_backend){&none_i, c};
}
bool hm_cuda_ctx_prof(hm_cuda_ctx *c, double ms[HM_PROF_COUNT]) {
    (void)c, (void)ms;
    return false;
}

hm_status hm_measure_gpu_bandwidth(int gpu, double *gbs) {
    (void)gpu;
    *gbs = 0;
    return no_cuda();
}
