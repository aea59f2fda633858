#!/usr/bin/env python3
"""server_python.py - `hmoe serve` against oracles nobody here wrote: curl for every route and
error, and the official `openai` Python client for chat (plain, streaming, tools, usage) and
completions. Also: 16 concurrent greedy requests answer as the same requests one by one; a
client that disconnects mid-stream frees its slot; a prefix-cache hit answers as a miss; a full
queue answers 429; SIGTERM finishes the stream in flight and exits 0.

    python3 tests/server_python.py BUILD/hmoe

The model is a tiny random-weight Qwen3-MoE (`hmoe synth --preset qwen3-tiny`) with the demo
vocabulary and Qwen3's chat template; servers listen on 127.0.0.1 only, and every wait is
bounded. Exits 77 (skipped) when the binary has no server or `openai` / curl are missing."""
import concurrent.futures as cf
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
TEMPLATE = os.path.join(ROOT, "tests", "data", "chat_templates", "Qwen-Qwen3-0.6B.jinja")
FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


class Server:
    def __init__(self, hmoe, model, *args):
        self.p = subprocess.Popen([hmoe, "serve", "-m", model, "--port", "0", "--threads", "2",
                                   "--chat-template", TEMPLATE, "--name", "tiny", *args],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 60
        self.port = None
        self.log = []
        while time.time() < deadline:
            line = self.p.stdout.readline()
            if not line:
                break
            self.log.append(line)
            if "listening on http://127.0.0.1:" in line:
                self.port = int(line.split("127.0.0.1:")[1].split()[0])
                break
        if self.port is None:
            self.p.kill()
            raise SystemExit("server did not start:\n" + "".join(self.log))
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self, sig=signal.SIGTERM, timeout=60):
        self.p.send_signal(sig)
        try:
            out, _ = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, _ = self.p.communicate()
            return None, out
        return self.p.returncode, out


def stopped(srv, what):
    """SIGTERM, and the server must exit 0 (a sanitizer's report makes it fail)"""
    rc, out = srv.stop()
    check(rc == 0, f"{what}: the server exited {rc} on SIGTERM" + ("" if rc == 0 else ":\n" + out[-3000:]))


def curl(url, *args, data=None, headers=()):
    """(status, body) through curl"""
    cmd = ["curl", "-s", "-m", "60", "-o", "-", "-w", "\n%{http_code}", url, *args]
    for h in headers:
        cmd += ["-H", h]
    if data is not None:
        cmd += ["--data-binary", "@-", "-H", "Content-Type: application/json"]
    r = subprocess.run(cmd, input=data if data is None or isinstance(data, bytes) else data.encode(),
                       capture_output=True, timeout=90)
    body, _, code = r.stdout.decode("utf-8", "replace").rpartition("\n")
    return int(code or 0), body


def raw_stream(srv, max_tokens, timeout):
    """a streaming completion on a bare socket (to close it, or keep reading, at will)"""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=timeout)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return s


def err_of(body):
    try:
        e = json.loads(body)["error"]
        return e if isinstance(e, dict) and "message" in e and "type" in e else None
    except (ValueError, KeyError, TypeError):
        return None


