"""`ClusterDriver`: one recipe run on the platform per job, every record field observed.

Before a job whose configuration is not the one in effect, the driver applies it
through the policy (`PolicyApplier.apply`: patch, wait for the operator and the
rollout, verify the WRC Deployment). A configuration that cannot be applied or
verified raises `StageAbort`: the runner records nothing for that job and stops
the stage. The stage runs with concurrency 1 (a cluster holds one configuration,
and the Prometheus counters are per mcp-host process).

Per run: snapshot the counters, start the run (profile `run`), poll its status
(and list the output directory for `.spill` entries every `disk.poll_interval_s`),
then: outcome and fields from the status JSONPaths, missing ones from the logs
(`logs_path` or the pods' logs of the run's window), counters from Prometheus,
`status_report_bytes` from the coordinator's `bodyBytes`, the canary scan of the
pods' logs of the window, the output directory again, the quality judge on the
output. Anything not observable is null with a note; a run that cannot be started
or followed is `harness_error`.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from spillover_operator.client import Connection

from spillover_harness.checks.consistency import check_run
from spillover_harness.cluster.blocks import Block
from spillover_harness.cluster.configs import Interrupted, PolicyApplier, expected_env, run_env
from spillover_harness.cluster.recipe_pods import describe_stale
from spillover_harness.cluster.starters import Starter, StartError
from spillover_harness.collectors.prometheus import PrometheusCollector
from spillover_harness.drivers.base import RunJob, StageAbort
from spillover_harness.drivers.cluster.block_book import BlockBook
from spillover_harness.drivers.cluster.fields import RunFields, counts_from_prometheus
from spillover_harness.drivers.cluster.follow import RunFollower
from spillover_harness.drivers.cluster.output import MAX_NOTES_PER_CHECK, RunOutput
from spillover_harness.drivers.cluster.pods import PodWatch, RecipePods
from spillover_harness.drivers.cluster.switching import ConfigSwitcher, RunGate
from spillover_harness.fixtures import FixtureSet
from spillover_harness.profile import Profile
from spillover_harness.results.records import McpHostPod, RunRecord, not_before, now_rfc3339

LOG_WINDOW_MARGIN_S = 2.0


class ClusterDriver:
    """The runner's driver for stages `minikube` and `dev` (see the module doc): one run
    told through its collaborators, each in its own module of this package."""

    def __init__(
        self,
        profile: Profile,
        cluster: Connection,
        applier: PolicyApplier,
        starter: Starter,
        prometheus: PrometheusCollector,
        fixtures: FixtureSet,
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.profile = profile
        self.cluster = cluster  # pods, logs and exec (the policy goes through `applier`)
        self.applier = applier
        self.starter = starter
        self.prometheus = prometheus
        self.fixtures = fixtures
        log = log or (lambda _line: None)
        # the configuration blocks run so far (their counters: cluster/blocks.py)
        self.book = BlockBook(profile, cluster, prometheus)
        self.pods = RecipePods(profile, applier, log)
        self.gate = RunGate()
        self.switcher = ConfigSwitcher(
            applier, self.pods, self.gate, before_switch=self.book.capture_end, log=log
        )
        self.output = RunOutput(profile, cluster, fixtures)
        self.run_fields = RunFields(profile, cluster, starter, fixtures)
        self.follower = RunFollower(profile, cluster, starter, self.pods, self.output)
        # The platform keeps its runs (and run objects) after a stage: a second stage, or
        # a --resume, with the same run ids would be refused as duplicates. Each harness
        # process therefore names its runs on the platform `<run_id>-<attempt>`; the
        # record keeps our run_id and notes the platform's.
        self.attempt = secrets.token_hex(3)

    @property
    def blocks(self) -> list[Block]:
        """The configuration blocks run so far (the stage checks their counters)."""
        return self.book.blocks

    def set_plan(self, jobs: list[RunJob]) -> list[RunJob]:
        """The stage's order (the runner's `order` hook; ConfigSwitcher.set_plan)."""
        return self.switcher.set_plan(jobs)

    def capture_block_memory(self, block: Block) -> None:
        """The block's memory, once (BlockBook.capture_memory)."""
        self.book.capture_memory(block)

    def finish_block_memory(self) -> None:
        """After the stage: the blocks' memory completed (BlockBook.finish_memory)."""
        self.book.finish_memory()

    def close(self) -> None:
        """Stop every block's kubelet sampler still running (a stage that ended early)."""
        self.book.close()

    # -- one run ----------------------------------------------------------------------

    def run(self, job: RunJob, cancel: threading.Event) -> RunRecord:
        try:
            self.gate.enter(job, cancel)
        except Interrupted as exc:
            return self._record(job, now_rfc3339(), outcome="harness_error", notes=[str(exc)])
        try:
            # started once no other configuration's run is in flight
            return self._run(job, cancel, now_rfc3339())
        finally:
            self.gate.leave(job)

    def _run(self, job: RunJob, cancel: threading.Event, started_at: str) -> RunRecord:
        try:
            self.switcher.ensure(job, cancel)
            before_pods = self.pods.current(job, cancel)
        except Interrupted as exc:
            return self._record(job, started_at, outcome="harness_error", notes=[str(exc)])
        applied = self.applier.active
        assert applied is not None
        notes: list[str] = [
            f"cluster: profile {self.profile.name}, namespace {self.profile.namespace}, "
            f"policy generation {applied.generation}"
        ]
        values: dict[str, object] = {
            "recipe": job.recipe,
            "input": job.input.name,
            "run_id": f"{job.run_id}-{self.attempt}",
            "namespace": self.profile.namespace,
            "seed": job.seed,
            "repetition": job.repetition,
            "env": run_env(applied.env),  # as verified on the WRC Deployment
        }
        self.book.begin(job)
        counters_start = (
            self.prometheus.begin_run() if counts_from_prometheus(self.profile) else None
        )
        watch = PodWatch(seen={p.uid: p for p in before_pods})
        window_start = datetime.now(UTC) - timedelta(seconds=LOG_WINDOW_MARGIN_S)
        t0 = time.monotonic()
        try:
            handle = self.starter.start(values)
        except StartError as exc:
            return self._record(
                job, started_at, outcome="harness_error", notes=[*notes, f"run not started: {exc}"]
            )
        notes.append(f"platform run id: {handle.platform_run_id}")
        target = self.pods.exec_target(before_pods)
        outcome, status, poll_notes, spill_during, disk_dir = self.follower.follow(
            job, handle, cancel, target, watch
        )
        wall_s = time.monotonic() - t0
        run_end = time.time()
        finished_at = now_rfc3339()
        notes += poll_notes
        self.pods.watch(job, watch)
        notes += watch.notes[:MAX_NOTES_PER_CHECK]
        if watch.changed:
            raise StageAbort(
                f"configuration '{job.config.name}': mcp-host pod(s) of {job.recipe} changed "
                f"during run {job.run_id} and no longer carry the configuration: "
                f"{describe_stale(list(watch.changed.values()))}. The run is not recorded "
                "(--resume runs it again once the pods carry the configuration)."
            )
        if outcome is None:
            return self._record(
                job, started_at, outcome="harness_error", notes=notes, finished_at=finished_at
            )
        served = self.pods.served(status, watch.seen, notes)
        alive = [p for p in served if p.uid in watch.live]
        if served and not alive:
            notes.append(
                "disk, quality: the mcp-host pod that served the run has ended; checked in "
                "the newest running pod of disk.pod instead"
            )
            target = None
        else:
            target = self.pods.exec_target(alive) or target
        fields, attribution = self.run_fields.read(job, handle, status, window_start, wall_s, notes)
        persisted, reads = attribution.persisted, attribution.reads
        if persisted is None and counters_start is not None:
            if attribution.foreign_ids:
                notes.append(
                    "spillover_persisted, spillover_reads: other runs of this recipe overlapped "
                    f"({len(attribution.foreign_ids)} run id(s) in the mcp-host logs), so the "
                    "Prometheus counters are not this run's alone (not measured; see the "
                    "block cross-check in the report)"
                )
            else:
                persisted, reads, prom_notes = self.prometheus.end_run(run_end, counters_start)
                notes += prom_notes
        disk_clean = self.output.disk_after(job, disk_dir, spill_during, notes, target)
        quality = self.output.quality(job, outcome, status, disk_dir, notes, target)
        consistency = check_run(
            expected_env(job.config),
            self.fixtures.get(job.recipe, job.input.name),
            persisted,
            outcome,
        )
        if consistency:
            notes += [f"consistency: {c}" for c in consistency]
        self.book.add(job, persisted, reads, run_end, [p.name for p in served])
        self.switcher.prepare_next(job, cancel)
        consistency_ok = None if consistency is None else not consistency
        return self._record(
            job,
            started_at,
            finished_at=finished_at,
            outcome=outcome,
            spillover_persisted=persisted,
            spillover_reads=reads,
            quality_ok=quality,
            disk_clean=disk_clean,
            notes=notes,
            mcp_host_pods=[
                McpHostPod(name=p.name, uid=p.uid, values=dict(p.values)) for p in served
            ],
            consistency_ok=consistency_ok,
            **fields,
        )

    def _record(self, job: RunJob, started: str, **fields: Any) -> RunRecord:
        data: dict[str, Any] = {
            **job.identity(),
            "started_at": started,
            "finished_at": fields.pop("finished_at", None) or now_rfc3339(),
        }
        data.update(fields)
        data["finished_at"] = not_before(started, data["finished_at"])
        return RunRecord.model_validate(data)
