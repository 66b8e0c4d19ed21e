#!/bin/sh
# The plan explorer in headless Chromium: compile a plan and its page, let
# Chromium run the page's scripts (--dump-dom) and take a screenshot, and
# check both against the plan JSON (check.py).
#   explorer.sh GCOMPILE GRAPH CONFIG WORKDIR
set -eu
gc=$1 graph=$2 config=$3 work=$4
here=$(dirname "$0")
rm -rf "$work"
mkdir -p "$work"
"$gc" "$graph" --config "$config" --target cpu --emit plan -o "$work/plan.json"
"$gc" "$graph" --config "$config" --target cpu --emit plan-html -o "$work/plan.html"
# the page is self-contained: nothing in it may point outside
if grep -Eq '(src|href)="(https?:)?//|@import|url\(' "$work/plan.html"; then
    echo "FAIL: the page refers to something outside itself"; exit 1
fi
sh "$here/chrome.sh" "$work" "$work/plan.html" "$work/dom.html" "$work/shot.png"
python3 "$here/check.py" plan "$work/plan.json" "$work/dom.html" "$work/shot.png"
