#!/bin/sh
# recipe.sh GCOMPILE WORKDIR: llm.c's recipe in the default build (fused-opt
# schedule, every fusion) against the float64 PyTorch reference: 20 steps with
# --grad-clip active on at least 15 of them, --weight-decay 0.1 on llm.c's
# matrices only, odd dims (T=37, C=48, V=Vp=500: no dim a multiple of a tile),
# every step's loss within 1e-5 of fp64 (fp32 summation order gives ~3e-7
# here; a wrong clip threshold (0.55), no clipping or decay on every parameter
# are 1e-2 or more away in the second run, whose eps 1 makes the update follow
# the gradient's magnitude: tests/reference/README.md).
# Needs a python3 with torch (GC_TORCH_PYTHON, default /usr/bin/python3):
# exit 77 (skipped) without one.
set -u
gc=$1 dir=$2
py=${GC_TORCH_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
"$py" -c 'import torch, numpy' 2>/dev/null || { echo "skipped: no torch in $py"; exit 77; }
mkdir -p "$dir" || exit 1
dims="-D T=37 -D C=48 -D Vp=500"
common="--gcompile $gc --work $dir --weight-decay 0.1 --fp64 --against fp64 --tol 1e-5 --min-clipped 15 $dims"
echo "== clip 0.5, lr 1e-3"
"$py" "$here/gpt2_reference.py" compare $common --grad-clip 0.5 || exit 1
echo "== clip 0.5, --wscale 10 --eps 1 --lr 1, linear schedule with warmup"
"$py" "$here/gpt2_reference.py" compare $common --grad-clip 0.5 --wscale 10 --eps 1 --lr 1 \
    --warmup 5 --lr-schedule linear || exit 1
echo "ok: llm.c's recipe (clip, decay on the matrices) matches fp64 PyTorch within 1e-5"
