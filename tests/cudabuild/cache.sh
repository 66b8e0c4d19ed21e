#!/bin/sh
# The cache of the CUDA runtime's objects (driver/nvcache.c).
#   With nvcc (one arch, sm_90): the first build compiles kernels_cuda.o and
#   device_cuda.o into a fresh GCOMPILE_CACHE, the second hits both, and the
#   program linked from the cached objects runs (the no-device error without a
#   GPU). Given SHARED (the build tree's cache, which cudabuild.tiny.fp32 has
#   filled with real objects for sm_90: a fixture), that build
#   hits there instead of compiling the runtime once more (45 s of CPU): the
#   real miss is then the fixture's, its program the one linked from them.
#   With a stand-in nvcc (a script that writes placeholder files, so each
#   case costs no compile): the same inputs give the same names; another
#   --gpu-arch, another runtime directory, an edited runtime file, another
#   `nvcc --version`, another host compiler `--version` (gcc and g++ on PATH,
#   or $NVCC_CCBIN) give other names; GCOMPILE_CACHE=off and "" leave the
#   directory untouched and compile the sources with the program; a cache that
#   cannot be created builds without it; XDG_CACHE_HOME and HOME are the
#   fallbacks; two builds racing on one miss both succeed, no temporary left;
#   a split program's comm_nccl.cu has its own object with MPI's flags;
#   nvcc's messages on a miss are shown again on each hit; past
#   GCOMPILE_CACHE_MAX the least recently used objects go (a hit touches its
#   object), never this build's; "off" keeps all; a bad value warns.
# usage: cache.sh GCOMPILE GRAPH WORKDIR [SHARED]
# exit 77 (skipped) without nvcc.
set -u
gc=$1 graph=$2 dir=$3 shared=${4:-}
command -v nvcc >/dev/null 2>&1 || { echo "nvcc not found: skipped"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
tiny="$graph --config tiny --target cuda"
objs() { (cd "$1" && ls) | tr '\n' ' '; }   # the cache's files, one line

# ---- nvcc: a miss, then a hit (or, with SHARED, a hit on the fixture's objects)
if [ -n "$shared" ]; then
    cache=$shared arch="--gpu-arch sm_90"   # as build.sh compiles
    first=$(objs "$cache")
else
    cache=$dir/real/sub arch="--gpu-arch sm_90"   # created with its parent
    # shellcheck disable=SC2086
    GCOMPILE_CACHE=$cache "$gc" $tiny $arch -o t1 -v 2>v1.txt || { cat v1.txt; fail "first build"; }
    for f in kernels_cuda device_cuda; do
        grep -q "^gcompile: cache: $f.cu: compiled into $cache/$f-[0-9a-f]\{16\}\.o$" v1.txt ||
            { grep cache v1.txt; fail "the first build did not compile $f.cu into the cache"; }
    done
    [ -x t1 ] || fail "no executable from the first build"
    first=$(objs "$cache")
    [ "$(ls "$cache" | wc -l)" -eq 2 ] || fail "the cache holds more than the two objects: $first"
fi
# shellcheck disable=SC2086
GCOMPILE_CACHE=$cache "$gc" $tiny $arch -o t2 -v 2>v2.txt || { cat v2.txt; fail "second build"; }
[ "$(grep -c '^gcompile: cache: .*: hit ' v2.txt)" -eq 2 ] || { grep cache v2.txt; fail "the second build missed"; }
grep -q "compiled into" v2.txt && fail "the second build compiled a runtime object"
grep -q "^gcompile: run: .*-c " v2.txt && fail "the second build ran nvcc -c"
[ -x t2 ] || fail "no executable from the second build"
# (the shared cache is also other tests': their objects may come meanwhile)
[ -n "$shared" ] || [ "$(objs "$cache")" = "$first" ] || fail "the cache changed on a hit: $first -> $(objs "$cache")"
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
    ./t2 --steps 1 >out.txt 2>err.txt
    grep -q "^error: no CUDA device" err.txt || { cat err.txt; fail "the program linked from cached objects"; }
fi

# ---- a stand-in nvcc: -c writes a placeholder object, else a script
fake=$dir/nvcc
cat >"$fake" <<'EOF'
#!/bin/sh
echo "$*" >>"${FAKE_LOG:-/dev/null}"
case " $* " in *" --version "*) echo "stand-in nvcc ${FAKE_VERSION:-1}"; exit 0 ;; esac
out= prev=
for a; do [ "$prev" = -o ] && out=$a; prev=$a; done
case " $* " in
*" -c "*) sleep "${FAKE_SLEEP:-0}"; echo "object: $*" >"$out"; [ -z "${FAKE_WARN:-}" ] || echo "$FAKE_WARN" >&2 ;;
*) printf '#!/bin/sh\n' >"$out" && chmod +x "$out" ;;
esac
EOF
chmod +x "$fake"
build() {   # build CACHE OUT [args]: -v into OUT.txt
    c=$1 out=$2
    shift 2
    GCOMPILE_CACHE=$c "$gc" $tiny --nvcc "$fake" -o "$out" -v "$@" 2>"$out.txt" || { cat "$out.txt"; fail "build $out"; }
    [ -x "$out" ] || fail "no executable $out"
}
names() { sed -n 's|^gcompile: cache: .*: [a-z ]* .*/\([a-z_]*-[0-9a-f]*\.o\)$|\1|p' "$1" | tr '\n' ' '; }
fc=$dir/fake
build "$fc" f1 --gpu-arch sm_90
base=$(names f1.txt)
[ "$(echo $base | wc -w)" -eq 2 ] || { cat f1.txt; fail "stand-in: not two objects: $base"; }
build "$fc" f2 --gpu-arch sm_90
[ "$(names f2.txt)" = "$base" ] || fail "the same build gave other names: $base -> $(names f2.txt)"
[ "$(grep -c ': hit ' f2.txt)" -eq 2 ] || fail "the same build missed"
differs() {   # differs WHAT FILE: none of FILE's names in base, both compiled
    for o in $(names "$2"); do
        case " $base " in *" $o "*) fail "$1 gave the same object $o" ;; esac
    done
    [ "$(grep -c 'compiled into' "$2")" -eq 2 ] || { cat "$2"; fail "$1 did not compile both objects"; }
}
build "$fc" f3 --gpu-arch sm_80
differs "--gpu-arch sm_80" f3.txt
build "$fc" f4 --gpu-arch sm_80,sm_90
differs "--gpu-arch sm_80,sm_90" f4.txt
(FAKE_VERSION=2 build "$fc" f5 --gpu-arch sm_90) || exit 1
differs "another nvcc --version" f5.txt
# the host compiler nvcc runs: gcc and g++ on PATH, else $NVCC_CCBIN; another --version, another name
mkdir -p cc
for c in gcc g++; do printf '#!/bin/sh\necho "stand-in %s ${FAKE_CC:-1}"\n' $c >cc/$c && chmod +x cc/$c; done
(PATH=$dir/cc:$PATH build "$fc" h1 --gpu-arch sm_90) || exit 1
differs "a gcc of another --version on PATH" h1.txt
(PATH=$dir/cc:$PATH build "$fc" h2 --gpu-arch sm_90) || exit 1
[ "$(names h2.txt)" = "$(names h1.txt)" ] || fail "the same host compiler gave other names: $(names h1.txt) vs $(names h2.txt)"
(FAKE_CC=2 PATH=$dir/cc:$PATH build "$fc" h3 --gpu-arch sm_90) || exit 1
[ "$(names h3.txt)" != "$(names h1.txt)" ] || fail "another host compiler --version gave the same names"
(NVCC_CCBIN=$dir/cc/g++ build "$fc" h4 --gpu-arch sm_90) || exit 1
differs "NVCC_CCBIN" h4.txt
rt=$(sed -n 's|^gcompile: run: .* -I\([^ ]*\)/cuda -c .*|\1|p' f1.txt | head -n 1)
[ -d "$rt/cuda" ] || fail "no runtime directory in the -v output"
cp -r "$rt" rt
(GCOMPILE_RUNTIME_DIR=$dir/rt build "$fc" f6 --gpu-arch sm_90) || exit 1
differs "another runtime directory" f6.txt
moved=$(names f6.txt)
echo "/* edited */" >>rt/cuda/gc_cuda.h
(GCOMPILE_RUNTIME_DIR=$dir/rt build "$fc" f7 --gpu-arch sm_90) || exit 1
for o in $(names f7.txt); do
    case " $moved " in *" $o "*) fail "an edited runtime/cuda/gc_cuda.h gave the same object $o" ;; esac
