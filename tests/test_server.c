/* test_server.c - the serving engine and the server's pure parts: the scheduler against
 * transformers' greedy continuations (several requests batched together, the prefix cache,
 * cancellation, a full queue), the JSON prefix recognizer against jansson, the model-output
 * splitter of every tool-call format (whole and fed a byte at a time), and the OpenAI request
 * reader. The HTTP routes are tested through curl and the openai client (server_python.py). */
#include <jansson.h>
#include <pthread.h>

#include "engine/jsonp.h"
#include "engine/sched.h"
#include "fixture.h"
#include "server/oai.h"
#include "server/outparse.h"
#include "test.h"

/* ---- scheduler ----------------------------------------------------------------------------- */

/* all of a request's tokens (logprobs >= 0 keeps them) */
static int collect(hm_req *r, int32_t *ids, int cap, hm_req_update *last) {
    int n = 0;
    for (int guard = 0; guard < 6000; guard++) { /* 10 minutes at most */
        hm_req_update u;
        hm_req_poll(r, &u, 100);
        for (int i = 0; i < u.n_toks && n < cap; i++) ids[n++] = u.toks[i].id;
        if (u.done) {
            *last = u;
            return n;
        }
    }
    CHECK(!"request did not finish");
    return n;
}

static void test_sched(void) {
    fixture f;
    if (!load_fixture("a", &f)) {
        CHECK(!"fixture a");
        return;
    }
    hm_model *m = NULL;
    hm_ctx *c = NULL;
    hm_sched *s = NULL;
    CHECK_OK(hm_model_load(f.model, &m));
    hm_ctx_params cp = hm_ctx_default_params();
    cp.n_seq = 3, cp.n_threads = 2, cp.n_ctx = 128, cp.no_amx = true;
    CHECK_OK(hm_ctx_create(m, &cp, &c));
    hm_sched_params sp = hm_sched_default_params();
    sp.prefill_chunk = 4; /* prompts cut into chunks interleaved with the others' decoding */
    CHECK_OK(hm_sched_create(c, NULL, &sp, &s));
    if (!s) return;
    hm_req_params rp = hm_req_default_params();
    rp.sampling.temperature = 0;
    rp.max_tokens = 32;
    rp.logprobs = 0;
    for (int round = 0; round < 2; round++) { /* the second: every prompt hits the prefix cache */
        hm_req *r[8] = {0};
        for (int i = 0; i < f.n_prompts; i++)
            CHECK(hm_sched_submit(s, f.prompt[i], f.len[i], &rp, &r[i]) == HM_SCHED_OK);
        for (int i = 0; i < f.n_prompts; i++) {
            int32_t ids[64];
            hm_req_update u;
            const int n = collect(r[i], ids, 64, &u);
            CHECK(n == 32 && u.finish == HM_FINISH_LENGTH && u.n_gen == 32);
            CHECK(!memcmp(ids, f.greedy[i], sizeof(int32_t) * 32));
            if (round == 1) CHECK(u.n_cached == f.len[i] - 1);
            if (memcmp(ids, f.greedy[i], sizeof(int32_t) * 32))
                fprintf(stderr, "round %d prompt %d: greedy ids differ from transformers'\n", round,
                        i);
            hm_req_release(r[i]);
        }
    }
    /* a longer prompt sharing a prefix reuses it and still matches */
    {
        hm_req *r = NULL;
        CHECK(hm_sched_submit(s, f.prompt[2], f.len[2], &rp, &r) == HM_SCHED_OK);
        int32_t ids[64];
        hm_req_update u;
        collect(r, ids, 64, &u);
        CHECK(!memcmp(ids, f.greedy[2], sizeof(int32_t) * 32));
        hm_req_release(r);
    }
    /* cancellation ends a request at once, and the slot serves the next one. The engine runs
     * this tiny model's 120 steps in milliseconds, so it may finish first now and then: a
     * request that ended by length must have all its tokens; until one is cancelled, again */
    {
        hm_req_params lp = rp;
        lp.max_tokens = 128 - f.len[1] - 1;
        int cancelled = 0;
        for (int attempt = 0; attempt < 50 && !cancelled; attempt++) {
            hm_req *r = NULL;
            CHECK(hm_sched_submit(s, f.prompt[1], f.len[1], &lp, &r) == HM_SCHED_OK);
            hm_req_cancel(r);
            hm_req_update u;
            int32_t ids[128];
            collect(r, ids, 128, &u);
            if (u.finish == HM_FINISH_CANCELLED) {
                cancelled = 1;
                CHECK(u.n_gen < lp.max_tokens);
            } else
                CHECK(u.finish == HM_FINISH_LENGTH && u.n_gen == lp.max_tokens);
            hm_req_release(r);
        }
        CHECK(cancelled);
    }
    /* bad requests are refused at submit */
    {
        hm_req *r = NULL;
        int32_t bad = f.vocab;
        CHECK(hm_sched_submit(s, &bad, 1, &rp, &r) == HM_SCHED_INVALID && !r);
        int32_t *longp = calloc(200, sizeof(int32_t));
        CHECK(hm_sched_submit(s, longp, 200, &rp, &r) == HM_SCHED_INVALID && !r);
        CHECK(strstr(hm_last_error(), "context") != NULL);
        free(longp);
        hm_req_params z = rp;
        z.max_tokens = 0;
        CHECK(hm_sched_submit(s, f.prompt[0], 1, &z, &r) == HM_SCHED_INVALID);
        z = rp;
        z.sampling.top_p = 2;
        CHECK(hm_sched_submit(s, f.prompt[0], 1, &z, &r) == HM_SCHED_INVALID);
    }
    hm_sched_free(s);
    /* a full queue answers busy; close refuses */
    sp.queue_max = 1;
    CHECK_OK(hm_sched_create(c, NULL, &sp, &s));
    {
        hm_req *r[6] = {0};
        int busy = 0;
        for (int i = 0; i < 6; i++) {
            hm_submit res = hm_sched_submit(s, f.prompt[2], f.len[2], &rp, &r[i]);
            busy += res == HM_SCHED_BUSY;
        }
        CHECK(busy >= 1);
        hm_sched_close(s);
        hm_req *late = NULL;
        CHECK(hm_sched_submit(s, f.prompt[0], 1, &rp, &late) == HM_SCHED_CLOSED);
        for (int i = 0; i < 6; i++) {
            if (!r[i]) continue;
            int32_t ids[64];
            hm_req_update u;
            collect(r[i], ids, 64, &u); /* close still finishes what was taken */
            CHECK(u.finish == HM_FINISH_LENGTH && !memcmp(ids, f.greedy[2], 32 * sizeof(int32_t)));
            hm_req_release(r[i]);
        }
    }
    hm_sched_free(s);
    hm_ctx_free(c);
    hm_model_free(m);
    for (int i = 0; i < f.n_prompts; i++) free(f.prompt[i]), free(f.logits[i]);
}

