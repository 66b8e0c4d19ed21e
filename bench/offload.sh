#!/bin/sh
# Host offload (issue 23): what it buys and what the search costs.
#
# 1. The budget sweep of GPT-2 1558M (B=8, T=1024, fp32, CUDA target, cost
#    model h100): the budget search at every 2 GiB from 8 to 48 GiB, with
#    --offload auto (the default) and --offload none: the chosen micro-batch
#    count, recompute, offload, the peak (with the CUDA reserve) and the
#    predicted step time, or that nothing fits. A table, and the picture
#    (predicted ms/step against the budget, one step line each) written to
#    bench/offload_sweep_1558M.svg.
# 2. The figures of issue 23: 1558M at --mem 12GiB, the book's 774M
#    (V=65, T=128, B=32) at --mem 6GiB.
# 3. The search's CPU time (user + sys, best of ROUNDS): 1558M --gpus 8
#    --split auto --mem 16GiB and one device --mem 16GiB, beside a baseline
#    gcompile (BASELINE=path, e.g. a build of the commit before the issue)
#    when given.
#
# usage: bench/offload.sh [--record] [BUILD_DIR] [-] [ROUNDS]
#   --record   append the output, dated, with the machine, to bench/RESULTS.md
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_args - 3 "$@"
gc="$build/gcompile"
out="$tmp/out.txt"
big="--config gpt2_1558M -D B=8 -D T=1024"
{
echo "## 1558M B=8 T=1024 fp32 (h100 cost model): the search at each budget, --offload auto and none"
printf '%8s  %-7s %3s  %-26s %-7s %10s %10s\n' budget offload K recompute moved peak "ms/step"
for mode in auto none; do
    for gib in $(seq 8 2 48); do
        # shellcheck disable=SC2086
        if "$gc" models/gpt2.graph $big --mem ${gib}GiB --offload $mode --emit plan-text >"$tmp/p.txt" 2>/dev/null; then
            s=$(sed -n 's/^strategy: //p' "$tmp/p.txt")
            peak=$(echo "$s" | sed -n 's/.* = \([0-9.]* GiB\) |.*/\1/p')
            k=$(echo "$s" | sed -n 's/.*| \([0-9]*\) micro-batch.*/\1/p')
            ms=$(echo "$s" | sed -n 's/.*predicted \([0-9.]*\) ms.*/\1/p')
            off=$(echo "$s" | sed -n 's/.*| offload \([a-z+]*\) |.*/\1/p')
            rc=$(echo "$s" | sed -n 's/.*| \(no recompute\)\(.*\)/\1/p; s/.*| recompute [0-9]* tensors ([0-9]* ops, \([^)]*\))\(, per layer [nsf]*\)\{0,1\}.*/\1/p' | head -1)
            letters=$(echo "$s" | sed -n 's/.*per layer \([nsf]*\).*/\1/p')
            [ -n "$letters" ] && rc="$(echo "$letters" | grep -o f | wc -l)f $(echo "$letters" | grep -o s | wc -l)s $(echo "$letters" | grep -o n | wc -l)n"
            printf '%5s GiB  %-7s %3s  %-26s %-7s %10s %10s\n' "$gib" "$mode" "$k" "${rc:-?}" "${off:-none}" "$peak" "$ms"
            echo "$mode $gib $ms ${off:-none}" >>"$tmp/points.txt"
        else
            printf '%5s GiB  %-7s %3s  %-26s %-7s %10s %10s\n' "$gib" "$mode" - "nothing fits" - - -
        fi
    done
done
python3 - "$tmp/points.txt" bench/offload_sweep_1558M.svg <<'EOF'
import sys
pts = {"auto": [], "none": []}
for line in open(sys.argv[1]):
    m, gib, ms, off = line.split()
    pts[m].append((float(gib), float(ms), off))
W, H, L, R, T, B = 760, 440, 80, 30, 50, 60
xs = [p[0] for v in pts.values() for p in v]
ys = [p[1] for v in pts.values() for p in v]
x0, x1 = 8.0, 48.0
y0, y1 = 0.0, max(ys) * 1.08
X = lambda v: L + (v - x0) / (x1 - x0) * (W - L - R)
Y = lambda v: H - B - (v - y0) / (y1 - y0) * (H - T - B)
o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (W, H),
     '<rect width="100%" height="100%" fill="white"/>',
     '<text x="%d" y="22" font-size="14">GPT-2 1558M, B=8, T=1024, fp32: predicted step time against the budget (h100 cost model)</text>' % L,
     '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, H - B, W - R, H - B),
     '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, T, L, H - B)]
for g in range(8, 49, 8):
    o.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (X(g), H - B + 18, g))
