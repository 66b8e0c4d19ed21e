#!/bin/sh
# CPU target speed: GPT-2 124M, B=4, T=64, 2 threads; ms/step and tok/s.
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for this command only (some
# machines set them; they halve sgemm speed; a user's machine has neither).
# usage: bench/cpu_step.sh [BUILD_DIR] [STEPS]   (appends to bench/RESULTS.md with --record)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/gcompile" models/gpt2.graph --config gpt2_124M -D B=4 -D T=64 --target cpu -o "$tmp/train"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 \
    "$tmp/train" --threads 2 --steps "$steps" --log "$tmp/log.jsonl" | tail -3
# mean over steps 2.. (step 1 pays first-touch page faults)
awk -F'"ms":' 'NR > 1 { split($2, a, ","); s += a[1]; n++ } END { printf "cpu_step: GPT-2 124M B=4 T=64 2 threads: %.1f ms/step, %.0f tok/s over %d steps\n", s/n, 256000/(s/n), n }' "$tmp/log.jsonl"
