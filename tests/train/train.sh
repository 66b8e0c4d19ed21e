#!/bin/sh
# End-to-end: compile models/gpt2.graph (tiny) for the CPU and train.
# usage: train.sh GCOMPILE GRAPH WORKDIR CHECK
#   CHECK: falling | rerun | noreuse | poison | schedules | gradcheck | ckpt | badfiles | profile | micro | recompute | budget | fusions | progress | sample | evalonly
set -u
gc=$1 graph=$2 dir=$3 check=$4
mkdir -p "$dir"
cd "$dir" || exit 1
export OMP_NUM_THREADS=2
fail() { echo "FAIL: $*"; exit 1; }
compile() {  # compile OUT [gcompile args...]
    out=$1; shift
    "$gc" "$graph" --config tiny --target cpu -o "$out" "$@" || fail "gcompile $*"
}
log_losses() { sed -n 's/^{"step":[0-9]*,"loss":\([^,]*\),.*/\1/p' "$1" 2>/dev/null; }   # LOG -> one loss per line
losses() {  # losses PROGRAM [args...] -> one loss per line, from --log (9 digits, not the printed 6:
    prog=$1; shift  # programs that sum in other orders differ there, where the printed loss may match by luck)
    rm -f "$prog.losses.jsonl"
    "./$prog" --threads 2 "$@" --log "$prog.losses.jsonl" >/dev/null
    log_losses "$prog.losses.jsonl"
}
case "$check" in
falling)   # 30 steps on the built-in corpus: the loss falls clearly
    compile t_$check
    losses t_$check --steps 30 --lr 1e-3 >l.txt
    [ "$(wc -l <l.txt)" -eq 30 ] || fail "expected 30 losses"
    awk 'NR <= 3 { a += $1 } NR > 27 { b += $1 } END { printf "first3 %.4f last3 %.4f\n", a/3, b/3;
         exit !(a/3 - b/3 > 0.5) }' l.txt || fail "loss did not fall by 0.5"
    ;;
rerun)     # same seed and thread count: bit-identical losses
    compile t_$check
    losses t_$check --steps 8 --seed 7 >a.txt
    losses t_$check --steps 8 --seed 7 >b.txt
    losses t_$check --steps 8 --seed 8 >c.txt
    cmp -s a.txt b.txt || fail "reruns differ"
    cmp -s a.txt c.txt && fail "another seed gave the same losses"
    ;;
noreuse)   # the planned program and the every-tensor-its-own-storage one agree bit for bit
    compile t_plan
    compile t_noreuse --no-reuse
    losses t_plan --steps 8 >a.txt
    losses t_noreuse --steps 8 >b.txt
    cmp -s a.txt b.txt || { paste a.txt b.txt; fail "--no-reuse losses differ"; }
    ;;
poison)    # NaN-poisoned buffers at the end of each lifetime: still the same losses
    # both with classifier chunks of 100 rows (B*T = 256: three chunks, whose dw sums in another
    # order than one chunk's; compared with a one-chunk program the losses matched only by luck)
    compile t_plan --classifier-chunk 100
    compile t_poison --poison --classifier-chunk 100
    grep -q gc_poison t_poison 2>/dev/null || true
    # the log's losses and gradient norms at 9 digits, not only the printed 6
    for p in t_plan t_poison; do
        ./$p --threads 2 --steps 8 --log $p.jsonl >/dev/null || fail "$p run"
        sed 's/"ms":[^,]*,"tok_per_s":[^,]*,//' $p.jsonl >$p.txt
    done
    [ "$(wc -l <t_plan.txt)" -eq 8 ] || fail "expected 8 log lines"
    grep -qi nan t_poison.txt && fail "NaN with --poison"
    cmp -s t_plan.txt t_poison.txt || { paste t_plan.txt t_poison.txt; fail "--poison losses or norms differ"; }
    ;;
