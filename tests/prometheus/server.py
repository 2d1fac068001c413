"""A real Prometheus server for the tests, on loopback.

`PrometheusServer` writes a config that scrapes the given targets at a
sub-second interval, starts `prometheus` on 127.0.0.1:<free port> with its TSDB
in a temporary directory, waits for `/-/ready`, and stops it by PID (SIGTERM,
then SIGKILL if it does not exit). The binary is the pinned Prometheus 3.x that
`make prometheus` builds (tests/prometheus/binary.py says which one is used).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from prometheus.binary import PrometheusBinary, PrometheusMissing, find_prometheus

__all__ = [
    "PrometheusBinary",
    "PrometheusMissing",
    "PrometheusServer",
    "PrometheusStartError",
    "file_targets",
    "find_prometheus",
    "free_port",
    "render_config",
    "write_file_targets",
]


class PrometheusStartError(RuntimeError):
    """Prometheus did not become ready; the message carries the tail of its log."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def render_config(
    targets: Sequence[str],
    *,
    scrape_interval_s: float,
    job: str = "mcp-host",
    labels: Mapping[str, str] | None = None,
    proxy_url: str | None = None,
    honor_labels: bool = False,
    rule_files: Sequence[str] = (),
    evaluation_interval_s: float = 10.0,
    discovery: Mapping[str, object] | None = None,
    extra_scrape_configs: Sequence[Mapping[str, object]] = (),
) -> str:
    """A prometheus.yml (JSON is valid YAML) scraping `targets` (host:port) at the interval
    (through the HTTP proxy `proxy_url` when given: the targets' addresses are then what
    the proxy is asked for, as for pods only the cluster's network reaches).

    `honor_labels`: a scraped series' own label wins over a target label of the same
    name (as a PodMonitor's `honorLabels: true`). `rule_files` are loaded and evaluated
    every `evaluation_interval_s`. `discovery`: scrape-config fields that find the targets
    instead of the static list (`file_targets`). `extra_scrape_configs`: more jobs,
    as Prometheus takes them (another target kind, e.g. the kubelet's cAdvisor).

    Retention and log level are set here, not by flag: Prometheus 3 deprecates
    `--storage.tsdb.retention.time` and `--log.level` for these config fields.
    """
    interval = _duration(scrape_interval_s)
    scrape: dict[str, object] = {
        "job_name": job,
        "scrape_interval": interval,
        "scrape_timeout": interval,
        "metrics_path": "/metrics",
        "static_configs": [{"targets": list(targets), "labels": dict(labels or {})}],
    }
    if discovery is not None:
        del scrape["static_configs"]
        scrape.update(discovery)
    if proxy_url is not None:
        scrape["proxy_url"] = proxy_url
    if honor_labels:
        scrape["honor_labels"] = True
    config: dict[str, object] = {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": _duration(evaluation_interval_s),
        },
        "runtime": {"log_level": "warn"},
        "storage": {"tsdb": {"retention": {"time": "1h"}}},
        "scrape_configs": [scrape, *(dict(c) for c in extra_scrape_configs)],
    }
    if rule_files:
        config["rule_files"] = [str(f) for f in rule_files]
    return json.dumps(config, indent=2) + "\n"


def file_targets(path: Path) -> dict[str, object]:
    """Scrape-config fields that take the targets from `path` (file_sd: a JSON list of
    `{"targets": [...], "labels": {...}}`), re-read when it changes. For targets that
    come and go (pods replaced by every rollout), written by whoever follows them; the
    binary is built without the Kubernetes discovery (`remove_all_sd`, build.sh)."""
    return {"file_sd_configs": [{"files": [str(path)], "refresh_interval": "1s"}]}


