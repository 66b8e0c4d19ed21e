#!/bin/sh
# Hugging Face safetensors checkpoints (--init / --save FILE.safetensors) on the
# CPU target, with models/gpt2.graph's `from` names (tiny dims, Vp > V so the
# stored wte is a corner of the parameter). Files come from st_tool.py.
# usage: st.sh GCOMPILE GRAPH WORKDIR CHECK
#   CHECK: roundtrip | hf_loss | dtypes | prefix | corrupt | split | llama
set -u
gc=$1 graph=$2 dir=$3 check=$4
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
tool="$py $here/st_tool.py"
mkdir -p "$dir"
cd "$dir" || exit 1
export OMP_NUM_THREADS=2
fail() { echo "FAIL: $*"; exit 1; }
DIMS="-D Vp=320"               # V = 256 < Vp: HF's wte [V, C] fills the first V rows
GEN="--L 2 --C 64 --V 256 --Vp 320 --maxT 64 --NH 4"
compile() {  # compile OUT [gcompile args...]
    out=$1; shift
    "$gc" "$graph" --config tiny $DIMS --target cpu -o "$out" "$@" || fail "gcompile $*"
}
loss1() {  # loss1 PROGRAM INIT [args]: the step-1 loss as the log writes it
    prog=$1 init=$2; shift 2
    "./$prog" --threads 2 --steps 1 --init "$init" --log l1.jsonl "$@" >run.out 2>run.err ||
        { cat run.err; fail "$prog --init $init"; }
    sed -n 's/^{"step":1,"loss":\([^,]*\),.*/\1/p' l1.jsonl
}
case "$check" in
roundtrip)  # init from a file, save, compare tensor by tensor (bit-exact); a re-save is byte-identical;
            # --save-dtype bf16 writes the nearest-even BF16 of every tensor
    compile t
    $tool gen in.safetensors $GEN --buffers 0 || fail "st_tool gen"
    ./t --steps 0 --init in.safetensors --save out.safetensors >run.out || fail "init + save"
    grep -q '^init: in.safetensors (safetensors, 28 tensors read)$' run.out || { cat run.out; fail "init line"; }
    $tool cmp in.safetensors out.safetensors || fail "round trip changed tensors"
    ./t --steps 0 --init out.safetensors --save again.safetensors >/dev/null || fail "second round trip"
    cmp out.safetensors again.safetensors || fail "a re-save is not byte-identical"
    ./t --steps 2 --init in.safetensors --save trained.safetensors >/dev/null || fail "train + save"
    $tool cmp in.safetensors trained.safetensors >/dev/null && fail "2 steps left the tensors as they were"
    ./t --steps 0 --init in.safetensors --save b.safetensors --save-dtype bf16 >run.out || fail "bf16 save"
    grep -q '^saved b.safetensors (safetensors, BF16)$' run.out || fail "bf16 save line"
    $tool bf16of out.safetensors b.safetensors || fail "--save-dtype bf16"
    ./t --steps 0 --init b.safetensors --save b2.safetensors --save-dtype bf16 >/dev/null || fail "bf16 again"
    cmp b.safetensors b2.safetensors || fail "a BF16 re-save is not byte-identical"
    ./t --steps 0 --save x.bin --save-dtype bf16 >run.out 2>run.err && fail "--save-dtype bf16 with an llm.c --save"
    grep -q 'needs --save FILE.safetensors' run.err || { cat run.err; fail "--save-dtype message"; }
    # the plan JSON says where each parameter lives (also for zero3's shard roots)
    for split in "" "--gpus 2 --split zero3"; do
        "$gc" "$graph" --config tiny $DIMS $split --emit plan -o plan.json || fail "emit plan $split"
        $py - plan.json <<'PYEOF' || fail "plan JSON checkpoint entries ($split)"
import json, sys
t = {x["name"]: x for x in json.load(open(sys.argv[1]))["tensors"] if x["kind"] == "param" and "checkpoint" in x}
assert len(t) == 16, sorted(t)
w, q = t["wte"]["checkpoint"], t["qkvw"]["checkpoint"]
assert w == {"name": "transformer.wte.weight", "given": True, "tensors": 1, "layered": False,
             "transposed": False, "shape": [256, 64]}, w
assert q == {"name": "transformer.h.{l}.attn.c_attn.weight", "given": True, "tensors": 2, "layered": True,
             "transposed": True, "shape": [64, 192]}, q
