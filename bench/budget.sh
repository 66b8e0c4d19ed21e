#!/bin/sh
# Memory levers and the cost model.
#
# 1. Plans at a budget: GPT-2 1558M (B=8, T=1024, fp32) at --mem 24GiB and
#    the book's GPT-2 large workload at --mem 12GiB: the plain plan's peak,
#    then what the search chose (micro-batches, each layer's recompute), with
#    the compile time (search included); then the search's time alone for
#    one budget and for a 20-budget --emit budget-sweep on 1558M.
# 2. The cost model against the CPU target: GPT-2 124M, B=4, T=64 on 2
#    threads, four strategies (none, selective, full recompute, 4
#    micro-batches) compiled, then run in ROUNDS alternating rounds of STEPS
#    steps each (mean ms over steps 2..); predicted ms/step (plan-text,
#    --device cpu) beside the measured, the ratio, and whether the predicted
#    order is the measured order.
#
# usage: bench/budget.sh [--record] [BUILD_DIR] [STEPS] [ROUNDS]   (ROUNDS 0: part 1 only)
#   --record   append the output, dated, with the machine, to bench/RESULTS.md
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_args 5 2 "$@"
gc="$build/gcompile"
out="$tmp/out.txt"
{
echo "## plans at a budget"
plan() {  # plan LABEL ARGS...: peak, fit and compile time of one plan
    label=$1; shift
    t0=$(date +%s.%N)
    if "$gc" models/gpt2.graph "$@" --emit plan-text >"$tmp/p.txt" 2>"$tmp/e.txt"; then
        t1=$(date +%s.%N)
        printf '%-44s compile %.2f s | %s\n' "$label" "$(echo "$t1 - $t0" | bc)" "$(sed -n 's/^strategy: //p' "$tmp/p.txt")"
    else
        printf '%-44s %s\n' "$label" "$(head -1 "$tmp/e.txt" | cut -c1-160)"
    fi
}
plan "1558M B=8 T=1024, no levers" --config gpt2_1558M -D B=8 -D T=1024 --recompute none --device h100 --mem 1TiB
plan "1558M B=8 T=1024 --mem 24GiB (search)" --config gpt2_1558M -D B=8 -D T=1024 --device h100 --mem 24GiB
plan "774M V=65 T=128 B=32, no levers" --config gpt2_774M -D V=65 -D Vp=128 -D maxT=128 -D T=128 -D B=32 \
    --recompute none --device h100 --mem 1TiB
plan "774M V=65 T=128 B=32 --mem 12GiB (search)" --config gpt2_774M -D V=65 -D Vp=128 -D maxT=128 -D T=128 -D B=32 \
    --device h100 --mem 12GiB

echo
echo "## search time (the whole compile to --emit summary; wall and CPU seconds, best of 3)"
timed() {  # timed LABEL ARGS...: best wall and CPU of three compiles
    label=$1; shift
    best=""
    for i in 1 2 3; do
        /usr/bin/time -f "%e %U %S" -o "$tmp/time.txt" "$gc" models/gpt2.graph "$@" >/dev/null 2>&1 || true
        cur=$(awk 'END { printf "%.2f %.2f", $1, $2 + $3 }' "$tmp/time.txt")   # a failed run's status line comes first
        best=$(printf '%s\n%s\n' "$best" "$cur" | awk 'NF && (b == "" || $1 < w) { w = $1; b = $0 } END { print b }')
    done
    printf '%-44s wall %s s, CPU %s s\n' "$label" "${best% *}" "${best#* }"
}
timed "1558M B=8 T=1024 --mem 24GiB (one search)" --config gpt2_1558M -D B=8 -D T=1024 --device h100 --mem 24GiB \
    --emit summary
timed "1558M B=8 T=1024 --emit budget-sweep (20)" --config gpt2_1558M -D B=8 -D T=1024 --device h100 \
    --emit budget-sweep
"$gc" models/gpt2.graph --config gpt2_1558M -D B=8 -D T=1024 --device h100 --mem 24GiB --emit summary -v 2>&1 |
    sed -n 's/.*search: chose.*(\(.*\))$/  the one search: \1/p'

[ "$rounds" -gt 0 ] || exit 0   # ROUNDS 0: the plans only
echo
echo "## cost model vs the CPU target: 124M, B=4, T=64, 2 threads, $rounds rounds x $steps steps"
names="none selective full k4"
for s in $names; do
    case $s in
    k4) flags="--micro-batches 4" ;;
    *) flags="--recompute $s" ;;
    esac
    "$gc" models/gpt2.graph --config gpt2_124M -D B=4 -D T=64 --target cpu --device cpu $flags -o "$tmp/t_$s"
    "$gc" models/gpt2.graph --config gpt2_124M -D B=4 -D T=64 --target cpu --device cpu $flags --emit plan-text |
        sed -n 's/.*predicted \([0-9.]*\) ms\/step.*/\1/p' >"$tmp/pred_$s"
    : >"$tmp/ms_$s"
done
r=0
while [ $r -lt "$rounds" ]; do
    for s in $names; do
        env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 "$tmp/t_$s" --threads 2 --steps "$steps" \
            --log "$tmp/log_$s" >/dev/null
        awk -F'"ms":' 'NR > 1 { split($2, a, ","); s += a[1]; n++ } END { printf "%.1f\n", s / n }' "$tmp/log_$s" \
            >>"$tmp/ms_$s"
    done
    r=$((r + 1))
done
printf '%-10s %12s %12s %8s\n' strategy "predicted" "measured" ratio
for s in $names; do
    p=$(cat "$tmp/pred_$s")
    m=$(awk '{ s += $1; n++ } END { printf "%.1f", s / n }' "$tmp/ms_$s")
    printf '%-10s %9s ms %9s ms %8.3f\n' "$s" "$p" "$m" "$(echo "$p / $m" | bc -l)"
    echo "$s $p $m" >>"$tmp/table"
done
po=$(sort -k2 -n "$tmp/table" | awk '{ printf "%s ", $1 }')
mo=$(sort -k3 -n "$tmp/table" | awk '{ printf "%s ", $1 }')
echo "order by predicted: $po"
echo "order by measured:  $mo"
awk '{ r = $2 / $3; if (r < 0.75 || r > 1.25) bad = 1 } END { print (bad ? "NOT all within +-25%" : "all within +-25%") }' \
    "$tmp/table"
# The order is compared pair by pair; two strategies whose predicted times are
# within 1% of each other are a tie (either measured order agrees with it).
awk '{ n[NR] = $1; p[NR] = $2; m[NR] = $3 }
     END { for (i = 1; i <= NR; i++) for (j = 1; j <= NR; j++)
               if (p[i] < p[j] && p[j] - p[i] > 0.01 * p[i]) { if (m[i] >= m[j]) bad = bad " " n[i] "<" n[j] }
               else if (i < j && p[i] <= p[j] && p[j] - p[i] <= 0.01 * p[i] || i < j && p[j] < p[i] && p[i] - p[j] <= 0.01 * p[j])
                   ties = ties " " n[i] "=" n[j]
           print (bad == "" ? "same order" : "order differs:" bad " measured the other way") \
                 (ties == "" ? "" : " (ties, predicted within 1%:" ties ")") }' "$tmp/table"
} | tee "$out"
bench_record budget.sh "load average $(cut -d' ' -f1-3 /proc/loadavg)" "$out"
