#!/bin/sh
# The CUDA program with offload under the SIMT emulator (tests/cuda/shim:
# streams run in order, events complete at once, a host function runs when
# queued): the emitted train.cu with --offload and without, each built
# against the emulator, must give bit-identical losses (the emulator's
# kernels, the host's AdamW: the device's AdamW arithmetic on the host).
# usage: emu.sh GCOMPILE GRAPH CXX ROOT HOSTLIB BLAS CBLAS_INC WORKDIR PRECISION "FLAGS"
set -u
gc=$1 graph=$2 cxx=$3 root=$4 hostlib=$5 blas=$6 cblas=$7 dir=$8 prec=$9 flags=${10}
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$dir" && cd "$dir" || exit 1
. "$root/tests/cuda/emu_rt.sh"
# the runtime (built once by the build, or here), then the two programs
emu_rt "$cxx" "$root" "$cblas" || fail "emulator build of the runtime"
inc=$EMU_INC
for o in none offload; do
    f="$flags --offload none"   # the last --offload wins: the same levers, nothing offloaded
    [ $o = offload ] && f="$flags"
    # shellcheck disable=SC2086
    "$gc" "$graph" --config tiny --target cuda --precision "$prec" $f --emit cuda -o $o.cu || fail "gcompile $f"
    # shellcheck disable=SC2086
    "$cxx" -std=c++17 -O2 -w $inc -x c++ $o.cu -x none $EMU_OBJS "$hostlib" "$blas" -ljansson -fopenmp -lm \
        ${GCOMPILE_CFLAGS:-} -o train_$o || fail "emulator build of $o.cu"
    ./train_$o --steps 4 --seed 1 --log $o.jsonl >$o.out 2>&1 || { cat $o.out; fail "train_$o"; }
    sed -n 's/.*"loss":\([^,}]*\).*"grad_norm":\([^,}]*\).*/\1 \2/p' $o.jsonl >$o.txt
done
grep -q 'gc_host_update(' offload.cu && grep -q 'gc_copy(' offload.cu || fail "offload.cu has no host update or copies"
[ "$(wc -l <none.txt)" -eq 4 ] || fail "none: $(cat none.txt)"
cmp -s none.txt offload.txt || { paste none.txt offload.txt; fail "$prec $flags: the emulated losses differ"; }
echo "ok: $prec $flags: 4 steps bit-identical to --offload none under the emulator (last $(tail -1 none.txt))"
