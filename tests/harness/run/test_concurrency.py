"""The concurrency lane: peak memory against N executions at once, per configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from spillover_harness.fixtures import build_fixtures
from spillover_harness.plan.matrix import MatrixError, load_matrix, parse_matrix
from spillover_harness.results.results_dir import (
    LANE_FILE,
    LaneFileError,
    LanePoint,
    MemoryLane,
    StageDir,
)
from spillover_harness.run.concurrency import run_lane

MEMORY_MATRIX = (
    Path(__file__).resolve().parents[3]
    / "harness/spillover_harness/plan/matrices/memory-budget.yaml"
)


def test_no_lane_on_sim_unless_the_matrix_runs_it_there(tmp_path: Path) -> None:
    # the default matrix lists N = 1, 2, 4 for its cluster stages only
    assert run_lane(load_matrix(None), build_fixtures(1)) is None
    text = MEMORY_MATRIX.read_text(encoding="utf-8").replace("  concurrency: [1, 2, 4]\n", "")
    (tmp_path / "m.yaml").write_text(text, encoding="utf-8")
    assert run_lane(load_matrix(tmp_path / "m.yaml"), build_fixtures(1)) is None  # none listed


def test_the_peak_grows_with_n_and_passes_the_limit() -> None:
    matrix = load_matrix(MEMORY_MATRIX)
    lane = run_lane(matrix, build_fixtures(matrix.seed))
    assert lane is not None and (lane.recipe, lane.input) == ("code-review", "budget-16MiB")
    for config in ("off", "128KiB", "128KiB-budget-1MiB"):
        points = [p for p in lane.points if p.config == config]
        assert [p.executions for p in points] == [1, 2, 4]
        peaks = [p.peak_bytes for p in points]
        assert peaks == sorted(peaks) and peaks[0] < peaks[-1]
    by = {(p.config, p.executions): p for p in lane.points}
    # one execution holding a full 16 MiB budget fits the simulated limit, two do not
    assert by[("128KiB", 2)].oom and not by[("128KiB", 1)].oom


def test_the_lane_file_round_trips_and_a_bad_one_says_what_is_wrong(tmp_path: Path) -> None:
    lane = MemoryLane("code-review", "budget", (LanePoint("128KiB", 2, 10, 20),))
    StageDir(tmp_path).write_lane(lane)
    assert StageDir(tmp_path).read_lane() == lane
    (tmp_path / LANE_FILE).write_text(json.dumps({"recipe": 1}))
    with pytest.raises(LaneFileError, match="expected recipe, input and points"):
        StageDir(tmp_path).read_lane()
    (tmp_path / LANE_FILE).unlink()
    assert StageDir(tmp_path).read_lane() is None  # no lane ran: nothing to say
    with pytest.raises(ValueError):
        MemoryLane.from_json({**lane.to_json(), "points": [{"config": "x"}]})


def test_a_lane_must_name_a_cell_of_the_matrix() -> None:
    text = MEMORY_MATRIX.read_text().replace("input: budget-16MiB}", "input: nope}")
    with pytest.raises(MatrixError, match=r"memory\.lane code-review/nope is not a cell"):
        parse_matrix(yaml.safe_load(text), source="m.yaml")


def test_a_cluster_lane_point_keeps_where_its_peak_came_from(tmp_path: Path) -> None:
    """A cluster stage's points name their peak's source and step; the simulator's
    (modelled) have none, and their file has no such key."""
    lane = MemoryLane(
        "code-review",
        "budget",
        (
            LanePoint("128KiB", 1, 10, 20, "kubelet-summary@1s"),
            LanePoint("128KiB", 2, 15, 20, "prometheus@30s"),
            LanePoint("off", 1, 9, 20),
        ),
    )
    StageDir(tmp_path).write_lane(lane)
    assert StageDir(tmp_path).read_lane() == lane
    written = json.loads((tmp_path / LANE_FILE).read_text(encoding="utf-8"))
    assert [p.get("peak_source", "-") for p in written["points"]] == [
        "kubelet-summary@1s",
        "prometheus@30s",
        "-",
    ]
    for bad in (3, "", "x" * 65):
        point = {"config": "x", "executions": 1, "peak_bytes": 1, "limit_bytes": 2}
        with pytest.raises(ValueError, match="peak_source must be a short string"):
            MemoryLane.from_json({**lane.to_json(), "points": [{**point, "peak_source": bad}]})
    with pytest.raises(ValueError, match="may have peak_source"):
        MemoryLane.from_json({**lane.to_json(), "points": [{**point, "peak_sauce": "x"}]})
