"""A stage on the simulator, run and written one way, whoever runs it: `run --stage
sim`, a point of `sweep` or `sensitivity`, `make bench`.

Each of them needs the same stage: a SimDriver with the matrix's model and memory and
the fault switches asked for, and the runner writing stage.json with the driver's
identity (`kind: sim`, the faults, the study that ran it) and the simulator's
parameters in effect as its provenance. What differs between them is only what
`SimStageSpec` names: the faults, the study, where the matrix came from, how the runs
are shown, the command that continues the stage.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spillover_harness.drivers.sim import SimDriver
from spillover_harness.fixtures import build_fixtures
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.results_dir import DEFAULT_MATRIX_SOURCE, Provenance, StageDir
from spillover_harness.run.concurrency import run_lane
from spillover_harness.run.runner import StageOptions, StageResult, run_stage
from spillover_harness.sim.faults import sim_faults

__all__ = ["SIM_STAGE", "SimStage", "SimStageSpec", "sim_stage"]

SIM_STAGE = "sim"


@dataclass(frozen=True, kw_only=True)
class SimStageSpec:
    """What a caller says about its simulator stage; the rest is the same for all."""

    faults: Sequence[str] = ()  # `--fault` names (sorted by the caller)
    study: str | None = None  # sweep | sensitivity: written into the driver's identity
    matrix_source: str = DEFAULT_MATRIX_SOURCE
    resume: bool = False
    concurrency: int | None = None  # None: the matrix's
    progress: bool = True
    quiet: bool = False
    resume_hint: str | None = None


@dataclass(frozen=True)
class SimStage:
    """A simulator stage ready to run into a results directory (`sim_stage`)."""

    driver: SimDriver
    options: StageOptions

    def run(
        self, matrix: Matrix, out_dir: Path, *, cancel: threading.Event, resume: bool | None = None
    ) -> StageResult:
        """Run (or continue, `resume`) the stage of `matrix` in `out_dir`; see
        `runner.run_stage` for what it raises."""
        options = self.options if resume is None else replace(self.options, resume=resume)
        return run_stage(matrix, SIM_STAGE, self.driver, out_dir, options, cancel=cancel)

    def write_lane(self, matrix: Matrix, out_dir: Path) -> Path | None:
        """Run the matrix's concurrency lane on this stage's fixtures and write
        memory-lane.json beside the records (None: the matrix runs no lane on sim)."""
        if not matrix.runs_lane(SIM_STAGE):
            return None
        lane = run_lane(matrix, self.driver.fixtures)
        return StageDir(out_dir).write_lane(lane) if lane is not None else None


def sim_stage(matrix: Matrix, spec: SimStageSpec) -> SimStage:
    """The simulator stage of `matrix` as `spec` asks: its driver (the matrix's seed,
    model and memory, the faults) and how the runner writes it into stage.json."""
    faults = list(spec.faults)
    driver = SimDriver(
        faults=sim_faults(faults),
        fixtures=build_fixtures(matrix.seed),
        model=matrix.simulator_model(),
        memory=matrix.simulator_memory(),
    )
    identity: dict[str, Any] = {"kind": "sim", "faults": faults}
    if spec.study is not None:
        identity["study"] = spec.study
    options = StageOptions(
        resume=spec.resume,
        concurrency=spec.concurrency,
        progress=spec.progress,
        quiet=spec.quiet,
        driver_identity=identity,
        matrix_source=spec.matrix_source,
        resume_hint=spec.resume_hint,
        provenance=Provenance(simulator_parameters=driver.parameters()),
    )
    return SimStage(driver, options)
