/* test_cuda.c - GPU backend: device queries agree with nvidia-smi, the self-test kernel runs,
 * pinned copies move data. Skips (77) where no GPU is usable; on a CPU-only build it checks that
 * every entry point says so clearly. */
#include "cuda/cuda.h"
#include "test.h"

int main(void) {
    int n = -1;
    CHECK_OK(hm_cuda_device_count(&n));
    if (!hm_cuda_compiled()) {
        CHECK(n == 0);
        hm_gpu_info info;
        CHECK_STATUS(hm_cuda_device_info(0, &info), HM_ERR_UNSUPPORTED);
        CHECK_CONTAINS(hm_last_error(), "built without CUDA");
        CHECK_STATUS(hm_cuda_selftest(0), HM_ERR_UNSUPPORTED);
        return test_done("cuda (CPU-only build)");
    }
    hm_gpu_info info;
    CHECK_STATUS(hm_cuda_device_info(n < 0 ? 0 : n, &info), HM_ERR_NOT_FOUND);
    CHECK_CONTAINS(hm_last_error(), "does not exist");
    if (n <= 0) {
        test_done("cuda");
        return test_skip("cuda", "no usable GPU on this machine");
    }
    int drv, rt;
    CHECK_OK(hm_cuda_versions(&drv, &rt));
    CHECK(drv >= rt && rt >= 12000);
    for (int d = 0; d < n; d++) {
        CHECK_OK(hm_cuda_device_info(d, &info));
        CHECK(info.mem_total > 0 && info.mem_free <= info.mem_total && info.sm_count > 0);
        CHECK(info.cc_major >= 7);
        /* oracle: nvidia-smi, when present */
        char cmd[160], line[512];
        snprintf(cmd, sizeof cmd,
                 "nvidia-smi -i %d --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null",
                 d);
        FILE *p = popen(cmd, "r");
        if (p && fgets(line, sizeof line, p)) {
            char cc[16];
            snprintf(cc, sizeof cc, "%d.%d", info.cc_major, info.cc_minor);
            CHECK_MSG(strncmp(line, info.name, strlen(info.name)) == 0, "nvidia-smi '%s' vs '%s'",
                      line, info.name);
            CHECK_CONTAINS(line, cc);
        }
        if (p) pclose(p);
        CHECK_OK(hm_cuda_selftest(d));
        double gbs = 0;
        CHECK_OK(hm_cuda_h2d_bandwidth(d, 64 << 20, 3, &gbs));
        CHECK_MSG(gbs > 1.0, "pinned H2D %.2f GB/s", gbs);
        printf("GPU %d: %s sm_%d%d, %.1f GiB, H2D %.1f GB/s\n", d, info.name, info.cc_major,
               info.cc_minor, (double)info.mem_total / (1 << 30), gbs);
    }
    double gbs;
    CHECK_STATUS(hm_cuda_h2d_bandwidth(0, 0, 1, &gbs), HM_ERR_INVALID_ARG);
    return test_done("cuda");
}
