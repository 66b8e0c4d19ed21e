# seeds.sh — sourced: seeds TARGET GEN_SEEDS SRCDIR DIR fills DIR with the seed corpus of TARGET
seeds() {
    if [ "$1" = compile ]; then
        mkdir -p "$4"
        for f in "$3"/models/*.graph $(find "$3/tests" -name '*.graph'); do
            cp "$f" "$4/$(echo "$f" | tr / _)"
        done
    else
        "$2" "$4.all" >/dev/null && mv "$4.all/$1" "$4" && rm -rf "$4.all"
    fi
}
