#!/usr/bin/env bash
# librdkafka's own test suite against a three-broker Shale cluster: fetches the source
# package of Debian's librdkafka (apt-get source, through a private apt list so the
# machine's sources are left alone), builds the library and its test-runner once
# (cached under $SHALE_COMPAT_CACHE, default target/compat-clients), then runs the
# tests listed in compat/librdkafka-tests.txt with compat/librdkafka_suite.py; every
# listed test must pass. Needs the debug binaries (cargo build --workspace --bins) and
# PostgreSQL (infra/test-services.sh).
#
#   infra/librdkafka-suite.sh             run the listed tests
#   infra/librdkafka-suite.sh --discover  try every test that needs a broker
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${SHALE_COMPAT_CACHE:-$PWD/target/compat-clients}"
SRC="$CACHE/librdkafka-src"
log() { echo "librdkafka-suite: $*" >&2; }

missing=()
# rapidjson-dev: test 0098 is compiled only with RapidJSON.
for pkg in liblz4-dev libssl-dev libzstd-dev zlib1g-dev libsasl2-dev dpkg-dev rapidjson-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing build dependencies with apt-get: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

tests_dir() { ls -d "$SRC"/librdkafka-*/tests 2>/dev/null | head -n 1; }

# A cached build from before RapidJSON was installed lacks test 0098: built again.
if [ -z "$(tests_dir)" ] || [ ! -x "$(tests_dir)/test-runner" ] ||
  ! grep -q "define WITH_RAPIDJSON" "$(tests_dir)/../config.h" 2>/dev/null; then
  rm -rf "$SRC"
  mkdir -p "$SRC/apt/lists/partial" "$SRC/apt/parts"
  codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $codename main" \
    > "$SRC/apt/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$SRC/apt/sources.list" -o "Dir::Etc::SourceParts=$SRC/apt/parts"
    -o "Dir::State::Lists=$SRC/apt/lists" -o "APT::Sandbox::User=root")
  log "fetching Debian's librdkafka source package ($codename)"
  apt-get "${apt_opts[@]}" update -qq
  (cd "$SRC" && apt-get "${apt_opts[@]}" source -qq --download-only librdkafka >/dev/null)
  (cd "$SRC" && tar xzf librdkafka_*.orig.tar.gz)
  dir=$(ls -d "$SRC"/librdkafka-*/ | head -n 1)
  log "building librdkafka and its test-runner in $dir (a few minutes)"
  (cd "$dir" && ./configure --disable-gssapi > "$SRC/configure.log" 2>&1 &&
    make -j"$(nproc)" libs > "$SRC/make.log" 2>&1 &&
    make -C tests -j"$(nproc)" build > "$SRC/make-tests.log" 2>&1) || {
    log "build failed; see $SRC/*.log"
    exit 1
  }
fi

# Test 0098's stand-in for Kafka's Java producer runs on confluent-kafka, in the
# compatibility suite's virtualenv.
if ! "$CACHE/venv/bin/python" -c 'import confluent_kafka' >/dev/null 2>&1; then
  infra/kafka-compat.sh --install-only
fi
export SHALE_COMPAT_PYTHON="$CACHE/venv/bin/python"

POSTGRES="${SHALE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
if [ "${1:-}" = "--discover" ]; then
  exec python3 compat/librdkafka_suite.py --tests "$(tests_dir)" --postgres "$POSTGRES" \
    --discover "${2:-target/librdkafka-discover.txt}"
fi
exec python3 compat/librdkafka_suite.py --tests "$(tests_dir)" --postgres "$POSTGRES" \
  --list compat/librdkafka-tests.txt