done
echo "/* edited */" >>rt/gc_runtime.h
(GCOMPILE_RUNTIME_DIR=$dir/rt build "$fc" f8 --gpu-arch sm_90) || exit 1
[ "$(grep -c 'compiled into' f8.txt)" -eq 2 ] || fail "an edited runtime/gc_runtime.h hit"
if command -v mpicc >/dev/null 2>&1; then   # split: comm_nccl.cu with MPI's include flags
    build "$fc" f9 --gpu-arch sm_90 --gpus 2 --split dp
    grep -q "^gcompile: cache: comm_nccl.cu: compiled into $fc/comm_nccl-" f9.txt || fail "no comm_nccl object"
    grep -q "^gcompile: run: .* -I[^ ]*mpi[^ ]* -c [^ ]*/comm_nccl.cu " f9.txt || fail "comm_nccl.cu without MPI's flags"
    [ "$(grep -c ': hit ' f9.txt)" -eq 2 ] || fail "a split program's kernels_cuda and device_cuda objects missed"
fi

# ---- nvcc's messages on a miss are kept and shown again on every hit (build.sh's zero-warning check)
for i in 1 2; do
    (FAKE_WARN="stand-in warning" build "$dir/warn" w$i --gpu-arch sm_90) || exit 1
    [ "$(grep -c '^stand-in warning$' w$i.txt)" -eq 2 ] || { cat w$i.txt; fail "build $i: not one warning per object"; }
