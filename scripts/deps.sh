#!/usr/bin/env bash
# deps.sh - installs, once and only when missing, the Debian packages that building and testing
# hmoe need. Safe to run again: it checks tools by command and libraries by header first.
set -euo pipefail

need=()     # needed to build: failure to install them is fatal
optional=() # test oracles only: the tests that use them say so when they are absent
have_cmd() { command -v "$1" >/dev/null 2>&1; }

have_cmd cc || have_cmd gcc || need+=(gcc)
have_cmd make || need+=(make)
have_cmd cmake || need+=(cmake)
[ -e /usr/include/linux/futex.h ] || need+=(linux-libc-dev)
[ -e /usr/include/jansson.h ] || [ -n "${HMOE_DEPS_PREFIX:-}" ] || need+=(libjansson-dev)
[ -e /usr/include/pcre2.h ] || [ -n "${HMOE_DEPS_PREFIX:-}" ] || need+=(libpcre2-dev)
[ -e /usr/include/zlib.h ] || [ -n "${HMOE_DEPS_PREFIX:-}" ] || need+=(zlib1g-dev)
# hmoe serve (HTTP) and hmoe chat (line editing): built when present
[ -e /usr/include/microhttpd.h ] || [ -n "${HMOE_DEPS_PREFIX:-}" ] || need+=(libmicrohttpd-dev)
[ -e /usr/include/editline/readline.h ] || [ -n "${HMOE_DEPS_PREFIX:-}" ] || need+=(libedit-dev)
have_cmd curl || optional+=(curl) # the server's route tests
# the Python package's extension (python/; tests/python_moe.py): Python's headers
if have_cmd python3 && ! python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
    optional+=(python3-dev)
fi
have_cmd python3 || optional+=(python3)  # tests use Python's json module as an oracle
have_cmd lscpu || optional+=(util-linux) # topology oracle in tests
have_cmd pkg-config || optional+=(pkgconf) # the install test builds examples/ through hmoe.pc

if [ ${#need[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ]; then
    exit 0
fi
if ! have_cmd apt-get && [ ${#need[@]} -eq 0 ]; then
    echo "deps.sh: no apt-get here; tests run without: ${optional[*]}" >&2
    exit 0
fi
need+=("${optional[@]}")

echo "deps.sh: installing missing packages: ${need[*]}" >&2
if ! have_cmd apt-get; then
    echo "deps.sh: missing ${need[*]} and no apt-get here; install them by hand" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if have_cmd sudo; then SUDO=sudo; else
        echo "deps.sh: need root (or sudo) to install ${need[*]}" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
# refresh the package lists once per day at most
stamp=/var/lib/apt/periodic/update-success-stamp
if [ ! -e /var/lib/apt/lists/lock ] || [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
    $SUDO apt-get update -qq
fi
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
echo "deps.sh: done" >&2
