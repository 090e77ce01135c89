#!/usr/bin/env bash
# Local development stack without Docker: PostgreSQL (metastore), s3s-fs (an S3-protocol
# server) and one shale-broker, all on loopback. State lives in ./shale-dev.
#
#   infra/dev-stack.sh start    # build, start everything, print how to reach it
#   infra/dev-stack.sh stop
#
# Ports: broker gRPC 127.0.0.1:9093, Kafka 127.0.0.1:9092 and the console (HTTP)
# 127.0.0.1:9644, S3 127.0.0.1:8014, PostgreSQL 127.0.0.1:5432. Binaries come from
# $CARGO_TARGET_DIR/release (./target/release by default). A start that fails stops
# what it started.
set -euo pipefail
cd "$(dirname "$0")/.."

DEV=./shale-dev
S3_PORT=${SHALE_DEV_S3_PORT:-8014}
BROKER=${SHALE_DEV_LISTEN:-127.0.0.1:9093}
KAFKA=${SHALE_DEV_KAFKA_LISTEN:-127.0.0.1:9092}
HTTP=${SHALE_DEV_HTTP_LISTEN:-127.0.0.1:9644}
BIN=${CARGO_TARGET_DIR:-./target}/release
ACCESS_KEY=shale-dev
SECRET_KEY=shale-dev-secret

stop() {
  for name in broker s3s-fs; do
    if [ -f "$DEV/$name.pid" ]; then
      kill "$(cat "$DEV/$name.pid")" 2>/dev/null || true
      rm -f "$DEV/$name.pid"
    fi
  done
  echo "dev stack stopped"
}

# Fails, after stopping what this start began.
fail() {
  echo "$1" >&2
  [ -f "$2" ] && tail -5 "$2" >&2
  stop >/dev/null
  exit 1
}

start() {
  for name in broker s3s-fs; do
    if [ -f "$DEV/$name.pid" ] && kill -0 "$(cat "$DEV/$name.pid")" 2>/dev/null; then
      echo "the dev stack is running ($name, pid $(cat "$DEV/$name.pid")): $0 stop first" >&2
      exit 1
    fi
  done
  mkdir -p "$DEV/s3/shale" "$DEV/data"
  infra/test-services.sh
  psql -h 127.0.0.1 -U postgres -d postgres -Atqc "select 1 from pg_database where datname = 'shale'" | grep -q 1 ||
    psql -h 127.0.0.1 -U postgres -d postgres -qc "create database shale"
  cargo build --release --bin shale-broker --bin shale
  S3S=$(command -v s3s-fs || echo "$HOME/.cargo/bin/s3s-fs")
  "$S3S" --host 127.0.0.1 --port "$S3_PORT" --access-key "$ACCESS_KEY" --secret-key "$SECRET_KEY" "$DEV/s3" \
    >"$DEV/s3s-fs.log" 2>&1 &
  echo $! >"$DEV/s3s-fs.pid"
  for _ in $(seq 1 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$S3_PORT") 2>/dev/null && break
    sleep 0.1
  done
  if ! kill -0 "$(cat "$DEV/s3s-fs.pid")" 2>/dev/null; then
    fail "s3s-fs did not start (port $S3_PORT taken?); see $DEV/s3s-fs.log" "$DEV/s3s-fs.log"
  fi
  cat >"$DEV/shale.toml" <<TOML
[broker]
listen = "$BROKER"
data_dir = "$DEV/data"
metastore_url = "postgres://postgres@127.0.0.1:5432/shale"
object_store_url = "s3://shale/dev"

[object_store]
endpoint = "http://127.0.0.1:$S3_PORT"
region = "us-east-1"
path_style = true
allow_http = true
access_key_id = "$ACCESS_KEY"
secret_access_key = "$SECRET_KEY"

[listeners.kafka]
listen = "$KAFKA"

[listeners.http]
listen = "$HTTP"
TOML
  "$BIN/shale-broker" --config "$DEV/shale.toml" >"$DEV/broker.log" 2>&1 &
  echo $! >"$DEV/broker.pid"
  # Ready when *this* process says so: another broker answering on the port (one
  # started earlier) must not pass for ours.
  local pid
  pid=$(cat "$DEV/broker.pid")
  for _ in $(seq 1 300); do
    grep -q "shale-broker ready" "$DEV/broker.log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if ! kill -0 "$pid" 2>/dev/null || ! grep -q "shale-broker ready" "$DEV/broker.log"; then
    fail "broker did not start; see $DEV/broker.log" "$DEV/broker.log"
  fi
  echo "dev stack up: broker $BROKER (Kafka clients: $KAFKA), console http://$HTTP/, S3 http://127.0.0.1:$S3_PORT (bucket 'shale'), metastore postgres://postgres@127.0.0.1:5432/shale"
  echo "logs in $DEV/*.log; try: $BIN/shale --bootstrap $BROKER topic create demo --partitions 3"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