done
grep -q ': hit ' w2.txt || fail "the second build with warnings missed"
(build "$dir/warn" w3 --gpu-arch sm_80) || exit 1
grep -q 'stand-in warning' w3.txt && fail "a warning shown for objects compiled without one"

# ---- off, "" and a cache that cannot be created: the sources compiled with the program
for off in off ""; do
    before=$(ls -l --time-style=full-iso "$fc")
    (FAKE_LOG=$dir/log.txt build "$off" o1 --gpu-arch sm_90) || exit 1
    grep -q "cache: .*\.cu:" o1.txt && fail "GCOMPILE_CACHE='$off' used a cache"
    [ "$(ls -l --time-style=full-iso "$fc")" = "$before" ] || fail "GCOMPILE_CACHE='$off' changed the cache"
    tail -n 1 log.txt | grep -q "/cuda/kernels_cuda.cu .*/cuda/device_cuda.cu" ||
        fail "GCOMPILE_CACHE='$off': the runtime's sources are not in the link command"
    rm -f log.txt
done
: >afile
build "$dir/afile/cache" u1 --gpu-arch sm_90
grep -q "^gcompile: cache: cannot create '$dir/afile/cache': .*; building without the cache$" u1.txt ||
    { cat u1.txt; fail "no note on a cache that cannot be created"; }
GCOMPILE_CACHE=$dir/afile/cache "$gc" $tiny --nvcc "$fake" -o u2 2>u2.txt && [ ! -s u2.txt ] ||
    { cat u2.txt; fail "without -v a build is not silent"; }

