#!/usr/bin/env bash
# Build the Prometheus server the tests start on loopback (tests/prometheus/server.py)
# and promtool, which checks and unit-tests the alerting rules (manifests/monitoring/):
# github.com/prometheus/prometheus/cmd/prometheus and cmd/promtool, both from the module
# version pinned in go.mod / go.sum, through the Go module proxy. No root, no apt, no
# prebuilt binary.
#
# Built with -tags remove_all_sd (only the file and http service discoveries; the tests
# use static_configs) and without the web UI's assets (the tests use the HTTP API only).
#
# The binaries go to a cache OUTSIDE the repository:
#   ${SPILLOVER_PROMETHEUS_CACHE:-$HOME/.cache/spillover-ops/prometheus}/<key>/bin/{prometheus,promtool}
# where <key> hashes go.mod, go.sum, this script and the Go version. Binaries for the
# current key are reused; anything else is rebuilt.
#
# Usage:
#   build.sh                  build if needed, then print the bin dir (last line)
#   build.sh --print-bin-dir  print the bin dir for the current key, build nothing
#   build.sh --check          exit 0 if both binaries are built, 1 (saying how to build them) if not
#   build.sh --force          rebuild even if the binaries are built
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CMDS=(prometheus promtool)
PKGS=("github.com/prometheus/prometheus/cmd/prometheus" "github.com/prometheus/prometheus/cmd/promtool")
TAGS="remove_all_sd"

die() { echo "build.sh: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "the 'go' command is not on PATH: install Go (go.mod needs go >= $(sed -n 's/^go //p' "$HERE/go.mod"))"

cache_root="${SPILLOVER_PROMETHEUS_CACHE:-${HOME:-/root}/.cache/spillover-ops/prometheus}"

compute_key() {
    # Everything that decides what the binary is: the module pins, the build flags
    # (this script) and the compiler.
    {
        (cd "$HERE" && sha256sum go.mod go.sum build.sh)
        go env GOVERSION GOOS GOARCH
    } | sha256sum | cut -c1-16
}

key="$(compute_key)"
key_dir="$cache_root/$key"
bin_dir="$key_dir/bin"

built() {
    local cmd
    for cmd in "${CMDS[@]}"; do
        [[ -x "$bin_dir/$cmd" ]] || return 1
    done
    [[ -f "$key_dir/BUILD-INFO" ]]
}
missing() {
    local cmd
    for cmd in "${CMDS[@]}"; do
        [[ -x "$bin_dir/$cmd" ]] || echo "$bin_dir/$cmd"
    done
}

mode="build"
case "${1:-}" in
    "") ;;
    --print-bin-dir) mode="print" ;;
    --check) mode="check" ;;
    --force) mode="force" ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
esac

if [[ "$mode" == "print" ]]; then
    echo "$bin_dir"
    exit 0
fi
if [[ "$mode" == "check" ]]; then
    if ! built; then
        echo "prometheus/promtool not built: no $(missing | paste -sd, -) (run: make prometheus)" >&2
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

if [[ "$mode" != "force" ]] && built; then
    echo "prometheus and promtool up to date (key $key): $(sed -n 's/^prometheus=//p' "$key_dir/BUILD-INFO")" >&2
    echo "$bin_dir"
    exit 0
fi

cd "$HERE"
export CGO_ENABLED=0
export GOFLAGS="-mod=readonly -buildvcs=false ${GOFLAGS:-}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

module_version="$(go list -m -f '{{.Version}}' github.com/prometheus/prometheus)"

echo "building prometheus and promtool (key $key):" >&2
echo "  module github.com/prometheus/prometheus $module_version, $(go env GOVERSION), tags: $TAGS" >&2
echo "  GOMODCACHE=$(go env GOMODCACHE) GOCACHE=$(go env GOCACHE)" >&2

