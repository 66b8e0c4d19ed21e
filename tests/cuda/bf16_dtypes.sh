#!/bin/sh
# bf16_dtypes.sh GCOMPILE CXX ROOT WORKDIR GRAPH...
# Each graph's --precision bf16 CUDA program must compile as C++ against the
# emulator's headers (tests/cuda/shim): every kernel call gets the dtypes its
# runtime function takes (passes/precision.c legalize; issue 20: a second
# cross-entropy term, an activation's gradient summed by reduce_rows and a
# mean as the loss handed bf16 pointers to float slots). Syntax only (~1 s a
# graph); the random-graph tester runs them (regress/bf16_*.graph, levers
# cuda and cuda_bf16) against PyTorch.
set -u
gc=$1 cxx=$2 root=$3 dir=$4
shift 4
mkdir -p "$dir" || exit 1
rc=0
for g in "$@"; do
    b=$dir/$(basename "$g" .graph)
    if ! "$gc" "$g" --target cuda --precision bf16 --emit cuda -o "$b.cu" 2>"$b.err"; then
        echo "FAIL: $g: gcompile: $(tail -3 "$b.err")"; rc=1; continue
    fi
    if ! "$cxx" -std=c++17 -fsyntax-only -w -I"$root/tests/cuda/shim" -I"$root/runtime" -I"$root/runtime/cuda" \
            -x c++ "$b.cu" 2>"$b.cxx"; then
        echo "FAIL: $g: the bf16 program does not compile:"; grep -m 3 error "$b.cxx"; rc=1; continue
    fi
    echo "ok: $g"
done
exit $rc
