#!/bin/sh
# run.sh TEST BINDIR WORKDIR SRCDIR — one runtime-harness test (CTest runs
# each as runtime_TEST). The programs under test are builds of fake_model.c,
# a hand-written gc_program; fixtures are made here with rt_fixture.
# Exit 0 = pass; a failure prints "FAIL [TEST]: why" on stderr.
set -u
T=$1 BIN=$2 W=$3 SRC=$4
FAKE=$BIN/rt_fake_model
FAKE_BAD=$BIN/rt_fake_model_badgrad
FAKE_V100=$BIN/rt_fake_v100
FAKE_V300=$BIN/rt_fake_v300
FIX=$BIN/rt_fixture
NPARAM=4360                      # fake_model.c: 256*8 + 8 + 8*256 + 256
CKPT_BYTES=$((1024 + 4 * NPARAM))

rm -rf "$W" && mkdir -p "$W" && cd "$W" || exit 1

fail() { echo "FAIL [$T]: $*" >&2; exit 1; }

# run_ok CMD...: must exit 0; stdout in out.txt, stderr in err.txt.
run_ok() {
    "$@" >out.txt 2>err.txt
    rc=$?
    [ $rc -eq 0 ] || { cat err.txt >&2; fail "exit $rc from: $*"; }
}

# expect_err PATTERN CMD...: exit status exactly 1 (no signal), and stderr
# is exactly one line that starts with "error: " and contains PATTERN.
expect_err() {
    pat=$1
    shift
    "$@" >out.txt 2>err.txt
    rc=$?
    [ $rc -eq 1 ] || { cat err.txt >&2; fail "expected exit 1, got $rc from: $*"; }
    [ "$(wc -l <err.txt)" -eq 1 ] || { cat err.txt >&2; fail "expected one line on stderr from: $*"; }
    grep -q '^error: ' err.txt || fail "stderr does not start with 'error: ': $(cat err.txt)"
    grep -qF -- "$pat" err.txt || fail "stderr lacks '$pat': $(cat err.txt)"
    echo "ok: $(cat err.txt)"
}

losses() { sed -n 's/.*"loss":\([^,}]*\).*/\1/p' "$1"; }
val_at() { sed -n "s/^{\"step\":$2,.*\"val_loss\":\([^,}]*\).*/\1/p" "$1"; }
file_size() { wc -c <"$1" | tr -d ' '; }
no_tmp_files() { [ -z "$(find . -name '*.tmp')" ] || fail "temporary files left: $(find . -name '*.tmp')"; }

t_help() {
    run_ok "$FAKE" --help
    for f in --data --val-data --val-every --val-batches --init --save --steps --lr --beta1 \
             --beta2 --eps --weight-decay --seed --log --threads --sample --gradcheck \
             --gradcheck-tol --gradcheck-h --ckpt-dir --save-every --keep --resume --warmup --lr-schedule \
             --lr-final-frac --grad-clip --skip-nonfinite --shuffle --no-prefetch --print-every --peak-flops \
             --help --version; do
        grep -q -- "^  $f" out.txt || fail "--help does not list $f"
    done
    # every flag of the program's table (runtime/flags.c long_opts), not only the ones listed above
    flags=$(sed -n 's/^    {"\([a-z0-9-]*\)", [a-z_]*_argument, 0, OPT_[A-Z0-9_]*},$/\1/p' "$SRC/../../runtime/flags.c")
    [ "$(echo "$flags" | wc -w)" -ge 30 ] || fail "could not read the flag table of runtime/flags.c"
    for f in $flags; do
        grep -Eq -- "^  --$f( |\[|=|\$)" out.txt || fail "--help does not document --$f"
    done
    grep -q 'training steps (default 20)' out.txt || fail "--help lacks the --steps default"
    grep -q 'learning rate (default 0.01)' out.txt || fail "--help lacks the program's --lr default"
    [ -s err.txt ] && fail "--help wrote to stderr"
    run_ok "$FAKE" -h
    run_ok "$FAKE" --version
    grep -q 'fake_model.c' out.txt || fail "--version does not name the graph"
}

