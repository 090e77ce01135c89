#!/usr/bin/env bash
# Browser tests of the console: installs Debian's Chromium, chromedriver and Firefox ESR
# when they are missing, then drives the console of a real broker (on a real S3 server)
# headless in both. Screenshots of every page land in target/console-screenshots/{chromium,
# firefox}. Build the binaries first
# (cargo build --workspace --bins) and install s3s-fs (infra/test-services.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "console-tests: $*" >&2; }

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v firefox-esr >/dev/null 2>&1 || missing+=(firefox-esr)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing with apt-get: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
exec /usr/bin/python3 compat/console_tests.py "$@"
