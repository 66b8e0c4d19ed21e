#!/bin/sh
# The GPU check (issues: CUDA target, #14). Needs gpu_bundle/ from
# tests/gpu/prepare.sh. In order:
#   0. nvcc compiles everything at once, in parallel (kernels_cuda.cu and
#      device_cuda.cu once for this GPU, SASS + PTX as gcompile builds; nvcc's
#      warnings kept in $OUT/nvcc_*.txt);
#   1. every CUDA kernel against the CPU kernels on random inputs, on the GPU
#      (tests/cuda/test_kernels.cc: fp32, TF32 tolerance, bf16, 16-byte vector
#      paths with tails and misaligned pointers; bf16 attention on tensor
#      cores (WMMA) and on the SIMT path, odd T and head sizes, and a timing
#      of the two at 124M's shape, copied into the summary);
#   2. compute-sanitizer memcheck on 2 steps of each tiny program, before
#      anything is timed (out-of-bounds or misaligned accesses);
#   3. the tiny model, 10 steps, against the CPU target's losses (fp32 1e-4,
#      bf16 2e-2);
#   4. GPT-2 124M at T=1024 with the largest B whose plan + reserve fits the
#      free memory: tok/s, MFU, planned vs measured memory, and the device
#      memory in use after the first (warm-up) step beyond the plan (CUDA
#      context, kernel images, cuBLASLt: cudaMemGetInfo), which must stay
#      within gcompile's stated reserve (GC_CUDA_RESERVE_BYTES, "EXCEEDED"
#      fails); then 4 profiled steps.
# Every step has a time limit; the whole check takes about 5 minutes on an
# H100/H200 (most of it nvcc). Writes everything to $OUT (or /tmp/gpu_out);
# summary.txt is the verdict. Exit 0 only if everything passed.
set -u
cd "$(dirname "$0")/../.." || exit 1
b=gpu_bundle
out=${OUT:-/tmp/gpu_out}
obj=/tmp/gpu_check_obj
rm -rf "$obj"   # nothing stale from an earlier run
mkdir -p "$out" "$obj" && : >"$out/summary.txt" || exit 1
[ -d "$b" ] || { echo "no $b: run tests/gpu/prepare.sh first (on a machine with the build deps)"; exit 1; }
log() { echo "$*" | tee -a "$out/summary.txt"; }
# the bundled OpenBLAS (the kernel test's CPU reference); CUDA's libraries
# where the loader may not look
export LD_LIBRARY_PATH="$PWD/$b/lib${CUDA_HOME:+:$CUDA_HOME/lib64}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log "== gpu check $(date -u +%Y-%m-%dT%H:%MZ)"
nvidia-smi -L | tee -a "$out/summary.txt"
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
[ -n "$arch" ] || { log "FAIL: no compute capability from nvidia-smi"; exit 1; }
fail=0
san=$(command -v compute-sanitizer || ls "$(dirname "$(command -v nvcc)")"/compute-sanitizer \
      /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)

# GPT-2 124M: the largest B whose plan (+ gcompile's reserve, prepare.sh) fits
free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
free=$((free * 1024 * 1024))
progs="tiny_fp32 tiny_bf16"
for prec in bf16 fp32; do
    best=""
    for B in 4 8 16 24 32 48 64; do
        need=$(cat "$b/g124_${prec}_B$B.bytes")
        [ "$need" -lt "$free" ] && best=$B
    done
    log "124M $prec: free device memory $free bytes; largest B that fits: ${best:-none}"
    [ -n "$best" ] && progs="$progs g124_${prec}_B$best"
done

# 0. compile everything in parallel, then link
t0=$(date +%s)
nv() { nvcc -O3 -std=c++17 -gencode "arch=compute_$arch,code=[sm_$arch,compute_$arch]" -Iruntime -Iruntime/cuda "$@"; }
nv -c runtime/cuda/kernels_cuda.cu -o "$obj/kernels_cuda.o" >"$out/nvcc_kernels.txt" 2>&1 &
nv -c runtime/cuda/device_cuda.cu -o "$obj/device_cuda.o" >"$out/nvcc_device.txt" 2>&1 &
nv -c tests/cuda/test_kernels.cc -o "$obj/test_kernels.o" >"$out/nvcc_test.txt" 2>&1 &
for p in $progs; do
    nv -c "$b/$p.cu" -o "$obj/$p.o" >"$out/nvcc_$p.txt" 2>&1 &
