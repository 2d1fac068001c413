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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from spillover_operator.client import ClientError, Connection, list_pods

from spillover_harness.checks import judge_output, scan_logs_for_canaries
from spillover_harness.checks.consistency import check_run
from spillover_harness.cluster.blocks import Block, capture_end
from spillover_harness.cluster.configs import (
    ConfigApplyError,
    Interrupted,
    PolicyApplier,
    expected_env,
    run_env,
)
from spillover_harness.cluster.kubeconn import ClusterStageError
from spillover_harness.cluster.kubelet_summary import SummarySampler, combine_peak
from spillover_harness.cluster.observe import look_for_spill, pod_logs, read_output
from spillover_harness.cluster.recipe_pods import (
    PodValues,
    RecipePodsStale,
    describe_stale,
    pods_condition,
    read_pods,
    stale,
    wait_current,
)
from spillover_harness.cluster.starters import RunHandle, Starter, StartError
from spillover_harness.collectors.logs import Attributed, attribute, count_matching, parse_logs
from spillover_harness.collectors.memory import (
    BlockMemory,
    ContainerRestarts,
    container_restarts,
    read_block_memory,
    restarts_between,
)
from spillover_harness.collectors.prometheus import PrometheusCollector
from spillover_harness.drivers.base import RunJob, StageAbort
from spillover_harness.fixtures import FixtureSet
from spillover_harness.profile import JsonPath, Profile, render_template
from spillover_harness.results.records import McpHostPod, RunRecord, not_before, now_rfc3339

MAX_NOTES_PER_CHECK = 5
POLL_FAILURES_ALLOWED = 5
CANCEL_WAIT_S = 5.0
LOG_WINDOW_MARGIN_S = 2.0
# A coordinator log line that is late: looked for again this many times, this far apart.
LATE_LOG_LOOKS = 4
LATE_LOG_PAUSE_S = 0.5


