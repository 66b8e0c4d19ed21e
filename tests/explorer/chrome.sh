#!/bin/sh
# Loads PAGE (a file, optionally with #fragment) in headless Chromium twice: the DOM after its scripts ran into
# DOM, a 1400x1100 screenshot into PNG (none when PNG is -). A private
# profile under WORK; $CHROME_FLAGS adds flags.
#   chrome.sh WORK PAGE DOM PNG
set -eu
work=$1 page=$2 dom=$3 png=$4
chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$chrome" ]; then
    echo "FAIL: chromium not found (tools/deps.sh installs the Debian package chromium)"; exit 1
fi
file=${page%%#*}
frag=${page#"$file"}
url="file://$(cd "$(dirname "$file")" && pwd)/$(basename "$file")$frag"
flags="--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --user-data-dir=$work/profile ${CHROME_FLAGS:-}"
export HOME="$work"
# shellcheck disable=SC2086
timeout 120 "$chrome" $flags --dump-dom "$url" >"$dom" 2>"$work/chrome.log" || { cat "$work/chrome.log"; exit 1; }
[ "$png" = - ] && exit 0
# shellcheck disable=SC2086
timeout 120 "$chrome" $flags --window-size=1400,1100 --screenshot="$png" "$url" >>"$work/chrome.log" 2>&1 || { cat "$work/chrome.log"; exit 1; }
test -s "$png" || { echo "FAIL: no screenshot"; cat "$work/chrome.log"; exit 1; }
