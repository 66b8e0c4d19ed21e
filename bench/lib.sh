# bench/lib.sh — sourced by the bench scripts (from the repository root):
# their common arguments and the --record step.

# bench_args STEPS ROUNDS "$@": parses [--record] [BUILD_DIR] [STEPS] [ROUNDS]
# (STEPS, ROUNDS: the script's defaults) into record (0 or 1), build, steps
# and rounds, and makes tmp, a directory removed at exit.
bench_args() {
    steps=$1 rounds=$2
    shift 2
    record=0
    if [ "${1:-}" = "--record" ]; then
        record=1
        shift
    fi
    build=${1:-build} steps=${2:-$steps} rounds=${3:-$rounds}
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
}

# bench_record SCRIPT NOTE FILE: under --record, appends to bench/RESULTS.md a
# section headed by the script, the date and the machine (and NOTE, if any),
# the command line, and FILE as a code block.
bench_record() {
    [ "$record" = 1 ] || return 0
    {
        printf '\n## bench/%s — %s, %s cores (%s)%s\n\n' "$1" "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(nproc)" \
            "$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)" "${2:+; $2}"
        printf '`sh bench/%s --record %s %s %s`\n\n```\n' "$1" "$build" "$steps" "$rounds"
        cat "$3"
        printf '```\n'
    } >>bench/RESULTS.md
    echo "appended to bench/RESULTS.md"
}
