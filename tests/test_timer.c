/* test_timer.c - monotonic clocks agree with nanosleep and never go back. */
#include <time.h>

#include "core/timer.h"
#include "test.h"

int main(void) {
    uint64_t prev = hm_time_ns();
    for (int i = 0; i < 100000; i++) {
        uint64_t now = hm_time_ns();
        CHECK(now >= prev);
        prev = now;
    }
    uint64_t t0 = hm_time_ns(), c0 = hm_cycles();
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    uint64_t dt = hm_time_ns() - t0, dc = hm_cycles() - c0;
    CHECK_MSG(dt >= 20000000ull, "slept 20 ms, measured %llu ns", (unsigned long long)dt);
    CHECK_MSG(dt < 5000000000ull, "slept 20 ms, measured %llu ns", (unsigned long long)dt);
    CHECK(dc > 0);
    double s0 = hm_time_s();
    CHECK(s0 > 0);
    for (int i = 0; i < 10; i++) hm_cpu_relax();
    return test_done("timer");
}
