#!/bin/sh
# Long-run features of the compiled tiny GPT-2 on the CPU (issue 12):
# checkpoints, resume, signals.
# usage: longrun.sh GCOMPILE GRAPH WORKDIR CHECK
#   CHECK: resume_kill | sigterm | ckpt_faults | files | guards
set -u
gc=$1 graph=$2 dir=$3 check=$4
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
fail() { echo "FAIL [$check]: $*"; exit 1; }
compile() {  # compile OUT [gcompile args...]
    out=$1; shift
    "$gc" "$graph" --config tiny --target cpu -o "$out" "$@" || fail "gcompile $*"
}
# "step loss" for every step line of the given outputs
step_losses() { sed -n 's/^step *\([0-9]*\)\/[0-9]* | loss \([^ ]*\) .*/\1 \2/p' "$@"; }
# every step line printed by any run must equal the uninterrupted run's, and
# steps 1..N must all have been printed
same_as_ref() {  # same_as_ref REF N OUTPUTS...
    ref=$1 nsteps=$2; shift 2
    step_losses "$@" | sort -n -k1,1 -u -s >got_steps.txt
    step_losses "$@" | sort -u | awk -v ref="$ref" 'BEGIN { while ((getline l < ref) > 0) { split(l, a, " "); r[a[1]] = a[2] } }
        { if (r[$1] != $2) { printf "step %s: loss %s, uninterrupted run %s\n", $1, $2, r[$1]; bad = 1 } }
        END { exit bad }' || fail "a resumed run's loss differs from the uninterrupted run's"
    [ "$(wc -l <got_steps.txt)" -eq "$nsteps" ] || fail "expected steps 1..$nsteps, got $(wc -l <got_steps.txt)"
}
# every checkpoint in DIR resumes (copied alone into a scratch dir)
all_readable() {  # all_readable DIR
    for s in "$1"/state_*.bin; do
        [ -e "$s" ] || continue
        m=$(echo "$s" | sed 's/state_/model_/')
        rm -rf one && mkdir one && cp "$s" "$m" one/ || fail "copy $s"
        ./t --threads 1 --steps 0 --resume one >one.txt 2>&1 || { cat one.txt; fail "checkpoint $s unreadable"; }
        grep -q '^resume: step' one.txt || fail "checkpoint $s not resumed"
    done
    [ -z "$(ls "$1" | grep -v '^model_[0-9]*\.bin$' | grep -v '^state_[0-9]*\.bin$' | grep -v '\.tmp$')" ] ||
        fail "unexpected files in $1: $(ls "$1")"
}
# wait_for FILE PATTERN: until a line of FILE matches (5 s at most)
wait_for() {
    w=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        w=$((w + 1)); [ $w -gt 1000 ] && return 1
        sleep 0.005
    done
}

