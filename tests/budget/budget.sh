#!/bin/sh
# The budget search (driver/search.c, docs/budget.md).
#   optimal  against brute force: on tiny GPT-2 graphs of 1 to 6 layers (cpu
#            and cuda targets, B = 4 and 8), --search exhaustive plans every
#            per-layer mode (none, selective, full) x every micro-batch count
#            with the real planner; at budgets spread over those plans'
#            peaks (and one byte under each), the default search's choice
#            must fit and its predicted time must be within 1% of the least
#            predicted time that fits; under the smallest peak it must fail
#            and name that smallest peak as the budget that compiles.
# usage: budget.sh GCOMPILE GRAPH WORKDIR CHECK
set -u
gc=$1 graph=$2 dir=$3 check=$4
mkdir -p "$dir" && cd "$dir" || exit 1
fail() { echo "FAIL: $*"; exit 1; }

case $check in
optimal)
    for shape in "L=1" "L=2" "L=3" "L=4" "L=5" "L=6" "L=4 --target cuda" "L=3 -D B=8 -D T=32"; do
        set -- $shape
        L=${1#L=}
        shift
        args="--config tiny -D L=$L --target cpu $*"
        # every assignment, planned: "K modes peak ms" per line
        "$gc" "$graph" $args --mem 1TiB --search exhaustive --emit summary -v 2>ex.txt >/dev/null ||
            { cat ex.txt; fail "$shape: exhaustive search"; }
        sed -n 's/^gcompile: search: K=\([0-9]*\) recompute \([a-z]*\) *peak \([0-9]*\) predicted \([0-9.]*\) ms.*/\1 \2 \3 \4/p' \
            ex.txt >all.txt
        n=$(wc -l <all.txt)
        k=$(awk -v L="$L" '{ if (!($1 in seen)) { seen[$1] = 1; k++ } } END { print k }' all.txt)
        want=$(awk -v L="$L" -v k="$k" 'BEGIN { n = k; for (i = 0; i < L; i++) n *= 3; print n }')
        [ "$n" -eq "$want" ] || fail "$shape: exhaustive planned $n, expected $want (3^$L x $k micro-batch counts)"
        # budgets: 12 peaks spread over the sorted distinct peaks, each also minus one byte, the largest
        sort -n -u -k3,3 all.txt | awk '{ print $3 }' >peaks.txt
        np=$(wc -l <peaks.txt)
        awk -v np="$np" 'NR == 1 || NR == np || NR % int(np / 10 + 1) == 0 { print $1; print $1 - 1 }' peaks.txt |
            sort -n -u >budgets.txt
        min=$(head -1 peaks.txt)
        worst=0 count=0
        while read -r b; do
            best=$(awk -v b="$b" '$3 <= b && (best == "" || $4 < best) { best = $4 } END { print best }' all.txt)
            "$gc" "$graph" $args --mem "$b" --emit summary -v >/dev/null 2>s.txt
            rc=$?
            if [ -z "$best" ]; then   # nothing fits: exit 1 with the smallest peak
                [ $rc -eq 1 ] || fail "$shape --mem $b: nothing fits, yet the search exited $rc"
                got=$(sed -n 's/.*; --mem \([0-9]*\) compiles.*/\1/p' s.txt)
                [ "$got" = "$min" ] || { cat s.txt; fail "$shape --mem $b: smallest budget reported '$got', brute force $min"; }
                continue
            fi
            [ $rc -eq 0 ] || { cat s.txt; fail "$shape --mem $b: the search failed; brute force fits at $best ms"; }
            line=$(grep "search: chose" s.txt)
            set -- $(echo "$line" | sed -n 's/.*chose K=\([0-9]*\) recompute \([a-z]*\) peak \([0-9]*\) predicted \([0-9.]*\) ms.*/\1 \2 \3 \4/p')
            [ $# -eq 4 ] || fail "$shape --mem $b: no 'chose' line: $line"
            [ "$3" -le "$b" ] || fail "$shape --mem $b: chose a plan of $3 bytes"
            # the chosen assignment is one brute force planned, with the same peak and time
            grep -q "^$1 $2 $3 $4\$" all.txt || fail "$shape --mem $b: chose K=$1 $2 ($3 bytes, $4 ms), not as brute force planned it"
            r=$(awk -v t="$4" -v best="$best" 'BEGIN { printf "%.6f", t / best }')
            awk -v r="$r" 'BEGIN { exit !(r <= 1.01) }' ||
                fail "$shape --mem $b: chose K=$1 $2 at $4 ms; brute force fits at $best ms (ratio $r)"
            worst=$(awk -v r="$r" -v w="$worst" 'BEGIN { print (r > w ? r : w) }')
            count=$((count + 1))
        done <budgets.txt
        echo "$shape: $n plans; $count budgets that fit: worst ratio to brute force $worst; under $min: fails with the smallest"
    done
    ;;
*)
    fail "unknown check $check"
    ;;
esac
