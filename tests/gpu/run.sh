#!/bin/sh
# tests/gpu/run.sh [--dry-run] — the one-shot GPU check (issue 24): one
# command that ends within TOTAL seconds (480) on an H100/H200, in the order
# of what we most need to know, each part with its own budget (a part is cut
# at its budget, and never runs past the overall deadline):
#   (a) build (link the sm_90 objects of prepare.sh; compile first on another
#       architecture), then compute-sanitizer on tiny: memcheck (2 steps,
#       fp32 and bf16), racecheck on the attention kernels (1 step, SIMT fp32
#       and tensor-core bf16);
#   (b) tiny, 10 steps, against the CPU target's losses: fp32 without TF32
#       (1e-4), fp32 with TF32 (2.5e-3) and bf16 (2e-2); tiny Llama (RMSNorm,
#       RoPE, SwiGLU, GQA attention) fp32 without TF32 and bf16 likewise;
#   (c) GPT-2 124M bf16 at T=1024 with the largest B whose plan + reserve
#       fits the free memory: tok/s, MFU, planned against measured device
#       memory (the program's "device memory after the first step" line,
#       which must be within gcompile's reserve), then a short --profile;
#   (d) the fused attention and classifier kernels timed against what the
#       unfused program runs (cuBLASLt + mask/softmax/cross-entropy; the
#       kernel test's "bench" group, which also checks that they agree),
#       then every kernel against the CPU kernels in what time is left;
#   (e) GPT-2 124M fp32 (TF32) at its largest B: tok/s, MFU, memory;
#   (e2) Llama 3.2 1B bf16, B=2, T=2048: tok/s, MFU, memory (the GQA kernels' first timing);
#   (f) NCCL: tiny on 2 data-parallel ranks, only if 2 GPUs and mpirun exist.
# Needs gpu_bundle/ from tests/gpu/prepare.sh. Every result goes to
# $OUT/summary.txt (default /tmp/gpu_out) and to stdout as it is measured, so
# a run that is killed still leaves what it measured; stdout is the summary
# alone (about 60 lines, well within a 12,000-character tail), the programs'
# own output is in $OUT/*.txt (and all of it in $OUT/outputs.tgz at the end). Exit 0 only if everything that ran passed.
#
# --dry-run: on a machine without a GPU, check the script: sm_90 and 140 GiB
# free are assumed, the build runs for real (it compiles what the bundle's
# sm_90 objects lack, then links; not cut at its budget, its time reported),
# nothing else runs; each part prints its budget and the last line is
# "total budget: N s".
set -u
cd "$(dirname "$0")/../.." || exit 1
dry=0
case ${1:-} in
--dry-run) dry=1 ;;
"") ;;
*) echo "usage: sh tests/gpu/run.sh [--dry-run]" >&2; exit 2 ;;
esac
# the budgets (s); their sum is the overall deadline
# (the build links prepared objects in seconds; 120 s is for compiling them on another architecture)
A_BUILD=120 A_SAN=70 B_TINY=50 C_124=70 D_KERN=55 E_124=45 E2_LLAMA=40 F_NCCL=30
TOTAL=$((A_BUILD + A_SAN + B_TINY + C_124 + D_KERN + E_124 + E2_LLAMA + F_NCCL))
b=gpu_bundle
out=${OUT:-/tmp/gpu_out}
exe=$out/bin
start=$(date +%s)
deadline=$((start + TOTAL))
mkdir -p "$out" && : >"$out/summary.txt" || exit 1
log() { echo "$*" | tee -a "$out/summary.txt"; }
fail=0
bad() { log "FAIL: $*"; fail=1; }
# seconds for a part: its budget, or what is left before the deadline
left() { l=$((deadline - $(date +%s))); [ "$1" -lt "$l" ] && l=$1; [ "$l" -gt 0 ] && echo "$l" || echo 0; }
# part NAME BUDGET: opens a part; false (and a SKIP line) when no time is left or in a dry run
part() {
    pt0=$(date +%s) pbudget=$(left "$2")
    log "== ($1) budget $2 s, $pbudget s left for it, at +$((pt0 - start)) s"
    [ $dry -eq 1 ] && { log "   dry run: not run"; return 1; }
    [ "$pbudget" -ge 5 ] || { log "   SKIP: the deadline is reached"; return 1; }
    return 0
}
# t SECONDS CMD...: CMD with a limit of min(SECONDS, what is left of the part)
t() {
    s=$1; shift
    r=$((pt0 + pbudget - $(date +%s))); [ "$s" -gt "$r" ] && s=$r
    [ "$s" -ge 2 ] || { echo "(no time left in this part)"; return 124; }
    timeout -k 5 "$s" "$@"
}
# loss_check NAME CPU.jsonl GPU.jsonl TOL STEPS: the largest |cpu - gpu| loss over the steps; true if within TOL
loss_check() {
    r=$(paste -d' ' "$2" "$3" 2>/dev/null | awk -v name="$1" -v tol="$4" -v want="$5" '
        { match($0, /"loss":[-0-9.e+]*/); a = substr($0, RSTART + 7, RLENGTH - 7); rest = substr($0, RSTART + RLENGTH);
          if (!match(rest, /"loss":[-0-9.e+]*/)) { bad = 1; next }
          c = substr(rest, RSTART + 7, RLENGTH - 7); d = a - c; if (d < 0) d = -d; if (d > m) m = d; n++ }
        END { ok = n == want && !bad && m <= tol
              printf "   %s: %d steps, max |cpu - gpu| loss %.2e (limit %s): %s\n", name, n, m, tol, ok ? "PASS" : "FAIL" }')
    log "$r"
    case $r in *": PASS") return 0 ;; esac
    return 1
}
# the 124M summary of one run: its device/memory/plan lines and the last progress lines
g124_summary() {
    grep -E "^(device|memory|plan)" "$out/$1.txt" | cut -c1-300 | sed 's/^/   /' | tee -a "$out/summary.txt"
    tail -2 "$out/$1.txt" | cut -c1-300 | sed 's/^/   /' | tee -a "$out/summary.txt"
    grep -q '^device memory after the first step: .*: ok)' "$out/$1.txt" ||
        bad "$1: no reserve measurement, or the reserve was EXCEEDED"
}

