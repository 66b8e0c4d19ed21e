#!/bin/sh
# The driver's options, files and exit statuses.
set -u
gc=$1 graph=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {   # check NAME EXPECTED_STATUS PATTERN_IN_OUTPUT -- command...
    name=$1 want=$2 pat=$3
    shift 4
    "$@" >"$tmp/out" 2>&1
    rc=$?
    if [ "$rc" -ne "$want" ]; then echo "FAIL $name: exit $rc, expected $want"; cat "$tmp/out"; fail=1; return; fi
    if [ -n "$pat" ] && ! grep -q -- "$pat" "$tmp/out"; then
        echo "FAIL $name: output lacks '$pat'"; cat "$tmp/out"; fail=1
    fi
}
check help 0 "usage: gcompile FILE.graph" -- "$gc" --help
check version 0 "^gcompile [0-9]" -- "$gc" --version
check no_input 1 "no input file" -- "$gc"
check missing_file 1 "cannot open 'nope.graph'" -- "$gc" nope.graph
check unknown_option 1 "unknown option '--frob'" -- "$gc" "$graph" --frob
check missing_value 1 "needs a value" -- "$gc" "$graph" --config
check bad_emit 1 "unknown kind 'pdf'" -- "$gc" "$graph" --emit pdf
check bad_target 1 "must be cpu or cuda" -- "$gc" "$graph" --target tpu
check bad_mem 1 "bad size '12XB'" -- "$gc" "$graph" --mem 12XB
check bad_define_syntax 1 "expects NAME=VALUE" -- "$gc" "$graph" -D B
check zero_define 1 "must be a positive integer" -- "$gc" "$graph" -D B=0
check define 0 "dims: B=8 T=128 " -- "$gc" "$graph" -D B=8 -D T=128 --emit summary
check config_define 0 "dims: B=2 T=64 maxT=64 V=256 Vp=256 L=2 NH=4 C=64" -- "$gc" "$graph" --config tiny -D B=2 --emit summary
check too_long_T 1 "requirement does not hold with T = 2048, maxT = 1024" -- "$gc" "$graph" -D T=2048 --emit summary
check budget 1 "the plan needs" -- "$gc" "$graph" --mem 1GiB --recompute none --emit summary
check budget_search 1 "nothing fits --mem 1.00 GiB: the smallest plan found needs" -- "$gc" "$graph" --mem 1GiB --emit summary
check bad_device 1 "unknown profile 'tpu'" -- "$gc" "$graph" --device tpu
check bad_recompute 1 "must be none, selective, full, auto or one letter per layer" -- "$gc" "$graph" --recompute some
check recompute_list_len 1 "names 3 layers; the graph has 12" -- "$gc" "$graph" --recompute ffs --emit summary
# issue 20: a parameter sliced into rows outside the loop is no layer stack (split_updates.c numbered
# its gradient slices' updates as layers: a graph of 1 layer counted 2, and this list was refused)
check recompute_list_sliced 0 "" -- "$gc" "$(dirname "$graph")/../tests/randgraph/regress/rc_list_slice_layers.graph" \
    --recompute s --emit summary
check bad_search 1 "must be fast or exhaustive" -- "$gc" "$graph" --search slow
check bad_micro 1 "does not divide B = 4" -- "$gc" "$graph" --micro-batches 3 --emit summary
check budget_ok 0 "parameters: 124475904" -- "$gc" "$graph" --mem 80GB --emit summary
check two_inputs 1 "one input file expected" -- "$gc" "$graph" "$graph"
check gpus 1 "error: --split tp=2 needs --gpus a multiple of 2" -- "$gc" "$graph" --gpus 3 --split tp=2
# --emit writes OUT atomically: the old file survives a failed compile
echo keep >"$tmp/ir.txt"
check emit_fail_keeps 1 "" -- "$gc" "$graph" -D C=10 --emit ir -o "$tmp/ir.txt"
grep -qx keep "$tmp/ir.txt" || { echo "FAIL: a failed compile changed its output file"; fail=1; }
check emit_file 0 "" -- "$gc" "$graph" --config tiny --emit ir -o "$tmp/ir.txt"
grep -q "^# gcompile IR of" "$tmp/ir.txt" || { echo "FAIL: --emit ir -o wrote no IR"; fail=1; }
ls "$tmp" | grep -q tmp && { echo "FAIL: temporary file left behind"; fail=1; }
check emit_stdout 0 "forward_gflops_per_step: " -- "$gc" "$graph" --emit summary -o -
exit $fail
