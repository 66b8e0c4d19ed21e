#!/bin/sh
# The emitted CUDA program compiles and links with nvcc (no GPU needed) without
# a warning (SASS for sm_90 and its PTX), and on
# a machine without a GPU it stops with a one-line "no CUDA device" error.
# usage: build.sh GCOMPILE GRAPH WORKDIR CONFIG [gcompile args...]
# exit 77 (skipped) without nvcc.
set -u
gc=$1 graph=$2 dir=$3 config=$4
shift 4
command -v nvcc >/dev/null 2>&1 || { echo "nvcc not found: skipped"; exit 77; }
mkdir -p "$dir"
cd "$dir" || exit 1
"$gc" "$graph" --config "$config" --target cuda --gpu-arch sm_90 -o train_cuda "$@" 2>gcompile.err ||
    { echo "FAIL: gcompile"; cat gcompile.err; exit 1; }
# nvcc's warnings are shown (no -w) and must stay at zero
if grep -i "warning" gcompile.err; then echo "FAIL: nvcc warnings on the emitted program or the runtime"; exit 1; fi
[ -x train_cuda ] || { echo "FAIL: no executable"; exit 1; }
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "a GPU is present: the no-device check does not apply"; exit 0
fi
./train_cuda --steps 1 >out.txt 2>err.txt
rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: exit $rc without a GPU"; cat err.txt; exit 1; }
[ "$(wc -l <err.txt)" -eq 1 ] || { echo "FAIL: not one line:"; cat err.txt; exit 1; }
grep -q "^error: no CUDA device" err.txt || { echo "FAIL:"; cat err.txt; exit 1; }
echo "ok: $(cat err.txt)"
