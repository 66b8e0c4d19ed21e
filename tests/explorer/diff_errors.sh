#!/bin/sh
# Bad input to --emit plan-diff: one clear line on stderr, exit 1, no file.
#   diff_errors.sh GCOMPILE GRAPH
set -u
gc=$1 graph=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
"$gc" "$graph" --config tiny --target cpu --emit plan -o "$tmp/a.json" || exit 1
"$gc" "$graph" --config tiny --target cpu --schedule plain --emit plan -o "$tmp/plain.json" || exit 1
"$gc" "$graph" --config gpt2_124M --target cpu --emit plan -o "$tmp/big.json" || exit 1
head -c 5000 "$tmp/a.json" >"$tmp/cut.json"
printf '{"version": 1, "graph": "x.graph"}' >"$tmp/bare.json"
python3 -c "
import json, sys
p = json.load(open(sys.argv[1]))
q = dict(p, graph='other/' + 'mlp.graph')
json.dump(q, open(sys.argv[2], 'w'))
del p['tensors'][3]['name']
json.dump(p, open(sys.argv[3], 'w'))
r = json.load(open(sys.argv[1]))
r['tensors'][0]['inplace_of'] = 99999
json.dump(r, open(sys.argv[4], 'w'))
" "$tmp/a.json" "$tmp/other.json" "$tmp/noname.json" "$tmp/badref.json"
check() {   # check NAME PATTERN -- args...
    name=$1 pat=$2
    shift 3
    rm -f "$tmp/d.html"
    "$gc" --emit plan-diff "$@" -o "$tmp/d.html" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne 1 ]; then echo "FAIL $name: exit $rc, expected 1"; cat "$tmp/err"; fail=1; return; fi
    if [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q -- "$pat" "$tmp/err"; then
        echo "FAIL $name: expected one line with '$pat', got:"; cat "$tmp/err"; fail=1
    fi
    if [ -e "$tmp/d.html" ]; then echo "FAIL $name: wrote the page anyway"; fail=1; fi
    echo "ok $name: $(cat "$tmp/err")"
}
check malformed "cut.json:[0-9]*:[0-9]*: malformed JSON" -- "$tmp/a.json" "$tmp/cut.json"
check missing "plan-diff: .*nope.json" -- "$tmp/nope.json" "$tmp/a.json"
check not_a_plan "bare.json: not a gcompile plan: plan.tensors is not an array" -- "$tmp/bare.json" "$tmp/a.json"
check no_name "noname.json: not a gcompile plan: tensors\[3\].name is not a string" -- "$tmp/a.json" "$tmp/noname.json"
check bad_ref "badref.json: not a gcompile plan: tensors\[0\].inplace_of = 99999 is out of range" -- "$tmp/badref.json" "$tmp/a.json"
check other_graph "are plans of different graphs (graph 'gpt2.graph' vs graph 'mlp.graph')" -- "$tmp/a.json" "$tmp/other.json"
check other_config "are plans of different graphs (config 'tiny' vs config 'gpt2_124M')" -- "$tmp/a.json" "$tmp/big.json"
check one_file "expects two plan files" -- "$tmp/a.json"
# a graph file is not a plan
check graph_file "malformed JSON" -- "$graph" "$tmp/a.json"
# two plans of one graph (plain and fused-opt schedules) make a page
if ! "$gc" --emit plan-diff "$tmp/a.json" "$tmp/plain.json" -o "$tmp/ok.html" 2>"$tmp/err" || ! grep -q 'id="gc-data"' "$tmp/ok.html"; then
    echo "FAIL same graph: no page"; cat "$tmp/err"; fail=1
fi
exit $fail
