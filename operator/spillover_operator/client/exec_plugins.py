"""Exec credential plugins (`users[].user.exec`) that can be stopped.

The kubernetes package runs a kubeconfig's exec plugin with `subprocess.Popen` and
waits for its answer with no time limit (`kubernetes/config/exec_provider.py`,
`ExecProvider.run`: `communicate()`). A plugin that never returns (a login waiting for
a browser, a hung cloud CLI) holds the thread that asked for credentials for ever, and
no Python code can interrupt that thread. spilloverctl's fleet gives up on such a
cluster at its bound; this module lets it also end the plugin, so the waiting thread
gets the plugin's failure and nothing is left running after the command.

`install()` (called where the kubernetes loader runs, `connection._full_load`) has the
package start its plugins through `_Popen`. A thread running under `Plugins.owning()`
(one cluster of the fleet) has each plugin it starts recorded there, and, when the
plugin is not interactive (no terminal handed to it), started in a process group of
its own, so that `Plugins.stop()` ends the plugin and whatever it started in turn.
Any other thread's plugins start exactly as the package starts them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, Final

# How long a stopped plugin gets to exit after SIGTERM (a token cache to write back)
# before its process group is killed.
STOP_GRACE_S: Final = 0.5

_local = threading.local()


class Plugins:
    """The exec plugins started by the threads that run under `owning()`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: list[_Popen] = []

    @contextmanager
    def owning(self) -> Iterator[None]:
        """Record here every plugin this thread starts while inside."""
        previous = getattr(_local, "owner", None)
        _local.owner = self
        try:
            yield
        finally:
            _local.owner = previous

    def add(self, process: _Popen) -> None:
        with self._lock:
            self._started.append(process)

    def running(self) -> list[str]:
        """The commands of the plugins still running."""
        with self._lock:
            return [p.command for p in self._started if p.poll() is None]

    def stop(self, grace: float = STOP_GRACE_S) -> list[str]:
        """End every plugin still running (SIGTERM; after `grace` seconds, SIGKILL to
        its process group); the commands of those it ended."""
        with self._lock:
            running = [p for p in self._started if p.poll() is None]
        for process in running:
            process.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in running:
            with suppress(subprocess.TimeoutExpired):
                process.wait(max(0.0, deadline - time.monotonic()))
            process.signal_all(signal.SIGKILL)  # what it started and left behind too
        return [p.command for p in running]


class _Popen(subprocess.Popen[Any]):
    """`subprocess.Popen`, recording the process in the starting thread's `Plugins`."""

    def __init__(self, args: Any, **kwargs: Any) -> None:
        owner: Plugins | None = getattr(_local, "owner", None)
        # Interactive (the package hands it our stdin, the terminal): it stays in our
        # process group, or reading the terminal would stop it (SIGTTIN).
        self.own_group = owner is not None and kwargs.get("stdin") is None
        if self.own_group:
            kwargs["process_group"] = 0
        super().__init__(args, **kwargs)
        self.command = os.path.basename(str(args[0] if isinstance(args, list | tuple) else args))
        if owner is not None:
            owner.add(self)

    def signal_all(self, signum: int) -> None:
        """`signum` to the plugin's process group (its own), else to the plugin."""
        try:
            if self.own_group:
                os.killpg(self.pid, signum)
            elif self.poll() is None:
                self.send_signal(signum)
        except (ProcessLookupError, PermissionError):
            pass  # already gone


class _Subprocess:
    """The `subprocess` module as the kubernetes package's exec provider sees it:
    every name is the module's, but `Popen` is `_Popen`."""

    Popen = _Popen

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)


def install() -> None:
    """Have the kubernetes package start its exec plugins through `_Popen` (once)."""
    from kubernetes.config import exec_provider

    if not isinstance(getattr(exec_provider, "subprocess", None), _Subprocess):
        exec_provider.subprocess = _Subprocess()  # type: ignore[attr-defined,assignment]
