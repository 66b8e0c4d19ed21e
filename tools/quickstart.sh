#!/bin/sh
# README's first command: install what is missing, build gcompile, compile
# models/gpt2.graph for this machine and train on the built-in corpus.
# Without a GPU (or without the CUDA build), the CPU target with the tiny config.
set -eu
cd "$(dirname "$0")/.."
sh tools/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target gcompile gcrt
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && command -v nvcc >/dev/null 2>&1; then
    target="--target cuda"
    config="--config gpt2_124M -D T=1024 -D B=16"
    steps=20
else
    target="--target cpu"
    config="--config tiny"
    steps=600
fi
echo "== gcompile models/gpt2.graph $config $target -o train"
# shellcheck disable=SC2086
if ! build/gcompile models/gpt2.graph $config $target -o train; then
    echo "quickstart: the $target build failed; falling back to the CPU target" >&2
    build/gcompile models/gpt2.graph --config tiny --target cpu -o train
    steps=600
fi
build/gcompile models/gpt2.graph $config --emit plan-text | head -20
echo "== ./train --steps $steps --lr 1e-3 --grad-clip 1 --weight-decay 0.1 --sample 200   (llm.c's recipe)"
./train --steps "$steps" --lr 1e-3 --grad-clip 1 --weight-decay 0.1 --sample 200
