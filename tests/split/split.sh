#!/bin/sh
# The parallel split on the CPU target (MPI): compile tiny GPT-2 split over
# ranks and compare with one process at the same global batch.
# usage: split.sh GCOMPILE GRAPH WORKDIR CHECK
#   CHECK: dp2 | dp4 | zero1 | zero2 | zero3 | formulas | auto | ckpt | plan | ranks | death | nompi | cuda
#          | clip | val | resume | nonfinite | stop | autorun | hang | tp2 | tp4 | tpdp | tpclip | tpckpt | tpplan
set -u
gc=$1 graph=$2 dir=$3 check=$4
mkdir -p "$dir"
cd "$dir" || exit 1
export OMP_NUM_THREADS=1
# Under ASan (GC_SANITIZE builds) the ranks report no leaks: Open MPI's MPI_Init
# keeps allocations to the end, some from plugins unloaded before LeakSanitizer
# can name them; the one-process runs of the same runtime keep leak checks.
MPIRUN="mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -x ASAN_OPTIONS=detect_leaks=0"
fail() { echo "FAIL: $*"; exit 1; }
compile() {  # compile OUT [gcompile args...]
    out=$1; shift
    "$gc" "$graph" --config tiny --target cpu -o "$out" "$@" || fail "gcompile $*"
}
log_losses() {  # LOG -> one loss per line
    sed -n 's/^{"step":[0-9]*,"loss":\([^,]*\),.*/\1/p' "$1"
}
# same_losses A B TOL: equal count (20) and |a - b| <= TOL per step
same_losses() {
    [ "$(wc -l <"$1")" -eq 20 ] && [ "$(wc -l <"$2")" -eq 20 ] || { paste "$1" "$2"; fail "expected 20 losses each"; }
    paste "$1" "$2" | awk -v tol="$3" '{ d = $1 - $2; d = d < 0 ? -d : d; if (d > m) m = d }
        END { printf "max |loss difference| over 20 steps: %.3g (tolerance %g)\n", m, tol; exit !(m <= tol) }' ||
        { paste "$1" "$2"; fail "losses differ by more than $3"; }
}
# same N SPLIT [gcompile args]: N ranks of B = 8/N rows against one process of B = 8
find_rank1() {  # MPIRUN_PID: sets rank1 to rank 1's pid once rank 0 printed a step (out.txt), or fails
    rank1=
    for i in $(seq 1 100); do
        for p in $(pgrep -P "$1" 2>/dev/null); do
            tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && rank1=$p
        done
        [ -n "$rank1" ] && grep -q '^step' out.txt && return
        sleep 0.2
    done
    [ -n "$rank1" ] || { kill "$1"; fail "rank 1 not found"; }
}
same() {
    n=$1 split=$2; shift 2
    compile t_one -D B=8
    compile t_$split$n -D B=$((8 / n)) --gpus "$n" --split "$split" "$@"
    ./t_one --steps 20 --log one.jsonl >one.out || fail "one-process run"
    $MPIRUN -np "$n" ./t_$split$n --steps 20 --log split.jsonl >split.out 2>split.err ||
        { cat split.err; fail "mpirun -np $n"; }
    log_losses one.jsonl >a.txt
    log_losses split.jsonl >b.txt
    same_losses a.txt b.txt 1e-6
    grep -q "^split: $split over $n ranks" split.out || fail "no split line in the header"
    [ "$(grep -c '^step ' split.out)" -eq 20 ] || fail "expected 20 progress lines from rank 0 only"
}
# tp_same N SPLIT [gcompile args]: tensor parallel over N ranks (SPLIT: tp=N, or tp=K+dp|zero1|zero2 with
# N/K groups of B = 8/(N/K) rows) against one process of B = 8; per-step losses within 1e-5, the logged
# global norms within 1e-5 relative
tp_same() {
    n=$1 split=$2; shift 2
    k=${split#tp=}; k=${k%%+*}
    compile t_one -D B=8 "$@"
    compile t_tp$n -D B=$((8 * k / n)) --gpus "$n" --split "$split" "$@"
    ./t_one --steps 20 --log one.jsonl >one.out || fail "one-process run"
    $MPIRUN -np "$n" ./t_tp$n --steps 20 --log split.jsonl >split.out 2>split.err ||
        { cat split.err; fail "mpirun -np $n $split"; }
    log_losses one.jsonl >a.txt
    log_losses split.jsonl >b.txt
    same_losses a.txt b.txt 1e-5
    norms one.jsonl >na.txt
    norms split.jsonl >nb.txt
    [ "$(wc -l <nb.txt)" -eq 20 ] || fail "$split: no grad_norm in the log"
    paste na.txt nb.txt | awk '{ d = ($1 - $2) / $1; d = d < 0 ? -d : d; if (d > m) m = d }
        END { printf "max relative norm difference: %.3g\n", m; exit !(m <= 1e-5) }' || fail "$split: global norm differs"
    grep -q "^split: tp[+a-z0-9]* over $n ranks.*global batch 8 rows" split.out || fail "no tp split line in the header"
    [ "$(grep -c '^step ' split.out)" -eq 20 ] || fail "expected 20 progress lines from rank 0 only"
}
norms() { sed -n 's/.*"grad_norm":\([^,]*\),.*/\1/p' "$1"; }
case "$check" in
tp2) tp_same 2 tp=2 --poison ;;   # NaN-poisoned buffers: a plan error would show
tp4) tp_same 4 tp=4 ;;
tpdp)      # tp=2 groups with dp, zero1, zero2 over the 2 groups (4 ranks); plain schedule: the norm of UPD_GRADS
    tp_same 4 tp=2 --poison
    tp_same 4 tp=2+zero1
    tp_same 4 tp=2+zero2 --poison
    tp_same 4 tp=2+zero1 --schedule plain
    grep -q "^split: tp+zero1 over 4 ranks" split.out || fail "no tp+zero1 in the header"
    # the plan: the tp all-reduces over a group of 2 (per block), the gradients' reduce-scatters over the other
    "$gc" "$graph" --config tiny --target cpu --gpus 4 --split tp=2+zero2 --emit c >prog.c || fail "emit c"
    grep -q 'gc_allreduce(.*, 0, 1);' prog.c || fail "no tensor-parallel all-reduce (sum, tp group)"
    grep -q 'gc_reduce_scatter(.*, 1, 2);' prog.c || fail "no reduce-scatter over the dp group"
    "$gc" "$graph" --config tiny --target cpu --gpus 4 --split tp=2+zero2 --emit plan -o p.json || fail "emit plan"
    python3 -c 'import json, sys; s = json.load(open("p.json"))["split"]; print(s)