schedules) # plain and fused-opt schedules compute the same step
    compile t_plain --schedule plain
    compile t_fused --schedule fused-opt
    losses t_plain --steps 8 >a.txt
    losses t_fused --steps 8 >b.txt
    cmp -s a.txt b.txt || { paste a.txt b.txt; fail "schedules differ"; }
    # clipping: the plain program scales the kept gradients, the fused-opt one runs a norm pass first;
    # the same losses, and clipping at 0.3 (below every step's norm here) changes them
    losses t_plain --steps 8 --grad-clip 0.3 >c.txt
    losses t_fused --steps 8 --grad-clip 0.3 >d.txt
    [ "$(wc -l <d.txt)" -eq 8 ] || fail "fused-opt clipped run: $(cat d.txt)"
    cmp -s c.txt d.txt || { paste c.txt d.txt; fail "clipped schedules differ"; }
    cmp -s a.txt c.txt && fail "clipping at 0.3 changed no loss: the check would not see it"
    ./t_fused --help | grep -q "a norm pass first" || fail "--help of the fused-opt program does not say how it clips"
    # the cost model prices the norm pass (about one more forward and backward) and plan-text says so
    "$gc" "$graph" --config tiny --target cpu --emit plan-text >pt.txt || fail "plan-text"
    grep "^gradient clipping" pt.txt | awk '{ for (i = 1; i < NF; i++) if ($i == "predicted") { x = $(i + 1); sub(/^\+/, "", x) }
        p = $0; sub(/.*\(\+/, "", p); sub(/%\).*/, "", p); print "norm pass: +" x " ms/step, +" p "%"
        exit !(x + 0 > 0 && p + 0 >= 50 && p + 0 <= 110) }' || fail "no priced norm pass: $(grep '^gradient clipping' pt.txt)"
    "$gc" "$graph" --config tiny --target cpu --schedule plain --emit plan-text | grep -q '^gradient clipping.*no extra pass' ||
        fail "plain plan-text does not say it needs no extra pass"
    ./t_fused --threads 2 --steps 2 --grad-clip 1 --skip-nonfinite >/dev/null || fail "clipped run with --skip-nonfinite"
    ;;
profile)   # --profile: same losses; one row per kernel and shape, rows add up to the ops time
    compile t_$check
    losses t_$check --steps 4 >a.txt
    ./t_$check --threads 2 --steps 4 --profile --log p.jsonl >out.txt || fail "--profile run"
    log_losses p.jsonl >b.txt
    cmp -s a.txt b.txt || { paste a.txt b.txt; fail "--profile changed the losses"; }
    grep -q '^profile: [0-9]* kernels and shapes, mean over 3 steps' out.txt || { cat out.txt; fail "profile header"; }
    for k in "fwd matmul_bias 256x192x64 tb" "bwd matmul 256x64x256 ta" "opt adamw" "fwd classifier" "bwd matmul_dgelu_bgrad 256x256x64" "fwd add_layernorm"; do
        grep -q " $k\$" out.txt || { cat out.txt; fail "no profile row '$k'"; }
    done
    # the rows sum to the ops total in the header (to rounding), and every row's calls are > 0
    awk '/^profile:/ { for (i = 1; i <= NF; i++) if ($i == "ops" && ops == "") ops = $(i + 1); n = $2 }
         /^ +[0-9.]+ +[0-9.]+ +[0-9]+ / { sum += $1; rows++; if ($3 < 1) bad = 1 }
         END { printf "profile: %d rows of %d, sum %.2f ms, ops %.2f ms\n", rows, n, sum, ops;
               exit !(rows == n && !bad && sum > 0 && sum - ops < 0.01 * n + 0.01 && ops - sum < 0.01 * n + 0.01) }' out.txt ||
        { cat out.txt; fail "profile rows do not add up"; }
    ;;
gradcheck) # analytic gradients of the whole tiny GPT-2 against finite differences
    compile t_$check --schedule plain
    ./t_$check --threads 2 --gradcheck 32 || fail "gradcheck"
    # one tensor's gradient 1 % off (the GC_GRADCHECK_SKEW test hook) fails and is blamed
    GC_GRADCHECK_SKEW=attprojw ./t_$check --threads 2 --gradcheck >out.txt 2>&1 && { cat out.txt; fail "1 % off passed"; }
    grep -q "worst relative error .* (param attprojw)" out.txt || { cat out.txt; fail "attprojw not blamed"; }
    # the fused-opt program keeps gradients in the arena: it says so instead
    compile t_fused --schedule fused-opt
    ./t_fused --gradcheck 4 >out.txt 2>err.txt && fail "gradcheck on a fused-opt program should fail"
    grep -q "compile with --schedule plain" err.txt || { cat err.txt; fail "fused-opt gradcheck message"; }
    ;;
ckpt)      # --save then --init: the same parameters come back
    compile t_$check
    ./t_$check --steps 3 --save a.bin >/dev/null || fail "save"
    ./t_$check --steps 0 --init a.bin --save b.bin >/dev/null || fail "init"
    cmp -s a.bin b.bin || fail "checkpoint round trip changed the parameters"
    [ "$(stat -c %s a.bin)" -eq $((1024 + 4 * 120576)) ] || fail "checkpoint size"
    ;;
badfiles)  # bad checkpoints and shards: one-line error naming the file, exit 1
    compile t_$check
    "$gc" "$graph" --config tiny -D C=32 --target cpu -o t_other || fail "gcompile C=32"
    ./t_other --steps 1 --save other.bin >/dev/null || fail "save other"
    ./t_$check --steps 1 --save good.bin >/dev/null || fail "save good"
    expect_error() {  # expect_error PATTERN ARGS...
        pat=$1; shift
        ./t_$check "$@" >out.txt 2>err.txt
        rc=$?
        [ "$rc" -eq 1 ] || fail "$*: exit $rc"
        [ "$(grep -c '^error: ' err.txt)" -eq 1 ] || { cat err.txt; fail "$*: not one error line"; }
        grep -q -- "$pat" err.txt || { cat err.txt; fail "$*: error lacks '$pat'"; }
    }
    expect_error "other.bin: offset 24: header has C = 32" --init other.bin
    head -c 3000 good.bin >trunc.bin
    expect_error "trunc.bin" --init trunc.bin
    printf 'garbage garbage garbage' >junk.bin
    expect_error "junk.bin" --init junk.bin
    expect_error "junk.bin" --data junk.bin
    expect_error "missing.bin" --data missing.bin
    ;;
