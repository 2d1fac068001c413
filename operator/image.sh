#!/usr/bin/env bash
# Build the operator image (operator/Dockerfile, context operator/) with podman or
# docker, whichever is present (podman first; IMAGE_TOOL=docker to choose).
#
# The base is BASE_IMAGE (default docker.io/library/python:3.11-slim). Where it is not in
# the local store and cannot be pulled (no registry reachable), a base is made from
# Debian's packages instead (mmdebstrap: bookworm, python3, python3-venv, python3-pip),
# imported as DEBIAN_BASE (default localhost/spillover-debian-base:bookworm) and reused
# after that; the script says so.
#
# The image installs operator/requirements.lock (the repository's pins, `make lock`). Its
# SBOM (CycloneDX 1.5 JSON: the base's Debian packages, the locked Python packages, the
# operator) is written beside the image, in
# ${SPILLOVER_IMAGE_CACHE:-~/.cache/spillover-ops/image}/<tag, / and : made _>.cdx.json,
# by tools/image_sbom.py with .venv's Python (cyclonedx-python-lib; `make install`).
#
# Usage: image.sh [TAG]      (default localhost/spillover-operator:dev)
# Env:   IMAGE_TOOL, BASE_IMAGE, DEBIAN_BASE, DEBIAN_SUITE (bookworm), PIP_CERT (a CA
#        bundle for pip inside the build; default: the host's, where it has one),
#        SBOM_PYTHON (default: the repository's .venv/bin/python)
# Prints the image's tag (last line), how much it adds above its base and the SBOM's path.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
TAG="${1:-localhost/spillover-operator:dev}"
BASE_IMAGE="${BASE_IMAGE:-docker.io/library/python:3.11-slim}"
DEBIAN_BASE="${DEBIAN_BASE:-localhost/spillover-debian-base:bookworm}"
DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"

die() { echo "image.sh: $*" >&2; exit 1; }

tool="${IMAGE_TOOL:-}"
if [[ -z "$tool" ]]; then
    if command -v podman >/dev/null 2>&1; then tool=podman
    elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then tool=docker
    else die "neither podman nor a running docker found: run 'make host-deps' (as root) to install podman"
    fi
fi
command -v "$tool" >/dev/null 2>&1 || die "IMAGE_TOOL=$tool is not on PATH"
SBOM_PYTHON="${SBOM_PYTHON:-$REPO/.venv/bin/python}"
[[ -x "$SBOM_PYTHON" ]] || die "no $SBOM_PYTHON to write the image's SBOM with: run 'make install' (or set SBOM_PYTHON)"

build_flags=()
if [[ "$tool" == podman ]]; then
    # crun refuses the cgroup v1 hybrid hierarchy some hosts have; runc runs on both.
    command -v runc >/dev/null 2>&1 && build_flags+=(--runtime runc)
    # The host's network for RUN steps: no bridge, iptables chains or sysctls left behind.
    build_flags+=(--network host)
fi

present() { "$tool" image inspect "$1" >/dev/null 2>&1; }

base="$BASE_IMAGE"
if ! present "$base"; then
    echo "base image $base: not in the local store, pulling..." >&2
    if ! "$tool" pull --quiet "$base" >/dev/null 2>"${TMPDIR:-/tmp}/spillover-pull.err"; then
        echo "  cannot pull $base ($(tail -1 "${TMPDIR:-/tmp}/spillover-pull.err" | cut -c1-160))" >&2
        base="$DEBIAN_BASE"
        if present "$base"; then
            echo "  using the base made earlier from Debian's packages: $base" >&2
        else
            command -v mmdebstrap >/dev/null 2>&1 || die "no mmdebstrap to make a base from Debian's packages: run 'make host-deps' (as root), or set BASE_IMAGE to an image you have"
            [[ "$(id -u)" == 0 ]] || die "making a base from Debian's packages needs root (mmdebstrap); set BASE_IMAGE to an image you have"
            echo "  making $base from Debian's packages (mmdebstrap $DEBIAN_SUITE, minbase + python3; about 90 s)..." >&2
            tarball="$(mktemp -t spillover-base.XXXXXX.tar)"
            trap 'rm -f "$tarball"' EXIT
            mmdebstrap --quiet --mode=root --variant=minbase \
                --include=python3,python3-venv,python3-pip \
                --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
                "$DEBIAN_SUITE" "$tarball" >&2 || die "mmdebstrap failed"
            "$tool" import --quiet --change 'CMD ["python3"]' "$tarball" "$base" >/dev/null
            rm -f "$tarball"
            trap - EXIT
            echo "  made $base" >&2
        fi
    fi
fi

if [[ -z "${PIP_CERT+set}" && -f /etc/ssl/certs/ca-certificates.crt ]]; then
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
fi
if [[ -n "${PIP_CERT:-}" ]]; then
    [[ -f "$PIP_CERT" ]] || die "PIP_CERT=$PIP_CERT is not a file"
    if [[ "$tool" == podman ]]; then
        build_flags+=(-v "$PIP_CERT:/run/spillover-build-ca.crt:ro" --build-arg PIP_CERT=/run/spillover-build-ca.crt)
    fi
fi

echo "building $TAG with $tool on $base..." >&2
start=$(date +%s)
"$tool" build "${build_flags[@]}" --build-arg "BASE_IMAGE=$base" \
    -f "$HERE/Dockerfile" -t "$TAG" "$HERE" >&2 \
    || die "$tool build failed (see above)"

size_of() { "$tool" image inspect --format '{{.Size}}' "$1"; }
added=$(( $(size_of "$TAG") - $(size_of "$base") ))
echo "built $TAG in $(( $(date +%s) - start ))s: $(( added / 1000000 )) MB above $base" >&2
"$SBOM_PYTHON" "$REPO/tools/image_sbom.py" --tool "$tool" --image "$TAG" \
    --lock "$HERE/requirements.lock" >&2 || die "the SBOM of $TAG failed (see above)"
echo "$TAG"
