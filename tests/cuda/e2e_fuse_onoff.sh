#!/bin/sh
# e2e_fuse_onoff.sh GCOMPILE GRAPH CXX ROOT HOSTLIB BLAS CBLAS_INC WORKDIR KIND STEPS PRECISIONS TOL [FLAGS]
# One fusion on vs off on the CUDA target, both programs built against the
# SIMT emulator (config tiny + FLAGS), for each of PRECISIONS ("fp32 bf16"):
# the fused program (default fusions) and the one compiled with
# --no-fuse=KIND train STEPS steps each; per-step losses must agree within
# TOL (absolute) and the fused program must call the fused kernel (KIND
# classifier: gc_classifier) where the other does not.
set -u
gc=$1 graph=$2 cxx=$3 root=$4 hostlib=$5 blas=$6 cblas=$7 dir=$8 kind=$9
shift 9
steps=$1 precs=$2 tol=$3 flags=${4:-}
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$dir" && cd "$dir" || exit 1
rt=$root/runtime
case $kind in
classifier) fn=gc_classifier ;;
*) fail "unknown fusion kind $kind" ;;
esac
inc="-I$root/tests/cuda/shim -I$rt -I$rt/cuda -I$cblas"
for f in kernels_cuda device_cuda; do   # the runtime once, for every program
    "$cxx" -std=c++17 -O2 -w $inc -x c++ -c "$rt/cuda/$f.cu" ${GCOMPILE_CFLAGS:-} -o $f.o || fail "emulator build of $f.cu"
done
for prec in $precs; do
    for v in on off; do
        nf=
        [ $v = off ] && nf=--no-fuse=$kind
        "$gc" "$graph" --config tiny --target cuda --precision "$prec" $flags $nf --emit cuda -o $prec.$v.cu ||
            fail "gcompile --emit cuda ($prec $v)"
        n=$(grep -c "$fn" $prec.$v.cu)
        if [ $v = on ]; then [ "$n" -gt 0 ] || fail "no $fn in the fused program"
        else [ "$n" -eq 0 ] || fail "$fn in the program compiled with --no-fuse=$kind"; fi
        "$cxx" -std=c++17 -O2 -w $inc -x c++ $prec.$v.cu -x none kernels_cuda.o device_cuda.o \
            "$hostlib" "$blas" -fopenmp -lm ${GCOMPILE_CFLAGS:-} -o $prec.$v || fail "emulator build ($prec $v)"
        ./$prec.$v --steps "$steps" --seed 1 --log $prec.$v.jsonl >$prec.$v.out 2>&1 || fail "$prec $v: $(cat $prec.$v.out)"
        sed -n 's/.*"loss":\([^,}]*\).*/\1/p' $prec.$v.jsonl >$v.loss
    done
    paste on.loss off.loss | awk -v steps="$steps" -v tol="$tol" -v what="$kind $prec" '
        { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; if (!(d <= tol)) bad = 1 }
        END { printf "%s: on vs off, %d steps: max |diff| %.3g (tol %s)\n", what, NR, m, tol; exit bad || NR != steps }' ||
        { paste on.loss off.loss; fail "the fused and unfused losses differ"; }
done
echo ok
