#!/bin/sh
# The parallel split: one rank's planned bytes (params + grads + optimizer
# state + arena, from --emit plan) for GPT-2 124M-1558M at B=8, T=1024, fp32,
# N in {1, 2, 4, 8}, each split; then the CPU target at 124M, B=4, T=64
# global: 2 ranks x 1 thread (B=2 each, MPI) against 1 rank x 2 threads
# (B=4), and 2 tensor-parallel ranks x 1 thread (both B=4: every rank reads
# the 4 rows), alternating rounds so the ratios are measured side by side.
#
# usage: bench/split.sh [--record] [BUILD_DIR] [STEPS] [ROUNDS]
#   --record   append the output, dated, with the machine, to bench/RESULTS.md
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_args 6 2 "$@"
gc="$build/gcompile"
out="$tmp/out.txt"
GiB() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1073741824 }'; }
# total planned bytes of one rank: the sum of the regions
plan_bytes() {
    "$gc" models/gpt2.graph --target cuda -D B=8 -D T=1024 "$@" --emit plan -o "$tmp/p.json" || return 1
    sed -n '/"regions"/,/]/s/.*"bytes": \([0-9]*\).*/\1/p' "$tmp/p.json" | awk '{ s += $1 } END { print s }'
}
{
echo "### Per-rank planned bytes (GiB), B=8 T=1024 fp32 per rank, fused-opt schedule"
echo
echo "| config | N | none | dp | zero1 | zero2 | zero3 | tp=N |"
echo "|---|---|---|---|---|---|---|---|"
for cfg in gpt2_124M gpt2_350M gpt2_774M gpt2_1558M; do
    one=$(GiB "$(plan_bytes --config $cfg)")
    for n in 1 2 4 8; do
        if [ "$n" -eq 1 ]; then
            echo "| $cfg | 1 | $one | - | - | - | - | - |"
            continue
        fi
        row="| $cfg | $n | - "
        for s in dp zero1 zero2 zero3 tp=$n; do
            row="$row| $(GiB "$(plan_bytes --config $cfg --gpus $n --split $s)") "
        done
        echo "$row|"
    done
done
echo
echo "1558M, B=8 T=1024 fp32, --gpus 8 --mem 16GiB --split auto (plan-text, or the error when none fits):"
echo
echo '```'
"$gc" models/gpt2.graph --target cuda -D B=8 -D T=1024 --config gpt2_1558M --gpus 8 --mem 16GiB --split auto \
    --emit plan-text 2>&1 | sed -n '/^strategy/p; /^split:/,/each group of K ranks/p; /^  total/p; /error/,$p' || true
echo '```'
echo
echo "Each split is weighed with the budget search's pick for it (micro-batches, per-layer recompute),"
echo "planned for real and checked by plan_check; activations of B=8 T=1024 dominate every split."
echo "tp=N: each rank the same 8 rows (global batch 8, not 8N). Where the head count does not divide by N"
echo "(12 heads at 8, 20 at 8, 1558M's 25 at every N) only the MLPs are cut, so attention stays whole on every rank."
echo
echo "### CPU, 124M, global batch 4 x 64: 2 ranks x 1 thread (dp, tp=2) vs 1 rank x 2 threads"
echo
"$gc" models/gpt2.graph --config gpt2_124M -D B=4 -D T=64 --target cpu -o "$tmp/one"
"$gc" models/gpt2.graph --config gpt2_124M -D B=2 -D T=64 --target cpu --gpus 2 --split dp -o "$tmp/dp2"
"$gc" models/gpt2.graph --config gpt2_124M -D B=4 -D T=64 --target cpu --gpus 2 --split tp=2 -o "$tmp/tp2"
tps() { awk -F'"tok_per_s":' 'NR > 1 { split($2, a, "}"); s += a[1]; n++ } END { printf "%.0f", s / n }' "$1"; }
for r in $(seq 1 "$rounds"); do
    OMP_NUM_THREADS=2 "$tmp/one" --threads 2 --steps "$steps" --log "$tmp/one.jsonl" >/dev/null
    OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2 "$tmp/dp2" --threads 1 \
        --steps "$steps" --log "$tmp/dp2.jsonl" >/dev/null
    OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2 "$tmp/tp2" --threads 1 \
        --steps "$steps" --log "$tmp/tp2.jsonl" >/dev/null
    a=$(tps "$tmp/one.jsonl") b=$(tps "$tmp/dp2.jsonl") c=$(tps "$tmp/tp2.jsonl")
    echo "round $r: 1 rank x 2 threads $a tok/s | dp 2 ranks x 1 thread $b tok/s (ratio $(awk -v a="$a" -v b="$b" \
        'BEGIN { printf "%.2f", b / a }')) | tp=2 2 ranks x 1 thread $c tok/s (ratio $(awk -v a="$a" -v c="$c" \
        'BEGIN { printf "%.2f", c / a }'))"
done
} | tee "$out"
bench_record split.sh "$steps steps, mean over steps 2.." "$out"
