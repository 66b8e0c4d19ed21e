#!/bin/sh
# Long runs of the random-graph differential tester (issue 20): chunks of
# graphs, every single-process lever on each, the MPI levers (dp2, zero3,
# tp=2) on every M-th; one JSON summary line per chunk appended to LOG.
# Restartable: a chunk whose summary is in LOG is not run again.
#   usage: campaign.sh GCOMPILE WORKDIR LOG [FIRST_SEED [CHUNKS [CHUNK [MPI_EVERY [JOBS]]]]]
#   e.g.   nice -n 19 sh tests/randgraph/campaign.sh build/gcompile /tmp/rgc bench/randgraph.log 100000 40 500 25
# Totals over LOG: python3 -c 'import json,sys; ...' (bench/RESULTS.md shows them).
set -u
gc=$1 work=$2 log=$3 first=${4:-100000} chunks=${5:-40} chunk=${6:-500} mpi=${7:-25} jobs=${8:-2}
here=$(dirname "$0")
py=${GC_TORCH_PYTHON:-/usr/bin/python3}
i=0
while [ "$i" -lt "$chunks" ]; do
    s=$((first + i * chunk))
    if ! grep -q "\"first\": $s," "$log" 2>/dev/null; then
        out=$(nice -n 19 "$py" "$here/rg.py" campaign --gcompile "$gc" --work "$work/c$s" --first "$s" \
              --count "$chunk" --mpi-every "$mpi" --jobs "$jobs" 2>&1)
        rc=$?
        echo "$out" | grep -v '^randgraph summary: ' >"$work/chunk_$s.txt"
        line=$(echo "$out" | sed -n 's/^randgraph summary: //p')
        [ -n "$line" ] || { echo "chunk $s: no summary (exit $rc); see $work/chunk_$s.txt"; exit 1; }
        echo "{\"first\": $s, \"count\": $chunk, \"exit\": $rc, \"summary\": $line}" >>"$log"
        [ "$rc" -eq 0 ] || echo "chunk $s: failures, see $work/chunk_$s.txt"
    fi
    i=$((i + 1))
done