# ---- the fallbacks, with GCOMPILE_CACHE unset
(unset GCOMPILE_CACHE; XDG_CACHE_HOME=$dir/xdg "$gc" $tiny --nvcc "$fake" -o x1 -v 2>x1.txt) || fail "XDG build"
grep -q "compiled into $dir/xdg/gcompile/kernels_cuda-" x1.txt || { grep cache x1.txt; fail "XDG_CACHE_HOME not used"; }
(unset GCOMPILE_CACHE XDG_CACHE_HOME; HOME=$dir/home "$gc" $tiny --nvcc "$fake" -o x2 -v 2>x2.txt) || fail "HOME build"
grep -q "compiled into $dir/home/.cache/gcompile/kernels_cuda-" x2.txt || { grep cache x2.txt; fail "HOME not used"; }

# ---- two builds racing on one miss: both succeed, one object each, no temporary left
rc=$dir/race
(FAKE_SLEEP=2 build "$rc" r1 --gpu-arch sm_90) &
p1=$!
(FAKE_SLEEP=2 build "$rc" r2 --gpu-arch sm_90) &
p2=$!
wait $p1 || fail "the first racing build"
wait $p2 || fail "the second racing build"
[ "$(names r1.txt)" = "$(names r2.txt)" ] || fail "the racing builds named other objects"
[ "$(ls -a "$rc" | grep -vc '^\.\.\?$')" -eq 2 ] || fail "the race left more than two files: $(ls -a "$rc")"
# ---- the size limit: the least recently used objects go, never the ones this build used
lc=$dir/limit
build "$lc" l1 --gpu-arch sm_90
mine=$(cd "$lc" && ls *.o)
cur=$(cat "$lc"/*.o | wc -c)   # this build's two objects
for i in 1 2 3; do   # older objects, 3000 bytes each, the first the least recently used
    head -c 3000 /dev/zero >"$lc/old$i-000000000000000$i.o"
    touch -d "$((4 - i)) days ago" "$lc/old$i-000000000000000$i.o"
done
echo "old warning" >"$lc/old1-0000000000000001.err"
age() { (cd "$lc" && touch -d "6 days ago" $mine); }   # this build's objects older than all: a hit must protect them
age
(GCOMPILE_CACHE_MAX=off build "$lc" l2 --gpu-arch sm_90) || exit 1
[ "$(ls "$lc"/*.o | wc -l)" -eq 5 ] || fail "GCOMPILE_CACHE_MAX=off removed objects: $(ls "$lc")"
grep -q "removed" l2.txt && fail "GCOMPILE_CACHE_MAX=off: a removal reported"
age
(GCOMPILE_CACHE_MAX=$((cur + 3500)) build "$lc" l3 --gpu-arch sm_90) || exit 1
[ "$(grep -c ': hit ' l3.txt)" -eq 2 ] || fail "the size-limited build missed"
grep -q "^gcompile: cache: removed 2 least recently used objects (0.0 MiB) to keep under 0.0 MiB$" l3.txt ||
    { cat l3.txt; fail "no line on the removal"; }
left=$(cd "$lc" && ls | tr '\n' ' ')
for f in $mine old3-0000000000000003.o; do
    [ -f "$lc/$f" ] || fail "the limit removed $f (left: $left)"
done
for f in old1-0000000000000001.o old1-0000000000000001.err old2-0000000000000002.o; do
    [ -e "$lc/$f" ] && fail "the limit kept $f, least recently used (left: $left)"
done
age
(GCOMPILE_CACHE_MAX=1 build "$lc" l4 --gpu-arch sm_90) || exit 1
[ "$(cd "$lc" && ls | tr '\n' ' ')" = "$(echo $mine) " ] || fail "a 1-byte limit: $(ls "$lc"), want only $mine"
(GCOMPILE_CACHE_MAX=lots build "$lc" l5 --gpu-arch sm_90) || exit 1
grep -q "^gcompile: warning: GCOMPILE_CACHE_MAX='lots' is not a size" l5.txt || { cat l5.txt; fail "no warning on a bad limit"; }
echo "ok: cache ($first)"
