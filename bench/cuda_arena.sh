#!/bin/sh
# cuda_arena.sh [GCOMPILE] — the CUDA target's planned arena with the fused
# classifier (issue 9) against --no-fuse=classifier and --no-fuse, fp32 and
# bf16, GPT-2 sizes at B=8 T=1024 (`--emit summary`: arena_bytes, the op
# table's launches and bytes moved per step). Compile only; no GPU needed.
set -eu
cd "$(dirname "$0")/.."
gc=${1:-build/gcompile}
printf "%-11s %-5s | %10s %10s %10s | %7s | %8s %8s | %9s %9s\n" model prec "fused" "no-cls" "unfused" "f/nocls" \
    "launch" "nocls" "GB moved" "nocls"
printf "%-11s %-5s | %10s %10s %10s | %7s | %8s %8s | %9s %9s\n" "" "" MiB MiB MiB "" "/step" "/step" "/step" "/step"
for m in gpt2_124M gpt2_350M gpt2_774M gpt2_1558M; do
    for p in fp32 bf16; do
        args="models/gpt2.graph --config $m -D B=8 -D T=1024 --target cuda --precision $p --emit summary"
        sum() { $gc $args "$@"; }
        f=$(sum) c=$(sum --no-fuse=classifier) u=$(sum --no-fuse)
        v() { echo "$1" | sed -n "s/^$2: //p"; }
        echo "$m $p $(v "$f" arena_bytes) $(v "$c" arena_bytes) $(v "$u" arena_bytes) \
              $(v "$f" kernel_launches_per_step) $(v "$c" kernel_launches_per_step) \
              $(v "$f" bytes_moved_per_step) $(v "$c" bytes_moved_per_step)" |
            awk '{ printf "%-11s %-5s | %10.1f %10.1f %10.1f |  %6.3f | %8d %8d | %9.2f %9.2f\n", $1, $2,
                   $3 / 1048576, $4 / 1048576, $5 / 1048576, $3 / $4, $6, $7, $8 / 1e9, $9 / 1e9 }'
    done
done
