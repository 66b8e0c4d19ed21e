#!/bin/sh
# The GPU check (issue: CUDA target). Needs gpu_bundle/ from tests/gpu/prepare.sh.
# Builds the emitted CUDA programs with nvcc, trains the tiny model 10 steps and
# compares with the CPU target's losses (fp32: 1e-4), then GPT-2 124M at T=1024
# with the largest B whose plan fits the card: tok/s, MFU, planned vs measured
# memory. Before anything is timed, compute-sanitizer (memcheck) runs 2 steps
# of each tiny program. The 124M runs print the device memory in use after
# their first step beyond the plan (CUDA context, kernel images, cuBLASLt):
# the measurement behind gcompile's stated reserve (GC_CUDA_RESERVE_BYTES).
# Writes everything to $OUT (or /tmp/gpu_out). Under 5 minutes.
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
build() {  # build SRC EXE (SASS for this GPU plus PTX, as gcompile builds; warnings shown)
    nvcc -O3 -std=c++17 -gencode "arch=compute_$arch,code=[sm_$arch,compute_$arch]" -Iruntime -Iruntime/cuda \
        -o "$2" "$1" runtime/cuda/kernels_cuda.cu runtime/cuda/device_cuda.cu "$b/libgcrt_host.a" \
        -lcublasLt -lcublas -Xcompiler -fopenmp -lm
}
fail=0
# 0. every CUDA kernel against the CPU kernels on random inputs, on the GPU
t0=$(date +%s)
if nvcc -O3 -std=c++17 -gencode "arch=compute_$arch,code=sm_$arch" -Iruntime -Iruntime/cuda \
        runtime/cuda/kernels_cuda.cu runtime/cuda/device_cuda.cu tests/cuda/test_kernels.cc \
        "$b/libcuda_cpu_ref.a" "$b/lib/libopenblas.so.0" -Xcompiler -fopenmp -lcublasLt -o "$out/test_kernels_gpu"; then
    LD_LIBRARY_PATH="$b/lib" "$out/test_kernels_gpu" >"$out/kernels.txt" 2>&1 || fail=1
    log "kernel tests on the GPU ($(( $(date +%s) - t0 )) s): $(tail -1 "$out/kernels.txt")"
else
    log "FAIL: nvcc kernel tests"; fail=1
fi
# 1. tiny model against the CPU target's losses (fp32: 1e-4, bf16: 2e-2)
for prec in fp32 bf16; do
tol=1e-4; [ $prec = bf16 ] && tol=2e-2
t0=$(date +%s)
build "$b/tiny_$prec.cu" "$out/tiny_$prec" || { log "FAIL: nvcc tiny $prec"; exit 1; }
log "nvcc tiny $prec: $(( $(date +%s) - t0 )) s"
# memcheck first: out-of-bounds or misaligned accesses, before any timing
san=$(command -v compute-sanitizer || ls "$(dirname "$(command -v nvcc)")"/compute-sanitizer \
      /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$san" ]; then
    "$san" --tool memcheck --error-exitcode 3 "$out/tiny_$prec" --steps 2 --lr 1e-3 \
        >"$out/tiny_${prec}_memcheck.txt" 2>&1 || fail=1
    log "compute-sanitizer memcheck tiny $prec: $(grep -m1 'ERROR SUMMARY' "$out/tiny_${prec}_memcheck.txt" || echo 'no summary (see tiny_'$prec'_memcheck.txt)')"
else
    log "FAIL: compute-sanitizer not found"; fail=1
fi
"$out/tiny_$prec" --steps 10 --lr 1e-3 --log "$out/tiny_$prec.jsonl" >"$out/tiny_$prec.txt" 2>&1 || fail=1
paste -d' ' "$b/tiny_cpu.jsonl" "$out/tiny_$prec.jsonl" | awk -v tol=$tol -v prec=$prec '
    { match($0, /"loss":[-0-9.e+]*/); a = substr($0, RSTART + 7, RLENGTH - 7); rest = substr($0, RSTART + RLENGTH);
      match(rest, /"loss":[-0-9.e+]*/); c = substr(rest, RSTART + 7, RLENGTH - 7);
      d = a - c; if (d < 0) d = -d; if (d > m) m = d; printf "step %2d cpu %.6f cuda %.6f |diff| %.2e\n", NR, a, c, d }
    END { printf "tiny %s: max |cpu - cuda| = %.2e (limit %s): %s\n", prec, m, tol, m <= tol ? "PASS" : "FAIL"; exit m > tol }' \
    | tee -a "$out/summary.txt" || fail=1
done
# 2. GPT-2 124M, T=1024, the largest B whose plan fits the free memory
free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
free=$((free * 1024 * 1024))
best=""
for prec in bf16 fp32; do
    best=""
    for B in 4 8 16 24 32 48 64; do
        need=$(cat "$b/g124_${prec}_B$B.bytes")
        [ "$need" -lt "$free" ] && best=$B   # planned bytes + gcompile's reserve (prepare.sh)
    done
    log "124M $prec: free device memory $free bytes; largest B that fits: ${best:-none}"
    [ -n "$best" ] || continue
    t0=$(date +%s)
    build "$b/g124_${prec}_B$best.cu" "$out/g124_$prec" || { log "FAIL: nvcc 124M $prec"; fail=1; continue; }
    log "nvcc 124M $prec: $(( $(date +%s) - t0 )) s"
    "$out/g124_$prec" --steps 12 --log "$out/g124_$prec.jsonl" >"$out/g124_$prec.txt" 2>&1 || fail=1
    grep -E "^(device|memory|plan)" "$out/g124_$prec.txt" | tee -a "$out/summary.txt"
    tail -3 "$out/g124_$prec.txt" | tee -a "$out/summary.txt"
    # where the step's time goes (a device sync after every op, so slower than above)
    "$out/g124_$prec" --steps 4 --profile >"$out/g124_${prec}_profile.txt" 2>&1 || fail=1
    sed -n '/^profile:/,$p' "$out/g124_${prec}_profile.txt" | head -14 | tee -a "$out/summary.txt"
done
log "gpu check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
