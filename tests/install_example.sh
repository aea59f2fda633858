#!/usr/bin/env bash
# install_example.sh BUILD_DIR HMOE_BINARY - `cmake --install` into a temporary prefix, builds
# examples/simple.c against the installed library through hmoe.pc alone, and runs it on a small
# synthetic model with data/'s vocabulary: the example must print text and exit 0.
set -euo pipefail
build=$1 hmoe=$2
src=$(cd "$(dirname "$0")/.." && pwd)
command -v pkg-config >/dev/null || { echo "install_example: no pkg-config: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
test -f "$tmp/prefix/include/hmoe.h" && test -f "$tmp/prefix/lib/libhmoe.a"
test ! -e "$tmp/prefix/include/model" # internal headers are not installed
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
cc -std=c11 -Wall -Wextra -Werror "$src/examples/simple.c" $(pkg-config --cflags --libs hmoe) \
    -o "$tmp/simple"
"$hmoe" synth --preset qwen3-tiny --layers 1 --vocab "$src/data/demo-vocab.gguf" \
    -o "$tmp/m.gguf" >/dev/null
out=$("$tmp/simple" "$tmp/m.gguf" "The capital of France is" 8)
echo "example printed: $out"
[ -n "$out" ]
