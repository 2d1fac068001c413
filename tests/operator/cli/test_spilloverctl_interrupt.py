"""Ctrl-C on the real `spilloverctl` console script, from its first moments to a request
the API server does not answer: exit 130, one line, never a traceback. An operator
flipping the kill switch during an incident may well press it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from console_interrupts import interrupted_after, interrupted_in_site, launcher_hint
from spillover_operator.exit_codes import INTERRUPTED

EXE = str(Path(sys.executable).parent / "spilloverctl")


@pytest.fixture
def silent_api(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose server accepts connections and never answers: the command
    stays in its first request until it is interrupted."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    port = server.getsockname()[1]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "ns"}}],
        "current-context": "x",
    }  # fmt: skip
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    try:
        yield path
    finally:
        server.close()


def _loaded(pid: int, library: str) -> bool:
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("after_s", [0.0, 0.02, 0.05, 0.1, 0.5])
def test_ctrl_c_at_any_moment_is_an_interruption_without_a_traceback(
    after_s: float, silent_api: Path
) -> None:
    """SIGINT once the command's modules are loading (json's compiled part is mapped:
    that import happens inside `main`'s try), then later, into the unanswered request."""
    env = {**os.environ, "KUBECONFIG": str(silent_api)}
    proc = subprocess.Popen(
        [EXE, "kill", "--reason", "test"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # the child must get Python's default SIGINT handler whatever this process has
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        while not _loaded(proc.pid, "_json"):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "spilloverctl never loaded json"
            time.sleep(0.001)
        time.sleep(after_s)
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in err, err
    assert proc.returncode == INTERRUPTED, out + err
    assert "interrupted" in err, err


LAUNCHER_HINT = launcher_hint(EXE)


@pytest.mark.parametrize("after_s", [0.02, 0.05, 0.1])
def test_ctrl_c_soon_after_the_command_starts_is_an_interruption(
    after_s: float, silent_api: Path
) -> None:
    """SIGINT a fixed time after the real console script was started, as an operator's
    Ctrl-C lands: at 0.02 s Python may still be starting, before any of the project's
    code can catch it (pip's own script printed a traceback there about half the time).
    The launcher holds it back until `main`'s try: exit 130, no traceback."""
    code, out, err = interrupted_after(
        [EXE, "kill", "--reason", "test"],
        after_s,
        timeout=60,
        env={**os.environ, "KUBECONFIG": str(silent_api)},
    )
    assert "Traceback" not in err, f"{LAUNCHER_HINT}\n{err}"
    assert code == INTERRUPTED, f"{LAUNCHER_HINT}\n{out}{err}"


def test_ctrl_c_while_python_imports_site_is_an_interruption(tmp_path: Path) -> None:
    """The moment the timed test can only hope to hit, every time: SIGINT while Python
    imports `site` (a sitecustomize sends it), before the console script's first line.
    pip's own script ended there in "Fatal Python error" and a traceback."""
    proc = interrupted_in_site([EXE, "--help"], tmp_path, timeout=60)
    assert "Traceback" not in proc.stderr, f"{LAUNCHER_HINT}\n{proc.stderr}"
    assert proc.returncode == INTERRUPTED, f"{LAUNCHER_HINT}\n{proc.stdout}{proc.stderr}"
    assert proc.stderr == "spilloverctl: interrupted while starting; nothing was sent\n"
