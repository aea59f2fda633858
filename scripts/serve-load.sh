#!/usr/bin/env bash
# serve-load.sh - `hmoe serve` under a load generator that is not ours (guidellm, PyPI): N
# concurrent streaming clients for a fixed time, the server's resident memory sampled every 10 s.
# Prints errors, output tokens/s, time to first token p50/p99 and RSS at start, middle and end.
#
#   scripts/serve-load.sh MODEL [SECONDS] [STREAMS] [-- extra hmoe serve options]
#
# Needs guidellm (pip install guidellm; GUIDELLM=/path/to/guidellm to use another) and, for its
# synthetic prompts, a Hugging Face tokenizer directory (TOKENIZER=DIR; default: the model's own
# directory when MODEL is one). Prompts of PROMPT_TOKENS (default 128), answers of OUTPUT_TOKENS
# (default 128). Everything listens on 127.0.0.1.
set -euo pipefail
model=${1:?usage: serve-load.sh MODEL [SECONDS] [STREAMS] [-- serve options]}
secs=${2:-600}
streams=${3:-32}
shift $(($# < 3 ? $# : 3))
[ "${1:-}" = "--" ] && shift
here=$(cd "$(dirname "$0")/.." && pwd)
hmoe=${HMOE:-$here/build/hmoe}
guidellm=${GUIDELLM:-guidellm}
tok=${TOKENIZER:-$model}
out=$(mktemp -d /tmp/hmoe-load-XXXXXX)
[ -d "$tok" ] || { echo "serve-load.sh: TOKENIZER must be a Hugging Face tokenizer directory" >&2; exit 2; }

"$hmoe" serve -m "$model" --port 0 --parallel "$streams" "$@" >"$out/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 600); do
    grep -q "listening on" "$out/serve.log" && break
    kill -0 $pid 2>/dev/null || { cat "$out/serve.log"; exit 1; }
    sleep 0.5
done
port=$(grep -o '127.0.0.1:[0-9]*' "$out/serve.log" | head -1 | cut -d: -f2)
head -1 "$out/serve.log"
(while kill -0 $pid 2>/dev/null; do
    echo "$(date +%s) $(awk '/VmRSS/ {print $2}' /proc/$pid/status 2>/dev/null)"
    sleep 10
done) >"$out/rss.txt" &
(cd "$out" && "$guidellm" run --backend "kind=openai_http,target=http://127.0.0.1:$port" \
    --profile "kind=concurrent,streams=$streams" --constraint "kind=max_duration,seconds=$secs" \
    --data "kind=synthetic_text,prompt_tokens=${PROMPT_TOKENS:-128},output_tokens=${OUTPUT_TOKENS:-128}" \
    --tokenizer "kind=hf_auto,model=$tok" --disable-progress >"$out/guidellm.log" 2>&1) ||
    { tail -30 "$out/guidellm.log"; exit 1; }
curl -s "http://127.0.0.1:$port/metrics" >"$out/metrics.txt" || true
kill -TERM $pid
wait $pid || true
python3 - "$out" "$secs" "$streams" <<'EOF'
import json, sys
out, secs, streams = sys.argv[1], sys.argv[2], sys.argv[3]
m = json.load(open(f"{out}/benchmarks.json"))["benchmarks"][0]["metrics"]
tot = m["request_totals"]
ttft = m["time_to_first_token_ms"]["successful"]["percentiles"]
itl = m["inter_token_latency_ms"]["successful"]["percentiles"]
rss = [int(l.split()[1]) for l in open(f"{out}/rss.txt") if len(l.split()) == 2]
print(f"guidellm: {streams} concurrent streams for {secs} s: {tot['successful']} requests done, "
      f"{tot['errored']} errors, {tot['incomplete']} cut by the time limit")
print(f"output tokens/s {m['output_tokens_per_second']['successful']['mean']:.1f}, "
      f"TTFT p50 {ttft['p50']:.0f} ms p99 {ttft['p99']:.0f} ms, inter-token p50 {itl['p50']:.1f} ms")
if rss:
    mid = rss[len(rss) // 2]
    print(f"RSS MiB: start {rss[0] / 1024:.0f}, middle {mid / 1024:.0f}, end {rss[-1] / 1024:.0f}, "
          f"max {max(rss) / 1024:.0f} ({len(rss)} samples)")
print(f"files: {out}")
EOF
