#!/usr/bin/env bash
# A local 3-broker cluster without Docker: one PostgreSQL database (metastore), one
# s3s-fs (S3-protocol server) and three shale-broker processes on loopback, each with
# its own id, port and data directory. State lives in ./shale-cluster.
#
#   infra/cluster.sh start          # build, start everything, print how to reach it
#   infra/cluster.sh status         # brokers, controller, liveness
#   infra/cluster.sh kill N         # SIGKILL broker N (1-3), to watch a fail-over
#   infra/cluster.sh start-broker N # start broker N again
#   infra/cluster.sh stop           # stop everything (state is kept)
#
# Ports: brokers 127.0.0.1:9093, :9193, :9293 (gRPC) and :9092, :9192, :9292 (Kafka);
# S3 127.0.0.1:8015; PostgreSQL :5432.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=./shale-cluster
S3_PORT=${SHALE_CLUSTER_S3_PORT:-8015}
ACCESS_KEY=shale-cluster
SECRET_KEY=shale-cluster-secret
DB=shale_cluster
BOOTSTRAP=127.0.0.1:9093,127.0.0.1:9193,127.0.0.1:9293
BIN=${CARGO_TARGET_DIR:-./target}/release
KAFKA_BOOTSTRAP=127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292

port_of() { echo $((9093 + 100 * ($1 - 1))); }

wait_port() {
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

start_broker() {
  local id=$1 port
  port=$(port_of "$id")
  mkdir -p "$DIR/broker-$id"
  local log="$DIR/broker-$id.log" from pid
  touch "$log"
  from=$(($(wc -c <"$log") + 1))
  "$BIN/shale-broker" --config "$DIR/shale.toml" --broker-id "$id" \
    --listen "127.0.0.1:$port" --kafka-listen "127.0.0.1:$((port - 1))" --data-dir "$DIR/broker-$id" >>"$log" 2>&1 &
  echo $! >"$DIR/broker-$id.pid"
  pid=$(cat "$DIR/broker-$id.pid")
  # Ready when *this* process says so in its log: another process answering on the
  # port must not pass for it.
  for _ in $(seq 1 300); do
    tail -c +"$from" "$log" | grep -q "shale-broker ready" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if ! kill -0 "$pid" 2>/dev/null || ! tail -c +"$from" "$log" | grep -q "shale-broker ready"; then
    echo "broker $id did not start; see $log" >&2
    tail -5 "$log" >&2
    rm -f "$DIR/broker-$id.pid"
    exit 1
  fi
  echo "broker $id on 127.0.0.1:$port, Kafka on 127.0.0.1:$((port - 1)) (pid $(cat "$DIR/broker-$id.pid"))"
}

stop_pid() {
  if [ -f "$1" ]; then
    kill "$(cat "$1")" 2>/dev/null || true
    rm -f "$1"
  fi
}

start() {
  mkdir -p "$DIR/s3/shale"
  infra/test-services.sh
  psql -h 127.0.0.1 -U postgres -d postgres -Atqc "select 1 from pg_database where datname = '$DB'" | grep -q 1 ||
    psql -h 127.0.0.1 -U postgres -d postgres -qc "create database $DB"
  cargo build --release --bin shale-broker --bin shale
  S3S=$(command -v s3s-fs || echo "$HOME/.cargo/bin/s3s-fs")
  "$S3S" --host 127.0.0.1 --port "$S3_PORT" --access-key "$ACCESS_KEY" --secret-key "$SECRET_KEY" "$DIR/s3" \
    >"$DIR/s3s-fs.log" 2>&1 &
  echo $! >"$DIR/s3s-fs.pid"
  wait_port "$S3_PORT"
  cat >"$DIR/shale.toml" <<TOML
[broker]
metastore_url = "postgres://postgres@127.0.0.1:5432/$DB"
object_store_url = "s3://shale/cluster"

[cluster]
default_replication_factor = 3

[topic_defaults]
"min.insync.replicas" = 2

[object_store]
endpoint = "http://127.0.0.1:$S3_PORT"
region = "us-east-1"
path_style = true
allow_http = true
access_key_id = "$ACCESS_KEY"
secret_access_key = "$SECRET_KEY"
TOML
  for id in 1 2 3; do start_broker "$id"; done
  echo "cluster up: --bootstrap $BOOTSTRAP (S3 http://127.0.0.1:$S3_PORT, metastore postgres://postgres@127.0.0.1:5432/$DB)"
  echo "try: $BIN/shale --bootstrap $BOOTSTRAP topic create demo --partitions 3"
  echo "Kafka clients: bootstrap.servers=$KAFKA_BOOTSTRAP (e.g. kcat -L -b $KAFKA_BOOTSTRAP)"
}

stop() {
  for id in 1 2 3; do stop_pid "$DIR/broker-$id.pid"; done
  stop_pid "$DIR/s3s-fs.pid"
  echo "cluster stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) "$BIN/shale" --bootstrap "$BOOTSTRAP" cluster status ;;
  kill)
    kill -9 "$(cat "$DIR/broker-${2:?broker id}.pid")"
    rm -f "$DIR/broker-$2.pid"
    echo "broker $2 killed"
    ;;
  start-broker) start_broker "${2:?broker id}" ;;
  *) echo "usage: $0 start|stop|status|kill N|start-broker N" >&2; exit 2 ;;
esac
