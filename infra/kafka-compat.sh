#!/usr/bin/env bash
# Kafka client compatibility suite: installs the clients a fresh machine lacks, runs the
# bench's librdkafka scenario small, then compat/run.py against the debug binaries (build
# them first: cargo build --workspace --bins).
#
# Clients: kcat and kafka-python 2.0.2 from Debian; confluent-kafka (librdkafka),
# kafka-python 3, pyiceberg and DuckDB from PyPI in a virtualenv; kafkajs from npm. Everything goes under
# $SHALE_COMPAT_CACHE (default target/compat-clients), so a second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${SHALE_COMPAT_CACHE:-$PWD/target/compat-clients}"
VENV="$CACHE/venv"
NODE="$CACHE/node"
log() { echo "kafka-compat: $*" >&2; }

apt_missing=()
command -v kcat >/dev/null 2>&1 || apt_missing+=(kcat)
# Certificates for the security checks.
command -v openssl >/dev/null 2>&1 || apt_missing+=(openssl)
/usr/bin/python3 -c 'import kafka, snappy, lz4, zstandard' >/dev/null 2>&1 ||
  apt_missing+=(python3-kafka python3-snappy python3-lz4 python3-zstandard)
/usr/bin/python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || apt_missing+=(python3-venv)
command -v node >/dev/null 2>&1 || apt_missing+=(nodejs)
command -v npm >/dev/null 2>&1 || apt_missing+=(npm)
if [ ${#apt_missing[@]} -gt 0 ]; then
  log "installing with apt-get: ${apt_missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${apt_missing[@]}" >/dev/null
fi

mkdir -p "$CACHE"
if ! "$VENV/bin/python" -c 'import confluent_kafka, kafka, snappy, lz4, zstandard, pyiceberg, duckdb' >/dev/null 2>&1; then
  log "creating the client virtualenv in $VENV"
  /usr/bin/python3 -m venv "$VENV"
  # pyiceberg (SQL catalog on PostgreSQL, pyarrow) and DuckDB read the topics' tables.
  "$VENV/bin/pip" install -q 'confluent-kafka>=2.6,<3' 'kafka-python>=2.1,<4' \
    lz4 python-snappy zstandard cramjam \
    'pyiceberg[sql-postgres,pyarrow]>=0.9,<1' 'duckdb>=1.1,<2'
fi
if [ ! -f "$NODE/node_modules/kafkajs/package.json" ]; then
  log "installing kafkajs in $NODE"
  mkdir -p "$NODE"
  npm install --silent --no-audit --no-fund --prefix "$NODE" kafkajs@2.2.4 >/dev/null
fi

# What the bench's librdkafka build needs (cmake, a C++ compiler, OpenSSL's and
# libcurl's headers).
infra/rdkafka-build-deps.sh

export SHALE_TEST_POSTGRES_URL="${SHALE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
[ "${1:-}" = "--install-only" ] && exit 0

# The bench's Kafka-client scenario (librdkafka through the `kafka` feature, built from
# source): lint it and run it small, so it keeps working; it fails on any undelivered
# or unread record.
cargo clippy -p shale-bench --features kafka --all-targets --locked -- -D warnings
cargo run -q -p shale-bench --features kafka --locked -- kafka --quick \
  --out target/bench-kafka-quick >/dev/null

exec "$VENV/bin/python" compat/run.py --kafka-python-old /usr/bin/python3 \
  --node-path "$NODE/node_modules" --postgres "$SHALE_TEST_POSTGRES_URL"
