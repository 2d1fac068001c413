"""Which Prometheus the tests run (tests/prometheus/binary.py): the pinned one that
`make prometheus` builds, or one on PATH only if it is the pinned version or newer;
and the server config that tests/prometheus/server.py writes is accepted by it as is.

Versions older than the pin cannot be had on this machine, so those cases use a
stand-in: a shell script named `prometheus` that only answers `--version`
(`_version_stand_in`). Everything else runs the real binary.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
from prometheus.binary import (
    PrometheusBinary,
    PrometheusMissing,
    find_prometheus,
    find_promtool,
    is_recent_enough,
    parse_version,
    pinned_module_version,
    pinned_version,
    release_of_module,
)
from prometheus.server import PrometheusServer, PrometheusStartError, free_port


def _version_stand_in(directory: Path, first_line: str) -> Path:
    """A fake `prometheus` whose only behaviour is printing `first_line` for --version."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "prometheus"
    script.write_text(f"#!/bin/sh\necho '{first_line}'\n", encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture
def nothing_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty build cache and no PROMETHEUS_BIN: as on a machine where `make
    prometheus` never ran."""
    monkeypatch.setenv("SPILLOVER_PROMETHEUS_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("PROMETHEUS_BIN", raising=False)


def _without_prometheus(directory: Path, mirror_root: Path) -> Path:
    """`directory` itself, or (when it holds a `prometheus`) a mirror of it whose
    entries link to the originals, all but `prometheus`. Dropping the directory
    instead would drop what lives beside a system prometheus (`/usr/bin/bash`)."""
    if not (directory / "prometheus").exists():
        return directory
    mirror = mirror_root / f"{len(list(mirror_root.glob('*')))}"
    mirror.mkdir(parents=True)
    for entry in directory.iterdir():
        if entry.name != "prometheus":
            (mirror / entry.name).symlink_to(entry)
    return mirror


def _only_on_path(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    """PATH = `directory` then the rest of PATH with any system prometheus hidden."""
    mirror_root = directory.parent / "path-without-prometheus"
    mirror_root.mkdir(exist_ok=True)
    rest = [
        str(_without_prometheus(Path(p), mirror_root))
        for p in os.environ.get("PATH", "").split(os.pathsep)
        if p
    ]
    monkeypatch.setenv("PATH", os.pathsep.join([str(directory), *rest]))


def test_module_tags_map_to_releases() -> None:
    assert release_of_module("v0.316.0") == "3.16.0"
    assert release_of_module("v0.315.1") == "3.15.1"
    assert release_of_module("v0.300.0") == "3.0.0"
    assert pinned_version() == release_of_module(pinned_module_version())
    with pytest.raises(ValueError, match=r"v2\.53\.0"):
        release_of_module("v2.53.0")


def test_version_order() -> None:
    assert parse_version("prometheus, version 2.42.0+ds (branch: debian/sid)") == (2, 42, 0, 1)
    assert parse_version("prometheus, version 3.16.0-rc.0 (branch: HEAD)") == (3, 16, 0, 0)
    pinned = pinned_version()
    major, minor, patch = (int(x) for x in pinned.split("."))
    assert is_recent_enough(pinned)
    assert is_recent_enough(f"{major}.{minor}.{patch + 1}")
    assert is_recent_enough(f"{major}.{minor + 1}.0")
    assert is_recent_enough(f"{major + 1}.0.0")
    assert not is_recent_enough(f"{pinned}-rc.0")
    assert not is_recent_enough("2.42.0+ds")
    assert not is_recent_enough(f"{major}.{minor - 1}.99")
    assert not is_recent_enough("no version")


def test_the_binary_used_reports_the_pinned_version(prometheus_binary: PrometheusBinary) -> None:
    assert is_recent_enough(prometheus_binary.version)
    out = subprocess.run(
        [prometheus_binary.path, "--version"], capture_output=True, text=True, check=True
    )
    assert f"version {prometheus_binary.version} " in out.stdout + out.stderr
    if prometheus_binary.source == "built by make prometheus":
        assert prometheus_binary.version == pinned_version()


@pytest.mark.usefixtures("nothing_built")
def test_not_built_fails_naming_make_prometheus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _only_on_path(monkeypatch, tmp_path / "empty-bin")
    with pytest.raises(PrometheusMissing, match=r"not built: no .*empty-cache.*make prometheus"):
        find_prometheus()


@pytest.mark.usefixtures("nothing_built")
def test_an_older_prometheus_on_path_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _version_stand_in(tmp_path / "bin", "prometheus, version 2.42.0+ds (branch: debian)")
    _only_on_path(monkeypatch, old.parent)
    with pytest.raises(PrometheusMissing) as caught:
        find_prometheus()
    message = str(caught.value)
    assert f"{old} (PATH) is prometheus 2.42.0+ds, older than the pinned {pinned_version()}" in (
        message
    )
    assert "make prometheus" in message


@pytest.mark.usefixtures("nothing_built")
def test_the_pinned_prometheus_on_path_is_used(
    prometheus_binary: PrometheusBinary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real binary, reached through PATH instead of the build cache."""
    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "prometheus").symlink_to(prometheus_binary.path)
    _only_on_path(monkeypatch, on_path)
    found = find_prometheus()
    assert (found.path, found.source) == (str(on_path / "prometheus"), "PATH")
    assert found.version == prometheus_binary.version
    assert found.describe().endswith(f"PATH; pinned {pinned_version()})")