t_bad_flags() {
    expect_err "unknown flag '--bogus'" "$FAKE" --bogus
    expect_err "unknown flag '-x'" "$FAKE" -x
    expect_err "flag '--steps' needs a value" "$FAKE" --steps
    expect_err "--steps: bad value 'abc'" "$FAKE" --steps abc
    expect_err "--steps: bad value '-1'" "$FAKE" --steps -1
    expect_err "--steps: bad value '5x'" "$FAKE" --steps 5x
    expect_err "--lr: bad value 'fast'" "$FAKE" --lr fast
    expect_err "--lr: bad value 'nan'" "$FAKE" --lr nan
    expect_err "--beta1: bad value '1'" "$FAKE" --beta1 1
    expect_err "--eps: bad value '0'" "$FAKE" --eps 0
    expect_err "--weight-decay: bad value '-0.1'" "$FAKE" --weight-decay -0.1
    expect_err "--threads: bad value '0'" "$FAKE" --threads 0
    expect_err "--seed: bad value '-3'" "$FAKE" --seed -3
    expect_err "--gradcheck: bad value '0'" "$FAKE" --gradcheck=0
    expect_err "--val-batches: bad value '0'" "$FAKE" --val-batches 0
    expect_err "unexpected argument 'extra'" "$FAKE" --steps 1 extra
    expect_err "--val-every needs --val-data" "$FAKE" --val-every 5
    expect_err "--save-every needs --ckpt-dir" "$FAKE" --save-every 5
    expect_err "--keep: bad value '0'" "$FAKE" --keep 0
    expect_err "cannot open log" "$FAKE" --steps 1 --log "$W/nodir/x.jsonl"
    expect_err "step 2: loss is nan" "$FAKE" --steps 5 --lr 1e30
}

t_train_corpus() {
    run_ok "$FAKE" --steps 30 --log log.jsonl
    grep -q '^data: built-in corpus' out.txt || fail "no built-in corpus line"
    [ "$(grep -c '^step ' out.txt)" -eq 30 ] || fail "expected 30 progress lines"
    grep -Eq '^step +1/30 \| loss [0-9]+\.[0-9]{6} \| lr [0-9.]+e[-+][0-9]+ \| norm [0-9.]+ \| [0-9.]+ ms \| [0-9]+ tok/s$' out.txt ||
        fail "progress line format: $(grep '^step' out.txt | head -1)"
    losses log.jsonl >l.txt
    awk 'NR<=5 {a += $1} NR>25 {b += $1} END {printf "first5 %.4f last5 %.4f\n", a/5, b/5; exit !(b/5 < a/5 - 0.5)}' l.txt ||
        fail "loss did not fall by 0.5"
}

t_train_data() {
    "$FIX" text2shard "$SRC/fake_model.c" train.bin || fail fixture
    "$FIX" text2shard "$SRC/fixture.c" val.bin || fail fixture
    run_ok "$FAKE" --data train.bin --val-data val.bin --val-every 5 --steps 10 --log log.jsonl
    grep -q '^data: train.bin' out.txt || fail "data line"
    [ "$(grep -c '| val loss' out.txt)" -eq 2 ] || fail "expected val loss at steps 5 and 10"
    # sequential batches that wrap: with 2*B*T+1 tokens and lr 0 the losses go A B A B
    "$FIX" shard two.bin 513 || fail fixture
    run_ok "$FAKE" --data two.bin --steps 4 --lr 0 --log two.jsonl
    losses two.jsonl | tr '\n' ' ' >l.txt
    read -r a b c d <l.txt
    [ "$a" = "$c" ] && [ "$b" = "$d" ] && [ "$a" != "$b" ] || fail "batches are not sequential with wrap: $a $b $c $d"
}

t_determinism() {
    run_ok "$FAKE" --steps 10 --threads 2 --log a.jsonl
    run_ok "$FAKE" --steps 10 --threads 2 --log b.jsonl
    run_ok "$FAKE" --steps 10 --threads 2 --log c.jsonl --seed 7
    losses a.jsonl >a.txt
    losses b.jsonl >b.txt
    losses c.jsonl >c.txt
    [ "$(wc -l <a.txt)" -eq 10 ] || fail "expected 10 losses"
    cmp -s a.txt b.txt || fail "same seed, different losses"
    cmp -s a.txt c.txt && fail "different seeds, same losses"
    return 0
}

