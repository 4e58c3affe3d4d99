#!/bin/sh
# tcpdump for tests/e2e/test_curve.py's loopback capture (Debian/Ubuntu; run as root).
set -e
if command -v tcpdump >/dev/null 2>&1; then exit 0; fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tcpdump
