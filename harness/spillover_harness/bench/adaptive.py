"""Benchmark: the runs `run --until-stable` spends against a uniform increase of
repetitions reaching the same stability (wired into `make bench`).

On the default matrix's sim stage, whose decision is marginal (the token cells of the
small and medium code reviews sit near criterion 3's limit):

- adaptive: `spillover-harness run --stage sim --until-stable S --max-repetitions CAP`,
  the real command in this process; its runs and the stability it reached;
- uniform: the same stage at CAP repetitions in every cell, once; then, for r = the
  matrix's repetitions .. CAP, the verdict of the first r repetitions of every cell
  (the simulator seeds a run by its cell and repetition, so these are the runs a
  stage of r repetitions makes): the smallest r whose stability reaches the adaptive
  one, and its runs (configurations x cells x r).
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from spillover_harness.plan.matrix import load_matrix


@dataclass(frozen=True)
class AdaptiveFigures:
    adaptive_runs: int
    adaptive_stability: float
    uniform_runs: int | None  # None: no r up to the cap reached the adaptive stability
    uniform_repetitions: int | None
    cap: int


def bench_adaptive(target: float = 0.9, cap: int = 40) -> AdaptiveFigures:
    from spillover_harness.cli import main as harness
    from spillover_harness.evaluate import evaluate
    from spillover_harness.results.records import read_records
    from spillover_harness.results.results_dir import StageDir

    matrix = load_matrix(None)
    with tempfile.TemporaryDirectory(prefix="spillover-bench-adaptive-") as tmp:
        out = Path(tmp) / "adaptive"
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            code = harness(
                ["run", "--stage", "sim", "--out", str(out), "--no-progress",
                 "--until-stable", f"{target}", "--max-repetitions", str(cap)]
            )  # fmt: skip
        if code != 0:
            raise RuntimeError(f"run --until-stable exited {code}: {quiet.getvalue()[-2000:]}")
        stage = StageDir(out)
        adaptive_runs = len(read_records(stage.records_file))
        reached = stage.read_verdict_header().stability.decision

        uniform_dir = Path(tmp) / "uniform"
        data = matrix.model_dump(mode="json")
        data["repetitions"]["sim"] = cap
        big = Path(tmp) / "matrix.yaml"
        big.write_text(json.dumps(data))
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            harness(
                ["run", "--stage", "sim", "--matrix", str(big), "--out", str(uniform_dir),
                 "--no-progress"]
            )  # fmt: skip
        pool = read_records(StageDir(uniform_dir).records_file)
    own = matrix.repetitions.for_stage("sim")
    for reps in range(own, cap + 1):
        data["repetitions"]["sim"] = reps
        prefix = matrix.model_validate(data)
        verdict = evaluate([r for r in pool if r.repetition <= reps], prefix)
        if verdict.stability is not None and verdict.stability.decision >= reached:
            runs = len(matrix.configurations) * len(matrix.cells()) * reps
            return AdaptiveFigures(adaptive_runs, reached, runs, reps, cap)
    return AdaptiveFigures(adaptive_runs, reached, None, None, cap)