/* ---- JSON prefixes ------------------------------------------------------------------------- */

static bool jp_whole(const char *s, bool object_only) {
    hm_jsonp p;
    hm_jsonp_init(&p, object_only);
    return hm_jsonp_feed(&p, s, strlen(s)) && hm_jsonp_done(&p);
}

static bool jp_prefix(const char *s, size_t n) {
    hm_jsonp p;
    hm_jsonp_init(&p, false);
    return hm_jsonp_feed(&p, s, n);
}

static void test_jsonp(void) {
    static const char *const docs[] = {
        "{}", "[]", "{\"a\":1}", "{\"a\": [1, -2.5e+3, 0, 0.5E-2, true, false, null]}",
        "{\"k\\u00e9y\": \"v\\\"al\\\\ue\\n\"}", "[[[[{}]]]]", "{\"a\":{\"b\":{\"c\":[]}}}",
        "\"str\"", "123", "-0", "1.5", "true", "null", " { \"x\" : [ 1 , 2 ] } ",
        "{\"\xc3\xa9\": 1}",
        /* invalid */
        "{", "{\"a\"}", "{\"a\":}", "{,}", "[1,]", "[01]", "{\"a\":1,}", "[1 2]", "tru", "nul",
        "{\"a\":\"\x01\"}", "\"\\x\"", "\"\\u12g4\"", "[-]", "[1.]", "[1e]", "{'a':1}", "]", "{}}",
        "[1]x", "{\"a\":1}{"};
    for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
        json_t *j = json_loads(docs[i], JSON_DECODE_ANY, NULL);
        /* a top-level number is whole only once something ends it: compare with a space after */
        char buf[256];
        snprintf(buf, sizeof buf, "%s ", docs[i]);
        const bool ours = jp_whole(buf, false);
        CHECK(ours == (j != NULL));
        if (ours != (j != NULL))
            fprintf(stderr, "jsonp: %s: ours %d jansson %d\n", docs[i], ours, j != NULL);
        if (j) /* every prefix of a document is a prefix */
            for (size_t n = 0; n <= strlen(docs[i]); n++) CHECK(jp_prefix(docs[i], n));
        json_decref(j);
    }
    CHECK(jp_whole("{\"a\": 1}", true));
    CHECK(!jp_whole("[1]", true));
    hm_jsonp p;
    hm_jsonp_init(&p, true);
    CHECK(!hm_jsonp_feed(&p, " ", 1)); /* json_object: the object opens at once */
    hm_jsonp_init(&p, true);
    char ws[64];
    memset(ws, ' ', sizeof ws);
    CHECK(hm_jsonp_feed(&p, "{", 1) && !hm_jsonp_feed(&p, ws, sizeof ws)); /* bounded whitespace */
    /* random byte strings: never accepted where jansson refuses */
    uint64_t x = 42;
    for (int t = 0; t < 20000; t++) {
        char s[12];
        const char alpha[] = "{}[]\",:0123456789.eE+-tfnrulase \\";
        const int n = 1 + t % 11;
        for (int i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            s[i] = alpha[(x >> 33) % (sizeof alpha - 1)];
        }
        s[n] = ' ';
        json_error_t je;
        json_t *j = json_loadb(s, (size_t)n, JSON_DECODE_ANY, &je);
        if (!j && strstr(je.text, "overflow")) continue; /* valid JSON beyond a double's range */
        hm_jsonp q;
        hm_jsonp_init(&q, false);
        const bool ours = hm_jsonp_feed(&q, s, (size_t)n + 1) && hm_jsonp_done(&q);
        if (ours != (j != NULL)) {
            CHECK(!"jsonp disagrees with jansson");
            fprintf(stderr, "jsonp: '%.*s': ours %d jansson %d\n", n, s, ours, j != NULL);
        }
        json_decref(j);
    }
}

