#!/bin/sh
# Prepares the GPU check on a machine without a GPU (the GPU machine cannot
# install packages): builds gcompile, emits the CUDA sources and plans, runs
# the CPU target for reference losses, compiles everything for sm_90
# (H100/H200; tests/gpu/build.sh: objects, linked on the GPU machine in
# seconds) and writes it all to gpu_bundle/ (ignored by git; name it in the
# device tool's `carry`). Then, on the GPU machine: sh tests/gpu/run.sh
# (sh tests/gpu/run.sh --dry-run checks the script here first).
set -eu
cd "$(dirname "$0")/../.." || exit 1
b=gpu_bundle
rm -rf "$b" && mkdir -p "$b"
# its own build tree (Release), so a developer's build/ keeps its settings
bd=build-gpu
cmake -S . -B $bd -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build $bd -j"$(nproc)" --target gcompile gcrt gcrt_host cuda_cpu_ref >/dev/null
gc=$bd/gcompile
cp $bd/libgcrt_host.a $bd/tests/cuda/libcuda_cpu_ref.a "$b/"
# the kernel test's CPU reference links OpenBLAS and the programs jansson, which the GPU machine lacks
mkdir -p "$b/lib"
for l in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libjansson.so.4; do
    cp -L "$(ldconfig -p | awk -v l=$l '$1 == l { print $NF; exit }')" "$b/lib/"
done
# tiny: fp32 without TF32 (the exact check), fp32 with TF32 (the default),
# bf16, and 2 data-parallel ranks (NCCL; run only where 2 GPUs and mpirun
# exist); the CPU target's losses over 10 steps as the reference
tiny="models/gpt2.graph --config tiny --target cuda --emit cuda"
$gc $tiny --precision fp32 --no-tf32 -o "$b/tiny_fp32.cu"
$gc $tiny --precision fp32 -o "$b/tiny_tf32.cu"
$gc $tiny --precision bf16 -o "$b/tiny_bf16.cu"
$gc $tiny --precision fp32 --gpus 2 --split dp -o "$b/tiny_dp2.cu"
$gc models/gpt2.graph --config tiny --target cpu -o "$b/tiny_cpu"
"$b/tiny_cpu" --threads 2 --steps 10 --lr 1e-3 --log "$b/tiny_cpu.jsonl" >/dev/null
rm "$b/tiny_cpu"
# tiny Llama (RMSNorm, RoPE, SwiGLU, grouped-query attention): fp32 without TF32 and bf16 against its CPU target
ltiny="models/llama.graph --config tiny --target cuda --emit cuda"
$gc $ltiny --precision fp32 --no-tf32 -o "$b/llama_tiny_fp32.cu"
$gc $ltiny --precision bf16 -o "$b/llama_tiny_bf16.cu"
$gc models/llama.graph --config tiny --target cpu -o "$b/llama_tiny_cpu"
"$b/llama_tiny_cpu" --threads 2 --steps 10 --lr 1e-3 --log "$b/llama_tiny_cpu.jsonl" >/dev/null
rm "$b/llama_tiny_cpu"
# Llama 3.2 1B (untied head) bf16 at B=2, T=2048: a first throughput number for the Llama kernels
$gc models/llama.graph --config llama_1b -D T=2048 -D B=2 --target cuda --precision bf16 --emit cuda -o "$b/llama1b_bf16.cu"
$gc models/llama.graph --config llama_1b -D T=2048 -D B=2 --target cuda --precision bf16 --emit summary |
    sed -n 's/^device_bytes_needed: //p' >"$b/llama1b_bf16.bytes"
# the 124M and 1B runs' data: this repository's docs as byte-level text (the
# built-in corpus, 24,863 tokens, is smaller than one B=64, T=1024 batch)
cat README.md docs/*.md >"$b/corpus.txt"
# GPT-2 124M at T=1024 for several B: the run picks the largest whose plan fits
for prec in fp32 bf16; do
    for B in 4 8 16 24 32 48 64; do
        $gc models/gpt2.graph --config gpt2_124M -D T=1024 -D B=$B --target cuda --precision $prec --emit cuda \
            -o "$b/g124_${prec}_B$B.cu"
        $gc models/gpt2.graph --config gpt2_124M -D T=1024 -D B=$B --target cuda --precision $prec --emit summary |
            sed -n 's/^device_bytes_needed: //p' >"$b/g124_${prec}_B$B.bytes"   # plan + CUDA reserve
    done
done
# the objects for sm_90 (minutes here: nvcc on every file at once)
sh tests/gpu/build.sh 90 "$b" "$b/obj_sm90" -
du -sh "$b"
echo "prepared $b: carry it and run  sh tests/gpu/run.sh"
