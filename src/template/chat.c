/* chat.c - apply_chat_template's context (as transformers builds it) and loading a model's chat
 * template and special tokens from a GGUF file or a Hugging Face directory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/mmap.h"
#include "format/gguf.h"
#include "template/jinja.h"

static const char *const k_reasoning_fields[] = {"reasoning_content", "thinking", "reasoning"};

/* transformers: _normalize_chat_messages (drop None values) + _alias_reasoning_fields */
static json_t *normalize_message(const json_t *m) {
    if (!json_is_object(m)) return json_deep_copy(m);
    json_t *plain = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v) {
        if (!json_is_null(v)) json_object_set(plain, k, v);
    }
    json_t *reasoning = NULL;
    for (int i = 0; i < 3 && !reasoning; i++)
        reasoning = json_object_get(plain, k_reasoning_fields[i]);
    if (!reasoning) return plain;
    /* {"thinking": reasoning, **message, "reasoning_content": reasoning} */
    json_t *out = json_object();
    json_t *th = json_object_get(plain, "thinking");
    json_object_set(out, "thinking", th ? th : reasoning);
    json_object_foreach(plain, k, v) {
        if (!strcmp(k, "thinking")) continue;
        json_object_set(out, k, !strcmp(k, "reasoning_content") ? reasoning : v);
    }
    json_object_set(out, "reasoning_content", reasoning);
    json_decref(plain);
    return out;
}

hm_status hm_chat_template_apply(const hm_jinja *tpl, const json_t *messages, const json_t *tools,
                                 bool add_generation_prompt, const json_t *kwargs,
                                 const char *bos_token, const char *eos_token,
                                 const hm_jinja_params *params, char **out, size_t *out_len) {
    *out = NULL;
    if (!json_is_array(messages))
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: messages must be a JSON array",
                         hm_jinja_name(tpl));
    if (kwargs && !json_is_object(kwargs))
        return hm_errorf(HM_ERR_INVALID_ARG, "%s: kwargs must be a JSON object",
                         hm_jinja_name(tpl));
    json_t *ctx = json_object(), *msgs = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) json_array_append_new(msgs, normalize_message(m));
    json_object_set_new(ctx, "messages", msgs);
    json_object_set_new(ctx, "tools", tools ? json_deep_copy(tools) : json_null());
    json_object_set_new(ctx, "documents", json_null());
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_generation_prompt));
    if (bos_token) json_object_set_new(ctx, "bos_token", json_string(bos_token));
    if (eos_token) json_object_set_new(ctx, "eos_token", json_string(eos_token));
    if (kwargs) json_object_update(ctx, (json_t *)kwargs);
    hm_status st = hm_jinja_render(tpl, ctx, params, out, out_len);
    json_decref(ctx);
    return st;
}

/* ---- loading ----------------------------------------------------------------------------------
 */

void hm_chat_template_source_free(hm_chat_template_source *s) {
    if (!s) return;
    free(s->template_text);
    free(s->bos_token);
    free(s->eos_token);
    free(s->origin);
    memset(s, 0, sizeof *s);
}

static char *dupn(const char *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

static char *dupf(const char *fmt, const char *a, const char *b) {
    size_t n = strlen(fmt) + strlen(a) + strlen(b) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, fmt, a, b);
    return s;
}

/* a template or config file: regular files only (a FIFO is refused, never waited on) */
static hm_status read_file(const char *path, char **out, size_t *len) {
    return hm_file_read_all(path, (size_t)256 << 20, false, out, len);
}

/* a JSON object file, read as read_file does */
static hm_status read_json(const char *path, json_t **out) {
    char *buf = NULL;
    size_t len = 0;
    *out = NULL;
    hm_status st = read_file(path, &buf, &len);
    if (st) return st;
    json_error_t je;
    *out = json_loadb(buf, len, 0, &je);
    free(buf);
    if (!*out) return hm_errorf(HM_ERR_FORMAT, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    return HM_OK;
}

static hm_status gguf_token(hm_gguf *g, const char *key, char **out) {
    uint64_t id;
    *out = NULL;
    if (hm_gguf_get_uint(g, key, &id) != HM_OK) {
        hm_error_clear();
        return HM_OK; /* no such token */
    }
    const hm_gguf_value *arr;
    hm_status st = hm_gguf_get_arr(g, "tokenizer.ggml.tokens", &arr);
    if (st != HM_OK) return hm_error_prefix(st, "%s", hm_gguf_name(g));
    if (arr->arr_type != HM_GGUF_STRING || id >= arr->arr_n)
        return hm_errorf(
            HM_ERR_FORMAT, "%s: %s = %llu is not a token id (tokenizer.ggml.tokens has %llu)",
            hm_gguf_name(g), key, (unsigned long long)id, (unsigned long long)arr->arr_n);
    *out = dupn(arr->arr_strs[id].ptr, arr->arr_strs[id].len);
    return *out ? HM_OK : hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
}

static hm_status load_gguf(const char *path, hm_chat_template_source *out) {
    hm_gguf *g;
    hm_status st = hm_gguf_open(path, &g);
    if (st != HM_OK) return st;
    hm_gguf_str s;
    st = hm_gguf_get_str(g, "tokenizer.chat_template", &s);
    if (st != HM_OK) {
        hm_gguf_close(g);
        return hm_errorf(HM_ERR_NOT_FOUND, "%s: no chat template (key tokenizer.chat_template)",
                         path);
    }
    out->template_text = dupn(s.ptr, s.len);
    out->template_len = s.len;
    out->origin = dupf("%s:%s", path, "tokenizer.chat_template");
    if (!out->template_text || !out->origin) st = hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
    if (st == HM_OK) st = gguf_token(g, "tokenizer.ggml.bos_token_id", &out->bos_token);
    if (st == HM_OK) st = gguf_token(g, "tokenizer.ggml.eos_token_id", &out->eos_token);
    hm_gguf_close(g);
    return st;
}

/* a special token in tokenizer_config.json: "text" or {"content": "text", ...} or null */
static hm_status hf_token(const char *file, json_t *cfg, const char *key, char **out) {
    json_t *v = json_object_get(cfg, key);
    *out = NULL;
    if (!v || json_is_null(v)) return HM_OK;
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v))
        return hm_errorf(HM_ERR_FORMAT, "%s: key '%s': expected a string or {\"content\": string}",
                         file, key);
    *out = dupn(json_string_value(v), json_string_length(v));
    return *out ? HM_OK : hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
}

