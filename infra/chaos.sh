#!/usr/bin/env bash
# The fault harness (infra/chaos) for a while: runs of shale-chaos one after another,
# each with a fresh cluster and a new seed, until the time is up. Every run's seed,
# fault counts and verdict go to the summary; a failed run keeps its data and stops.
#
#   infra/chaos.sh --minutes 60 [--run-seconds 300] [--kafka]   a long run (as root)
#   infra/chaos.sh --ci                                         a few short seeds
#   infra/chaos.sh --seed N --run-seconds S                      replay one seed
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=60
run_seconds=300
seeds=()
kafka=()
features=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --run-seconds) run_seconds=$2; shift 2 ;;
    --seed) seeds+=("$2"); shift 2 ;;
    --kafka) kafka=(--kafka); features=(--features kafka); shift ;;
    --ci)
      # Fixed seeds, so a CI failure can be replayed as it is.
      seeds=(101 202 303); run_seconds=40; minutes=0; kafka=(--kafka); features=(--features kafka)
      shift ;;
    *) echo "chaos.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

infra/test-services.sh                 # PostgreSQL and s3s-fs, started or installed
if [ ${#features[@]} -gt 0 ]; then
  infra/rdkafka-build-deps.sh          # the librdkafka producer (--kafka) builds it
fi
cargo build --locked --bin shale-broker --bin shale
cargo build --locked -p shale-chaos "${features[@]}"
bin=target/debug/shale-chaos
summary=target/chaos-summary.txt
: > "$summary"

run() {
  local seed=$1
  echo "chaos.sh: seed $seed for $run_seconds s" >&2
  if "$bin" --seed "$seed" --seconds "$run_seconds" "${kafka[@]}" > "target/chaos-$seed.log" 2>&1; then
    grep "acknowledged" "target/chaos-$seed.log" | tee -a "$summary"
  else
    cat "target/chaos-$seed.log"
    echo "FAILED seed $seed (log: target/chaos-$seed.log)" | tee -a "$summary"
    return 1
  fi
}

if [ ${#seeds[@]} -gt 0 ]; then
  for s in "${seeds[@]}"; do run "$s"; done
else
  end=$(( $(date +%s) + minutes * 60 ))
  while [ "$(date +%s)" -lt "$end" ]; do
    run "$(( $(date +%s%N) % 1000000007 ))"
  done
fi
echo "chaos.sh: $(grep -vc FAILED "$summary") runs clean; summary in $summary" >&2
