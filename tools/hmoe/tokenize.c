/* tokenize.c - `hmoe tokenize` and `hmoe detokenize`: text <-> token ids with any supported
 * vocabulary (GGUF, Hugging Face directory, tiktoken ranks, SentencePiece .model). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hmoe.h"
#include "tokenizer/tokenizer.h"

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL;
    bool special = false, bos = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v)
            model = v, i++;
        else if (!strcmp(a, "--text") && v)
            text = v, i++;
        else if (!strcmp(a, "--file") && v)
            file = v, i++;
        else if (!strcmp(a, "--special"))
            special = true;
        else if (!strcmp(a, "--no-bos"))
            bos = false;
        else
            return cli_usage_error("tokenize: unexpected argument '%s'\nusage: hmoe tokenize -m "
                                   "PATH (--text T | --file F) [--special] [--no-bos]",
                                   a);
    }
    if (!model || (!text == !file))
        return cli_usage_error("usage: hmoe tokenize -m PATH (--text T | --file F) [--special] "
                               "[--no-bos]");
    size_t len = text ? strlen(text) : 0;
    char *owned = NULL;
    if (file) {
        owned = cli_read_file(file, &len);
        if (!owned) {
            fprintf(stderr, "hmoe: --file: %s\n", hm_last_error());
            return 1;
        }
        text = owned;
    }
    hm_tokenizer *tok;
    if (hm_tokenizer_load(model, &tok) != HM_OK) {
        fprintf(stderr, "hmoe: %s\n", hm_last_error());
        free(owned);
        return 1;
    }
    int32_t *ids;
    size_t n;
    unsigned flags = (bos ? HM_TOK_ADD_SPECIAL : 0) | (special ? HM_TOK_PARSE_SPECIAL : 0);
    hm_status st = hm_tokenizer_encode_alloc(tok, text, len, flags, &ids, &n);
    if (st) {
        fprintf(stderr, "hmoe: %s\n", hm_last_error());
    } else {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    }
    free(ids);
    free(owned);
    hm_tokenizer_free(tok);
    return st ? 1 : 0;
}

int cmd_detokenize(int argc, char **argv) {
    const char *model = NULL, *list = NULL;
    unsigned flags = HM_DETOK_SPECIAL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v)
            model = v, i++;
        else if (!strcmp(a, "--ids") && v)
            list = v, i++;
        else if (!strcmp(a, "--no-special"))
            flags &= ~(unsigned)HM_DETOK_SPECIAL;
        else if (!strcmp(a, "--strip-space"))
            flags |= HM_DETOK_STRIP_SPACE;
        else
            return cli_usage_error("detokenize: unexpected argument '%s'", a);
    }
    if (!model || !list)
        return cli_usage_error("usage: hmoe detokenize -m PATH --ids \"1 2 3\" [--no-special] "
                               "[--strip-space]");
    size_t cap = strlen(list) / 2 + 1, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return 1;
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX) {
            free(ids);
            return cli_usage_error("detokenize: bad id near '%.16s'", p);
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    hm_tokenizer *tok;
    if (hm_tokenizer_load(model, &tok) != HM_OK) {
        fprintf(stderr, "hmoe: %s\n", hm_last_error());
        free(ids);
        return 1;
    }
    char *text;
    size_t len;
    hm_status st = hm_tokenizer_decode(tok, ids, n, flags, &text, &len);
    if (st)
        fprintf(stderr, "hmoe: %s\n", hm_last_error());
    else
        fwrite(text, 1, len, stdout);
    free(text);
    free(ids);
    hm_tokenizer_free(tok);
    return st ? 1 : 0;
}