t_log_jsonl() {
    "$FIX" text2shard "$SRC/fixture.c" val.bin || fail fixture
    run_ok "$FAKE" --steps 6 --val-data val.bin --val-every 2 --val-batches 3 --log log.jsonl
    [ "$(wc -l <log.jsonl)" -eq 6 ] || fail "expected 6 lines"
    num='-?[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?'
    bad=$(grep -Evc "^\\{\"step\":[0-9]+,\"loss\":$num,\"ms\":$num,\"tok_per_s\":$num,\"lr\":$num,\"grad_norm\":$num(,\"val_loss\":$num)?,\"shard\":0,\"batch\":[0-9]+\\}\$" log.jsonl)
    [ "$bad" -eq 0 ] || fail "malformed lines: $(cat log.jsonl)"
    [ "$(grep -c val_loss log.jsonl)" -eq 3 ] || fail "val_loss expected at steps 2, 4, 6"
    [ -n "$(val_at log.jsonl 4)" ] || fail "no val_loss at step 4"
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' log.jsonl || fail "python json"
    fi
    run_ok "$FAKE" --steps 0 --val-data val.bin --log zero.jsonl
    grep -Eq "^\\{\"step\":0,\"val_loss\":$num\\}\$" zero.jsonl || fail "steps 0 log: $(cat zero.jsonl)"
}

t_checkpoint_roundtrip() {
    "$FIX" text2shard "$SRC/fixture.c" val.bin || fail fixture
    run_ok "$FAKE" --steps 5 --save a.bin --val-data val.bin --log a.jsonl
    [ "$(file_size a.bin)" -eq $CKPT_BYTES ] || fail "checkpoint size $(file_size a.bin) != $CKPT_BYTES"
    no_tmp_files
    # the loaded params compute the same validation loss as the trained ones
    run_ok "$FAKE" --init a.bin --steps 0 --val-data val.bin --log b.jsonl
    [ "$(val_at a.jsonl 5)" = "$(val_at b.jsonl 0)" ] || fail "val loss $(val_at a.jsonl 5) != $(val_at b.jsonl 0) after reload"
    # and save back to the same bytes
    run_ok "$FAKE" --init a.bin --steps 0 --save b.bin
    cmp a.bin b.bin || fail "save(load(a)) != a"
    # training from a checkpoint is deterministic and really starts there
    run_ok "$FAKE" --init a.bin --steps 3 --log c1.jsonl
    run_ok "$FAKE" --init a.bin --steps 3 --log c2.jsonl
    run_ok "$FAKE" --steps 3 --log c3.jsonl
    [ "$(losses c1.jsonl)" = "$(losses c2.jsonl)" ] || fail "resumed runs differ"
    [ "$(losses c1.jsonl)" != "$(losses c3.jsonl)" ] || fail "--init had no effect"
    # version 5 (bf16) loads as the bf16-rounded params
    "$FIX" bf16 a.bin a5.bin || fail fixture
    run_ok "$FAKE" --init a5.bin --steps 0 --save c.bin
    "$FIX" bf16-check a.bin c.bin || fail "bf16 load is not the rounded params"
}

t_atomic_save() {
    run_ok "$FAKE" --steps 2 --save ck.bin
    [ -f ck.bin ] || fail "no checkpoint"
    grep -q '^saved ck.bin' out.txt || fail "no saved line"
    cp ck.bin first.bin
    run_ok "$FAKE" --steps 2 --seed 9 --save ck.bin
    cmp -s ck.bin first.bin && fail "overwrite did not replace the checkpoint"
    no_tmp_files
    : >notadir
    expect_err "notadir/ck.bin: cannot create notadir/ck.bin.tmp" "$FAKE" --steps 2 --save notadir/ck.bin
    grep -q '^step' out.txt && fail "training ran before the bad --save path was rejected"
    mkdir adir
    expect_err "adir: cannot write: it is a directory, not a regular file or a device" "$FAKE" --steps 1 --save adir
    no_tmp_files
    [ "$(find . -newer first.bin -name '*.bin')" = "./ck.bin" ] || fail "unexpected files: $(ls)"
}

