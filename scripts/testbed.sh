#!/usr/bin/env bash
# The real-kernel test bed's usual name; the proof itself is tests/e2e/testbed/run.sh.
exec bash "$(dirname "$0")/../tests/e2e/testbed/run.sh" "$@"
