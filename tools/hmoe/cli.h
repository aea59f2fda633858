/* cli.h - shared helpers of the hmoe subcommands. */
#ifndef HMOE_TOOL_CLI_H
#define HMOE_TOOL_CLI_H

#include <stdbool.h>
#include <stddef.h>

int cmd_doctor(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int bench_tokenizer(int argc, char **argv);
int bench_moe(int argc, char **argv);
int bench_e2e(int argc, char **argv);
int bench_cuda(int argc, char **argv);

/* Parses "123", "64K", "512M", "1G", "2GiB" into bytes. false on malformed or overflowing text. */
bool cli_parse_size(const char *s, size_t *out);
/* Parses a decimal int in [lo, hi]. */
bool cli_parse_int(const char *s, long lo, long hi, long *out);
/* strtod of all of s into [lo, hi] */
bool cli_parse_double(const char *s, double lo, double hi, double *out);
/* Parses "1 2 3" or "1,2,3" into a malloc'd array (n >= 1). false on anything else. */
#include <stdint.h>
bool cli_parse_ids(const char *s, int32_t **ids, int *n);
/* Parses "1,4,64" (values in [1, 65536]) into out[0..max); returns the count, -1 if malformed or
 * longer than max. */
int cli_parse_list(const char *s, long *out, int max);
/* A subcommand option's value missing (v NULL) or bad: prints "hmoe: <cmd>: bad value '<v>' for
 * <opt>: expected <expected>" and returns 2 (usage errors). */
int cli_bad_value(const char *cmd, const char *opt, const char *v, const char *expected);
/* 0 when bytes fit in 90% of the memory this process may take (MemAvailable, or the cgroup limit
 * where that is lower, or nothing known); else prints "hmoe: <cmd>: <what> need X GB, more than
 * 90% of the Y GB available" and returns 1. *usable (may be NULL): that 90% in bytes, 0 when
 * unknown. For benchmarks that fill their buffers: past it the kernel's OOM killer ends the
 * process half way instead. */
int cli_check_memory(const char *cmd, const char *what, uint64_t bytes, uint64_t *usable);
/* The weight types bench kernels / bench moe can fill and compute on this CPU, as "F32, F16, ..."
 * into buf (truncated to size). */
void cli_bench_types(char *buf, size_t size);
/* Reads a whole file ("-": standard input) of at most CLI_MAX_INPUT bytes, NUL-terminated (*len
 * without the NUL): a regular file, pipe, FIFO or character device (hm_file_read_all: the open
 * never waits for a FIFO's writer). NULL when it cannot be opened or read, with hm_last_error()
 * naming the file and why. The caller frees. */
#define CLI_MAX_INPUT ((size_t)1 << 30)
char *cli_read_file(const char *path, size_t *len);
/* Prints one line: this process's anonymous resident memory, how much of it is on transparent
 * huge pages and the system's THP mode (benchmarks print it after setting up their weights:
 * streamed weights on 4 KiB pages cost a TLB miss per page). Nothing where Linux does not say. */
void cli_print_huge_pages(const char *indent);
/* One thread's share of a benchmark's read pass (the paired read of "% of read"): the wrapping
 * sum of the lines it read (so the reads happen) and their bytes; one cache line per thread. */
typedef struct cli_read_sink {
    _Alignas(64) uint64_t sum;
    size_t bytes;
} cli_read_sink;
/* The "read GB/s" and "% of read" columns of bench kernels / bench moe, ending the row: ratio[p]
 * (a pass's GB/s over its paired read's) and rsec[p] (the read's seconds, of rbytes) for
 * p < passes, both sorted here, their medians printed; "-" in both when passes or rbytes is 0. */
void cli_print_read_columns(double *ratio, double *rsec, int passes, size_t rbytes);
/* Parses --load auto|mmap|copy into an hm_load_mode value. */
bool cli_parse_load(const char *s, int *out);
/* The model/context options of run, logits and bench e2e: --threads N, --batch N, --ctx N,
 * --no-amx, --load auto|mmap|copy, --kv f32|f16. Returns 1 when argv[*i] is one of them (*i
 * advanced past its value), 0 when it is not, 2 after a usage error was printed. */
#include "hmoe.h"
int cli_ctx_option(int argc, char **argv, int *i, hm_ctx_params *cp, hm_model_params *mp);
/* Prints "hmoe: writing the standard output: <strerror(errno)>" and returns 1. main() checks the
 * final flush of every command's output; commands that stream (run) call it at the first failed
 * flush. */
int cli_stdout_error(void);
/* "12.34 GB", or "5.67 MB" below a GB */
void cli_fmt_bytes(uint64_t bytes, char *buf, size_t cap);
/* Prints "hmoe: <msg>" to stderr, returns 2 (usage errors). */
int cli_usage_error(const char *fmt, ...);

#endif
