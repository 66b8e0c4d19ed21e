#!/bin/sh
# e2e_longrun.sh GCOMPILE GRAPH CXX ROOT HOSTLIB BLAS CBLAS_INC WORKDIR
# Issue 12's trainer features in the CUDA program (config tiny, plain
# schedule), built against the SIMT emulator: a checkpoint + resume gives the
# losses of an uninterrupted emulated run bit for bit; warmup, cosine decay
# and clipping (gc_device_sumsq / gc_device_scale as CUDA kernels) give the
# CPU target's losses within 1e-4 and gradient norms within 1e-3 (the
# gradients of the CUDA kernels differ from the CPU ones by up to 1e-4).
set -u
gc=$1 graph=$2 cxx=$3 root=$4 hostlib=$5 blas=$6 cblas=$7 dir=$8
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
. "$root/tests/cuda/emu_rt.sh"
emu_rt "$cxx" "$root" "$cblas" || fail "emulator build of the runtime"
"$gc" "$graph" --config tiny --target cuda --schedule plain --emit cuda -o train.cu || fail "gcompile --emit cuda"
"$cxx" -std=c++17 -O2 -w $EMU_INC \
    -x c++ train.cu -x none $EMU_OBJS \
    "$hostlib" "$blas" -ljansson -fopenmp -lm ${GCOMPILE_CFLAGS:-} -o train_emu || fail "emulator build of the emitted train.cu"
"$gc" "$graph" --config tiny --target cpu --schedule plain -o train_cpu || fail "gcompile --target cpu"
flags="--seed 1 --lr 1e-3 --warmup 2 --lr-schedule cosine --lr-final-frac 0.1 --grad-clip 0.5"
./train_cpu --steps 4 $flags --log cpu.jsonl >cpu.out 2>&1 || fail "train_cpu: $(cat cpu.out)"
./train_emu --steps 4 $flags --log emu.jsonl >emu.out 2>&1 || fail "train_emu: $(cat emu.out)"
fields() { sed -n 's/.*"loss":\([^,}]*\),.*"lr":\([^,}]*\),"grad_norm":\([^,}]*\).*/\1 \2 \3/p' "$1"; }
fields cpu.jsonl >cpu.txt
fields emu.jsonl >emu.txt
[ "$(wc -l <emu.txt)" -eq 4 ] || fail "emu.jsonl: $(cat emu.jsonl)"
paste cpu.txt emu.txt | awk '
    function rel(a, b) { d = a - b; if (d < 0) d = -d; return d / (b < 0 ? -b : b) }
    { printf "step %d: loss cpu %s cuda %s | lr %s %s | grad norm cpu %s cuda %s\n", NR, $1, $4, $2, $5, $3, $6
      if (!(rel($1, $4) <= 1e-4 && $2 == $5 && rel($3, $6) <= 1e-3)) bad = 1
      if ($3 > 0.5) clipped = 1 }
    END { if (bad) { print "FAIL: the CUDA program differs"; exit 1 }
          if (!clipped) { print "FAIL: no step was clipped (norms below 0.5)"; exit 1 } }' || exit 1
# the fused-opt program (updates inside the backward) clips with a norm pass (gc_update_apply: nothing
# in the first pass, the gradients scaled in the second): the same comparison with the plain CPU program
"$gc" "$graph" --config tiny --target cuda --emit cuda -o fused.cu || fail "gcompile --emit cuda (fused-opt)"
"$cxx" -std=c++17 -O2 -w $EMU_INC \
    -x c++ fused.cu -x none $EMU_OBJS \
    "$hostlib" "$blas" -ljansson -fopenmp -lm ${GCOMPILE_CFLAGS:-} -o fused_emu || fail "emulator build of the fused-opt program"
./fused_emu --steps 4 $flags --log fused.jsonl >fused.out 2>&1 || fail "fused_emu: $(cat fused.out)"
fields fused.jsonl >fused.txt
[ "$(wc -l <fused.txt)" -eq 4 ] || fail "fused.jsonl: $(cat fused.jsonl)"
paste cpu.txt fused.txt | awk '
    function rel(a, b) { d = a - b; if (d < 0) d = -d; return d / (b < 0 ? -b : b) }
    { printf "fused-opt step %d: loss cpu %s cuda %s | grad norm cpu %s cuda %s\n", NR, $1, $4, $3, $6
      if (!(rel($1, $4) <= 1e-4 && $2 == $5 && rel($3, $6) <= 1e-3)) bad = 1 }
    END { if (bad) { print "FAIL: the fused-opt CUDA program differs"; exit 1 } }' || exit 1
# checkpoint after 2 steps, resume to 4: the same 4 losses as the uninterrupted emulated run
./train_emu --steps 2 $flags --ckpt-dir ck >a.out 2>&1 || fail "train_emu --ckpt-dir: $(cat a.out)"
./train_emu --steps 4 $flags --resume ck --log res.jsonl >b.out 2>&1 || fail "train_emu --resume: $(cat b.out)"
grep -q '^resume: step 2 ' b.out || fail "no resume: $(cat b.out)"
sed -n '3,4p' emu.txt >want.txt
fields res.jsonl | cmp -s - want.txt || { fields res.jsonl; cat want.txt; fail "resumed CUDA losses differ"; }
# progress on a pseudo-terminal (script, util-linux): the status line shows MFU
# against the GPU's peak (the emulator reports sm_90 with 4 SMs) and the
# device memory in use (cudaMemGetInfo; the shim's counts the program's
# allocations: the plan's 0.04 GiB and a little scratch) against the plan and
# the reserve
script -qfec "./train_emu --steps 3 $flags" /dev/null >tty.raw </dev/null || fail "train_emu on a pseudo-terminal"
tr '\r' '\n' <tty.raw >tty.txt
grep -q '^compute: [0-9.]* GFLOP per step .* | MFU against [0-9.]* TFLOP/s (gcemu' tty.txt || fail "compute line: $(cat tty.txt)"
grep -Eq "^step 2/3 .* \| MFU [0-9.]+% \| ETA [0-9hms]+ \| mem 0\.0[0-9] GiB, plan 0\.0[0-9] \+ reserve 0\.75$(printf '\033')\[K\$" tty.txt ||
    fail "no CUDA status line with memory: $(cat tty.txt)"
grep -q '^done: 3 steps ' tty.txt || fail "no final summary"
echo "ok: schedule, clipping and resume in the emulated CUDA program; its status line"
