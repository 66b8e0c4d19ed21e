#!/bin/sh
# A libFuzzer run of SECONDS from the seeds and the kept regression inputs;
# fails on any crash, leak, timeout or sanitizer report (the input that did
# it is copied into regress/TARGET, to be kept as a regression input). An
# input is slow at the timeout, 60 s, not at libFuzzer's default 10 s: the
# 1024-layer graph of regress/compile takes about 2 s of CPU here, more than
# 10 s under ASan on a loaded 2-core host, and a slow-unit is not a crash.
# usage: smoke.sh BIN TARGET SECONDS GEN_SEEDS REGRESS_DIR SRCDIR [libFuzzer flags...]
set -u
bin=$1 target=$2 secs=$3 gen=$4 regress=$5 src=$6
shift 6
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/seeds.sh"
seeds "$target" "$gen" "$src" "$tmp/seeds"
mkdir -p "$tmp/corpus" "$tmp/art" "$regress"
cd "$src"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} "$bin" "$tmp/corpus" "$tmp/seeds" "$regress" \
    -max_total_time="$secs" -timeout=60 -report_slow_units=60 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$tmp/art/" "$@" >"$tmp/log" 2>&1
rc=$?
grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$tmp/log" | tail -3
if [ $rc -ne 0 ] || ls "$tmp/art" | grep -q .; then
    echo "FAIL: fuzz_$target found a crash (exit $rc); kept in $regress:"
    for f in "$tmp"/art/*; do [ -f "$f" ] && cp "$f" "$regress/" && echo "  $regress/$(basename "$f")"; done
    grep -A30 -E 'ERROR|WARNING|runtime error|deadly|Test unit written' "$tmp/log" | head -60
    exit 1
fi
echo "ok: fuzz_$target ran ${secs}s without a crash"
