"""The real operator for the integration tests: `kopf run -m spillover_operator.main
--standalone --namespace NS` as a child process with a given kubeconfig.

- `OperatorProcess.start()` picks free loopback ports for kopf's liveness endpoint and
  the operator's metrics, starts the process (log: `<log_dir>/<name>-<run>.log`, one
  file per start, `run` counting the starts) and waits until `/healthz` answers.
- `check_alive()` fails the test with the log's tail as soon as the process has exited;
  `wait_for(..., operator=op)` (k8s_helpers) calls it on every poll.
- `stop()` stops it by its own PID: SIGTERM, then SIGKILL after 30 s. `start()` again
  is a restart (a new log file).
- `metric(name, **labels)` reads one sample from its /metrics.
- `running_operator(...)` is the context-manager form: started on entry, checked to be
  still alive on a normal exit, stopped in every case.
- `allowed_targets` is its SPILLOVER_ALLOWED_TARGETS: by default the names the tests
  give their WRC Deployment (the operator refuses any other target); `extra_env` any
  other setting (the refresh allow-list SPILLOVER_REFRESH_DEPLOYMENTS/STATEFULSETS).
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from k8s_helpers import free_port, wait_for
from prometheus_client.parser import text_string_to_metric_families

START_TIMEOUT_S = 60.0
# The WRC Deployment names the integration tests use (SPILLOVER_ALLOWED_TARGETS).
TEST_ALLOWED_TARGETS = "workflow-recipe-controller,wrc"
STOP_TIMEOUT_S = 30.0


@dataclass
class OperatorProcess:
    """`kopf run` for one namespace, as a child process (stopped by its own PID)."""

    namespace: str
    kubeconfig: Path
    log_dir: Path
    name: str = "operator"
    resync_seconds: float | None = None  # SPILLOVER_RESYNC_SECONDS; None = the default
    allowed_targets: str = TEST_ALLOWED_TARGETS  # SPILLOVER_ALLOWED_TARGETS
    # More settings (SPILLOVER_REFRESH_DEPLOYMENTS/STATEFULSETS: the refresh allow-list).
    extra_env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    health_port: int = 0
    metrics_port: int = 0
    runs: int = 0  # how many times it was started

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}-{self.runs}.log"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "kopf", "run", "--standalone",
            f"--namespace={self.namespace}",
            f"--liveness=http://127.0.0.1:{self.health_port}/healthz",
            "-m", "spillover_operator.main",
        ]  # fmt: skip

    def start(self) -> OperatorProcess:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"the operator ({self.log_path}) is already running")
        self.runs += 1
        self.health_port, self.metrics_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env.update(
            KUBECONFIG=str(self.kubeconfig),
            SPILLOVER_METRICS_PORT=str(self.metrics_port),
            # /livez (liveness.py) has a fixed port in the pod; here, one of its own.
            SPILLOVER_LIVENESS_PORT=str(free_port()),
            PYTHONUNBUFFERED="1",
            SPILLOVER_ALLOWED_TARGETS=self.allowed_targets,
        )
        env.update(self.extra_env)
        if self.resync_seconds is not None:
            env["SPILLOVER_RESYNC_SECONDS"] = f"{self.resync_seconds:g}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.command(),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.log_dir,
            )
        wait_for(
            "the operator's liveness endpoint", self.healthy, timeout=START_TIMEOUT_S, operator=self
        )
        return self

    def check_alive(self) -> None:
        """Fail the test, with the log's tail, if the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            pytest.fail(
                f"the operator exited with {self.proc.returncode} "
                f"({self.log_path}):\n{self.log_tail()}",
                pytrace=False,
            )

    def healthy(self) -> bool:
        self.check_alive()
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/healthz", timeout=2
            ) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no operator log)"
        return "\n".join(text[-lines:])

    def metric(self, name: str, **labels: str) -> float:
        """The value of one sample on the operator's /metrics (0 if absent; summed over
        the series matching `labels`)."""
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as resp:
            text = resp.read().decode()
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    total += sample.value
        return total


@contextmanager
def running_operator(
    kubeconfig: Path,
    namespace: str,
    log_dir: Path,
    *,
    name: str = "operator",
    resync_seconds: float | None = None,
    allowed_targets: str = TEST_ALLOWED_TARGETS,
) -> Iterator[OperatorProcess]:
    """The operator running for the block; it must still run when the block ends."""
    op = OperatorProcess(
        namespace,
        kubeconfig,
        log_dir,
        name=name,
        resync_seconds=resync_seconds,
        allowed_targets=allowed_targets,
    )
    try:
        op.start()
        yield op
        op.check_alive()
    finally:
        op.stop()