t_shard_errors() {
    "$FIX" shard ok.bin 1000 || fail fixture
    run_ok "$FAKE" --steps 1 --data ok.bin
    "$FIX" shard magic.bin 1000 magic=12345
    expect_err "magic.bin: offset 0: bad magic 12345 (expected 20240520)" "$FAKE" --data magic.bin
    expect_err "magic.bin: offset 0: bad magic" "$FAKE" --val-data magic.bin
    "$FIX" shard version.bin 1000 version=2
    expect_err "version.bin: offset 4: unsupported version 2 (expected 1)" "$FAKE" --data version.bin
    head -c 2000 ok.bin >trunc.bin
    expect_err "trunc.bin: offset 2000: size 2000 bytes, header says 1024 + 2*1000 = 3024 (truncated)" "$FAKE" --data trunc.bin
    cat ok.bin ok.bin >long.bin
    expect_err "long.bin: offset 3024: size 6048 bytes, header says 1024 + 2*1000 = 3024" "$FAKE" --data long.bin
    "$FIX" shard count.bin 1000 hdr_ntok=900
    expect_err "count.bin: offset 2824: size 3024 bytes, header says 1024 + 2*900 = 2824" "$FAKE" --data count.bin
    "$FIX" shard neg.bin 10 hdr_ntok=-5
    expect_err "neg.bin: offset 8: negative token count -5" "$FAKE" --data neg.bin
    head -c 100 ok.bin >short.bin
    expect_err "short.bin: offset 100: file ends after 100 bytes, inside the 1024-byte header" "$FAKE" --data short.bin
    : >empty.bin
    expect_err "empty.bin: offset 0: file ends after 0 bytes" "$FAKE" --data empty.bin
    "$FIX" shard few.bin 200
    expect_err "few.bin: offset 8: 200 tokens, need at least B*T+1 = 257" "$FAKE" --data few.bin
    "$FIX" shard tok.bin 1000 bad_at=5 bad=300
    expect_err "tok.bin: offset 1034: token 300 >= vocabulary size 256" "$FAKE" --data tok.bin
    "$FIX" shard tok2.bin 1000 bad_at=999 bad=65535
    expect_err "tok2.bin: offset 3022: token 65535 >= vocabulary size 256" "$FAKE" --val-data tok2.bin
    expect_err "nope.bin: cannot open: No such file or directory" "$FAKE" --data nope.bin
    mkdir dir.bin
    expect_err "dir.bin: not a regular file" "$FAKE" --data dir.bin
}

t_ckpt_errors() {
    run_ok "$FAKE" --steps 1 --save good.bin
    edit() { cp good.bin "$1" && "$FIX" patch "$1" "$2" "$3" || fail fixture; }
    edit magic.bin 0 123
    expect_err "magic.bin: offset 0: bad magic 123 (expected 20240326)" "$FAKE" --init magic.bin
    edit version.bin 4 4
    expect_err "version.bin: offset 4: unsupported version 4 (expected 3 = fp32 or 5 = bf16)" "$FAKE" --init version.bin
    edit maxt.bin 8 1024
    expect_err "maxt.bin: offset 8: header has maxT = 1024 but the program was compiled with maxT = 64" "$FAKE" --init maxt.bin
    edit v.bin 12 50257
    expect_err "v.bin: offset 12: header has V = 50257 but the program was compiled with V = 256" "$FAKE" --init v.bin
    edit c.bin 24 768
    expect_err "c.bin: offset 24: header has C = 768 but the program was compiled with C = 8" "$FAKE" --init c.bin
    edit vp.bin 28 50304
    expect_err "vp.bin: offset 28: header has Vp = 50304 but the program was compiled with Vp = 264" "$FAKE" --init vp.bin
    edit l.bin 16 12      # the fake graph has no L (0): not compared, loads
    run_ok "$FAKE" --init l.bin --steps 1
    head -c 10000 good.bin >trunc.bin
    expect_err "trunc.bin: offset 10000: file ends after 10000 bytes; version 3 with $NPARAM parameters needs 1024 + 4*$NPARAM = $CKPT_BYTES (truncated)" "$FAKE" --init trunc.bin
    cat good.bin good.bin | head -c $((CKPT_BYTES + 4)) >long.bin
    expect_err "long.bin: offset $CKPT_BYTES: 4 extra bytes after the parameters" "$FAKE" --init long.bin
    edit v5.bin 4 5      # says bf16 but holds fp32 params: twice the expected size
    expect_err "v5.bin: offset $((1024 + 2 * NPARAM)): $((2 * NPARAM)) extra bytes" "$FAKE" --init v5.bin
    head -c 12 good.bin >short.bin
    expect_err "short.bin: offset 12: file ends after 12 bytes, inside the 1024-byte header" "$FAKE" --init short.bin
    expect_err "nope.bin: cannot open" "$FAKE" --init nope.bin
}

t_small_vocab() {
    expect_err "needs V >= 256, but this program has V = 100 (dim V, " "$FAKE_V100" --steps 1
    expect_err "); pass --data FILE (token ids below 100) or compile with V >= 256" "$FAKE_V100" --steps 1
    "$FIX" shard s.bin 1000
    expect_err ">= vocabulary size 100" "$FAKE_V100" --data s.bin
    # V > 256: not byte-level, so samples print as token ids
    run_ok "$FAKE_V300" --steps 3 --sample 20
    sed '1,/^--- sample/d' out.txt >ids.txt
    [ "$(wc -w <ids.txt)" -eq 20 ] || fail "expected 20 ids: $(cat ids.txt)"
    tr ' ' '\n' <ids.txt | awk '$1 !~ /^[0-9]+$/ || $1 >= 300 {exit 1}' || fail "bad ids: $(cat ids.txt)"
}

