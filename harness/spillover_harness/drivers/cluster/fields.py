"""A run's record fields from what the platform and the pods say: the status JSONPaths
first, missing ones from the logs (the run's log endpoint, or the pods' logs of the
run's window, only the lines that carry the run's id), `status_report_bytes` from the
coordinator's `bodyBytes`, and the canary scan of the window's logs (criterion 5)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from spillover_operator.client import Connection

from spillover_harness.checks import scan_logs_for_canaries
from spillover_harness.checks.consistency import may_fill_budget
from spillover_harness.cluster.observe import pod_logs
from spillover_harness.cluster.starters import RunHandle, Starter, StartError
from spillover_harness.collectors.logs import (
    Attributed,
    attribute,
    budget_reached,
    count_matching,
    parse_logs,
)
from spillover_harness.drivers.base import RunJob
from spillover_harness.drivers.cluster.output import MAX_NOTES_PER_CHECK
from spillover_harness.drivers.cluster.status import as_float, as_int, first, parse_time
from spillover_harness.fixtures import FixtureSet
from spillover_harness.profile import Profile

# A coordinator log line that is late: looked for again this many times, this far apart.
LATE_LOG_LOOKS = 4
LATE_LOG_PAUSE_S = 0.5


def counts_from_prometheus(profile: Profile) -> bool:
    """The logs do not carry the stored/read-back lines (logs.spill_*): the counts
    of a run come from the Prometheus counters (one scrape wait per run)."""
    logs = profile.logs
    return logs.spill_persisted is None or logs.spill_read is None


@dataclass(frozen=True)
class Attribution:
    persisted: int | None
    reads: int | None
    foreign_ids: frozenset[str]


def own_pod(by_pod: dict[str, list[str]], ours: list[str], pattern: str) -> Attributed:
    """The lines of the pod whose log carries the run's lines (the pod that ran it; one
    run's lines are counted once even when several pods' logs are read), with the other
    runs' ids seen in any pod's log."""
    splits = [attribute(lines, ours, pattern) for lines in by_pod.values()]
    if not splits:
        return Attributed([], [], frozenset(), 0)
    best = max(splits, key=lambda a: len(a.mine))
    foreign = frozenset().union(*(a.foreign_ids for a in splits))
    return Attributed(best.mine, best.unattributed, foreign, best.foreign_lines)


class RunFields:
    """Reads one run's fields (see the module doc)."""

    def __init__(
        self, profile: Profile, cluster: Connection, starter: Starter, fixtures: FixtureSet
    ) -> None:
        self.profile = profile
        self.cluster = cluster
        self.starter = starter
        self.fixtures = fixtures

    def read(
        self,
        job: RunJob,
        handle: RunHandle,
        status: dict[str, Any] | None,
        window_start: datetime,
        wall_s: float,
        notes: list[str],
    ) -> tuple[dict[str, Any], Attribution]:
        f = self.profile.fields
        doc = status or {}
        out: dict[str, Any] = {
            "iterations": as_int(first(f.iterations, doc)),
            "input_tokens": as_int(first(f.input_tokens, doc)),
            "output_tokens": as_int(first(f.output_tokens, doc)),
            "hit_iteration_limit": None,
            "status_report_bytes": None,
            "logs_clean": None,
        }
        duration = as_float(first(f.duration_s, doc))
        if duration is None:
            ms = as_float(first(f.duration_ms, doc))
            duration = None if ms is None else ms / 1000
        if duration is None:
            a, b = parse_time(first(f.started_at, doc)), parse_time(first(f.finished_at, doc))
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
        mcp_split = own_pod(mcp.by_pod, ours, logs.run_id)
        coord_split = own_pod(coord.by_pod, ours, logs.run_id)
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
                mine = own_pod(coord.by_pod, ours, logs.run_id).mine
                out["status_report_bytes"] = parse_logs(mine, logs).status_report_bytes
        if out["status_report_bytes"] is None:
            notes.append(
                "status_report_bytes: no bodyBytes line from the coordinator carrying the "
                "run's id in its window (not measured)"
            )
        from_prometheus = counts_from_prometheus(self.profile)
        persisted = reads = None
        if not from_prometheus and step_lines and parsed.llm_calls:
            assert logs.spill_persisted is not None and logs.spill_read is not None
            persisted = count_matching(step_lines, logs.spill_persisted)
            reads = count_matching(step_lines, logs.spill_read)
        elif not from_prometheus:
            notes.append(
                "spillover_persisted, spillover_reads: the step's own log lines were not "
                "seen (not measured)"
            )
        # Criterion 5, logs: the run's lines and the lines that carry no run id at all
        # (a leak there cannot be put on another run); other runs' lines are excluded.
        fixture = self.fixtures.get(job.recipe, job.input.name)
        may_fill = may_fill_budget(job.config.env, fixture)
        seen = step_lines if step_lines and parsed.llm_calls else None
        out["budget_inline"], why = budget_reached(seen, logs.budget_inline, may_fill)
        if why is not None:
            notes.append(why)
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
        return out, Attribution(persisted, reads, foreign)
