#!/bin/sh
# Replays the seeds and every kept regression input (regress/TARGET) through
# a fuzz target built without libFuzzer. usage: replay.sh BIN TARGET GEN_SEEDS REGRESS_DIR SRCDIR
set -eu
bin=$1 target=$2 gen=$3 regress=$4 src=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/seeds.sh"
seeds "$target" "$gen" "$src" "$tmp/seeds"
mkdir -p "$regress"
cd "$src"
"$bin" "$tmp/seeds" "$regress"
