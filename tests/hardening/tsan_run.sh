#!/bin/sh
# The runtime's threads under ThreadSanitizer (issue 13; docs/fuzzing.md,
# "Sanitizer runs"): a tiny program linked against a TSan build of the
# runtime trains on three text shards with --shuffle (the prefetch thread in
# runtime/loader.c prepares every batch), saves checkpoints, resumes, and is
# stopped by SIGTERM mid-run (the signal path of runtime/train_main.c).
# OpenMP runs one thread (OMP_NUM_THREADS=1): libgomp is not instrumented,
# so its fork/join would show as false races. Fails on any TSan report.
# Not in CTest (needs the TSan runtime build):
#   CFLAGS="-fsanitize=thread -g" cmake -S . -B build-tsan -DGC_CUDA_TESTS=OFF -DGC_ONLY_TESTS=none
#   cmake --build build-tsan --target gcrt
#   sh tests/hardening/tsan_run.sh build/gcompile build-tsan/libgcrt.a /tmp/tsan
set -u
gc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
lib=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
src=$(cd "$(dirname "$0")/../.." && pwd)
dir=$3
rm -rf "$dir" && mkdir -p "$dir/d" && cd "$dir" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
GCOMPILE_RUNTIME_LIB=$lib GCOMPILE_CFLAGS="-fsanitize=thread -g" "$gc" "$src/models/gpt2.graph" --config tiny \
    -D C=8 -D NH=2 -D maxT=8 -D T=8 -D B=2 --target cpu -o t >/dev/null || fail "gcompile"
for i in 1 2 3; do
    for j in $(seq 1 40); do echo "shard $i line $j: the quick brown fox jumps over the lazy dog"; done >d/part$i.txt
done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
run() {  # run NAME ARGS...: a TSan log per run in tsan_NAME.*
    name=$1; shift
    TSAN_OPTIONS="log_path=$dir/tsan_$name" ./t --threads 1 --data 'd/*.txt' --shuffle "$@" >"$name.txt" 2>&1
}
run train --steps 1500 --ckpt-dir ck --save-every 200 --keep 2 || fail "training run (exit $?)"
grep -q '^done: 1500 steps' train.txt || fail "training run did not finish"
run resume --steps 1700 --resume ck || fail "resumed run (exit $?)"
grep -q '^resume: step 1500' resume.txt || fail "not resumed"
TSAN_OPTIONS="log_path=$dir/tsan_sigterm" ./t --threads 1 --data 'd/*.txt' --shuffle --steps 1000000 --ckpt-dir ck2 \
    >sigterm.txt 2>&1 &
pid=$!
w=0
while ! grep -q '^step' sigterm.txt 2>/dev/null && [ $w -lt 100 ]; do sleep 0.1; w=$((w + 1)); done
sleep 1
kill -TERM $pid
wait $pid || fail "SIGTERM run (exit $?)"
grep -q 'stopped by SIGTERM' sigterm.txt || fail "SIGTERM not handled"
if ls tsan_* >/dev/null 2>&1; then
    grep -h -A12 'WARNING: ThreadSanitizer' tsan_* | head -40
    fail "ThreadSanitizer reports in $(ls tsan_* | tr '\n' ' ')"
fi
echo "ok: no ThreadSanitizer report (training with prefetch, checkpoints, resume, SIGTERM)"