t_sample() {
    run_ok "$FAKE" --steps 20 --sample 200
    sed '1,/^--- sample/d' out.txt >s1.txt
    [ "$(file_size s1.txt)" -eq 201 ] || fail "expected 200 characters and a newline, got $(file_size s1.txt) bytes"
    [ "$(tr -d '\n\t -~' <s1.txt | wc -c)" -eq 0 ] || fail "unprintable bytes in the sample"
    run_ok "$FAKE" --steps 20 --sample 200
    sed '1,/^--- sample/d' out.txt >s2.txt
    cmp -s s1.txt s2.txt || fail "same seed, different samples"
    run_ok "$FAKE" --steps 20 --sample 200 --seed 5
    sed '1,/^--- sample/d' out.txt >s3.txt
    cmp -s s1.txt s3.txt && fail "different seeds, same sample"
    run_ok "$FAKE" --steps 0 --sample 100    # longer than the window T = 64: slides
    [ "$(sed '1,/^--- sample/d' out.txt | wc -c)" -eq 101 ] || fail "sliding window sample"
}

t_gradcheck_pass() {
    run_ok "$FAKE" --gradcheck
    cat out.txt
    grep -q '^gradcheck: 16 directions, worst relative error .* (param [a-z]*)$' out.txt || fail "summary line"
    for p in wte gain proj bias; do
        grep -Eq "^ +[0-9]+  $p +grad " out.txt || fail "$p not checked along its gradient"
        grep -Eq "^ +[0-9]+  $p +random " out.txt || fail "$p not checked along a random direction"
    done
    grep -q '^step' out.txt && fail "--gradcheck trained"
    run_ok "$FAKE" --gradcheck 40 --seed 3
    grep -q '^gradcheck: 40 directions' out.txt || fail "--gradcheck 40"
    run_ok "$FAKE" --gradcheck=2     # at least one per parameter tensor
    grep -q '^gradcheck: 4 directions' out.txt || fail "--gradcheck=2"
    "$FIX" text2shard "$SRC/fake_model.c" train.bin || fail fixture
    run_ok "$FAKE" --gradcheck --data train.bin
    # the test hook: one tensor's gradient 1 % off fails, and that tensor is blamed
    for p in wte gain proj bias; do
        GC_GRADCHECK_SKEW=$p expect_err "gradcheck failed: worst relative error" "$FAKE" --gradcheck
        grep -q "^gradcheck: 16 directions, worst relative error .* (param $p)$" out.txt || { cat out.txt; fail "skewed $p not blamed"; }
    done
}

t_gradcheck_fail() {
    expect_err "gradcheck failed: worst relative error" "$FAKE_BAD" --gradcheck
    grep -q '^gradcheck: 16 directions, worst relative error .* (param wte)$' out.txt || fail "the wrong tensor was blamed"
    cat out.txt
    # the same bug still trains without complaint: that is why the check exists
    run_ok "$FAKE_BAD" --steps 5
    # the tolerance is what decides: a loose enough one lets even this pass
    run_ok "$FAKE_BAD" --gradcheck --gradcheck-tol 2
}

# cmp_ref LOG REF: the program's JSONL (loss, lr, grad_norm per step) against
# ref_train's lines; prints the largest differences, fails past 1e-5.
cmp_ref() {
    sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*"lr":\([^,}]*\),"grad_norm":\([^,}]*\).*/\1 \2 \3 \4/p' "$1" >prog.txt
    [ "$(wc -l <prog.txt)" -eq "$(wc -l <"$2")" ] || fail "step counts differ: $(wc -l <prog.txt) vs $(wc -l <"$2")"
    paste -d' ' prog.txt "$2" | awk '
        function abs(x) { return x < 0 ? -x : x }
        { if ($1 != $5) bad = 1
          d = abs($2 - $6); if (d > dl) dl = d
          d = abs($3 - $7) / ($7 > 0 ? $7 : 1); if (d > dr) dr = d
          d = abs($4 - $8) / ($8 > 1 ? $8 : 1); if (d > dn) dn = d }
        END { printf "max |loss diff| %.3g, max rel lr diff %.3g, max rel grad-norm diff %.3g over %d steps\n", dl, dr, dn, NR
              exit !(!bad && dl <= 1e-5 && dr <= 1e-6 && dn <= 1e-5) }'
}

