#!/bin/sh
# The plan explorer in headless Chromium: compile a plan and its page, let
# Chromium run the page's scripts (--dump-dom) and take a screenshot, and
# check both against the plan JSON (check.py).
# With "pointer", pointer.html also drives the page with pointer events.
#   explorer.sh GCOMPILE GRAPH CONFIG WORKDIR [pointer]
set -eu
gc=$1 graph=$2 config=$3 work=$4 pointer=${5:-}
here=$(dirname "$0")
rm -rf "$work"
mkdir -p "$work"
# 124M with a budget (the regions bar marks it); $GC_EXPLORER_FLAGS: more levers (--offload: the host region)
mem="${GC_EXPLORER_FLAGS:-}"
[ "$config" = gpt2_124M ] && mem="--mem 4GiB"
# shellcheck disable=SC2086
"$gc" "$graph" --config "$config" --target cpu $mem --emit plan -o "$work/plan.json"
# shellcheck disable=SC2086
"$gc" "$graph" --config "$config" --target cpu $mem --emit plan-html -o "$work/plan.html"
# the page is self-contained: nothing in it may point outside
if grep -Eq '(src|href)="(https?:)?//|@import|url\(' "$work/plan.html"; then
    echo "FAIL: the page refers to something outside itself"; exit 1
fi
# the page as a link opens it: a selected tensor and a search (the step stays the peak)
sh "$here/chrome.sh" "$work" "$work/plan.html#tensor=logits&q=attproj" "$work/dom.html" "$work/shot.png"
python3 "$here/check.py" plan "$work/plan.json" "$work/dom.html" "$work/shot.png" logits attproj
if [ "$pointer" = pointer ]; then
    cp "$here/pointer.html" "$work/pointer.html"
    CHROME_FLAGS=--allow-file-access-from-files sh "$here/chrome.sh" "$work" "$work/pointer.html" "$work/pointer.dom.html" -
    python3 "$here/check.py" pointer "$work/plan.json" "$work/pointer.dom.html"
fi
