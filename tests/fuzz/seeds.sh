# seeds.sh — sourced: seeds TARGET GEN_SEEDS SRCDIR DIR fills DIR with the seed corpus of TARGET
seeds() {
    if [ "$1" = compile ]; then
        mkdir -p "$4"
        for f in "$3"/models/*.graph $(find "$3/tests" -name '*.graph'); do
            cp "$f" "$4/$(echo "$f" | tr / _)"
        done
    elif [ "$1" = state ]; then
        # a real state file (fuzz_state.c says how it was made), truncated and corrupted copies
        mkdir -p "$4"
        r=$3/tests/fuzz/seeds/state_tiny.bin
        cp "$r" "$4/real.bin"
        head -c 1000 "$r" >"$4/short_header.bin"
        head -c 1024 "$r" >"$4/header_only.bin"
        head -c 5000 "$r" >"$4/short_payload.bin"
        cat "$r" "$r" >"$4/extra_bytes.bin"
        for c in magic:0 version:8 step:24 dims:40 payload:20000 sum:1016; do
            cp "$r" "$4/bad_${c%%:*}.bin"
            printf 'X' | dd of="$4/bad_${c%%:*}.bin" bs=1 seek="${c#*:}" conv=notrunc 2>/dev/null
        done
    else
        "$2" "$4.all" >/dev/null && mv "$4.all/$1" "$4" && rm -rf "$4.all"
    fi
}