PYEOF
    done
    # a graph without `from` names: its tensors under the parameters' own names, whole
    "$gc" "$here/plain.graph" --target cpu -o tp >/dev/null || fail "gcompile plain.graph"
    ./tp --steps 1 --save p.safetensors >/dev/null || fail "plain save"
    ./tp --steps 0 --init p.safetensors --save p2.safetensors >/dev/null || fail "plain init"
    cmp p.safetensors p2.safetensors || fail "plain round trip"
    grep -q '"w1":{"dtype":"F32","shape":\[2,4,4\]' p.safetensors || fail "plain: w1 whole under its own name"
    # alternative names: a file without lm_head.weight fills the untied head from the embedding
    "$gc" "$here/alt.graph" --target cpu -o ta >/dev/null || fail "gcompile alt.graph"
    ./ta --steps 1 --save full.safetensors >/dev/null || fail "alt save"
    $tool eq full.safetensors lm_head.weight model.embed_tokens.weight && fail "head and embedding alike already"
    $tool corrupt full.safetensors missing tied.safetensors lm_head.weight || fail "drop lm_head.weight"
    ./ta --steps 0 --init tied.safetensors --save untied.safetensors >/dev/null || fail "alt init"
    $tool eq untied.safetensors lm_head.weight model.embed_tokens.weight || fail "the head is not the embedding"
    $tool corrupt tied.safetensors missing none.safetensors model.embed_tokens.weight || fail "drop both"
    ./ta --steps 0 --init none.safetensors >out.txt 2>err.txt && fail "loaded without the embedding"
    grep -q "^error: none.safetensors: no tensor 'model.embed_tokens.weight' (parameter 'wte', .*alt.graph:11:7); more are missing" err.txt ||
        { cat err.txt; fail "message of a missing tensor"; }

    ;;
hf_loss)    # the step-1 loss from a safetensors file equals the llm.c file of the same values (exactly) and
            # an independent float64 PyTorch GPT-2 with Hugging Face's Conv1D layout (1e-5 relative: the
            # program computes in fp32, whose rounding moves a loss of ~5.5 by ~1e-6)
    compile t
    $tool gen hf.safetensors $GEN --llmc hf.bin || fail "st_tool gen"
    $tool shard shard.bin 256 2000 || fail "st_tool shard"
    a=$(loss1 t hf.safetensors --data shard.bin)
    grep -q "2 not parameters of this graph (e.g. 'transformer.h.0.attn.bias')" run.out ||
        { cat run.out; fail "the unused buffers are not reported"; }
    b=$(loss1 t hf.bin --data shard.bin)
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "safetensors loss $a, llm.c loss $b"
    ref=$($tool hfloss hf.safetensors shard.bin 4 64 4) || fail "hfloss"
    echo "step-1 loss: program $a, llm.c file $b, PyTorch (HF layout, float64) $ref"
    awk -v a="$a" -v r="$ref" 'BEGIN { d = (a - r) / r; d = d < 0 ? -d : d; exit !(d <= 1e-5) }' ||
        fail "loss $a vs the reference $ref"
    ;;
dtypes)     # BF16 and F16 files widen to fp32 exactly: the same loss as the llm.c file of the widened values
    compile t
    for dt in BF16 F16; do
        $tool gen $dt.safetensors $GEN --dtype $dt --llmc $dt.bin || fail "st_tool gen $dt"
        a=$(loss1 t $dt.safetensors)
        b=$(loss1 t $dt.bin)
        echo "$dt: step-1 loss $a (safetensors), $b (llm.c fp32 of the same values)"
        [ -n "$a" ] && [ "$a" = "$b" ] || fail "$dt: $a vs $b"
        ./t --steps 0 --init $dt.safetensors --save $dt.out.bin >/dev/null || fail "$dt save"
        cmp $dt.bin $dt.out.bin || fail "$dt: the widened parameters are not the llm.c file's"
    done
    ;;
prefix)     # Hugging Face's own gpt2 file names its tensors without "transformer." (a checkpoint of the base
            # model): the loader finds them by dropping the first component of the graph's names
    compile t
    $tool gen with.safetensors $GEN --seed 3 || fail "gen"
    $tool gen without.safetensors $GEN --seed 3 --prefix none || fail "gen"
    grep -q '"h.0.attn.c_attn.weight"' without.safetensors || fail "the file has no bare names"
    a=$(loss1 t with.safetensors)
    b=$(loss1 t without.safetensors)
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "with the prefix $a, without $b"
    ;;
