/* oai.c - reading OpenAI request bodies (oai.h). */
#include "server/oai.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hm_status bad(hm_oai_req *r, hm_status st, const char *param, const char *fmt,
                     const char *what) {
    snprintf(r->param, sizeof r->param, "%s", param);
    return hm_errorf(st, fmt, param, what);
}

/* a number field in [lo, hi]; absent or null leaves *out */
static hm_status num(hm_oai_req *r, json_t *o, const char *k, double lo, double hi, float *out) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return HM_OK;
    if (!json_is_number(v)) return bad(r, HM_ERR_INVALID_ARG, k, "'%s' must be a number%s", "");
    const double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        char rng[96];
        snprintf(rng, sizeof rng, " in [%g, %g], got %g", lo, hi, d);
        return bad(r, HM_ERR_INVALID_ARG, k, "'%s' must be a number%s", rng);
    }
    *out = (float)d;
    return HM_OK;
}

static hm_status integer(hm_oai_req *r, json_t *o, const char *k, long long lo, long long hi,
                         long long *out, bool *given) {
    json_t *v = json_object_get(o, k);
    if (given) *given = false;
    if (!v || json_is_null(v)) return HM_OK;
    if (!json_is_integer(v)) return bad(r, HM_ERR_INVALID_ARG, k, "'%s' must be an integer%s", "");
    const long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        char rng[96];
        snprintf(rng, sizeof rng, " in [%lld, %lld], got %lld", lo, hi, x);
        return bad(r, HM_ERR_INVALID_ARG, k, "'%s' must be an integer%s", rng);
    }
    *out = x;
    if (given) *given = true;
    return HM_OK;
}

static hm_status boolean(hm_oai_req *r, json_t *o, const char *k, bool *out) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return HM_OK;
    if (!json_is_boolean(v)) return bad(r, HM_ERR_INVALID_ARG, k, "'%s' must be a boolean%s", "");
    *out = json_is_true(v);
    return HM_OK;
}

/* content: a string, or an array of {"type": "text", "text": ...} parts (joined) */
static hm_status content_text(hm_oai_req *r, json_t *c, const char *param, json_t **out) {
    *out = NULL;
    if (!c || json_is_null(c)) return HM_OK;
    if (json_is_string(c)) {
        *out = json_incref(c);
        return HM_OK;
    }
    if (!json_is_array(c))
        return bad(r, HM_ERR_INVALID_ARG, param, "'%s' must be a string or an array of parts%s",
                   "");
    size_t total = 0, i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *ty = json_object_get(part, "type"), *tx = json_object_get(part, "text");
        if (!json_is_string(ty))
            return bad(r, HM_ERR_INVALID_ARG, param, "'%s': every part needs a \"type\"%s", "");
        if (strcmp(json_string_value(ty), "text"))
            return bad(r, HM_ERR_UNSUPPORTED, param,
                       "'%s': parts of type \"%s\" are not supported (text only)",
                       json_string_value(ty));
        if (!json_is_string(tx))
            return bad(r, HM_ERR_INVALID_ARG, param, "'%s': a text part needs a \"text\" string%s",
                       "");
        total += json_string_length(tx);
    }
    char *s = malloc(total + 1), *w = s;
    if (!s) return hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
    json_array_foreach(c, i, part) {
        json_t *tx = json_object_get(part, "text");
        memcpy(w, json_string_value(tx), json_string_length(tx));
        w += json_string_length(tx);
    }
    *out = json_stringn_nocheck(s, total);
    free(s);
    return *out ? HM_OK : hm_errorf(HM_ERR_INVALID_ARG, "content parts are not valid UTF-8");
}