rules)     # small graphs that exercise single backward rules, through --gradcheck at its defaults;
           # each parameter's gradient made 1 % off (the GC_GRADCHECK_SKEW test hook) must fail
    src=$(dirname "$graph")/..
    # the example of docs/grammar.md (V = 5: a token shard of its own)
    awk '/^```$/ { n++; next } n == 1' "$src/docs/grammar.md" >grammar_example.graph
    python3 -c 'import struct, random; random.seed(5); t = [random.randrange(5) for _ in range(600)]
open("tok5.bin", "wb").write(struct.pack("<256i", 20240520, 1, len(t), *[0] * 253) + struct.pack("<%dH" % len(t), *t))' ||
        fail "token shard"
    for g in "$src"/tests/train/graphs/*.graph grammar_example.graph; do
        "$gc" "$g" --target cpu --schedule plain -o t_rules || fail "gcompile $g"
        data=
        [ "$g" = grammar_example.graph ] && data="--data tok5.bin"
        ./t_rules --threads 2 --gradcheck $data >out.txt 2>&1 || { cat out.txt; fail "gradcheck $g"; }
        echo "$(basename "$g"): $(tail -1 out.txt)"
        for p in $(awk '$3 == "grad" { print $2 }' out.txt); do
            GC_GRADCHECK_SKEW=$p ./t_rules --threads 2 --gradcheck $data >skew.txt 2>&1 &&
                { cat skew.txt; fail "$g: gradient of $p 1 % off passed gradcheck"; }
            grep -q "worst relative error .* (param $p)" skew.txt || { cat skew.txt; fail "$g: skewed $p not blamed"; }
        done
    done
    ;;
micro)     # gradient accumulation: K = 2 and 4 micro-batches of B/K rows match one batch of B within 1e-6
    for k in 1 2 4; do
        compile t_k$k --micro-batches $k
        ./t_k$k --threads 2 --steps 20 --log k$k.jsonl >/dev/null || fail "run K=$k"
        sed -n 's/.*"loss":\([^,}]*\).*/\1/p' k$k.jsonl >k$k.txt
        [ "$(wc -l <k$k.txt)" -eq 20 ] || fail "K=$k: expected 20 losses"
    done
    for k in 2 4; do
        paste k1.txt k$k.txt | awk -v k=$k '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
            END { printf "K=%d: max |loss - loss(K=1)| over %d steps = %.2e\n", k, NR, m; exit !(m <= 1e-6) }' ||
            { paste k1.txt k$k.txt; fail "K=$k differs from K=1"; }
    done
    cmp -s k1.txt k2.txt && cmp -s k1.txt k4.txt && echo "(bit-identical)"
    "$gc" "$graph" --config tiny --target cpu --micro-batches 4 --emit plan | grep -q '"micro_batches": 4' ||
        fail "plan JSON lacks micro_batches"
    # a poisoned plain-schedule program: same losses; it passes gradcheck with accumulated gradients
    compile t_plain --micro-batches 2 --schedule plain --poison
    losses t_k2 --steps 8 >a.txt
    losses t_plain --steps 8 >b.txt
    grep -qi nan b.txt && fail "NaN loss with --poison --micro-batches 2"
    cmp -s a.txt b.txt || { paste a.txt b.txt; fail "plain and fused-opt schedules differ with micro-batches"; }
    ./t_plain --threads 2 --gradcheck >out.txt || { cat out.txt; fail "gradcheck with 2 micro-batches"; }
    # K must divide B
    "$gc" "$graph" --config tiny --target cpu --micro-batches 3 --emit plan >/dev/null 2>err.txt && fail "K=3 accepted"
    grep -q "does not divide B = 4" err.txt || { cat err.txt; fail "K=3 message"; }
    ;;
