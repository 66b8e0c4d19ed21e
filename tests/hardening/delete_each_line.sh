#!/bin/sh
# Deletes each line of a graph in turn (tiny config, the whole pipeline to a
# checked plan): every compile exits 0, or 1 with a located error; a crash,
# an abort or an internal error fails the test.
set -u
gc=$1 graph=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=$(wc -l <"$graph")
fail=0 ok=0 err=0
i=1
while [ "$i" -le "$n" ]; do
    sed "${i}d" "$graph" >"$tmp/g.graph"
    for args in "--config tiny --emit plan-text --target cpu" "--emit plan --schedule plain"; do
        # shellcheck disable=SC2086
        "$gc" "$tmp/g.graph" $args >/dev/null 2>"$tmp/err"
        rc=$?
        if [ $rc -eq 0 ]; then ok=$((ok + 1))
        elif [ $rc -eq 1 ] && grep -q 'error: ' "$tmp/err" && ! grep -q 'internal' "$tmp/err"; then err=$((err + 1))
        else echo "FAIL: line $i deleted ($args): exit $rc"; head -5 "$tmp/err"; fail=1
        fi
    done
    i=$((i + 1))
done
echo "$n lines: $ok compiles, $err located errors"
exit $fail
