# shellcheck shell=bash
# The end-to-end scripts' way to say they cannot run here: the shell side of perfclock-testutil's
# `skip` (crates/perfclock-testutil/src/skip.rs), reading the same require variables. Source it.
#
# perfclock_skip NEED WHAT WHY
#   NEED is one of perf, root, mount, tools, kernel_mode, calibrated_mode, x86_64, cpu_features,
#   sparse_files. When PERFCLOCK_REQUIRE_<NEED> is set to anything but
#   empty or 0, prints why WHAT fails on stderr and exits 1. Otherwise prints
#   `SKIPPED WHAT: needs NEED: WHY` on stderr (never stdout), appends it to the file
#   $PERFCLOCK_SKIP_LOG names, if set, and exits 77: a skip is never an exit status of 0.
# perfclock_need_tools WHAT TOOL...
#   perfclock_skip tools for the first TOOL not on PATH.

perfclock_skip() {
    local need=$1 what=$2 why=$3 variable name
    local -a names=("PERFCLOCK_REQUIRE_${need^^}")
    why=${why//$'\n'/ | }
    for name in "${names[@]}"; do
        variable=${!name:-}
        if [ -n "$variable" ] && [ "$variable" != 0 ]; then
            echo "$what: needs $need, which $name requires here, but: $why" >&2
            exit 1
        fi
    done
    echo "SKIPPED $what: needs $need: $why" >&2
    if [ -n "${PERFCLOCK_SKIP_LOG:-}" ]; then
        echo "SKIPPED $what: needs $need: $why" >>"$PERFCLOCK_SKIP_LOG"
    fi
    exit 77
}

perfclock_need_tools() {
    local what=$1 tool
    shift
    for tool in "$@"; do
        command -v "$tool" >/dev/null || perfclock_skip tools "$what" "the \`$tool\` command is not on PATH"
    done
}
