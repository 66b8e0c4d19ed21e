#!/bin/sh
# Long runs of the random-graph differential tester (issue 20): chunks of
# graphs, every single-process lever on each, the MPI levers (dp2, zero3,
# tp=2) on every M-th; one JSON summary line per chunk appended to LOG.
# Restartable: a chunk whose summary is in LOG is not run again. Each line
# names the commit of the tree the tester ran from ("commit"). RG_MAX_SHRINK
# (default 2): failures shrunk per chunk (the others are listed with their seed).
# RG_SAMPLE=N: each graph runs default plus N sampled single-process levers
# (default 0: all of them); RG_EMU_EVERY=M, RG_BF16_EVERY=M: every M-th graph
# also runs the emulated CUDA program in fp32 (cuda), in bf16 (cuda_bf16).
#   usage: campaign.sh GCOMPILE WORKDIR LOG [FIRST_SEED [CHUNKS [CHUNK [MPI_EVERY [JOBS]]]]]
#   e.g.   nice -n 19 sh tests/randgraph/campaign.sh build/gcompile /tmp/rgc bench/randgraph.log 100000 40 500 25
#   campaign.sh totals LOG   the sums over LOG's chunks (bench/RESULTS.md shows them)
set -u
py=${GC_TORCH_PYTHON:-/usr/bin/python3}
if [ "${1:-}" = totals ]; then   # campaign.sh totals LOG: the sums over its chunks
    exec "$py" - "$2" <<'PY'
import json, sys
t = {"chunks": 0, "graphs": 0, "failures": 0, "known": 0, "ops": 0, "seconds": 0.0}
ops, lev, mar, sat = {}, {}, {}, {}
for line in open(sys.argv[1]):
    s = json.loads(line)["summary"]
    t["chunks"] += 1
    for k in ("graphs", "failures", "known", "ops", "seconds"):
        t[k] += s[k]
    for d, src in ((ops, s["op_counts"]), (lev, s["lever_runs"]), (sat, s.get("saturated", {}))):
        for k, v in src.items():
            d[k] = d.get(k, 0) + v
    for l, m in s.get("margins", {}).items():   # the worst |diff| / tolerance per lever
        for k, v in m.items():
            mar.setdefault(l, {})[k] = max(mar.get(l, {}).get(k, 0.0), v)
print(json.dumps(t))
print("op kinds:", json.dumps(dict(sorted(ops.items()))))
print("lever runs:", json.dumps(dict(sorted(lev.items()))))
print("lever runs compared only before a step beyond float32:", json.dumps(dict(sorted(sat.items()))))
print("worst |diff| / tolerance:", json.dumps(dict(sorted(mar.items()))))
PY
fi
gc=$1 work=$2 log=$3 first=${4:-100000} chunks=${5:-40} chunk=${6:-500} mpi=${7:-25} jobs=${8:-2}
here=$(dirname "$0")
rev=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)   # the tester's and, run from one tree, gcompile's
i=0
while [ "$i" -lt "$chunks" ]; do
    s=$((first + i * chunk))
    if ! grep -q "\"first\": $s," "$log" 2>/dev/null; then
        out=$(nice -n 19 "$py" "$here/rg.py" campaign --gcompile "$gc" --work "$work/c$s" --first "$s" \
              --count "$chunk" --mpi-every "$mpi" --jobs "$jobs" --max-shrink "${RG_MAX_SHRINK:-2}" \
              --sample "${RG_SAMPLE:-0}" --emu-every "${RG_EMU_EVERY:-0}" --bf16-every "${RG_BF16_EVERY:-0}" 2>&1)
        rc=$?
        echo "$out" | grep -v '^randgraph summary: ' >"$work/chunk_$s.txt"
        line=$(echo "$out" | sed -n 's/^randgraph summary: //p')
        [ -n "$line" ] || { echo "chunk $s: no summary (exit $rc); see $work/chunk_$s.txt"; exit 1; }
        echo "{\"first\": $s, \"count\": $chunk, \"exit\": $rc, \"commit\": \"$rev\", \"summary\": $line}" >>"$log"
        [ "$rc" -eq 0 ] || echo "chunk $s: failures, see $work/chunk_$s.txt"
    fi
    i=$((i + 1))
done
