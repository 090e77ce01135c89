#!/usr/bin/env bash
# Browser tests of the console: installs Debian's Chromium and chromedriver when they are
# missing, then drives the console of a real broker (on a real S3 server) headless.
# Screenshots of every page land in target/console-screenshots. Build the binaries first
# (cargo build --workspace --bins) and install s3s-fs (infra/test-services.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "console-tests: $*" >&2; }

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  log "installing chromium and chromium-driver with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium chromium-driver >/dev/null
fi
exec /usr/bin/python3 compat/console_tests.py "$@"