assert (s["kind"], s["ranks"], s["tp_group"], s["dp_groups"]) == ("tp+zero2", 4, 2, 2)' || fail "plan JSON split"
    ;;
tpclip)    # --grad-clip under tp (plain schedule: the norm before any update) counts the gradients that every
           # rank holds alike once: the clipped run equals one process's
    compile t_one -D B=8 --schedule plain
    compile t_tp2 -D B=8 --gpus 2 --split tp=2 --schedule plain
    ./t_one --steps 20 --grad-clip 0.5 --log one.jsonl >/dev/null || fail "one-process clipped run"
    ./t_one --steps 20 --log free.jsonl >/dev/null || fail "one-process run"
    log_losses one.jsonl >a.txt
    log_losses free.jsonl >f.txt
    cmp -s a.txt f.txt && fail "clipping at 0.5 changed no loss: the test would not see a wrong norm"
    $MPIRUN -np 2 ./t_tp2 --steps 20 --grad-clip 0.5 --log tp.jsonl >tp.out 2>tp.err || { cat tp.err; fail "tp clipped run"; }
    log_losses tp.jsonl >b.txt
    same_losses a.txt b.txt 1e-5
    ;;
tpckpt)    # saved under tp, loaded into one process: the next-step loss of one process's own checkpoint; and back
    compile t_one -D B=8
    ./t_one --steps 5 --save one.bin >/dev/null || fail "one-process save"
    ./t_one --steps 1 --init one.bin --log next_one.jsonl >/dev/null || fail "one-process load"
    log_losses next_one.jsonl >a.txt
    for n in 2 4 4z; do
        if [ $n = 4z ]; then        # 2 groups of 2, zero2 over them
            n=4 s=tp=2+zero2 b=4
        else
            s=tp=$n b=8
        fi
        compile t_tp$n -D B=$b --gpus $n --split $s
        $MPIRUN -np $n ./t_tp$n --steps 5 --save tp$n.bin >tp.out 2>tp.err || { cat tp.err; fail "$s save"; }
        [ "$(wc -c <tp$n.bin)" -eq "$(wc -c <one.bin)" ] || fail "$s: checkpoint size differs"
        ./t_one --steps 1 --init tp$n.bin --log next_tp.jsonl >/dev/null || fail "load the $s checkpoint"
        log_losses next_tp.jsonl >b.txt
        paste a.txt b.txt | awk -v s=$s '{ d = $1 - $2; d = d < 0 ? -d : d;
            printf "%s: next-step loss after load %s (one process: %s)\n", s, $2, $1; exit !(NR == 1 && d <= 1e-5) }' ||
            fail "$s: next-step loss differs"
        # loading cuts: the tp program started from one process's checkpoint takes the same step
        $MPIRUN -np $n ./t_tp$n --steps 1 --init one.bin --log load.jsonl >load.out 2>&1 || { cat load.out; fail "$s load"; }
        log_losses load.jsonl >b.txt
        paste a.txt b.txt | awk -v s=$s '{ d = $1 - $2; d = d < 0 ? -d : d; printf "%s loading one.bin: %s (one process: %s)\n",
            s, $2, $1; exit !(NR == 1 && d <= 1e-5) }' || fail "$s: the loaded checkpoint gives another loss"
    done
    ;;
tpplan)    # one rank's plan: the cut parameters at 1/N, the rest whole; 2 all-reduces per block each way
    for n in 2 4; do
        "$gc" "$graph" --config gpt2_124M --target cpu --gpus $n --split tp=$n --emit plan -o p_tp$n.json ||
            fail "emit plan tp=$n"
    done
    "$gc" "$graph" --config gpt2_124M --target cpu --gpus 2 --split tp=2 --emit plan-text -o p.txt || fail "plan-text"
    grep -q '^split: tp over 2 ranks' p.txt || fail "plan-text: no tp split line"
    python3 - <<'PY' || fail "tp plan"
