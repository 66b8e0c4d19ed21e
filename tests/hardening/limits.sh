#!/bin/sh
# Resource limits: absurd sizes get a located one-line error at once (exit 1,
# within seconds, in bounded memory), never an allocation failure, a hang, a
# crash or an overflow.
set -u
gc=$1 graph=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
rep() { awk -v s="$1" -v n="$2" 'BEGIN { for (i = 0; i < n; i++) printf "%s", s }'; }
# expect NAME PATTERN FILE [options...]: exit 1, "FILE:line:col: error: ...PATTERN"
expect() {
    name=$1 pat=$2 file=$3
    shift 3
    # (no ulimit -v: sanitizer builds reserve terabytes of address space)
    if [ -x /usr/bin/time ]; then
        /usr/bin/time -o "$tmp/rss" -f %M timeout 300 "$gc" "$file" "$@" --emit summary >"$tmp/out" 2>&1
        rc=$?
        rss=$(tail -1 "$tmp/rss")
        case $rss in *[!0-9]*|'') rss=0 ;; esac
        if [ "$rss" -gt 2000000 ]; then echo "FAIL $name: peak RSS ${rss} KiB"; fail=1; return; fi
    else
        timeout 300 "$gc" "$file" "$@" --emit summary >"$tmp/out" 2>&1
        rc=$?
    fi
    if [ $rc -ne 1 ]; then echo "FAIL $name: exit $rc"; head -c 600 "$tmp/out"; echo; fail=1; return; fi
    if ! head -1 "$tmp/out" | grep -q "^[^ ]*:[0-9]*:[0-9]*: error: .*$pat"; then
        echo "FAIL $name: first line lacks a located '$pat'"; head -c 600 "$tmp/out"; echo; fail=1; return
    fi
    if [ "$(wc -l <"$tmp/out")" -gt 160 ] || [ "$(wc -c <"$tmp/out")" -gt 40000 ]; then
        echo "FAIL $name: $(wc -l <"$tmp/out") lines of errors"; fail=1; return
    fi
    echo "ok $name: $(head -1 "$tmp/out" | cut -c1-150)"
}
# 10^12 elements: declared, and made by an op from two small operands
printf 'dim N = 1000000\ninput x: f32[N, N]\n' >"$tmp/big.graph"
expect elements_1e12 "tensor too large" "$tmp/big.graph"
printf 'dim N = 1000000\ninput a: f32[N, 2]\ninput b: f32[2, N]\ny = matmul(a, b)\n' >"$tmp/mm.graph"
expect matmul_1e12 "tensor too large" "$tmp/mm.graph"
# 10^6 layers (tiny widths, so no single tensor is too large)
expect layers_1e6 "the loop runs 1000000 times" "$graph" --config tiny -D L=1000000
# a dim past 2^40, and integer overflow in a dim expression
printf 'dim A = 2000000000000\n' >"$tmp/dim.graph"
expect dim_2e12 "must be a positive integer" "$tmp/dim.graph"
printf 'dim A = 3037000500 * 3037000500\n' >"$tmp/ovf.graph"
expect mul_overflow "integer overflow" "$tmp/ovf.graph"
printf 'dim A = 99999999999999999999999\n' >"$tmp/lit.graph"
expect literal_overflow "" "$tmp/lit.graph"
# deep nesting: open parentheses, and a long left-nested chain
{ printf 'dim B = '; rep '(' 100000; printf 1; rep ')' 100000; echo; } >"$tmp/paren.graph"
expect parens_1e5 "nested too deeply" "$tmp/paren.graph"
{ printf 'dim B = 1'; rep '+1' 300000; echo; } >"$tmp/chain.graph"
expect chain_3e5 "nested more than 200 levels" "$tmp/chain.graph"
{ printf 'dim B = 1\ninput x: f32[B]\ny = '; rep 'scale(' 1000; printf x; rep ', 2.0)' 1000; echo; } >"$tmp/calls.graph"
expect calls_1e3 "nested more than 200 levels" "$tmp/calls.graph"
# a 1 MB identifier
{ printf 'dim '; rep a 1048576; echo ' = 1'; } >"$tmp/ident.graph"
expect ident_1MB "name is too long" "$tmp/ident.graph"
# 200000 statements, and a call with 200000 arguments (errors capped)
awk 'BEGIN { print "dim B = 1"; for (i = 0; i < 200000; i++) printf "x%d = 1\n", i }' >"$tmp/stmts.graph"
expect stmts_2e5 "executes more than 20000 statements" "$tmp/stmts.graph"
{ printf 'dim B = 1\ninput x: f32[B]\ny = scale(x'; rep ', 1' 200000; echo ')'; } >"$tmp/args.graph"
expect args_2e5 "too many arguments" "$tmp/args.graph"
# -D past the dim limit (a command-line error: not located)
"$gc" "$graph" -D V=1000000000000000 --emit summary >"$tmp/out" 2>&1
if [ $? -ne 1 ] || ! grep -q '^gcompile: error: -D V=1000000000000000: the value must be a positive integer' "$tmp/out"; then
    echo "FAIL define_huge"; cat "$tmp/out"; fail=1
else
    echo "ok define_huge"
fi
exit $fail