static hm_status load_hf(const char *dir, hm_chat_template_source *out) {
    char cfg_path[4096], jinja_path[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir);
    snprintf(jinja_path, sizeof jinja_path, "%s/chat_template.jinja", dir);
    json_t *cfg = NULL;
    struct stat sb;
    if (stat(cfg_path, &sb) == 0) {
        hm_status rs = read_json(cfg_path, &cfg);
        if (rs) return rs;
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            return hm_errorf(HM_ERR_FORMAT, "%s: expected a JSON object", cfg_path);
        }
    }
    hm_status st = HM_OK;
    json_t *ct = cfg ? json_object_get(cfg, "chat_template") : NULL;
    if (ct && json_is_string(ct)) {
        out->template_text = dupn(json_string_value(ct), json_string_length(ct));
        out->template_len = json_string_length(ct);
        out->origin = dupf("%s:%s", cfg_path, "chat_template");
    } else if (ct && json_is_array(ct)) {
        size_t i;
        json_t *e;
        json_array_foreach(ct, i, e) {
            json_t *nm = json_object_get(e, "name"), *t = json_object_get(e, "template");
            if (json_is_string(nm) && !strcmp(json_string_value(nm), "default") &&
                json_is_string(t)) {
                out->template_text = dupn(json_string_value(t), json_string_length(t));
                out->template_len = json_string_length(t);
                out->origin = dupf("%s:%s", cfg_path, "chat_template[name=default]");
                break;
            }
        }
        if (!out->template_text)
            st = hm_errorf(HM_ERR_NOT_FOUND,
                           "%s: key 'chat_template' is a list without a template named \"default\"",
                           cfg_path);
    } else if (ct && !json_is_null(ct)) {
        st = hm_errorf(HM_ERR_FORMAT,
                       "%s: key 'chat_template': expected a string or a list of {name, template}",
                       cfg_path);
    } else {
        st = read_file(jinja_path, &out->template_text, &out->template_len);
        if (st == HM_ERR_NOT_FOUND)
            st = hm_errorf(HM_ERR_NOT_FOUND,
                           "%s: no chat template (neither %s with 'chat_template' nor %s)", dir,
                           cfg_path, jinja_path);
        else if (st == HM_OK)
            out->origin = dupf("%s%s", jinja_path, "");
    }
    if (st == HM_OK && (!out->template_text || !out->origin))
        st = hm_errorf(HM_ERR_NO_MEMORY, "out of memory");
    if (st == HM_OK && cfg) st = hf_token(cfg_path, cfg, "bos_token", &out->bos_token);
    if (st == HM_OK && cfg) st = hf_token(cfg_path, cfg, "eos_token", &out->eos_token);
    json_decref(cfg);
    return st;
}

hm_status hm_chat_template_load(const char *path, hm_chat_template_source *out) {
    memset(out, 0, sizeof *out);
    struct stat sb;
    if (stat(path, &sb) != 0) return hm_errorf_errno(HM_ERR_NOT_FOUND, errno, "%s", path);
    hm_status st = S_ISDIR(sb.st_mode) ? load_hf(path, out) : load_gguf(path, out);
    if (st != HM_OK) hm_chat_template_source_free(out);
    return st;
}

hm_status hm_chat_render(const char *model_path, const char *messages_json, const char *tools_json,
                         const char *kwargs_json, bool add_generation_prompt, char **out,
                         size_t *out_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!model_path || !messages_json)
        return hm_errorf(HM_ERR_INVALID_ARG, "chat: a model path and messages are required");
    static const char *const what[3] = {"messages", "tools", "kwargs"};
    const char *src[3] = {messages_json, tools_json, kwargs_json};
    json_t *j[3] = {NULL, NULL, NULL};
    hm_status st = HM_OK;
    for (int i = 0; i < 3 && !st; i++) {
        if (!src[i]) continue;
        json_error_t je;
        j[i] = json_loads(src[i], JSON_REJECT_DUPLICATES, &je);
        if (!j[i])
            st = hm_errorf(HM_ERR_FORMAT, "chat: %s: line %d column %d: %s", what[i], je.line,
                           je.column, je.text);
        else if (i < 2 ? !json_is_array(j[i]) : !json_is_object(j[i]))
            st = hm_errorf(HM_ERR_FORMAT, "chat: %s must be a JSON %s", what[i],
                           i < 2 ? "array" : "object");
    }
    hm_chat_template_source cs = {0};
    hm_jinja *tpl = NULL;
    if (!st) st = hm_chat_template_load(model_path, &cs);
    if (!st)
        st = hm_jinja_parse(cs.template_text, cs.template_len,
                            cs.origin ? cs.origin : "chat_template", &tpl);
    if (!st)
        st = hm_chat_template_apply(tpl, j[0], j[1], add_generation_prompt, j[2], cs.bos_token,
                                    cs.eos_token, NULL, out, out_len);
    hm_jinja_free(tpl);
    hm_chat_template_source_free(&cs);
    for (int i = 0; i < 3; i++) json_decref(j[i]);
    return st;
}