static hm_status messages(hm_oai_req *r, json_t *msgs) {
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return bad(r, HM_ERR_INVALID_ARG, "messages", "'%s' must be a non-empty array%s", "");
    r->messages = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m))
            return bad(r, HM_ERR_INVALID_ARG, param, "'%s' must be an object%s", "");
        json_t *role = json_object_get(m, "role");
        static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
        bool known = false;
        for (int k = 0; k < 5 && json_is_string(role); k++)
            known |= !strcmp(json_string_value(role), roles[k]);
        if (!known)
            return bad(r, HM_ERR_INVALID_ARG, param,
                       "'%s': role must be one of system, developer, user, assistant, tool%s", "");
        json_t *out = json_deep_copy(m), *content;
        json_array_append_new(r->messages, out);
        hm_status st = content_text(r, json_object_get(m, "content"), param, &content);
        if (st) return st;
        if (!strcmp(json_string_value(role), "user") && !content)
            return bad(r, HM_ERR_INVALID_ARG, param, "'%s': a user message needs content%s", "");
        /* an assistant turn of tool calls has content null: templates read "" (as vLLM gives) */
        json_object_set_new(out, "content", content ? content : json_string(""));
        json_t *tc = json_object_get(out, "tool_calls");
        if (tc && !json_is_null(tc) && !json_is_array(tc))
            return bad(r, HM_ERR_INVALID_ARG, param, "'%s': tool_calls must be an array%s", "");
        size_t k;
        json_t *call;
        json_array_foreach(tc, k, call) {
            json_t *fn = json_object_get(call, "function");
            json_t *nm = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
            if (!json_is_string(nm))
                return bad(r, HM_ERR_INVALID_ARG, param,
                           "'%s': every tool call needs function.name%s", "");
            if (json_is_string(args)) { /* templates read the arguments as a mapping */
                json_t *parsed = json_loads(json_string_value(args), 0, NULL);
                if (json_is_object(parsed))
                    json_object_set_new(fn, "arguments", parsed);
                else
                    json_decref(parsed);
            }
        }
    }
    return HM_OK;
}

static hm_status tools(hm_oai_req *r, json_t *o) {
    json_t *t = json_object_get(o, "tools"), *choice = json_object_get(o, "tool_choice");
    if (!t || json_is_null(t)) return HM_OK;
    if (!json_is_array(t))
        return bad(r, HM_ERR_INVALID_ARG, "tools", "'%s' must be an array%s", "");
    size_t i;
    json_t *tool;
    json_array_foreach(t, i, tool) {
        json_t *fn = json_object_get(tool, "function");
        if (!json_is_string(json_object_get(tool, "type")) || !json_is_object(fn) ||
            !json_is_string(json_object_get(fn, "name")))
            return bad(r, HM_ERR_INVALID_ARG, "tools",
                       "'%s': every tool needs \"type\" and function.name%s", "");
    }
    if (choice && !json_is_null(choice)) {
        if (json_is_string(choice) && !strcmp(json_string_value(choice), "none")) return HM_OK;
        if (!json_is_string(choice) || strcmp(json_string_value(choice), "auto"))
            return bad(r, HM_ERR_UNSUPPORTED, "tool_choice",
                       "'%s': only \"auto\" and \"none\" are supported%s", "");
    }
    if (json_array_size(t)) r->tools = json_incref(t);
    return HM_OK;
}

static hm_status stops(hm_oai_req *r, json_t *o) {
    json_t *s = json_object_get(o, "stop");
    if (!s || json_is_null(s)) return HM_OK;
    json_t *one = json_is_string(s) ? s : NULL;
    if (!one && !json_is_array(s))
        return bad(r, HM_ERR_INVALID_ARG, "stop", "'%s' must be a string or an array of strings%s",
                   "");
    const size_t n = one ? 1 : json_array_size(s);
    if (n > HM_OAI_MAX_STOP)
        return bad(r, HM_ERR_INVALID_ARG, "stop", "'%s': at most 16 strings%s", "");
    for (size_t i = 0; i < n; i++) {
        json_t *v = one ? one : json_array_get(s, i);
        if (!json_is_string(v) || !json_string_length(v) || json_string_length(v) > 256)
            return bad(r, HM_ERR_INVALID_ARG, "stop", "'%s': strings of 1 to 256 bytes%s", "");
        if (!(r->stop[r->n_stop++] = strdup(json_string_value(v))))
            return hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
    }
    return HM_OK;
}

