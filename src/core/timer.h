/* timer.h - monotonic clocks: nanoseconds since an arbitrary epoch, and the TSC for tight loops. */
#ifndef HM_CORE_TIMER_H
#define HM_CORE_TIMER_H

#include <stdint.h>
#include <time.h>

static inline uint64_t hm_time_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline double hm_time_s(void) {
    return (double)hm_time_ns() * 1e-9;
}

/* Raw time-stamp counter: cheap, monotonic per core on invariant-TSC CPUs; only for measuring
 * short intervals inside one thread. */
static inline uint64_t hm_cycles(void) {
#if defined(__x86_64__) || defined(__i386__)
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
#else
    return hm_time_ns();
#endif
}

static inline void hm_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("pause" ::: "memory");
#else
    __asm__ volatile("" ::: "memory");
#endif
}

#endif
