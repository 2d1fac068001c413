#!/usr/bin/env bash
# Install the Prometheus server the tests start on loopback (tests/prometheus/server.py).
#
# Debian's `prometheus` package, nothing downloaded from elsewhere. Idempotent:
# does nothing when `prometheus --version` already works. Needs root (CI runs as root).
#
# The package's own service is never wanted here: the tests start their own
# server on 127.0.0.1:<free port>. We forbid maintainer scripts from starting
# services (policy-rc.d exit 101 for the duration of the install), and if a
# packaged daemon is running anyway (a machine with systemd), stop and disable it.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1 && prometheus --version >/dev/null 2>&1; then
    echo "prometheus already installed: $(prometheus --version 2>&1 | head -n 1)"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "tests/prometheus/install.sh: needs root to apt-get install prometheus" >&2
    exit 1
fi

policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# installed by tests/prometheus/install.sh for the duration of an install\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    created_policy=1
fi
cleanup() {
    if [ "$created_policy" -eq 1 ]; then rm -f "$policy"; fi
}
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends prometheus

# A systemd machine may have enabled the unit; the tests never want it.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi

prometheus --version 2>&1 | head -n 1
