/* test_cli.c - the hmoe binary end to end: exit codes, usage errors, doctor text and JSON (checked
 * with Python's json module), the benchmarks' output; FIFOs never block, write errors fail,
 * output files never replace a symlink or device, oversized options refused. */
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpu/ops.h"
#include "test.h"

static char out[1 << 16];

/* Runs a shell command; captures stdout+stderr into out; returns the exit code. */
static int run(const char *cmd) {
    char full[1100];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* hmoe with ARGS (a string literal) exits with RC and prints MSG; a failure names the command */
#define CLI_EXPECT(ARGS, RC, MSG)                                                                  \
    do {                                                                                           \
        snprintf(cmd, sizeof cmd, "%s " ARGS, bin);                                                \
        CHECK_MSG(run(cmd) == (RC), "%s: %s", ARGS, out);                                          \
        CHECK_CONTAINS(out, MSG);                                                                  \
    } while (0)

/* FIFOs where hmoe reads (a model, a file of a model directory, a shard an index names, --file)
 * are refused or read without waiting for a writer; every command's standard output going to
 * /dev/full fails it with a message; logits / synth write through a symlink to its target and in
 * place to a device; --penalty-last-n and --repack on are sized against the context / memory.
 * Commands run under timeout: one that blocks fails its check instead of hanging the test. */
static void test_files(const char *bin, const char *fx) {
    char cmd[1024], d[] = "/tmp/hmoe-cli-files-XXXXXX";
    if (!mkdtemp(d)) {
        CHECK(0);
        return;
    }
#define T "timeout 60 "
    /* a tiny synth model with a byte vocabulary (tokenize, detokenize, run -p) */
    snprintf(cmd, sizeof cmd, T "%s synth --preset qwen3-tiny --vocab none --layers 1 -o %s/t.gguf",
             bin, d);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "/t.gguf in ");

    /* make run's model: data/demo-vocab.gguf at its own size (--vocab-size), so run prints text */
    snprintf(cmd, sizeof cmd,
             T "%s synth --preset qwen3-tiny --layers 1 --vocab %s/data/demo-vocab.gguf "
               "--vocab-size 4096 -o %s/demo.gguf && " T "%s info %s/demo.gguf && " T
               "%s run -m %s/demo.gguf -p 'The capital of France is' -n 8 --seed 1 --temp 0.8",
             bin, HMOE_SOURCE_DIR, d, bin, d, bin, d);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "vocab 4096");
    CHECK_CONTAINS(out, "generated 8 tokens");
    CHECK(strstr(out, "printing ids only") == NULL && strstr(out, "[PAD") == NULL);
    /* hmoe profile: every routing decision of the prompts counted (tokens x top-2 of 8 experts),
     * in the file the frequency placement reads */
    snprintf(cmd, sizeof cmd,
             "printf 'The capital of France is\\n\\nHello world\\n' > %s/p.txt && " T
             "%s profile -m %s/demo.gguf --prompts %s/p.txt -n 3 -o %s/counts.txt && cat "
             "%s/counts.txt",
             d, bin, d, d, d, d);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "profile: 2 prompts");
    CHECK_CONTAINS(out, "hmoe-expert-counts 1 1 8");
    {
        const char *nl = strstr(out, "hmoe-expert-counts 1 1 8\n"), *tk = strstr(out, "prompts, ");
        long sum = 0, v, tokens = 0;
        if (tk) tokens = strtol(tk + 9, NULL, 10);
        int used, k = 0;
        for (const char *q = nl ? nl + 25 : ""; sscanf(q, "%ld%n", &v, &used) == 1; q += used, k++)
            sum += v;
        CHECK_MSG(k == 8 && tokens > 6 && sum == 2 * tokens, "%d counts summing to %ld, %ld tokens",
                  k, sum, tokens);
    }
    snprintf(cmd, sizeof cmd, T "%s profile -m %s/demo.gguf --prompts %s/none.txt", bin, d, d);
    CHECK(run(cmd) == 1);
    CHECK_CONTAINS(out, "none.txt");
    snprintf(cmd, sizeof cmd, T "%s run -m %s/demo.gguf -p hi -n 1 --placement hot", bin, d);
    CHECK(run(cmd) == 2);
    CHECK_CONTAINS(out, "bad --placement 'hot'");
    snprintf(cmd, sizeof cmd, T "%s run -m %s/demo.gguf -p hi -n 1 --place 'blk0'", bin, d);
    CHECK(run(cmd) == 2);
    CHECK_CONTAINS(out, "REGEX=cuda|cpu");
    snprintf(cmd, sizeof cmd, T "%s run -m %s/demo.gguf -p hi -n 1 --gpu-dtype fp8", bin, d);
    CHECK(run(cmd) == 2);
    CHECK_CONTAINS(out, "bad --gpu-dtype 'fp8' (native|bf16)");
    /* without a GPU the option changes nothing */
    snprintf(cmd, sizeof cmd, T "%s run -m %s/demo.gguf -p hi -n 1 --gpu-dtype bf16 --threads 2",
             bin, d);
    CHECK(run(cmd) == 0);
    snprintf(cmd, sizeof cmd,
             T "%s synth --preset qwen3-tiny --vocab %s/data/demo-vocab.gguf --vocab-size 1000 "
               "-o %s/small.gguf",
             bin, HMOE_SOURCE_DIR, d);
    CHECK_MSG(run(cmd) != 0, "%s", out);
    CHECK_CONTAINS(out, "has 4096 tokens but the model's vocabulary is 1000");

    /* FIFOs */
    snprintf(cmd, sizeof cmd,
             "mkfifo %s/fifo && mkdir %s/hf %s/sh && cp %s/config.json %s/hf/ && "
             "mkfifo %s/hf/model.safetensors && cp %s/config.json %s/sh/ && mkfifo %s/sh/s1 && "
             "echo '{\"weight_map\": {\"lm_head.weight\": \"s1\"}}' > "
             "%s/sh/model.safetensors.index.json",
             d, d, d, fx, d, d, fx, d, d, d);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    snprintf(cmd, sizeof cmd, T "%s run -m %s/fifo --ids 1", bin, d);
    CHECK_MSG(run(cmd) == 1, "%s", out);
    CHECK_CONTAINS(out, "/fifo: not a model (a .gguf file or a Hugging Face directory): not a "
                        "regular file or directory");
    snprintf(cmd, sizeof cmd, T "%s run -m %s/hf --ids 1", bin, d);
    CHECK_MSG(run(cmd) == 1, "%s", out);
    CHECK_CONTAINS(out, "/hf/model.safetensors: not a regular file (a FIFO)");
    snprintf(cmd, sizeof cmd, T "%s run -m %s/sh --ids 1", bin, d);
    CHECK_MSG(run(cmd) == 1, "%s", out);
    CHECK_CONTAINS(out, "/sh/s1: not a regular file (a FIFO)");
    snprintf(cmd, sizeof cmd, T "%s info %s/fifo", bin, d);
    CHECK_MSG(run(cmd) == 1, "%s", out);
    CHECK_CONTAINS(out, "/fifo: not a regular file or directory");
    snprintf(cmd, sizeof cmd, T "%s tokenize -m %s/fifo --text x", bin, d);
    CHECK_MSG(run(cmd) == 1, "%s", out);
    CHECK_CONTAINS(out, "/fifo: not a regular file (a FIFO)");
    /* --file: a FIFO is a stream, read as it is (no writer: empty) */
    snprintf(cmd, sizeof cmd, T "%s tokenize -m %s/t.gguf --file %s/fifo --no-bos", bin, d, d);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    snprintf(cmd, sizeof cmd, "echo hi | " T "%s tokenize -m %s/t.gguf --file /dev/stdin --no-bos",
             bin, d);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "104 105 10");

    /* standard output on /dev/full: exit 1, saying so */
    static const char *const cmds[] = {
        "version",
        "info %s/t.gguf",
        "info %s/t.gguf --json",
        "tokenize -m %s/t.gguf --text hello",
        "detokenize -m %s/t.gguf --ids 104,105",
        "run -m %s/t.gguf -p hi -n 2 --threads 2",
        "run -m %s/t.gguf --ids 1 -n 2 --threads 2 --print-ids",
        "template --template /dev/stdin --messages [] <<< 'x'",
        "bench pool --iters 300 --threads 2",
        "synth --list",
        "synth --preset qwen3-tiny --plan",
        "convert " HMOE_SOURCE_DIR "/tests/data/qwen3moe/a --dry-run",
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, cmds[i], d);
        snprintf(cmd, sizeof cmd, "bash -c \"" T "%s %s >/dev/full\"", bin, args);
        CHECK_MSG(run(cmd) == 1, "%s: %s", args, out);
        CHECK_CONTAINS(out, "hmoe: writing the standard output: No space left on device");
    }

    /* output files: through a symlink to its target (the link kept), in place to devices, a
     * FIFO with no reader refused at once */
    snprintf(cmd, sizeof cmd, "echo old > %s/target.f32 && ln -s target.f32 %s/link.f32", d, d);
    CHECK(run(cmd) == 0);
    snprintf(cmd, sizeof cmd, T "%s logits -m %s --ids \"1 2\" --out %s/link.f32", bin, fx, d);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "/target.f32 (through the symlink ");
    char p[512];
    struct stat sb;
    snprintf(p, sizeof p, "%s/link.f32", d);
    CHECK(lstat(p, &sb) == 0 && S_ISLNK(sb.st_mode));
    snprintf(p, sizeof p, "%s/target.f32", d);
    CHECK(stat(p, &sb) == 0 && sb.st_size == 2 * 512 * 4);
    snprintf(cmd, sizeof cmd, T "%s logits -m %s --ids \"1 2\" --out /dev/null", bin, fx);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "to /dev/null (a character device, written in place)");
    snprintf(cmd, sizeof cmd, T "%s logits -m %s --ids \"1 2\" --out /dev/full", bin, fx);
    CHECK_MSG(run(cmd) == 1, "%s", out);
    CHECK_CONTAINS(out, "/dev/full");
    CHECK_CONTAINS(out, "No space left on device");
    CHECK(stat("/dev/full", &sb) == 0 && S_ISCHR(sb.st_mode)); /* not replaced, even as root */
    snprintf(cmd, sizeof cmd, T "%s logits -m %s --ids 1 --out %s/fifo", bin, fx, d);
    CHECK_MSG(run(cmd) == 1, "%s", out);
    CHECK_CONTAINS(out, "/fifo: a FIFO with no reader");
    snprintf(cmd, sizeof cmd, "ln -s t.gguf %s/t-link.gguf", d);
    CHECK(run(cmd) == 0);
    snprintf(cmd, sizeof cmd,
             T "%s synth --preset qwen3-tiny --vocab none --layers 1 -o %s/t-link.gguf", bin, d);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "/t.gguf (through the symlink ");
    snprintf(p, sizeof p, "%s/t-link.gguf", d);
    CHECK(lstat(p, &sb) == 0 && S_ISLNK(sb.st_mode));

    /* a penalty window of 2^30 tokens costs what the context holds */
    snprintf(cmd, sizeof cmd,
             T "%s run -m %s --ids \"14 408 419 163 17 83 24\" -n 8 --threads 2 "
               "--repeat-penalty 1.0001 --penalty-last-n 1073741824",
             bin, fx);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "ids: ");

    /* --repack on where the int8 copy does not fit (a fake MemAvailable of 1 MB): refused with
     * the numbers before anything is copied; nothing to copy without an int8 matmul */
    snprintf(cmd, sizeof cmd,
             "printf 'MemTotal: 1000 kB\\nMemAvailable: 1000 kB\\n' > %s/meminfo && "
             "HMOE_MEMINFO=%s/meminfo " T "%s run -m %s/t.gguf --ids 1 -n 1 --repack on",
             d, d, bin, d);
    const hm_cpu_ops *ops;
    if (hm_cpu_ops_get(&ops) == HM_OK && hm_i8_matmul_ok(ops)) {
        CHECK_MSG(run(cmd) == 1, "%s", out);
        CHECK_CONTAINS(out, "--repack on: the int8 copy of the weights needs ");
        CHECK_CONTAINS(out, " MB, more than the 1.02 MB of memory available");
    } else {
        CHECK_MSG(run(cmd) == 0, "%s", out);
    }
