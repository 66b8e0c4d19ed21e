#!/bin/sh
# dryrun.sh — kept for old notes: the dry run is now part of run.sh
# (sh tests/gpu/run.sh --dry-run: sm_90 and 140 GiB assumed, the build real,
# nothing run, the budgets printed, "total budget: N s" last).
exec sh "$(dirname "$0")/run.sh" --dry-run