log "== gpu check $(date -u +%Y-%m-%dT%H:%MZ)$([ $dry -eq 1 ] && echo ' (dry run)'), total budget $TOTAL s"
[ -d "$b" ] || { log "no $b/: run tests/gpu/prepare.sh first (on a machine with the build deps); nothing built"
                 log "total budget: $TOTAL s"; exit 1; }
export LD_LIBRARY_PATH="$PWD/$b/lib${CUDA_HOME:+:$CUDA_HOME/lib64}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PATH=$PATH:/usr/local/cuda/bin
if [ $dry -eq 1 ]; then
    arch=90 free=$((140 << 30)) ngpu=1
    log "dry run: assumed sm_90, $free bytes free, 1 GPU"
else
    nvidia-smi -L 2>&1 | head -4 | tee -a "$out/summary.txt"
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
    [ -n "$arch" ] || { bad "no compute capability from nvidia-smi"; log "total budget: $TOTAL s"; exit 1; }
    free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
    free=$((free * 1024 * 1024))
    ngpu=$(nvidia-smi -L | grep -c '^GPU')
fi
# GPT-2 124M: the largest B whose plan (+ gcompile's reserve, prepare.sh) fits
g124=""
for prec in bf16 fp32; do
    best=""
    for B in 4 8 16 24 32 48 64; do
        need=$(cat "$b/g124_${prec}_B$B.bytes" 2>/dev/null)
        [ -n "$need" ] && [ "$need" -lt "$free" ] && best=$B
    done
    log "124M $prec: $free bytes free; largest B that fits: ${best:-none}"
    [ -n "$best" ] && g124="$g124 g124_${prec}_B$best"
done
llama=""
need=$(cat "$b/llama1b_bf16.bytes" 2>/dev/null)
[ -n "$need" ] && [ "$need" -lt "$free" ] && llama=llama1b_bf16
log "Llama 1B bf16 B=2 T=2048: needs ${need:-?} bytes: $([ -n "$llama" ] && echo fits || echo 'does not fit, skipped')"
run_progs="tiny_fp32 tiny_tf32 tiny_bf16 llama_tiny_fp32 llama_tiny_bf16$g124${llama:+ $llama}"
[ "$ngpu" -ge 2 ] && [ -f "$b/tiny_dp2.cu" ] && run_progs="$run_progs tiny_dp2"

