/* test_membw.c - every compiled kernel variant this CPU runs sums exactly like the plain-C
 * reference (odd lengths, unaligned starts), the benchmarks' range read covers exactly the whole
 * lines inside a range, and the bandwidth measurement validates. */
#include <stdint.h>

#include "core/pool.h"
#include "cpu/membw.h"
#include "cpu/ops.h"
#include "test.h"

int main(void) {
    const hm_cpu_features *f = hm_cpu_features_get();
    const hm_cpu_ops *ref = hm_cpu_ops_for(HM_ISA_REF);
    CHECK(ref && ref->isa == HM_ISA_REF);
    size_t n = 4096 + 77;
    uint64_t *buf = malloc((n + 8) * sizeof(uint64_t));
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n + 8; i++)
        buf[i] = (s = s * 6364136223846793005ull + 1442695040888963407ull);
    int variants = 0;
    for (int isa = 0; isa < HM_ISA_COUNT; isa++) {
        const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
        CHECK_MSG(ops != NULL, "variant %s not compiled in", hm_isa_name((hm_isa)isa));
        if (!ops || !hm_isa_supported(f, (hm_isa)isa)) continue;
        CHECK(ops->isa == (hm_isa)isa && strcmp(ops->name, hm_isa_name((hm_isa)isa)) == 0);
        variants++;
        for (size_t off = 0; off < 8; off++) /* off: unaligned start (bytes = 8 * off) */
            for (size_t len = 0; len < 300; len += (len < 70 ? 1 : 37))
                CHECK_MSG(ops->sum_u64(buf + off, len) == ref->sum_u64(buf + off, len),
                          "%s sum off %zu len %zu", ops->name, off, len);
        CHECK(ops->sum_u64(buf, n) == ref->sum_u64(buf, n));
        /* the benchmarks' paired read: exactly the whole 64-byte lines inside a range, from
         * byte offsets that are not multiples of 8 and lengths that end mid-line */
        const uint8_t *bytes = (const uint8_t *)buf;
        for (size_t start = 0; start < 200; start += 13)
            for (size_t len = 0; len < 700; len += 41) {
                const uintptr_t a = ((uintptr_t)(bytes + start) + 63) / 64 * 64,
                                e = ((uintptr_t)(bytes + start + len)) / 64 * 64;
                uint64_t want = 0;
                for (uintptr_t q = a; q < e; q += 8) want += *(const uint64_t *)q;
                size_t got = 12345;
                const uint64_t sum = hm_membw_read_range(ops, bytes + start, len, &got);
                CHECK_MSG(got == (e > a ? (size_t)(e - a) : 0) && sum == want,
                          "%s read_range start %zu len %zu: %zu bytes", ops->name, start, len, got);
            }
        hm_membw_params p = hm_membw_default_params();
        p.bytes = (16 << 20) + 8 * 13; /* not a whole number of pages */
        p.passes = 3;
        p.ops = ops;
        hm_membw_result r;
        CHECK_OK(hm_membw_read(&p, &r));
        CHECK(r.best_gbs >= r.median_gbs && r.median_gbs >= r.worst_gbs && r.worst_gbs > 0);
        CHECK(r.bytes == p.bytes && r.passes == 3 && strcmp(r.kernel, ops->name) == 0);
        printf("%s: %.2f GB/s on 16 MiB (%d threads)\n", ops->name, r.best_gbs, r.threads);
    }
    CHECK(variants >= 1);
    printf("%d kernel variants checked\n", variants);
#if defined(__x86_64__)
    if (hm_isa_supported(f, HM_ISA_AMX))
        CHECK_OK(hm_amx_selftest());
    else
        CHECK_STATUS(hm_amx_selftest(), HM_ERR_UNSUPPORTED);
#endif

    /* explicit pool; tiny and bad sizes */
    hm_pool_params pp = hm_pool_default_params();
    pp.n_threads = 3;
    pp.pin = false;
    hm_pool *pool;
    CHECK_OK(hm_pool_create(&pp, &pool));
    hm_membw_params p = hm_membw_default_params();
    p.pool = pool;
    p.bytes = 4096 * 2; /* fewer pages than threads: some threads get nothing */
    p.passes = 2;
    hm_membw_result r;
    CHECK_OK(hm_membw_read(&p, &r));
    CHECK(r.threads == 3);
    p.bytes = 4;
    CHECK_STATUS(hm_membw_read(&p, &r), HM_ERR_INVALID_ARG);
    p.bytes = 4096;
    p.passes = 5000;
    CHECK_STATUS(hm_membw_read(&p, &r), HM_ERR_INVALID_ARG);

    /* the cache sweep: its size, its read (the sum proves every element was read once, on
     * every variant), and sizes it refuses */
    for (int isa = 0; isa < HM_ISA_COUNT; isa++) {
        const hm_cpu_ops *ops = hm_cpu_ops_for((hm_isa)isa);
        if (!ops || !hm_isa_supported(f, (hm_isa)isa)) continue;
        hm_membw_sweep *sw;
        const size_t sizes[2] = {(size_t)5 << 20, ((size_t)3 << 20) + 4096};
        for (int k = 0; k < 2; k++) {
            CHECK_OK(hm_membw_sweep_create(pool, ops, sizes[k], &sw));
            CHECK(hm_membw_sweep_bytes(sw) == sizes[k]);
            CHECK_OK(hm_membw_sweep_run(sw));
            CHECK_OK(hm_membw_sweep_run(sw));
            hm_membw_sweep_free(sw);
        }
    }
    hm_membw_sweep *sw = (hm_membw_sweep *)&p;
    CHECK_STATUS(hm_membw_sweep_create(pool, hm_cpu_ops_for(HM_ISA_REF), (size_t)1 << 20, &sw),
                 HM_ERR_INVALID_ARG);
    CHECK(sw == NULL);
    CHECK_STATUS(hm_membw_sweep_create(NULL, hm_cpu_ops_for(HM_ISA_REF), 0, &sw),
                 HM_ERR_INVALID_ARG);
    hm_membw_sweep_free(NULL);
    hm_pool_free(pool);
    free(buf);
    return test_done("membw");
}
