"""`sim_stage`: the one way a simulator stage is run and written, for `run`, `sweep`,
`sensitivity` and `make bench`. Real runs of a small matrix on the simulator."""

from __future__ import annotations

import threading
from pathlib import Path

import yaml
from matrix_builders import small_matrix
from spillover_harness.plan.matrix import parse_matrix
from spillover_harness.results.results_dir import StageDir
from spillover_harness.sim.faults import sim_faults
from spillover_harness.stages.sim_stage import SimStageSpec, sim_stage

MATRIX = parse_matrix(yaml.safe_load(small_matrix("sim-stage")), source="small")


def test_a_sim_stage_writes_its_records_and_a_stage_json_naming_the_simulator(
    tmp_path: Path,
) -> None:
    spec = SimStageSpec(faults=["ignore-env"], matrix_source="m.yaml", progress=False, quiet=True)
    stage = sim_stage(MATRIX, spec)
    assert stage.driver.faults == sim_faults(["ignore-env"])
    result = stage.run(MATRIX, tmp_path / "out", cancel=threading.Event())
    assert len(result.records) == 4 and not result.interrupted  # 2 configs x 1 cell x 2
    written = StageDir(tmp_path / "out").read_stage()
    assert written is not None and written.stage == "sim"
    assert written.driver.identity() == {"kind": "sim", "faults": ["ignore-env"]}
    assert written.matrix_source == "m.yaml"
    assert written.provenance is not None
    assert written.provenance.simulator_parameters == stage.driver.parameters()
    again = stage.run(MATRIX, tmp_path / "out", cancel=threading.Event(), resume=True)
    assert again.records == result.records  # resumed: nothing left to run


def test_a_study_names_itself_in_the_driver_identity(tmp_path: Path) -> None:
    spec = SimStageSpec(study="sweep", progress=False, quiet=True)
    sim_stage(MATRIX, spec).run(MATRIX, tmp_path, cancel=threading.Event())
    written = StageDir(tmp_path).read_stage()
    assert written is not None
    assert written.driver.identity() == {"kind": "sim", "faults": [], "study": "sweep"}


def test_no_lane_when_the_matrix_runs_none_on_sim(tmp_path: Path) -> None:
    stage = sim_stage(MATRIX, SimStageSpec(progress=False, quiet=True))
    assert stage.write_lane(MATRIX, tmp_path) is None
    assert not StageDir(tmp_path).lane_file.exists()
