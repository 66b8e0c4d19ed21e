#!/bin/sh
# nvcc_test.sh MODE ARGS... — the nvcc side of tests/cuda (see CMakeLists.txt).
#   build NVCC ARCH ROOT OUT       compile kernels_cuda.cu + device_cuda.cu for
#                                  sm_ARCH and link nvcc_probe.cu into OUT/probe
#   nodevice PROBE                 PROBE must print one "no CUDA device" line
#                                  and exit 1; exit 77 (skip) if a GPU answers
#   gpu NVCC ROOT OUT CPUREF BLAS  build test_kernels.cc against the real
#                                  kernels (-arch=native) and run it
#   skip WHY                       print WHY, exit 77
set -u
mode=$1; shift
fail() { echo "FAIL: $*"; exit 1; }

flags="-O3 -std=c++17 -Xcompiler -Wall,-Wextra"

case $mode in
build)
    nvcc=$1 arch=$2 root=$3 out=$4
    rt=$root/runtime
    mkdir -p "$out" || exit 1
    gen="-gencode arch=compute_$arch,code=[sm_$arch,compute_$arch]"
    inc="-I$rt -I$rt/cuda"
    start=$(date +%s)
    # ptxas -v: every kernel's resources (kept in $out/ptxas_*.txt; nvcc's other output shown)
    for f in kernels_cuda device_cuda; do
        "$nvcc" $flags $gen $inc -Xptxas -v -c "$rt/cuda/$f.cu" -o "$out/$f.o" 2>"$out/ptxas_$f.txt"
        rc=$?
        grep -v '^ptxas info\|^    [0-9]* bytes stack frame' "$out/ptxas_$f.txt" >&2
        [ $rc -eq 0 ] || fail "nvcc $f.cu"
    done
    # host_adamw.c (C, OpenMP): the host update of offloaded programs (device_cuda.cu's gc_host_update)
    "$nvcc" -O3 -Xcompiler -fopenmp $inc -c "$rt/host_adamw.c" -o "$out/host_adamw.o" || fail "nvcc host_adamw.c"
    "$nvcc" $flags $gen $inc "$root/tests/cuda/nvcc_probe.cu" "$out/kernels_cuda.o" "$out/device_cuda.o" \
        "$out/host_adamw.o" -o "$out/probe" -lcublasLt -lcublas -Xcompiler -fopenmp || fail "nvcc link"
    echo "sm_$arch: compiled and linked in $(( $(date +%s) - start )) s"
    # issue 24: no kernel with a stack frame (local memory the driver reserves outside the plan) or
    # spills, on sm_90 (H100/H200, what the GPU check runs) and sm_80 (A100; since the tensor-core
    # attention rewrite, 2026-12-04, both clean; rope_kernel's 40-byte frame, its double sincos, went
    # with sincospi on 2026-12-05: no kernel is exempt)
    bad=$(cat "$out"/ptxas_*.txt | awk '/Compiling entry function/ { k = $7 }
        /bytes stack frame/ && ($1 > 0 || $5 > 0 || $9 > 0) { print k ": " $0 }')
    if [ -n "$bad" ]; then
        fail "kernels with a stack frame or spills (sm_$arch): $bad"
    else
        echo "sm_$arch: $(grep -c 'bytes stack frame' "$out"/ptxas_kernels_cuda.txt) kernels, no stack frame, no spills"
    fi
    ;;
nodevice)
    probe=$1
    [ -x "$probe" ] || fail "$probe was not built (run the cuda_nvcc_sm80 test first)"
    output=$("$probe" 2>&1); rc=$?
    if [ $rc -eq 0 ]; then
        echo "a CUDA device answered ($output): nothing to test here"
        exit 77
    fi
    echo "$output"
    [ $rc -eq 1 ] || fail "exit status $rc, want 1"
    [ "$(printf '%s\n' "$output" | wc -l)" -eq 1 ] || fail "more than one line"
    printf '%s\n' "$output" | grep -q '^error: no CUDA device' || fail "no 'error: no CUDA device' line"
    echo "ok"
    ;;
gpu)
    nvcc=$1 root=$2 out=$3 cpuref=$4 blas=$5
    rt=$root/runtime
    mkdir -p "$out" || exit 1
    if ! nvidia-smi -L >/dev/null 2>&1; then echo "no GPU"; exit 77; fi
    inc="-I$rt -I$rt/cuda"
    "$nvcc" -O3 -std=c++17 -arch=native $inc "$rt/cuda/kernels_cuda.cu" "$rt/cuda/device_cuda.cu" \
        "$root/tests/cuda/test_kernels.cc" "$cpuref" "$blas" -Xcompiler -fopenmp \
        -o "$out/test_kernels_gpu" -lcublasLt || fail "nvcc build"
    "$out/test_kernels_gpu"
    ;;
skip)
    echo "$*"
    exit 77
    ;;
*)
    fail "unknown mode $mode"
    ;;
esac
