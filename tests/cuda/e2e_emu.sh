#!/bin/sh
# e2e_emu.sh GCOMPILE GRAPH CXX ROOT HOSTLIB BLAS CBLAS_INC WORKDIR [STEPS [PRECISION [TOL [FLAGS]]]]
# The CUDA program gcompile emits (--target cuda, config tiny), compiled as
# C++ against the SIMT emulator (tests/cuda/shim) with the CUDA runtime, trains
# STEPS steps on the CPU; its losses must match the CPU target's (fp32) within
# TOL (relative; default 1e-4 for fp32, 2e-2 absolute-ish for bf16). Exercises the CUDA code generator and kernels_cuda.cu end to end
# without a GPU. Then 2 steps with --profile: the same losses and a table.
# FLAGS (one word list, e.g. "--micro-batches 2") go to both compiles.
set -u
gc=$1 graph=$2 cxx=$3 root=$4 hostlib=$5 blas=$6 cblas=$7 dir=$8 steps=${9:-5} prec=${10:-fp32}
tol=${11:-1e-4} flags=${12:-}
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$dir" && cd "$dir" || exit 1
. "$root/tests/cuda/emu_rt.sh"
emu_rt "$cxx" "$root" "$cblas" || fail "emulator build of the runtime"
"$gc" "$graph" --config tiny --target cuda --precision "$prec" $flags --emit cuda -o train.cu || fail "gcompile --emit cuda"
# shellcheck disable=SC2086
"$cxx" -std=c++17 -O2 -w $EMU_INC -x c++ train.cu -x none $EMU_OBJS \
    "$hostlib" "$blas" -ljansson -fopenmp -lm ${GCOMPILE_CFLAGS:-} -o train_emu || fail "emulator build of the emitted train.cu"
"$gc" "$graph" --config tiny --target cpu $flags -o train_cpu || fail "gcompile --target cpu"
./train_cpu --steps "$steps" --seed 1 --log cpu.jsonl >cpu.out 2>&1 || fail "train_cpu: $(cat cpu.out)"
./train_emu --steps "$steps" --seed 1 --log emu.jsonl >emu.out 2>&1 || fail "train_emu: $(cat emu.out)"
# the shim's cudaMemGetInfo counts the program's allocations (no context, no kernel images): beyond
# the plan's regions the program allocates little (its scratch), well inside the reserve
grep -q "^device memory after the first step: .* other .*: ok)$" emu.out ||
    fail "the emulated reserve line: $(grep '^device memory' emu.out)"
losses() { sed -n 's/.*"loss":\([^,}]*\).*/\1/p' "$1"; }
losses cpu.jsonl >cpu.loss
losses emu.jsonl >emu.loss
[ "$(wc -l <cpu.loss)" -eq "$steps" ] || fail "cpu.jsonl has $(wc -l <cpu.loss) losses, want $steps"
paste cpu.loss emu.loss | awk -v steps="$steps" -v tol="$tol" '
    { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1);
      printf "step %d: cpu %s cuda(emulated) %s rel %.2e\n", NR, $1, $2, r;
      if (!(r <= tol)) bad = 1 }
    END { if (NR != steps || bad) { print "FAIL: losses differ"; exit 1 } print "ok" }'
[ $? -eq 0 ] || exit 1
# the global gradient norm in the log (fused-opt: added up by the updates,
# grad_norm.c; with micro-batches: measured after the backward) against the CPU's
norms() { sed -n 's/.*"grad_norm":\([^,}]*\).*/\1/p' "$1"; }
normtol=1e-3
[ "$prec" = bf16 ] && normtol=5e-2
paste -d' ' "$(norms cpu.jsonl >cpu.norm; echo cpu.norm)" "$(norms emu.jsonl >emu.norm; echo emu.norm)" |
    awk -v steps="$steps" -v tol="$normtol" '
    { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d; if (!(d <= tol)) bad = 1 }
    END { printf "grad norms: max rel diff %.2e over %d steps (tol %s)\n", m, NR, tol; exit bad || NR != steps }' ||
    { paste cpu.norm emu.norm; fail "gradient norms differ"; }
# --profile on the CUDA program: the same losses, and a table whose rows name the CUDA step's ops
./train_emu --steps 2 --seed 1 --profile --log prof.jsonl >prof.out 2>&1 || fail "train_emu --profile: $(cat prof.out)"
losses prof.jsonl >prof.loss
head -2 emu.loss | cmp -s - prof.loss || { paste prof.loss emu.loss; fail "--profile changed the emulated losses"; }
grep -q '^profile: [0-9]* kernels and shapes, mean over 1 step:' prof.out || { cat prof.out; fail "no profile table"; }
if grep -q 'gc_matmul_bias(' train.cu; then   # a graph with biases (GPT-2; not Llama)
    grep -q ' fwd matmul_bias ' prof.out || { cat prof.out; fail "no matmul_bias row in the profile"; }
