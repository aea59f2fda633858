/* cuda.h - the only C-facing entry to the GPU code. In a CPU-only build every call returns
 * HM_ERR_UNSUPPORTED ("built without CUDA") and hm_cuda_compiled() is false. */
#ifndef HM_CUDA_H
#define HM_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

typedef struct hm_gpu_info {
    int index;
    char name[256];
    size_t mem_total, mem_free; /* bytes */
    int cc_major, cc_minor;
    int sm_count;
    int mem_bus_width_bits;
    int pci_bus, pci_device;
} hm_gpu_info;

bool hm_cuda_compiled(void);
/* Number of usable GPUs. A machine without a driver or GPU gives 0 and HM_OK. */
hm_status hm_cuda_device_count(int *n);
/* Driver and runtime versions as CUDA encodes them (1000 * major + 10 * minor). */
hm_status hm_cuda_versions(int *driver, int *runtime);
hm_status hm_cuda_device_info(int dev, hm_gpu_info *out);
/* Pinned host -> device copy bandwidth in 1e9 bytes/s (best of reps copies of `bytes`). */
hm_status hm_cuda_h2d_bandwidth(int dev, size_t bytes, int reps, double *gbs);
/* Runs a small kernel on dev and checks its result against the CPU. */
hm_status hm_cuda_selftest(int dev);

#endif