def _first(path: str | None, doc: object) -> object | None:
    return None if path is None else JsonPath.parse(path).first(doc)


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _as_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass
class _Watch:
    """One run's view of the recipe's mcp-host pods: every live pod seen (by UID), the
    ones that did not carry the configuration, and notes."""

    seen: dict[str, PodValues]
    changed: dict[str, tuple[PodValues, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    live: set[str] = field(default_factory=set)  # the UIDs of the last read


@dataclass(frozen=True)
class _Attribution:
    persisted: int | None
    reads: int | None
    foreign_ids: frozenset[str]


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _own_pod(by_pod: dict[str, list[str]], ours: list[str], pattern: str) -> Attributed:
    """The lines of the pod whose log carries the run's lines (the pod that ran it; one
    run's lines are counted once even when several pods' logs are read), with the other
    runs' ids seen in any pod's log."""
    splits = [attribute(lines, ours, pattern) for lines in by_pod.values()]
    if not splits:
        return Attributed([], [], frozenset(), 0)
    best = max(splits, key=lambda a: len(a.mine))
    foreign = frozenset().union(*(a.foreign_ids for a in splits))
    return Attributed(best.mine, best.unattributed, foreign, best.foreign_lines)


class ClusterDriver:
    """The runner's driver for stages `minikube` and `dev` (see the module doc)."""

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
        self._log = log or (lambda _line: None)
        self._switch_lock = threading.Lock()
        self._pods_logged: set[tuple[str, str]] = set()
        # the configuration blocks run so far (their counters: cluster/blocks.py)
        self.blocks: list[Block] = []
        self._block_lock = threading.Lock()
        # Runs in flight (run id -> configuration): runs of one configuration may run
        # together (--concurrency), never with another configuration's.
        self._inflight: dict[str, str] = {}
        self._inflight_cv = threading.Condition()
        self._next_block: dict[str, RunJob] = {}
        # The platform keeps its runs (and run objects) after a stage: a second stage, or
        # a --resume, with the same run ids would be refused as duplicates. Each harness
        # process therefore names its runs on the platform `<run_id>-<attempt>`; the
        # record keeps our run_id and notes the platform's.
        self.attempt = secrets.token_hex(3)

    @property
    def _counts_from_prometheus(self) -> bool:
        """The logs do not carry the stored/read-back lines (logs.spill_*): the counts
        of a run come from the Prometheus counters (one scrape wait per run)."""
        logs = self.profile.logs
        return logs.spill_persisted is None or logs.spill_read is None

    # -- configuration switching ------------------------------------------------------

    def set_plan(self, jobs: list[RunJob]) -> list[RunJob]:
        """The stage's order (the runner's `order` hook): after a block's last run the
        driver prepares the next block's configuration."""
        self._next_block = {
            job.run_id: jobs[i + 1]
            for i, job in enumerate(jobs)
            if i + 1 < len(jobs) and jobs[i + 1].config.name != job.config.name
        }
        return jobs

    def _prepare_next_block(self, job: RunJob, cancel: threading.Event) -> None:
        """After a block's last run: apply the next block's configuration and wait for
        its pods (the blocks' counters are read after the stage: cluster/blocks.py). A
        failure here is not this run's: the next run meets it again and stops the stage
        there."""
        upcoming = self._next_block.get(job.run_id)
        if upcoming is None or self._others_in_flight(job):
            return
        try:
            self._ensure_config(upcoming, cancel)
            self._pods_current(upcoming, cancel)
        except (ClusterStageError, StageAbort) as exc:
            self._log(f"configuration {upcoming.config.name}: not ready yet ({exc})")

    def _ensure_config(self, job: RunJob, cancel: threading.Event) -> None:
        with self._switch_lock:
            active = self.applier.active
            if active is not None and active.config == job.config.name:
                return
            self._capture_block_end()
            try:
                self.applier.apply(job.config, cancel)
            except Interrupted:
                raise
            except ConfigApplyError as exc:
                raise StageAbort(str(exc)) from None

    def _read_pods(self, recipe: str) -> list[PodValues]:
        pods = self.profile.pods
        return read_pods(
            self.applier.cluster, pods.mcp_host_selector(recipe), pods.mcp_host.container
        )

    def _policy_condition(self) -> Any:
        return pods_condition(self.applier.read_policy())

    def _pods_current(self, job: RunJob, cancel: threading.Event) -> list[PodValues]:
        """Before the run: every mcp-host pod of the recipe carries the configuration
        (waiting for the operator within pods.current_timeout_s); StageAbort otherwise."""
        want = expected_env(job.config)

        def sleep(seconds: float) -> None:
            if cancel.wait(seconds):
                raise Interrupted(f"configuration '{job.config.name}': interrupted")

        try:
            pods = wait_current(
                lambda: self._read_pods(job.recipe),
                want,
                what=(
                    f"configuration '{job.config.name}', recipe {job.recipe} (mcp-host pods "
                    f"{self.profile.pods.mcp_host_selector(job.recipe)})"
                ),
                timeout_s=self.profile.pods.current_timeout_s,
                condition=self._policy_condition,
                sleep=sleep,
            )
        except RecipePodsStale as exc:
            raise StageAbort(str(exc)) from None
        key = (job.config.name, job.recipe)
        if key not in self._pods_logged:
            self._pods_logged.add(key)
            shown = "; ".join(f"{p.name} ({p.shown()})" for p in pods) or "none yet"
            self._log(
                f"configuration {job.config.name}: mcp-host pods of {job.recipe} carry it: {shown}"
            )
        return pods

    def _watch_pods(self, job: RunJob, watch: _Watch) -> None:
        """During and after the run: remember every live pod of the recipe; a pod that
        does not carry the configuration is kept in `watch.changed`."""
        try:
            pods = self._read_pods(job.recipe)
        except ClientError as exc:
            watch.notes.append(f"mcp-host pods: cannot list them: {exc.message}")
            return
        watch.live = {pod.uid for pod in pods}
        for pod in pods:
            watch.seen[pod.uid] = pod
        for pod, why in stale(expected_env(job.config), pods):
            watch.changed[pod.uid] = (pod, why)

    def _enter(self, job: RunJob, cancel: threading.Event) -> None:
        """Wait until no run of another configuration is in flight, then count this one."""
        with self._inflight_cv:
            while any(c != job.config.name for c in self._inflight.values()):
                if cancel.is_set():
                    raise Interrupted(f"configuration '{job.config.name}': interrupted")
                self._inflight_cv.wait(0.2)
            self._inflight[job.run_id] = job.config.name

    def _leave(self, job: RunJob) -> None:
        with self._inflight_cv:
            self._inflight.pop(job.run_id, None)
            self._inflight_cv.notify_all()

    def _others_in_flight(self, job: RunJob) -> bool:
        with self._inflight_cv:
            return any(rid != job.run_id for rid in self._inflight)

    # -- one run ----------------------------------------------------------------------

    def run(self, job: RunJob, cancel: threading.Event) -> RunRecord:
        try:
            self._enter(job, cancel)
        except Interrupted as exc:
            return self._record(job, now_rfc3339(), outcome="harness_error", notes=[str(exc)])
        try:
            # started once no other configuration's run is in flight
            return self._run(job, cancel, now_rfc3339())
        finally:
            self._leave(job)

    def _run(self, job: RunJob, cancel: threading.Event, started_at: str) -> RunRecord:
        try:
            self._ensure_config(job, cancel)
            before_pods = self._pods_current(job, cancel)
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
        self._block_begin(job)
        counters_start = self.prometheus.begin_run() if self._counts_from_prometheus else None
        watch = _Watch(seen={p.uid: p for p in before_pods})
        window_start = datetime.now(UTC) - timedelta(seconds=LOG_WINDOW_MARGIN_S)
        t0 = time.monotonic()
        try:
            handle = self.starter.start(values)
        except StartError as exc:
            return self._record(
                job, started_at, outcome="harness_error", notes=[*notes, f"run not started: {exc}"]
            )
        notes.append(f"platform run id: {handle.platform_run_id}")
        target = self._exec_target(before_pods)
        outcome, status, poll_notes, spill_during, disk_dir = self._follow(
            job, handle, cancel, target, watch
        )
        wall_s = time.monotonic() - t0
        run_end = time.time()
        finished_at = now_rfc3339()
        notes += poll_notes
        self._watch_pods(job, watch)
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
        served = self._served(status, watch.seen, notes)
        alive = [p for p in served if p.uid in watch.live]
        if served and not alive:
            notes.append(
                "disk, quality: the mcp-host pod that served the run has ended; checked in "
                "the newest running pod of disk.pod instead"
            )
            target = None
        else:
            target = self._exec_target(alive) or target
        fields, attribution = self._fields(job, handle, status, window_start, wall_s, notes)
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
        disk_clean = self._disk_after(job, disk_dir, spill_during, notes, target)
        quality = self._quality(job, outcome, status, disk_dir, notes, target)
        consistency = check_run(
            expected_env(job.config),
            self.fixtures.get(job.recipe, job.input.name),
            persisted,
            outcome,
        )
        if consistency:
            notes += [f"consistency: {c}" for c in consistency]
        self._block_add(job, persisted, reads, run_end, [p.name for p in served])
        self._prepare_next_block(job, cancel)
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

    def _served(
        self, status: dict[str, Any] | None, seen: dict[str, PodValues], notes: list[str]
    ) -> list[PodValues]:
        """The pod(s) that served the run: the one the status names (fields.mcp_host_pod),
        else every live pod of the recipe seen during the run (all carried the
        configuration)."""
        named = _first(self.profile.fields.mcp_host_pod, status or {})
        if isinstance(named, str) and named:
            match = [p for p in seen.values() if p.name == named]
            if match:
                return match
            notes.append(
                f"mcp-host pod: the status names {named[:80]}, which the harness did not see "
                "among the recipe's pods (its values are not recorded)"
            )
            return []
        pods = sorted(seen.values(), key=lambda p: p.name)
        if len(pods) > 1:
            notes.append(
                f"mcp-host pods: {len(pods)} pods of the recipe could have served the run "
                "(all carried the configuration)"
            )
        return pods

    def _exec_target(self, pods: list[PodValues]) -> tuple[str, str] | None:
        """(pod, container) for the disk and quality checks: the pod that served the run
        (when one pod did, and the profile's disk pod is the mcp-host: `disk.pod` with
        the mcp-host's selector); None: the newest running pod of `disk.pod`."""
        if len(pods) != 1 or self.profile.disk.pod.selector != self.profile.pods.mcp_host.selector:
            return None
        container = self.profile.disk.pod.container or self.profile.pods.mcp_host.container
        if container is None:
            return None
        return pods[0].name, container

    # -- the blocks (their counters are read after the stage: cluster/blocks.py) ------

    def _capture_block_end(self) -> None:
        """Before a switch: the finished block's counters, while its pods still exist
        (the switch may replace them; blocks.capture_end)."""
        with self._block_lock:
            block = self.blocks[-1] if self.blocks else None
        if block is not None and block.end_series is None:
            capture_end(self.prometheus, block)
        if block is not None:
            self.capture_block_memory(block)

    def capture_block_memory(self, block: Block) -> None:
        """The block's mcp-host memory, restarts and OOM kills (collectors/memory.py),
        once, at its end: before the switch, or after the stage for the last block."""
        if block.memory is not None or not block.runs:
            return
        queries = self.profile.memory
        from_status = queries.restarts_from == "pod-status"
        if from_status:
            queries = queries.model_copy(update={"restarts": None, "oom_kills": None})
        memory = read_block_memory(
            self.prometheus,
            queries,
            namespace=self.profile.namespace,
            pods=sorted(block.pods),
            container=self._mcp_host_container(),
            start=block.first_start,
            end=block.last_end,
        )
        if block.sampler is not None:
            block.sampler.stop()
            self._finer_peak(memory, block)
        if from_status and queries.source != "none":
            after = self._container_restarts()
            if block.restarts_before is None or after is None:
                memory.notes.append("memory: restarts not read (the mcp-host pods' status)")
            else:
                memory.restarts, memory.oom_kills = restarts_between(
                    block.restarts_before,
                    after,
                    sorted(block.pods),
                    block.first_start,
                    block.last_end,
                )
        block.memory = memory

    def _finer_peak(self, memory: BlockMemory, block: Block) -> None:
        """The block's peak: the higher of Prometheus' (a lower bound at its scrape
        interval) and the kubelet Summary's samples of the block's pods (a lower bound at
        the sampler's step), naming the source; a note when no Summary could be read."""
        sampler = block.sampler
        assert sampler is not None
        peak = combine_peak(
            memory.peak_bytes,
            self.prometheus.scrape_interval_s,
            sampler.peaks,
            block.pods,
            sampler.step_s,
        )
        memory.peak_bytes, memory.peak_source = peak.peak_bytes, peak.source
        if not sampler.samples:
            why = "; ".join(f"{node}: {reason}" for node, reason in sorted(sampler.refused.items()))
            memory.notes.append(
                "memory: the kubelet Summary was not read"
                + (f" ({why[:200]})" if why else "")
                + "; the peak is Prometheus' alone, a lower bound at its scrape interval"
            )

    def close(self) -> None:
        """Stop every block's kubelet sampler still running (a stage that ended early)."""
        with self._block_lock:
            samplers = [b.sampler for b in self.blocks if b.sampler is not None]
        for sampler in samplers:
            sampler.stop()

    def _mcp_host_container(self) -> str:
        return self.profile.pods.mcp_host.container or "mcp-host"

    def _container_restarts(self) -> dict[str, ContainerRestarts] | None:
        """The mcp-host containers' restart counts now (memory.restarts_from
        pod-status); None when the pods cannot be listed (never stops a stage)."""
        try:
            pods = list_pods(self.cluster, self.profile.pods.mcp_host.selector)
        except ClientError:
            return None
        return container_restarts(pods, self._mcp_host_container())

    def _block_begin(self, job: RunJob) -> None:
        with self._block_lock:
            if self.blocks and self.blocks[-1].config == job.config.name:
                return
            block = Block(job.config.name, time.time())
            self.blocks.append(block)
            previous = self.blocks[-2].sampler if len(self.blocks) > 1 else None
            if self.profile.memory.source != "none":
                block.sampler = SummarySampler(
                    self.cluster, self.profile.pods.mcp_host.selector, self._mcp_host_container()
                ).start()
        if previous is not None:
            previous.stop()  # its memory is read at the switch; no later sample is its
        if self.profile.memory.restarts_from == "pod-status":
            block.restarts_before = self._container_restarts()

    def _block_add(
        self,
        job: RunJob,
        persisted: int | None,
        reads: int | None,
        ended: float,
        pods: Sequence[str] = (),
    ) -> None:
        with self._block_lock:
            if not self.blocks:
                return
            block = self.blocks[-1]
            block.runs.append(job.run_id)
            block.pods.update(pods)
            block.last_end = max(block.last_end, ended)
            if persisted is None or reads is None:
                block.complete = False
            else:
                block.persisted += persisted
                block.reads += reads

    def _record(self, job: RunJob, started: str, **fields: Any) -> RunRecord:
        data: dict[str, Any] = {
            **job.identity(),
            "started_at": started,
            "finished_at": fields.pop("finished_at", None) or now_rfc3339(),
        }
        data.update(fields)
        data["finished_at"] = not_before(started, data["finished_at"])
        return RunRecord.model_validate(data)

    def _output_dir(self, job: RunJob, handle: RunHandle, status: dict[str, Any] | None) -> str:
        disk = self.profile.disk
        if status is not None and disk.output_dir_path is not None:
            found = _first(disk.output_dir_path, status)
            if isinstance(found, str) and found.startswith("/"):
                return found
        return str(
            render_template(
                disk.output_dir,
                {
                    "run_id": handle.run_id,
                    "platform_run_id": handle.platform_run_id,
                    "namespace": self.profile.namespace,
                    "recipe": job.recipe,
                    "input": job.input.name,
                },
            )
        )

    def _follow(
        self,
        job: RunJob,
        handle: RunHandle,
        cancel: threading.Event,
        target: tuple[str, str] | None,
        watch: _Watch,
    ) -> tuple[str | None, dict[str, Any] | None, list[str], set[str], str]:
        """Poll to the end. (outcome or None = not observed, last status, notes, spill
        entries seen during the run, the output directory)."""
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
                    return None, status, notes, spill, self._output_dir(job, handle, status)
            if status is not None:
                phase = _first(src.path, status)
                phase_s = "" if phase is None else str(phase)
                if phase_s in src.phases:
                    return (
                        src.phases[phase_s],
                        status,
                        notes,
                        spill,
                        self._output_dir(job, handle, status),
                    )
                if phase_s not in src.in_progress:
                    notes.append(
                        f"the platform reported phase {phase_s[:60]!r} (at {src.path}), which is "
                        "neither an outcome nor in progress (fields.outcome)"
                    )
                    return None, status, notes, spill, self._output_dir(job, handle, status)
            now = time.monotonic()
            if now >= next_disk:
                self._watch_pods(job, watch)
                look = look_for_spill(
                    self.cluster,
                    self.profile.namespace,
                    self.profile.disk.pod,
                    self._output_dir(job, handle, status),
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
                    return "aborted", status, notes, spill, self._output_dir(job, handle, status)
                time.sleep(0.2)
            else:
                cancel.wait(self.profile.run.poll_interval_s)

    def _fields(
        self,
        job: RunJob,
        handle: RunHandle,
        status: dict[str, Any] | None,
        window_start: datetime,
        wall_s: float,
        notes: list[str],
    ) -> tuple[dict[str, Any], _Attribution]:
        f = self.profile.fields
        doc = status or {}
        out: dict[str, Any] = {
            "iterations": _as_int(_first(f.iterations, doc)),
            "input_tokens": _as_int(_first(f.input_tokens, doc)),
            "output_tokens": _as_int(_first(f.output_tokens, doc)),
            "hit_iteration_limit": None,
            "status_report_bytes": None,
            "logs_clean": None,
        }
        duration = _as_float(_first(f.duration_s, doc))
        if duration is None:
            ms = _as_float(_first(f.duration_ms, doc))
            duration = None if ms is None else ms / 1000
        if duration is None:
            a, b = _parse_time(_first(f.started_at, doc)), _parse_time(_first(f.finished_at, doc))
            if a is not None and b is not None:
                duration = (b - a).total_seconds()
        if duration is None:
            duration = round(wall_s, 3)
            notes.append(
                "duration_s: measured by the harness (start request to the end seen by polling)"
            )
        out["duration_s"] = duration

        # The log lines: only those that carry this run's id (ours or the platform's).
        # The run's own log endpoint is this run's; its lines of another run are dropped.
        logs = self.profile.logs
        ours = [handle.run_id, handle.platform_run_id]
        ns = self.profile.namespace
        endpoint: list[str] | None = None
        try:
            endpoint = self.starter.logs(handle)
        except StartError as exc:
            notes.append(f"logs: the run's log endpoint failed: {exc}")
        mcp = pod_logs(
            self.cluster,
            ns,
            self.profile.pods.mcp_host,
            window_start,
            self.profile.pods.mcp_host_selector(job.recipe),
        )
        coord = pod_logs(self.cluster, ns, self.profile.pods.coordinator, window_start)
        notes += mcp.notes + coord.notes
        mcp_split = _own_pod(mcp.by_pod, ours, logs.run_id)
        coord_split = _own_pod(coord.by_pod, ours, logs.run_id)
        step_lines: list[str] | None
        if endpoint is not None:
            own = attribute(endpoint, ours, logs.run_id)
            step_lines = own.mine + own.unattributed
            if own.foreign_lines:
                notes.append(
                    f"logs: {own.foreign_lines} line(s) of the run's log endpoint carry another "
                    "run's id (not used)"
                )
        elif mcp.ok:
            step_lines = mcp_split.mine
            if not step_lines:
                notes.append(
                    "logs: no mcp-host log line of the run's window carries the run's id "
                    "(fields from the logs not measured)"
                )
        else:
            step_lines = None
        foreign = mcp_split.foreign_ids | coord_split.foreign_ids
        dropped = mcp_split.foreign_lines + coord_split.foreign_lines
        if dropped:
            notes.append(
                f"logs: {dropped} line(s) of {len(foreign)} other run(s) in the window excluded"
            )
        unused = len(mcp_split.unattributed) + len(coord_split.unattributed)
        if unused:
            notes.append(f"logs: {unused} pod log line(s) without a run id not used for fields")
        parsed = parse_logs(step_lines or [], logs)
        for key in ("iterations", "input_tokens", "output_tokens"):
            if out[key] is None and getattr(parsed, key) is not None:
                out[key] = getattr(parsed, key)
                notes.append(f"{key}: from the step's log lines")
        out["hit_iteration_limit"] = parsed.hit_iteration_limit
        if coord.ok:
            out["status_report_bytes"] = parse_logs(coord_split.mine, logs).status_report_bytes
        for _ in range(LATE_LOG_LOOKS):
            # The coordinator may log a run's report after the run API calls it ended
            # (log shipping lags under load): look again, briefly, before calling it
            # unmeasured.
            if out["status_report_bytes"] is not None or not coord.ok:
                break
            time.sleep(LATE_LOG_PAUSE_S)
            coord = pod_logs(self.cluster, ns, self.profile.pods.coordinator, window_start)
            if coord.ok:
                mine = _own_pod(coord.by_pod, ours, logs.run_id).mine
                out["status_report_bytes"] = parse_logs(mine, logs).status_report_bytes
        if out["status_report_bytes"] is None:
            notes.append(
                "status_report_bytes: no bodyBytes line from the coordinator carrying the "
                "run's id in its window (not measured)"
            )
        persisted = reads = None
        if not self._counts_from_prometheus and step_lines and parsed.llm_calls:
            assert logs.spill_persisted is not None and logs.spill_read is not None
            persisted = count_matching(step_lines, logs.spill_persisted)
            reads = count_matching(step_lines, logs.spill_read)
        elif not self._counts_from_prometheus:
            notes.append(
                "spillover_persisted, spillover_reads: the step's own log lines were not "
                "seen (not measured)"
            )
        if logs.budget_inline is not None and step_lines and parsed.llm_calls:
            # the step reached its budget: the mcp-host warns once per step execution
            out["budget_inline"] = count_matching(step_lines, logs.budget_inline)

        # Criterion 5, logs: the run's lines and the lines that carry no run id at all
        # (a leak there cannot be put on another run); other runs' lines are excluded.
        fixture = self.fixtures.get(job.recipe, job.input.name)
        if mcp.ok or coord.ok or step_lines:
            scanned = [
                *mcp_split.mine,
                *mcp_split.unattributed,
                *coord_split.mine,
                *coord_split.unattributed,
                *(step_lines or []),
            ]
            leaks = scan_logs_for_canaries(scanned, self.fixtures.all_canaries())
            notes += [f"logs: {leak}" for leak in leaks[:MAX_NOTES_PER_CHECK]]
            if len(leaks) > MAX_NOTES_PER_CHECK:
                notes.append(f"logs: {len(leaks) - MAX_NOTES_PER_CHECK} more lines with canaries")
            out["logs_clean"] = not leaks
            notes.append(
                f"logs: {len(scanned)} lines scanned for the {len(fixture.canaries)} canaries of "
                f"this input and the others' (pods: {', '.join(mcp.pods + coord.pods) or 'none'})"
            )
        else:
            notes.append("logs_clean: no log could be read (not checked)")
        return out, _Attribution(persisted, reads, foreign)

    def _disk_after(
        self,
        job: RunJob,
        directory: str,
        during: set[str],
        notes: list[str],
        target: tuple[str, str] | None,
    ) -> bool | None:
        look = look_for_spill(
            self.cluster,
            self.profile.namespace,
            self.profile.disk.pod,
            directory,
            self.profile.disk.spill_name,
            target,
        )
        if look.entries is None:
            notes.append(f"after the run: {look.note}")
            if during:
                return False
            return None
        if look.note:
            notes.append(f"after the run: {look.note}")
        if not look.present and not during:
            notes.append(
                f"disk: the output directory {directory} does not exist in the pod (not checked)"
            )
            return None
        found = sorted(during | set(look.entries))
        notes += [f"disk: spill entry {path}" for path in found[:MAX_NOTES_PER_CHECK]]
        if len(found) > MAX_NOTES_PER_CHECK:
            notes.append(f"disk: {len(found) - MAX_NOTES_PER_CHECK} more spill entries")
        return not found

    def _quality(
        self,
        job: RunJob,
        outcome: str,
        status: dict[str, Any] | None,
        directory: str,
        notes: list[str],
        target: tuple[str, str] | None,
    ) -> bool | None:
        if outcome == "aborted":
            return None
        fixture = self.fixtures.get(job.recipe, job.input.name)
        text = _first(self.profile.fields.output_text, status or {})
        output = text if isinstance(text, str) else None
        if output is None:
            look = read_output(
                self.cluster,
                self.profile.namespace,
                self.profile.disk.pod,
                directory,
                self.profile.disk.output_files,
                target,
            )
            if look.note:
                notes.append(look.note)
            if not look.checked:
                return None
            output = look.text
        if output is None and outcome == "succeeded":
            notes.append("quality: the step succeeded but no output file was found (not judged)")
            return None
        return judge_output(output, fixture)
