#!/usr/bin/env bash
# gpu-run.sh - on a machine with an NVIDIA GPU and no apt (the device): builds hmoe for one GPU
# architecture against the sysroot of scripts/device-sysroot.sh (carried as .device), runs the
# GPU tests, then the end-to-end benchmarks on synthetic Qwen3-MoE models. Logs go to $OUT (or
# build-gpu/logs).
#   scripts/gpu-run.sh [test] [bench] [bench30] [prof30]     (default: test bench)
# test: test_cuda and test_cuda_twins, then the C tests under each ISA variant the CPU has (the
# Python oracle tests need packages the device lacks; CI runs them); bench: qwen3-tiny on the CPU,
# the GPU and hybrid; bench30: the table of bench/RESULTS.md on qwen3-30b-a3b synth (Q4_K experts,
# Q8_0 attention): all on the GPU (decode, pp512; and with --gpu-dtype bf16), hybrid with every
# and with half of the routed experts on the CPU (decode, pp512), pp4096 with the experts on the
# CPU, decode of 32 sequences with the experts on the CPU, and the CPU alone; prof30: GPU and
# all-CPU experts with every GPU node timed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
ARCH=${HMOE_CUDA_ARCH:-90}
B=${BUILD:-build-gpu}
LOG=${OUT:-$B/logs}
mkdir -p "$LOG"
steps=${*:-test bench}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
t0=$(date +%s)
prefix=
[ -d .device/sysroot/usr ] && prefix=$PWD/.device/sysroot/usr
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DHMOE_CUDA=ON "-DHMOE_CUDA_ARCH=$ARCH" \
    -DHMOE_WERROR=ON "-DHMOE_DEPS_PREFIX=$prefix" >"$LOG/cmake.log" 2>&1 || { tail -20 "$LOG/cmake.log"; exit 1; }
cmake --build "$B" -j "$(nproc)" >"$LOG/build.log" 2>&1 || { grep -E "error" "$LOG/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
rc=0
for s in $steps; do
    case $s in
    test)
        (cd "$B" && ./test_cuda_twins | tail -1)
        (cd "$B" && timeout 400 ./test_cuda >"$LOG/test_cuda.log" 2>&1); r=$?
        grep -vE "^  cuda|^GPU" "$LOG/test_cuda.log" | tail -40
        grep -E "^  cuda.*(KL|rel error)" "$LOG/test_cuda.log" | sort -t: -k2 | tail -6
        echo "test_cuda: rc $r"; [ $r -eq 0 ] || rc=1
        for isa in amx avx512 avx2; do
            HMOE_ISA=$isa "$B/hmoe" doctor --no-bandwidth >/dev/null 2>&1 || continue
            (cd "$B" && HMOE_ISA=$isa ctest -j "$(nproc)" -E "python|cuda" --timeout 300 \
                >"$LOG/ctest-$isa.log" 2>&1); r=$?
            echo "ctest ($isa): $(grep -E 'tests passed' "$LOG/ctest-$isa.log")"; [ $r -eq 0 ] || rc=1
        done ;;
    bench)
        m=/tmp/hmoe-tiny.gguf
        [ -f $m ] || "$B/hmoe" synth --preset qwen3-tiny --vocab none -o $m >/dev/null
        for d in "cpu" "cuda" "cuda --gpu-experts 0" "cuda --gpu-experts 64"; do
            echo "== tiny: --device $d"
            timeout 120 "$B/hmoe" bench e2e -m $m -p 512 -n 64 --device $d 2>&1 | tee -a "$LOG/e2e-tiny.log" |
                grep -E "^placement|^roofline:|^hybrid|^result|^rep 0|hmoe"
        done ;;
    bench30)
        m=/tmp/hmoe-q30.gguf
        [ -f $m ] || "$B/hmoe" synth --preset qwen3-30b-a3b --vocab none -o $m >/dev/null
        for d in "-p 512 -n 64 --device cuda" "-p 512 -n 32 --device cuda --gpu-dtype bf16" \
                 "-p 512 -n 64 --device cuda --gpu-experts 0" \
                 "-p 512 -n 64 --device cuda --gpu-experts 64" \
                 "-p 4096 -n 0 --batch 4096 --device cuda --gpu-experts 0" \
                 "-p 64 -n 16 --seqs 32 --device cuda --gpu-experts 0" \
                 "-p 128 -n 32 --threads 16 --device cpu"; do
            echo "== qwen3-30b-a3b synth: $d"
            timeout 240 "$B/hmoe" bench e2e -m $m --reps 2 $d 2>&1 | tee -a "$LOG/e2e-q30.log" |
                grep -E "^placement|^roofline:|^hybrid|^batch|^result|^rep|^  hybrid"
        done ;;
    prof30)
        m=/tmp/hmoe-q30.gguf
        [ -f $m ] || "$B/hmoe" synth --preset qwen3-30b-a3b --vocab none -o $m >/dev/null
        for d in "cuda" "cuda --gpu-experts 0"; do
            echo "== qwen3-30b-a3b synth, per-part GPU time (HMOE_CUDA_PROFILE=1): --device $d"
            HMOE_CUDA_PROFILE=1 timeout 240 "$B/hmoe" bench e2e -m $m -p 512 -n 16 --device $d 2>&1 | tee -a "$LOG/prof-q30.log" | grep -E "^rep|^  [a-z]|^result"
        done ;;
    esac
done
echo "total: $(( $(date +%s) - t0 )) s"
exit $rc
