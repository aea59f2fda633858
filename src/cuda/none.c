/* none.c - the GPU entry points of a CPU-only build (HMOE_CUDA=OFF or no nvcc). */
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
hm_status hm_cuda_selftest(int dev) {
    (void)dev;
    return no_cuda();
}
