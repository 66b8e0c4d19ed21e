#!/bin/sh
# Junk inserted at line N of the model is reported at line N (first error).
set -u
gc=$1 graph=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=$(wc -l <"$graph")
fail=0
for line in 1 2 10 25 33 47 52 60 66 70 $n; do
    for junk in '@@junk@@' 'x = = 1' 'param' ') ('; do
        f="$tmp/junk.graph"
        awk -v n="$line" -v j="$junk" 'NR == n { print j } { print }' "$graph" >"$f"
        "$gc" "$f" --emit summary >/dev/null 2>"$tmp/err"
        rc=$?
        first=$(head -1 "$tmp/err")
        case "$first" in
            "$f:$line:"*) [ "$rc" -eq 1 ] || { echo "line $line '$junk': exit $rc"; fail=1; } ;;
            *) echo "line $line '$junk': first error is: $first"; fail=1 ;;
        esac
    done
done
exit $fail
