#!/bin/sh
# Fault injection (issue 21): every counted I/O call of a run fails in turn.
# usage: inject.sh GCOMPILE GRAPH SHIM WORKDIR CHECK
#   CHECK train:    a tiny run with checkpoints every 2 steps, --keep 2, --log
#                   and --save, started as --resume ck (so it makes the dir);
#                   for every N: call N fails (EIO, or ENOSPC for even N), the
#                   run exits non-zero with an error naming the file, ck holds
#                   no temporary file, --save's path holds the old file or the
#                   complete new one, and the same command line without faults
#                   resumes and ends with the uninterrupted run's losses (every
#                   step line and log record of both runs equal to it) and its
#                   --save file byte for byte.
#   CHECK gcompile: gcompile writing each artifact kind over an old file: for
#                   every N the path holds the old file or the complete new
#                   one, no temporary is left, and the error names the file.
set -u
gc=$1 graph=$2 shim=$3 dir=$4 check=$5
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
fail() { echo "FAIL [$check]: $*"; exit 1; }
step_losses() { sed -n 's/^step *\([0-9]*\)\/[0-9]* | loss \([^ ]*\) .*/\1 \2/p' "$@"; }
log_losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$@"; }
# every "step loss" line of the inputs equals REF's line of that step
all_match() {  # all_match REF FILE...
    ref=$1; shift
    cat "$@" | awk -v ref="$ref" 'BEGIN { while ((getline l < ref) > 0) { split(l, a, " "); r[a[1]] = a[2] } }
        { if (!($1 in r) || r[$1] != $2) { printf "step %s: loss %s, uninterrupted run %s\n", $1, $2, r[$1]; bad = 1 } }
        END { exit bad }'
}
# run N ERRNO CMD...: the command with call N failing; sets rc, op and path
inject_run() {
    n=$1 e=$2; shift 2
    rm -f rep.txt
    LD_PRELOAD=$shim GC_FAULT_AT=$n GC_FAULT_ERRNO=$e GC_FAULT_REPORT=$PWD/rep.txt "$@" >a.out 2>a.err
    rc=$?
    line=$(grep '^injected ' rep.txt 2>/dev/null)
    [ -n "$line" ] || fail "call $n was never reached (the count of the counting run differs)"
    op=$(echo "$line" | cut -d' ' -f3)
    path=$(echo "$line" | cut -d' ' -f4-)
}
# the name an error should carry for a failed call on PATH: its base name,
# without the temporary suffix (.tmp, .tmp.XXXXXX) of an atomic write
base_of() { basename "$1" | sed 's/\.tmp\(\.[A-Za-z0-9]*\)\{0,1\}$//'; }
count_calls() {  # count_calls CMD...: sets total
    rm -f count.txt
    LD_PRELOAD=$shim GC_FAULT_REPORT=$PWD/count.txt "$@" >c.out 2>c.err || { cat c.err; fail "counting run: $*"; }
    total=$(sed -n 's/^count //p' count.txt)
    [ -n "$total" ] && [ "$total" -gt 0 ] || fail "the shim counted nothing (is it preloaded?)"
}
errno_of() { [ $(($1 % 2)) -eq 0 ] && echo ENOSPC || echo EIO; }