recompute) # recomputation: bit-identical losses in every mode, also poisoned and with micro-batches; smaller arena
    compile t_none --recompute none
    losses t_none --steps 8 >none.txt
    for m in selective full; do   # poisoned programs (NaN at each end of lifetime) equal to the plain one
        compile t_${m}_p --recompute $m --poison
        losses t_${m}_p --steps 8 >${m}_p.txt
        grep -qi nan ${m}_p.txt && fail "NaN loss with --recompute $m --poison"
        cmp -s none.txt ${m}_p.txt || { paste none.txt ${m}_p.txt; fail "--recompute $m --poison losses differ"; }
        "$gc" "$graph" --config tiny --target cpu --recompute $m --emit plan >$m.json || fail "plan $m"
        grep -q '"phase": "recompute"' $m.json || fail "no recompute op in the $m plan"
    done
    "$gc" "$graph" --config tiny --target cpu --recompute none --emit plan >none.json || fail "plan none"
    grep -q '"phase": "recompute"' none.json && fail "recompute ops without --recompute"
    arena() { "$gc" "$graph" --config tiny --target cpu --recompute $1 --emit plan-text | awk '$1 == "arena" && $5 == "bytes" { print $4 }'; }
    a_none=$(arena none) a_sel=$(arena selective) a_full=$(arena full)
    echo "arena bytes: none $a_none selective $a_sel full $a_full"
    [ "$a_full" -lt "$a_none" ] || fail "full recompute did not shrink the arena"
    [ "$a_sel" -lt "$a_none" ] || fail "selective recompute did not shrink the arena"
    # selective reruns exactly the linear layers that widen their input: qkv and fc (fused with its bias and
    # GELU) in each layer, not the attention or MLP projections
    python3 - selective.json <<'PY' || fail "selective: the wrong matmuls recomputed"
import json, re, sys
d = json.load(open(sys.argv[1]))
mm = sorted(re.sub(r"^re\.h\d+\.", "", s["name"]) + ":" + s["op"] for s in d["schedule"]
            if s["phase"] == "recompute" and "matmul" in s["op"])
want = sorted(["qkv.matmul:matmul_bias", "h.matmul:matmul_bias_gelu"] * 2)   # 2 layers
assert mm == want, mm
PY
    for m in fs nf; do   # per-layer modes (one letter per layer), poisoned: the same losses
        compile t_${m}_p --recompute $m --poison
        losses t_${m}_p --steps 8 >${m}_p.txt
        grep -qi nan ${m}_p.txt && fail "NaN loss with --recompute $m --poison"
        cmp -s none.txt ${m}_p.txt || { paste none.txt ${m}_p.txt; fail "--recompute $m --poison losses differ"; }
    done
    "$gc" "$graph" --config tiny --target cpu --recompute nf --emit plan-text >nf.txt || fail "plan-text nf"
    grep -q "^strategy: .*, per layer nf" nf.txt || { cat nf.txt; fail "plan-text lacks the per-layer modes"; }
    grep "^recomputed:" nf.txt | grep -q " h0\." && fail "--recompute nf recomputed layer 0"
    grep "^recomputed:" nf.txt | grep -q " h1\." || fail "--recompute nf did not recompute layer 1"
    compile t_mix --recompute full --micro-batches 2 --poison
    compile t_k2 --micro-batches 2
    losses t_k2 --steps 8 >k2.txt
    losses t_mix --steps 8 >mix.txt
    cmp -s k2.txt mix.txt || { paste k2.txt mix.txt; fail "--recompute full with 2 micro-batches differs"; }
    compile t_sf2 --recompute sf --micro-batches 2 --poison
    losses t_sf2 --steps 8 >sf2.txt
    cmp -s k2.txt sf2.txt || { paste k2.txt sf2.txt; fail "--recompute sf with 2 micro-batches differs"; }
    ;;
