#!/usr/bin/env bash
# The laptop walkthrough of the README ("Replaying a copy of a bucket"), end to end:
# a "production" broker writes a tiered topic to one S3 server; part of its bucket (the
# newer half of each partition's segments, and the `_shale/` snapshots) is copied to a
# second S3 server, as one would copy it to a laptop; a broker there, on a fresh
# embedded metastore, restores the topic from that copy with `shale cluster restore`
# and replays it from its first offset. Checks every replayed record against what
# production wrote at that offset. Both S3 servers are s3s-fs on loopback.
#
#   infra/bucket-replay.sh          # run by infra/test.sh; about 30 s
#
# Binaries come from $SHALE_BIN (default ./target/debug, built by the test command).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${SHALE_BIN:-${CARGO_TARGET_DIR:-./target}/debug}
for b in shale shale-broker; do
  [ -x "$BIN/$b" ] || { echo "$BIN/$b is missing: cargo build --workspace --bins" >&2; exit 1; }
done
S3S=$(command -v s3s-fs || echo "$HOME/.cargo/bin/s3s-fs")
[ -x "$S3S" ] || { echo "s3s-fs is missing: run infra/test-services.sh" >&2; exit 1; }

WORK=$(mktemp -d)
# Processes are started inside $(...), a subshell: their pids go to a file.
cleanup() {
  if [ -f "$WORK/pids" ]; then
    while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$WORK/pids"
    while read -r pid; do
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    done <"$WORK/pids"
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'echo "bucket-replay.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on $1" >&2
  exit 1
}

# An S3 server ($1: name) with one bucket ($2); prints its port.
s3() {
  local p
  p=$(port)
  mkdir -p "$WORK/$1/$2"
  "$S3S" --host 127.0.0.1 --port "$p" --access-key walk --secret-key walk-secret "$WORK/$1" \
    >"$WORK/$1.log" 2>&1 &
  echo $! >>"$WORK/pids"
  wait_port "$p"
  echo "$p"
}

# A broker ($1: name) on the embedded metastore and S3 server port $2, bucket $3;
# prints its gRPC address.
broker() {
  local grpc http
  grpc=127.0.0.1:$(port)
  http=127.0.0.1:$(port)
  cat >"$WORK/$1.toml" <<TOML
[object_store]
endpoint = "http://127.0.0.1:$2"
region = "us-east-1"
path_style = true
allow_http = true
access_key_id = "walk"
secret_access_key = "walk-secret"

[tiering]
upload_interval_ms = 200
snapshot_interval_ms = 500
TOML
  "$BIN/shale-broker" --config "$WORK/$1.toml" --data-dir "$WORK/$1-data" --listen "$grpc" \
    --http-listen "$http" --object-store-url "s3://$3/logs" >"$WORK/$1-broker.log" 2>&1 &
  echo $! >>"$WORK/pids"
  wait_port "${grpc#*:}"
  echo "$grpc"
}

PROD_S3=$(s3 prod-s3 prod)
PROD=$(broker prod "$PROD_S3" prod)
shale_prod() { "$BIN/shale" --bootstrap "$PROD" "$@"; }
shale_prod topic create events --partitions 2 --replication-factor 1 \
  --config remote.storage.enable=true --config segment.bytes=16384 >/dev/null
sleep 1 # the new partitions' leaders take the lead
seq -f 'event-%06g' 1 20000 | shale_prod produce events --acks all --batch-size 2048 >/dev/null
echo "production wrote 20000 records; waiting for the bucket and the snapshot"
OBJECTS=$WORK/prod-s3/prod/logs
for _ in $(seq 1 300); do
  uploaded=$( (find "$OBJECTS" -name '*.meta' 2>/dev/null || true) | wc -l)
  snapshot=$( (find "$OBJECTS/_shale/clusters" -name '*.json' 2>/dev/null || true) | wc -l)
  [ "$uploaded" -ge 20 ] && [ "$snapshot" -ge 1 ] && break
  sleep 0.2
done
[ "$uploaded" -ge 20 ] || { echo "only $uploaded segments reached the bucket" >&2; exit 1; }
sleep 1 # the last uploads and the snapshot after them
shale_prod consume events --from-beginning --exit -f '%p %o %s\n' | sort >"$WORK/production.txt"

# The copy: the snapshots, and the newer half of each partition's segments (all three
# objects of each). With MinIO or S3 this would be `mc mirror` or `aws s3 sync` of the
# chosen keys; s3s-fs keeps objects as files, so a file copy does.
COPY=$WORK/laptop-s3/laptop/logs
mkdir -p "$COPY"
cp -a "$OBJECTS/_shale" "$COPY/"
for dir in "$OBJECTS"/*/*/; do
  case "$dir" in */_shale/*) continue ;; esac
  rel=${dir#"$OBJECTS"/}
  mapfile -t stems < <(find "$dir" -maxdepth 1 -name '*.meta' -printf '%f\n' | sed 's/\.meta$//' | sort)
  half=$(( ${#stems[@]} / 2 ))
  mkdir -p "$COPY/$rel"
  for stem in "${stems[@]:$half}"; do
    cp -a "$dir$stem".* "$COPY/$rel"
  done
done
echo "copied $(find "$COPY" -name '*.meta' | wc -l) of $uploaded segments"

# The laptop: its own S3 server holding the copy, and a broker with a fresh metastore.
LAPTOP_S3=$(s3 laptop-s3 laptop)
LAPTOP=$(broker laptop "$LAPTOP_S3" laptop)
shale_laptop() { "$BIN/shale" --bootstrap "$LAPTOP" "$@"; }
# --force: production's brokers, which run on, wrote the copied snapshots moments ago.
shale_laptop cluster restore --from s3://laptop/logs --replication-factor 1 --force
for _ in $(seq 1 100); do
  shale_laptop topic describe events >/dev/null 2>&1 && break
  sleep 0.1
done
shale_laptop consume events --from-beginning --exit -f '%p %o %s\n' | sort >"$WORK/replayed.txt"

# Every replayed record is production's record at that offset, and each partition's
# replay starts at its first copied segment and runs to the copy's end.
replayed=$(wc -l <"$WORK/replayed.txt")
[ "$replayed" -gt 0 ] || { echo "nothing was replayed" >&2; exit 1; }
missing=$(comm -23 "$WORK/replayed.txt" "$WORK/production.txt" | wc -l)
[ "$missing" -eq 0 ] || {
  echo "$missing replayed records differ from production's:" >&2
  comm -23 "$WORK/replayed.txt" "$WORK/production.txt" | awk 'NR <= 5' >&2
  exit 1
}
for p in 0 1; do
  # (awk and tail read to the end: `head` would end a pipe early, and pipefail fail it)
  first=$(find "$COPY"/*/"$p" -name '*.meta' -printf '%f\n' | sort | awk 'NR == 1' | cut -d- -f1)
  last=$(find "$COPY"/*/"$p" -name '*.meta' -printf '%f\n' | sort | tail -1 | cut -d- -f2)
  want=$(( 10#$last - 10#$first + 1 ))
  got=$(awk -v p="$p" '$1 == p' "$WORK/replayed.txt" | wc -l)
  from=$(awk -v p="$p" '$1 == p && (min == "" || $2 < min) {min = $2} END {print min}' "$WORK/replayed.txt")
  [ "$got" -eq "$want" ] && [ "$from" -eq $((10#$first)) ] || {
    echo "partition $p: replayed $got records from $from, the copy holds $want from $((10#$first))" >&2
    exit 1
  }
done
echo "bucket replay: $replayed records replayed on the laptop from a copy of part of the bucket, each at its production offset"
