#!/bin/sh
# e2e_micro.sh GCOMPILE GRAPH CXX ROOT HOSTLIB BLAS CBLAS_INC WORKDIR STEPS TOL [FLAGS]
# Gradient accumulation on the CUDA target, built against the SIMT emulator
# (config tiny + FLAGS, fp32): the programs compiled with --micro-batches 1,
# 2 and 4 train STEPS steps each; the losses of K = 2 and 4 must match K = 1's
# within TOL (absolute), as tests/train/train.sh's `micro` check does on the
# CPU. On CUDA the fused bias gradient (fuse_bgrad.c) takes cuBLASLt's
# DGELU_BGRAD epilogue, which overwrites, in micro-batch 0 and an
# accumulating column sum in the others: each program must take the epilogue
# once per fused call per step (not once per micro-batch).
set -u
gc=$1 graph=$2 cxx=$3 root=$4 hostlib=$5 blas=$6 cblas=$7 dir=$8 steps=$9
shift 9
tol=$1 flags=${2:-}
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$dir" && cd "$dir" || exit 1
. "$root/tests/cuda/emu_rt.sh"
emu_rt "$cxx" "$root" "$cblas" || fail "emulator build of the runtime"
inc=$EMU_INC
for k in 1 2 4; do
    "$gc" "$graph" --config tiny --target cuda $flags --micro-batches $k --emit cuda -o k$k.cu ||
        fail "gcompile --micro-batches $k"
    "$cxx" -std=c++17 -O2 -w $inc -x c++ k$k.cu -x none $EMU_OBJS \
        "$hostlib" "$blas" -ljansson -fopenmp -lm ${GCOMPILE_CFLAGS:-} -o k$k || fail "emulator build (K=$k)"
    ./k$k --steps "$steps" --seed 1 --log k$k.jsonl >k$k.out 2>&1 || fail "K=$k: $(cat k$k.out)"
    sed -n 's/.*"loss":\([^,}]*\).*/\1/p' k$k.jsonl >k$k.txt
    [ "$(wc -l <k$k.txt)" -eq "$steps" ] || fail "K=$k: expected $steps losses"
    calls=$(grep -c "gc_matmul_dgelu_bgrad(" k$k.cu)
    [ "$calls" -gt 0 ] || fail "K=$k: no fused bias gradient (gc_matmul_dgelu_bgrad) in the program"
    e() { GCEMU_COUNTS=1 ./k$k --steps "$1" --seed 1 2>&1 >/dev/null |
        sed -n 's/^gcemu: launches .*dgelu_bgrad epilogues \([0-9]*\)).*/\1/p'; }
    e1=$(e 1) e2=$(e 2)
    [ -n "$e1" ] && [ -n "$e2" ] || fail "K=$k: no epilogue counts from the emulator"
    echo "K=$k: $((e2 - e1)) DGELU_BGRAD epilogues per step ($calls fused calls)"
    [ $((e2 - e1)) -eq "$calls" ] || fail "K=$k: $((e2 - e1)) DGELU_BGRAD epilogues per step, want $calls"
done
for k in 2 4; do
    paste k1.txt k$k.txt | awk -v k=$k -v tol="$tol" '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
        END { printf "K=%d: max |loss - loss(K=1)| over %d steps = %.2e (tol %s)\n", k, NR, m, tol; exit !(m <= tol) }' ||
        { paste k1.txt k$k.txt; fail "K=$k differs from K=1"; }
done
echo ok