budget)    # --mem: the search picks micro-batches and recompute that fit (planned and checked), least predicted time
           # (--offload none: these budgets are the two levers'; tests/offload weighs offload with them)
    strat() { "$gc" "$graph" --config tiny --target cpu --offload none "$@" --emit plan-text | sed -n 's/^strategy: //p'; }
    s=$(strat --mem 10MiB); echo "10MiB: $s"
    case $s in *"1 micro-batch | no recompute"*) ;; *) fail "10MiB: expected the plain plan" ;; esac
    s=$(strat --mem 3600000); echo "3600000: $s"
    case $s in *"| recompute "*) ;; *) fail "3600000: expected recomputation" ;; esac
    s=$(strat --mem 2500000); echo "2500000: $s"
    case $s in *"4 micro-batches"*) ;; *) fail "2500000: expected 4 micro-batches" ;; esac
    s=$(strat --device h100); echo "--device h100: $s"
    case $s in *"budget 78.50 GiB"*"on h100"*) ;; *) fail "--device h100 should imply --mem 78.50 GiB" ;; esac
    # nothing fits: exit 1 with the smallest budget, and compiling at that budget succeeds
    "$gc" "$graph" --config tiny --target cpu --offload none --mem 1MiB --emit plan-text >out.txt 2>err.txt && fail "1MiB accepted"
    cat err.txt
    grep -q "the largest part is optimizer state" err.txt || fail "1MiB: no dominating part"
    n=$(sed -n 's/.*; --mem \([0-9]*\) compiles.*/\1/p' err.txt)
    [ -n "$n" ] || fail "1MiB: no smallest budget"
    s=$(strat --mem "$n") || fail "--mem $n (the smallest budget) does not compile"
    echo "--mem $n: $s"
    # the chosen recomputing plan trains bit-identically to the plain one
    compile t_plain --recompute none
    compile t_budget --mem 3600000 --offload none
    losses t_plain --steps 4 >a.txt
    losses t_budget --steps 4 >b.txt
    cmp -s a.txt b.txt || { paste a.txt b.txt; fail "the searched plan's losses differ"; }
    # budgets where the search mixes modes per layer, the first with K = 1 and the first with K = 2
    # (scanned, so that a better search or a new fusion moving the budgets keeps the test):
    # poisoned programs, the same losses
    mixes="" seen=""
    for m in $(seq 3600000 -100000 2400000); do
        s=$(strat --mem $m)
        case $s in *", per layer "*) ;; *) continue ;; esac
        k=$(echo "$s" | sed -n 's/.*| \([0-9]*\) micro-batch.*/\1/p')
        case " $seen " in *" $k "*) continue ;; esac
        [ "$k" -le 2 ] && mixes="$mixes $m" seen="$seen $k"
    done
    [ "$(echo $seen | wc -w)" -eq 2 ] || fail "no per-layer mix found for both K=1 and K=2 (found K:$seen)"
    for m in $mixes; do
        "$gc" "$graph" --config tiny --target cpu --offload none --mem $m --emit plan-text | grep "^strategy:" >s.txt
        k=$(sed -n 's/.*| \([0-9]*\) micro-batch.*/\1/p' s.txt)
        compile t_mix_$m --mem $m --poison --offload none
        compile t_ref_$m --recompute none --micro-batches "$k"
        losses t_mix_$m --steps 4 >mix.txt
        losses t_ref_$m --steps 4 >ref.txt
        grep -qi nan mix.txt && fail "--mem $m --poison: NaN loss"
        cmp -s ref.txt mix.txt || { paste ref.txt mix.txt; fail "--mem $m (K=$k, mixed, poisoned) differs from K=$k without recompute"; }
        echo "--mem $m: $(cat s.txt) -- poisoned losses equal"
    done
    ;;
