/* test_cli.c - the hmoe binary end to end: exit codes, usage errors, doctor text and JSON (checked
 * with Python's json module), the benchmarks' output. */
#include <sys/wait.h>

#include "test.h"

static char out[1 << 16];

/* Runs a shell command; captures stdout+stderr into out; returns the exit code. */
static int run(const char *cmd) {
    char full[1024];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void) {
    const char *bin = HMOE_BINARY;
    char cmd[1024];

    snprintf(cmd, sizeof cmd, "%s version", bin);
    CHECK(run(cmd) == 0);
    CHECK_CONTAINS(out, "hmoe 0.1.0");
    snprintf(cmd, sizeof cmd, "%s help", bin);
    CHECK(run(cmd) == 0);
    CHECK_CONTAINS(out, "doctor");
    snprintf(cmd, sizeof cmd, "%s", bin);
    CHECK(run(cmd) == 2);
    snprintf(cmd, sizeof cmd, "%s frobnicate", bin);
    CHECK(run(cmd) == 2);
    CHECK_CONTAINS(out, "unknown command 'frobnicate'");
    snprintf(cmd, sizeof cmd, "%s doctor --bogus", bin);
    CHECK(run(cmd) == 2);
    CHECK_CONTAINS(out, "unknown option '--bogus'");
    snprintf(cmd, sizeof cmd, "%s doctor --bw-bytes 12Q", bin);
    CHECK(run(cmd) == 2);
    snprintf(cmd, sizeof cmd, "%s bench", bin);
    CHECK(run(cmd) == 2);
    snprintf(cmd, sizeof cmd, "%s bench pool --threads -3", bin);
    CHECK(run(cmd) == 2);
    CHECK_CONTAINS(out, "bad option '--threads'");

    /* doctor, text */
    snprintf(cmd, sizeof cmd, "%s doctor --bw-bytes 64M", bin);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "kernels ");
    CHECK_CONTAINS(out, "read bandwidth ");
    CHECK_CONTAINS(out, "GB/s best");
    CHECK_CONTAINS(out, "verdict: ok");

    /* doctor, JSON: valid for Python's json module and carrying the fields */
    snprintf(
        cmd, sizeof cmd,
        "%s doctor --json --bw-bytes 32M | python3 -c \"import json,sys; d=json.load(sys.stdin); "
        "assert d['ok'] is True, d['problems']; "
        "assert d['cpu']['physical_cores'] >= 1 and d['cpu']['logical_cpus'] >= 1; "
        "assert d['cpu']['kernels'] in ('ref','avx2','avx512','amx'); "
        "assert d['memory']['read_bandwidth']['best_gbs'] > 0; "
        "assert isinstance(d['cuda']['gpus'], list); print('json ok')\"",
        bin);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "json ok");

    /* something required missing: a bad HMOE_ISA makes doctor fail with the reason */
    snprintf(cmd, sizeof cmd, "HMOE_ISA=sse9 %s doctor --no-bandwidth", bin);
    CHECK(run(cmd) == 1);
    CHECK_CONTAINS(out, "HMOE_ISA: ISA 'sse9' is not one of");
    CHECK_CONTAINS(out, "problem");
    snprintf(cmd, sizeof cmd, "HMOE_ISA=ref %s doctor --no-bandwidth --json", bin);
    CHECK(run(cmd) == 1); /* ref kernels only: not fit for inference */
    CHECK_CONTAINS(out, "\"kernels\": \"ref\"");

    /* benchmarks print their configuration, the target/roofline, and results */
    snprintf(cmd, sizeof cmd, "%s bench pool --iters 300 --threads 2 --spin-us 50", bin);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "bench pool: 2 threads");
    CHECK_CONTAINS(out, "target: median dispatch+join");
    CHECK_CONTAINS(out, "sync run, empty job");
    CHECK_CONTAINS(out, "async submit+wait");
    snprintf(cmd, sizeof cmd, "%s bench membw --bytes 16M --passes 2", bin);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "roofline");
    CHECK_CONTAINS(out, "% of the best variant");
    return test_done("cli");
}
