#!/usr/bin/env bash
# The `kafka` scenario: produce, consume, e2e and partition count through librdkafka
# against Shale's Kafka listener (a broker started for it) or any Kafka-protocol broker:
#   bench/kafka.sh [--quick] [--kafka-bootstrap HOST:PORT] [--out DIR]
# Installs librdkafka-dev and pkg-config with apt-get when missing (the bench links
# librdkafka dynamically), builds the release binaries with the `kafka` feature, runs.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! pkg-config --exists 'rdkafka >= 1.9.2' 2>/dev/null; then
  echo "kafka bench: installing librdkafka-dev and pkg-config with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq librdkafka-dev pkg-config >/dev/null
fi
cargo build --release --locked --bin shale-broker --bin shale
cargo build --release --locked -p shale-bench --features kafka
exec target/release/shale-bench kafka "$@"
