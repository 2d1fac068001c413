"""Stopping the processes the local cluster starts (the control plane's and the real
node's), by the handle that started them or by PID, never a reused one."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path


class ProcessStopError(RuntimeError):
    """A process survived SIGKILL."""


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    # The state field follows the ")" that closes the command name.
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system, all its threads) `pid` has used so far; 0 once it
    is gone. What a benchmark charges a component for a span of its work."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0.0
    # utime and stime are fields 14 and 15 of proc(5), the 12th and 13th after the ")"
    # that closes the command name, in clock ticks.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_runs(pid: int, executable: str) -> bool:
    """True if `pid` is alive and runs `executable` (its argv[0]; guards against a reused
    PID)."""
    if not pid_alive(pid):
        return False
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    except OSError:
        return False
    return argv0 == executable


def _gone_within(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def terminate_pid(pid: int, executable: str | None, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`, to this one PID (nothing when it no longer
    runs `executable`)."""
    if executable is not None and not pid_runs(pid, executable):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _gone_within(pid, timeout):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not _gone_within(pid, 5):
        raise ProcessStopError(f"process {pid} ({executable}) survived SIGKILL")


def stop_popen(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM a child started here, SIGKILL after `timeout`, and reap it."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def tail(path: Path, lines: int = 25) -> str:
    """The last `lines` lines of a log, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
