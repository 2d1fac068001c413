#!/usr/bin/env bash
# Build the local Kubernetes control plane used by the integration tests:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, from the
# Go module in this folder (versions pinned in go.mod / go.sum), through the Go
# module proxy. No Docker, no prebuilt binaries.
#
# Binaries go to a cache OUTSIDE the repository:
#   ${SPILLOVER_CONTROLPLANE_CACHE:-$HOME/.cache/spillover-ops/controlplane}/<key>/bin
# where <key> hashes go.mod, go.sum, the wrapper sources, this script and the Go
# version. A complete bin dir for the current key is reused; anything else is rebuilt.
#
# Usage:
#   build.sh                  build if needed, then print the bin dir (last line)
#   build.sh --print-bin-dir  print the bin dir for the current key, build nothing
#   build.sh --check          exit 0 if the bin dir is complete, 1 (naming what is missing) if not
#   build.sh --force          rebuild even if the bin dir is complete
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubelet)

die() { echo "build.sh: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "the 'go' command is not on PATH: install Go (go.mod needs go >= $(sed -n 's/^go //p' "$HERE/go.mod"))"

cache_root="${SPILLOVER_CONTROLPLANE_CACHE:-${HOME:-/root}/.cache/spillover-ops/controlplane}"

compute_key() {
    # Everything that decides what the binaries are: module pins, wrapper sources,
    # build flags (this script) and the compiler.
    {
        (cd "$HERE" && find go.mod go.sum build.sh cmd -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' -o -name 'build.sh' \) | LC_ALL=C sort | xargs sha256sum)
        go env GOVERSION GOOS GOARCH
    } | sha256sum | cut -c1-16
}

key="$(compute_key)"
key_dir="$cache_root/$key"
bin_dir="$key_dir/bin"

missing_binaries() {
    local b out=()
    for b in "${BINARIES[@]}"; do
        [[ -x "$bin_dir/$b" ]] || out+=("$b")
    done
    echo "${out[*]:-}"
}

mode="build"
case "${1:-}" in
    "") ;;
    --print-bin-dir) mode="print" ;;
    --check) mode="check" ;;
    --force) mode="force" ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
esac

if [[ "$mode" == "print" ]]; then
    echo "$bin_dir"
    exit 0
fi
if [[ "$mode" == "check" ]]; then
    m="$(missing_binaries)"
    if [[ -n "$m" ]]; then
        echo "missing in $bin_dir: $m (run: make controlplane)" >&2
        exit 1
    fi
    echo "$bin_dir"
    exit 0
fi

mkdir -p "$key_dir"
# One build per key at a time (parallel make / pytest sessions wait for each other).
exec 9>"$key_dir/.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
fi

if [[ "$mode" != "force" && -z "$(missing_binaries)" && -f "$key_dir/BUILD-INFO" ]]; then
    echo "control plane binaries up to date (key $key)" >&2
    echo "$bin_dir"
    exit 0
fi

cd "$HERE"
export CGO_ENABLED=0
export GOFLAGS="-mod=readonly -buildvcs=false ${GOFLAGS:-}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

k8s_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
kwok_version="$(go list -m -f '{{.Version}}' sigs.k8s.io/kwok)"
etcd_version="$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
k8s_minor="$(echo "$k8s_version" | cut -d. -f2)"

# What `kubectl version` and /version report (upstream sets these from git in its
# own build scripts).
vpkg="k8s.io/component-base/version"
ldflags="-s -w"
ldflags+=" -X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$k8s_minor"
ldflags+=" -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"

echo "building control plane (key $key):" >&2
echo "  kubernetes $k8s_version, etcd $etcd_version, kwok $kwok_version, $(go env GOVERSION)" >&2
echo "  GOMODCACHE=$(go env GOMODCACHE) GOCACHE=$(go env GOCACHE)" >&2

start=$(date +%s)
echo "[1/2] downloading modules (go mod download; nothing if the module cache has them)..." >&2
dl_log="$key_dir/download.log"
if ! go mod download -x >"$dl_log" 2>&1; then
    grep -v '^# get\|^mkdir\|^unzip\|^go: downloading' "$dl_log" | tail -20 >&2
    die "go mod download failed (full output: $dl_log)"
fi
echo "  $(grep -cE '^# get .*\.zip: 200' "$dl_log" || true) module zips fetched" >&2
go mod verify >&2

tmp_bin="$key_dir/bin.tmp.$$"
rm -rf "$tmp_bin"
mkdir -p "$tmp_bin"
trap 'rm -rf "$tmp_bin"' EXIT

echo "[2/2] compiling ${BINARIES[*]} (go build -p ${BUILD_PARALLELISM:-2}); a cold build takes a while..." >&2
# -v prints each package as it is compiled: a sign of progress on a long build.
set +e
go build -p "${BUILD_PARALLELISM:-2}" -v -trimpath -ldflags="$ldflags" -o "$tmp_bin/" ./cmd/... 2>&1 \
    | awk '{n++; if (n % 200 == 0) { printf "  ... %d packages compiled (last: %s)\n", n, $0 > "/dev/stderr"; fflush("/dev/stderr") } }
           END { printf "  %d packages compiled\n", n > "/dev/stderr" }'
status=${PIPESTATUS[0]}
set -e
if [[ $status -ne 0 ]]; then
    # Show the error: re-run without -v (fast: compiled packages are cached).
    go build -p "${BUILD_PARALLELISM:-2}" -trimpath -ldflags="$ldflags" -o "$tmp_bin/" ./cmd/... || true
    die "go build failed (exit $status)"
fi

for b in "${BINARIES[@]}"; do
    [[ -x "$tmp_bin/$b" ]] || die "go build did not produce $b"
done

rm -rf "$bin_dir"
mv "$tmp_bin" "$bin_dir"
trap - EXIT
{
    echo "key=$key"
    echo "kubernetes=$k8s_version"
    echo "etcd=$etcd_version"
    echo "kwok=$kwok_version"
    echo "go=$(go env GOVERSION)"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "seconds=$(( $(date +%s) - start ))"
} > "$key_dir/BUILD-INFO"

echo "built in $(( $(date +%s) - start ))s: $(cd "$bin_dir" && du -sh . | cut -f1) in $bin_dir" >&2
echo "$bin_dir"
