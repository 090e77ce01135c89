#!/usr/bin/env bash
# Makes sure the services the test suite needs are running on this machine:
# PostgreSQL on 127.0.0.1:5432 reachable as user `postgres` without a password.
# Uses a running server; otherwise starts the installed one; otherwise installs it
# with apt-get (as root) and starts it. Idempotent.
set -euo pipefail

PGHOST=127.0.0.1
PGPORT=5432

log() { echo "test-services: $*" >&2; }

pg_ok() {
  command -v psql >/dev/null 2>&1 &&
    psql -h "$PGHOST" -p "$PGPORT" -U postgres -d postgres -Atqc 'select 1' >/dev/null 2>&1
}

start_cluster() {
  local version
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  [ -n "$version" ] || return 1
  if ! pg_lsclusters -h 2>/dev/null | awk '{print $2}' | grep -qx main; then
    pg_createcluster "$version" main >/dev/null
  fi
  # Tests connect over TCP as postgres without a password: allow that on loopback only.
  local hba="/etc/postgresql/$version/main/pg_hba.conf"
  if ! grep -q '^host all postgres 127.0.0.1/32 trust' "$hba"; then
    sed -i '1i host all postgres 127.0.0.1/32 trust\nhost all postgres ::1/128 trust' "$hba"
  fi
  pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null ||
    pg_ctlcluster --skip-systemctl-redirect "$version" main reload 2>/dev/null || true
}

if pg_ok; then
  log "PostgreSQL is running on $PGHOST:$PGPORT"
else
  if ! command -v pg_ctlcluster >/dev/null 2>&1 || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
    log "installing PostgreSQL with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq postgresql postgresql-client >/dev/null
  fi
  log "starting PostgreSQL"
  start_cluster
  for _ in $(seq 1 60); do
    pg_ok && break
    sleep 1
  done
  if ! pg_ok; then
    log "PostgreSQL did not come up on $PGHOST:$PGPORT; see /var/log/postgresql/"
    exit 1
  fi
  log "PostgreSQL is running on $PGHOST:$PGPORT"
fi

# S3: tests start their own s3s-fs processes (so they can stop and kill them); make sure
# the binary is there.
if ! command -v s3s-fs >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/s3s-fs" ]; then
  log "installing s3s-fs (cargo install)"
  cargo install s3s-fs --version 0.14.1 --features binary --locked
fi
log "s3s-fs is installed"
