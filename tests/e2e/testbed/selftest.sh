#!/usr/bin/env bash
# The test bed's own negative control: with the first reading of every bracket skewed
# SKEW_NS ahead of the kernel's stamp (TESTBED_SELFTEST_SKEW_NS on the guest's kernel command
# line, read by perfclock-testbed) the guest must FAIL, and for that reason only: the self-test
# announced itself (the skew reached the guest), the guest ran to its end, and its brackets and
# jitdump checks report violations. A run that passes, is skipped (exit 2), times out or fails
# for another reason fails this script.
#
#   tests/e2e/testbed/selftest.sh [ARCH]      (default x86_64; needs what tests/e2e/testbed/run.sh needs)
#
# Environment: as tests/e2e/testbed/run.sh; SKEW_NS (default 1000000).
set -uo pipefail
cd "$(dirname "$0")/../../.."
arch=${1:-x86_64}
skew_ns=${SKEW_NS:-1000000}
log=$(mktemp "${TMPDIR:-/tmp}/perfclock-testbed-selftest.XXXXXX")
trap 'rm -f "$log"' EXIT

fail() { echo "testbed-selftest: FAIL: $*" >&2; exit 1; }

PERFCLOCK_TESTBED_APPEND="${PERFCLOCK_TESTBED_APPEND:-} TESTBED_SELFTEST_SKEW_NS=$skew_ns" \
    bash tests/e2e/testbed/run.sh "$arch" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
[ "$status" = 1 ] || fail "tests/e2e/testbed/run.sh exited $status with first readings skewed by $skew_ns ns, not 1 (a failed check)"
grep -qF "[$arch] TESTBED INFO self-test: first readings skewed by +$skew_ns ns" "$log" ||
    fail "the guest did not announce the skew: TESTBED_SELFTEST_SKEW_NS did not reach it"
grep -qxF "[$arch] TESTBED-DONE fail" "$log" || fail "the guest did not run to its end"
for check in brackets jitdump; do
    grep -qE "^\[$arch\] TESTBED FAIL $check .*violations=[1-9]" "$log" ||
        fail "no '$check' failure with violations: the skew went unnoticed, or the run failed for another reason"
done
echo "testbed-selftest: the skewed guest failed its brackets and jitdump checks with violations, as it must"