corrupt)    # every broken file: exit 1, one error line that names the file (and offset, tensor)
    compile t
    $tool gen good.safetensors $GEN --buffers 0 || fail "gen"
    n=0
    expect() {  # expect KIND ARG PATTERN
        $tool corrupt good.safetensors "$1" bad.safetensors $2 || fail "corrupt $1"
        ./t --steps 1 --init bad.safetensors >out.txt 2>err.txt
        rc=$?
        [ "$rc" -eq 1 ] || { cat err.txt; fail "$1: exit $rc"; }
        [ "$(wc -l <err.txt)" -eq 1 ] || { cat err.txt; fail "$1: not one line on stderr"; }
        grep -q -- "^error: bad.safetensors: $3" err.txt || { cat err.txt; fail "$1: error lacks '$3'"; }
        grep -q '^step' out.txt && fail "$1: trained anyway"
        n=$((n + 1))
    }
    expect truncate "" "offset [0-9]*: tensor 'transformer.wte.weight': data_offsets \[.*\] run past the end of the file"
    expect huge_header "" "offset 0: header length 1099511627776 is above the limit"
    expect header_past_end "" "offset 0: header length [0-9]* runs past the end of the file"
    expect short "" "offset 0: the file (5 bytes) ends inside the 8-byte header length"
    expect bad_json "" "offset [0-9]*: header JSON: "
    expect not_object "" "offset 8: the header is not a JSON object"
    expect duplicate "" "offset [0-9]*: header JSON: duplicate object key 'transformer.h.0.attn.c_attn.bias'"
    expect overlap "" "offset [0-9]*: tensors '.*' and '.*' overlap"
    expect gap "" "offset [0-9]*: data bytes \[[0-9]*, [0-9]*) belong to no tensor"
    expect trailing "" "offset [0-9]*: 8 bytes after the last tensor belong to no tensor"
    expect missing transformer.h.1.mlp.c_fc.weight \
        "no tensor 'transformer.h.1.mlp.c_fc.weight' (parameter 'fcw', layer 1, .*gpt2.graph:[0-9]*:7)"
    expect shape transformer.h.0.attn.c_attn.weight \
        "offset [0-9]*: tensor 'transformer.h.0.attn.c_attn.weight' has shape \[192, 64\]; parameter 'qkvw', layer 0 wants \[64, 192\], the transpose of its matrix"
    expect shape transformer.wte.weight \
        "offset [0-9]*: tensor 'transformer.wte.weight' has shape \[64, 256\]; parameter 'wte' wants \[256, 64\]"
    expect dtype transformer.ln_f.weight "offset [0-9]*: tensor 'transformer.ln_f.weight' is I64; parameters load from F32, BF16 or F16"
    expect unknown_dtype transformer.wpe.weight "offset 8: tensor 'transformer.wpe.weight': unknown dtype \"Q7\""
    expect size_mismatch transformer.wpe.weight "offset [0-9]*: tensor 'transformer.wpe.weight': data_offsets \[.*\] hold 16384 bytes"
    expect offsets_reversed transformer.wpe.weight "offset 8: tensor 'transformer.wpe.weight': data_offsets \[.*\] are not a range"
    expect metadata_nonstring "" "offset 8: \"__metadata__\" entry 'format' is not a string"
    # not a file at all, and a FIFO (refused, not waited on)
    ./t --steps 1 --init nothere.safetensors >out.txt 2>err.txt && fail "a missing file loaded"
    grep -q "^error: nothere.safetensors: cannot open" err.txt || { cat err.txt; fail "missing file message"; }
    mkfifo fifo.safetensors 2>/dev/null && {
        timeout 20 ./t --steps 1 --init fifo.safetensors >out.txt 2>err.txt
        [ $? -eq 1 ] || fail "a FIFO --init did not fail at once"
        grep -q "^error: fifo.safetensors: not a regular file" err.txt || { cat err.txt; fail "FIFO message"; }
    }
    # a save that cannot be written leaves nothing behind
    ./t --steps 0 --save nodir/x.safetensors >out.txt 2>err.txt && fail "saved into a missing directory"
    ls nodir 2>/dev/null && fail "nodir appeared"
    echo "$n corrupt files refused"
    ;;
