#!/bin/sh
# One chunk of a long fuzzing campaign (nice -n 10, one target at a time):
# continues the corpus in CORPUS_DIR, appends "target chunk execs crashes" to
# LOG. usage: campaign.sh BUILD_FUZZ_DIR TARGET SECONDS CORPUS_DIR LOG [libFuzzer flags, e.g. -runs=N]
set -u
b=$1 t=$2 secs=$3 corpus=$4 log=$5
shift 5
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$corpus" "$corpus.art"
. "$src/tests/fuzz/seeds.sh"
[ -d "$corpus.seeds" ] || seeds "$t" "$b/tests/fuzz/gen_seeds" "$src" "$corpus.seeds"
cd "$src"
start=$(date -u +%FT%TZ)
ASAN_OPTIONS=detect_leaks=1 nice -n 10 "$b/tests/fuzz/fuzz_$t" "$corpus" "$corpus.seeds" "tests/fuzz/regress/$t" \
    -max_total_time="$secs" -timeout=60 -report_slow_units=60 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$corpus.art/" "$@" >"$corpus.last.log" 2>&1
rc=$?
end=$(date -u +%FT%TZ)
execs=$(grep 'stat::number_of_executed_units' "$corpus.last.log" | awk '{print $2}')
rate=$(grep 'stat::average_exec_per_sec' "$corpus.last.log" | awk '{print $2}')
# the last status line: coverage (cov: edges, ft: features) and the corpus in memory
last=$(grep -E '^#[0-9]+' "$corpus.last.log" | tail -1 | sed -n 's/.*\(cov: [0-9]* ft: [0-9]* corp: [^ ]*\).*/\1/p')
crashes=$(ls "$corpus.art" | wc -l)
echo "$t $start..$end max=${secs}s execs=${execs:-?} exec/s=${rate:-?} $last files=$(ls "$corpus" | wc -l) exit=$rc crashes=$crashes" >>"$log"
tail -1 "$log"