#undef T
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    CHECK(system(cmd) == 0);
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
    CHECK_CONTAINS(out,
                   "bench pool: bad value '-3' for --threads: expected a thread count 1..4096");

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
    /* the kernel and expert-engine benchmarks at toy sizes: they validate and report */
    snprintf(cmd, sizeof cmd,
             "%s bench kernels --type q4_k --rows 64 --cols 256 --tokens 1,64 --threads 2 "
             "--bytes 8M --repack",
             bin);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "roofline");
    CHECK_CONTAINS(out, "validation: max |");
    CHECK_CONTAINS(out, "GOP/s");
    /* the matmul rows' roofline: the ISA peak; only the ref variant has none */
    if (strstr(out, "kernel variant ref,"))
        CHECK_CONTAINS(out, "roofline (> 4 tokens): no ISA peak for the ref variant");
    else
        CHECK_CONTAINS(out, "roofline (> 4 tokens): same-run ISA peak ");
    CHECK_CONTAINS(out, "% of peak");
    CHECK(!strstr(out, "FAILED"));
    /* a type it has no kernel for: usage error naming the types it has */
    snprintf(cmd, sizeof cmd, "%s bench kernels --type q9_z", bin);
    CHECK(run(cmd) == 2);
    CHECK_CONTAINS(out, "no kernel for type 'q9_z' (types: F32, ");
    CHECK_CONTAINS(out, ", Q4_K, ");
    snprintf(cmd, sizeof cmd,
             "%s bench moe --preset qwen3-tiny --type q4_k --layers 2 --tokens 1,64 --threads 2 "
             "--repack --skew 1",
             bin);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "roofline: same-run streaming read");
    CHECK_CONTAINS(out, "empty submit -> wait");
    CHECK_CONTAINS(out, "tokens/s");
    CHECK_CONTAINS(out, "routing (skew 1.00)");
    /* NUMA slices (2 emulated groups of the threads, weights copied) */
    snprintf(cmd, sizeof cmd,
             "%s bench moe --preset qwen3-tiny --type q8_0 --layers 2 --tokens 1,64 --threads 2 "
             "--nodes 2 --slice-copy",
             bin);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "numa: 2 groups");
    CHECK_CONTAINS(out, "tokens/s");
    /* more slices than threads: refused at once, saying why */
    snprintf(cmd, sizeof cmd, "%s bench moe --preset qwen3-tiny --threads 2 --nodes 3", bin);
    CHECK(run(cmd) == 1);
    CHECK_CONTAINS(out, "--nodes 3 needs at least as many threads (the pool has 2)");
    /* bad values say which option, what was given and what it takes; unknown names list the
     * known ones; all before anything is measured */
    CLI_EXPECT("bench moe --preset qwen3-tiny --tokens 1,0,4", 2,
               "bench moe: bad value '1,0,4' for --tokens: expected 1 to 16 token counts");
    CHECK(!strstr(out, "roofline"));
    CLI_EXPECT("bench moe --preset qwen3-tiny --layers", 2,
               "bench moe: --layers needs a value: a layer count 1..512");
    CLI_EXPECT("bench moe --preset qwen3-tiny --skew 9", 2,
               "bad value '9' for --skew: expected a Zipf exponent 0..8");
    CLI_EXPECT("bench moe --preset qwen3-tiny --fast", 2,
               "bench moe: unknown option '--fast' (--preset P");
    CLI_EXPECT("bench moe --preset qwen4", 2, "no MoE preset 'qwen4' (presets: qwen3-30b-a3b, ");
    CHECK_CONTAINS(out, ", deepseek-v3, ");
    CLI_EXPECT("bench moe --preset qwen3-tiny --type q9_z", 2,
               "bench moe: no kernel for type 'q9_z' (types: F32, ");
    /* more than the machine holds (512 layers of DeepSeek-V3 at Q4_K: 3.2 TB): refused before
     * anything is allocated, with the layer count that fits */
    CLI_EXPECT("bench moe --preset deepseek-v3 --layers 512 --repack", 1,
               "bench moe: 512 layers of q4_k experts with their repacked copy need ");
    CHECK_CONTAINS(out, " GB available");
    /* one layer with its copy takes ~18 GB: machines with less free say that instead */
    CHECK_MSG(strstr(out, "would fit") || strstr(out, "not even one layer fits"),
              "no layer count in: %s", out);
    CHECK(!strstr(out, "roofline"));
    /* the other benchmarks' options; 17 token counts are refused, not cut to 16 */
    CLI_EXPECT("bench kernels --tokens 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", 2,
               "bench kernels: bad value '1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17' for --tokens");
    CLI_EXPECT("bench kernels --rows 0", 2,
               "bad value '0' for --rows: expected a count 1..1048576");
    CLI_EXPECT("bench kernels --job-bytes 0", 2, "bad value '0' for --job-bytes: expected a size");
    /* passes as layer-sized jobs: 8 MiB of 64 x 256 Q4_K matrices (9 KiB each: 911) in jobs of 8 */
    CLI_EXPECT("bench kernels --type q4_k --rows 64 --cols 256 --tokens 1,4 --threads 2 --bytes 8M "
               "--job-bytes 64K --no-sweep",
               0,
               "jobs (up to 4 tokens): each pass, and its paired read, as 114 jobs of 8 matrices");
    CHECK_CONTAINS(out, "validation: max |");
    CHECK(!strstr(out, "FAILED"));
    CLI_EXPECT("bench kernels --bytes 1000T --no-sweep", 1,
               "bench kernels: the matrices (--bytes) need ");
    CLI_EXPECT("bench membw --passes 0", 2,
               "bench membw: bad value '0' for --passes: expected a pass count 1..1000");
    CLI_EXPECT("bench pool --iters 10", 2, "bench pool: bad value '10' for --iters");

    /* run / logits / bench e2e on a transformers fixture (tests/data/qwen3moe/a) */
    const char *fx = HMOE_SOURCE_DIR "/tests/data/qwen3moe/a";
    /* prompt 1 of expected.json and the first 8 tokens of its greedy continuation */
    snprintf(cmd, sizeof cmd, "%s run -m %s --ids \"14 408 419 163 17 83 24\" -n 8 --threads 2",
             bin, fx);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "ids: 414 414 467 10 5 367 367 367");
    CHECK_CONTAINS(out, "printing ids only"); /* the fixture has no tokenizer */
    CHECK_CONTAINS(out, "tok/s");
    /* the experts in 2 emulated NUMA slices: the same greedy ids */
    snprintf(cmd, sizeof cmd,
             "%s run -m %s --ids \"14 408 419 163 17 83 24\" -n 8 --threads 2 --numa 2 "
             "--numa-copy on",
             bin, fx);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "ids: 414 414 467 10 5 367 367 367");
    /* on a (fake) two-node machine the default is one slice per node, each node a share of the
     * threads: the same greedy ids */
    if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) {
        char root[] = "/tmp/hmoe_cli_numa_XXXXXX";
        fake_numa_sysfs(root);
        snprintf(cmd, sizeof cmd,
                 "HMOE_SYSFS_ROOT=%s HMOE_LOG=info %s run -m %s --ids \"14 408 419 163 17 83 24\" "
                 "-n 8 --threads 2",
                 root, bin, fx);
        CHECK_MSG(run(cmd) == 0, "%s", out);
        CHECK_CONTAINS(out, "NUMA: routed experts in 2 slices (one per node)");
        CHECK_CONTAINS(out, "ids: 414 414 467 10 5 367 367 367");
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
        CHECK(system(cmd) == 0);
    }
    snprintf(cmd, sizeof cmd, "%s run -m %s --ids \"1\" --numa 1", bin, fx);
    CHECK(run(cmd) == 2);
    CHECK_CONTAINS(out, "bad --numa '1'");
    snprintf(cmd, sizeof cmd,
             "%s run -m %s --ids \"1 2\" -n 4 --temp 0.9 --top-k 20 --top-p 0.9 --min-p 0.01 "
             "--repeat-penalty 1.1 --seed 7 --threads 2",
             bin, fx);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    char first[256];
    snprintf(first, sizeof first, "%s", strstr(out, "ids:") ? strstr(out, "ids:") : "");
    if (strchr(first, '\n')) *strchr(first, '\n') = 0;
    CHECK(run(cmd) == 0);
    CHECK_CONTAINS(out, first); /* same seed, same ids */
    snprintf(cmd, sizeof cmd, "%s run -m %s --ids \"1 999\" -n 4", bin, fx);
    CHECK(run(cmd) == 1);
    CHECK_CONTAINS(out, "outside the vocabulary");
    snprintf(cmd, sizeof cmd, "%s run -m %s --ids \"1 2 3\" -n 300", bin, fx);
    CHECK(run(cmd) == 1);
    CHECK_CONTAINS(out, "do not fit in the context");
    snprintf(cmd, sizeof cmd, "%s run -m %s --ids \"1 2 3\" -n 4 --ctx 5", bin, fx);
    CHECK(run(cmd) == 1);
    CHECK_CONTAINS(out, "do not fit in the context");
    snprintf(cmd, sizeof cmd, "%s run -m %s -p \"hello\"", bin, fx);
    CHECK(run(cmd) == 1);
    CHECK_CONTAINS(out, "tokenizer");
    snprintf(cmd, sizeof cmd, "%s run -m %s --ids \"1 x\"", bin, fx);
    CHECK(run(cmd) == 2);
    snprintf(cmd, sizeof cmd, "%s run -m %s --ids \"1\" --temp -1", bin, fx);
    CHECK(run(cmd) == 1);
    CHECK_CONTAINS(out, "temperature");
    snprintf(cmd, sizeof cmd, "%s run -m /nonexistent/model --ids 1", bin);
    CHECK(run(cmd) == 1);
    CHECK_CONTAINS(out, "/nonexistent/model");
    snprintf(cmd, sizeof cmd, "%s run --ids 1", bin);
    CHECK(run(cmd) == 2);

    /* --chat: the model's template around a user turn (a synth model with the real Qwen2
     * vocabulary and its template from ../shared; skipped without it) */
    const char *qv =
        HMOE_SOURCE_DIR "/../shared/testdata/tokenizers/gguf-mainline/ggml-vocab-qwen2.gguf";
    if (access(qv, R_OK) == 0) {
        snprintf(
            cmd, sizeof cmd,
            "%s synth --preset qwen3-tiny --vocab %s -o /tmp/hmoe-cli-chat.gguf >/dev/null 2>&1 && "
            "HMOE_LOG=debug %s run -m /tmp/hmoe-cli-chat.gguf -p \"Hi\" --system \"Be brief.\" "
            "--no-think -n 2 --threads 2",
            bin, qv, bin);
        CHECK_MSG(run(cmd) == 0, "%s", out);
        CHECK_CONTAINS(out, "<|im_start|>system\nBe brief.<|im_end|>");
        CHECK_CONTAINS(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
        unlink("/tmp/hmoe-cli-chat.gguf");
    }

    char tmpl[] = "/tmp/hmoe-cli-XXXXXX", lpath[256];
    CHECK(mkdtemp(tmpl) != NULL);
    snprintf(lpath, sizeof lpath, "%s/l.f32", tmpl);
    snprintf(cmd, sizeof cmd, "%s logits -m %s --ids \"14 408 419 163 17 83 24\" --out %s", bin, fx,
             lpath);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    size_t got_len = 0, want_len = 0;
    char *got = test_read_file(lpath, &got_len);
    char *want = test_read_file(HMOE_SOURCE_DIR "/tests/data/qwen3moe/a/logits_1.f32", &want_len);
    CHECK(got && want && got_len == 7 * 512 * 4 && want_len == got_len);
    if (got && want && got_len == want_len) {
        const float *g = (const float *)got, *w = (const float *)want;
        float md = 0, mx = 0;
        for (size_t i = 0; i < got_len / 4; i++) {
            md = fmaxf(md, fabsf(g[i] - w[i]));
            mx = fmaxf(mx, fabsf(w[i]));
        }
        CHECK_MSG(md <= 1e-3f * mx, "logits differ by %g (max %g)", md, mx);
    }
    free(got), free(want);
    snprintf(cmd, sizeof cmd, "%s logits -m %s --ids \"1 2\" --out /nonexistent-dir/x.f32", bin,
             fx);
    CHECK(run(cmd) == 1);
    CHECK_CONTAINS(out, "nonexistent-dir");
    unlink(lpath);
    rmdir(tmpl);
    test_files(bin, fx);

    snprintf(cmd, sizeof cmd, "%s bench e2e -m %s -p 16 -n 4 --threads 2", bin, fx);
    CHECK_MSG(run(cmd) == 0, "%s", out);
    CHECK_CONTAINS(out, "decode reads per token");
    CHECK_CONTAINS(out, "roofline");
    CHECK_CONTAINS(out, "% of the same-run read bandwidth");
    CHECK_CONTAINS(out, "roofline after the runs");
    CHECK_CONTAINS(out, "decode pool: ");
    return test_done("cli");
}
