#!/usr/bin/env bash
# fetch-likwid.sh - fetches Debian's likwid package (and the libraries likwid-bench needs) and
# unpacks the binaries into DIR (default .device/likwid, git-ignored) so they can be carried to a
# machine without apt. likwid-bench's tuned load kernels are our STREAM-read reference.
set -euo pipefail
dir=${1:-.device/likwid}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download likwid libhwloc15 liblua5.3-0 >/dev/null 2>&1) ||
    { echo "fetch-likwid.sh: apt-get download failed (run apt-get update?)" >&2; exit 1; }
mkdir -p "$tmp/x" "$dir/bin" "$dir/lib"
for f in "$tmp"/*.deb; do dpkg -x "$f" "$tmp/x"; done
cp "$tmp/x/usr/bin/likwid-bench" "$tmp/x/usr/sbin/likwid-accessD" "$dir/bin/"
cp -a "$tmp"/x/usr/lib/x86_64-linux-gnu/* "$dir/lib/"
echo "likwid-bench unpacked into $dir"
