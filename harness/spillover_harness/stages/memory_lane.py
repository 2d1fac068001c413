"""The concurrency lane on a cluster stage: per configuration and for each N of
`memory.concurrency`, N executions of the lane's cell started at once on the recipe's
mcp-host, and the peak working set the kubelet measured while they ran.

The seed: one mcp-host serves every concurrent run of a recipe and /execute has no
concurrency cap, so memory grows with the executions at once. The simulator adds up
modelled traces (`run/concurrency.py`); here the platform runs them for real,
through the same driver as the matrix (each execution checked on the pod that served
it), after the matrix and before the policy is restored. Its runs are not records of
the stage (they are not cells of the matrix); their peak is read with the profile's
`memory` queries over the window the N runs spanned, on the pods that served them,
and written to `memory-lane.json` in the same form as the simulator's, so the report
shows it the same way. While the N runs go, the kubelets' Summary API is sampled
every second where the API server serves it (`cluster/kubelet_summary.py`): each
point's peak is the higher of those samples and Prometheus' peak, and its
`peak_source` names the one that gave it and its step (`kubelet-summary@1s`,
`prometheus@30s`). A point whose peak or limit cannot be had is left out, with a note.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from spillover_harness.cluster.kubelet_summary import SummarySampler, combine_peak
from spillover_harness.collectors.memory import (
    BlockMemory,
    MemoryWindow,
    read_block_memory,
    read_later,
    wait_for_later_scrape,
)
from spillover_harness.drivers.base import RunJob
from spillover_harness.drivers.cluster import ClusterDriver
from spillover_harness.plan.matrix import Configuration, Matrix
from spillover_harness.results.records import RunRecord
from spillover_harness.results.results_dir import LanePoint, MemoryLane
from spillover_harness.run.runner import seed_for

__all__ = ["LaneOutcome", "run_cluster_lane"]


@dataclass(frozen=True)
class LaneOutcome:
    """The lane (None: the matrix lists no concurrency) and the notes for the report."""

    lane: MemoryLane | None
    notes: list[str]


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def lane_jobs(
    matrix: Matrix, stage: str, config: Configuration, executions: int, out_dir: Path
) -> list[RunJob]:
    """The N jobs of one lane point: the lane's cell at repetitions 1..N, seeded as the
    stage seeds them, named apart from the matrix's runs (`lane-<config>-n<N>-<i>`)."""
    recipe, input_name = matrix.memory_lane_cell()
    spec = next(i for r, i in matrix.cells() if r.name == recipe and i.name == input_name)
    return [
        RunJob(
            run_id=f"lane-{config.name}-n{executions}-{rep}",
            stage=stage,
            config=config,
            recipe=recipe,
            input=spec,
            repetition=rep,
            seed=seed_for(matrix, recipe, input_name, rep),
            timeout_s=matrix.run_timeout_s,
            out_dir=out_dir,
        )
        for rep in range(1, executions + 1)
    ]


def run_cluster_lane(
    matrix: Matrix,
    stage: str,
    driver: ClusterDriver,
    out_dir: Path,
    *,
    cancel: threading.Event,
    log: Callable[[str], None],
) -> LaneOutcome:
    """Run the lane through `driver` (whose configuration is switched as for the matrix);
    a lane run that fails is noted, never stops the stage."""
    counts = sorted(set(matrix.memory.concurrency or ()))
    if not counts:
        return LaneOutcome(None, [])
    recipe, input_name = matrix.memory_lane_cell()
    notes: list[str] = []
    points: list[LanePoint] = []
    for config in matrix.configurations:
        for n in counts:
            if cancel.is_set():
                notes.append("concurrency lane: interrupted; the points measured are shown")
                return LaneOutcome(MemoryLane(recipe, input_name, tuple(points)), notes)
            log(f"concurrency lane: {config.name}, {n} of {recipe}/{input_name} at once")
            jobs = lane_jobs(matrix, stage, config, n, out_dir)
            with (
                SummarySampler(
                    driver.cluster,
                    driver.profile.pods.mcp_host_selector(recipe),
                    driver.profile.pods.mcp_host.container or "mcp-host",
                ) as sampler,
                ThreadPoolExecutor(max_workers=n, thread_name_prefix="lane") as pool,
            ):
                records = list(pool.map(lambda job: driver.run(job, cancel), jobs))
            point, note = _point(driver, config.name, n, records, sampler)
            if point is not None:
                points.append(point)
            if note:
                notes.append(f"concurrency lane, {config.name} x{n}: {note}")
    return LaneOutcome(MemoryLane(recipe, input_name, tuple(points)), notes)


def _point(
    driver: ClusterDriver,
    config: str,
    n: int,
    records: list[RunRecord],
    sampler: SummarySampler,
) -> tuple[LanePoint | None, str]:
    # A run the platform failed still loaded the mcp-host: its memory counts. One the
    # harness could not follow is named with its first note.
    outcomes = Counter(r.outcome for r in records if r.outcome != "succeeded")
    problems = [f"{count} of {n} run(s) ended {what}" for what, count in sorted(outcomes.items())]
    problems += [
        f"{r.run_id}: {r.notes[0]}" for r in records if r.outcome == "harness_error" and r.notes
    ][:1]
    pods = sorted({p.name for r in records for p in r.mcp_host_pods or ()})
    start = min(_epoch(r.started_at) for r in records)
    end = max(_epoch(r.finished_at) for r in records)
    window = MemoryWindow(
        driver.profile.namespace,
        tuple(pods),
        driver.profile.pods.mcp_host.container or "mcp-host",
        start,
        end,
    )
    memory = read_point_memory(driver, window)
    peak = combine_peak(
        memory.peak_bytes, driver.prometheus.scrape_interval_s, sampler.peaks, pods, sampler.step_s
    )
    if peak.peak_bytes is None or memory.limit_bytes is None:
        problems += memory.notes or ["memory: the peak or the limit was not measured"]
        return None, "; ".join([*problems, "point left out"])
    early = sum(r.outcome != "succeeded" for r in records)
    point = LanePoint(config, n, peak.peak_bytes, memory.limit_bytes, peak.source, early)
    return point, "; ".join(problems)


def read_point_memory(driver: ClusterDriver, window: MemoryWindow) -> BlockMemory:
    """A point's figures at its end; those Prometheus had no sample of by then (a point
    on pods the switch made, over before their first scrape) after waiting for its next
    scrape: the next point runs on the same pods at once, so they cannot be read later
    as a block's are (collectors/memory.py)."""
    queries = driver.profile.memory
    memory = read_block_memory(driver.prometheus, queries, window)
    if memory.pending:
        until = wait_for_later_scrape(driver.prometheus, window.end)
        read_later(driver.prometheus, queries, memory, window, until=until)
    return memory