/* ---- output splitting ---------------------------------------------------------------------- */

typedef struct outs {
    char content[1024], reasoning[1024], tools[1024];
} outs;

static void cat(char *dst, size_t cap, const char *s, size_t n) {
    const size_t l = strlen(dst);
    if (l + n + 1 <= cap) memcpy(dst + l, s, n), dst[l + n] = '\0';
}

static void on_out(void *user, hm_outkind k, const char *text, size_t len, const char *name,
                   const char *args) {
    outs *o = user;
    if (k == HM_OUTK_TOOL) {
        cat(o->tools, sizeof o->tools, name, strlen(name));
        cat(o->tools, sizeof o->tools, args, strlen(args));
        cat(o->tools, sizeof o->tools, ";", 1);
    } else if (k == HM_OUTK_REASONING)
        cat(o->reasoning, sizeof o->reasoning, text, len);
    else
        cat(o->content, sizeof o->content, text, len);
}

/* fed whole and fed one byte at a time: the same result, and the expected one */
static void split_case(hm_outfmt fmt, const char *tail, const char *text, const char *content,
                       const char *reasoning, const char *tools) {
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        outs o = {{0}, {0}, {0}};
        hm_outparse *p = hm_outparse_new(fmt, tail);
        const size_t n = strlen(text);
        if (bytewise)
            for (size_t i = 0; i < n; i++) hm_outparse_feed(p, text + i, 1, false, on_out, &o);
        else
            hm_outparse_feed(p, text, n, false, on_out, &o);
        hm_outparse_feed(p, NULL, 0, true, on_out, &o);
        const bool ok = !strcmp(o.content, content) && !strcmp(o.reasoning, reasoning) &&
                        !strcmp(o.tools, tools);
        CHECK(ok);
        if (!ok)
            fprintf(stderr,
                    "outparse %s (%s): content '%s' reasoning '%s' tools '%s'\n  expected '%s' "
                    "'%s' '%s'\n",
                    hm_outfmt_name(fmt), bytewise ? "bytewise" : "whole", o.content, o.reasoning,
                    o.tools, content, reasoning, tools);
        CHECK(hm_outparse_n_tools(p) ==
              (int)(strchr(tools, ';') ? 1 + (strchr(strchr(tools, ';') + 1, ';') != NULL) : 0));
        hm_outparse_free(p);
    }
}