import json
L, C, V, maxT = 12, 768, 50304, 1024
whole = V * C + maxT * C + L * (2 * C + C + 2 * C + C) + 2 * C        # wte, wpe, ln1, attprojb, ln2, fcprojb, lnf
cut = L * (3 * C * C + 3 * C + C * C + 4 * C * C + 4 * C + 4 * C * C)  # qkv w/b, attproj w, fc w/b, fcproj w
assert whole + cut == 124475904
for n in (2, 4):
    p = json.load(open("p_tp%d.json" % n))
    r = {x["name"]: x["bytes"] for x in p["regions"]}
    P = 4 * (whole + cut // n)
    assert r["params"] == P and r["optstate"] == 2 * P and r["grads"] == 0, (n, r, P)
    s = p["split"]
    assert s["kind"] == "tp" and s["ranks"] == n and s["tp_group"] == n and s["dp_groups"] == 1, s
    comm = [e for e in p["schedule"] if e["phase"] == "comm"]
    assert len(comm) == 4 * L == s["collectives_per_step"], len(comm)
    T = {t["id"]: t for t in p["tensors"]}
    for e in comm:   # each moves one [B, T, C] activation (or its gradient)
        assert T[e["inputs"][0]]["bytes"] == 4 * 4 * 64 * C, e["name"]
    print("tp=%d: params %d bytes per rank (one process %d), %d all-reduces per step" % (n, P, 4 * (whole + cut), len(comm)))
PY
    # errors: tp needs as many ranks; a cut that no head count allows is refused with the reason
    "$gc" "$graph" --config tiny --target cpu --split tp=2 --emit plan 2>err.txt && fail "tp=2 without --gpus 2"
    grep -q "error: --split tp=2 needs --gpus a multiple of 2" err.txt || { cat err.txt; fail "no --gpus message"; }
    "$gc" "$graph" --config tiny --target cpu --gpus 4 --split tp=2+zero3 --emit plan 2>err.txt && fail "tp=2+zero3"
    grep -q "error: --split tp=2+zero3: over the rest of the ranks tp takes dp, zero1 or zero2" err.txt ||
        { cat err.txt; fail "no tp+zero3 message"; }
    "$gc" "$graph" --config tiny --target cpu --gpus 2 --split tp=x --emit plan 2>err.txt && fail "tp=x"
    grep -q "error: --split tp=K: K must be an integer" err.txt || { cat err.txt; fail "no tp=K message"; }
    "$gc" "$graph" --config tiny --target cpu --gpus 3 --split tp=3 --emit plan 2>err.txt && fail "tp=3 on 4 heads"
    grep -q "error: --split tp=3: no matmul pair can be cut over 3 ranks" err.txt || { cat err.txt; fail "no tp=3 message"; }
    # a block whose column matmul reads a view (here a reshape) stays whole: autodiff could not sum its
    # input's gradient over the ranks at a view. Only the MLPs are cut, and the run still equals one process.
    sed 's/qkv = matmul(h, qkvw\[l\], tb=1)/qkv = matmul(reshape(h, [B, T, C]), qkvw[l], tb=1)/' "$graph" >view.graph
    grep -q 'matmul(reshape(h' view.graph || fail "sed did not change the graph"
    "$gc" view.graph --config tiny --target cpu --gpus 2 --split tp=2 --emit plan-text >v.txt || fail "plan-text view.graph"
    grep -q 'tensor parallel: groups of 2 ranks; 3 of 16 parameters cut' v.txt || { grep tensor v.txt; fail "expected the MLPs alone cut"; }
    "$gc" view.graph --config tiny --target cpu -D B=8 -o t_one || fail "compile view.graph"
    "$gc" view.graph --config tiny --target cpu -D B=8 --gpus 2 --split tp=2 -o t_view || fail "compile view.graph tp=2"
    ./t_one --steps 20 --log one.jsonl >/dev/null || fail "one-process run"
    $MPIRUN -np 2 ./t_view --steps 20 --log v.jsonl >v.out 2>v.err || { cat v.err; fail "tp=2 view.graph"; }
    log_losses one.jsonl >a.txt
    log_losses v.jsonl >b.txt
    same_losses a.txt b.txt 1e-5
    ;;
dp2) same 2 dp ;;
dp4) same 4 dp ;;
zero1) same 2 zero1 ;;
zero2) same 4 zero2 --poison ;;   # NaN-poisoned buffers: a plan error would show
zero3)
    same 2 zero3 --poison
    # with recomputation the clones read the weights the backward gathers: the same losses, and no copy
    # gathered for the forward outlives the forward (it used to live until the recompute: the whole model)
    same 2 zero3 --poison --recompute full
    for rc in full selective; do
        "$gc" "$graph" --config tiny --target cpu --gpus 2 --split zero3 --recompute $rc --emit plan -o p.json ||
            fail "emit plan zero3 --recompute $rc"
        python3 - <<'PY' || fail "zero3 --recompute $rc: a forward gather outlives the forward"
import json
d = json.load(open("p.json"))
first_bwd = min(s["step"] for s in d["schedule"] if s["phase"] in ("bwd", "recompute"))
late = [t["name"] for t in d["tensors"] if t["name"].startswith("gf.") and t["view_of"] is None and t["last"] >= first_bwd]
assert not late, late
PY
    done
    ;;
formulas)  # each rank's persistent bytes: P = 4 bytes x parameters, N ranks
    for n in 2 4 8; do
        for s in dp zero1 zero2 zero3; do
            "$gc" "$graph" --config gpt2_124M --target cpu --gpus $n --split $s --emit plan -o p_$s$n.json ||
                fail "emit plan $s $n"
        done
    done
    python3 - <<'PY' || fail "ZeRO formulas"
import json
def regions(f):
    return {r["name"]: r["bytes"] for r in json.load(open(f))["regions"]}
for n in (2, 4, 8):
    dp, z1, z2, z3 = (regions("p_%s%d.json" % (s, n)) for s in ("dp", "zero1", "zero2", "zero3"))
    P = dp["params"]
    assert P == 4 * 124475904, P
    # dp: everything replicated (the fused-opt schedule keeps gradients transient in the arena)
    assert dp["optstate"] == 2 * P and dp["grads"] == 0, dp
    # zero1: optimizer state 1/N; whole gradients persist
    assert z1["params"] == P and z1["grads"] == P and z1["optstate"] == 2 * P // n, z1
    # zero2: gradients sharded too: none persist, each layer's lives until its reduce-scatter
    assert z2["params"] == P and z2["grads"] == 0 and z2["optstate"] == 2 * P // n, z2
    # zero3: parameters sharded too (each layer's whole slice gathered into the arena just before use)
    assert z3["params"] == P // n and z3["grads"] == 0 and z3["optstate"] == 2 * P // n, z3
    pers = lambda r: sum(r[k] for k in ("params", "grads", "optstate"))
    print("N=%d persistent bytes per rank: dp %d, zero1 %d, zero2 %d, zero3 %d (arena %d)" % (
          n, pers(dp), pers(z1), pers(z2), pers(z3), z3["arena"]))
