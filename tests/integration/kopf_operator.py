"""Shared helper: the real operator (`kopf run -m spillover_operator.main --standalone`)
as a subprocess watching one namespace, stopped by PID on exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def running_operator(
    kubeconfig: Path, namespace: str, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "SPILLOVER_METRICS_PORT": "0"}
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kopf", "run", "-m", "spillover_operator.main",
             "--namespace", namespace, "--standalone"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
