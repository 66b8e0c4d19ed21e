#!/bin/sh
# README's second command (and .ci/run): every test that runs without a GPU,
# with warnings as errors, then sanitizer builds (ASan+UBSan) and fuzz smoke runs.
set -eu
cd "$(dirname "$0")/.."
sh tools/deps.sh
jobs=$(nproc)
cmake -S . -B build-ci -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGC_WERROR=ON >/dev/null
cmake --build build-ci -j"$jobs"
(cd build-ci && ctest -LE gpu -j"$jobs" --output-on-failure --timeout 900)
# the compiler, its passes, the runtime and tiny emitted programs under
# AddressSanitizer + UndefinedBehaviorSanitizer (every growth moves there:
# GC_MOVE_ON_GROW); README "Hardening" runs the whole suite so
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGC_SANITIZE=ON -DGC_WERROR=ON -DGC_CUDA_TESTS=OFF \
      -DGC_ONLY_TESTS="frontend;hardening;fuzz;train" >/dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ctest -L 'frontend|hardening|fuzz' -j"$jobs" --output-on-failure &&
 ctest -R 'train[.](falling|poison|badfiles)$' -j"$jobs" --output-on-failure)
# libFuzzer smoke runs of every fuzz target (clang-14; seed 1, the first 20,000 executions or
# 20 s here; 60 s by default)
CC=clang-14 cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGC_SANITIZE=ON -DGC_FUZZ=ON -DGC_WERROR=ON \
      -DGC_CUDA_TESTS=OFF -DGC_ONLY_TESTS=fuzz -DGC_FUZZ_SECONDS=20 -DGC_FUZZ_RUNS=20000 >/dev/null
cmake --build build-fuzz -j"$jobs" --target fuzz_compile fuzz_ckpt fuzz_shard fuzz_train_cli fuzz_gcompile_cli fuzz_state fuzz_safetensors gen_seeds
(cd build-fuzz && ctest -L fuzz -j"$jobs" --output-on-failure)
