#!/bin/sh
# e2e_fuse_onoff.sh GCOMPILE GRAPH CXX ROOT HOSTLIB BLAS CBLAS_INC WORKDIR KIND STEPS PRECISIONS TOL [FLAGS]
# One fusion on vs off on the CUDA target, both programs built against the
# SIMT emulator (config tiny + FLAGS), for each of PRECISIONS ("fp32 bf16"):
# the fused program (default fusions) and the one compiled with
# --no-fuse=KIND train STEPS steps each; per-step losses must agree within
# TOL (absolute) and the fused program must call the fused kernel (KIND
# classifier: gc_classifier; bgrad: gc_matmul_dgelu_bgrad) where the other
# does not. bgrad also counts, with $GCEMU_COUNTS, what each program
# launched per step (2 steps minus 1): fp32, the fused program takes
# cuBLASLt's DGELU_BGRAD epilogue once per fused call and micro-batch 0 (the
# others accumulate: no epilogue) and launches that many kernels fewer than
# the unfused one; bf16 never takes it (the same launches); each program's
# count equals gcompile's kernel_launches_per_step.
#
# TOL holds for fp32 (the programs differ in the order of fp32 sums only, and
# that difference grows smoothly). bf16 has a cliff instead: the two programs
# agree to fp32 rounding until one value (a weight's bf16 copy, an activation)
# lies within that rounding of a bf16 rounding boundary and rounds to the other
# neighbour, one bf16 unit (2^-8 relative) apart; from then on they are two
# bf16 trainings, each within bf16 error of the fp32 one. At which step that
# happens depends on the last bits of every sum, so on the host: the emulator's
# matmuls are OpenBLAS's sgemm, whose kernel is picked per CPU (DYNAMIC_ARCH:
# Haswell, SkylakeX, Cooperlake kernels flip at steps 11-15 of the classifier
# run, max |diff| 1.8e-4..2.9e-4; the Prescott kernels in none of 20 steps,
# 4.8e-7; thread counts change nothing). So bf16 is held to the bound that
# reasoning gives: at step k, |on - off| <= TOL + 2 * max over steps <= k of
# |off(bf16) - off(fp32)|, the unfused program's own bf16 error (|on - off| <=
# |on - fp32| + |off - fp32|, with the unfused program as the yardstick so a
# fused kernel's error does not widen its own tolerance). That needs the fp32
# programs first: list fp32 before bf16 in PRECISIONS.
set -u
gc=$1 graph=$2 cxx=$3 root=$4 hostlib=$5 blas=$6 cblas=$7 dir=$8 kind=$9
shift 9
steps=$1 precs=$2 tol=$3 flags=${4:-}
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$dir" && cd "$dir" && rm -f fp32.off.loss || exit 1
case $kind in
classifier) fn=gc_classifier ;;
bgrad) fn=gc_matmul_dgelu_bgrad ;;
*) fail "unknown fusion kind $kind" ;;
esac
. "$root/tests/cuda/emu_rt.sh"
emu_rt "$cxx" "$root" "$cblas" || fail "emulator build of the runtime"
inc=$EMU_INC
for prec in $precs; do
    for v in on off; do
        nf=
        [ $v = off ] && nf=--no-fuse=$kind
        "$gc" "$graph" --config tiny --target cuda --precision "$prec" $flags $nf --emit cuda -o $prec.$v.cu ||
            fail "gcompile --emit cuda ($prec $v)"
        n=$(grep -c "$fn" $prec.$v.cu)
        if [ $v = on ]; then [ "$n" -gt 0 ] || fail "no $fn in the fused program"
        else [ "$n" -eq 0 ] || fail "$fn in the program compiled with --no-fuse=$kind"; fi
        "$cxx" -std=c++17 -O2 -w $inc -x c++ $prec.$v.cu -x none $EMU_OBJS \
            "$hostlib" "$blas" -ljansson -fopenmp -lm ${GCOMPILE_CFLAGS:-} -o $prec.$v || fail "emulator build ($prec $v)"
        ./$prec.$v --steps "$steps" --seed 1 --log $prec.$v.jsonl >$prec.$v.out 2>&1 || fail "$prec $v: $(cat $prec.$v.out)"
        sed -n 's/.*"loss":\([^,}]*\).*/\1/p' $prec.$v.jsonl >$v.loss
        [ $kind = bgrad ] || continue
        # per step: launches and DGELU_BGRAD epilogues (the emulator's), launches (gcompile's)
        count() { GCEMU_COUNTS=1 ./$prec.$v --steps "$1" --seed 1 2>&1 >/dev/null |
            sed -n 's/^gcemu: launches \([0-9]*\) .*dgelu_bgrad epilogues \([0-9]*\)).*/\1 \2/p'; }
        set -- $(count 1) $(count 2)
        [ $# -eq 4 ] || fail "$prec $v: no launch counts from the emulator"
        eval "l_$v=$(($3 - $1)) e_$v=$(($4 - $2))"
        c=$("$gc" "$graph" --config tiny --target cuda --precision "$prec" $flags $nf --emit summary |
            sed -n 's/^kernel_launches_per_step: //p')
        [ "$c" = $(($3 - $1)) ] || fail "$prec $v: the emulator launched $(($3 - $1)) per step, gcompile counts $c"
    done
    if [ $kind = bgrad ]; then
        calls=$(grep -c "$fn" $prec.on.cu)   # fused calls per micro-batch (one per layer)
        want=$calls
        [ $prec = bf16 ] && want=0
        echo "$kind $prec: launches per step $l_off unfused, $l_on fused; $e_on DGELU_BGRAD epilogues ($calls fused calls)"
        [ "$e_off" -eq 0 ] || fail "$prec: DGELU_BGRAD epilogues in the unfused program"
        [ "$e_on" -eq "$want" ] || fail "$prec: $e_on DGELU_BGRAD epilogues per step, want $want"
        [ $((l_off - l_on)) -eq "$want" ] || fail "$prec: the fusion saved $((l_off - l_on)) launches per step, want $want"
    fi
    cp on.loss $prec.on.loss && cp off.loss $prec.off.loss || fail "cannot keep the $prec losses"
    ref=off.loss    # bf16: the fp32 unfused losses, for the bound above (fp32: no bf16 error, a zero margin)
    if [ $prec = bf16 ]; then
        [ -f fp32.off.loss ] || fail "bf16 needs the fp32 programs' losses: list fp32 before bf16"
        ref=fp32.off.loss
    fi
    how="tol $tol"
    [ $prec = bf16 ] && how="$how + 2 x the unfused program's bf16 error"
    paste on.loss off.loss $ref | awk -v steps="$steps" -v tol="$tol" -v what="$kind $prec" -v how="$how" '
        { d = $1 - $2; if (d < 0) d = -d; e = $2 - $3; if (e < 0) e = -e; if (e > emax) emax = e
          t = tol + 2 * emax; if (d > m) m = d; if (d / t > w) { w = d / t; wt = t }
          if (!(d <= t)) bad = 1 }
        END { printf "%s: on vs off, %d steps: max |diff| %.3g, worst step at %.2g of its tolerance %.3g (%s)\n",
                     what, NR, m, w, wt, how; exit bad || NR != steps }' ||
        { paste on.loss off.loss $ref; fail "the fused and unfused losses differ"; }
done
echo ok