PY
    ;;
auto)      # --split auto: the least predicted step time among the splits whose real plan fits --mem
    a() { "$gc" "$graph" --config gpt2_124M --gpus 4 --split auto --offload none "$@" --emit plan-text; }   # tests/offload weighs offload
    # 124M at B=4 T=64: tp=4 sends 4 x 16 rows of activations per block, dp all 475 MiB of gradients twice
    a >free.txt || fail "auto without --mem"
    grep -q '^split: tp over 4 ranks' free.txt || { cat free.txt; fail "without --mem: expected tp=4"; }
    for s in dp zero1 zero2 zero3 tp=4; do grep -q "^    $s " free.txt || fail "plan-text does not list $s"; done
    a --mem 2GiB --interconnect pcie >tight.txt || fail "auto with --mem 2GiB"
    grep -q '^split: tp over 4 ranks' tight.txt || { cat tight.txt; fail "--mem 2GiB: expected tp=4"; }
    # dp is slower than tp=4 here: planned, it does not fit; or not planned at all (its lower bound on the
    # step time, from one screening, is no faster than tp=4's plan)
    grep -q 'dp .*(>mem)\|dp  *not planned: step at least' tight.txt || fail "dp should be marked as not fitting or not planned"
    # at 1600MiB only zero3 fits (tp=4's 16 rows per rank do not, even in 16 micro-batches, recomputed)
    a --mem 1600MiB --interconnect pcie >tight2.txt || fail "auto with --mem 1600MiB"
    sed -n '/<- chosen/p; /tp=4 /p' tight2.txt
    grep -q '^split: zero3 over 4 ranks' tight2.txt || { cat tight2.txt; fail "--mem 1600MiB: expected zero3"; }
    grep -q 'tp=4 .*(>mem)' tight2.txt || fail "tp=4 should be marked as not fitting at 1600MiB"
    a --mem 1GiB >none.txt 2>err.txt && fail "--mem 1GiB should fit no split"
    grep -q "error: no split over 4 devices fits" err.txt || { cat err.txt; fail "no message"; }
    # the issue's benchmark: 1558M at B=8 T=1024 fp32 fits 8 devices of 16 GiB once each split carries the budget
    # search's micro-batches and recompute (no split fits without them: dp needs 27 GiB, zero3 63 GiB unrecomputed)
    "$gc" "$graph" --config gpt2_1558M -D B=8 -D T=1024 --gpus 8 --mem 16GiB --split auto --emit plan-text \
        >big.txt 2>big.err || { cat big.err; fail "1558M --gpus 8 --mem 16GiB --split auto does not fit"; }
    grep -q '^  total .*budget 16.00 GiB: fits' big.txt || fail "1558M: no fitting total"
    grep -q '^    why: .* is the least predicted step time' big.txt || fail "1558M: plan-text does not say why"
    grep -q 'K=[0-9]* recompute [nsf]*  <- chosen' big.txt || fail "1558M: the chosen row lacks its levers"
    sed -n '/^split:/p; /<- chosen/p; /why:/p' big.txt
    "$gc" "$graph" --gpus 2 --interconnect carrier-pigeon --emit plan 2>err.txt && fail "bad --interconnect"
    grep -q "error: --interconnect must be" err.txt || fail "no --interconnect message"
    ;;
ckpt)      # saved under each split, loaded into one process: the same next-step loss as one process's own
    compile t_one -D B=8
    ./t_one --steps 5 --save one.bin >/dev/null || fail "one-process save"
    ./t_one --steps 1 --init one.bin --log next_one.jsonl >/dev/null || fail "one-process load"
    for s in dp zero1 zero2 zero3; do
        compile t_$s -D B=4 --gpus 2 --split $s
        $MPIRUN -np 2 ./t_$s --steps 5 --save $s.bin >$s.out 2>$s.err || { cat $s.err; fail "$s save"; }
        [ "$(wc -c <$s.bin)" -eq "$(wc -c <one.bin)" ] || fail "$s: checkpoint size differs"
        ./t_one --steps 1 --init $s.bin --log next_$s.jsonl >/dev/null || fail "load the $s checkpoint"
        log_losses next_one.jsonl >a.txt
        log_losses next_$s.jsonl >b.txt
        paste a.txt b.txt | awk -v s=$s '{ d = $1 - $2; d = d < 0 ? -d : d;
            printf "%s: next-step loss after load %s (one process: %s)\n", s, $2, $1; exit !(NR == 1 && d <= 1e-6) }' ||
            fail "$s: next-step loss differs"
    done
    # loading scatters: the zero3 program started from one process's checkpoint takes the same step
    $MPIRUN -np 2 ./t_zero3 --steps 1 --init one.bin --log load3.jsonl >load3.out 2>&1 || { cat load3.out; fail "zero3 load"; }
    log_losses load3.jsonl >b.txt
    paste a.txt b.txt | awk '{ d = $1 - $2; d = d < 0 ? -d : d; printf "zero3 loading one.bin: %s (one process: %s)\n", $2, $1;
        exit !(NR == 1 && d <= 1e-6) }' || fail "zero3: the loaded checkpoint gives another loss"
    ;;