def routes(srv):
    u = srv.url
    code, body = curl(u + "/health")
    check(code == 200 and json.loads(body)["status"] == "ok", "GET /health 200")
    code, body = curl(u + "/v1/models")
    ids = [m["id"] for m in json.loads(body)["data"]] if code == 200 else []
    check(code == 200 and ids == ["tiny"], f"GET /v1/models lists the model ({ids})")
    code, body = curl(u + "/v1/nope")
    check(code == 404 and err_of(body), "unknown route: 404 with an OpenAI error")
    code, body = curl(u + "/v1/models", "-X", "POST", data="{}")
    check(code == 405 and err_of(body), "POST /v1/models: 405")
    code, body = curl(u + "/v1/chat/completions", data="{not json")
    check(code == 400 and err_of(body), "bad JSON: 400")
    code, body = curl(u + "/v1/chat/completions", data="[1,2]")
    check(code == 400 and err_of(body), "a body that is not an object: 400")
    code, body = curl(u + "/v1/chat/completions", data=json.dumps({"messages": []}))
    check(code == 400 and (err_of(body) or {}).get("param") == "messages", "empty messages: 400, param")
    code, body = curl(u + "/v1/chat/completions", data=json.dumps(
        {"messages": [{"role": "user", "content": "hi"}], "temperature": 5}))
    check(code == 400 and (err_of(body) or {}).get("param") == "temperature", "temperature 5: 400")
    code, body = curl(u + "/v1/chat/completions", data=json.dumps(
        {"messages": [{"role": "wizard", "content": "hi"}]}))
    check(code == 400 and err_of(body), "unknown role: 400")
    code, body = curl(u + "/v1/chat/completions", data=json.dumps(
        {"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}))
    check(code == 404 and (err_of(body) or {}).get("code") == "model_not_found", "unknown model: 404")
    code, body = curl(u + "/v1/completions", data=json.dumps({"prompt": "word " * 3000, "max_tokens": 4}))
    check(code == 400 and (err_of(body) or {}).get("code") == "context_length_exceeded",
          "prompt longer than the context: 400 context_length_exceeded")
    code, body = curl(u + "/v1/completions", data=json.dumps({"prompt": [1, 2, 999999]}))
    check(code == 400 and err_of(body), "token id outside the vocabulary: 400")
    code, body = curl(u + "/v1/chat/completions", data=json.dumps(
        {"messages": [{"role": "user", "content": "hi"}], "n": 3}))
    check(code == 400 and err_of(body), "n = 3: 400")
    big = b'{"prompt": "' + b"a" * (2 << 20) + b'"}'
    code, body = curl(u + "/v1/completions", data=big)
    check(code == 413 and err_of(body), "a body over --max-body: 413")
    code, body = curl(u + "/v1/completions", data=json.dumps({"prompt": "Hi", "max_tokens": 3}),
                      headers=["Authorization: Bearer wrong"])
    check(code == 200, "no --api-key: any Authorization passes")
    code, body = curl(u + "/metrics")
    check(code == 200 and "hmoe_requests_total{" in body and "hmoe_time_to_first_token_seconds_bucket"
          in body and "hmoe_kv_cache_usage_ratio" in body and "hmoe_queue_depth" in body,
          "GET /metrics: Prometheus text with requests, TTFT, KV use, queue depth")


def api_key(hmoe, model):
    srv = Server(hmoe, model, "--api-key", "sekrit")
    try:
        code, body = curl(srv.url + "/v1/models")
        check(code == 401 and (err_of(body) or {}).get("code") == "invalid_api_key", "no key: 401")
        code, body = curl(srv.url + "/v1/models", headers=["Authorization: Bearer nope"])
        check(code == 401, "wrong key: 401")
        code, body = curl(srv.url + "/v1/models", headers=["Authorization: Bearer sekrit"])
        check(code == 200, "right key: 200")
        code, body = curl(srv.url + "/health")
        check(code == 200, "/health needs no key")
        import openai
        cl = openai.OpenAI(base_url=srv.url + "/v1", api_key="sekrit", max_retries=0, timeout=60)
        r = cl.completions.create(model="tiny", prompt="Hi", max_tokens=3, temperature=0)
        check(r.usage.completion_tokens == 3, "openai client with the key")
    finally:
        stopped(srv, "api key")


def client(srv):
    import openai
    cl = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=120)
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a color."}]
    r = cl.chat.completions.create(model="tiny", messages=msgs, max_tokens=12, temperature=0)
    ch = r.choices[0]
    check(r.object == "chat.completion" and ch.message.role == "assistant"
          and isinstance(ch.message.content, str) and ch.finish_reason in ("stop", "length"),
          "openai: chat completion")
    check(r.usage.completion_tokens <= 12 and r.usage.prompt_tokens > 5
          and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "openai: usage")
    # streaming gives the same text as the whole answer (greedy)
    parts, finish, usage, n_chunks = [], None, None, 0
    for c in cl.chat.completions.create(model="tiny", messages=msgs, max_tokens=12, temperature=0,
                                        stream=True, stream_options={"include_usage": True}):
        n_chunks += 1
        if c.usage:
            usage = c.usage
        for choice in c.choices:
            if choice.delta.content:
                parts.append(choice.delta.content)
            finish = choice.finish_reason or finish
    check("".join(parts) == (ch.message.content or ""), "openai: streamed text == whole answer")
    check(finish == ch.finish_reason and usage and usage.completion_tokens == r.usage.completion_tokens,
          "openai: stream's finish_reason and final usage chunk")
    # logprobs
    r2 = cl.chat.completions.create(model="tiny", messages=msgs, max_tokens=5, temperature=0,
                                    logprobs=True, top_logprobs=3)
    lp = r2.choices[0].logprobs.content
    check(len(lp) == r2.usage.completion_tokens and all(len(e.top_logprobs) == 3 for e in lp)
          and all(e.logprob <= 1e-6 and abs(e.logprob - e.top_logprobs[0].logprob) < 1e-5 for e in lp),
          "openai: logprobs with top_logprobs (greedy picks the top one)")
    # tools go into the template: the prompt grows by the tool's description
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}}]
    r3 = cl.chat.completions.create(model="tiny", messages=msgs, max_tokens=4, temperature=0, tools=tools)
    check(r3.usage.prompt_tokens > r.usage.prompt_tokens + 20, "openai: tools rendered into the prompt")
    # a conversation holding a tool call and its result renders and runs
    conv = msgs + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    r4 = cl.chat.completions.create(model="tiny", messages=conv, max_tokens=4, temperature=0, tools=tools)
    check(r4.choices[0].message.role == "assistant", "openai: tool result turn")
    # sampling with a seed is reproducible
    kw = dict(model="tiny", messages=msgs, max_tokens=10, temperature=0.9, top_p=0.95, seed=7)
    a = cl.chat.completions.create(**kw).choices[0].message.content
    b = cl.chat.completions.create(**kw).choices[0].message.content
    check(a == b, "openai: seeded sampling reproduces")
    # completions
    c = cl.completions.create(model="tiny", prompt="The capital of France is", max_tokens=6, temperature=0)
    check(c.object == "text_completion" and c.usage.completion_tokens == 6, "openai: completion")
    st = "".join(x.choices[0].text for x in cl.completions.create(
        model="tiny", prompt="The capital of France is", max_tokens=6, temperature=0, stream=True) if x.choices)
    check(st == c.choices[0].text, "openai: streamed completion == whole")
    # a stop string ends the text before it
    full = c.choices[0].text
    if len(full) > 4:
        stop = full[2:4]
        cs = cl.completions.create(model="tiny", prompt="The capital of France is", max_tokens=6,
                                   temperature=0, stop=[stop])
        check(cs.choices[0].text == full[:full.index(stop)] and cs.choices[0].finish_reason == "stop",
              f"stop string {stop!r}: text cut before it")
    # json_object: what comes out is always a JSON prefix; when it stops, a whole object
    rj = cl.chat.completions.create(model="tiny", messages=msgs, max_tokens=60, temperature=0,
                                    response_format={"type": "json_object"})
    txt = rj.choices[0].message.content
    ok = txt.lstrip().startswith("{")
    if rj.choices[0].finish_reason == "stop":
        ok = ok and isinstance(json.loads(txt), dict)
    check(ok, f"json_object: {rj.choices[0].finish_reason}, {txt[:60]!r}")