def write_file_targets(path: Path, groups: Sequence[Mapping[str, object]]) -> None:
    """Replace `path`'s target groups atomically (Prometheus never reads half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(list(groups), indent=1), encoding="utf-8")
    os.replace(tmp, path)


class PrometheusServer:
    """One Prometheus process. Use as a context manager, or start()/stop()."""

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[str],
        *,
        scrape_interval_s: float = 0.2,
        job: str = "mcp-host",
        labels: Mapping[str, str] | None = None,
        binary: str | None = None,
        port: int | None = None,
        proxy_url: str | None = None,
        honor_labels: bool = False,
        rule_files: Sequence[str] = (),
        evaluation_interval_s: float = 10.0,
        discovery: Mapping[str, object] | None = None,
        extra_scrape_configs: Sequence[Mapping[str, object]] = (),
    ) -> None:
        self.workdir = Path(workdir)
        self.targets = list(targets)
        self.scrape_interval_s = scrape_interval_s
        self.job = job
        self.labels = dict(labels or {})
        self.proxy_url = proxy_url
        self.honor_labels = honor_labels
        self.rule_files = [str(f) for f in rule_files]
        self.evaluation_interval_s = evaluation_interval_s
        self.discovery = dict(discovery) if discovery is not None else None
        self.extra_scrape_configs = [dict(c) for c in extra_scrape_configs]
        self.binary = binary or find_prometheus().path
        self.port = port or free_port()
        self._chosen_port = port is None
        self.process: subprocess.Popen[bytes] | None = None
        self.config_path = self.workdir / "prometheus.yml"
        self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def command(self) -> list[str]:
        """The command line; everything else is in the config file (render_config)."""
        return [
            self.binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]

    def start(self, timeout_s: float = 60.0) -> PrometheusServer:
        """Start and wait until ready. A free port picked here can be taken by another
        process before Prometheus binds it (the control plane starts beside it): then
        another port, up to three times."""
        for attempt in range(3):
            try:
                return self._start_once(timeout_s)
            except PrometheusStartError as exc:
                if not self._chosen_port or "address already in use" not in str(exc):
                    raise
                if attempt == 2:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _start_once(self, timeout_s: float) -> PrometheusServer:
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError(f"prometheus already running (pid {self.process.pid})")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            render_config(
                self.targets,
                scrape_interval_s=self.scrape_interval_s,
                job=self.job,
                labels=self.labels,
                proxy_url=self.proxy_url,
                honor_labels=self.honor_labels,
                rule_files=self.rule_files,
                evaluation_interval_s=self.evaluation_interval_s,
                discovery=self.discovery,
                extra_scrape_configs=self.extra_scrape_configs,
            ),
            encoding="utf-8",
        )
        log = self.log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        finally:
            log.close()
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise PrometheusStartError(
                    f"prometheus exited with {self.process.returncode} before it was ready:\n"
                    + self.log_tail()
                )
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp,
            ):
                if resp.status == 200:
                    return
            time.sleep(0.1)
        raise PrometheusStartError(
            f"prometheus not ready on {self.url} after {timeout_s}s:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop this process by its PID: SIGTERM, then SIGKILL after `timeout_s`."""
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=timeout_s)
        self.process = None

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def api(self, path: str, **params: str) -> object:
        """GET an API path (`/api/v1/targets`) and return its `data`."""
        query = urllib.parse.urlencode(params)
        url = f"{self.url}{path}" + (f"?{query}" if query else "")
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read().decode("utf-8"))
        if body.get("status") != "success":
            raise RuntimeError(f"{url}: {body}")
        return body["data"]

    def wait_for_targets_up(self, timeout_s: float = 30.0, expected: int | None = None) -> None:
        """Until every configured target (`expected` of them: discovered targets) has been
        scraped successfully at least once."""
        want = len(self.targets) if expected is None else expected
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            try:
                data = self.api("/api/v1/targets")
            except (OSError, urllib.error.URLError, RuntimeError) as exc:
                last = exc
            else:
                assert isinstance(data, dict)
                active = data.get("activeTargets", [])
                last = [(t.get("scrapeUrl"), t.get("health"), t.get("lastError")) for t in active]
                if len(active) == want and all(t.get("health") == "up" for t in active):
                    return
            time.sleep(self.scrape_interval_s / 2)
        raise PrometheusStartError(f"targets not up after {timeout_s}s: {last}")

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