t_schedule_clip() {
    REF=$BIN/rt_ref_train
    "$FIX" text2shard "$SRC/fake_model.c" train.bin || fail fixture
    run_ok "$FAKE" --steps 0 --save init.bin
    for cfg in "5 cosine 0.1 0.3" "3 linear 0 0.5" "0 cosine 0.5 0" "4 constant 0 1.0"; do
        set -- $cfg
        run_ok "$FAKE" --init init.bin --data train.bin --steps 20 --lr 0.05 --eps 1e-3 --warmup "$1" \
            --lr-schedule "$2" --lr-final-frac "$3" --grad-clip "$4" --log log.jsonl
        "$REF" init.bin train.bin 20 0.05 0.9 0.95 1e-3 0.1 "$1" "$2" "$3" "$4" >ref.txt || fail "ref_train"
        echo "warmup $1, $2, final frac $3, clip $4:"
        cmp_ref log.jsonl ref.txt || fail "warmup $1 $2 $3 clip $4: the program differs from the reference"
    done
    # the comparison can fail: the program without clipping against the clipped reference
    run_ok "$FAKE" --init init.bin --data train.bin --steps 20 --lr 0.05 --eps 1e-3 --warmup 5 \
        --lr-schedule cosine --lr-final-frac 0.1 --log log.jsonl
    "$REF" init.bin train.bin 20 0.05 0.9 0.95 1e-3 0.1 5 cosine 0.1 0.3 >ref.txt || fail "ref_train"
    cmp_ref log.jsonl ref.txt && fail "an unclipped run matched the clipped reference"
    # and without the schedule against the scheduled reference
    run_ok "$FAKE" --init init.bin --data train.bin --steps 20 --lr 0.05 --eps 1e-3 --grad-clip 0.3 --log log.jsonl
    cmp_ref log.jsonl ref.txt && fail "an unscheduled run matched the scheduled reference"
    expect_err "--lr-schedule: bad value 'step'" "$FAKE" --lr-schedule step
    expect_err "--lr-final-frac: bad value '1.5'" "$FAKE" --lr-final-frac 1.5
    expect_err "--grad-clip: bad value '-1'" "$FAKE" --grad-clip -1
    true
}

t_nonfinite() {
    expect_err "step 2: loss is nan; stopped: no checkpoint of this run was written (no --ckpt-dir)" "$FAKE" --steps 5 --lr 1e30
    expect_err "step 2: loss is nan; stopped: no checkpoint predates the divergence (that of step 1 in ck holds the parameters that led to it)" \
        "$FAKE" --steps 5 --lr 1e30 --ckpt-dir ck --save-every 1
    [ -f ck/state_00000001.bin ] && [ ! -f ck/state_00000002.bin ] || fail "checkpoints after the stop: $(ls ck)"
    run_ok "$FAKE" --steps 5 --lr 1e30 --skip-nonfinite --log log.jsonl
    [ "$(grep -c '"skipped":true' log.jsonl)" -eq 4 ] || { cat log.jsonl; fail "expected 4 skipped steps in the log"; }
    grep -q '^{"step":5,.*"skipped":true,"skipped_total":4}' log.jsonl || { cat log.jsonl; fail "skipped_total"; }
    grep -q 'SKIPPED (non-finite; 4 so far)' out.txt || fail "the progress line does not say SKIPPED"
    true
}

# pairs LOG: "shard batch" of every step
pairs() { sed -n 's/.*"shard":\([0-9]*\),"batch":\([0-9]*\).*/\1 \2/p' "$1"; }

