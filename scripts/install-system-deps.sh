#!/usr/bin/env bash
# System packages the tests start for real: redis-server (and sentinel, redis-cli), openssl, and
# Debian's chromium for the admin browser tests (driven by Playwright; no 'playwright install').
set -euo pipefail
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-sentinel >/dev/null || missing+=(redis-sentinel)
command -v redis-cli >/dev/null || missing+=(redis-tools)
command -v openssl >/dev/null || missing+=(openssl)  # the TLS fixtures make a CA and a server certificate
command -v chromium >/dev/null || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "Please install: ${missing[*]} (Debian: apt-get install ${missing[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