static void test_outparse(void) {
    const char *ds_calls = "<\xef\xbd\x9ctool\xe2\x96\x81"
                           "calls\xe2\x96\x81"
                           "begin\xef\xbd\x9c>";
    const char *ds_call = "<\xef\xbd\x9ctool\xe2\x96\x81"
                          "call\xe2\x96\x81"
                          "begin\xef\xbd\x9c>";
    const char *ds_sep = "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>";
    const char *ds_end = "<\xef\xbd\x9ctool\xe2\x96\x81"
                         "call\xe2\x96\x81"
                         "end\xef\xbd\x9c>";
    const char *ds_ends = "<\xef\xbd\x9ctool\xe2\x96\x81"
                          "calls\xe2\x96\x81"
                          "end\xef\xbd\x9c>";
    split_case(HM_OUT_PLAIN, NULL, "Hello <think>x</think> world", "Hello <think>x</think> world",
               "", "");
    split_case(HM_OUT_HERMES, "<|im_start|>assistant\n",
               "<think>\nLet me think.\n</think>\n\nThe answer is 4.", "The answer is 4.",
               "Let me think.", "");
    split_case(HM_OUT_HERMES, "<|im_start|>assistant\n<think>\n", "Hmm, 2+2.\n</think>\n\nFour.",
               "Four.", "Hmm, 2+2.", "");
    split_case(HM_OUT_HERMES, "assistant\n<think>\n\n</think>\n\n", "Just the answer.",
               "Just the answer.", "", "");
    split_case(HM_OUT_HERMES, NULL,
               "I will check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
               "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"t\", \"arguments\": {}}\n"
               "</tool_call>",
               "I will check.", "", "get_weather{\"city\": \"Paris\"};t{};");
    split_case(HM_OUT_HERMES, NULL, "<tool_call>\nnot json\n</tool_call>",
               "<tool_call>\nnot json\n</tool_call>", "", "");
    split_case(HM_OUT_HERMES, NULL, "a < b and <tool", "a < b and <tool", "", "");
    split_case(HM_OUT_GLM, NULL,
               "<think>plan</think>Checking.<tool_call>get_weather\n<arg_key>city</arg_key>\n"
               "<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n"
               "</tool_call>",
               "Checking.", "plan", "get_weather{\"city\": \"Paris\", \"days\": 3};");
    char ds[1024];
    snprintf(ds, sizeof ds, "Sure.%s%sget_weather%s{\"city\": \"Rome\"}%s%s", ds_calls, ds_call,
             ds_sep, ds_end, ds_ends);
    split_case(HM_OUT_DEEPSEEK, NULL, ds, "Sure.", "", "get_weather{\"city\": \"Rome\"};");
    snprintf(ds, sizeof ds,
             "<think>r</think>%s%sfunction%sget_weather\n```json\n{\"city\": "
             "\"Oslo\"}\n```%s%s",
             ds_calls, ds_call, ds_sep, ds_end, ds_ends);
    split_case(HM_OUT_DEEPSEEK, NULL, ds, "", "r", "get_weather{\"city\": \"Oslo\"};");
    split_case(
        HM_OUT_HARMONY, NULL,
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
        "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Lima\"}",
        "", "Need weather.", "get_weather{\"city\": \"Lima\"};");
    split_case(HM_OUT_HARMONY, NULL,
               "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final"
               "<|message|>It is 4.",
               "It is 4.", "Easy.", "");
    CHECK(hm_outfmt_detect("{{ '<tool_call>' }}") == HM_OUT_HERMES);
    CHECK(hm_outfmt_detect("<tool_call>{{ name }}<arg_key>") == HM_OUT_GLM);
    CHECK(hm_outfmt_detect("<|channel|>x<|message|>") == HM_OUT_HARMONY);
    CHECK(hm_outfmt_detect(ds_sep) == HM_OUT_DEEPSEEK);
    CHECK(hm_outfmt_detect("{{ messages }}") == HM_OUT_PLAIN);
    /* every template we ship a copy of is recognised as its family */
    static const struct {
        const char *file;
        hm_outfmt f;
    } fams[] = {{"Qwen-Qwen3-0.6B.jinja", HM_OUT_HERMES},
                {"GLM-4.6.jinja", HM_OUT_GLM},
                {"deepseek-ai-DeepSeek-V3.1.jinja", HM_OUT_DEEPSEEK},
                {"openai-gpt-oss-120b.jinja", HM_OUT_HARMONY}};
    for (size_t i = 0; i < sizeof fams / sizeof *fams; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/data/chat_templates/%s", HMOE_SOURCE_DIR,
                 fams[i].file);
        size_t len;
        char *t = test_read_file(path, &len);
        CHECK(t && hm_outfmt_detect(t) == fams[i].f);
        free(t);
    }
}

/* ---- OpenAI requests ----------------------------------------------------------------------- */

