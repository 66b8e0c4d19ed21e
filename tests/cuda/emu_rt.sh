# Sourced by the scripts that build emitted CUDA programs against the SIMT
# emulator (tests/cuda/shim). emu_rt CXX ROOT CBLAS_INC sets EMU_INC (the
# include flags) and EMU_OBJS (the emulated runtime's object files):
# $GC_EMU_OBJS (':'-separated) when CTest gives it and every file exists,
# that is tests/cuda's gcemu_rt, compiled once by the build; else
# kernels_cuda.cu and device_cuda.cu compiled into the current directory
# (a script run by hand), about 15 s of CPU each time.
emu_rt() {
    EMU_INC="-I$2/tests/cuda/shim -I$2/runtime -I$2/runtime/cuda -I$3"
    EMU_OBJS=
    if [ -n "${GC_EMU_OBJS:-}" ]; then
        EMU_OBJS=$(echo "$GC_EMU_OBJS" | tr ':' ' ')
        for o in $EMU_OBJS; do [ -f "$o" ] || EMU_OBJS=; done
        [ -n "$EMU_OBJS" ] && return 0
    fi
    for f in kernels_cuda device_cuda; do
        # shellcheck disable=SC2086
        "$1" -std=c++17 -O2 -w $EMU_INC -x c++ -c "$2/runtime/cuda/$f.cu" ${GCOMPILE_CFLAGS:-} -o $f.o || return 1
        EMU_OBJS="$EMU_OBJS $PWD/$f.o"
    done
}