case "$check" in
resume_kill)  # SIGKILL at ten random moments, in steps and in saves; resume each time
    compile t
    ./t --threads 1 --steps 40 >ref_out.txt || fail "reference run"
    step_losses ref_out.txt >ref.txt
    seed=${GC_TEST_SEED:-$(date +%s)}
    echo "kill moments from seed $seed (GC_TEST_SEED=$seed reproduces them)"
    # the median step time of the reference run scales the kills that must land in a step
    ms=$(sed -n 's/^step .* | \([0-9.]*\) ms | .*/\1/p' ref_out.txt | sort -n | awk '{ a[NR] = $1 } END { print (NR ? a[int((NR + 1) / 2)] : 5) }')
    # even kills: up to 30 ms into a save (each save takes >= 40 ms); odd kills: up
    # to 1.5 steps after step 5k+1 is printed, three steps before the next save
    awk -v s="$seed" -v ms="$ms" 'BEGIN { srand(s); for (i = 1; i <= 10; i++)
        printf "%.4f\n", i % 2 ? rand() * 1.5 * ms / 1000 : rand() * 0.03 }' >delays.txt
    in_save=0 in_step=0 i=0
    export GC_CKPT_TEST_DELAY_MS=20   # each checkpoint file takes >= 20 ms, so saves can be hit
    for d in $(cat delays.txt); do
        i=$((i + 1))
        ./t --threads 1 --steps 40 --save-every 5 --keep 3 --resume ck >out_$i.txt 2>&1 &
        pid=$!
        # kill i lands inside the save of step ~3.8i (even i) or in the steps
        # after step 5k+1 at or below it (odd i)
        target=$((i * 38 / 10))
        if [ $((i % 2)) -eq 0 ]; then
            wait_for out_$i.txt "^checkpoint: writing step $(((target + 4) / 5 * 5)) "
        else
            wait_for out_$i.txt "^step *$((target / 5 * 5 + 1))/"
        fi
        sleep "$d"
        kill -9 $pid 2>/dev/null
        wait $pid 2>/dev/null
        last=$(tail -n 1 out_$i.txt)
        case "$last" in
            "checkpoint: writing"*) in_save=$((in_save + 1)); where=save ;;
            *) in_step=$((in_step + 1)); where=step ;;
        esac
        echo "kill $i after ${d}s: during a $where ($last)"
        all_readable ck
    done
    unset GC_CKPT_TEST_DELAY_MS
    ./t --threads 1 --steps 40 --save-every 5 --keep 3 --resume ck >out_final.txt 2>&1 || { cat out_final.txt; fail "final resume"; }
    grep -q '^done: 40 steps' out_final.txt || fail "the final run did not finish"
    all_readable ck
    echo "kills: $in_save during saves, $in_step during or between steps"
    [ $in_save -ge 2 ] && [ $in_step -ge 2 ] || fail "kills did not hit both steps and saves"
    same_as_ref ref.txt 40 out_*.txt
    [ "$(ls ck | grep -c '^state_')" -eq 3 ] || fail "--keep 3: $(ls ck)"
    ;;
sigterm)      # SIGTERM: the step finishes, a checkpoint is written, exit 0; resume finishes bit-identically
    compile t
    ./t --threads 1 --steps 30 >ref_out.txt || fail "reference run"
    step_losses ref_out.txt >ref.txt
    for sig in TERM INT; do
        rm -rf ck_$sig
        ./t --threads 1 --steps 30 --ckpt-dir ck_$sig >a_$sig.txt 2>&1 &
        pid=$!
        wait_for a_$sig.txt '^step *3/' || fail "no step 3"
        kill -$sig $pid
        wait $pid
        rc=$?
        [ $rc -eq 0 ] || { cat a_$sig.txt; fail "SIG$sig: exit $rc"; }
        n=$(sed -n "s/^stopped by SIG$sig after step \([0-9]*\); resume with --resume$/\1/p" a_$sig.txt)
        [ -n "$n" ] || { cat a_$sig.txt; fail "SIG$sig: no 'stopped by' line"; }
        [ -f "ck_$sig/state_$(printf %08d "$n").bin" ] || fail "SIG$sig: no checkpoint of step $n"
        ./t --threads 1 --steps 30 --resume ck_$sig >b_$sig.txt 2>&1 || { cat b_$sig.txt; fail "resume after SIG$sig"; }
        grep -q "^resume: step $n " b_$sig.txt || fail "resume did not start from step $n"
        same_as_ref ref.txt 30 a_$sig.txt b_$sig.txt
        echo "SIG$sig after step $n: resumed bit-identically"
    done
    ;;
