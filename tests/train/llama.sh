#!/bin/sh
# End-to-end checks of models/llama.graph (tiny) on the CPU target.
# usage: llama.sh GCOMPILE GRAPH WORKDIR CHECK
#   CHECK: noreuse | poison | gradcheck | fusions | header
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
losses() {  # losses PROGRAM [args...] -> one loss per line, from --log (9 digits, not the printed 6:
    prog=$1; shift  # programs that sum in other orders differ there, where the printed loss may match by luck)
    rm -f "$prog.losses.jsonl"
    "./$prog" --threads 2 "$@" --log "$prog.losses.jsonl" >/dev/null
    sed -n 's/^{"step":[0-9]*,"loss":\([^,]*\),.*/\1/p' "$prog.losses.jsonl" 2>/dev/null
}
case "$check" in
header)    # the trainer prints the graph's own dims (not GPT-2's names only); without --data a V below 256
           # (the built-in corpus is byte-level) is one error naming V's declaration
    compile t_tiny
    ./t_tiny --steps 0 >out.txt || fail "--steps 0"
    grep -qx 'dims: B=4 T=32 V=256 L=2 NH=4 NKV=2 C=64 F=160 HS=16 THETA=500000' out.txt ||
        { head -3 out.txt; fail "the header's dims are not the graph's"; }
    compile t_v100 -D V=100
    ./t_v100 --steps 1 >out.txt 2>err.txt && fail "V = 100 trained on the byte-level corpus"
    line=$(grep -n '^dim V = ' "$graph" | cut -d: -f1)
    grep -q "needs V >= 256, but this program has V = 100 (dim V, $graph:$line:5); pass --data FILE (token ids below 100)" \
        err.txt || { cat err.txt; fail "the V < 256 message"; }
    [ "$(wc -l <err.txt)" -eq 1 ] || { cat err.txt; fail "more than one line"; }
    ;;
noreuse)   # the planned program and the every-tensor-its-own-storage one agree bit for bit
    compile t_plan
    compile t_noreuse --no-reuse
    losses t_plan --steps 6 >a.txt
    losses t_noreuse --steps 6 >b.txt
    [ "$(wc -l <a.txt)" -eq 6 ] || fail "expected 6 losses"
    cmp -s a.txt b.txt || { paste a.txt b.txt; fail "--no-reuse losses differ"; }
    ;;
poison)    # NaN-poisoned buffers at the end of each lifetime: the same losses (with recompute and micro-batches)
    for f in "" "--recompute selective --micro-batches 2"; do
        compile t_plan $f
        compile t_poison --poison $f
        losses t_plan --steps 6 >a.txt
        losses t_poison --steps 6 >b.txt
        grep -qi nan b.txt && fail "NaN loss with --poison $f"
        cmp -s a.txt b.txt || { paste a.txt b.txt; fail "--poison $f losses differ"; }
    done
    ;;
gradcheck) # analytic gradients of the whole tiny Llama against finite differences, fused and not
    for f in "" "--no-fuse"; do
        compile t_gc --schedule plain $f
        ./t_gc --threads 2 --gradcheck 48 >out.txt 2>&1 || { cat out.txt; fail "gradcheck $f"; }
    done
    ;;
fusions)   # attention (GQA, rope'd q and k), swiglu, residual + rmsnorm fire; swiglu and rmsnorm are the
           # unfused arithmetic (bit-identical losses); attention within 1e-5 (another summation order)
    "$gc" "$graph" --config tiny --target cpu --emit c >prog.c || fail "--emit c"
    grep -q 'gc_swiglu_bwd(' prog.c || fail "no fused SwiGLU backward in the program"
    grep -q 'ew_swiglu' prog.c || fail "no fused SwiGLU forward in the program"
    grep -q 'gc_add_rmsnorm_fwd(' prog.c || fail "no fused residual + rmsnorm in the program"
    grep -q 'gc_attention_gqa_fwd(' prog.c && grep -q 'gc_attention_gqa_bwd(' prog.c ||
        fail "no fused grouped-query attention (forward and backward) in the program"
    grep -q 'gc_repeat(\|gc_softmax_fwd(\|gc_causal_mask_fwd(' prog.c && fail "repeated k/v or T x T scores left"
    grep -q 'ew_silu\b\|ew_silu(' prog.c && fail "an unfused silu is left"
    "$gc" "$graph" --config tiny --target cpu --emit plan-text >plan.txt || fail "plan-text"
    grep -q '^  swiglu *2 fused' plan.txt && grep -q '^  rmsnorm *4 fused' plan.txt &&
        grep -q '^  attention *2 fused' plan.txt || { cat plan.txt; fail "plan-text fusions"; }
    compile t_on
    losses t_on --steps 8 >a.txt
    [ "$(wc -l <a.txt)" -eq 8 ] || fail "expected 8 losses"
    for kind in swiglu layernorm attention; do
        compile t_off --no-fuse=$kind
        losses t_off --steps 8 >b.txt
        if [ $kind = attention ]; then
            paste a.txt b.txt | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
                END { printf "attention on vs off: max |diff| %.3g\n", m; exit !(m <= 1e-5) }' ||
                { paste a.txt b.txt; fail "--no-fuse=attention changed the losses"; }
        else
            cmp -s a.txt b.txt || { paste a.txt b.txt; fail "--no-fuse=$kind changed the losses"; }
        fi
    done
    ;;
*)
    fail "unknown check '$check'"
    ;;
esac
echo ok