def concurrency(srv):
    """16 concurrent greedy requests == the same one by one"""
    import openai
    cl = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=300)
    prompts = [f"Request number {i}: tell me about topic {i * 7 % 13}" for i in range(16)]

    def one(p):
        r = cl.completions.create(model="tiny", prompt=p, max_tokens=16, temperature=0)
        return r.choices[0].text
    seq = [one(p) for p in prompts]
    with cf.ThreadPoolExecutor(16) as ex:
        par = list(ex.map(one, prompts))
    same = sum(a == b for a, b in zip(seq, par))
    check(same == 16, f"16 concurrent greedy requests == one by one ({same}/16)")


def disconnect(hmoe, model):
    srv = Server(hmoe, model, "--parallel", "1")
    try:
        s = raw_stream(srv, 400, 30)
        got = b""
        while got.count(b"data: ") < 2:
            got += s.recv(4096)
        s.close()
        t0 = time.time()
        code, body = curl(srv.url + "/v1/completions",
                          data=json.dumps({"prompt": "Hello", "max_tokens": 4, "temperature": 0}))
        dt = time.time() - t0
        check(code == 200, "after a disconnect mid-stream the only slot serves the next request")
        m = curl(srv.url + "/metrics")[1]
        running = [ln for ln in m.splitlines() if ln.startswith("hmoe_requests_running")]
        check(running == ["hmoe_requests_running 0"], f"slot freed ({running}, next request {dt:.1f} s)")
    finally:
        stopped(srv, "disconnect")


