"""Following a started run to its end: its status polled (profile `run`), the recipe's
pods and the output directory's spill entries looked at every `disk.poll_interval_s`,
the platform asked to cancel it when the stage is cancelled."""

from __future__ import annotations

import threading
import time
from typing import Any, NamedTuple

from spillover_operator.client import Connection

from spillover_harness.cluster.observe import look_for_spill
from spillover_harness.cluster.starters import RunHandle, Starter, StartError
from spillover_harness.drivers.base import RunJob
from spillover_harness.drivers.cluster.output import RunOutput
from spillover_harness.drivers.cluster.pods import PodWatch, RecipePods
from spillover_harness.drivers.cluster.status import first
from spillover_harness.profile import Profile

POLL_FAILURES_ALLOWED = 5
CANCEL_WAIT_S = 5.0


class Followed(NamedTuple):
    """How a run ended, as far as polling saw it."""

    outcome: str | None  # None: not observed
    status: dict[str, Any] | None  # the last status read
    notes: list[str]
    spill: set[str]  # spill entries seen during the run
    directory: str  # the run's output directory


class RunFollower:
    """Polls one run to its end (see the module doc)."""

    def __init__(
        self,
        profile: Profile,
        cluster: Connection,
        starter: Starter,
        pods: RecipePods,
        output: RunOutput,
    ) -> None:
        self.profile = profile
        self.cluster = cluster
        self.starter = starter
        self._pods = pods
        self._output = output

    def follow(
        self,
        job: RunJob,
        handle: RunHandle,
        cancel: threading.Event,
        target: tuple[str, str] | None,
        watch: PodWatch,
    ) -> Followed:
        """Poll to the end."""
        src = self.profile.fields.outcome
        notes: list[str] = []
        spill: set[str] = set()
        status: dict[str, Any] | None = None
        failures = 0
        next_disk = 0.0
        cancelled_at: float | None = None
        disk_note_done = False
        while True:
            try:
                status = self.starter.status(handle)
                failures = 0
            except StartError as exc:
                failures += 1
                if failures > POLL_FAILURES_ALLOWED:
                    notes.append(
                        f"run not observed: {failures} status reads failed in a row: {exc}"
                    )
                    return Followed(
                        None, status, notes, spill, self._output.directory(job, handle, status)
                    )
            if status is not None:
                phase = first(src.path, status)
                phase_s = "" if phase is None else str(phase)
                if phase_s in src.phases:
                    return Followed(
                        src.phases[phase_s],
                        status,
                        notes,
                        spill,
                        self._output.directory(job, handle, status),
                    )
                if phase_s not in src.in_progress:
                    notes.append(
                        f"the platform reported phase {phase_s[:60]!r} (at {src.path}), which is "
                        "neither an outcome nor in progress (fields.outcome)"
                    )
                    return Followed(
                        None, status, notes, spill, self._output.directory(job, handle, status)
                    )
            now = time.monotonic()
            if now >= next_disk:
                self._pods.watch(job, watch)
                look = look_for_spill(
                    self.cluster,
                    self.profile.namespace,
                    self.profile.disk.pod,
                    self._output.directory(job, handle, status),
                    self.profile.disk.spill_name,
                    target,
                )
                if look.entries is not None:
                    spill.update(look.entries)
                elif look.note and not disk_note_done:
                    notes.append(f"during the run: {look.note}")
                    disk_note_done = True
                next_disk = now + self.profile.disk.poll_interval_s
            if cancel.is_set():
                if cancelled_at is None:
                    cancelled_at = now
                    try:
                        self.starter.cancel(handle)
                        notes.append("the harness asked the platform to cancel the run")
                    except StartError as exc:
                        notes.append(f"cancelling the run failed: {exc}")
                elif now - cancelled_at > CANCEL_WAIT_S:
                    notes.append("the run had not ended after the harness cancelled it")
                    return Followed(
                        "aborted", status, notes, spill, self._output.directory(job, handle, status)
                    )
                time.sleep(0.2)
            else:
                cancel.wait(self.profile.run.poll_interval_s)
