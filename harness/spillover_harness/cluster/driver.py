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

from kubernetes import client

from spillover_harness.checks import judge_output, scan_logs_for_canaries
from spillover_harness.cluster.configs import (
    ConfigApplyError,
    Interrupted,
    PolicyApplier,
    env_differences,
    expected_env,
    run_env,
)
from spillover_harness.cluster.observe import (
    look_for_spill,
    pod_env,
    pod_logs,
    read_output,
    running_pods,
)
from spillover_harness.cluster.starters import RunHandle, Starter, StartError
from spillover_harness.collectors.logs import lines_containing, parse_logs
from spillover_harness.collectors.prometheus import PrometheusCollector
from spillover_harness.drivers.base import RunJob
from spillover_harness.fixtures import FixtureSet
from spillover_harness.profile import JsonPath, Profile, render_template
from spillover_harness.records import RunRecord, now_rfc3339
from spillover_harness.runner import StageAbort

MAX_NOTES_PER_CHECK = 5
POLL_FAILURES_ALLOWED = 5
CANCEL_WAIT_S = 5.0
LOG_WINDOW_MARGIN_S = 2.0


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


def _describe_env(env: dict[str, str | None]) -> str:
    return ", ".join(f"{k}={'unset' if v is None else v}" for k, v in env.items())


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class ClusterDriver:
    """The runner's driver for stages `minikube` and `dev` (see the module doc)."""

    def __init__(
        self,
        profile: Profile,
        core: client.CoreV1Api,
        applier: PolicyApplier,
        starter: Starter,
        prometheus: PrometheusCollector,
        fixtures: FixtureSet,
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.profile = profile
        self.core = core
        self.applier = applier
        self.starter = starter
        self.prometheus = prometheus
        self.fixtures = fixtures
        self._log = log or (lambda _line: None)
        self._switch_lock = threading.Lock()
        self._pod_checked_for: str | None = None  # the config whose per-run pod was checked
        # UIDs of the mcp-host pods that existed once the configuration was in effect:
        # a pod not among them was created after the change. (Not creationTimestamp: it
        # has whole seconds only, and comes from the API server's clock, not ours.)
        self._pods_before_change: set[str] = set()
        # The platform keeps its runs (and run objects) after a stage: a second stage, or
        # a --resume, with the same run ids would be refused as duplicates. Each harness
        # process therefore names its runs on the platform `<run_id>-<attempt>`; the
        # record keeps our run_id and notes the platform's.
        self.attempt = secrets.token_hex(3)

    # -- configuration switching ------------------------------------------------------

    def _ensure_config(self, job: RunJob, cancel: threading.Event) -> None:
        with self._switch_lock:
            active = self.applier.active
            if active is not None and active.config == job.config.name:
                return
            try:
                self.applier.apply(job.config, cancel)
            except Interrupted:
                raise
            except ConfigApplyError as exc:
                raise StageAbort(str(exc)) from None
            self._pod_checked_for = None
            if self.profile.pods.mcp_host_per_run:
                self._pods_before_change = self._mcp_host_pod_uids(job)

    def _mcp_host_pod_uids(self, job: RunJob) -> set[str]:
        sel = self.profile.pods.mcp_host.selector
        api: Any = self.core
        try:
            pods = api.list_namespaced_pod(self.profile.namespace, label_selector=sel).items
        except Exception as exc:
            raise StageAbort(
                f"configuration '{job.config.name}': cannot list the mcp-host pods ({sel}) to "
                f"tell the run's pod from older ones: {type(exc).__name__} "
                f"{getattr(exc, 'status', '') or ''}".rstrip()
            ) from None
        return {str(p.metadata.uid) for p in pods}

    def _check_run_pod(self, job: RunJob) -> None:
        """Per-run mcp-host pods: the newest running pod created after the change (not
        there when the configuration was verified) must carry the configuration
        (checked once per configuration block)."""
        if not self.profile.pods.mcp_host_per_run or self._pod_checked_for == job.config.name:
            return
        sel = self.profile.pods.mcp_host
        pods = [
            p
            for p in running_pods(self.core, self.profile.namespace, sel.selector)
            if str(p.metadata.uid) not in self._pods_before_change
        ]
        if not pods:
            raise StageAbort(
                f"configuration '{job.config.name}': no mcp-host pod ({sel.selector}) created "
                "after the change was found during the first run, so its environment could "
                "not be verified (pods.mcp_host_per_run is true in the profile)"
            )
        env = pod_env(pods[0], sel.container)
        have: dict[str, str | None] = {k: env.get(k) for k in expected_env(job.config)}
        diffs = env_differences(expected_env(job.config), have)
        if diffs:
            raise StageAbort(
                f"configuration '{job.config.name}' is not in effect on mcp-host pod "
                f"{pods[0].metadata.name}: {'; '.join(diffs)}. The WRC does not forward it "
                "(MCP_HOST_ENV_PASSTHROUGH?)"
            )
        self._log(
            f"configuration {job.config.name}: mcp-host pod {pods[0].metadata.name} (created "
            f"after the change) carries it: {_describe_env(have)}"
        )
        self._pod_checked_for = job.config.name

    # -- one run ----------------------------------------------------------------------

    def run(self, job: RunJob, cancel: threading.Event) -> RunRecord:
        started_at = now_rfc3339()
        try:
            self._ensure_config(job, cancel)
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
        counters_start = self.prometheus.begin_run()
        window_start = datetime.now(UTC) - timedelta(seconds=LOG_WINDOW_MARGIN_S)
        t0 = time.monotonic()
        try:
            handle = self.starter.start(values)
        except StartError as exc:
            return self._record(
                job, started_at, outcome="harness_error", notes=[*notes, f"run not started: {exc}"]
            )
        notes.append(f"platform run id: {handle.platform_run_id}")
        outcome, status, poll_notes, spill_during, disk_dir = self._follow(job, handle, cancel)
        wall_s = time.monotonic() - t0
        finished_at = now_rfc3339()
        notes += poll_notes
        if outcome is None:
            return self._record(
                job, started_at, outcome="harness_error", notes=notes, finished_at=finished_at
            )
        if self.profile.pods.mcp_host_per_run:
            self._check_run_pod(job)  # raises StageAbort on a mismatch
        # The counters first: their end snapshot waits two scrape intervals past the run,
        # which also gives the pods' log lines time to reach the API.
        persisted, reads, prom_notes = self.prometheus.end_run(time.time(), counters_start)
        notes += prom_notes
        fields = self._fields(job, handle, status, window_start, wall_s, notes)
        disk_clean = self._disk_after(job, disk_dir, spill_during, notes)
        quality = self._quality(job, outcome, status, disk_dir, notes)
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
            **fields,
        )

    def _record(self, job: RunJob, started: str, **fields: Any) -> RunRecord:
        data: dict[str, Any] = {
            **job.identity(),
            "started_at": started,
            "finished_at": fields.pop("finished_at", None) or now_rfc3339(),
        }
        data.update(fields)
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
        self, job: RunJob, handle: RunHandle, cancel: threading.Event
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
                look = look_for_spill(
                    self.core,
                    self.profile.namespace,
                    self.profile.disk.pod,
                    self._output_dir(job, handle, status),
                    self.profile.disk.spill_name,
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
    ) -> dict[str, Any]:
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

        # The step's log lines: the run's own log endpoint, else the mcp-host pods.
        ns = self.profile.namespace
        step_lines: list[str] | None = None
        try:
            step_lines = self.starter.logs(handle)
        except StartError as exc:
            notes.append(f"logs: the run's log endpoint failed: {exc}")
        mcp = pod_logs(self.core, ns, self.profile.pods.mcp_host, window_start)
        coord = pod_logs(self.core, ns, self.profile.pods.coordinator, window_start)
        notes += mcp.notes + coord.notes
        if step_lines is None and mcp.ok:
            mine = lines_containing(mcp.lines, handle.run_id) or lines_containing(
                mcp.lines, handle.platform_run_id
            )
            step_lines = mine or mcp.lines
        parsed = parse_logs(step_lines or [], self.profile.logs)
        for key in ("iterations", "input_tokens", "output_tokens"):
            if out[key] is None and getattr(parsed, key) is not None:
                out[key] = getattr(parsed, key)
                notes.append(f"{key}: from the step's log lines")
        out["hit_iteration_limit"] = parsed.hit_iteration_limit
        if coord.ok:
            mine = lines_containing(coord.lines, handle.run_id) or lines_containing(
                coord.lines, handle.platform_run_id
            )
            out["status_report_bytes"] = parse_logs(
                mine or coord.lines, self.profile.logs
            ).status_report_bytes
        if out["status_report_bytes"] is None:
            notes.append(
                "status_report_bytes: no bodyBytes line from the coordinator in the run's window"
            )

        # Criterion 5, logs: every pod line of the window, and the run's own log.
        fixture = self.fixtures.get(job.recipe, job.input.name)
        if mcp.ok or coord.ok or step_lines:
            scanned = [*mcp.lines, *coord.lines, *(step_lines or [])]
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
        return out

    def _disk_after(
        self, job: RunJob, directory: str, during: set[str], notes: list[str]
    ) -> bool | None:
        look = look_for_spill(
            self.core,
            self.profile.namespace,
            self.profile.disk.pod,
            directory,
            self.profile.disk.spill_name,
        )
        if look.entries is None:
            notes.append(f"after the run: {look.note}")
            if during:
                return False
            return None
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
    ) -> bool | None:
        if outcome == "aborted":
            return None
        fixture = self.fixtures.get(job.recipe, job.input.name)
        text = _first(self.profile.fields.output_text, status or {})
        output = text if isinstance(text, str) else None
        if output is None:
            output, note = read_output(
                self.core,
                self.profile.namespace,
                self.profile.disk.pod,
                directory,
                self.profile.disk.output_files,
            )
            if note:
                notes.append(note)
                return None
        if output is None and outcome == "succeeded":
            notes.append("quality: the step succeeded but no output file was found (not judged)")
            return None
        return judge_output(output, fixture)
