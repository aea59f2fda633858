/* fuzz_jinja.c - libFuzzer target: any bytes as a Jinja template must parse and render (with a
 * small chat context and tight limits) or fail with a message; never crash, hang or leak. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "template/jinja.h"

static const char k_ctx[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", "
    "\"content\": "
    "\"hi \\u00e9\"}, {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"r\", "
    "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": "
    "{\"a\": 1, \"b\": [1.5, null, true]}}}]}, {\"role\": \"tool\", \"content\": \"42\"}], "
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}], "
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", "
    "\"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static json_t *ctx;
    if (!ctx) ctx = json_loads(k_ctx, 0, NULL);
    hm_jinja *tpl = NULL;
    if (hm_jinja_parse((const char *)data, size, "fuzz", &tpl) != HM_OK) return 0;
    hm_jinja_params p = hm_jinja_default_params();
    p.max_output = 1 << 20;
    p.max_memory = 64 << 20;
    p.max_steps = 200000;
    p.max_depth = 32;
    p.now = 1700000000;
    char *out = NULL;
    if (hm_jinja_render(tpl, ctx, &p, &out, NULL) == HM_OK) free(out);
    hm_jinja_free(tpl);
    return 0;
}
