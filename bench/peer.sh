#!/usr/bin/env bash
# The `peer` scenario: the same librdkafka cases against a Shale broker and against
# Tansu (a Kafka-compatible broker in Rust) with its memory engine and with its
# durable SQLite engine, interleaved in one run, on this machine:
#   bench/peer.sh [--quick] [--out DIR]
# Installs what it needs when missing: librdkafka's build tools and Tansu
# (`cargo install tansu`, with its SQLite engine, about 15 minutes). Tansu's
# PostgreSQL engine needs a schema its crate does not ship, and its S3 engine (tried
# against s3s-fs) delivered no record to a consumer waiting at the log end, so the
# durable peer is SQLite (a database file on the same disk as Shale's log).
set -euo pipefail
cd "$(dirname "$0")/.."

TANSU_VERSION=0.6.0
MEMORY_PORT=${TANSU_MEMORY_PORT:-19092}
SQLITE_PORT=${TANSU_SQLITE_PORT:-19093}

infra/rdkafka-build-deps.sh
# A tansu built with its memory engine (`dynostore`) and its SQLite one (`libsql`):
# a build without them refuses memory:// and sqlite:// URLs (cargo's record of
# installed crates says which it has).
if ! python3 - "$TANSU_VERSION" <<'PY'
import json, os, sys
path = os.path.join(os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo")), ".crates2.json")
installs = json.load(open(path))["installs"] if os.path.exists(path) else {}
sys.exit(0 if any(k.startswith(f"tansu {sys.argv[1]} ")
                  and {"dynostore", "libsql"} <= set(v.get("features", []))
                  for k, v in installs.items()) else 1)
PY
then
  echo "peer bench: installing tansu $TANSU_VERSION with its memory and SQLite engines" >&2
  cargo install tansu --version "$TANSU_VERSION" --locked --features dynostore,libsql
fi
cargo build --release --locked --bin shale-broker --bin shale
cargo build --release --locked -p shale-bench --features kafka

logs=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$logs"
}
trap cleanup EXIT
start_tansu() {
  local name=$1 port=$2 engine=$3
  # In the run's directory: tansu opens sqlite://FILE relative to where it runs.
  (cd "$logs" && exec tansu broker --listener-url "tcp://127.0.0.1:$port" \
    --advertised-listener-url "tcp://127.0.0.1:$port" \
    --storage-engine "$engine" --silent > "$logs/$name.log" 2>&1) &
  pids+=($!)
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "peer bench: tansu ($name) did not listen on $port; its log:" >&2
  cat "$logs/$name.log" >&2
  exit 1
}
start_tansu memory "$MEMORY_PORT" "memory://tansu/"
start_tansu sqlite "$SQLITE_PORT" "sqlite://tansu.db"

target/release/shale-bench peer \
  --peer "tansu-memory=127.0.0.1:$MEMORY_PORT" \
  --peer "tansu-sqlite=127.0.0.1:$SQLITE_PORT" "$@"
