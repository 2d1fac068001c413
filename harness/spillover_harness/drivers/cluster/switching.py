"""Which configuration the cluster holds: runs of one configuration may run together
(--concurrency), never with another configuration's; a switch applies the next one
through the policy, and after a block's last run the next block is prepared ahead."""

from __future__ import annotations

import threading
from collections.abc import Callable

from spillover_harness.cluster.configs import ConfigApplyError, Interrupted, PolicyApplier
from spillover_harness.cluster.kubeconn import ClusterStageError
from spillover_harness.drivers.base import RunJob, StageAbort
from spillover_harness.drivers.cluster.pods import RecipePods


class RunGate:
    """The runs in flight (run id -> configuration)."""

    def __init__(self) -> None:
        self._inflight: dict[str, str] = {}
        self._cv = threading.Condition()

    def enter(self, job: RunJob, cancel: threading.Event) -> None:
        """Wait until no run of another configuration is in flight, then count this one."""
        with self._cv:
            while any(c != job.config.name for c in self._inflight.values()):
                if cancel.is_set():
                    raise Interrupted(f"configuration '{job.config.name}': interrupted")
                self._cv.wait(0.2)
            self._inflight[job.run_id] = job.config.name

    def leave(self, job: RunJob) -> None:
        with self._cv:
            self._inflight.pop(job.run_id, None)
            self._cv.notify_all()

    def others_in_flight(self, job: RunJob) -> bool:
        with self._cv:
            return any(rid != job.run_id for rid in self._inflight)


class ConfigSwitcher:
    """Puts a job's configuration in effect (`PolicyApplier.apply`: patch, wait for the
    operator and the rollout, verify the WRC Deployment); StageAbort when it cannot."""

    def __init__(
        self,
        applier: PolicyApplier,
        pods: RecipePods,
        gate: RunGate,
        *,
        before_switch: Callable[[], None],
        log: Callable[[str], None],
    ) -> None:
        self.applier = applier
        self._pods = pods
        self._gate = gate
        self._before_switch = before_switch  # the finished block's end, read while it exists
        self._log = log
        self._lock = threading.Lock()
        self._next_block: dict[str, RunJob] = {}

    def set_plan(self, jobs: list[RunJob]) -> list[RunJob]:
        """The stage's order (the runner's `order` hook): after a block's last run the
        driver prepares the next block's configuration."""
        self._next_block = {
            job.run_id: jobs[i + 1]
            for i, job in enumerate(jobs)
            if i + 1 < len(jobs) and jobs[i + 1].config.name != job.config.name
        }
        return jobs

    def ensure(self, job: RunJob, cancel: threading.Event) -> None:
        with self._lock:
            active = self.applier.active
            if active is not None and active.config == job.config.name:
                return
            self._before_switch()
            try:
                self.applier.apply(job.config, cancel)
            except Interrupted:
                raise
            except ConfigApplyError as exc:
                raise StageAbort(str(exc)) from None

    def prepare_next(self, job: RunJob, cancel: threading.Event) -> None:
        """After a block's last run: apply the next block's configuration and wait for
        its pods (the blocks' counters are read after the stage: cluster/blocks.py). A
        failure here is not this run's: the next run meets it again and stops the stage
        there."""
        upcoming = self._next_block.get(job.run_id)
        if upcoming is None or self._gate.others_in_flight(job):
            return
        try:
            self.ensure(upcoming, cancel)
            self._pods.current(upcoming, cancel)
        except (ClusterStageError, StageAbort) as exc:
            self._log(f"configuration {upcoming.config.name}: not ready yet ({exc})")
