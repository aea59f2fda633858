#!/usr/bin/env bash
# stream_ref.sh - the tuned STREAM-style read reference that `hmoe doctor`/`hmoe bench membw` are
# held against (target: ours >= 90% of it): likwid-bench's hand-written load kernels over SIZE
# per thread group, all physical cores. Usage: bench/stream_ref.sh [LIKWID_DIR] [SIZE] [THREADS]
set -euo pipefail
dir=${1:-.device/likwid}
size=${2:-4GB}
threads=${3:-$(lscpu -p=CORE,SOCKET | grep -v '^#' | sort -u | wc -l)}
if [ -x "$dir/bin/likwid-bench" ]; then
    export PATH="$dir/bin:$PATH" LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
command -v likwid-bench >/dev/null || { echo "no likwid-bench (scripts/fetch-likwid.sh)" >&2; exit 1; }
kernels="load_avx"
grep -q avx512f /proc/cpuinfo && kernels="load_avx512 load_avx"
for k in $kernels; do
    for rep in 1 2 3; do
        mb=$(likwid-bench -t "$k" -w "N:$size:$threads" 2>&1 | awk '/^MByte\/s:/ {print $2}')
        echo "likwid-bench $k N:$size:$threads run $rep: ${mb:-?} MB/s"
    done
done