done
wait
rt="$obj/kernels_cuda.o $obj/device_cuda.o"
nv -o "$obj/test_kernels" "$obj/test_kernels.o" $rt "$b/libcuda_cpu_ref.a" -Xlinker "$b/lib/libopenblas.so.0" \
    -Xlinker "-rpath-link=$b/lib" -Xcompiler -fopenmp -lcublasLt >>"$out/nvcc_test.txt" 2>&1 ||
    { log "FAIL: nvcc kernel tests ($(head -3 "$out/nvcc_test.txt"))"; fail=1; }
for p in $progs; do
    nv -o "$obj/$p" "$obj/$p.o" $rt "$b/libgcrt_host.a" -ljansson -lcublasLt -lcublas -Xcompiler -fopenmp -lm \
        >>"$out/nvcc_$p.txt" 2>&1 || { log "FAIL: nvcc $p ($(head -3 "$out/nvcc_$p.txt"))"; fail=1; }
done
log "nvcc: $(( $(date +%s) - t0 )) s, $(cat "$out"/nvcc_*.txt | grep -c -i warning) warning lines"

# 1. the kernels against the CPU kernels
t0=$(date +%s)
if [ -x "$obj/test_kernels" ]; then
    timeout 300 "$obj/test_kernels" >"$out/kernels.txt" 2>&1 || fail=1
    grep '^FAIL' "$out/kernels.txt" | head -5 | tee -a "$out/summary.txt"
    grep '^attention bf16 ' "$out/kernels.txt" | tee -a "$out/summary.txt"
    log "kernel tests on the GPU ($(( $(date +%s) - t0 )) s): $(tail -1 "$out/kernels.txt")"
fi

for prec in fp32 bf16; do
    exe=$obj/tiny_$prec
    [ -x "$exe" ] || continue
    # 2. memcheck first, before any timing
    if [ -n "$san" ]; then
        timeout 300 "$san" --tool memcheck --error-exitcode 3 "$exe" --steps 2 --lr 1e-3 \
            >"$out/tiny_${prec}_memcheck.txt" 2>&1 || fail=1
        log "compute-sanitizer memcheck tiny $prec: $(grep -m1 'ERROR SUMMARY' "$out/tiny_${prec}_memcheck.txt" ||
            echo "no summary: $(tail -1 "$out/tiny_${prec}_memcheck.txt")")"
    else
        log "FAIL: compute-sanitizer not found"; fail=1
    fi
    # 3. the tiny model against the CPU target's losses
    tol=1e-4; [ $prec = bf16 ] && tol=2e-2
    timeout 120 "$exe" --steps 10 --lr 1e-3 --log "$out/tiny_$prec.jsonl" >"$out/tiny_$prec.txt" 2>&1 || fail=1
    paste -d' ' "$b/tiny_cpu.jsonl" "$out/tiny_$prec.jsonl" | awk -v tol=$tol -v prec=$prec '
        { match($0, /"loss":[-0-9.e+]*/); a = substr($0, RSTART + 7, RLENGTH - 7); rest = substr($0, RSTART + RLENGTH);
          if (!match(rest, /"loss":[-0-9.e+]*/)) { bad = 1; next }
          c = substr(rest, RSTART + 7, RLENGTH - 7);
          d = a - c; if (d < 0) d = -d; if (d > m) m = d; printf "step %2d cpu %.6f cuda %.6f |diff| %.2e\n", NR, a, c, d }
        END { ok = NR == 10 && !bad && m <= tol
              printf "tiny %s: %d steps, max |cpu - cuda| = %.2e (limit %s): %s\n", prec, NR, m, tol, ok ? "PASS" : "FAIL"
              exit !ok }' | tee -a "$out/summary.txt"
    grep -q "^tiny $prec: .*PASS" "$out/summary.txt" || fail=1
done

# 4. GPT-2 124M: speed, memory, the reserve after the warm-up step, a profile
for p in $progs; do
    case $p in g124_*) ;; *) continue ;; esac
    exe=$obj/$p
    [ -x "$exe" ] || continue
    timeout 240 "$exe" --steps 12 --log "$out/$p.jsonl" >"$out/$p.txt" 2>&1 || fail=1
    grep -E "^(device|memory|plan)" "$out/$p.txt" | tee -a "$out/summary.txt"
    tail -3 "$out/$p.txt" | tee -a "$out/summary.txt"
    grep -q '^device memory after the first step: .*: ok)' "$out/$p.txt" ||
        { log "FAIL: $p: no reserve measurement, or the reserve was EXCEEDED"; fail=1; }
    # where the step's time goes (a device sync after every op, so slower than above)
    timeout 180 "$exe" --steps 4 --profile >"$out/${p}_profile.txt" 2>&1 || fail=1
    sed -n '/^profile:/,$p' "$out/${p}_profile.txt" | head -14 | tee -a "$out/summary.txt"
done
log "gpu check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