static hm_status prompt(hm_oai_req *r, json_t *p) {
    if (json_is_string(p)) {
        r->prompt = strdup(json_string_value(p));
        return r->prompt ? HM_OK : hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
    }
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        return prompt(r, json_array_get(p, 0));
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_array(json_array_get(p, 0)))
        return prompt(r, json_array_get(p, 0));
    if (json_is_array(p) && json_array_size(p) && json_is_integer(json_array_get(p, 0))) {
        const size_t n = json_array_size(p);
        if (n > (1u << 24))
            return bad(r, HM_ERR_INVALID_ARG, "prompt", "'%s': too many tokens%s", "");
        if (!(r->prompt_ids = malloc(sizeof(int32_t) * n)))
            return hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *v = json_array_get(p, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > INT32_MAX)
                return bad(r, HM_ERR_INVALID_ARG, "prompt",
                           "'%s': token ids must be non-negative integers%s", "");
            r->prompt_ids[i] = (int32_t)json_integer_value(v);
        }
        r->n_prompt_ids = (int)n;
        return HM_OK;
    }
    if (json_is_array(p) && json_array_size(p) > 1)
        return bad(r, HM_ERR_UNSUPPORTED, "prompt",
                   "'%s': one prompt per request (send the others as their own requests)%s", "");
    return bad(r, HM_ERR_INVALID_ARG, "prompt", "'%s' must be a string or an array of token ids%s",
               "");
}