plan)      # the plan is one rank's: split, comm tensors in the arena, each all-reduce before its update
    "$gc" "$graph" --config tiny --target cpu --gpus 2 --emit plan -o p.json || fail "emit plan"
    "$gc" "$graph" --config tiny --target cpu --gpus 2 --emit plan-text -o p.txt || fail "emit plan-text"
    "$gc" "$graph" --config tiny --target cpu --gpus 2 --emit plan-svg -o p.svg || fail "emit plan-svg"
    "$gc" "$graph" --config tiny --target cpu --emit plan -o p1.json || fail "emit plan (one rank)"
    grep -q '^split: dp over 2 ranks' p.txt || fail "plan-text: no split line"
    grep -q 'sent per rank per step' p.txt || fail "plan-text: no bytes sent"
    grep -q 'split dp over 2 ranks' p.svg || fail "plan-svg: no split line"
    python3 - p.json p1.json <<'PY' || fail "plan JSON"
import json, sys
p = json.load(open(sys.argv[1])); one = json.load(open(sys.argv[2]))
s = p["split"]
assert s["kind"] == "dp" and s["ranks"] == 2 and s["tp_group"] == 1 and s["dp_groups"] == 2, s
assert one["split"]["kind"] == "none" and one["split"]["ranks"] == 1
T = {t["id"]: t for t in p["tensors"]}
params_region = next(r["bytes"] for r in p["regions"] if r["name"] == "params")
# a ring all-reduce sends 2(N-1)/N of the gradient bytes: here all parameters once
assert s["bytes_sent_per_step"] == params_region, (s, params_region)
sched = p["schedule"]
comm = [e for e in sched if e["phase"] == "comm"]
assert comm and len(comm) == s["collectives_per_step"], len(comm)
for e in comm:
    out = T[e["outputs"][0]]
    assert out["kind"] == "comm" and out["region"] == "arena", out
    # as early as its input allows: right after the last op that wrote the gradient
    grad = e["inputs"][0]
    def root(t):
        while T[t]["view_of"] is not None:
            t = T[t]["view_of"]
        return t
    writers = [f["step"] for f in sched if f["step"] < e["step"] and any(
        root(o) == root(grad) for o in f["outputs"])]
    assert writers, e["name"]
    between = [f for f in sched if max(writers) < f["step"] < e["step"] and f["phase"] in ("fwd", "bwd")]
    assert not between, (e["name"], [f["name"] for f in between])
    # the update that reads it comes later, in the same step
    readers = [f for f in sched if e["outputs"][0] in f["inputs"]]
    assert len(readers) == 1 and readers[0]["op"] == "adamw" and readers[0]["step"] > e["step"], e["name"]
# per layer: layer 1's updates run before layer 0's backward ends (fused-opt)
first_l0 = min(e["step"] for e in comm if "h0." in e["name"])
last_l1 = max(e["step"] for e in comm if "h1." in e["name"])
assert last_l1 < first_l0, (last_l1, first_l0)
print("plan: %d collectives, %d bytes sent per step" % (len(comm), s["bytes_sent_per_step"]))
PY
    ;;
ranks)     # a 2-rank program started on the wrong number of ranks says so; --split errors
    compile t_dp2 --gpus 2
    $MPIRUN -np 3 ./t_dp2 --steps 1 >out.txt 2>err.txt && fail "3 ranks of a 2-rank program should fail"
    grep -q "compiled for 2 ranks" err.txt || { cat err.txt; fail "no rank-count message"; }
    "$gc" "$graph" --config tiny --target cpu --gpus 2 --split bogus --emit plan 2>err.txt && fail "--split bogus"
    grep -q "error: --split must be" err.txt || fail "no --split message"
    ;;
death)     # a rank killed mid-run ends the job with an error naming it, never a hang
    compile t_dp2 --gpus 2
    $MPIRUN -np 2 ./t_dp2 --steps 1000000 >out.txt 2>err.txt &
    mp=$!
    find_rank1 "$mp"
    kill -9 "$rank1"
    for i in $(seq 1 150); do kill -0 "$mp" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$mp" 2>/dev/null && { kill -9 "$mp"; fail "the job still runs 30 s after rank 1 died (hang)"; }
    wait "$mp" && fail "the job exited 0 after a rank died"
    grep -q "rank 1" err.txt || { cat err.txt; fail "the error does not name rank 1"; }
    echo "rank 1 killed: job ended: $(grep -m1 'rank 1' err.txt)"
    ;;