fi
echo "profile ok"
# Launches per step: what the emulator launched in 2 steps minus in 1 step
# equals the compiler's kernel_launches_per_step (ir/ops.c op_launches).
want=$("$gc" "$graph" --config tiny --target cuda --precision "$prec" $flags --emit summary | sed -n 's/^kernel_launches_per_step: //p')
count() { GCEMU_COUNTS=1 ./train_emu --steps "$1" --seed 1 2>&1 >/dev/null | sed -n 's/^gcemu: launches \([0-9]*\).*/\1/p'; }
n2=$(count 1) n3=$(count 2)
[ -n "$want" ] && [ -n "$n2" ] && [ -n "$n3" ] || fail "launch counts missing (compiler '$want', emulator '$n2' '$n3')"
[ $((n3 - n2)) -eq "$want" ] || fail "the emulator launched $((n3 - n2)) kernels per step, gcompile counts $want"
echo "launches per step: $want (compiler) = $((n3 - n2)) (emulator) ok"
# bf16: the plan labels the weight copies, which run only after the host wrote
# the masters (GC_PHASE_PARAMS), phase "params", and nothing else
if [ "$prec" = bf16 ]; then
    "$gc" "$graph" --config tiny --target cuda --precision bf16 $flags --emit plan -o plan.json || fail "--emit plan"
    np=$(grep -c '"phase": "params"' plan.json)
    nc=$(grep -B2 '"phase": "params"' plan.json | grep -c '"name": ".*\.bf16"')
    [ "$np" -gt 0 ] && [ "$np" -eq "$nc" ] || fail "plan: $np ops of phase params, $nc of them bf16 weight copies"
    echo "plan: $np bf16 weight copies in phase params ok"
    # the same label in --emit ir (one line per op) and in the SVG's phase band
    ni=$("$gc" "$graph" --config tiny --target cuda --precision bf16 $flags --emit ir | grep -c '^ *[0-9]* *params .*\.bf16 = copy(')
    [ "$ni" -eq "$np" ] || fail "--emit ir: $ni copies labelled params, the plan has $np"
    "$gc" "$graph" --config tiny --target cuda --precision bf16 $flags --emit plan-svg | grep -q '<title>params: steps' ||
        fail "--emit plan-svg: no params segment in the phase band"
    echo "ir and svg: the copies are labelled params ok"
fi
# Host synchronisations per step under --log (the gradient norm on the device,
# read once; issue 24): at most 4, from the emulator's count for 2 steps
# minus 1 step (the first step's one-time waits cancel)
syncs() { GCEMU_COUNTS=1 ./train_emu --steps "$1" --seed 1 --log sync$1.jsonl 2>&1 >/dev/null |
          sed -n 's/^gcemu: launches .* syncs \([0-9]*\)$/\1/p'; }
s1=$(syncs 1) s2=$(syncs 2)
[ -n "$s1" ] && [ -n "$s2" ] || fail "sync counts missing (emulator '$s1' '$s2')"
[ $((s2 - s1)) -le 4 ] || fail "--log makes $((s2 - s1)) host synchronisations per step, want <= 4"
echo "host synchronisations per step under --log: $((s2 - s1)) (<= 4) ok"
# --sample (the classifier fused unless FLAGS say otherwise: one row's logits into the planned sample
# row, gc_matmul[_bf16_f32] with M = 1): from the CPU target's checkpoint, fp32 draws the CPU's tokens
# (logits within TF32 rounding; a draw that close to a boundary would be a 1e-4 event), bf16 a sample
./train_cpu --steps 3 --seed 1 --save m.bin >/dev/null 2>&1 || fail "train_cpu --save"
sample() { "./$1" --init m.bin --steps 0 --seed 3 --sample 24 2>&1 | sed '1,/^--- sample/d'; }   # may hold newlines
sample train_cpu >cpu.sample
sample train_emu >emu.sample
[ "$(wc -c <emu.sample)" -ge 25 ] || fail "emulated --sample: $(cat emu.sample)"
if [ "$prec" = fp32 ]; then
    cmp -s cpu.sample emu.sample || { cat cpu.sample emu.sample; fail "the CUDA program sampled other tokens"; }
fi
echo "sample ok: $(cat emu.sample)"
