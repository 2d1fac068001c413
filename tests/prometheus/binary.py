"""Which `prometheus` binary the tests run, and why that one.

The pinned version is the one in this folder's go.mod (`github.com/prometheus/prometheus
v0.3XX.Y`, upstream's Go module tag for Prometheus 3.XX.Y). In order:

1. `$PROMETHEUS_BIN`, if set: used, but only if it reports the pinned version or newer.
2. The binary `build.sh` (`make prometheus`) built for the current pins, in
   `~/.cache/spillover-ops/prometheus/<key>/bin/prometheus`.
3. A `prometheus` on PATH reporting the pinned version or newer.

Anything else raises PrometheusMissing, naming what was found and `make prometheus`.
`find_promtool` finds `promtool` (built beside it by the same script) the same way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
GO_MOD = HERE / "go.mod"
HOW_TO_BUILD = "run `make prometheus` (tests/prometheus/build.sh)"

Version = tuple[int, int, int, int]
"""(major, minor, patch, 1 for a release / 0 for a pre-release): compares as versions."""

_MODULE_PIN = re.compile(r"^\s*github\.com/prometheus/prometheus\s+(v\S+)", re.MULTILINE)
_MODULE_VERSION = re.compile(r"^v0\.(\d+)\.(\d+)$")
_REPORTED = re.compile(r"\bversion\s+v?(\d+)\.(\d+)\.(\d+)(\S*)")


class PrometheusMissing(RuntimeError):
    """No usable binary: the message says what was found and how to build one."""


@dataclass(frozen=True)
class PrometheusBinary:
    path: str
    version: str
    """As the binary reports it (`prometheus --version`), e.g. `3.16.0`."""
    source: str
    """How it was chosen: `built by make prometheus`, `PATH` or `$PROMETHEUS_BIN`."""

    def describe(self) -> str:
        return f"{self.path} (version {self.version}, {self.source}; pinned {pinned_version()})"


def pinned_module_version() -> str:
    """The upstream Go module version go.mod pins, e.g. `v0.316.0`."""
    match = _MODULE_PIN.search(GO_MOD.read_text(encoding="utf-8"))
    if match is None:
        raise PrometheusMissing(f"{GO_MOD} does not require github.com/prometheus/prometheus")
    return match.group(1)


def release_of_module(module_version: str) -> str:
    """`v0.316.0` -> `3.16.0`: upstream tags Prometheus X.YY.Z as module v0.(X*100+YY).Z."""
    match = _MODULE_VERSION.match(module_version)
    if match is None:
        raise ValueError(f"not a Prometheus 3.x+ module version: {module_version}")
    minor, patch = int(match.group(1)), int(match.group(2))
    return f"{minor // 100}.{minor % 100}.{patch}"


def pinned_version() -> str:
    """The Prometheus release the tests are pinned to, e.g. `3.16.0`."""
    return release_of_module(pinned_module_version())


def parse_version(text: str) -> Version | None:
    """The version in `prometheus --version` output (`prometheus, version 3.16.0 (...)`)
    or in a bare `3.16.0`; None if there is none. `2.42.0+ds` (Debian) is the 2.42.0
    release; `3.16.0-rc.0` comes before 3.16.0."""
    match = _REPORTED.search(text) or re.match(r"v?(\d+)\.(\d+)\.(\d+)(\S*)", text.strip())
    if match is None:
        return None
    major, minor, patch, suffix = match.groups()
    return (int(major), int(minor), int(patch), 0 if suffix.startswith("-") else 1)


def reported_version(path: str) -> str:
    """What `<path> --version` says its version is; PrometheusMissing if it does not run."""
    try:
        proc = subprocess.run(
            [path, "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise PrometheusMissing(f"{path} --version failed: {exc}; {HOW_TO_BUILD}") from None
    output = (proc.stdout + proc.stderr).strip()
    match = _REPORTED.search(output)
    if proc.returncode != 0 or match is None:
        first = output.splitlines()[0] if output else "no output"
        raise PrometheusMissing(
            f"{path} --version exited {proc.returncode} ({first}), not a working prometheus; "
            f"{HOW_TO_BUILD}"
        )
    major, minor, patch, suffix = match.groups()
    return f"{major}.{minor}.{patch}{suffix}"


def is_recent_enough(version: str) -> bool:
    """The pinned version or newer."""
    found, pinned = parse_version(version), parse_version(pinned_version())
    return found is not None and pinned is not None and found >= pinned


def built_binary() -> Path:
    """Where `build.sh` puts the binary for the current pins (it may not exist yet)."""
    if shutil.which("go") is None:
        raise PrometheusMissing(
            "the 'go' command is not on PATH: it is needed to locate (and build) the "
            f"pinned prometheus {pinned_version()}; install Go, then {HOW_TO_BUILD}"
        )
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-bin-dir"],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise PrometheusMissing(f"{BUILD_SCRIPT} --print-bin-dir failed: {proc.stderr.strip()}")
    return Path(proc.stdout.strip().splitlines()[-1]) / "prometheus"


def _too_old(path: str, source: str, version: str) -> str:
    return f"{path} ({source}) is prometheus {version}, older than the pinned {pinned_version()}"


def find_prometheus() -> PrometheusBinary:
    """The binary the tests run (see the module doc), or PrometheusMissing."""
    explicit = os.environ.get("PROMETHEUS_BIN")
    if explicit:
        version = reported_version(explicit)
        if not is_recent_enough(version):
            raise PrometheusMissing(
                f"{_too_old(explicit, '$PROMETHEUS_BIN', version)}; unset PROMETHEUS_BIN "
                f"or point it at a newer one, or {HOW_TO_BUILD}"
            )
        return PrometheusBinary(explicit, version, "$PROMETHEUS_BIN")
    try:
        built: Path | None = built_binary()
        problem = f"prometheus {pinned_version()} not built: no {built}; {HOW_TO_BUILD}"
    except PrometheusMissing as exc:
        built, problem = None, str(exc)
    if built is not None and os.access(built, os.X_OK):
        # Built from the pins: it reports the pinned version (build.sh checked).
        return PrometheusBinary(
            str(built), reported_version(str(built)), "built by make prometheus"
        )
    on_path = shutil.which("prometheus")
    if on_path:
        try:
            version = reported_version(on_path)
        except PrometheusMissing as exc:
            problem += f" (the prometheus on PATH does not run: {exc})"
        else:
            if is_recent_enough(version):
                return PrometheusBinary(on_path, version, "PATH")
            problem += f" (the one on PATH will not do: {_too_old(on_path, 'PATH', version)})"
    raise PrometheusMissing(problem)


def find_promtool() -> PrometheusBinary:
    """The `promtool` the rule tests run: from the same pinned module as the server, so
    the rules are checked by the code that will evaluate them. In order:
    `$PROMTOOL_BIN` (the pinned version or newer), the one `build.sh` built next to the
    pinned `prometheus`, a `promtool` on PATH (the pinned version or newer). Anything
    else raises PrometheusMissing naming `make prometheus`."""
    explicit = os.environ.get("PROMTOOL_BIN")
    if explicit:
        version = reported_version(explicit)
        if not is_recent_enough(version):
            raise PrometheusMissing(
                f"{explicit} ($PROMTOOL_BIN) is promtool {version}, older than the pinned "
                f"{pinned_version()}; unset PROMTOOL_BIN or point it at a newer one, or "
                f"{HOW_TO_BUILD}"
            )
        return PrometheusBinary(explicit, version, "$PROMTOOL_BIN")
    try:
        built: Path | None = built_binary().parent / "promtool"
        problem = f"promtool {pinned_version()} not built: no {built}; {HOW_TO_BUILD}"
    except PrometheusMissing as exc:
        built, problem = None, str(exc)
    if built is not None and os.access(built, os.X_OK):
        return PrometheusBinary(
            str(built), reported_version(str(built)), "built by make prometheus"
        )
    on_path = shutil.which("promtool")
    if on_path:
        try:
            version = reported_version(on_path)
        except PrometheusMissing as exc:
            problem += f" (the promtool on PATH does not run: {exc})"
        else:
            if is_recent_enough(version):
                return PrometheusBinary(on_path, version, "PATH")
            problem += (
                f" (the one on PATH will not do: {on_path} is promtool {version}, older "
                f"than the pinned {pinned_version()})"
            )
    raise PrometheusMissing(problem)