clip)      # --grad-clip under a split: the global norm counts each element once (dp: whole on every rank;
           # zero: each rank's 1/N), so the clipped run equals one process's
    compile t_one -D B=8 --schedule plain
    ./t_one --steps 20 --grad-clip 0.5 --log one.jsonl >/dev/null || fail "one-process clipped run"
    ./t_one --steps 20 --log free.jsonl >/dev/null || fail "one-process run"
    log_losses one.jsonl >a.txt
    log_losses free.jsonl >f.txt
    cmp -s a.txt f.txt && fail "clipping at 0.5 changed no loss: the test would not see a wrong norm"
    norms one.jsonl >na.txt
    for s in dp zero1 zero3; do
        compile t_$s -D B=4 --gpus 2 --split $s --schedule plain
        $MPIRUN -np 2 ./t_$s --steps 20 --grad-clip 0.5 --log $s.jsonl >$s.out 2>$s.err || { cat $s.err; fail "$s clipped run"; }
        log_losses $s.jsonl >b.txt
        echo "$s:"; same_losses a.txt b.txt 1e-6
        norms $s.jsonl >nb.txt
        [ "$(wc -l <nb.txt)" -eq 20 ] || fail "$s: no grad_norm in the log"
        paste na.txt nb.txt | awk '{ d = ($1 - $2) / $1; d = d < 0 ? -d : d; if (d > m) m = d }
            END { printf "max relative norm difference: %.3g\n", m; exit !(m <= 1e-6) }' || fail "$s: global norm differs"
    done
    # fused-opt programs (updates inside the backward) clip with a norm pass (a first forward and backward
    # whose updates only add up the squares, the norm summed over ranks): one process and every split
    # equal the plain one-process clipped run, losses and norms
    compile t_f1 -D B=8
    ./t_f1 --steps 20 --grad-clip 0.5 --log f1c.jsonl >/dev/null || fail "one-process fused-opt clipped run"
    log_losses f1c.jsonl >b.txt
    echo "fused-opt, one process:"; same_losses a.txt b.txt 1e-6
    for s in dp zero1 zero2 zero3 tp=2; do
        b=4; [ $s = tp=2 ] && b=8
        compile t_f$s -D B=$b --gpus 2 --split $s
        $MPIRUN -np 2 ./t_f$s --steps 20 --grad-clip 0.5 --log f$s.jsonl >f.out 2>f.err ||
            { cat f.err; fail "fused-opt $s clipped run"; }
        log_losses f$s.jsonl >b.txt
        echo "fused-opt $s:"; same_losses a.txt b.txt 1e-6
        norms f$s.jsonl >nb.txt
        [ "$(wc -l <nb.txt)" -eq 20 ] || fail "fused-opt $s: no grad_norm in the log"
        paste na.txt nb.txt | awk '{ d = ($1 - $2) / $1; d = d < 0 ? -d : d; if (d > m) m = d }
            END { printf "max relative norm difference: %.3g\n", m; exit !(m <= 1e-6) }' || fail "fused-opt $s: global norm differs"
    done
    # unclipped, --log still gets the norm the updates add up
    compile t_fz2 -D B=4 --gpus 2 --split zero2
    ./t_f1 --steps 20 --log f1.jsonl >/dev/null || fail "one-process fused run"
    $MPIRUN -np 2 ./t_fz2 --steps 20 --log fz2.jsonl >f.out 2>f.err || { cat f.err; fail "fused zero2 run"; }
    norms f1.jsonl >na.txt
    norms fz2.jsonl >nb.txt
    [ "$(wc -l <nb.txt)" -eq 20 ] || fail "fused zero2: no grad_norm in the log"
    paste na.txt nb.txt | awk '{ d = ($1 - $2) / $1; d = d < 0 ? -d : d; if (d > m) m = d }
        END { printf "fused zero2: max relative norm difference %.3g\n", m; exit !(m <= 1e-6) }' || fail "fused zero2 norm differs"
    ;;
val)       # validation under a split with the default build (the classifier fused: the val loss comes out of
           # the fused op's forward), --val-every, and --eval-only of a checkpoint: every split's val losses
           # are one process's (the mean over ranks of their rows' losses)
    python3 -c 'import struct, random
r = random.Random(7); t = [r.randrange(256) for _ in range(8000)]
open("val.bin", "wb").write(struct.pack("<256i", 20240520, 1, len(t), *[0] * 253) + struct.pack("<%dH" % len(t), *t))' ||
        fail "val shard"
    vals() { sed -n 's/.*"val_loss":\([^,}]*\).*/\1/p' "$1"; }
    compile t_one -D B=8
    ./t_one --steps 10 --val-data val.bin --val-every 5 --val-batches 3 --save one.bin --log one.jsonl >/dev/null ||
        fail "one-process run"
    vals one.jsonl >a.txt
    [ "$(wc -l <a.txt)" -eq 2 ] || fail "one process: $(cat one.jsonl)"
    ./t_one --init one.bin --eval-only --val-data val.bin --val-batches 3 --log eval1.jsonl >/dev/null || fail "--eval-only"
    for s in dp zero1 zero3 tp=2; do
        b=4; [ $s = tp=2 ] && b=8
        compile t_v$s -D B=$b --gpus 2 --split $s
        $MPIRUN -np 2 ./t_v$s --steps 10 --val-data val.bin --val-every 5 --val-batches 3 --log v$s.jsonl >v.out 2>v.err ||
            { cat v.err; fail "$s run with validation"; }
        vals v$s.jsonl >b.txt
        paste a.txt b.txt | awk -v s=$s '{ d = $1 - $2; d = d < 0 ? -d : d; if (d > m) m = d }
            END { printf "%s: val losses at steps 5, 10: max |difference| %.3g\n", s, m; exit !(NR == 2 && m <= 1e-6) }' ||
            { paste a.txt b.txt; fail "$s val losses differ"; }
        $MPIRUN -np 2 ./t_v$s --init one.bin --eval-only --val-data val.bin --val-batches 3 --log e$s.jsonl >e.out 2>e.err ||
            { cat e.err; fail "$s --eval-only"; }
        grep -q '^eval loss ' e.out || fail "$s --eval-only printed no loss: $(cat e.out)"
        a=$(sed -n 's/.*"eval_loss":\([^,}]*\).*/\1/p' eval1.jsonl) b=$(sed -n 's/.*"eval_loss":\([^,}]*\).*/\1/p' e$s.jsonl)
        awk -v a="$a" -v b="$b" -v s=$s 'BEGIN { d = a - b; d = d < 0 ? -d : d; printf "%s --eval-only: %s vs one process %s\n", s, b, a
            exit !(a != "" && d <= 1e-6) }' || fail "$s --eval-only loss differs"
    done
    ;;