case "$check" in
train)
    "$gc" "$graph" --config tiny --target cpu -o t || fail "gcompile"
    set -- ./t --threads 1 --no-prefetch --steps 6 --save-every 2 --keep 2 --resume ck --log log.jsonl --save final.bin
    "$@" >ref.out 2>&1 || { cat ref.out; fail "reference run"; }
    step_losses ref.out >ref.txt
    log_losses log.jsonl >ref_log.txt
    [ "$(wc -l <ref.txt)" -eq 6 ] && [ "$(wc -l <ref_log.txt)" -eq 6 ] || fail "reference: not 6 steps"
    mv final.bin ref_final.bin
    rm -rf ck log.jsonl
    count_calls "$@"
    rm -rf ck log.jsonl final.bin
    echo "a run of 6 steps, 3 checkpoints, --keep 2, --log, --save: $total counted I/O calls"
    n=0 named=0
    while [ $n -lt "$total" ]; do
        n=$((n + 1))
        rm -rf ck log.jsonl
        echo old >final.bin
        inject_run $n "$(errno_of $n)" "$@"
        [ $rc -ne 0 ] || { cat a.err; fail "call $n ($op $path) failed but the run exited 0"; }
        name=$(base_of "$path")
        [ -d "$path" ] && name="syncing its directory failed"   # a directory's fsync: the file whose rename it was for
        grep "^error: " a.err | grep -qF "$name" || { cat a.err; fail "call $n ($op $path): the error does not name $name"; }
        named=$((named + 1))
        [ -z "$(ls ck 2>/dev/null | grep -v '^model_[0-9]*\.bin$' | grep -v '^state_[0-9]*\.bin$')" ] ||
            fail "call $n ($op $path): stray files in ck: $(ls ck)"
        [ "$(cat final.bin 2>/dev/null)" = old ] || cmp -s final.bin ref_final.bin ||
            fail "call $n ($op $path): final.bin is neither the old file nor the complete new one"
        # the same command line, no fault: resumes from what ck holds and ends as the uninterrupted run
        "$@" >b.out 2>b.err || { cat b.err; fail "call $n ($op $path): the resume failed"; }
        grep -q '^done: 6 steps\|^resume: step 6 from' b.out || fail "call $n: the resume did not finish"
        step_losses a.out b.out >got.txt
        all_match ref.txt got.txt || fail "call $n ($op $path): a loss differs from the uninterrupted run's"
        log_losses log.jsonl >got_log.txt
        all_match ref_log.txt got_log.txt || fail "call $n ($op $path): a log record differs"
        [ "$(cut -d' ' -f1 got_log.txt | sort -un | wc -l)" -eq 6 ] || fail "call $n: the log lacks steps: $(cat log.jsonl)"
        cmp -s final.bin ref_final.bin || fail "call $n ($op $path): --save after the resume differs"
        echo "call $n ($op $(basename "$path"), $(errno_of $n)): $(grep -m1 '^error: ' a.err | cut -c1-150)"
    done
    echo "ok: $total injected failures, each named in its error; every resume reproduced the uninterrupted run"
    ;;
gcompile)
    mkdir -p out tmp
    export TMPDIR=$PWD/tmp
    points=0
    for kind in plan plan-text plan-svg c exe; do
        if [ $kind = exe ]; then set -- "$gc" "$graph" --config tiny --target cpu -o out/$kind
        else set -- "$gc" "$graph" --config tiny --target cpu --emit $kind -o out/$kind; fi
        "$@" 2>ref.err || { cat ref.err; fail "$kind: reference"; }
        mv out/$kind ref_$kind
        echo old >out/$kind
        count_calls "$@"
        n=0
        while [ $n -lt "$total" ]; do
            n=$((n + 1))
            echo old >out/$kind
            inject_run $n "$(errno_of $n)" "$@"
            [ $rc -ne 0 ] || fail "$kind: call $n ($op $path) failed but gcompile exited 0"
            name=$(base_of "$path")
            grep -qF "$name" a.err || { cat a.err; fail "$kind: call $n ($op $path): the error does not name $name"; }
            if [ "$(cat out/$kind)" != old ]; then
                if [ $kind = exe ]; then
                    ./out/$kind --steps 0 >/dev/null 2>&1 || fail "exe: call $n ($op $path): out/exe is neither old nor complete"
                else
                    cmp -s out/$kind ref_$kind || fail "$kind: call $n ($op $path): out/$kind is neither old nor complete"
                fi
            fi
            [ "$(ls out)" = "$kind" ] || fail "$kind: call $n ($op $path): temporary files left: $(ls out)"
            [ -z "$(ls tmp)" ] || fail "$kind: call $n ($op $path): left in TMPDIR: $(ls tmp)"
            rm -f out/$kind
            echo "$kind: call $n ($op $(basename "$path")): $(head -n 1 a.err | cut -c1-150)"
        done
        points=$((points + total))
    done
    echo "ok: $points injected failures over 5 artifact kinds; every path held the old file or the complete new one"
    ;;
*) fail "unknown check $check" ;;
esac
echo "ok: $check"
