#!/usr/bin/env bash
# The `kafka` scenario: produce, consume, e2e and partition count through librdkafka
# against Shale's Kafka listener (a broker started for it) or any Kafka-protocol broker:
#   bench/kafka.sh [--quick] [--kafka-bootstrap HOST:PORT] [--out DIR]
# Installs what building librdkafka from source needs when missing (cmake, a C++
# compiler, OpenSSL's and libcurl's headers), builds the release binaries with the `kafka` feature,
# runs.
set -euo pipefail
cd "$(dirname "$0")/.."

infra/rdkafka-build-deps.sh
cargo build --release --locked --bin shale-broker --bin shale
cargo build --release --locked -p shale-bench --features kafka
exec target/release/shale-bench kafka "$@"
