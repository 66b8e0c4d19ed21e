#!/bin/sh
# bench/ptxas.sh [ARCH] [PTXAS_OUTPUT...] — the resources of every kernel in
# runtime/cuda by ptxas (issue 24): registers, static shared memory, stack
# frame, spills, and occupancy by the occupancy rules of sm_90 (64K registers
# in units of 256 per warp, 64 warps, 32 blocks and 228 KiB of shared memory
# per SM, 1 KiB reserved per block): the warps per SM its registers allow,
# and for the kernels whose block size is fixed (the attention kernels, the
# norm's) the warps per SM at that block size. The tensor-core attention
# kernels' shared memory is dynamic (ptxas does not see it): the column shows
# it from attention_mma.cu's am_*_smem (keep the two in step), marked "dyn". Compiles kernels_cuda.cu and
# device_cuda.cu with `nvcc -Xptxas -v` for sm_ARCH (default 90; minutes),
# or reads the given ptxas outputs (e.g. tests/gpu/build.sh's
# OBJ/ptxas_*.txt). Prints a Markdown table (bench/RESULTS.md).
set -u
cd "$(dirname "$0")/.." || exit 1
arch=${1:-90}
[ $# -gt 0 ] && shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ $# -eq 0 ]; then
    for f in kernels_cuda device_cuda; do
        nvcc -O3 -std=c++17 -gencode "arch=compute_$arch,code=[sm_$arch,compute_$arch]" -Iruntime -Iruntime/cuda \
            -Xptxas -v -c "runtime/cuda/$f.cu" -o "$tmp/$f.o" 2>"$tmp/ptxas_$f.txt" || { cat "$tmp/ptxas_$f.txt"; exit 1; }
    done
    set -- "$tmp"/ptxas_*.txt
fi
# one line per kernel: mangled name, registers, smem, stack, spill bytes
cat "$@" | awk -v arch="sm_$arch" '
    /Compiling entry function/ && index($0, arch) { if (k != "") print k, r, sm, st, sp; k = $7; gsub("\047", "", k); r = sm = st = sp = 0 }
    /Function properties for/ { own = k != "" && $NF == k }   # the entry itself, not a function it calls
    /bytes stack frame/ && own { st = $1; sp = $5 + $9 }
    /Used [0-9]+ registers/ && k != "" { for (i = 1; i <= NF; i++) { if ($(i + 1) == "registers,") r = $i; if ($(i + 1) == "bytes" && $(i + 2) == "smem") sm = $i } }
    END { if (k != "") print k, r, sm, st, sp }' >"$tmp/rows"
cut -d' ' -f1 "$tmp/rows" | c++filt | sed 's/(.*//; s/^void //; s/__nv_bfloat16/bf16/g' >"$tmp/names"
echo "| kernel | registers | smem (B) | stack (B) | spills (B) | warps/SM by registers | warps/SM at its block size |"
echo "|---|---:|---:|---:|---:|---:|---:|"
# AmCfg<HS>'s tile sizes, "HS NAME VALUE" lines, from attention_mma.cu
sed -n 's/^template <> struct AmCfg<\([0-9]*\)> { enum { \(.*\) }; };/\1 \2/p' runtime/cuda/attention_mma.cu |
    awk '{ hs = $1; $1 = ""; n = split($0, kv, ","); for (i = 1; i <= n; i++) { split(kv[i], p, "="); gsub(/ /, "", p[1]); print hs, p[1], p[2] + 0 } }' >"$tmp/cfg"
[ -s "$tmp/cfg" ] || { echo "bench/ptxas.sh: no AmCfg lines in runtime/cuda/attention_mma.cu" >&2; exit 1; }
paste -d' ' "$tmp/names" "$tmp/rows" | awk -v cfgfile="$tmp/cfg" '
    BEGIN { while ((getline line < cfgfile) > 0) { split(line, f, " "); cfg[f[1], f[2]] = f[3] } }
    function rpw(r) { return int((r * 32 + 255) / 256) * 256 }   # registers per warp, allocated in units of 256
    function occ(r, sm, t,   w, b, bs) {                         # warps per SM of a block of t threads
        w = int((t + 31) / 32); b = int(int(65536 / rpw(r)) / w); bs = int(233472 / (sm + 1024))
        if (bs < b) b = bs; if (32 < b) b = 32; if (int(64 / w) < b) b = int(64 / w); return b * w }
    { n = NF; sp = $n; st = $(n - 1); sm = $(n - 2); r = $(n - 3); name = $1; for (i = 2; i <= n - 5; i++) name = name " " $i
      t = 0; dyn = ""
      if (match(name, /^attention_(fwd|dkdv|dq)_kernel<[^,]*, [0-9]+>/)) {
          split(name, a, ", "); hs = a[2] + 0; t = (name ~ /fwd/ ? 64 : 32) * hs / 16 }
      else if (match(name, /^attention_(fwd|dkdv|dq)_mma_kernel<[0-9]+>/)) {
          # am_*_smem: tiles of HS + 8 bf16 per row; tile sizes from AmCfg (read from the source)
          split(name, a, "<"); hs = a[2] + 0; t = 128; ld = (hs + 8) * 2; dyn = " dyn"
          if (name ~ /fwd/) sm = (64 + 4 * cfg[hs, "FWD_BN"]) * ld
          else if (name ~ /_dq_/) sm = (128 + 4 * cfg[hs, "DQ_BN"]) * ld + 256
          else { bq = cfg[hs, "KV_BQ"]; t = 256; sm = (128 + 4 * bq) * ld + 16 * bq + 4 * bq / 8 * 32 * 16 } }
      else if (name ~ /gc_sumsq_kernel|gc_scale_kernel/) t = 256
      wr = int(65536 / rpw(r)); if (wr > 64) wr = 64
      printf "| `%s` | %d | %d%s | %d | %d | %d | %s |\n", name, r, sm, dyn, st, sp, wr, t ? occ(r, sm, t) " (" t " threads)" : "-" }' |
    sort