ckpt_faults)  # corrupt, truncated and mismatched checkpoints; a full disk while saving
    compile t
    expect_error() {  # expect_error PATTERN ARGS...: exit 1, one "error: " line containing PATTERN
        pat=$1; shift
        ./t --threads 1 "$@" >out.txt 2>err.txt
        rc=$?
        [ "$rc" -eq 1 ] || { cat err.txt; fail "$*: exit $rc"; }
        [ "$(wc -l <err.txt)" -eq 1 ] && grep -q '^error: ' err.txt || { cat err.txt; fail "$*: not one error line"; }
        grep -q -- "$pat" err.txt || { cat err.txt; fail "$*: error lacks '$pat'"; }
        echo "ok: $(cat err.txt)"
    }
    ./t --threads 1 --steps 3 --ckpt-dir good >/dev/null || fail "checkpoint run"
    S=state_00000003.bin M=model_00000003.bin
    fresh() { rm -rf c && cp -r good c; }
    fresh; head -c 1000 good/$S >c/$S
    expect_error "c/$S: offset 1000: file ends after 1000 bytes, inside the 1024-byte header" --steps 5 --resume c
    fresh; head -c 5000 good/$S >c/$S
    expect_error "c/$S: offset 5000: file is 5000 bytes, header says 1024 + 964608 (truncated)" --steps 5 --resume c
    fresh; printf 'X' | dd of=c/$S bs=1 seek=100000 conv=notrunc 2>/dev/null
    expect_error "c/$S: offset 1024: checksum of the optimizer state" --steps 5 --resume c
    fresh; printf 'X' | dd of=c/$S bs=1 seek=24 conv=notrunc 2>/dev/null
    expect_error "c/$S: offset 1016: header checksum mismatch" --steps 5 --resume c
    fresh; printf 'XXXX' | dd of=c/$S bs=1 seek=0 conv=notrunc 2>/dev/null
    expect_error "c/$S: offset 0: bad magic" --steps 5 --resume c
    fresh; printf 'X' | dd of=c/$M bs=1 seek=300000 conv=notrunc 2>/dev/null
    expect_error "c/$M: offset 1024: the parameters do not match the checksum in c/$S" --steps 5 --resume c
    fresh; head -c 3000 good/$M >c/$M
    expect_error "c/$M: offset 3000: file ends after 3000 bytes" --steps 5 --resume c
    fresh; rm c/$M
    expect_error "c/$M: cannot open" --steps 5 --resume c
    "$gc" "$graph" --config tiny -D C=32 --target cpu -o t_c32 || fail "gcompile C=32"
    ./t_c32 --steps 0 --resume good >out.txt 2>err.txt && fail "C=32 program resumed a C=64 state"
    grep -q "good/$S: offset 96: state has C = 64 but the program was compiled with C = 32" err.txt || { cat err.txt; fail "dims message"; }
    sed 's/\blnfb\b/lnf_bias/g' "$graph" >renamed.graph   # same dims, another parameter layout
    "$gc" renamed.graph --config tiny --target cpu -o t_renamed || fail "gcompile renamed.graph"
    ./t_renamed --steps 0 --resume good >out.txt 2>err.txt && fail "another plan resumed the state"
    grep -q "good/$S: offset 32: written by a program with another plan" err.txt || { cat err.txt; fail "hash message"; }
    # a full disk: a checkpoint file's write fails with ENOSPC (tests/fault's shim, when built)
    shim=$(dirname "$gc")/tests/fault/libgcfault.so
    for which in model state; do
        [ -f "$shim" ] || { echo "skip: full disk ($shim not built)"; break; }
        fresh
        LD_PRELOAD=$shim GC_FAULT_AT=1 GC_FAULT_OPS=write GC_FAULT_PATH=${which}_00000006.bin.tmp GC_FAULT_ERRNO=ENOSPC \
            ./t --threads 1 --steps 6 --resume c >out.txt 2>err.txt
        [ $? -eq 1 ] || fail "a full disk did not fail the run"
        [ "$(wc -l <err.txt)" -eq 1 ] || { cat err.txt; fail "not one error line"; }
        grep -q "^error: c/${which}_00000006.bin: cannot write: No space left on device; the previous checkpoint (step 3 in c) is intact" err.txt ||
            { cat err.txt; fail "full disk message"; }
        [ "$(ls c)" = "$(printf '%s\n' $M $S)" ] || fail "after a failed save: $(ls c)"
        cmp -s c/$S good/$S && cmp -s c/$M good/$M || fail "the previous checkpoint changed"
        # a stale NAME.tmp that is a device node, or a link to one, is removed: never written through,
        # never renamed over NAME (a node of our own: mknod needs root, else a link to a missing node)
        rm -f nullnode; mknod nullnode c 1 3 2>/dev/null || echo "skip: mknod (not root): a dangling link instead"
        for stale in node link; do
            fresh
            if [ $stale = node ]; then mknod c/${which}_00000006.bin.tmp c 1 3 2>/dev/null || continue
            else ln -s "$PWD/nullnode" c/${which}_00000006.bin.tmp; fi
            ./t --threads 1 --steps 6 --resume c >out.txt 2>err.txt || { cat err.txt; fail "a stale $stale as $which .tmp"; }
            [ -f c/${which}_00000006.bin ] && [ ! -L c/${which}_00000006.bin ] || fail "$which: not a regular file"
            [ ! -e nullnode ] || [ -c nullnode ] || fail "the device node behind the link was replaced"
            echo "ok: a stale ${which}_00000006.bin.tmp ($stale) was replaced by the real file"
        done
    done
    ;;
