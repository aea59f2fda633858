/* jinja.h - Jinja chat-template interpreter, byte-exact against transformers' jinja2 environment
 * (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, {% generation %}).
 *
 * Usage:
 *
 *     hm_jinja *tpl;
 *     if (hm_jinja_parse(src, strlen(src), "chat_template", &tpl) != HM_OK)
 *         fprintf(stderr, "%s\n", hm_last_error());          // "chat_template:3:14: ..."
 *     char *out; size_t len;
 *     hm_status st = hm_chat_template_apply(tpl, messages, NULL, true, NULL, "<s>", "</s>", NULL,
 *                                           &out, &len);
 *     ... use out[0..len) (NUL-terminated as well) ...
 *     free(out);
 *     hm_jinja_free(tpl);
 *
 * Ownership and threads: a parsed template is immutable; any number of threads may render it at
 * once (each render has its own arena and error state). The template copies what it needs from
 * src, so src may be freed after hm_jinja_parse. JSON inputs are only read (never kept or
 * modified). Rendered text is malloc'd and belongs to the caller (free()); on failure *out is
 * NULL, the status is returned and hm_last_error() names the template, line:column and cause -
 * raise_exception('msg') in a template fails with "raise_exception: msg".
 *
 * Design, supported syntax and limits: docs/templates.md. */
#ifndef HM_TEMPLATE_JINJA_H
#define HM_TEMPLATE_JINJA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "core/status.h"

typedef struct hm_jinja hm_jinja;

/* Render limits. A template exceeding one fails with HM_ERR_UNSUPPORTED naming the limit. */
typedef struct hm_jinja_params {
    size_t max_output; /* bytes of rendered text (default 64 MiB) */
    size_t max_memory; /* bytes of working memory of one render (default 512 MiB) */
    /* work: AST nodes evaluated + loop iterations + items walked by filters + bytes / 16 scanned
     * or built (default 10M: a 2000-message chat takes under 1M, the limit about 0.3 s) */
    uint64_t max_steps;
    int max_depth; /* nested macro/caller calls (default 64) */
    /* strftime_now(): the local time at which "now" is; 0 = the real clock. Defaults to the value
     * of HMOE_TEMPLATE_NOW ("YYYY-MM-DD" or "YYYY-MM-DDTHH:MM:SS", local time) when set. */
    time_t now;
} hm_jinja_params;

hm_jinja_params hm_jinja_default_params(void);

/* Parses src[0..len) (UTF-8; need not be NUL-terminated). name is used in error messages
 * (copied). Syntax errors fail with HM_ERR_FORMAT and "name:line:col: message". */
hm_status hm_jinja_parse(const char *src, size_t len, const char *name, hm_jinja **out);
void hm_jinja_free(hm_jinja *tpl); /* NULL is a no-op */
const char *hm_jinja_name(const hm_jinja *tpl);

/* Renders with the keys of ctx (a JSON object, may be NULL) as top-level variables. params may be
 * NULL (defaults). Runtime errors fail with HM_ERR_FORMAT ("name:line:col: message"); limits with
 * HM_ERR_UNSUPPORTED; out of memory with HM_ERR_NO_MEMORY. *out_len may be NULL. */
hm_status hm_jinja_render(const hm_jinja *tpl, const json_t *ctx, const hm_jinja_params *params,
                          char **out, size_t *out_len);

/* Builds the context transformers' apply_chat_template builds and renders it:
 *   messages      - keys whose value is null are dropped; reasoning_content / thinking /
 *                   reasoning are aliased as transformers does
 *   tools         - the array, or None when tools is NULL (defined, and none)
 *   documents     - None
 *   add_generation_prompt, bos_token / eos_token (absent when NULL), then every key of kwargs
 *   (which win over the tokens, as in transformers). */
hm_status hm_chat_template_apply(const hm_jinja *tpl, const json_t *messages, const json_t *tools,
                                 bool add_generation_prompt, const json_t *kwargs,
                                 const char *bos_token, const char *eos_token,
                                 const hm_jinja_params *params, char **out, size_t *out_len);

/* A model's chat template and special tokens, from a GGUF file (tokenizer.chat_template,
 * tokenizer.ggml.{bos,eos}_token_id + tokenizer.ggml.tokens) or a Hugging Face directory
 * (tokenizer_config.json "chat_template" - a string, or a list of {name, template} of which
 * "default" is used - else chat_template.jinja; bos_token / eos_token as strings or
 * {"content": ...}). Pass template_text and template_len to hm_jinja_parse: a template may hold
 * NUL bytes, which jinja2 keeps as text. All strings are malloc'd, owned by the struct; bos/eos are
 * NULL when the model has none. Free with hm_chat_template_source_free. */
typedef struct hm_chat_template_source {
    char *template_text; /* template_len bytes (may hold NUL bytes), NUL-terminated as well */
    size_t template_len;
    char *bos_token;
    char *eos_token;
    char *origin; /* "path:field" the template came from, for messages */
} hm_chat_template_source;

hm_status hm_chat_template_load(const char *path, hm_chat_template_source *out);
void hm_chat_template_source_free(hm_chat_template_source *s);

#endif
