"""The concurrency lane: N executions of one recipe at once on one mcp-host, per
configuration, and the peak working set against N (docs/harness.md, "Memory").

The seed: one mcp-host serves every concurrent run of a recipe and /execute has no
concurrency cap, so memory grows with the number of executions at once. On the
simulator the lane runs, per configuration, the largest N of `memory.concurrency`
executions of the lane's cell (repetitions 1..N, seeded as the stage seeds them) one
after another, keeps each one's memory trace (sim/memory.py, with no limit so that no
trace is cut short), and adds up the first N traces started at the same instant for
every N listed: deterministic, whatever the threads do. A peak past the limit means
the mcp-host would be OOM-killed with N executions at once.

The lane's result is `memory-lane.json` in the stage's results directory; the report
shows it in its memory section. Pure except for `run_lane` and `write_lane`.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from spillover_harness.atomic_file import atomic_write_bytes
from spillover_harness.fixtures import FixtureSet
from spillover_harness.matrix import Configuration, Matrix
from spillover_harness.runner import seed_for
from spillover_harness.sim.handoff import HandoffSettings
from spillover_harness.sim.memory import MemoryModel, Trace, peak_at_once
from spillover_harness.sim.step import StepLimits, run_step

__all__ = ["LANE_FILE", "LanePoint", "MemoryLane", "read_lane", "run_lane", "write_lane"]

LANE_FILE = "memory-lane.json"
UNLIMITED = 1 << 62


@dataclass(frozen=True)
class LanePoint:
    """One configuration with `executions` at once: the working set's peak (what it
    would reach; past `limit_bytes` the mcp-host is OOM-killed)."""

    config: str
    executions: int
    peak_bytes: int
    limit_bytes: int

    @property
    def oom(self) -> bool:
        return self.peak_bytes > self.limit_bytes


@dataclass(frozen=True)
class MemoryLane:
    recipe: str
    input: str
    points: tuple[LanePoint, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "input": self.input,
            "points": [asdict(p) for p in self.points],
        }

    @classmethod
    def from_json(cls, data: Any) -> MemoryLane:
        """Raises ValueError for anything but what `to_json` writes."""
        if not isinstance(data, dict) or set(data) != {"recipe", "input", "points"}:
            raise ValueError("not a memory lane: expected recipe, input and points")
        points = []
        for p in data["points"] if isinstance(data["points"], list) else []:
            if not isinstance(p, dict) or set(p) != {
                "config",
                "executions",
                "peak_bytes",
                "limit_bytes",
            }:
                raise ValueError("a lane point needs config, executions, peak_bytes, limit_bytes")
            numbers = [p["executions"], p["peak_bytes"], p["limit_bytes"]]
            if not isinstance(p["config"], str) or not all(
                type(n) is int and 0 <= n <= UNLIMITED for n in numbers
            ):
                raise ValueError("a lane point's figures must be non-negative integers")
            points.append(LanePoint(p["config"], *numbers))
        if not isinstance(data["recipe"], str) or not isinstance(data["input"], str):
            raise ValueError("a lane's recipe and input must be strings")
        return cls(data["recipe"], data["input"], tuple(points))


def _handoff(config: Configuration) -> HandoffSettings | None:
    spec = config.handoff
    if config.strategy != "handoff" or spec is None:
        return None
    return HandoffSettings(spec.threshold_tokens, spec.max_entries, spec.preview_chars)


def _traces(
    matrix: Matrix, fixtures: FixtureSet, config: Configuration, n: int, work: Path
) -> list[Trace]:
    recipe, input_name = matrix.memory_lane_cell()
    fixture = fixtures.get(recipe, input_name)
    model = matrix.simulator_model()
    unlimited = replace(matrix.simulator_memory(), limit_bytes=UNLIMITED)
    traces: list[Trace] = []
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
        traces.append(run.memory_trace)
    return traces


def lane_points(
    config: str, traces: list[Trace], counts: list[int], memory: MemoryModel
) -> list[LanePoint]:
    """The peak for each N in `counts`, the first N traces started at once."""
    return [
        LanePoint(config, n, peak_at_once(traces[:n], memory), memory.limit_bytes)
        for n in counts
        if n <= len(traces)
    ]


def run_lane(matrix: Matrix, fixtures: FixtureSet) -> MemoryLane | None:
    """The lane of `matrix` on the simulator; None when it lists no concurrency."""
    counts = matrix.memory.concurrency
    if not counts:
        return None
    recipe, input_name = matrix.memory_lane_cell()
    memory = matrix.simulator_memory()
    points: list[LanePoint] = []
    with tempfile.TemporaryDirectory(prefix="memory-lane-") as tmp:
        for config in matrix.configurations:
            traces = _traces(matrix, fixtures, config, max(counts), Path(tmp))
            points += lane_points(config.name, traces, counts, memory)
    return MemoryLane(recipe, input_name, tuple(points))


def write_lane(lane: MemoryLane, out_dir: Path) -> Path:
    path = out_dir / LANE_FILE
    text = json.dumps(lane.to_json(), indent=2) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def read_lane(out_dir: Path) -> MemoryLane | None:
    """The lane written next to the records, if any. A lane file that cannot be read is
    reported by the caller as absent: the report never fails over it."""
    path = out_dir / LANE_FILE
    if not path.is_file():
        return None
    try:
        if path.stat().st_size > 1_000_000:
            return None
        return MemoryLane.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, RecursionError):
        return None
