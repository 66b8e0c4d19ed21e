#!/bin/sh
# Fusions on vs off on the CPU target: GPT-2 124M, ms/step of the default
# (fused) program and of the --no-fuse[=KINDS] one, run in alternating rounds
# on 2 threads so that both see the same machine in the same minutes. Prints
# the mean ratio and the ratio of the fastest steps (steps 2.. of every round).
#
# usage: bench/fuse_step.sh [BUILD_DIR] [B] [T] [STEPS] [ROUNDS] [NOFUSE]
#   defaults: build 1 1024 4 2 (NOFUSE: the --no-fuse argument, default all:
#   "--no-fuse"; e.g. "--no-fuse=attention")
set -eu
cd "$(dirname "$0")/.."
build=${1:-build} B=${2:-1} T=${3:-1024} steps=${4:-4} rounds=${5:-2} nofuse=${6:---no-fuse}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gc() { "$build/gcompile" models/gpt2.graph --config gpt2_124M -D B="$B" -D T="$T" --target cpu "$@"; }
gc -o "$tmp/fused"
gc "$nofuse" -o "$tmp/unfused"
# mean ms over steps 2.. (step 1 pays first-touch page faults)
mean_ms() {
    awk -F'"ms":' 'NR > 1 { split($2, a, ","); s += a[1]; n++ } END { printf "%.1f", s / n }' "$1"
}
run() {
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 "$tmp/$1" --threads 2 --steps "$steps" \
        --log "$tmp/$1.jsonl" >/dev/null
    awk -F'"ms":' 'NR > 1 { split($2, a, ","); print a[1] }' "$tmp/$1.jsonl" >>"$tmp/$1.all"
    mean_ms "$tmp/$1.jsonl"
}
echo "GPT-2 124M B=$B T=$T, $steps steps x $rounds rounds, 2 threads; fused = default, unfused = $nofuse"
f_all="" u_all=""
for r in $(seq "$rounds"); do
    f=$(run fused)
    u=$(run unfused)
    echo "round $r: fused $f ms/step, unfused $u ms/step, ratio $(echo "$f $u" | awk '{ printf "%.3f", $1 / $2 }')"
    f_all="$f_all $f" u_all="$u_all $u"
done
echo "$f_all|$u_all" | awk -F'|' '{ n = split($1, f, " "); split($2, u, " ");
    for (i = 1; i <= n; i++) { sf += f[i]; su += u[i] }
    printf "mean: fused %.1f ms/step, unfused %.1f ms/step, fused/unfused %.3f\n", sf / n, su / n, sf / su }'
# the fastest step of each over all rounds: the least disturbed by a shared machine's noise
fmin=$(sort -n "$tmp/fused.all" | head -1) umin=$(sort -n "$tmp/unfused.all" | head -1)
echo "fastest step: fused $fmin ms, unfused $umin ms, fused/unfused $(echo "$fmin $umin" | awk '{ printf "%.3f", $1 / $2 }')"
