#!/bin/sh
# launches.sh [GCOMPILE] — kernel launches and bytes moved per training step,
# GPT-2 124M bf16 at B=8 T=1024: gcompile's CUDA program (its op table's
# counts, --emit summary / plan-text) beside llm.c's train_gpt2.cu (worked out
# from its kernels by bench/llmc_counts.sh). No GPU needed.
set -eu
cd "$(dirname "$0")/.."
gc=${1:-build/gcompile}
args="models/gpt2.graph --config gpt2_124M -D B=8 -D T=1024 --target cuda --precision bf16"
l=$($gc $args --emit summary | sed -n 's/^kernel_launches_per_step: //p')
b=$($gc $args --emit summary | sed -n 's/^bytes_moved_per_step: //p')
$gc $args --emit plan-text | sed -n '/^step traffic/,$p'
echo "gcompile: $l launches/step, $b bytes moved/step ($(echo "$b" | awk '{printf "%.2f", $1 / 1e9}') GB)"
sh bench/llmc_counts.sh 8 1024
