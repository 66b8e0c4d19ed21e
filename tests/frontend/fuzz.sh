#!/bin/sh
# Robustness: gcompile on hundreds of mutated copies of models/gpt2.graph must
# exit 0 or 1 — never a signal, a sanitizer report or another status.
# usage: fuzz.sh GCOMPILE MUTATE GRAPH COUNT WORKDIR
set -u
gc=$1 mutate=$2 graph=$3 count=$4 dir=$5
mkdir -p "$dir"
export ASAN_OPTIONS=detect_leaks=0:exitcode=99 UBSAN_OPTIONS=halt_on_error=1:exitcode=98:print_stacktrace=1
fail=0 ok=0 rejected=0
i=1
while [ "$i" -le "$count" ]; do
    f="$dir/m$i.graph"
    "$mutate" "$graph" "$f" "$i" || { echo "mutate failed"; exit 1; }
    "$gc" "$f" --config tiny --emit summary >/dev/null 2>"$dir/err"
    rc=$?
    if [ "$rc" -eq 0 ]; then
        ok=$((ok + 1))
    elif [ "$rc" -eq 1 ] && ! grep -q -e "runtime error" -e "Sanitizer" -e "internal compiler error" "$dir/err"; then
        rejected=$((rejected + 1))
        # every error line is located (file:line:col) or names gcompile
        if grep -v '^  ' "$dir/err" | grep -v -e "^$f:[0-9]*:[0-9]*: \(error\|note\): " -e "^gcompile: error: " >/dev/null; then
            echo "seed $i: unlocated error message:"; cat "$dir/err"; fail=$((fail + 1))
        fi
    else
        echo "seed $i: exit status $rc"; head -20 "$dir/err"; cp "$f" "$dir/crash$i.graph"; fail=$((fail + 1))
    fi
    rm -f "$f"
    i=$((i + 1))
done
echo "fuzz: $count inputs, $ok accepted, $rejected rejected with errors, $fail failures"
[ "$fail" -eq 0 ]