for i in range(6):
    v = y1 * i / 5
    o.append('<text x="%d" y="%.1f" text-anchor="end">%.0f</text>' % (L - 6, Y(v) + 4, v))
o.append('<text x="%.0f" y="%d" text-anchor="middle">budget per device (GiB, with the 768 MiB CUDA reserve)</text>' % ((L + W - R) / 2, H - 20))
o.append('<text x="18" y="%.0f" transform="rotate(-90 18 %.0f)" text-anchor="middle">predicted ms/step</text>' % ((T + H - B) / 2, (T + H - B) / 2))
# auto underneath (wide, green), none on top (dashed, blue): where both fit they choose alike
for m, colour, label, width, dash, dy in (("auto", "#2ca02c", "--offload auto (default)", 5, "", 26),
                                          ("none", "#1f77b4", "--offload none", 2, ' stroke-dasharray="6,4"', -12)):
    p = sorted(pts[m])
    if not p:
        continue
    path = []
    for i, (g, ms, off) in enumerate(p):
        if i:
            path.append("%.1f,%.1f" % (X(g), Y(p[i - 1][1])))
        path.append("%.1f,%.1f" % (X(g), Y(ms)))
    o.append('<polyline fill="none" stroke="%s" stroke-width="%d"%s points="%s"/>' % (colour, width, dash, " ".join(path)))
    for g, ms, off in p:
        o.append('<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"><title>%s at %g GiB: %.1f ms/step, offload %s</title></circle>'
                 % (X(g), Y(ms), 4.5 if m == "auto" else 2.5, colour, label, g, ms, off))
    o.append('<text x="%.1f" y="%.1f" fill="%s">%s: fits from %g GiB</text>' % (X(p[0][0]) + 4, Y(p[0][1]) + dy, colour, label, p[0][0]))
o.append('<text x="%d" y="%d" fill="#555">without offload nothing fits below 22 GiB (parameters 5.8 GiB + AdamW moments 11.6 GiB);</text>' % (L + 10, H - B - 40))
o.append('<text x="%d" y="%d" fill="#555">with it, from 10 GiB: the optimizer on the host, its update (260 ms of host AdamW) bounding the step</text>' % (L + 10, H - B - 24))
o.append('</svg>')
open(sys.argv[2], "w").write("\n".join(o) + "\n")
print("picture: " + sys.argv[2])
EOF
echo
echo "## the figures of issue 23"
for f in "$big --mem 12GiB" "--config gpt2_774M -D V=65 -D T=128 -D B=32 --mem 6GiB"; do
    # shellcheck disable=SC2086
    "$gc" models/gpt2.graph $f --emit plan-text >"$tmp/p.txt"
    echo "gcompile models/gpt2.graph $f"
    sed -n 's/^strategy: /  /p; /^offload:/p; /^  per step/p; /^  total/p; /^  host/p' "$tmp/p.txt" | cut -c1-230
done
echo
echo "## search CPU time (user + sys, best of $rounds; load average $(cut -d' ' -f1-3 /proc/loadavg))"
cpu() {  # cpu GCOMPILE ARGS...: best user+sys seconds
    g=$1; shift
    best=""
    for r in $(seq "$rounds"); do
        /usr/bin/time -f "%U %S" -o "$tmp/time.txt" "$g" models/gpt2.graph "$@" --emit plan-text -o /dev/null \
            >/dev/null 2>&1 || true
        t=$(tail -1 "$tmp/time.txt" | awk '{ printf "%.2f", $1 + $2 }')
        best=$(awk -v a="$t" -v b="$best" 'BEGIN { print (b == "" || a < b) ? a : b }')
    done
    echo "$best"
}
for f in "$big --gpus 8 --split auto --mem 16GiB" "$big --mem 16GiB"; do
    # shellcheck disable=SC2086
    line="  $(cpu "$gc" $f) s"
    # shellcheck disable=SC2086
    [ -n "${BASELINE:-}" ] && line="$line (baseline $(cpu "$BASELINE" $f) s)"
    echo "$line  gcompile $f"
done
} >"$out" 2>&1
cat "$out"
bench_record offload.sh "load average $(cut -d' ' -f1-3 /proc/loadavg)" "$out"