# ---- (a) build, then the sanitizers on tiny
pt0=$(date +%s) pbudget=$(left $A_BUILD)
log "== (a) build: budget $A_BUILD s"
obj=$b/obj_sm$arch
[ "$(cat "$obj/arch" 2>/dev/null)" = "$arch" ] || obj=$out/obj_sm$arch   # compile here: no prepared objects
# a dry run is not cut at the budget: this machine is not the GPU one (its time is reported)
blimit=$pbudget; [ $dry -eq 1 ] && blimit=3600
LINK="$run_progs" timeout -k 5 "$blimit" sh tests/gpu/build.sh "$arch" "$b" "$obj" "$exe" \
    >"$out/build.txt" 2>&1 || { bad "build (exit $?): $(head -c 600 "$out/build.txt")"; }
log "   build: $(( $(date +%s) - pt0 )) s ($([ "$obj" = "$b/obj_sm$arch" ] && echo "the prepared sm_$arch objects" ||
    echo "sm_$arch objects in $obj"), stale ones compiled, then linked), $(cat "$obj"/nvcc_*.txt "$obj"/ptxas_*.txt 2>/dev/null | grep -ci 'warning') nvcc warning lines"
grep -h 'bytes stack frame' "$obj"/ptxas_*.txt 2>/dev/null | awk '$1 > 0 || $5 > 0 { n++ } END { printf "   ptxas: %d kernels with a stack frame or spills\n", n }' |
    tee -a "$out/summary.txt"
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
if part "a: sanitizers" "$A_SAN"; then
    if [ -z "$san" ]; then
        bad "compute-sanitizer not found"
    else
        # most wanted first: memcheck on GPT-2 and Llama (fp32, then bf16), then racecheck on their attention
        for p in tiny_fp32 llama_tiny_fp32 tiny_bf16 llama_tiny_bf16; do
            [ -x "$exe/$p" ] || continue
            t 15 "$san" --tool memcheck --error-exitcode 3 "$exe/$p" --steps 2 --lr 1e-3 >"$out/memcheck_$p.txt" 2>&1 || fail=1
            log "   memcheck $p: $(grep -m1 'ERROR SUMMARY' "$out/memcheck_$p.txt" || tail -1 "$out/memcheck_$p.txt" | cut -c1-200)"
        done
        for p in tiny_fp32 tiny_bf16 llama_tiny_fp32 llama_tiny_bf16; do
            [ -x "$exe/$p" ] || continue
            t 15 "$san" --tool racecheck --kernel-name kns=attention --error-exitcode 3 "$exe/$p" --steps 1 --lr 1e-3 \
                >"$out/racecheck_$p.txt" 2>&1 || fail=1
            log "   racecheck attention $p: $(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$out/racecheck_$p.txt" ||
                tail -1 "$out/racecheck_$p.txt" | cut -c1-200)"
        done
    fi
fi

# ---- (b) tiny against the CPU target
if part b "$B_TINY"; then
    # fp32 without TF32 against fp32 on the CPU: the same arithmetic in another order, ~1e-6 relative over
    # 10 steps, 1e-4 absolute on a loss of ~5 leaves room; TF32 rounds every matmul operand to 10 mantissa
    # bits (2^-11 relative): 2.5e-3 absolute is one such rounding of the loss (~5); bf16 (2^-8 per stored
    # activation): 2e-2
    # (the same tolerances for tiny Llama: its loss is also ~5, and its matmuls and norms round alike)
    for pt in "tiny_fp32 1e-4 tiny_cpu" "tiny_tf32 2.5e-3 tiny_cpu" "tiny_bf16 2e-2 tiny_cpu" \
              "llama_tiny_fp32 1e-4 llama_tiny_cpu" "llama_tiny_bf16 2e-2 llama_tiny_cpu"; do
        set -- $pt
        [ -x "$exe/$1" ] || { bad "$1 not built"; continue; }
        t 12 "$exe/$1" --steps 10 --lr 1e-3 --log "$out/$1.jsonl" >"$out/$1.txt" 2>&1 ||
            bad "$1 exit $?: $(tail -1 "$out/$1.txt" | cut -c1-200)"
        loss_check "$1" "$b/$3.jsonl" "$out/$1.jsonl" "$2" 10 || fail=1
    done
fi

