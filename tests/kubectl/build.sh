#!/usr/bin/env bash
# Build kubectl from the pinned k8s.io/kubernetes module (go.mod here: the same version
# as the control plane's, ../controlplane/go.mod; a test holds them equal), through the
# Go module proxy. The tests and the make targets use this kubectl whatever the machine
# has: a machine's own kubectl may sit outside the supported version skew.
#
# Kept apart from the control plane build: it is one binary, so `make unit` (which
# renders the manifests with `kubectl kustomize`) does not wait for the whole control
# plane.
#
# The binary goes to a cache OUTSIDE the repository:
#   ${SPILLOVER_KUBECTL_CACHE:-$HOME/.cache/spillover-ops/kubectl}/<key>/bin/kubectl
# where <key> hashes go.mod, go.sum, this script and the Go version.
#
# Usage:
#   build.sh                  build if needed, then print the bin dir (last line)
#   build.sh --print-bin-dir  print the bin dir for the current key, build nothing
#   build.sh --check          exit 0 if kubectl is built, 1 (naming the fix) if not
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

die() { echo "tests/kubectl/build.sh: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "the 'go' command is not on PATH: install Go (go.mod needs go >= $(sed -n 's/^go //p' "$HERE/go.mod"))"

cache_root="${SPILLOVER_KUBECTL_CACHE:-${HOME:-/root}/.cache/spillover-ops/kubectl}"
key="$( { (cd "$HERE" && sha256sum go.mod go.sum build.sh); GOTOOLCHAIN=local go env GOVERSION GOOS GOARCH; } | sha256sum | cut -c1-16)"
key_dir="$cache_root/$key"
bin_dir="$key_dir/bin"

case "${1:-}" in
    "") ;;
    --print-bin-dir) echo "$bin_dir"; exit 0 ;;
    --check)
        [[ -x "$bin_dir/kubectl" ]] || { echo "no kubectl in $bin_dir (run: make kubectl)" >&2; exit 1; }
        echo "$bin_dir"; exit 0 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
esac

mkdir -p "$key_dir"
# One build per key at a time (parallel make / pytest sessions wait for each other).
exec 9>"$key_dir/.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
fi
if [[ -x "$bin_dir/kubectl" && -f "$key_dir/BUILD-INFO" ]]; then
    echo "kubectl up to date (key $key)" >&2
    echo "$bin_dir"
    exit 0
fi

cd "$HERE"
export CGO_ENABLED=0
export GOFLAGS="-mod=readonly -buildvcs=false ${GOFLAGS:-}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
k8s_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
k8s_minor="$(echo "$k8s_version" | cut -d. -f2)"
# What `kubectl version --client` reports (upstream sets these from git).
vpkg="k8s.io/component-base/version"
ldflags="-s -w"
ldflags+=" -X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$k8s_minor"
ldflags+=" -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"

echo "building kubectl $k8s_version ($(go env GOVERSION)); a cold build takes a few minutes..." >&2
start=$(date +%s)
go mod download >&2 || die "go mod download failed"
go mod verify >&2
tmp_bin="$key_dir/bin.tmp.$$"
rm -rf "$tmp_bin"
mkdir -p "$tmp_bin"
trap 'rm -rf "$tmp_bin"' EXIT
go build -p "${BUILD_PARALLELISM:-2}" -trimpath -ldflags="$ldflags" -o "$tmp_bin/kubectl" \
    k8s.io/kubernetes/cmd/kubectl || die "go build of kubectl failed"
rm -rf "$bin_dir"
mv "$tmp_bin" "$bin_dir"
trap - EXIT
{
    echo "key=$key"
    echo "kubernetes=$k8s_version"
    echo "go=$(go env GOVERSION)"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "seconds=$(( $(date +%s) - start ))"
} > "$key_dir/BUILD-INFO"
echo "kubectl built in $(( $(date +%s) - start ))s" >&2
echo "$bin_dir"
