/* cli.h - shared helpers of the hmoe subcommands. */
#ifndef HMOE_TOOL_CLI_H
#define HMOE_TOOL_CLI_H

#include <stdbool.h>
#include <stddef.h>

int cmd_doctor(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int bench_tokenizer(int argc, char **argv);
int bench_moe(int argc, char **argv);

/* Parses "123", "64K", "512M", "1G", "2GiB" into bytes. false on malformed or overflowing text. */
bool cli_parse_size(const char *s, size_t *out);
/* Parses a decimal int in [lo, hi]. */
bool cli_parse_int(const char *s, long lo, long hi, long *out);
/* Prints "hmoe: <msg>" to stderr, returns 2 (usage errors). */
int cli_usage_error(const char *fmt, ...);

#endif
