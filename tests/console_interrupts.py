"""Ctrl-C sent to a real console script (spillover-harness, spilloverctl) as a user's
lands: the child's SIGINT set back to its default first, so the tests do not depend on
how the suite was launched. One place for both CLIs' interrupt tests."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def sigint_as_a_terminal_leaves_it() -> None:
    """The child's SIGINT before exec: the default action, not blocked, whatever this
    process has (a suite started as a background job ignores it). Ignored or blocked, a
    Ctrl-C test would pass whatever the console script does."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def launcher_hint(exe: str) -> str:
    return f"is {exe} the launcher `make install` writes? (`make launchers`)"


def interrupted_after(
    argv: Sequence[str], after_s: float, *, timeout: float, env: Mapping[str, str] | None = None
) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `argv` sent SIGINT `after_s` after it started."""
    proc = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=None if env is None else dict(env),
        preexec_fn=sigint_as_a_terminal_leaves_it,
    )  # fmt: skip
    try:
        time.sleep(after_s)
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def interrupted_in_site(
    argv: Sequence[str], tmp_path: Path, *, timeout: float
) -> subprocess.CompletedProcess[str]:
    """`argv` run with a sitecustomize that sends SIGINT while Python imports `site`,
    before the console script's first line."""
    (tmp_path / "sitecustomize.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\n"
    )
    path = [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
    return subprocess.run(
        list(argv),
        capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        preexec_fn=sigint_as_a_terminal_leaves_it,
    )  # fmt: skip
