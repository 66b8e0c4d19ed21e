#!/bin/sh
# Installs the Debian packages gcompile needs, when missing (run as root).
set -eu
need=""
for p in build-essential cmake flex bison pkg-config libjansson-dev libopenblas-dev libopenmpi-dev openmpi-bin \
         clang-14 libclang-rt-14-dev \
         chromium bsdutils python3-numpy python3-torch; do
    # clang: the fuzzers (tests/fuzz); chromium: the plan explorer tests (tests/explorer);
    # bsdutils: script, the trainer's terminal tests (tests/runtime, tests/cuda);
    # python3-numpy, python3-torch: the float64 references (tests/reference, tests/train, tests/randgraph),
    # which are skipped, not passed, without them
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
done
if [ -n "$need" ]; then
    echo "deps: installing$need"
    if [ "$(id -u)" -ne 0 ]; then
        echo "deps: missing packages:$need (run as root, or install them)" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
fi
