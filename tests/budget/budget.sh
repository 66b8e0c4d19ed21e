#!/bin/sh
# The budget search (driver/search.c, docs/budget.md).
#   optimal  against brute force: on tiny GPT-2 graphs of 1 to 6 layers (cpu
#            and cuda targets, B = 4 and 8), --search exhaustive plans every
#            per-layer mode (none, selective, full) x every micro-batch count
#            x every offload choice (none, opt, and with two layers or more
#            act, opt+act: --offload auto, the default) with the real
#            planner; at budgets spread over those plans'
#            peaks (and one byte under each), the default search's choice
#            must fit and its predicted time must be within 1% of the least
#            predicted time that fits; under the smallest peak it must fail
#            and name that smallest peak as the budget that compiles.
#   sweep    --emit budget-sweep: increasing budgets, never slower with more
#            memory, rows equal to what --mem at that budget chooses, the
#            first the smallest that fits, the last the unconstrained plan;
#            the SVG plot has a point per budget.
# usage: budget.sh GCOMPILE GRAPH WORKDIR CHECK [MAXL]
#   MAXL: optimal's shapes of at most MAXL layers (default: all, up to 6)
set -u
gc=$1 graph=$2 dir=$3 check=$4 maxl=${5:-6}
mkdir -p "$dir" && cd "$dir" || exit 1
fail() { echo "FAIL: $*"; exit 1; }

case $check in
optimal)
    for shape in "L=1" "L=2" "L=3" "L=4" "L=5" "L=6" "L=4 --target cuda" "L=3 -D B=8 -D T=32"; do
        set -- $shape
        L=${1#L=}
        shift
        [ "$L" -le "$maxl" ] || continue
        args="--config tiny -D L=$L --target cpu $*"
        # every assignment, planned: "K modes peak ms" per line
        "$gc" "$graph" $args --mem 1TiB --search exhaustive --emit summary -v 2>ex.txt >/dev/null ||
            { cat ex.txt; fail "$shape: exhaustive search"; }
        # "K modes+offload peak ms": the offload choice joined to the modes, one assignment a word
        sed -n 's/^gcompile: search: K=\([0-9]*\) recompute \([a-z]*\) offload \([a-z+]*\) *peak \([0-9]*\) predicted \([0-9.]*\) ms.*/\1 \2:\3 \4 \5/p' \
            ex.txt >all.txt
        n=$(wc -l <all.txt)
        k=$(awk -v L="$L" '{ if (!($1 in seen)) { seen[$1] = 1; k++ } } END { print k }' all.txt)
        m=$(awk '{ sub(/.*:/, "", $2); if (!($2 in seen)) { seen[$2] = 1; m++ } } END { print m }' all.txt)
        wm=4
        [ "$L" -lt 2 ] && wm=2
        [ "$m" -eq "$wm" ] || fail "$shape: exhaustive planned $m offload choices, expected $wm"
        want=$(awk -v L="$L" -v k="$k" -v m="$m" 'BEGIN { n = k * m; for (i = 0; i < L; i++) n *= 3; print n }')
        [ "$n" -eq "$want" ] || fail "$shape: exhaustive planned $n, expected $want (3^$L x $k micro-batch counts x $m offload choices)"
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
            set -- $(echo "$line" | sed -n 's/.*chose K=\([0-9]*\) recompute \([a-z]*\) offload \([a-z+]*\) peak \([0-9]*\) predicted \([0-9.]*\) ms.*/\1 \2:\3 \4 \5/p')
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
sweep)     # --emit budget-sweep: budgets from the smallest plan to the unconstrained one, each the search's choice
    args="--config tiny -D L=4 --target cpu"
    "$gc" "$graph" $args --emit budget-sweep >sweep.txt || fail "budget-sweep"
    cat sweep.txt
    # rows: budget-human budget-bytes peak-human(2 fields) K recompute... ms letters; take bytes, K, ms, letters
    awk 'NR > 2 { print $3, $6, $(NF-1), $NF }' sweep.txt >rows.txt
    n=$(wc -l <rows.txt)
    [ "$n" -ge 10 ] && [ "$n" -le 20 ] || fail "expected 10 to 20 budgets, got $n"
    awk 'NR > 1 && !($1 > b) { print "budgets not increasing at row " NR; bad = 1 }
         NR > 1 && $3 > ms + 1e-9 { print "more memory, slower plan at row " NR; bad = 1 }
         { b = $1; ms = $3 } END { exit bad }' rows.txt || fail "the sweep is not a trade-off curve"
    # each row is what --mem at that budget chooses (three rows checked), with the same peak
    for r in 1 $((n / 2)) $n; do
        set -- $(sed -n "${r}p" rows.txt)
        "$gc" "$graph" $args --mem "$1" --emit summary -v 2>s.txt >/dev/null || { cat s.txt; fail "--mem $1 (row $r)"; }
        ms=$(sed -n "s/.*search: chose K=$2 recompute $4 offload [a-z+]* peak [0-9]* predicted \([0-9.]*\) ms.*/\1/p" s.txt)
        [ -n "$ms" ] && awk -v a="$ms" -v b="$3" 'BEGIN { d = a - b; exit !(d < 0.0005 && d > -0.0005) }' ||
            { grep chose s.txt; fail "row $r: the sweep says K=$2 $4 at $3 ms"; }
    done
    # the first budget is the smallest: one byte less fits nothing; the last is the unconstrained choice
    first=$(head -1 rows.txt | cut -d' ' -f1)
    "$gc" "$graph" $args --mem $((first - 1)) --emit summary >/dev/null 2>err.txt && fail "--mem $((first - 1)) fits"
    grep -q "nothing fits" err.txt || { cat err.txt; fail "--mem $((first - 1)): no 'nothing fits'"; }
    set -- $(tail -1 rows.txt)
    "$gc" "$graph" $args --mem 1TiB --emit summary -v 2>s.txt >/dev/null
    grep -q "search: chose K=$2 recompute $4 " s.txt || { grep chose s.txt; fail "the last row is not the unconstrained plan"; }
    # the SVG plot: well-formed, a point per budget
    "$gc" "$graph" $args --emit budget-sweep -o sweep.svg || fail "budget-sweep -o sweep.svg"
    head -1 sweep.svg | grep -q "^<svg " || fail "sweep.svg is not SVG"
    [ "$(grep -c "<circle" sweep.svg)" -eq "$n" ] || fail "sweep.svg: expected $n points"
    if command -v xmllint >/dev/null; then xmllint --noout sweep.svg || fail "sweep.svg is not well-formed XML"; fi
    # the levers are the sweep's to choose
    "$gc" "$graph" $args --emit budget-sweep --recompute full >/dev/null 2>err.txt && fail "sweep with --recompute full"
    grep -q "chooses micro-batches and recompute itself" err.txt || { cat err.txt; fail "sweep --recompute message"; }
    ;;
*)
    fail "unknown check $check"
    ;;
esac
