/* Micro-benchmark (measurement only, not built with the product): the compute cost of one
 * weight type's dot kernel per block, data in L1/L2 (ROWS rows x COLS columns, cycled 200
 * times; the fastest pass). Run one copy per CPU at once (taskset) to see the cost under
 * all-core load. bench/RESULTS.md, 2026-11-30 (ninth).
 *   cmake --build build --target hmoe
 *   gcc -O2 -march=sapphirerapids -Isrc -Iinclude -o dot_cost bench/micro/dot_cost.c \
 *       build/libhmoe.a -lm -lpthread
 *   ./dot_cost [ROWS [COLS [TYPE [NT]]]]   (defaults 64, 768, q4_k, 1; NT 2-4 times the rows
 *   against NT activation vectors through vec_dot_n; HMOE_ISA picks the variant) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/timer.h"
#include "cpu/matvec.h"
#include "cpu/ops.h"
#include "quant/synth.h"
#include "quant/types.h"

int main(int argc, char **argv) {
    const int rows = argc > 1 ? atoi(argv[1]) : 64, cols = argc > 2 ? atoi(argv[2]) : 768;
    const int type = hm_type_from_name(argc > 3 ? argv[3] : "q4_k");
    const int nt = argc > 4 ? atoi(argv[4]) : 1;
    const hm_cpu_ops *ops;
    const hm_type_info *ti = type >= 0 ? hm_type_get((uint32_t)type) : NULL;
    uint64_t rb;
    if (rows < 1 || nt < 1 || nt > 4 || !ti || hm_cpu_ops_get(&ops) != HM_OK ||
        !hm_type_row_bytes((uint32_t)type, (uint64_t)cols, &rb)) {
        fprintf(stderr, "dot_cost: bad arguments or no kernels\n");
        return 1;
    }
    uint8_t *w = malloc((size_t)rows * rb);
    float *x = malloc(sizeof(float) * (size_t)cols);
    const size_t ab = hm_act_bytes((uint32_t)type, cols);
    uint8_t *xq = malloc(ab * 4);
    if (!w || !x || !xq) return 1;
    hm_synth_fill((uint32_t)type, w, (uint64_t)rows * (uint64_t)cols, 0.0f, 0.02f, 1);
    for (int i = 0; i < cols; i++) x[i] = (float)((i * 37) % 11) - 5.0f;
    for (int t = 0; t < 4; t++) hm_act_convert((uint32_t)type, x, xq + ab * t, cols);
    const void *xs[4] = {xq, xq + ab, xq + 2 * ab, xq + 3 * ab};
    const hm_vec_dot_fn dot = hm_vec_dot_for(ops, (uint32_t)type);
    const hm_vec_dot_n_fn dotn = hm_vec_dot_n_for(ops, (uint32_t)type);
    float s = 0, o[4];
    double best = 1e30;
    for (int it = 0; it < 200; it++) {
        const uint64_t t0 = hm_time_ns();
        if (nt == 1)
            for (int r = 0; r < rows; r++) s += dot(cols, w + (size_t)r * rb, xq);
        else
            for (int r = 0; r < rows; r++) dotn(cols, w + (size_t)r * rb, xs, nt, o), s += o[0];
        const double ns = (double)(hm_time_ns() - t0);
        best = ns < best ? ns : best;
    }
    printf("%s %s, %d tokens, %d rows x %d: %.2f ns per row, %.2f ns per block of %llu (%.1f GB/s "
           "on one "
           "thread; checksum %g)\n",
           ops->name, hm_type_name((uint32_t)type), nt, rows, cols, best / rows,
           best / rows / ((double)cols / (double)ti->block), (unsigned long long)ti->block,
           (double)rb * rows / best, s);
    free(w), free(x), free(xq);
    return 0;
}