split)      # two ranks: each reads the whole file and keeps its part (dp: all of it; zero3: its shards;
            # tp=2: its columns or rows); rank 0 writes the gathered parameters. The same step-1 loss as one
            # process at the same global batch, and a save after 0 steps gives back the file's tensors
    command -v mpirun >/dev/null && command -v mpicc >/dev/null || { echo "no MPI: skipped"; exit 77; }
    MPIRUN="mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -x ASAN_OPTIONS=detect_leaks=0"
    export OMP_NUM_THREADS=1
    $tool gen hf.safetensors $GEN --buffers 0 || fail "gen"
    compile t1 -D B=8
    a=$(loss1 t1 hf.safetensors)
    for s in dp zero3 tp=2; do
        b=4; [ "$s" = tp=2 ] && b=8   # tp: both ranks read the same rows
        compile t2 -D B=$b --gpus 2 --split $s
        $MPIRUN -np 2 ./t2 --steps 1 --init hf.safetensors --log l2.jsonl >split.out 2>split.err ||
            { cat split.err; fail "mpirun $s"; }
        b=$(sed -n 's/^{"step":1,"loss":\([^,]*\),.*/\1/p' l2.jsonl)
        echo "$s: step-1 loss $b (one process $a)"
        awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; d = d < 0 ? -d : d; exit !(b != "" && d <= 1e-6) }' ||
            fail "$s: loss $b vs $a"
        $MPIRUN -np 2 ./t2 --steps 0 --init hf.safetensors --save two.safetensors >split.out 2>split.err ||
            { cat split.err; fail "mpirun $s --save"; }
        $tool cmp hf.safetensors two.safetensors || fail "$s: the saved tensors are not the file's"
    done
    ;;
llama)      # models/llama.graph with Hugging Face's Llama names: a file laid out as LlamaForCausalLM's
            # gives the loss of an independent float64 PyTorch Llama written the way transformers computes it
            # (1e-5 relative, as hf_loss), and comes back bit for bit; NH != NKV (grouped-query attention)
    lg=$(dirname "$graph")/llama.graph
    [ -f "$lg" ] && grep -q 'from "model.layers.{l}.self_attn.q_proj.weight"' "$lg" || { echo "no llama.graph with from names: skipped"; exit 77; }
    "$gc" "$lg" --config tiny --target cpu -o tl || fail "gcompile llama.graph"
    $tool gen-llama llama.safetensors --L 2 --C 64 --V 256 --NH 4 --NKV 2 --F 160 || fail "gen-llama"
    $tool shard shard.bin 256 2000 || fail "shard"
    a=$(loss1 tl llama.safetensors --data shard.bin)
    grep -q '^init: llama.safetensors (safetensors, 21 tensors read)$' run.out || { cat run.out; fail "init line"; }
    ref=$($tool llamaloss llama.safetensors shard.bin 4 32 4 2) || fail "llamaloss"
    echo "llama step-1 loss: program $a, PyTorch (HF Llama, float64) $ref"
    awk -v a="$a" -v r="$ref" 'BEGIN { d = (a - r) / r; d = d < 0 ? -d : d; exit !(a != "" && d <= 1e-5) }' ||
        fail "loss $a vs the reference $ref"
    ./tl --steps 0 --init llama.safetensors --save out.safetensors >/dev/null || fail "llama save"
    $tool cmp llama.safetensors out.safetensors || fail "llama round trip"
    # a tied file (no lm_head.weight, as Llama 3.2 1B's): the untied head starts as the embedding
    $tool gen-llama tied.safetensors --L 2 --C 64 --V 256 --NH 4 --NKV 2 --F 160 --seed 3 --tied 1 || fail "gen"
    a=$(loss1 tl tied.safetensors --data shard.bin)
    ref=$($tool llamaloss tied.safetensors shard.bin 4 32 4 2) || fail "llamaloss tied"
    echo "tied llama step-1 loss: program $a, PyTorch $ref"
    awk -v a="$a" -v r="$ref" 'BEGIN { d = (a - r) / r; d = d < 0 ? -d : d; exit !(a != "" && d <= 1e-5) }' ||
        fail "tied: loss $a vs the reference $ref"
    # BF16 weights (a real Llama file's dtype) widen exactly: the loss of the F32 file of the widened values
    $tool gen-llama b.safetensors --L 2 --C 64 --V 256 --NH 4 --NKV 2 --F 160 --seed 2 --dtype BF16 || fail "gen"
    ./tl --steps 0 --init b.safetensors --save bw.safetensors >/dev/null || fail "bf16 widen"
    [ "$(loss1 tl b.safetensors --data shard.bin)" = "$(loss1 tl bw.safetensors --data shard.bin)" ] ||
        fail "a BF16 file and its widened F32 copy give different losses"
    ;;
*)
    fail "unknown check $check"
    ;;
esac
echo "PASS: $check"