def prefix_cache(srv):
    import openai
    cl = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=120)
    msgs = [{"role": "system", "content": "A long system prompt about many things. " * 8},
            {"role": "user", "content": "First question?"}]
    a = cl.chat.completions.create(model="tiny", messages=msgs, max_tokens=10, temperature=0)
    b = cl.chat.completions.create(model="tiny", messages=msgs, max_tokens=10, temperature=0)
    cached = b.usage.prompt_tokens_details.cached_tokens if b.usage.prompt_tokens_details else 0
    check(cached >= b.usage.prompt_tokens - 1 and a.choices[0].message.content == b.choices[0].message.content,
          f"prefix cache hit ({cached} of {b.usage.prompt_tokens} cached) answers as the miss")


def busy(hmoe, model):
    srv = Server(hmoe, model, "--parallel", "1", "--queue", "1")
    try:
        body = json.dumps({"prompt": "Tell me a story", "max_tokens": 60, "ignore_eos": True})
        with cf.ThreadPoolExecutor(6) as ex:
            codes = list(ex.map(lambda _: curl(srv.url + "/v1/completions", "-D", "/dev/stderr",
                                               data=body)[0], range(6)))
        check(429 in codes and 200 in codes, f"a full queue answers 429 ({sorted(codes)})")
        r = subprocess.run(["curl", "-s", "-i", "-m", "60", srv.url + "/health"], capture_output=True)
        check(r.returncode == 0, "the server still answers after 429s")
    finally:
        stopped(srv, "busy")


def sigterm(hmoe, model):
    srv = Server(hmoe, model, "--parallel", "2")
    s = raw_stream(srv, 120, 60)
    got = b""
    while b"data: " not in got:
        got += s.recv(4096)
    srv.p.send_signal(signal.SIGTERM)
    deadline = time.time() + 60
    while b"[DONE]" not in got and time.time() < deadline:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    try:
        rc = srv.p.wait(timeout=60)  # it exits by itself once the stream is done
    except subprocess.TimeoutExpired:
        srv.p.kill()
        rc = "still running 60 s after the stream ended"
    n = got.count(b"data: {")
    check(b"[DONE]" in got and b'"finish_reason":"length"' in got,
          f"SIGTERM: the stream in flight finished ({n} chunks)")
    check(rc == 0, f"SIGTERM: the server exited 0 ({rc})")


def chat(hmoe, model):
    """hmoe chat with its input piped: turns, /reset, /exit; greedy turns repeat after /reset"""
    lines = "Hello there\nAnd again\n/reset\nHello there\n/exit\nnever read\n"
    r = subprocess.run([hmoe, "chat", "-m", model, "--chat-template", TEMPLATE, "--threads", "2",
                        "--temp", "0", "-n", "8"], input=lines, capture_output=True, text=True,
                       timeout=300)
    out = r.stdout.splitlines()
    answers = [ln for ln in out if ln and not ln.startswith("(")]
    check(r.returncode == 0 and "(conversation forgotten)" in out and len(answers) == 3,
          f"hmoe chat: 3 answers and a reset ({r.returncode}, {out!r:.200})")
    check(len(answers) == 3 and answers[0] == answers[2], "hmoe chat: the same first turn after /reset")


def main():
    hmoe = sys.argv[1]
    if subprocess.run([hmoe, "serve", "--help"], capture_output=True).returncode != 0:
        print("skip: this hmoe has no server")
        return 77
    try:
        import openai  # noqa: F401
    except ImportError:
        print("skip: the openai package is missing (scripts/pydeps.sh installs it)")
        return 77
    if not shutil.which("curl"):
        print("skip: no curl")
        return 77
    tmp = tempfile.mkdtemp(prefix="hmoe-serve-")
    model = os.path.join(tmp, "tiny.gguf")
    subprocess.run([hmoe, "synth", "--preset", "qwen3-tiny", "--vocab",
                    os.path.join(ROOT, "data", "demo-vocab.gguf"), "--vocab-size", "4096", "-o", model],
                   check=True, capture_output=True)
    srv = Server(hmoe, model, "--parallel", "16", "--ctx", "512", "--max-body", "1M", "--no-amx")
    try:
        routes(srv)
        client(srv)
        concurrency(srv)
        prefix_cache(srv)
    finally:
        stopped(srv, "main server")
    chat(hmoe, model)
    api_key(hmoe, model)
    disconnect(hmoe, model)
    busy(hmoe, model)
    sigterm(hmoe, model)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(FAILS)} failed" + (": " + "; ".join(FAILS) if FAILS else ""))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