fusions)   # each fusion on vs off: 20 steps within 1e-5; fused programs pass gradcheck; poison clean
    jloss() { sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$1"; }
    for shape in "" "-D T=37 -D C=48"; do     # T=37, head size 12: no multiple of any tile
        compile t_on $shape --classifier-chunk 100    # chunks of 100 rows: N = 256 or 148
        ./t_on --threads 2 --steps 20 --log on.jsonl >/dev/null || fail "fused run $shape"
        for kind in attention classifier gelu bgrad layernorm; do
            compile t_off $shape --classifier-chunk 100 --no-fuse=$kind
            ./t_off --threads 2 --steps 20 --log off.jsonl >/dev/null || fail "--no-fuse=$kind run"
            jloss on.jsonl >a.txt
            jloss off.jsonl >b.txt
            [ "$(wc -l <a.txt)" -eq 20 ] || fail "expected 20 losses"
            paste a.txt b.txt | awk -v k="$kind $shape" '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
                END { printf "%s on vs off: max |diff| %.3g over 20 steps\n", k, m; exit !(m <= 1e-5) }' ||
                { paste a.txt b.txt; fail "--no-fuse=$kind changed the losses"; }
            # the CPU's fused bias gradient and GELU passes are the unfused ops' arithmetic (fuse_bgrad.c,
            # kernels_cpu.c: per element, no contraction, whatever vector width the clone picked)
            case $kind in bgrad|gelu) cmp -s a.txt b.txt || fail "--no-fuse=$kind: losses not bit-identical";; esac
        done
        compile t_gc $shape --schedule plain --classifier-chunk 100
        ./t_gc --threads 2 --gradcheck >out.txt 2>&1 || { cat out.txt; fail "gradcheck, fused $shape"; }
        "$gc" "$graph" --config tiny --target cpu $shape --emit c >prog.c
        grep -q gc_attention_fwd prog.c || fail "no fused attention in the program $shape"
        grep -q gc_classifier prog.c || fail "no fused classifier in the program $shape"
        grep -q gc_matmul_bias_gelu prog.c && grep -q gc_matmul_dgelu prog.c ||
            fail "no fused bias + GELU (forward and backward) in the program $shape"
        grep -q gc_matmul_dgelu_bgrad prog.c || fail "no fused bias gradient (matmul_dgelu_bgrad) in the program $shape"
        grep -q gc_add_layernorm_fwd prog.c || fail "no fused residual + layernorm in the program $shape"
    done
    compile t_poison --poison
    ./t_poison --threads 2 --steps 4 | grep -qi nan && fail "NaN loss with --poison and fusions"
    # the fused classifier with 2 micro-batches takes the 1/2 loss seed: same losses as unfused, and a
    # gradcheck over both micro-batches (a seed of 1 doubles its gradients: relative error 0.5)
    compile t_mb --micro-batches 2 --poison
    "$gc" "$graph" --config tiny --target cpu --micro-batches 2 --emit c | grep -q gc_classifier ||
        fail "no fused classifier with --micro-batches 2"
    ./t_mb --threads 2 --steps 20 --log on.jsonl >/dev/null || fail "fused classifier, 2 micro-batches"
    compile t_mb_off --micro-batches 2 --no-fuse=classifier
    ./t_mb_off --threads 2 --steps 20 --log off.jsonl >/dev/null || fail "unfused classifier, 2 micro-batches"
    jloss on.jsonl >a.txt
    jloss off.jsonl >b.txt
    paste a.txt b.txt | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
        END { printf "classifier with 2 micro-batches on vs off: max |diff| %.3g\n", m; exit !(NR == 20 && m <= 1e-5) }' ||
        { paste a.txt b.txt; fail "fused classifier with micro-batches changed the losses"; }
    compile t_mb_gc --micro-batches 2 --schedule plain
    ./t_mb_gc --threads 2 --gradcheck >out.txt 2>&1 || { cat out.txt; fail "gradcheck, fused classifier, 2 micro-batches"; }
    # the switch: off means off, unknown names are errors
    "$gc" "$graph" --config tiny --target cpu --no-fuse=attention --emit c | grep -q gc_attention_fwd &&
        fail "--no-fuse=attention left attention fused"
    "$gc" "$graph" --config tiny --target cpu --no-fuse --emit plan-text | grep -q '^fusions: none' ||
        fail "--no-fuse: plan-text should say 'fusions: none'"
    "$gc" "$graph" --config tiny --target cpu --emit plan-text | grep -q '^  attention *2 fused' ||
        fail "plan-text should list 2 attention fusions"
    "$gc" "$graph" --config tiny --target cpu --no-fuse=gelu --emit c | grep -q 'gc_matmul_bias_gelu\|gc_matmul_dgelu' &&
        fail "--no-fuse=gelu left bias + GELU fused"
    "$gc" "$graph" --config tiny --target cpu --emit plan-text | grep -q '^  gelu *2 fused' ||
        fail "plan-text should list 2 gelu fusions"
    "$gc" "$graph" --config tiny --target cpu --no-fuse=layernorm --emit c | grep -q 'gc_add_layernorm_fwd' &&
        fail "--no-fuse=layernorm left residual + layernorm fused"
    # 2 layers: 2 residual adds each, every one followed by a layernorm (the last by the final one)
    "$gc" "$graph" --config tiny --target cpu --emit plan-text | grep -q '^  layernorm *4 fused' ||
        fail "plan-text should list 4 layernorm fusions"
    # under recompute the fused ops stay: the one inside a block is recomputed whole (h0.x, the
    # mid-block sum, recomputed), the one that ends block 0 and starts block 1 as the layernorm of
    # the kept sum h0.x.2 (block 1's input, its checkpoint); train.recompute: the same losses, poisoned
    "$gc" "$graph" --config tiny --target cpu --recompute full --emit plan-text >rf.txt || fail "plan-text full"
    grep -q '^  layernorm *4 fused' rf.txt || fail "--recompute full: plan-text should list 4 layernorm fusions"
    grep '^recomputed:' rf.txt | grep -q ' h1\.h\.re ' || fail "--recompute full: block 1's first layernorm not recomputed"
    grep '^recomputed:' rf.txt | grep -q ' h0\.x\.re ' || fail "--recompute full: block 0's mid-block sum not recomputed"
    grep '^recomputed:' rf.txt | grep -q '\.x\.2\.re' && fail "--recompute full recomputed a block's output"
    # bias + GELU keeps only the pre-activation: the GELU output is recomputed
    # in the backward, so the fused arena is smaller by about one (B,T,4C)
    # tensor per layer (tiny: 2 x 256 KiB) less one recomputed copy
    a_on=$("$gc" "$graph" --config tiny --target cpu --no-fuse=classifier --emit summary | sed -n 's/^arena_bytes: //p')
    a_off=$("$gc" "$graph" --config tiny --target cpu --no-fuse=classifier,gelu --emit summary | sed -n 's/^arena_bytes: //p')
    echo "tiny arena: gelu fused $a_on, not fused $a_off"
    [ "$a_on" -lt "$a_off" ] || fail "the gelu fusion did not shrink the arena ($a_on vs $a_off)"
    "$gc" "$graph" --config tiny --target cpu --no-fuse=bogus --emit c >/dev/null 2>err.txt && fail "--no-fuse=bogus accepted"
    grep -q "unknown fusion 'bogus'" err.txt || { cat err.txt; fail "--no-fuse=bogus message"; }
    ;;
