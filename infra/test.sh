#!/usr/bin/env bash
# The whole test suite, as CI runs it: services, formatting, lints, build, tests.
set -euo pipefail
cd "$(dirname "$0")/.."

infra/test-services.sh
export SHALE_TEST_POSTGRES_URL="${SHALE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
# One build, run once: incremental compilation's caches would only take disk (about 8 GB).
export CARGO_INCREMENTAL=0

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Integration tests drive the real binaries (`shale-broker` and `shale`): build them all.
cargo build --workspace --bins --locked

if ! command -v cargo-nextest >/dev/null 2>&1; then
  cargo install cargo-nextest --locked
fi
cargo nextest run --workspace --locked --profile ci

# The README's walkthrough: a copy of part of a bucket restored and replayed elsewhere.
infra/bucket-replay.sh

# Kafka clients (kcat, librdkafka, kafka-python, kafkajs) against real brokers; installs them.
infra/kafka-compat.sh
# librdkafka's own test suite (from Debian's source package, built once) against a cluster.
infra/librdkafka-suite.sh
# The console in headless Chromium (installs chromium and chromium-driver).
infra/console-tests.sh
# The fault harness on fixed seeds (root: network namespaces, cgroups).
infra/chaos.sh --ci
