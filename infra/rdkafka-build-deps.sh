#!/usr/bin/env bash
# What the `rdkafka` crate needs to build librdkafka from source (the bench's and the
# fault harness's `kafka` feature): cmake, a C and C++ compiler, OpenSSL's and
# libcurl's headers (librdkafka's TLS build includes its OIDC client) and pkg-config.
# Installs the missing ones with apt-get (as root).
set -euo pipefail
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
pkg-config --exists openssl 2>/dev/null || missing+=(libssl-dev)
pkg-config --exists libcurl 2>/dev/null || missing+=(libcurl4-openssl-dev)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} with apt-get (librdkafka is built from source)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