static hm_status parse_obj(hm_oai_req *r, json_t *o) {
    hm_status st;
    json_t *v;
    if ((v = json_object_get(o, "model")) && !json_is_null(v)) {
        if (!json_is_string(v))
            return bad(r, HM_ERR_INVALID_ARG, "model", "'%s' must be a string%s", "");
        r->model = strdup(json_string_value(v));
    }
    if (r->kind == HM_OAI_CHAT) {
        if ((st = messages(r, json_object_get(o, "messages"))) || (st = tools(r, o))) return st;
        v = json_object_get(o, "chat_template_kwargs");
        if (v && !json_is_null(v)) {
            if (!json_is_object(v))
                return bad(r, HM_ERR_INVALID_ARG, "chat_template_kwargs",
                           "'%s' must be an object%s", "");
            r->kwargs = json_incref(v);
        }
    } else {
        v = json_object_get(o, "prompt");
        if (!v) return bad(r, HM_ERR_INVALID_ARG, "prompt", "'%s' is required%s", "");
        if ((st = prompt(r, v))) return st;
        bool echo = false;
        if ((st = boolean(r, o, "echo", &echo))) return st;
        if (echo) return bad(r, HM_ERR_UNSUPPORTED, "echo", "'%s' is not supported%s", "");
        json_t *sfx = json_object_get(o, "suffix");
        if (sfx && !json_is_null(sfx))
            return bad(r, HM_ERR_UNSUPPORTED, "suffix", "'%s' is not supported%s", "");
    }
    if ((st = boolean(r, o, "stream", &r->stream))) return st;
    v = json_object_get(o, "stream_options");
    if (v && !json_is_null(v)) {
        if (!json_is_object(v))
            return bad(r, HM_ERR_INVALID_ARG, "stream_options", "'%s' must be an object%s", "");
        if ((st = boolean(r, v, "include_usage", &r->include_usage))) return st;
    }
    long long x = 0;
    bool given;
    if ((st = integer(r, o, "n", 1, 1, &x, NULL))) {
        if (json_is_integer(json_object_get(o, "n")) &&
            json_integer_value(json_object_get(o, "n")) > 1)
            return bad(r, HM_ERR_UNSUPPORTED, "n", "'%s': one choice per request (n = 1)%s", "");
        return st;
    }
    if ((st = integer(r, o, "max_tokens", 1, INT32_MAX, &x, &given))) return st;
    if (given) r->max_tokens = (int)x;
    if ((st = integer(r, o, "max_completion_tokens", 1, INT32_MAX, &x, &given))) return st;
    if (given) r->max_tokens = (int)x;
    hm_sampler_params *sp = &r->sampling;
    if ((st = num(r, o, "temperature", 0, 2, &sp->temperature)) ||
        (st = num(r, o, "top_p", 0, 1, &sp->top_p)) ||
        (st = num(r, o, "min_p", 0, 1, &sp->min_p)) ||
        (st = num(r, o, "presence_penalty", -2, 2, &sp->presence_penalty)) ||
        (st = num(r, o, "frequency_penalty", -2, 2, &sp->frequency_penalty)) ||
        (st = num(r, o, "repetition_penalty", 1e-3, 100, &sp->repetition_penalty)))
        return st;
    if (sp->top_p <= 0) return bad(r, HM_ERR_INVALID_ARG, "top_p", "'%s' must be in (0, 1]%s", "");
    if ((st = integer(r, o, "top_k", -1, INT32_MAX, &x, &given))) return st;
    if (given) sp->top_k = x < 0 ? 0 : (int)x; /* -1: off (vLLM's spelling) */
    if ((st = integer(r, o, "seed", INT64_MIN, INT64_MAX, &x, &given))) return st;
    if (given) sp->seed = (uint64_t)x;
    if ((st = stops(r, o)) || (st = boolean(r, o, "ignore_eos", &r->ignore_eos))) return st;
    /* logprobs: a boolean for chat (with top_logprobs), an integer 0-5 for completions */
    v = json_object_get(o, "logprobs");
    if (r->kind == HM_OAI_CHAT) {
        if ((st = boolean(r, o, "logprobs", &r->logprobs))) return st;
        if ((st = integer(r, o, "top_logprobs", 0, 20, &x, &given))) return st;
        if (given && !r->logprobs)
            return bad(r, HM_ERR_INVALID_ARG, "top_logprobs", "'%s' needs logprobs: true%s", "");
        r->top_logprobs = given ? (int)x : 0;
    } else if (v && !json_is_null(v)) {
        if ((st = integer(r, o, "logprobs", 0, 20, &x, NULL))) return st;
        r->logprobs = true;
        r->top_logprobs = (int)x;
    }
    v = json_object_get(o, "response_format");
    if (v && !json_is_null(v)) {
        json_t *ty = json_object_get(v, "type");
        if (!json_is_string(ty))
            return bad(r, HM_ERR_INVALID_ARG, "response_format", "'%s' needs a \"type\"%s", "");
        const char *t = json_string_value(ty);
        if (!strcmp(t, "json_object"))
            r->json_object = true;
        else if (strcmp(t, "text"))
            return bad(r, HM_ERR_UNSUPPORTED, "response_format",
                       "'%s': type \"%s\" is not supported (text or json_object)", t);
    }
    return HM_OK;
}

hm_status hm_oai_parse(const char *body, size_t len, hm_oai_kind kind, hm_oai_req *r) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->sampling = hm_sampler_default_params();
    r->sampling.penalty_last_n = -1;
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        snprintf(r->param, sizeof r->param, "body");
        return hm_errorf(HM_ERR_FORMAT, "the body is not valid JSON: line %d column %d: %s",
                         je.line, je.column, je.text);
    }
    hm_status st = HM_OK;
    if (!json_is_object(o)) {
        snprintf(r->param, sizeof r->param, "body");
        st = hm_errorf(HM_ERR_FORMAT, "the body must be a JSON object");
    } else {
        st = parse_obj(r, o);
    }
    json_decref(o);
    if (st) {
        char param[64];
        memcpy(param, r->param, sizeof param);
        hm_oai_req_free(r);
        memcpy(r->param, param, sizeof param);
    }
    return st;
}

void hm_oai_req_free(hm_oai_req *r) {
    free(r->model), free(r->prompt), free(r->prompt_ids);
    json_decref(r->messages), json_decref(r->tools), json_decref(r->kwargs);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}
