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

__all__ = [
    "LANE_FILE",
    "LaneFileError",
    "LanePoint",
    "MemoryLane",
    "read_lane",
    "run_lane",
    "write_lane",
]

LANE_FILE = "memory-lane.json"
LANE_MAX_BYTES = 1_000_000
UNLIMITED = 1 << 62
_POINT_KEYS = {"config", "executions", "peak_bytes", "limit_bytes"}


class LaneFileError(ValueError):
    """memory-lane.json exists but cannot be read as a lane: the message says what is
    wrong with it, for the report (which shows it instead of the lane)."""


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys: a second `points` (or a point's second
    # `peak_bytes`) would silently replace the first, and an OOM warning with it.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise LaneFileError(f"the key {key!r} appears twice in one object")
        out[key] = value
    return out


@dataclass(frozen=True)
class LanePoint:
    """One configuration with `executions` at once: the working set's peak (what it
    would reach; past `limit_bytes` the mcp-host is OOM-killed). `peak_source`, on a
    cluster stage: where the measured peak came from, at what step
    (`kubelet-summary@1s`, `prometheus@30s`); None on the simulator (modelled)."""

    config: str
    executions: int
    peak_bytes: int
    limit_bytes: int
    peak_source: str | None = None

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
            "points": [
                {k: v for k, v in asdict(p).items() if k != "peak_source" or v is not None}
                for p in self.points
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> MemoryLane:
        """Raises ValueError for anything but what `to_json` writes."""
        if not isinstance(data, dict) or set(data) != {"recipe", "input", "points"}:
            raise ValueError("not a memory lane: expected recipe, input and points")
        if not isinstance(data["points"], list):
            raise ValueError("a lane's points must be a list")
        points: list[LanePoint] = []
        for p in data["points"]:
            if not isinstance(p, dict) or set(p) - {"peak_source"} != _POINT_KEYS:
                raise ValueError(
                    "a lane point needs config, executions, peak_bytes, limit_bytes "
                    "(and may have peak_source)"
                )
            numbers = [p["executions"], p["peak_bytes"], p["limit_bytes"]]
            if not isinstance(p["config"], str) or not all(
                type(n) is int and 0 <= n <= UNLIMITED for n in numbers
            ):
                raise ValueError("a lane point's figures must be non-negative integers")
            source = p.get("peak_source")
            if source is not None and not (isinstance(source, str) and 0 < len(source) <= 64):
                raise ValueError("a lane point's peak_source must be a short string or null")
            point = LanePoint(
                p["config"], p["executions"], p["peak_bytes"], p["limit_bytes"], source
            )
            if any((q.config, q.executions) == (point.config, point.executions) for q in points):
                raise ValueError(f"the point {point.config} x{point.executions} is listed twice")
            points.append(point)
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


def write_lane(lane: MemoryLane, out_dir: Path) -> Path:
    path = out_dir / LANE_FILE
    text = json.dumps(lane.to_json(), indent=2) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def read_lane(out_dir: Path) -> MemoryLane | None:
    """The lane written next to the records; None when there is none. Raises
    LaneFileError naming what is wrong with a file that is there but is not a lane
    (too large, not JSON, a key twice, not the form `write_lane` writes)."""
    path = out_dir / LANE_FILE
    if not path.is_file():
        return None
    try:
        size = path.stat().st_size
        if size > LANE_MAX_BYTES:
            raise LaneFileError(f"{size:,} bytes, more than a lane's {LANE_MAX_BYTES:,}")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LaneFileError(f"cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise LaneFileError("not UTF-8 text") from None
    try:
        data = json.loads(text, object_pairs_hook=_refuse_duplicates)
    except LaneFileError:
        raise
    except json.JSONDecodeError as exc:
        raise LaneFileError(f"not JSON: {exc.msg} at line {exc.lineno}") from None
    except (ValueError, RecursionError):
        raise LaneFileError("not JSON (a number or nesting it cannot hold)") from None
    try:
        return MemoryLane.from_json(data)
    except ValueError as exc:
        raise LaneFileError(str(exc)) from None