# ---- (c) GPT-2 124M bf16
for p in $g124; do
    case $p in g124_bf16_*) ;; *) continue ;; esac
    part c "$C_124" || break
    [ -x "$exe/$p" ] || { bad "$p not built"; break; }
    t 45 "$exe/$p" --steps 12 --data "$b/corpus.txt" --log "$out/$p.jsonl" >"$out/$p.txt" 2>&1 || bad "$p exit $?"
    g124_summary "$p"
    t 25 "$exe/$p" --steps 3 --data "$b/corpus.txt" --profile >"$out/${p}_profile.txt" 2>&1 || bad "$p --profile exit $?"
    sed -n '/^profile:/,$p' "$out/${p}_profile.txt" | head -12 | cut -c1-200 | sed 's/^/   /' | tee -a "$out/summary.txt"
done

# ---- (d) fused against unfused kernels, then every kernel against the CPU's
if part d "$D_KERN"; then
    if [ -x "$exe/test_kernels" ]; then
        t 30 "$exe/test_kernels" bench >"$out/bench.txt" 2>&1 || bad "kernel bench exit $?"
        grep -E '^(bench|FAIL)' "$out/bench.txt" | cut -c1-400 | sed 's/^/   /' | tee -a "$out/summary.txt"
        t 60 "$exe/test_kernels" >"$out/kernels.txt" 2>&1 || bad "kernel tests exit $? (124: cut at the part's budget)"
        grep '^FAIL' "$out/kernels.txt" | head -5 | cut -c1-300 | sed 's/^/   /' | tee -a "$out/summary.txt"
        log "   kernel tests: $(grep -E '^[a-z_0-9]+ +[0-9]+ checks' "$out/kernels.txt" | wc -l) groups done; $(tail -1 "$out/kernels.txt" | cut -c1-200)"
    else
        bad "test_kernels not built"
    fi
fi

# ---- (e) GPT-2 124M fp32 (TF32)
for p in $g124; do
    case $p in g124_fp32_*) ;; *) continue ;; esac
    part e "$E_124" || break
    [ -x "$exe/$p" ] || { bad "$p not built"; break; }
    t 50 "$exe/$p" --steps 8 --data "$b/corpus.txt" --log "$out/$p.jsonl" >"$out/$p.txt" 2>&1 || bad "$p exit $?"
    g124_summary "$p"
done

# ---- (e2) Llama 3.2 1B bf16
if [ -n "$llama" ] && part e2 "$E2_LLAMA"; then
    if [ -x "$exe/$llama" ]; then
        t 38 "$exe/$llama" --steps 4 --data "$b/corpus.txt" --log "$out/$llama.jsonl" >"$out/$llama.txt" 2>&1 ||
            bad "$llama exit $? (124: cut at the part's budget)"
        g124_summary "$llama"
    else
        bad "$llama not built"
    fi
fi

# ---- (f) NCCL, 2 ranks
if [ "$ngpu" -lt 2 ] || ! command -v mpirun >/dev/null 2>&1; then
    log "== (f) budget $F_NCCL s: SKIP ($ngpu GPU(s)$(command -v mpirun >/dev/null 2>&1 || echo ', no mpirun'))"
elif part f "$F_NCCL"; then
    # one process per GPU (device_cuda.cu: GC_CUDA_DEVICE, else the rank's local index); the same global
    # batch, so the CPU target's losses within TF32's 2.5e-3 (b)
    t 25 mpirun --allow-run-as-root --oversubscribe -np 2 "$exe/tiny_dp2" --steps 10 --lr 1e-3 \
        --log "$out/tiny_dp2.jsonl" >"$out/tiny_dp2.txt" 2>&1 || bad "tiny_dp2 exit $?"
    loss_check tiny_dp2 "$b/tiny_cpu.jsonl" "$out/tiny_dp2.jsonl" 2.5e-3 10 || fail=1
fi

log "gpu check: $([ $dry -eq 1 ] && echo "dry run done" || { [ $fail -eq 0 ] && echo PASS || echo FAIL; }) in $(( $(date +%s) - start )) s"
log "total budget: $TOTAL s"
# every program's own output in one file beside the summary (some runners bring back few files)
(cd "$out" && tar czf outputs.tgz --exclude=outputs.tgz --exclude=bin -- *.txt *.jsonl 2>/dev/null)
exit $fail
