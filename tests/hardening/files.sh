#!/bin/sh
# Issue 21 for gcompile: outputs that are not regular files, inputs that are
# FIFOs or devices, and the graph file size limit.
# usage: files.sh GCOMPILE GRAPH WORKDIR
#   every output (-o of each --emit kind, the executable, plan-diff): an
#   existing device is written in place and stays a device (/dev/full: the
#   error of a full device, exit 1); a FIFO or directory is refused before
#   anything is written. Device nodes are made here with mknod (root); not
#   root, links to /dev/null and /dev/full stand in (a bug would replace the
#   link, never the device). Inputs: a FIFO is refused at once (no hang in
#   open()), /dev/zero is refused without reading it, a graph above 64 MiB
#   is refused by its size.
set -u
gc=$1 graph=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
if mknod full c 1 7 2>/dev/null && mknod null c 1 3 2>/dev/null; then
    echo "device nodes made with mknod"
else
    rm -f full null; ln -s /dev/full full; ln -s /dev/null null
    echo "not root: links to /dev/full and /dev/null"
fi
mkfifo fifo || fail "mkfifo"
mkdir adir
is_dev() { [ -c "$1" ] || fail "$1 is no longer a device: $(ls -l "$1")"; }
expect() {  # expect RC PATTERN CMD...: exit RC within 20 s, stderr contains PATTERN
    want=$1 pat=$2; shift 2
    timeout 20 "$@" >out.txt 2>err.txt
    rc=$?
    [ $rc -eq 124 ] && fail "$*: hung (20 s)"
    [ $rc -eq "$want" ] || { cat err.txt; fail "$*: exit $rc, expected $want"; }
    [ -z "$pat" ] || grep -qF -- "$pat" err.txt || { cat err.txt; fail "$*: stderr lacks '$pat'"; }
}
"$gc" "$graph" --config tiny --emit plan -o p.json || fail "plan"
for kind in plan plan-text plan-svg summary c; do
    expect 0 "" "$gc" "$graph" --config tiny --emit $kind -o null
    expect 1 "cannot write 'full': No space left on device" "$gc" "$graph" --config tiny --emit $kind -o full
    expect 1 "cannot write 'fifo': it is a FIFO, not a regular file or a device" "$gc" "$graph" --config tiny --emit $kind -o fifo
    expect 1 "cannot write 'adir': it is a directory" "$gc" "$graph" --config tiny --emit $kind -o adir
    is_dev null; is_dev full
done
echo "ok: --emit KIND -o DEVICE writes through it, a FIFO or directory is refused"
expect 0 "" "$gc" "$graph" --config tiny --target cpu -o null
expect 1 "cannot write 'full': No space left on device" "$gc" "$graph" --config tiny --target cpu -o full
expect 1 "cannot write 'fifo': it is a FIFO" "$gc" "$graph" --config tiny --target cpu -o fifo
is_dev null; is_dev full
echo "ok: the executable: a device written through, a FIFO refused"
expect 0 "" "$gc" --emit plan-diff p.json p.json -o null
expect 1 "cannot write 'full': No space left on device" "$gc" --emit plan-diff p.json p.json -o full
expect 1 "plan-diff: cannot read 'fifo': not a regular file" "$gc" --emit plan-diff p.json fifo -o d.html
is_dev null; is_dev full
echo "ok: plan-diff: the same"
expect 1 "cannot read 'fifo': not a regular file" "$gc" fifo
expect 1 "cannot read '/dev/zero': not a regular file" "$gc" /dev/zero
head -c 67108865 /dev/zero | tr '\0' ' ' >big.graph
expect 1 "cannot read 'big.graph': 67108865 bytes, larger than the limit of 64 MiB" "$gc" big.graph
rm -f big.graph
echo "ok: a FIFO, /dev/zero and a graph over 64 MiB are refused without reading them"
echo "ok: files"
