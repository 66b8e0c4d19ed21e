#!/bin/sh
# Golden-text runner. usage: golden.sh GCOMPILE FILE.graph
# Directives in the graph's comments:
#   # ARGS: ...            extra gcompile arguments
#   # EXPECT: text         a line stdout must contain, whole (exit status 0)
#   # ERROR: L:C: message  stderr must contain "FILE:L:C: error: message" (exit 1)
#   # STDERR: text         a line stderr must contain, whole (exit 1)
#   # WARNING: L:C: message  stderr must contain "FILE:L:C: warning: message"
#                          (the exit status as the other directives say)
#   # ERRORS: N            stderr holds exactly N "error:" lines (one error
#                          per mistake: none repeated at a failed name's uses)
#   # WARNINGS: N          and exactly N "warning:" lines
# and, when FILE.expected exists, stdout must equal it exactly.
set -u
gc=$1 file=$2
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
args=$(sed -n 's/^# ARGS: //p' "$file")
# shellcheck disable=SC2086
"$gc" "$file" $args >"$out" 2>"$err"
rc=$?
fail=0
want=0
grep -q -e '^# ERROR: ' -e '^# STDERR: ' "$file" && want=1
if [ "$rc" -ne "$want" ]; then
    echo "FAIL: exit status $rc, expected $want"; fail=1
fi
while IFS= read -r line; do
    [ -z "$line" ] && continue
    if ! grep -qxF -- "$line" "$out"; then echo "FAIL: stdout lacks: $line"; fail=1; fi
done <<EOT
$(sed -n 's/^# EXPECT: //p' "$file")
EOT
while IFS= read -r line; do
    [ -z "$line" ] && continue
    if ! grep -qxF -- "$file:$line" "$err"; then
        echo "FAIL: stderr lacks: $file:$line"; fail=1
    fi
done <<EOT
$(sed -n 's/^# ERROR: \([0-9]*:[0-9]*\): /\1: error: /p' "$file")
EOT
while IFS= read -r line; do
    [ -z "$line" ] && continue
    if ! grep -qxF -- "$line" "$err"; then echo "FAIL: stderr lacks: $line"; fail=1; fi
done <<EOT
$(sed -n 's/^# STDERR: //p' "$file")
EOT
while IFS= read -r line; do
    [ -z "$line" ] && continue
    if ! grep -qxF -- "$file:$line" "$err"; then
        echo "FAIL: stderr lacks: $file:$line"; fail=1
    fi
done <<EOT
$(sed -n 's/^# WARNING: \([0-9]*:[0-9]*\): /\1: warning: /p' "$file")
EOT
for what in error warning; do
    n=$(sed -n "s/^# $(echo $what | tr a-z A-Z)S: //p" "$file")
    if [ -n "$n" ] && [ "$(grep -c -e ": $what: " "$err")" -ne "$n" ]; then
        echo "FAIL: $(grep -c -e ": $what: " "$err") $what lines, expected $n"; fail=1
    fi
done
if [ -f "${file%.graph}.expected" ] && ! diff -u "${file%.graph}.expected" "$out"; then
    echo "FAIL: stdout differs from ${file%.graph}.expected"; fail=1
fi
if [ "$fail" -ne 0 ]; then
    echo "--- stdout"; head -40 "$out"; echo "--- stderr"; cat "$err"
fi
exit $fail
