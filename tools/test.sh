#!/bin/sh
# README's second command (and .ci/run): every test that runs without a GPU,
# with warnings as errors, then the compiler's fuzz test under ASan+UBSan.
set -eu
cd "$(dirname "$0")/.."
sh tools/deps.sh
jobs=$(nproc)
cmake -S . -B build-ci -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGC_WERROR=ON >/dev/null
cmake --build build-ci -j"$jobs"
(cd build-ci && ctest -LE gpu -j"$jobs" --output-on-failure --timeout 900)
# the compiler under AddressSanitizer + UndefinedBehaviorSanitizer
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DGC_SANITIZE=ON -DGC_WERROR=ON -DGC_ONLY_TESTS=frontend >/dev/null
cmake --build build-asan -j"$jobs" --target gcompile mutate
(cd build-asan && ctest -L frontend -j"$jobs" --output-on-failure)