progress)  # the step's FLOPs baked in by gcompile, MFU's peak, the JSONL fields of both schedules
    compile t_fused --schedule fused-opt
    compile t_plain --schedule plain
    compile t_full --schedule plain --recompute full
    compile t_dev --device cpu
    gfl=$("$gc" "$graph" --config tiny --target cpu --schedule plain --emit summary | sed -n 's/^total_gflops_per_step: //p')
    ./t_plain --threads 2 --steps 2 --log plain.jsonl >out.txt || fail "plain run"
    got=$(sed -n 's/^compute: \([0-9.e+-]*\) GFLOP per step.*/\1/p' out.txt)
    awk -v a="$got" -v b="$gfl" 'BEGIN { d = a - b; exit !(a > 0 && d < 0.0005 && d > -0.0005) }' ||
        fail "compute line $got GFLOP, gcompile --emit summary $gfl"
    grep -q 'no MFU: peak unknown' out.txt || fail "a CPU program without --device has no peak"
    # recomputation is not model FLOPs: the same count
    ./t_full --threads 2 --steps 1 >full.txt || fail "recompute run"
    grep -q "^compute: $got GFLOP per step" full.txt || fail "--recompute full changed the FLOPs: $(grep compute full.txt)"
    ./t_dev --threads 2 --steps 2 >dev.txt || fail "--device cpu run"
    grep -q '^compute: .* | MFU against 233 GFLOP/s (cpu)$' dev.txt || fail "no compiled-in peak: $(grep compute dev.txt)"
    grep -Eq '^step    2/2 .* \| MFU [0-9.]+%$' dev.txt || fail "no MFU with --device cpu"
    ./t_dev --help | grep -q 'compiled in: cpu, 2.33e+11 FLOP/s' || fail "--help does not show the compiled-in peak"
    ./t_fused --threads 2 --steps 2 --log fused.jsonl >/dev/null || fail "fused run"
    num='-?[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?'
    n=$(grep -Ec "^\{\"step\":[12],\"loss\":$num,\"ms\":$num,\"tok_per_s\":$num,\"lr\":$num,\"grad_norm\":$num,\"shard\":0,\"batch\":[0-9]+\}\$" plain.jsonl)
    [ "$n" -eq 2 ] || fail "plain schedule log: $(cat plain.jsonl)"
    n=$(grep -Ec "^\{\"step\":[12],\"loss\":$num,\"ms\":$num,\"tok_per_s\":$num,\"lr\":$num,\"grad_norm\":$num,\"shard\":0,\"batch\":[0-9]+\}\$" fused.jsonl)
    [ "$n" -eq 2 ] || fail "fused-opt log: $(cat fused.jsonl)"
    # the fused-opt program's norm, added up by its updates inside the backward, is the plain one's
    norms() { sed -n 's/.*"loss":\([^,]*\),.*"grad_norm":\([^,]*\).*/\1 \2/p' "$1"; }
    paste -d' ' "$(norms plain.jsonl >pn.txt; echo pn.txt)" "$(norms fused.jsonl >fn.txt; echo fn.txt)" |
        awk '{ d = ($2 - $4) / $2; if (d < 0) d = -d; printf "step %d: loss %s %s, norm plain %s fused-opt %s\n", NR, $1, $3, $2, $4;
               if ($1 != $3 || !(d <= 1e-6)) bad = 1 } END { exit bad || NR != 2 }' || fail "fused-opt norms differ from plain"
    # without --log the fused-opt program does not measure it
    ./t_fused --threads 2 --steps 1 | grep -q '^step .* | norm ' && fail "fused-opt program measured the norm without --log"
    ;;
sample)    # --sample in the default build (the classifier fused, no logits tensor): a forward to the final
           # norm, then one row's classifier into the planned sample row; the same tokens as the unfused
           # program's logits give, from the same checkpoint, also past the window (T = 64) and with --poison
    compile t_fused
    compile t_poison --poison
    compile t_unfused --no-fuse=classifier
    "$gc" "$graph" --config tiny --target cpu --emit plan -o plan.json || fail "emit plan"
    python3 -c 'import json; p = json.load(open("plan.json")); r = [t for t in p["tensors"] if t["name"].endswith(".row")]
