/* oai.h - OpenAI API requests: the JSON body of /v1/chat/completions and /v1/completions read
 * and checked into one struct, with OpenAI's ranges and defaults. A bad field fails with the
 * field's name (for the error's "param") and what was wrong; unknown fields are ignored, as
 * OpenAI-compatible servers do. */
#ifndef HM_SERVER_OAI_H
#define HM_SERVER_OAI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "hmoe.h"

#define HM_OAI_MAX_STOP 16

typedef enum hm_oai_kind { HM_OAI_CHAT, HM_OAI_COMPLETION } hm_oai_kind;

typedef struct hm_oai_req {
    hm_oai_kind kind;
    char *model; /* NULL when not given */
    /* chat: the messages as the chat template reads them (text parts joined, tool-call
     * arguments given as JSON strings parsed into objects) */
    json_t *messages;
    json_t *tools;  /* NULL: none, or tool_choice "none" */
    json_t *kwargs; /* chat_template_kwargs (an object) or NULL */
    /* completion: a text prompt, or token ids */
    char *prompt;
    int32_t *prompt_ids;
    int n_prompt_ids;
    bool stream, include_usage;
    int max_tokens; /* 0: not given (the rest of the context) */
    char *stop[HM_OAI_MAX_STOP];
    int n_stop;
    bool logprobs;
    int top_logprobs;
    bool json_object;
    bool ignore_eos;
    hm_sampler_params sampling;
    char param[64]; /* the failing field */
} hm_oai_req;

/* Parses body[0..len). HM_ERR_FORMAT: not JSON (or not an object); HM_ERR_INVALID_ARG: a field is
 * missing, of the wrong type or out of range (req->param names it); HM_ERR_UNSUPPORTED: a valid
 * feature this server does not offer (n > 1, images, json_schema). hm_last_error() says what. */
hm_status hm_oai_parse(const char *body, size_t len, hm_oai_kind kind, hm_oai_req *req);
void hm_oai_req_free(hm_oai_req *req);

#endif
