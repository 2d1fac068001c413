"""The small interface between the runner and whatever actually executes a run."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from spillover_harness.plan.matrix import Configuration, InputSpec
from spillover_harness.results.records import RunRecord


@dataclass(frozen=True)
class RunJob:
    """One cell of the matrix at one repetition, with everything a driver needs."""

    run_id: str
    stage: str
    config: Configuration
    recipe: str
    input: InputSpec
    repetition: int
    seed: int
    timeout_s: float
    out_dir: Path  # results directory of the stage; drivers may keep per-run artifacts under it

    def identity(self) -> dict[str, object]:
        """The record fields that say which run this is (every driver's record starts here)."""
        return {
            "run_id": self.run_id,
            "stage": self.stage,
            "config": self.config.name,
            "recipe": self.recipe,
            "input": self.input.name,
            "size_class": self.input.size_class,
            "repetition": self.repetition,
        }


class Driver(Protocol):
    """Runs a job and returns its record.

    A driver never raises for a run that went wrong: a run it could not start
    or observe becomes a record with outcome `harness_error` and a note. It
    must stop promptly (returning `timed_out` or `aborted`) when `cancel` is set.
    """

    def run(self, job: RunJob, cancel: threading.Event) -> RunRecord: ...


class StageAbort(Exception):
    """Raised by a driver when the stage must stop before spending more runs (e.g. a
    cluster configuration could not be applied or verified). The run that raised it is
    not recorded (it never ran); no new run starts; `run_stage` re-raises it once the
    running ones have stopped. The records already written stay (resume later)."""
