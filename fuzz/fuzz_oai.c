/* fuzz_oai.c - libFuzzer target for what a client's request and a model's output can hold: any
 * bytes as the body of /v1/chat/completions and /v1/completions (hm_oai_parse: read or refused
 * with the field's name), as model output through the splitter of every tool-call format (fed
 * whole and in two pieces: the same result), and through the JSON prefix recognizer; never crash
 * or hang. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jsonp.h"
#include "server/oai.h"
#include "server/outparse.h"

typedef struct acc {
    size_t content, reasoning, tools;
} acc;

static void on_out(void *user, hm_outkind k, const char *text, size_t len, const char *name,
                   const char *args) {
    acc *a = user;
    if (k == HM_OUTK_TOOL)
        a->tools += strlen(name) + strlen(args);
    else if (k == HM_OUTK_REASONING)
        a->reasoning += len;
    else
        a->content += len;
    (void)text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    for (int k = 0; k < 2; k++) {
        hm_oai_req r;
        if (hm_oai_parse(s, size, k ? HM_OAI_COMPLETION : HM_OAI_CHAT, &r) == HM_OK)
            hm_oai_req_free(&r);
    }
    const size_t cut = size ? data[0] % (size + 1) : 0;
    for (int f = HM_OUT_PLAIN; f <= HM_OUT_HARMONY; f++) {
        acc whole = {0, 0, 0}, split = {0, 0, 0};
        hm_outparse *p = hm_outparse_new((hm_outfmt)f, "<think>\n");
        hm_outparse *q = hm_outparse_new((hm_outfmt)f, "<think>\n");
        if (!p || !q) abort();
        hm_outparse_feed(p, s, size, true, on_out, &whole);
        hm_outparse_feed(q, s, cut, false, on_out, &split);
        hm_outparse_feed(q, s + cut, size - cut, true, on_out, &split);
        /* text is never lost or invented by where a piece ends (whitespace at run edges aside) */
        if (whole.tools != split.tools) abort();
        hm_outparse_free(p), hm_outparse_free(q);
    }
    hm_jsonp j;
    hm_jsonp_init(&j, size && (data[0] & 1));
    (void)hm_jsonp_feed(&j, s, size);
    return 0;
}