t_shards() {
    mkdir d
    "$FIX" shard d/s_0.bin 1000 && "$FIX" shard d/s_1.bin 1300 && "$FIX" shard d/s_2.bin 800 || fail fixture
    # 3 + 5 + 3 = 11 batches per epoch; in order without --shuffle
    run_ok "$FAKE" --data 'd/s_*.bin' --steps 12 --log log.jsonl
    grep -q "^data: 3 files matching 'd/s_\*.bin' (11 batches of B\*T = 256 per epoch, in order)" out.txt || { cat out.txt; fail "data line"; }
    [ "$(pairs log.jsonl | tr '\n' ' ')" = "0 0 0 1 0 2 1 0 1 1 1 2 1 3 1 4 2 0 2 1 2 2 0 0 " ] || fail "in-order batches: $(pairs log.jsonl | tr '\n' ' ')"
    # shuffled: every batch once per epoch, another order each epoch, the same for a seed
    run_ok "$FAKE" --data 'd/s_*.bin' --shuffle --steps 33 --log a.jsonl
    pairs a.jsonl >a.txt
    for e in 0 1 2; do
        sed -n "$((e * 11 + 1)),$((e * 11 + 11))p" a.txt >e$e.txt
        [ "$(sort -u e$e.txt | wc -l)" -eq 11 ] || fail "epoch $e does not cover the 11 batches once: $(tr '\n' ' ' <e$e.txt)"
        # shard by shard: each shard's batches are consecutive (llm.c's order)
        [ "$(cut -d' ' -f1 e$e.txt | uniq | wc -l)" -eq 3 ] || fail "epoch $e interleaves shards"
    done
    cmp -s e0.txt e1.txt && cmp -s e1.txt e2.txt && fail "the same order in every epoch"
    run_ok "$FAKE" --data 'd/s_*.bin' --shuffle --steps 33 --log b.jsonl
    pairs b.jsonl | cmp -s - a.txt || fail "the same seed gave another order"
    run_ok "$FAKE" --data 'd/s_*.bin' --shuffle --steps 33 --log c.jsonl --seed 7
    pairs c.jsonl | cmp -s - a.txt && fail "another seed gave the same order"
    echo "epoch orders: $(tr '\n' ' ' <e0.txt) | $(tr '\n' ' ' <e1.txt)"
    # prefetch on and off: the same losses
    losses a.jsonl >la.txt
    run_ok "$FAKE" --data 'd/s_*.bin' --shuffle --steps 33 --log n.jsonl --no-prefetch
    losses n.jsonl | cmp -s - la.txt || fail "--no-prefetch changed the losses"
    # resume across epochs: bit-identical
    run_ok "$FAKE" --data 'd/s_*.bin' --shuffle --steps 14 --ckpt-dir ck --save-every 4
    run_ok "$FAKE" --data 'd/s_*.bin' --shuffle --steps 33 --resume ck --log r.jsonl
    grep -q '^resume: step 14 ' out.txt || fail "did not resume at 14"
    losses r.jsonl >lr.txt
    sed -n '15,33p' la.txt | cmp -s - lr.txt || fail "resumed shuffled run differs"
    pairs r.jsonl | cmp -s - "$(sed -n '15,33p' a.txt >ar.txt; echo ar.txt)" || fail "resumed order differs"
    expect_err "another --seed" "$FAKE" --data 'd/s_*.bin' --shuffle --steps 33 --resume ck --seed 9
    expect_err "--data 'd/x_*.bin': no file matches" "$FAKE" --data 'd/x_*.bin'
    "$FIX" shard d/s_3.bin 1000 magic=7 || fail fixture
    expect_err "d/s_3.bin: offset 0: bad magic 7" "$FAKE" --data 'd/s_*.bin'
    rm d/s_3.bin
    # a shard whose tokens are bad is found when it is read, mid-run, with its offset
    "$FIX" shard d/s_3.bin 1000 bad_at=700 bad=300 || fail fixture
    expect_err "d/s_3.bin: offset 2424: token 300 >= vocabulary size 256" "$FAKE" --data 'd/s_*.bin' --steps 20
    true
}

t_text_data() {
    cp "$SRC/fake_model.c" notes.txt
    run_ok "$FAKE" --data notes.txt --steps 3
    grep -q '^data: notes.txt (plain text, byte-level tokens, ' out.txt || { cat out.txt; fail "text data line"; }
    "$FIX" text2shard notes.txt notes.bin || fail fixture
    run_ok "$FAKE" --data notes.txt --steps 5 --log t.jsonl
    run_ok "$FAKE" --data notes.bin --steps 5 --log s.jsonl
    losses t.jsonl >t.txt
    losses s.jsonl | cmp -s - t.txt || fail "text file and its shard train differently"
    expect_err "notes.txt: offset 0: not a token shard (no magic 20240520), and this program's V = 100 is too small" \
        "$FAKE_V100" --data notes.txt
    head -c 100 notes.txt >short.txt
    expect_err "short.txt: offset 100: 100 bytes of text (byte-level tokens), need at least B*T+1 = 257" "$FAKE" --data short.txt
    true
}

