#!/bin/sh
# --emit plan-diff of two real plans of the tiny model (fused and --no-fuse)
# in headless Chromium, checked against the two JSON plans (check.py).
#   diff.sh GCOMPILE GRAPH WORKDIR
set -eu
gc=$1 graph=$2 work=$3
here=$(dirname "$0")
rm -rf "$work"
mkdir -p "$work"
"$gc" "$graph" --config tiny --target cpu --emit plan -o "$work/a.json"
"$gc" "$graph" --config tiny --target cpu --no-fuse --emit plan -o "$work/b.json"
"$gc" --emit plan-diff "$work/a.json" "$work/b.json" -o "$work/diff.html"
sh "$here/chrome.sh" "$work" "$work/diff.html" "$work/dom.html" "$work/shot.png"
python3 "$here/check.py" diff "$work/a.json" "$work/b.json" "$work/dom.html" "$work/shot.png"