files)        # issue 21: outputs that are devices, FIFOs or directories; FIFO inputs; a log or stdout that cannot be written
    compile t
    if mknod full c 1 7 2>/dev/null && mknod null c 1 3 2>/dev/null; then echo "device nodes made with mknod"
    else rm -f full null; ln -s /dev/full full; ln -s /dev/null null; echo "not root: links to /dev/full and /dev/null"; fi
    mkfifo fifo || fail "mkfifo"
    is_dev() { [ -c "$1" ] || fail "$1 is no longer a device: $(ls -l "$1")"; }
    expect() {  # expect RC PATTERN ARGS...: ./t exits RC within 20 s, stderr contains PATTERN
        want=$1 pat=$2; shift 2
        timeout 20 ./t --threads 1 "$@" >out.txt 2>err.txt
        rc=$?
        [ $rc -eq 124 ] && fail "$*: hung (20 s)"
        [ $rc -eq "$want" ] || { cat err.txt; fail "$*: exit $rc, expected $want"; }
        [ -z "$pat" ] || grep -qF -- "$pat" err.txt || { cat err.txt; fail "$*: stderr lacks '$pat'"; }
        [ -z "$pat" ] || echo "ok: $(head -n 1 err.txt)"
    }
    expect 0 "" --steps 2 --save null
    expect 1 "error: full: cannot write: No space left on device" --steps 2 --save full
    expect 1 "error: fifo: cannot write: it is a FIFO, not a regular file or a device" --steps 2 --save fifo
    grep -q '^step' out.txt && fail "--save FIFO was refused only after training"
    expect 0 "" --steps 2 --log null
    expect 1 "error: full: cannot write the log: No space left on device; stopped after step 1 (no --ckpt-dir: nothing saved)" --steps 3 --log full
    rm -rf ckl
    expect 1 "error: full: cannot write the log: No space left on device; stopped after step 1, its checkpoint saved in ckl" \
        --steps 3 --log full --ckpt-dir ckl
    [ -f ckl/state_00000001.bin ] || fail "no checkpoint before the log error: $(ls ckl)"
    expect 1 "error: fifo: cannot write: it is a FIFO" --steps 2 --log fifo
    is_dev null; is_dev full
    for flag in --data --val-data --init; do
        expect 1 "error: fifo: not a regular file" --steps 1 $flag fifo
        expect 1 "error: /dev/zero: not a regular file" --steps 1 $flag /dev/zero
    done
    # a device node where a checkpoint file goes is refused, never replaced
    rm -rf ckd && mkdir ckd
    if mknod ckd/model_00000002.bin c 1 3 2>/dev/null; then
        expect 1 "error: ckd/model_00000002.bin: cannot write: it is a device, not a regular file (refusing to replace it)" \
            --steps 2 --ckpt-dir ckd
        is_dev ckd/model_00000002.bin
    fi
    timeout 20 ./t --threads 1 --steps 2 >full 2>err.txt && fail "stdout on a full device: exit 0"
    grep -q '^error: standard output: cannot write' err.txt || { cat err.txt; fail "no error for stdout"; }
    is_dev full
    echo "ok: $(cat err.txt)"
    ;;
