#!/bin/sh
# The GPU check (issue: CUDA target). Needs gpu_bundle/ from tests/gpu/prepare.sh.
# Builds the emitted CUDA programs with nvcc, trains the tiny model 10 steps and
# compares with the CPU target's losses (fp32: 1e-4), then GPT-2 124M at T=1024
# with the largest B whose plan fits the card: tok/s, MFU, planned vs measured
# memory. Writes everything to $OUT (or /tmp/gpu_out). Under 5 minutes.
set -u
cd "$(dirname "$0")/../.."
b=gpu_bundle
out=${OUT:-/tmp/gpu_out}
mkdir -p "$out"
[ -d "$b" ] || { echo "no $b: run tests/gpu/prepare.sh first (on a machine with the build deps)"; exit 1; }
log() { echo "$*" | tee -a "$out/summary.txt"; }
log "== gpu check $(date -u +%Y-%m-%dT%H:%MZ)"
nvidia-smi -L | tee -a "$out/summary.txt"
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
build() {  # build SRC EXE
    nvcc -O3 -std=c++17 -w -gencode "arch=compute_$arch,code=sm_$arch" -Iruntime -Iruntime/cuda \
        -o "$2" "$1" runtime/cuda/kernels_cuda.cu runtime/cuda/device_cuda.cu "$b/libgcrt_host.a" \
        -lcublasLt -lcublas -Xcompiler -fopenmp -lm
}
fail=0
# 1. tiny model against the CPU target's losses
t0=$(date +%s)
build "$b/tiny_fp32.cu" "$out/tiny_fp32" || { log "FAIL: nvcc tiny"; exit 1; }
log "nvcc tiny: $(( $(date +%s) - t0 )) s"
"$out/tiny_fp32" --steps 10 --lr 1e-3 --log "$out/tiny_fp32.jsonl" >"$out/tiny_fp32.txt" 2>&1 || fail=1
paste -d' ' "$b/tiny_cpu.jsonl" "$out/tiny_fp32.jsonl" | awk '
    { match($0, /"loss":[-0-9.e+]*/); a = substr($0, RSTART + 7, RLENGTH - 7); rest = substr($0, RSTART + RLENGTH);
      match(rest, /"loss":[-0-9.e+]*/); c = substr(rest, RSTART + 7, RLENGTH - 7);
      d = a - c; if (d < 0) d = -d; if (d > m) m = d; printf "step %2d cpu %.6f cuda %.6f |diff| %.2e\n", NR, a, c, d }
    END { printf "tiny fp32: max |cpu - cuda| = %.2e (limit 1e-4): %s\n", m, m <= 1e-4 ? "PASS" : "FAIL"; exit m > 1e-4 }' \
    | tee -a "$out/summary.txt" || fail=1
# 2. GPT-2 124M, T=1024, the largest B whose plan fits the free memory
free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
free=$((free * 1024 * 1024))
best=""
for B in 4 8 16 24 32 48 64; do
    need=$(cat "$b/g124_B$B.bytes")
    [ "$need" -lt $((free - 1024 * 1024 * 1024)) ] && best=$B
done
log "free device memory: $free bytes; largest B that fits: ${best:-none}"
if [ -n "$best" ]; then
    t0=$(date +%s)
    build "$b/g124_B$best.cu" "$out/g124" || { log "FAIL: nvcc 124M"; exit 1; }
    log "nvcc 124M: $(( $(date +%s) - t0 )) s"
    "$out/g124" --steps 12 --log "$out/g124.jsonl" >"$out/g124.txt" 2>&1 || fail=1
    grep -E "^(device|memory|plan)" "$out/g124.txt" | tee -a "$out/summary.txt"
    tail -4 "$out/g124.txt" | tee -a "$out/summary.txt"
fi
log "gpu check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