static void bad_req(hm_oai_kind k, const char *body, hm_status want, const char *param) {
    hm_oai_req r;
    const hm_status st = hm_oai_parse(body, strlen(body), k, &r);
    CHECK(st == want);
    if (param) CHECK(!strcmp(r.param, param));
    if (st != want || (param && strcmp(r.param, param)))
        fprintf(stderr, "oai: %s: status %d param '%s' (%s)\n", body, st, r.param, hm_last_error());
}

static void test_oai(void) {
    hm_oai_req r;
    const char *ok = "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
                     "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":"
                     "\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null,"
                     "\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":"
                     "\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}]}],\"temperature\":0.5,\"top_p\":0.9,"
                     "\"top_k\":40,\"min_p\":0.1,\"seed\":7,\"max_completion_tokens\":9,\"stop\":"
                     "[\"a\",\"b\"],\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                     "\"logprobs\":true,\"top_logprobs\":3,\"response_format\":{\"type\":"
                     "\"json_object\"},\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
                     "\"f\"}}],\"tool_choice\":\"auto\",\"presence_penalty\":0.5,\"user\":\"u\"}";
    CHECK_OK(hm_oai_parse(ok, strlen(ok), HM_OAI_CHAT, &r));
    CHECK(r.model && !strcmp(r.model, "m") && r.sampling.temperature == 0.5f &&
          r.sampling.top_k == 40 && r.sampling.seed == 7 && r.max_tokens == 9 && r.n_stop == 2 &&
          r.stream && r.include_usage && r.logprobs && r.top_logprobs == 3 && r.json_object &&
          r.tools && r.sampling.presence_penalty == 0.5f);
    json_t *m1 = json_array_get(r.messages, 1), *m2 = json_array_get(r.messages, 2);
    CHECK(!strcmp(json_string_value(json_object_get(m1, "content")), "ab"));
    CHECK(!strcmp(json_string_value(json_object_get(m2, "content")), ""));
    json_t *args = json_object_get(
        json_object_get(json_array_get(json_object_get(m2, "tool_calls"), 0), "function"),
        "arguments");
    CHECK(json_is_object(args) && json_integer_value(json_object_get(args, "x")) == 1);
    hm_oai_req_free(&r);
    const char *cp = "{\"prompt\":[1,2,3],\"logprobs\":2,\"max_tokens\":4}";
    CHECK_OK(hm_oai_parse(cp, strlen(cp), HM_OAI_COMPLETION, &r));
    CHECK(r.n_prompt_ids == 3 && r.prompt_ids[2] == 3 && r.logprobs && r.top_logprobs == 2);
    hm_oai_req_free(&r);
    bad_req(HM_OAI_CHAT, "{", HM_ERR_FORMAT, "body");
    bad_req(HM_OAI_CHAT, "[]", HM_ERR_FORMAT, "body");
    bad_req(HM_OAI_CHAT, "{\"messages\":{}}", HM_ERR_INVALID_ARG, "messages");
    bad_req(HM_OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", HM_ERR_INVALID_ARG, "messages[0]");
    bad_req(HM_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":0}",
            HM_ERR_INVALID_ARG, "top_p");
    bad_req(HM_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}",
            HM_ERR_INVALID_ARG, "max_tokens");
    bad_req(HM_OAI_CHAT,
            "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1.5}",
            HM_ERR_INVALID_ARG, "max_tokens");
    bad_req(HM_OAI_CHAT,
            "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}",
            HM_ERR_INVALID_ARG, "top_logprobs");
    bad_req(HM_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}",
            HM_ERR_UNSUPPORTED, "n");
    bad_req(HM_OAI_CHAT,
            "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
            HM_ERR_UNSUPPORTED, "messages[0]");
    bad_req(HM_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[1]}",
            HM_ERR_INVALID_ARG, "stop");
    bad_req(HM_OAI_CHAT,
            "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
            "\"json_schema\"}}",
            HM_ERR_UNSUPPORTED, "response_format");
    bad_req(HM_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"a\":1,\"a\":2}",
            HM_ERR_FORMAT, "body");
    bad_req(HM_OAI_COMPLETION, "{}", HM_ERR_INVALID_ARG, "prompt");
    bad_req(HM_OAI_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", HM_ERR_UNSUPPORTED, "prompt");
    bad_req(HM_OAI_COMPLETION, "{\"prompt\":[1,-2]}", HM_ERR_INVALID_ARG, "prompt");
}

int main(void) {
    test_jsonp();
    test_outparse();
    test_oai();
    test_sched();
    return test_done("server");
}