resume)    # --ckpt-dir under a split: the model file is llm.c's (gathered), the state holds every rank's optimizer
           # state; resuming continues exactly as the unbroken run, and the model loads into one process
    compile t_one -D B=8
    for s in dp zero1 zero3 tp=2; do
        compile t_$s -D B=4 --gpus 2 --split $s
        rm -rf ck_$s
        $MPIRUN -np 2 ./t_$s --steps 8 --log whole_$s.jsonl >w.out 2>w.err || { cat w.err; fail "$s unbroken run"; }
        $MPIRUN -np 2 ./t_$s --steps 4 --ckpt-dir ck_$s --log part_$s.jsonl >p.out 2>p.err || { cat p.err; fail "$s first half"; }
        [ -f ck_$s/model_00000004.bin ] && [ -f ck_$s/state_00000004.bin ] || fail "$s: no checkpoint: $(ls ck_$s)"
        $MPIRUN -np 2 ./t_$s --steps 8 --resume ck_$s --ckpt-dir ck_$s --log part_$s.jsonl >r.out 2>r.err ||
            { cat r.err; fail "$s resume"; }
        grep -q "^resume: step 4 from" r.out || { cat r.out; fail "$s: did not resume from step 4"; }
        log_losses whole_$s.jsonl >a.txt
        log_losses part_$s.jsonl >b.txt
        [ "$(wc -l <b.txt)" -eq 8 ] || fail "$s: expected 8 losses after the resume"
        cmp -s a.txt b.txt || { paste a.txt b.txt; fail "$s: the resumed run differs from the unbroken one"; }
        echo "$s: resumed at step 4, 8 losses identical to the unbroken run"
        # the checkpoint's model file is an llm.c file: one process takes the same next step as from --save
        $MPIRUN -np 2 ./t_$s --steps 4 --save s_$s.bin >/dev/null 2>&1 || fail "$s --save"
        cmp -s s_$s.bin ck_$s/model_00000004.bin || fail "$s: the checkpoint's model differs from --save's"
    done
    # a state from other ranks' plan is refused with a located message
    $MPIRUN -np 2 ./t_zero1 --steps 8 --resume ck_dp >x.out 2>x.err && fail "zero1 resumed dp's state"
    grep -q "ck_dp/state_[0-9]*.bin: offset 32: written by a program with another plan" x.err || { cat x.err; fail "no located message"; }
    ;;
nonfinite) # --skip-nonfinite under a split: every rank skips the same steps (the mean loss is every rank's)
    for sch in fused-opt plain; do
        compile t_$sch -D B=4 --gpus 2 --split zero2 --schedule $sch
        $MPIRUN -np 2 ./t_$sch --steps 5 --lr 1e30 --skip-nonfinite --log $sch.jsonl >$sch.out 2>$sch.err ||
            { cat $sch.err; fail "$sch: skipping run"; }
        [ "$(grep -c '"skipped":true' $sch.jsonl)" -eq 4 ] || { cat $sch.jsonl; fail "$sch: expected 4 skipped steps"; }
        $MPIRUN -np 2 ./t_$sch --steps 5 --lr 1e30 >$sch.out 2>$sch.err && fail "$sch: a nan loss did not stop the run"
        grep -q "error: step 2: loss is nan" $sch.err || { cat $sch.err; fail "$sch: no message"; }
    done
    ;;
stop)      # SIGTERM or SIGINT to one rank only: every rank stops after the same step, with a checkpoint, exit 0;
           # the signal is reported by its name whichever rank got it (issue 21)
    compile t_z1 -D B=4 --gpus 2 --split zero1
    for sig in TERM INT; do
        rm -rf ck
        $MPIRUN -np 2 ./t_z1 --steps 1000000 --ckpt-dir ck --print-every 1 >out.txt 2>err.txt &
        mp=$!
        find_rank1 "$mp"
        kill -$sig "$rank1"
        for i in $(seq 1 150); do kill -0 "$mp" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$mp" 2>/dev/null && { kill -9 "$mp"; fail "the job still runs 30 s after SIG$sig to rank 1"; }
        wait "$mp" || { cat err.txt; fail "the job did not exit 0 after SIG$sig to rank 1"; }
        grep -q "^stopped by SIG$sig after step" out.txt || { tail out.txt; fail "rank 0 did not report SIG$sig"; }
        n=$(sed -n "s/^stopped by SIG$sig after step \([0-9]*\).*/\1/p" out.txt)
        [ -f ck/state_$(printf %08d "$n").bin ] || fail "no checkpoint of step $n: $(ls ck)"
        $MPIRUN -np 2 ./t_z1 --steps $((n + 2)) --resume ck >r.out 2>r.err || { cat r.err; fail "resume after the stop"; }
        grep -q "^resume: step $n from" r.out || fail "did not resume from step $n"
        echo "rank 1 got SIG$sig: both ranks stopped after step $n, reported as SIG$sig, checkpoint written, resumed"
    done
    ;;
files)     # issue 21 under mpirun: --resume NEWDIR (rank 0 creates it, the others wait), a program that is
           # not split refuses -np 2, a log that cannot be written stops every rank after a checkpoint
    compile t_z1 -D B=4 --gpus 2 --split zero1
    compile t_one -D B=8
    rm -rf newdir
    $MPIRUN -np 2 ./t_z1 --steps 3 --resume newdir >a.out 2>a.err || { cat a.err; fail "--resume NEWDIR under mpirun"; }
    grep -q '^resume: no checkpoint in newdir, starting at step 1' a.out || { cat a.out; fail "no fresh start"; }
    [ -f newdir/state_00000003.bin ] || fail "no checkpoint in newdir: $(ls newdir)"
    $MPIRUN -np 2 ./t_z1 --steps 5 --resume newdir >b.out 2>b.err || { cat b.err; fail "second --resume newdir"; }
    grep -q '^resume: step 3 from' b.out || fail "the restart did not resume from step 3"
    echo "ok: mpirun -np 2 --resume NEWDIR starts, and the same command resumes"
    $MPIRUN -np 2 ./t_one --steps 1 --ckpt-dir one >c.out 2>c.err && fail "a program that is not split ran under -np 2"
    grep -q '^error: this program is not split over ranks (compiled without --gpus N) but runs as one of 2' c.err ||
        { cat c.err; fail "no clear error for a program that is not split"; }
    echo "ok: $(grep -m1 '^error' c.err)"
    rm -rf ckl
    ln -sf /dev/full full.log    # a link to the device: the log is written through it, never renamed over it
    $MPIRUN -np 2 ./t_z1 --steps 4 --log full.log --ckpt-dir ckl >d.out 2>d.err && fail "a run with an unwritable log exited 0"
    grep -q '^error: full.log: cannot write the log: No space left on device; stopped after step 1, its checkpoint saved in ckl' d.err ||
        { cat d.err; fail "no error naming the log"; }
    [ -f ckl/state_00000001.bin ] || fail "no checkpoint before the stop: $(ls ckl)"
    [ -c /dev/full ] && [ -L full.log ] || fail "/dev/full or the link was replaced"
    echo "ok: $(grep -m1 '^error' d.err)"
    ;;