# Progress on a terminal: `script` (util-linux, in Debian's essential set)
# runs the program on a pseudo-terminal; the status line is drawn with "\r"
# and cleared to the end of the line at every step but the last, whose
# plain line replaces it, and the run ends with the summary.
t_progress_tty() {
    command -v script >/dev/null 2>&1 || fail "script (util-linux) is needed"
    script -qfec "$FAKE --steps 6 --peak-flops 1e9 --save-every 3 --ckpt-dir ck" /dev/null >tty.raw </dev/null ||
        fail "the run on a pseudo-terminal failed: $(cat tty.raw)"
    # one record per "\r": the pseudo-terminal adds a \r before each \n
    tr '\r' '\n' <tty.raw | sed 's/\x1b\[K$/<K>/' >tty.txt
    n=0
    for k in 1 2 3 4 5; do
        grep -Eq "^step $k/6 \| loss [0-9.]+ avg [0-9.]+ \| lr [0-9.e+-]+ \| norm [0-9.]+ \| [0-9.]+ ms/step \| [0-9]+ tok/s \| MFU [0-9.]+% \| ETA [0-9hms]+<K>\$" tty.txt ||
            { cat tty.txt; fail "no status line of step $k (rewritten in place, cleared to the end)"; }
    done
    # rewritten in place: the status lines of steps 1 and 2 on one terminal line (no newline between)
    grep -aq "step 1/6 .*$(printf '\r')step 2/6 " tty.raw || fail "status lines not rewritten in place"
    # a checkpoint message clears the status line and takes a line of its own
    grep -q '^checkpoint: step 3 saved' tty.txt || fail "checkpoint message"
    grep -aq "$(printf '\033')\[Kcheckpoint: writing step 3 " tty.raw || fail "the status line was not cleared before a message"
    grep -q "^step 6/6 " tty.txt && fail "the last step drew a status line"
    grep -aq "$(printf '\033')\[Kstep    6/6 | loss " tty.raw || fail "the last step's line does not replace the status line"
    grep -Eq '^done: 6 steps \| [0-9.]+ ms/step \| .* \| final loss [0-9.]+, avg of the last 6 [0-9.]+ \| [0-9hms]+ in all$' tty.txt ||
        { tail -n 3 tty.txt; fail "no final summary"; }
    # off a terminal: no "\r", no escape sequences
    run_ok "$FAKE" --steps 3
    grep -q "$(printf '\r')" out.txt && fail "carriage return off a terminal"
    grep -q "$(printf '\033')" out.txt && fail "escape sequence off a terminal"
    return 0
}

# Off a terminal, --print-every N: lines at multiples of N and the last step;
# the default stays one line per step.
t_print_every() {
    run_ok "$FAKE" --steps 10 --print-every 4 --log log.jsonl
    steps=$(sed -n 's/^step *\([0-9]*\)\/10 | loss .*/\1/p' out.txt | tr '\n' ' ')
    [ "$steps" = "4 8 10 " ] || fail "--print-every 4 printed steps '$steps' (expected 4 8 10)"
    [ "$(wc -l <log.jsonl)" -eq 10 ] || fail "the log must keep one object per step"
    run_ok "$FAKE" --steps 5
    [ "$(grep -c '^step ' out.txt)" -eq 5 ] || fail "default: one line per step"
    # a validation step is never hidden
    "$FIX" text2shard "$SRC/fixture.c" val.bin || fail fixture
    run_ok "$FAKE" --steps 6 --print-every 4 --val-data val.bin --val-every 3
    steps=$(sed -n 's/^step *\([0-9]*\)\/6 | loss .*/\1/p' out.txt | tr '\n' ' ')
    [ "$steps" = "3 4 6 " ] || fail "--print-every 4 --val-every 3 printed steps '$steps' (expected 3 4 6)"
    expect_err "--print-every: bad value '0'" "$FAKE" --print-every 0
    expect_err "--peak-flops: bad value 'x'" "$FAKE" --peak-flops x
    # MFU: shown only with a peak; the compute line names the step's FLOPs
    run_ok "$FAKE" --steps 2
    grep -q 'MFU' out.txt && ! grep -q 'no MFU' out.txt && fail "MFU without a peak on the CPU"
    grep -q '^compute: 0.00314573 GFLOP per step' out.txt || fail "compute line: $(grep compute out.txt)"
    run_ok "$FAKE" --steps 2 --peak-flops 1e9
    grep -Eq '^step    2/2 .* \| MFU [0-9.]+%$' out.txt || fail "no MFU with --peak-flops: $(cat out.txt)"
}

"t_$T"
echo "PASS [$T]"
