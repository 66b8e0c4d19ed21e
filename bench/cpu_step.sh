#!/bin/sh
# CPU target speed: GPT-2 124M, B=4, T=64, 2 threads; ms/step and tok/s.
#
# The same program runs ROUNDS times with its own AVX-512 GEMM and ROUNDS
# times with OpenBLAS (GC_CPU_GEMM=blas), alternating, so the ratio is
# measured side by side on the same machine in the same minutes; then once
# with --profile, to say where the time goes (matmuls, AdamW, the rest),
# against the FP32 FMA peak of the cores measured in the same run
# (bench/fma_peak.c, before and after).
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for this command only (some
# machines set them; they halve sgemm speed; a user's machine has neither).
#
# usage: bench/cpu_step.sh [--record] [BUILD_DIR] [STEPS] [ROUNDS]
#   --record   append the output, dated, with the machine, to bench/RESULTS.md
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_args 6 3 "$@"
"$build/gcompile" models/gpt2.graph --config gpt2_124M -D B=4 -D T=64 --target cpu -o "$tmp/train"
${CC:-cc} -O2 -march=native -fopenmp bench/fma_peak.c -o "$tmp/fma_peak"
peak() { OMP_NUM_THREADS=2 "$tmp/fma_peak"; }

# mean ms over steps 2.. (step 1 pays first-touch page faults)
mean_ms() {
    awk -F'"ms":' 'NR > 1 { split($2, a, ","); s += a[1]; n++ } END { printf "%.1f", s / n }' "$1"
}
run() {  # run own|blas [program flags]: STEPS steps on 2 threads with that GEMM
    gemm=$1; shift
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 GC_CPU_GEMM="$gemm" \
        "$tmp/train" --threads 2 --steps "$steps" "$@"
}

{
    echo "machine: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC')"
    peak | tee "$tmp/peak.txt"
    own_all="" blas_all=""
    for r in $(seq "$rounds"); do
        run own --log "$tmp/own.jsonl" >/dev/null
        run blas --log "$tmp/blas.jsonl" >/dev/null
        o=$(mean_ms "$tmp/own.jsonl") b=$(mean_ms "$tmp/blas.jsonl")
        own_all="$own_all $o" blas_all="$blas_all $b"
        echo "round $r: own GEMM $o ms/step | OpenBLAS $b ms/step"
    done
    echo "$own_all" "|" "$blas_all" | awk -v steps="$steps" -v rounds="$rounds" '{
        for (i = 1; $i != "|"; i++) { o += $i; n++; if (!mo || $i < mo) mo = $i }
        for (i++; i <= NF; i++) { b += $i; m++; if (!mb || $i < mb) mb = $i }
        o /= n; b /= m
        printf "cpu_step: GPT-2 124M B=4 T=64 2 threads, %d rounds x %d steps (mean over steps 2..):\n", rounds, steps
        printf "  own GEMM %.1f ms/step (best round %.1f), %.0f tok/s | OpenBLAS %.1f ms/step (best round %.1f), %.0f tok/s | own/OpenBLAS %.3f\n",
               o, mo, 256000 / o, b, mb, 256000 / b, o / b }'
    # where the time goes: one profiled run (own GEMM), then the peak again
    run own --profile >"$tmp/prof.txt"
    peak | tee -a "$tmp/peak.txt"
    pk=$(awk '{ s += $4; n++ } END { printf "%.1f", s / n }' "$tmp/peak.txt")
    awk -v pk="$pk" '/^profile:/ { step = $0; sub(/.*step /, "", step); sub(/ ms.*/, "", step) }
         /^ +[0-9.]+ +[0-9.]+ +[0-9]+ / {
             label = $0; sub(/^ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9.-]+ +/, "", label)
             if (label ~ / matmul/) { mm += $1; if ($4 != "-") gf += $1 * $4 / 1e3 }
             else if (label ~ /adamw/) ad += $1
             else rest += $1 }
         END { printf "profile (%s ms/step): matmuls %.1f ms (%.0f%%, %.0f GFLOP at %.0f GFLOP/s) | AdamW %.1f ms (%.0f%%) | everything else %.1f ms (%.0f%%)\n",
                      step, mm, 100 * mm / step, gf, gf / (mm / 1e3), ad, 100 * ad / step, rest, 100 * rest / step
               printf "matmuls at %.0f%% of the mean FMA peak %.1f GFLOP/s; at that peak their %.0f GFLOP take at least %.0f ms\n",
                      100 * gf / (mm / 1e3) / pk, pk, gf, gf / pk * 1e3 }' "$tmp/prof.txt"
} | tee "$tmp/out.txt"

bench_record cpu_step.sh "" "$tmp/out.txt"
