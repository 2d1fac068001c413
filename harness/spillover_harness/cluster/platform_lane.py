"""Stage 1 as the platform runs it: the platform's own T2 preflight/lane commands
(profile `stage1_lane`), run before anything else of stage `minikube`, and the exact
head they ran at (`git rev-parse HEAD` in the platform's checkout).

The result goes into stage.json (`driver.t2`) and the report; a command that fails
stops the stage (`LaneFailed`, exit 5) naming it, its exit code and the head.
Their output is not kept (it may be long; the user saw it on stderr as it ran).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spillover_harness.cluster.kubeconn import ClusterStageError
from spillover_harness.profile import Stage1Lane


class LaneFailed(ClusterStageError):
    """A T2 command of the platform failed: Stage 1 does not start."""


@dataclass(frozen=True)
class CommandResult:
    name: str
    argv: list[str]
    exit_code: int | None  # None: it could not start or timed out
    seconds: float
    why: str = ""

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class LaneResult:
    head: str | None
    commands: list[CommandResult]

    @property
    def verdict(self) -> str:
        return "passed" if all(c.passed for c in self.commands) else "failed"

    def identity(self) -> dict[str, Any]:
        """What stage.json records (no durations: a resume compares it)."""
        return {
            "verdict": self.verdict,
            "head": self.head,
            "commands": [" ".join(c.argv) for c in self.commands],
        }

    def line(self) -> str:
        done = ", ".join(
            f"`{' '.join(c.argv)}` "
            + ("passed" if c.passed else f"FAILED ({c.why or f'exit {c.exit_code}'})")
            for c in self.commands
        )
        return f"platform T2 lane {self.verdict} at head `{self.head or 'unknown'}`: {done}"


def git_head(workdir: Path) -> str | None:
    """The exact commit checked out in `workdir` (None: not a git checkout)."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(workdir), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    head = proc.stdout.strip()
    return head if proc.returncode == 0 and head else None


def run_lane(lane: Stage1Lane, log: Callable[[str], None]) -> LaneResult:
    """Run the commands in order, stopping at the first failure; LaneFailed then."""
    workdir = Path(lane.workdir).expanduser() if lane.workdir else Path.cwd()
    head = git_head(workdir)
    results: list[CommandResult] = []
    for command in lane.commands:
        log(f"platform T2: {command.name}: {' '.join(command.argv)} (in {workdir})")
        t0 = time.monotonic()
        try:
            proc = subprocess.run(command.argv, cwd=workdir, timeout=command.timeout_s, check=False)
            result = CommandResult(
                command.name, list(command.argv), proc.returncode, time.monotonic() - t0
            )
        except subprocess.TimeoutExpired:
            result = CommandResult(
                command.name,
                list(command.argv),
                None,
                time.monotonic() - t0,
                f"timed out after {command.timeout_s:g}s",
            )
        except OSError as exc:
            result = CommandResult(
                command.name, list(command.argv), None, 0.0, f"cannot run: {exc.strerror or exc}"
            )
        results.append(result)
        if not result.passed:
            break
    outcome = LaneResult(head, results)
    log(outcome.line())
    if outcome.verdict != "passed":
        raise LaneFailed(
            outcome.line() + ". Stage 1 does not start: fix the platform's lane first "
            f"(run it by hand in {workdir})."
        )
    return outcome
