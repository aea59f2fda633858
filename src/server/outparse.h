/* outparse.h - splits a chat model's generated text, as it streams, into the answer, the
 * reasoning ("thinking") and tool calls, in the format the model's chat template teaches it:
 *
 *   hermes    Qwen2.5/Qwen3 and others: <think>...</think>, <tool_call>{"name": N,
 *             "arguments": {...}}</tool_call>
 *   glm       GLM-4.5/4.6: <think>...</think>, <tool_call>N\n<arg_key>K</arg_key>
 *             <arg_value>V</arg_value>...</tool_call>
 *   deepseek  DeepSeek-V3/V3.1/R1: <think>...</think>, <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>
 *             N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>... (V3/R1: "function<｜tool▁sep｜>N\n```json
 *             {...}```")
 *   harmony   gpt-oss: <|channel|>analysis<|message|>...<|end|> is reasoning, the final channel
 *             the answer, <|channel|>commentary to=functions.N ...<|message|>{...}<|call|> a call
 *
 * Text that may be the beginning of a marker is held back until the next piece decides it. A
 * tool call whose body does not parse comes out as content, as it was written. */
#ifndef HM_SERVER_OUTPARSE_H
#define HM_SERVER_OUTPARSE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum hm_outfmt {
    HM_OUT_PLAIN = 0, /* everything is content */
    HM_OUT_HERMES,
    HM_OUT_GLM,
    HM_OUT_DEEPSEEK,
    HM_OUT_HARMONY,
} hm_outfmt;

/* The format a chat template's text teaches (HM_OUT_PLAIN when none is recognised). */
hm_outfmt hm_outfmt_detect(const char *template_text);
const char *hm_outfmt_name(hm_outfmt f);
/* Whether generation in this format carries its markers as special tokens (their text must be
 * rendered by the detokenizer). */
bool hm_outfmt_needs_special(hm_outfmt f);

typedef enum hm_outkind { HM_OUTK_CONTENT, HM_OUTK_REASONING, HM_OUTK_TOOL } hm_outkind;

/* text: content or reasoning; HM_OUTK_TOOL: name and args (a JSON object as text) */
typedef void (*hm_out_fn)(void *user, hm_outkind kind, const char *text, size_t len,
                          const char *name, const char *args);

typedef struct hm_outparse hm_outparse;

/* prompt_tail: the end of the rendered prompt; a prompt that ends inside an open <think> starts
 * the output as reasoning. */
hm_outparse *hm_outparse_new(hm_outfmt fmt, const char *prompt_tail);
void hm_outparse_free(hm_outparse *p);
/* Feeds text; final: the generation ended (everything held back comes out). */
void hm_outparse_feed(hm_outparse *p, const char *text, size_t len, bool final, hm_out_fn fn,
                      void *user);
int hm_outparse_n_tools(const hm_outparse *p); /* tool calls emitted so far */

#endif