assert len(r) == 1 and r[0]["shape"] == [1, 256] and r[0]["bytes"] == 1024 and r[0]["region"] == "arena", r
assert r[0]["last"] == len(p["schedule"]) - 1, "the sample row must live to the last step"
assert not [t for t in p["tensors"] if t["name"] == "logits" and t["first"] is not None], "the logits are planned"
print("sample row:", r[0]["name"], r[0]["bytes"], "bytes at", r[0]["offset"])' || fail "the fused plan has no sample row"
    ./t_fused --threads 2 --steps 30 --lr 3e-3 --save m.bin >/dev/null || fail "fused training run"
    for p in t_fused t_poison t_unfused; do
        ./$p --threads 2 --init m.bin --steps 0 --sample 100 --seed 3 >$p.out || fail "$p --sample"
        sed '1,/^--- sample/d' $p.out >$p.txt   # the tokens (bytes: newlines among them)
    done
    [ "$(wc -c <t_unfused.txt)" -eq 101 ] || fail "unfused sample: $(cat t_unfused.txt)"   # 100 bytes and a newline
    cmp -s t_fused.txt t_unfused.txt || { cat t_fused.txt t_unfused.txt; fail "fused and unfused samples differ"; }
    cmp -s t_poison.txt t_unfused.txt || { cat t_poison.txt t_unfused.txt; fail "the poisoned program's sample differs"; }
    ./t_fused --threads 2 --init m.bin --steps 0 --sample 100 --seed 4 | sed '1,/^--- sample/d' >s4.txt
    cmp -s s4.txt t_fused.txt && fail "another seed gave the same sample: the check would not see a constant"
    echo "sample (fused = unfused): $(cat t_fused.txt)"
    # llm.c's recipe in the default build: clipping (norm pass), decay, then a sample
    ./t_fused --threads 2 --steps 3 --grad-clip 1 --weight-decay 0.1 --sample 64 >r.out 2>&1 || { cat r.out; fail "--grad-clip 1 --weight-decay 0.1 --sample 64"; }
    grep -q '^--- sample: 64 tokens' r.out || fail "no sample: $(cat r.out)"
    ./t_fused --help | grep -qi "not available" && fail "--help still says something is not available"
    ;;
evalonly)  # validation with the classifier fused (its forward gives the loss; the dx, dw it also writes
           # go to planned storage and change no later step) and --eval-only of a checkpoint
    rm -rf ck_t_fused ck_t_unfused ./*.jsonl   # a rerun in the same folder: --resume appends to its log
    python3 -c 'import struct, random
r = random.Random(5); t = [r.randrange(256) for _ in range(6000)]
open("val.bin", "wb").write(struct.pack("<256i", 20240520, 1, len(t), *[0] * 253) + struct.pack("<%dH" % len(t), *t))' ||
        fail "val shard"
    compile t_fused
    compile t_unfused --no-fuse=classifier
    vals() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*"val_loss":\([^,}]*\).*/\1 \2 \3/p' "$1"; }
    for p in t_fused t_unfused; do
        ./$p --threads 2 --steps 10 --val-data val.bin --val-every 5 --val-batches 3 --log $p.jsonl --ckpt-dir ck_$p \
            --save $p.bin >/dev/null || fail "$p with validation"
        vals $p.jsonl >$p.val
    done
    [ "$(wc -l <t_fused.val)" -eq 2 ] || fail "fused: no val losses: $(cat t_fused.jsonl)"
    cmp -s t_fused.val t_unfused.val || { paste t_fused.val t_unfused.val; fail "fused and unfused val losses differ"; }
    ./t_fused --threads 2 --steps 10 --log noval.jsonl >/dev/null || fail "run without validation"
    sed -n 's/.*"step":10,"loss":\([^,]*\),.*/\1/p' noval.jsonl >a.txt
    sed -n 's/^10 \([^ ]*\) .*/\1/p' t_fused.val >b.txt
    cmp -s a.txt b.txt || { cat a.txt b.txt; fail "validating between steps changed the training loss"; }
    ev() { sed -n 's/.*"eval_loss":\([^,}]*\).*/\1/p' "$1"; }
    ./t_fused --threads 2 --init t_fused.bin --eval-only --val-data val.bin --val-batches 3 --log e1.jsonl >e1.out ||
        fail "--eval-only --init"
    ./t_unfused --threads 2 --init t_fused.bin --eval-only --val-data val.bin --val-batches 3 --log e2.jsonl >/dev/null ||
        fail "unfused --eval-only --init"
    ./t_fused --threads 2 --resume ck_t_fused --eval-only --val-data val.bin --val-batches 3 --log e3.jsonl >e3.out ||
        fail "--eval-only --resume"
    grep -q '^resume: step 10 ' e3.out || fail "--eval-only --resume loaded no checkpoint: $(cat e3.out)"
    grep -q '^eval loss [0-9.]* (mean over 3 batches of val.bin)$' e1.out || fail "no eval line: $(cat e1.out)"
    grep -q '^step ' e1.out && fail "--eval-only trained"
    w=$(sed -n 's/^10 [^ ]* //p' t_fused.val)    # the val loss after step 10: the same parameters
    for e in e1 e2 e3; do
        [ "$(ev $e.jsonl)" = "$w" ] || fail "$e: eval loss $(ev $e.jsonl), the run's val loss at step 10 $w"
    done
    echo "eval loss of the step-10 checkpoint: $w (--init fused, unfused, --resume)"
    ./t_fused --threads 2 --eval-only --init t_fused.bin >x.out 2>x.err && fail "--eval-only without --val-data ran"
    grep -q 'error: --eval-only needs --val-data' x.err || fail "message: $(cat x.err)"
    ./t_fused --threads 2 --init t_fused.bin --eval-only --val-data val.bin --sample 16 | grep -q '^--- sample: 16 tokens' ||
        fail "--eval-only --sample"
    ;;
*) fail "unknown check $check" ;;
esac
echo "ok: $check"
