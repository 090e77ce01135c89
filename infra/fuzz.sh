#!/usr/bin/env bash
# The decoders' fuzz tests for longer than CI runs them: the structure-aware ones
# (records/src/fuzz_tests.rs and kafka/src/fuzz_tests.rs, over the mutations of
# records/src/fuzzing.rs) and the random-byte ones (the
# batch, frame and old-Produce property tests), round after round with fresh random
# seeds and many more cases, until the time is up. A failing case is shrunk and
# printed, and proptest keeps it in the crate's proptest-regressions/ so later runs
# try it first.
#
#   infra/fuzz.sh                 10 minutes
#   infra/fuzz.sh --minutes 60
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=10
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    *) echo "usage: infra/fuzz.sh [--minutes N]" >&2; exit 2 ;;
  esac
done

filter='test(/fuzz_tests|arbitrary|corruption|old_produce_takes_any_body/)'
cargo nextest run -p shale-records -p shale-kafka --locked --no-run
end=$(( $(date +%s) + minutes * 60 ))
round=0
while [ "$(date +%s)" -lt "$end" ]; do
  round=$((round + 1))
  echo "fuzz: round $round ($(( (end - $(date +%s)) / 60 )) min left)"
  PROPTEST_CASES="${PROPTEST_CASES:-50000}" \
    cargo nextest run -p shale-records -p shale-kafka --locked -E "$filter" \
    --status-level fail --final-status-level fail
done
echo "fuzz: $round rounds, no failure"
