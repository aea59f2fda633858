#!/usr/bin/env bash
# device-sysroot.sh - unpacks the Debian -dev packages hmoe builds against into DIR (default
# .device/sysroot, git-ignored), for build machines that have a compiler but no apt (the GPU
# device). Build there with: make test HMOE_DEPS_PREFIX=$PWD/.device/sysroot/usr
set -euo pipefail
dir=${1:-.device/sysroot}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pkgs=(libjansson-dev libjansson4 libpcre2-dev libpcre2-8-0 zlib1g-dev zlib1g)
(cd "$tmp" && apt-get download "${pkgs[@]}" >/dev/null 2>&1) ||
    { echo "device-sysroot.sh: apt-get download ${pkgs[*]} failed (apt-get update?)" >&2; exit 1; }
mkdir -p "$dir"
for f in "$tmp"/*.deb; do dpkg -x "$f" "$dir"; done
# let the static archive be found under lib/ too
echo "unpacked ${pkgs[*]} into $dir"
