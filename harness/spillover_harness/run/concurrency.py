"""The concurrency lane: N executions of one recipe at once on one mcp-host, per
configuration, and the peak working set against N (docs/harness.md, "Memory").

The seed: one mcp-host serves every concurrent run of a recipe and /execute has no
concurrency cap, so memory grows with the number of executions at once. On the
simulator the lane runs, per configuration, the largest N of `memory.concurrency`
executions of the lane's cell (repetitions 1..N, seeded as the stage seeds them) one
after another, keeps each one's memory trace (plan/memory_model.py, with no limit so that no
trace is cut short), and adds up the first N traces started at the same instant for
every N listed: deterministic, whatever the threads do. A peak past the limit means
the mcp-host would be OOM-killed with N executions at once.

The lane's result is `memory-lane.json` in the stage's results directory; the report
shows it in its memory section (`results_dir.StageDir` writes and reads it). Pure
except for `run_lane`.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from spillover_harness.fixtures import FixtureSet
from spillover_harness.plan.matrix import Configuration, Matrix
from spillover_harness.plan.memory_model import MemoryModel, Trace, peak_at_once
from spillover_harness.results.results_dir import (
    UNLIMITED,
    LanePoint,
    MemoryLane,
)
from spillover_harness.run.runner import seed_for
from spillover_harness.sim.handoff import HandoffSettings
from spillover_harness.sim.step import run_step
from spillover_harness.sim.steprun import StepLimits

__all__ = [
    "run_lane",
]


def _handoff(config: Configuration) -> HandoffSettings | None:
    spec = config.handoff
    if config.strategy != "handoff" or spec is None:
        return None
    return HandoffSettings(spec.threshold_tokens, spec.max_entries, spec.preview_chars)


def _traces(
    matrix: Matrix, fixtures: FixtureSet, config: Configuration, n: int, work: Path
) -> list[tuple[Trace, bool]]:
    """Each execution's memory trace, and whether it ended early (not `succeeded`)."""
    recipe, input_name = matrix.memory_lane_cell()
    fixture = fixtures.get(recipe, input_name)
    model = matrix.simulator_model()
    unlimited = replace(matrix.simulator_memory(), limit_bytes=UNLIMITED)
    traces: list[tuple[Trace, bool]] = []
    for rep in range(1, n + 1):
        run = run_step(
            fixture=fixture,
            env=config.env,
            seed=seed_for(matrix, recipe, input_name, rep),
            repetition=rep,
            run_id=f"lane-{rep}",
            output_dir=work / config.name / str(rep),
            limits=StepLimits.from_model(model, timeout_s=matrix.run_timeout_s),
            model=model,
            handoff=_handoff(config),
            memory=unlimited,
        )
        traces.append((run.memory_trace, run.outcome != "succeeded"))
    return traces


def lane_points(
    config: str, traces: list[tuple[Trace, bool]], counts: list[int], memory: MemoryModel
) -> list[LanePoint]:
    """The peak for each N in `counts`, the first N traces started at once, and how
    many of those N ended early."""
    return [
        LanePoint(
            config,
            n,
            peak_at_once([trace for trace, _ in traces[:n]], memory),
            memory.limit_bytes,
            ended_early=sum(early for _, early in traces[:n]),
        )
        for n in counts
        if n <= len(traces)
    ]


def run_lane(matrix: Matrix, fixtures: FixtureSet) -> MemoryLane | None:
    """The lane of `matrix` on the simulator; None when it lists no concurrency or does
    not run its lane on sim (`memory.lane_stages`)."""
    counts = matrix.memory.concurrency
    if not matrix.runs_lane("sim"):
        return None
    recipe, input_name = matrix.memory_lane_cell()
    memory = matrix.simulator_memory()
    points: list[LanePoint] = []
    with tempfile.TemporaryDirectory(prefix="memory-lane-") as tmp:
        for config in matrix.configurations:
            traces = _traces(matrix, fixtures, config, max(counts), Path(tmp))
            points += lane_points(config.name, traces, counts, memory)
    return MemoryLane(recipe, input_name, tuple(points))
