#!/bin/sh
# build.sh ARCH BUNDLE OBJ EXE — the GPU check's programs for one
# architecture (e.g. 90). Compiles, all at once in parallel, into OBJ: the
# runtime (kernels_cuda.cu and device_cuda.cu, `ptxas -v` kept in
# OBJ/ptxas_*.txt), the kernel test (tests/cuda/test_kernels.cc) and every
# BUNDLE/*.cu program (tiny_*, g124_*; tiny_dp2 only where mpicc is found);
# nvcc's output per file in OBJ/nvcc_*.txt; an object newer than its
# sources is kept, OBJ/arch (written last) says the objects are complete and
# for which architecture (another one's are removed). Then links the executables into EXE (unless EXE is "-"; a few
# seconds). prepare.sh compiles for sm_90 into the bundle ahead of a GPU
# session (objects: the executables would not fit the carry limit); run.sh
# links them, or compiles first when the GPU is another architecture.
# Exit 0 only if everything built.
set -u
arch=$1 b=$2 obj=$3 exe=$4
cd "$(dirname "$0")/../.." || exit 1
nv() { nvcc -O3 -std=c++17 -gencode "arch=compute_$arch,code=[sm_$arch,compute_$arch]" -Iruntime -Iruntime/cuda "$@"; }
mpicomp="" mpilink=""
if command -v mpicc >/dev/null 2>&1 && [ -f "$b/tiny_dp2.cu" ]; then
    mpicomp=$(mpicc --showme:compile 2>/dev/null)
    mpilink=$(mpicc --showme:link 2>/dev/null | sed 's/-Wl,/-Xlinker /g; s/-pthread//g')
fi
progs=""
for src in "$b"/*.cu; do
    p=$(basename "$src" .cu)
    [ $p = tiny_dp2 ] && [ -z "$mpicomp" ] && continue
    progs="$progs $p"
done
# fresh OBJECT SOURCE...: the object exists and is newer than every source
fresh() {
    o=$1; shift
    [ -s "$o" ] || return 1
    for f in "$@"; do [ -n "$(find "$f" -newer "$o")" ] && return 1; done
    return 0
}
rtsrc="runtime/cuda/*.cu runtime/cuda/*.h runtime/gc_runtime.h"
fail=0
if [ "$(cat "$obj/arch" 2>/dev/null)" != "$arch" ]; then
    rm -rf "$obj"   # another architecture's objects, or none
fi
mkdir -p "$obj" && rm -f "$obj/arch" || exit 1
# shellcheck disable=SC2086
fresh "$obj/kernels_cuda.o" $rtsrc ||
    nv -Xptxas -v -c runtime/cuda/kernels_cuda.cu -o "$obj/kernels_cuda.o" >"$obj/ptxas_kernels.txt" 2>&1 &
# shellcheck disable=SC2086
fresh "$obj/device_cuda.o" $rtsrc ||
    nv -Xptxas -v -c runtime/cuda/device_cuda.cu -o "$obj/device_cuda.o" >"$obj/ptxas_device.txt" 2>&1 &
# shellcheck disable=SC2086
fresh "$obj/test_kernels.o" tests/cuda/test_kernels.cc $rtsrc ||
    nv -c tests/cuda/test_kernels.cc -o "$obj/test_kernels.o" >"$obj/nvcc_test_kernels.txt" 2>&1 &
if [ -n "$mpicomp" ]; then
    # shellcheck disable=SC2086
    fresh "$obj/comm_nccl.o" $rtsrc || nv -c runtime/cuda/comm_nccl.cu -o "$obj/comm_nccl.o" $mpicomp >"$obj/nvcc_comm.txt" 2>&1 &
fi
for p in $progs; do
    # shellcheck disable=SC2086,SC2046
    fresh "$obj/$p.o" "$b/$p.cu" $rtsrc ||
        nv -c "$b/$p.cu" -o "$obj/$p.o" $([ $p = tiny_dp2 ] && echo "$mpicomp") >"$obj/nvcc_$p.txt" 2>&1 &
done
wait
for o in kernels_cuda device_cuda test_kernels $progs; do
    [ -s "$obj/$o.o" ] || { echo "FAIL: nvcc $o: $(grep -h -m2 -i error "$obj"/*_"${o%_cuda}"*.txt | head -2)"; fail=1; }
done
[ $fail -eq 0 ] && echo "$arch" >"$obj/arch"
[ "$exe" = - ] && exit $fail
mkdir -p "$exe" || exit 1
rt="$obj/kernels_cuda.o $obj/device_cuda.o"
jansson=-ljansson   # the runtime's safetensors reader; the bundle's copy where the GPU machine has no libjansson.so
[ -f "$b/lib/libjansson.so.4" ] && jansson="-Xlinker $b/lib/libjansson.so.4"
# shellcheck disable=SC2086
nv -o "$exe/test_kernels" "$obj/test_kernels.o" $rt "$b/libcuda_cpu_ref.a" -Xlinker "$b/lib/libopenblas.so.0" \
    -Xlinker "-rpath-link=$b/lib" -Xcompiler -fopenmp -lcublasLt >"$exe/link_test_kernels.txt" 2>&1 ||
    { echo "FAIL: link test_kernels: $(grep -m2 -i error "$exe/link_test_kernels.txt")"; fail=1; }
for p in ${LINK:-$progs}; do   # $LINK: the programs to link (run.sh: those it runs); default all
    [ $p = test_kernels ] && continue   # linked above, with the CPU reference
    extra=""
    [ $p = tiny_dp2 ] && extra="$obj/comm_nccl.o $mpilink -lnccl"
    # shellcheck disable=SC2086
    nv -o "$exe/$p" "$obj/$p.o" $rt $extra "$b/libgcrt_host.a" $jansson -lcublasLt -lcublas -Xcompiler -fopenmp -lm \
        >"$exe/link_$p.txt" 2>&1 &
done
wait
for p in ${LINK:-$progs}; do
    [ $p = test_kernels ] && continue
    [ -x "$exe/$p" ] || { echo "FAIL: link $p: $(grep -m2 -i error "$exe/link_$p.txt")"; fail=1; }
done
exit $fail