@pytest.mark.usefixtures("nothing_built")
def test_an_older_prometheus_bin_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _version_stand_in(tmp_path / "bin", "prometheus, version 3.0.1 (branch: HEAD)")
    monkeypatch.setenv("PROMETHEUS_BIN", str(old))
    with pytest.raises(PrometheusMissing, match=r"\$PROMETHEUS_BIN\) is prometheus 3\.0\.1, older"):
        find_prometheus()


def test_promtool_is_built_beside_the_pinned_prometheus(
    prometheus_binary: PrometheusBinary,
) -> None:
    """`make prometheus` builds promtool from the same module: it reports the same
    version and lives in the same bin dir."""
    found = find_promtool()
    assert found.version == prometheus_binary.version
    if prometheus_binary.source == "built by make prometheus":
        assert Path(found.path).parent == Path(prometheus_binary.path).parent
        assert found.source == "built by make prometheus"


@pytest.mark.usefixtures("nothing_built")
def test_promtool_not_built_fails_naming_make_prometheus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROMTOOL_BIN", raising=False)
    _only_on_path(monkeypatch, tmp_path / "empty-bin")
    with pytest.raises(
        PrometheusMissing,
        match=r"promtool 3\.\d+\.\d+ not built: no .*empty-cache.*/promtool; run `make prometheus`",
    ):
        find_promtool()


def _deprecated_flags(binary: str) -> set[str]:
    """The flags `prometheus --help` marks deprecated (`[DEPRECATED]`, `Deprecated:`)."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, check=False)
    help_text = out.stdout + out.stderr
    deprecated: set[str] = set()
    for block in re.split(r"\n(?=\s+(?:-\w, )?--)", help_text):
        name = re.match(r"\s+(?:-\w, )?--(?:\[no-\])?([\w.-]+)", block)
        if name and "deprecat" in block.lower():
            deprecated.add(name.group(1))
    return deprecated


def test_server_uses_no_deprecated_flag_and_its_config_is_in_effect(
    prometheus_binary: PrometheusBinary, tmp_path: Path
) -> None:
    """Retention and log level moved from flags to the config file in Prometheus 3: the
    server passes none of the flags the binary calls deprecated, the config is accepted
    as written and in effect, and nothing is logged at warn level or above at start."""
    deprecated = _deprecated_flags(prometheus_binary.path)
    assert {"storage.tsdb.retention.time", "log.level"} <= deprecated  # the parser works
    with PrometheusServer(
        tmp_path / "prom", [f"127.0.0.1:{free_port()}"], binary=prometheus_binary.path
    ) as server:
        passed = {arg.removeprefix("--").split("=", 1)[0] for arg in server.command()[1:]}
        assert not passed & deprecated
        config = server.api("/api/v1/status/config")
        assert isinstance(config, dict)
        assert "retention:\n      time: 1h" in config["yaml"]
        assert "log_level: warn" in config["yaml"]
        flags = server.api("/api/v1/status/flags")
        assert isinstance(flags, dict)
        assert flags["storage.tsdb.retention.time"] == "1h"  # taken from the config file
        buildinfo = server.api("/api/v1/status/buildinfo")
        assert isinstance(buildinfo, dict)
        assert buildinfo["version"] == prometheus_binary.version
        log = server.log_tail(200)
    assert not re.search(r"level=(WARN|ERROR)", log, re.IGNORECASE), log


def test_a_picked_port_taken_meanwhile_is_picked_again(
    prometheus_binary: PrometheusBinary, tmp_path: Path
) -> None:
    """The port is picked free, then bound by Prometheus a moment later; another process
    (the control plane starts beside it) may take it in between. Seen once in
    `make bench-cluster`: the server then picks another port, and a port the caller
    gave is never changed."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = int(taken.getsockname()[1])
        server = PrometheusServer(
            tmp_path / "prom", [f"127.0.0.1:{free_port()}"], binary=prometheus_binary.path
        )
        server.port = busy  # as if picked free and taken meanwhile
        with server:
            assert server.port != busy
            assert server.api("/api/v1/status/buildinfo")
        given = PrometheusServer(
            tmp_path / "prom2",
            [f"127.0.0.1:{free_port()}"],
            binary=prometheus_binary.path,
            port=busy,
        )
        with pytest.raises(PrometheusStartError, match="address already in use"):
            given.start()
