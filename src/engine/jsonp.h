/* jsonp.h - a byte-at-a-time recognizer of JSON text (RFC 8259) that says whether what it has
 * been fed so far can still begin a valid document, and whether it is one. The serving engine
 * uses it to mask the tokens that cannot continue a JSON object (response_format json_object).
 *
 * The state is a small plain struct: copy it to try a continuation without committing to it.
 * Strings accept any byte >= 0x20 other than '"' and '\\' (UTF-8 is not checked: a token may end
 * inside a character); nesting deeper than HM_JSONP_DEPTH and runs of more than HM_JSONP_WS
 * whitespace bytes are refused (so that a masked generation always moves towards the end). */
#ifndef HM_ENGINE_JSONP_H
#define HM_ENGINE_JSONP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HM_JSONP_DEPTH 48
#define HM_JSONP_WS    32

typedef struct hm_jsonp {
    uint8_t st;                    /* what comes next (jsonp.c's enum) */
    uint8_t sub;                   /* inside a number, literal or \u escape: how far */
    uint8_t lit;                   /* the literal being read (t, f, n) */
    uint8_t depth;                 /* open containers */
    uint8_t ws;                    /* consecutive whitespace bytes outside strings */
    uint8_t stack[HM_JSONP_DEPTH]; /* '{' or '[' */
    bool object_only;              /* the document must be an object */
} hm_jsonp;

/* object_only: the top-level value must be an object (OpenAI's json_object mode). */
void hm_jsonp_init(hm_jsonp *p, bool object_only);
/* Feeds n bytes; false (and the state undefined) when they cannot continue a document. */
bool hm_jsonp_feed(hm_jsonp *p, const char *s, size_t n);
/* The bytes fed so far are a whole document (trailing whitespace allowed). */
bool hm_jsonp_done(const hm_jsonp *p);

#endif
