#!/usr/bin/env bash
# Install what a real node and the operator image need on this host, from Debian's
# packages, where missing: containerd, runc and the CNI plugins (the node's container
# runtime), iptables (the node's one NAT rule) and nftables (to remove the empty tables
# iptables-nft leaves behind), podman (builds and runs images) and
# mmdebstrap (makes a Debian base image when none can be pulled).
#
# Installs nothing that is already there. Installing needs root (CI runs as root); as
# another user with something missing it fails, naming the command to run.
#
# Usage:
#   setup-host.sh            install what is missing, then list what is there
#   setup-host.sh --check    exit 0 if everything is there, 1 naming what is missing
set -euo pipefail

# command -> Debian package
declare -A PACKAGE_OF=(
    [containerd]=containerd
    [runc]=runc
    [/usr/lib/cni/bridge]=containernetworking-plugins
    [iptables]=iptables
    [nft]=nftables
    [podman]=podman
    [mmdebstrap]=mmdebstrap
)

have() {
    if [[ "$1" == /* ]]; then [[ -x "$1" ]]; else command -v "$1" >/dev/null 2>&1; fi
}

missing_packages() {
    local cmd out=()
    for cmd in "${!PACKAGE_OF[@]}"; do
        have "$cmd" || out+=("${PACKAGE_OF[$cmd]}")
    done
    printf '%s\n' "${out[@]}" | sort -u | tr '\n' ' ' | sed 's/ $//'
}

missing="$(missing_packages)"
if [[ "${1:-}" == "--check" ]]; then
    if [[ -n "$missing" ]]; then
        echo "missing Debian packages: $missing (run: make host-deps, as root)" >&2
        exit 1
    fi
    exit 0
fi
if [[ -n "${1:-}" ]]; then
    echo "setup-host.sh: unknown argument: $1 (see the header of $0)" >&2
    exit 2
fi

if [[ -n "$missing" ]]; then
    if [[ "$(id -u)" != 0 ]]; then
        echo "setup-host.sh: missing Debian packages: $missing; installing them needs root:" >&2
        echo "  sudo make host-deps   (or: sudo apt-get install $missing)" >&2
        exit 1
    fi
    command -v apt-get >/dev/null 2>&1 || {
        echo "setup-host.sh: no apt-get on this host: install $missing by hand" >&2
        exit 1
    }
    echo "installing from Debian's packages: $missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    # Quiet unless it fails; the log stays for a look.
    log="$(mktemp -t spillover-host-deps.XXXXXX.log)"
    # policy-rc.d: a package's own service (containerd's) is not started by the install;
    # the tests start what they need and stop it again.
    rc_created=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        rc_created=1
    fi
    status=0
    { apt-get update && apt-get install -y --no-install-recommends $missing; } >"$log" 2>&1 || status=$?
    [[ $rc_created == 1 ]] && rm -f /usr/sbin/policy-rc.d
    if [[ $status != 0 ]]; then
        tail -20 "$log" >&2
        echo "setup-host.sh: apt-get failed (exit $status; full log: $log)" >&2
        exit 1
    fi
    rm -f "$log"
    again="$(missing_packages)"
    if [[ -n "$again" ]]; then
        echo "setup-host.sh: still missing after the install: $again" >&2
        exit 1
    fi
fi
# Debian's containerd package may have started its service anyway (no policy-rc.d on
# some hosts): the real node runs its own containerd with its own state.
echo "host: containerd $(containerd --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}'), podman $(podman --version | awk '{print $3}'), $(iptables --version)" >&2