guards)       # issue 21: resume refusals, the --ckpt-dir lock, divergence and non-finite checkpoints
    compile t
    T="./t --threads 1"
    expect_error() {  # expect_error PATTERN ARGS...: exit 1, stderr contains PATTERN
        pat=$1; shift
        $T "$@" >out.txt 2>err.txt
        rc=$?
        [ "$rc" -eq 1 ] || { cat err.txt; fail "$*: exit $rc"; }
        grep -qF -- "$pat" err.txt || { cat err.txt; fail "$*: error lacks '$pat'"; }
        echo "ok: $(grep -m1 '^error' err.txt)"
    }
    $T --steps 4 --ckpt-dir ck >/dev/null || fail "first run"
    expect_error "error: --resume ck: the checkpoint is of step 4, past --steps 2: nothing to do" --steps 2 --resume ck
    $T --steps 0 --resume ck >out.txt 2>&1 || { cat out.txt; fail "--steps 0 --resume (load only)"; }
    $T --steps 2 --ckpt-dir cks --shuffle >/dev/null || fail "shuffled run"
    expect_error "error: resume: the checkpoint was written by a run with --shuffle, this run is without it" --steps 4 --resume cks
    expect_error "error: resume: the checkpoint was written by a run without --shuffle, this run is with it" --steps 6 --resume ck --shuffle
    $T --steps 4 --resume cks --shuffle >out.txt 2>&1 || { cat out.txt; fail "shuffled resume"; }
    # two runs on one --ckpt-dir: the second is refused while the first holds the lock
    $T --steps 1000000 --ckpt-dir lk >bg.txt 2>&1 &
    pid=$!
    wait_for bg.txt '^step *2/' || { kill $pid; fail "the first run did not start"; }
    expect_error "error: --ckpt-dir lk: another run (pid $pid) is using it (lk/.lock is locked)" --steps 2 --ckpt-dir lk
    expect_error "error: --ckpt-dir lk: another run (pid $pid) is using it" --steps 2 --resume lk
    kill -TERM $pid; wait $pid || fail "the first run after SIGTERM"
    $T --steps 1 --ckpt-dir lk2 >/dev/null && $T --steps 2 --resume lk2 >/dev/null || fail "the lock outlived its run"
    # divergence: the newest checkpoint that predates it, and it resumes
    rm -rf dv
    $T --steps 4 --ckpt-dir dv --save-every 1 >/dev/null || fail "run before the divergence"
    # step 5's update diverges (lr 1e30): step 6's loss is nan, step 5's checkpoint leads straight to it
    expect_error "step 6: loss is nan; stopped: the newest checkpoint that predates the divergence is step 4 in dv (those of steps 5.. hold the parameters that led to it" \
        --steps 8 --lr 1e30 --resume dv --save-every 1
    mkdir -p away && mv dv/*_00000005.bin away/ || fail "move step 5 away"
    $T --steps 8 --resume dv >out.txt 2>&1 || { cat out.txt; fail "resume from the checkpoint before the divergence"; }
    grep -q '^resume: step 4 from' out.txt || fail "did not resume from step 4"
    # parameters that are not finite are never checkpointed (--skip-nonfinite skipping every step, --save)
    $T --steps 0 --save init.bin >/dev/null || fail "init.bin"
    printf '\000\000\300\177' | dd of=init.bin bs=1 seek=$((1024 + 4 * 10)) conv=notrunc 2>/dev/null   # element 10 = nan
    expect_error "error: checkpoint step 3: not written: the parameters: element 10 (parameter wte) is nan (the run diverged); no earlier checkpoint of this run in nf" \
        --steps 3 --init init.bin --skip-nonfinite --ckpt-dir nf
    [ -z "$(ls nf | grep '^state_')" ] || fail "a checkpoint of nan parameters was written: $(ls nf)"
    expect_error "error: out.bin: not written: the parameters: element 10 (parameter wte) is nan (the run diverged)" \
        --steps 2 --init init.bin --skip-nonfinite --save out.bin
    [ ! -e out.bin ] || fail "--save wrote nan parameters"
    ;;
*) fail "unknown check $check" ;;
esac
echo "ok: $check"
