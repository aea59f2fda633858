/* main.c - the hmoe command: dispatches to subcommands. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "hmoe.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "hmoe %s - Mixture-of-Experts inference with experts on the CPU\n"
        "\n"
        "usage: hmoe <command> [options]\n"
        "\n"
        "commands:\n"
        "  doctor [--json] [--no-bandwidth] [--bw-bytes SIZE] [--require-gpu]\n"
        "        what this machine offers: CPU, ISA and kernel variant, cores, NUMA, memory,\n"
        "        measured read bandwidth, GPUs; exits 1 when something required is missing\n"
        "  bench pool  [--threads N] [--iters N] [--spin-us N]\n"
        "        thread-pool dispatch+join latency of an empty job\n"
        "  bench membw [--bytes SIZE] [--passes N] [--threads N]\n"
        "        streaming read bandwidth of every kernel variant this CPU runs\n"
        "  info PATH [--tensors] [--json]\n"
        "        architecture, parameters, bytes by category and memory per placement of a GGUF\n"
        "        file or a Hugging Face directory (config.json + *.safetensors)\n"
        "  synth --preset NAME -o FILE [--layers N] [--experts N] [--experts-type T]\n"
        "        [--dense-type T] [--seed S] [--vocab FILE|none] [--threads N] [--plan] [--list]\n"
        "        a GGUF with a real model's exact tensors and metadata and RANDOM weights\n"
        "  convert HF_DIR -o OUT.gguf [--type T] [--experts-type T] [--threads N] [--name S]\n"
        "        [--dry-run]\n"
        "        a Hugging Face model (config.json + *.safetensors) as a llama.cpp GGUF\n"
        "  tokenize -m PATH (--text T | --file F) [--special] [--no-bos]\n"
        "        token ids of a text (PATH: GGUF, HF directory, tiktoken or SentencePiece file)\n"
        "  detokenize -m PATH --ids \"1 2 3\" [--no-special] [--strip-space]\n"
        "        the exact text of token ids\n"
        "  template (-m PATH | --template FILE) --messages JSON [--add-generation-prompt]\n"
        "        [--tools JSON] [--kwargs JSON] [--bos-token S] [--eos-token S]\n"
        "        render a chat template exactly as transformers' apply_chat_template\n"
        "  run -m MODEL (-p TEXT | --ids \"1 2 3\") [-n N] [--temp T] [--top-k K] [--top-p P]\n"
        "        [--min-p P] [--repeat-penalty R] [--seed S] [--threads N] [--print-ids]\n"
        "        generate text (--device cuda: on the GPU, with the routed experts that do not\n"
        "        fit on the CPU) and print prompt and generation speed (run --help)\n"
        "  serve -m MODEL [--host A] [--port N] [--api-key K] [--parallel N] [--ctx N]\n"
        "        an OpenAI-compatible HTTP server: chat and text completions, streaming, tools,\n"
        "        /v1/models, /health, /metrics (serve --help)\n"
        "  chat -m MODEL [--system TEXT] [--temp T] [-n N]\n"
        "        multi-turn chat in the terminal through the model's chat template\n"
        "  logits -m MODEL --ids \"1 2 3\" --out FILE [--threads N] [--batch N] [--no-amx]\n"
        "        logits of every position as little-endian float32 [n_ids x vocab]\n"
        "  profile -m MODEL --prompts FILE [-o COUNTS] [-n N]\n"
        "        how often each routed expert is chosen: the counts --placement frequency reads\n"
        "  version\n"
        "\n"
        "environment: HMOE_LOG=debug|info|warn|error  HMOE_ISA=ref|avx2|avx512|amx\n"
        "             HMOE_SPIN_US=<microseconds workers spin before sleeping>\n",
        hm_version());
}

/* Flushes and closes standard output: a write error (a full disk, /dev/full, a file size limit)
 * turns a success into exit status 1 with a message, instead of a success with cut output (a
 * command that failed already said why: its status stays). */
static int finish_stdout(int rc) {
    errno = 0;
    bool bad = fflush(stdout) != 0 || ferror(stdout);
    if (fclose(stdout) != 0) bad = true;
    if (!bad || rc) return rc;
    return cli_stdout_error();
}

static int dispatch(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "doctor")) return cmd_doctor(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(cmd, "convert")) return cmd_convert(argc - 1, argv + 1);
    if (!strcmp(cmd, "template")) return cmd_template(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "detokenize")) return cmd_detokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc - 1, argv + 1);
    if (!strcmp(cmd, "profile")) return cmd_profile(argc - 1, argv + 1);
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat")) return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("hmoe %s\n", hm_version());
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    usage(stderr);
    return cli_usage_error("unknown command '%s'", cmd);
}

int main(int argc, char **argv) {
    return finish_stdout(dispatch(argc, argv));
}