autorun)   # under --mem each split carries the budget search's micro-batches and per-layer recompute; the
           # searched programs run poisoned with the losses of one process
    compile t_one -D B=8
    ./t_one --steps 20 --log one.jsonl >/dev/null || fail "one-process run"
    log_losses one.jsonl >a.txt
    # auto at 1800KiB: tp=2 (every rank the 8 rows, in 4 micro-batches; tp's tolerance, 1e-5);
    # zero2 at 1800KiB: 4 micro-batches (gradients reduced once, with the last) and a full-recompute layer;
    # zero3 at 2400KiB: one micro-batch, layer 0 selective, layer 1 none (selective, which reruns the
    # widening matmuls, now takes what full took at 2300KiB)
    for c in "auto 1800KiB 1e-5" "zero2 1800KiB 1e-6" "zero3 2400KiB 1e-6"; do
        set -- $c
        compile t_$1 -D B=4 --gpus 2 --split $1 --mem $2 --poison --offload none
        "$gc" "$graph" --config tiny --target cpu -D B=4 --gpus 2 --split $1 --mem $2 --offload none --emit plan-text >p_$1.txt ||
            fail "plan-text $1 $2"
        sed -n '/^strategy/p; /<- chosen/p' p_$1.txt
        $MPIRUN -np 2 ./t_$1 --steps 20 --log s_$1.jsonl >s.out 2>s.err || { cat s.err; fail "$1 $2: split run"; }
        log_losses s_$1.jsonl >b.txt
        same_losses a.txt b.txt $3
    done
    grep -q '^    tp=2 .*K=4 recompute [nsf]*  <- chosen' p_auto.txt || fail "auto 1800KiB: expected tp=2 with K=4"
    grep -q '^strategy: .* 4 micro-batches | .* per layer [ns]*f' p_zero2.txt || fail "zero2 1800KiB: expected K=4 with a full layer"
    grep -q '^strategy: .* 1 micro-batch | .* per layer sn' p_zero3.txt || fail "zero3 2400KiB: expected sn"
    "$gc" "$graph" --config tiny --target cpu -D B=4 --gpus 2 --split zero2 --mem 1800KiB --offload none --emit c | \
        grep -q 'if (ctx->micro == 3) gc_reduce_scatter' || fail "gradients not reduced once, with the last micro-batch"
    ;;
hang)      # a rank that stops answering (SIGSTOP: alive, so mpirun sees nothing): the others' watchdog ends
           # the job within --comm-timeout with an error naming it, never a hang
    compile t_dp2 --gpus 2
    $MPIRUN -np 2 ./t_dp2 --steps 1000000 --comm-timeout 3 >out.txt 2>err.txt &
    mp=$!
    find_rank1 "$mp"
    kill -STOP "$rank1"
    for i in $(seq 1 150); do kill -0 "$mp" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$mp" 2>/dev/null; then
        kill -9 "$rank1" "$mp"
        fail "the job still runs 30 s after rank 1 stopped (hang)"
    fi
    wait "$mp" && fail "the job exited 0 after a rank stopped"
    grep -q "^error: rank 0: .* has not completed after [0-9]* s (--comm-timeout 3): rank 1 (pid $rank1 on .*) is stopped" err.txt ||
        { cat err.txt; fail "rank 0's error does not name rank 1"; }
    for i in $(seq 1 50); do kill -0 "$rank1" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$rank1" 2>/dev/null && { kill -9 "$rank1"; fail "the stopped rank 1 was left behind (10 s)"; }
    grep -m1 '^error: rank 0' err.txt
    ;;
nompi)     # single-rank programs do not link MPI
    compile t_one
    compile t_dp2 --gpus 2
    ldd t_one | grep -q libmpi && fail "a single-rank program links MPI"
    ldd t_dp2 | grep -q libmpi || fail "a split program does not link MPI"
    ;;
cuda)      # the split CUDA program (NCCL bootstrapped through MPI) compiles and links; exit 77 without nvcc
    command -v nvcc >/dev/null 2>&1 || { echo "nvcc not found: skipped"; exit 77; }
    "$gc" "$graph" --config tiny --target cuda --gpu-arch sm_90 --gpus 2 --split zero2 -o t_cuda ||
        fail "gcompile --target cuda --gpus 2"
    ldd t_cuda | grep -q libnccl || fail "the split CUDA program does not link NCCL"
    ldd t_cuda | grep -q libmpi || fail "the split CUDA program does not link MPI"
    "$gc" "$graph" --config tiny --target cuda --gpu-arch sm_90 --gpus 2 --split tp=2 -o t_cuda_tp ||
        fail "gcompile --target cuda --gpus 2 --split tp=2"
    ldd t_cuda_tp | grep -q libnccl || fail "the tensor-parallel CUDA program does not link NCCL"
    # (the builds above compile all of comm_nccl.cu against the real nccl.h and link it whole: its
    # ncclBfloat16 collectives too; bf16 programs' calls of them compile in tests/split/bf16_emu.sh)
    ;;
*) fail "unknown check $check" ;;
esac
echo "ok: $check"
