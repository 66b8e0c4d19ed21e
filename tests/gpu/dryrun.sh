#!/bin/sh
# dryrun.sh — tests/gpu/run.sh on a machine without a GPU, to check the
# script before the one unattended run on a lent GPU: a fake nvidia-smi (an
# sm_90 card with 140 GiB free) and compute-sanitizer (runs the program,
# prints its ERROR SUMMARY) come first on PATH; nvcc is the real one, so the
# compiles and links against gpu_bundle/ are real. Every program then stops
# at "error: no CUDA device", so the verdict is FAIL; what to look at is
# $OUT/summary.txt: 124M B chosen, "nvcc: N s, 0 warning lines", no FAIL
# from nvcc, one line per step. Needs gpu_bundle/ (tests/gpu/prepare.sh).
set -u
cd "$(dirname "$0")/../.." || exit 1
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
cat >"$fake/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
-L) echo "GPU 0: fake H200 (dry run)" ;;
*compute_cap*) echo "9.0" ;;
*memory.free*) echo "143000" ;;
*) echo "fake nvidia-smi: $*" >&2; exit 1 ;;
esac
EOF
cat >"$fake/compute-sanitizer" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do
    case $1 in --tool|--error-exitcode) shift ;; esac
    shift
done
"$@"; rc=$?
echo "========= ERROR SUMMARY: 0 errors (fake; the program exited $rc)"
exit $rc
EOF
chmod +x "$fake/nvidia-smi" "$fake/compute-sanitizer"
PATH="$fake:$PATH:/usr/local/cuda/bin" OUT=${OUT:-/tmp/gpu_dryrun} sh tests/gpu/run.sh
echo "dry run ended (exit $?; FAIL is expected without a GPU): see ${OUT:-/tmp/gpu_dryrun}/summary.txt"