start=$(date +%s)
echo "[1/2] downloading the modules it needs (nothing if the module cache has them)..." >&2
# `go list -deps` fetches only the modules the build needs (not all of go.mod: the
# cloud service discoveries left out by the tags are never downloaded), checked
# against go.sum.
dl_log="$key_dir/download.log"
if ! go list -x -tags "$TAGS" -deps "${PKGS[@]}" >/dev/null 2>"$dl_log"; then
    grep -v '^# get\|^mkdir\|^unzip\|^go: downloading' "$dl_log" | tail -20 >&2
    die "downloading modules failed (full output: $dl_log)"
fi
echo "  $(grep -cE '^# get .*\.zip: 200' "$dl_log" || true) module zips fetched ($(( $(date +%s) - start ))s)" >&2

module_dir="$(go list -m -f '{{.Dir}}' github.com/prometheus/prometheus)"
version="$(tr -d '[:space:]' <"$module_dir/VERSION")"
# Upstream tags Prometheus 3.X.Y as Go module v0.3XX.Y: check the two agree, so the
# version the binary reports is the one pinned.
IFS=. read -r _ mm patch <<<"${module_version#v}"
expected="$((10#$mm / 100)).$((10#$mm % 100)).$patch"
[[ "$version" == "$expected" ]] || die "module $module_version has VERSION $version, expected $expected"

vpkg="github.com/prometheus/common/version"
ldflags="-s -w"
ldflags+=" -X $vpkg.Version=$version -X $vpkg.Revision=$module_version -X $vpkg.Branch=go-module"
ldflags+=" -X $vpkg.BuildUser=spillover-ops -X $vpkg.BuildDate=19700101-00:00:00"

tmp_bin="$key_dir/bin.tmp.$$"
rm -rf "$tmp_bin"
mkdir -p "$tmp_bin"
trap 'rm -rf "$tmp_bin"' EXIT

echo "[2/2] compiling prometheus $version and promtool (go build -p ${BUILD_PARALLELISM:-2}); a cold build takes about 6 min on 2 cores..." >&2
for i in "${!CMDS[@]}"; do
    cmd="${CMDS[$i]}"
    pkg="${PKGS[$i]}"
    echo "  $cmd ($pkg)" >&2
    # -v prints each package as it is compiled: a sign of progress on a long build.
    set +e
    go build -p "${BUILD_PARALLELISM:-2}" -v -trimpath -tags "$TAGS" -ldflags="$ldflags" -o "$tmp_bin/$cmd" "$pkg" 2>&1 \
        | awk '{n++; if (n % 200 == 0) { printf "  ... %d packages compiled (last: %s)\n", n, $0 > "/dev/stderr"; fflush("/dev/stderr") } }
               END { printf "  %d packages compiled\n", n > "/dev/stderr" }'
    status=${PIPESTATUS[0]}
    set -e
    if [[ $status -ne 0 ]]; then
        # Show the error: re-run without -v (fast: compiled packages are cached).
        go build -p "${BUILD_PARALLELISM:-2}" -trimpath -tags "$TAGS" -ldflags="$ldflags" -o "$tmp_bin/$cmd" "$pkg" || true
        die "go build of $cmd failed (exit $status)"
    fi

    # Both report the version the ldflags set: check it is the pinned one.
    reported="$("$tmp_bin/$cmd" --version 2>&1 | head -n 1)"
    [[ "$reported" == *"version $version "* ]] || die "the built $cmd reports '$reported', expected version $version"
done

rm -rf "$bin_dir"
mv "$tmp_bin" "$bin_dir"
trap - EXIT
{
    echo "key=$key"
    echo "prometheus=$version"
    echo "promtool=$version"
    echo "module=github.com/prometheus/prometheus@$module_version"
    echo "tags=$TAGS"
    echo "go=$(go env GOVERSION)"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "seconds=$(( $(date +%s) - start ))"
} > "$key_dir/BUILD-INFO"

echo "built in $(( $(date +%s) - start ))s: prometheus $version ($(du -h "$bin_dir/prometheus" | cut -f1)) and promtool ($(du -h "$bin_dir/promtool" | cut -f1)) in $bin_dir" >&2
echo "$bin_dir"
