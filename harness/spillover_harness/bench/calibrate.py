"""`make calibrate`: is the stated reproduction probability what really happens?

For each scenario, many seeded stages are evaluated by the real evaluator. Each stage
states `reproducibility.decision`, the probability that a fresh stage of the same
design reaches its decision, and, beside it, today's diagnostic `stability.decision`.
Each is judged against the truth:

- synthetic scenarios (`bench.scenarios`): the exact reproduction probability, the
  share of 100,000 fresh stages drawn from the scenario's truth that reach the stage's
  decision (Monte Carlo error about 0.002);
- the shipped simulator, paired: stages of the default matrix whose runs are seeded
  afresh (another matrix seed for the runs, the same inputs); the truth of a stage is
  the share of the other stages that reach its decision.

Per scenario it prints a reliability table (buckets 0.1 wide: stages, mean stated, mean
true) and `calibration_error` (the expected calibration error: the stage-weighted mean
of |mean stated - mean true| over the buckets) and `brier` (the mean of
(stated - reproduced)^2, taken in expectation over the fresh stage: (q - r)^2 + r (1 - r))
for both figures. The figures are measured, not modelled; a scenario's truth is
modelled only in the synthetic scenarios, and says so.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spillover_harness.bench.scenarios import (
    CELLS,
    SCENARIOS,
    STAGE,
    Scenario,
    TrueSource,
    matrix_at,
)
from spillover_harness.bench.scenarios import stage_records as synthetic_stage
from spillover_harness.evaluate import evaluate
from spillover_harness.evaluate.context import Context, group
from spillover_harness.evaluate.rule_draws import draw_stage
from spillover_harness.plan.matrix import Matrix, load_matrix
from spillover_harness.results.records import RunRecord
from spillover_harness.results.verdict import Verdict

TRUE_DRAWS = 100_000
BUCKETS = 10


@dataclass(frozen=True)
class Judged:
    """One stage: its decision, what it stated, and the truth."""

    decision: str
    stated: float
    stability: float
    true: float


@dataclass(frozen=True)
class Bucket:
    low: float
    stages: int
    stated: float
    true: float


@dataclass(frozen=True)
class Calibration:
    scenario: str
    truth: str  # how the truth was had
    stages: int
    repetitions: int
    calibration_error: float
    brier: float
    stability_calibration_error: float
    stability_brier: float
    table: tuple[Bucket, ...]
    decisions: dict[str, int]


def reliability(stated: Sequence[float], true: Sequence[float]) -> tuple[float, list[Bucket]]:
    """The expected calibration error over buckets 0.1 wide, and the table."""
    q, r = np.asarray(stated, float), np.asarray(true, float)
    index = np.minimum((q * BUCKETS).astype(int), BUCKETS - 1)
    table: list[Bucket] = []
    error = 0.0
    for b in range(BUCKETS):
        inside = index == b
        if not inside.any():
            continue
        table.append(Bucket(b / BUCKETS, int(inside.sum()), float(q[inside].mean()),
                            float(r[inside].mean())))  # fmt: skip
        error += inside.sum() / len(q) * abs(q[inside].mean() - r[inside].mean())
    return float(error), table


def brier(stated: Sequence[float], true: Sequence[float]) -> float:
    """The Brier score against one fresh stage, in expectation: E[(q - Y)^2], Y ~ Bern(r)."""
    q, r = np.asarray(stated, float), np.asarray(true, float)
    return float(((q - r) ** 2 + r * (1 - r)).mean())


def _summarize(scenario: str, truth: str, reps: int, judged: Sequence[Judged]) -> Calibration:
    stated = [j.stated for j in judged]
    steady = [j.stability for j in judged]
    true = [j.true for j in judged]
    error, table = reliability(stated, true)
    steady_error, _ = reliability(steady, true)
    decisions: dict[str, int] = {}
    for j in judged:
        decisions[j.decision] = decisions.get(j.decision, 0) + 1
    return Calibration(
        scenario, truth, len(judged), reps, error, brier(stated, true), steady_error,
        brier(steady, true), tuple(table), decisions,
    )  # fmt: skip


def _figures(verdict: Verdict) -> tuple[float, float]:
    fresh, steady = verdict.reproducibility, verdict.stability
    if fresh is None or fresh.decision is None or steady is None:
        raise RuntimeError(f"the verdict states no figure: {verdict.decision_reason}")
    return fresh.decision, steady.decision


def true_distribution(
    scenario: Scenario, matrix: Matrix, records: Sequence[RunRecord], verdict: Verdict,
    draws: int = TRUE_DRAWS, seed: int = 1,
) -> dict[str, float]:  # fmt: skip
    """Every decision's exact probability for a fresh stage of this design, drawn from
    the scenario's truth through the same reading of the rule as the evaluator's."""
    grouped = group(records, matrix, STAGE)
    ctx = Context(
        baseline=matrix.acceptance.baseline,
        target=matrix.repetitions.for_stage(STAGE),
        tolerance=verdict.tolerance,
        cells=CELLS,
        quality_recipes=tuple(matrix.acceptance.quality_recipes),
        data=grouped.data,
        seeded=False,
        rules=dict(matrix.acceptance.rules),
    )
    sizes = {
        n: ctx.get(matrix.acceptance.baseline, r, i).valid for n, (r, i, _) in enumerate(CELLS)
    }
    truth = TrueSource(scenario, sizes, draws, np.random.default_rng(seed))
    return draw_stage(ctx, matrix, verdict.configs, truth).distribution()


def calibrate_synthetic(scenario: Scenario, stages: int, repetitions: int) -> Calibration:
    matrix = matrix_at(repetitions)
    truth: dict[str, float] | None = None
    judged: list[Judged] = []
    for seed in range(stages):
        records = synthetic_stage(scenario, 1000 + seed, repetitions)
        verdict = evaluate(records, matrix, stage=STAGE, seed=seed)
        if truth is None:  # the same design every time: one truth for the scenario
            truth = true_distribution(scenario, matrix, records, verdict)
        stated, steady = _figures(verdict)
        judged.append(Judged(verdict.decision, stated, steady, truth.get(verdict.decision, 0.0)))
    return _summarize(scenario.name, "exact (drawn from the scenario's truth)", repetitions,
                      judged)  # fmt: skip


def _sim_stage(matrix: Matrix, run_seed: int) -> list[RunRecord]:
    from spillover_harness.drivers.sim import SimDriver
    from spillover_harness.fixtures import build_fixtures
    from spillover_harness.run.runner import plan_jobs

    driver = SimDriver(fixtures=build_fixtures(matrix.seed))  # the shipped inputs
    reseeded = matrix.model_copy(update={"seed": run_seed})
    import tempfile

    cancel = threading.Event()
    with tempfile.TemporaryDirectory(prefix="spillover-calibrate-") as tmp:
        return [driver.run(job, cancel) for job in plan_jobs(reseeded, "sim", Path(tmp))]


def calibrate_simulator(stages: int, progress: bool) -> Calibration:
    matrix = load_matrix(None)
    verdicts: list[Verdict] = []
    for n in range(stages):
        records = _sim_stage(matrix, matrix.seed + 1 + n)
        verdicts.append(evaluate(records, matrix, stage="sim", seed=n))
        if progress:
            print(f"  simulator stage {n + 1}/{stages}", file=sys.stderr)
    judged: list[Judged] = []
    for n, verdict in enumerate(verdicts):
        others = [v.decision for m, v in enumerate(verdicts) if m != n]
        stated, steady = _figures(verdict)
        true = sum(d == verdict.decision for d in others) / len(others)
        judged.append(Judged(verdict.decision, stated, steady, true))
    return _summarize("simulator-paired", "the share of the other seeded stages deciding the "
                      "same", matrix.repetitions.for_stage("sim"), judged)  # fmt: skip


def print_calibration(c: Calibration) -> None:
    print(f"# scenario {c.scenario}: {c.stages} stages at {c.repetitions} repetitions; "
          f"truth: {c.truth}")  # fmt: skip
    decided = ", ".join(f"{d} {n}" for d, n in sorted(c.decisions.items()))
    print(f"#   decisions: {decided}")
    print("#   bucket     stages  stated  true")
    for b in c.table:
        print(f"#   {b.low:.1f}-{b.low + 0.1:.1f}  {b.stages:6d}  {b.stated:6.3f}  {b.true:6.3f}")
    print(f"{c.scenario}.calibration_error={c.calibration_error:.3f}")
    print(f"{c.scenario}.brier={c.brier:.3f}")
    print(f"{c.scenario}.stability_calibration_error={c.stability_calibration_error:.3f}")
    print(f"{c.scenario}.stability_brier={c.stability_brier:.3f}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spillover_harness.bench.calibrate",
        description=(
            "Judge the verdict's reproduction probability against how often fresh stages "
            "really reproduce the decision, per scenario: a reliability table, "
            "calibration_error and brier, beside the same for the stability diagnostic."
        ),
    )
    parser.add_argument(
        "--stages",
        type=int,
        default=200,
        help="seeded stages per synthetic scenario (default 200, at least 80)",
    )
    parser.add_argument(
        "--sim-stages",
        type=int,
        default=80,
        help="seeded stages of the shipped simulator (default 80, at least 80)",
    )
    parser.add_argument(
        "--repetitions",
        type=int,
        default=5,
        help="repetitions per cell of the synthetic stages (default 5)",
    )
    parser.add_argument("--scenario", action="append", default=None,
                        help="only this scenario (repeatable; 'simulator-paired' for the "
                        "simulator)")  # fmt: skip
    args = parser.parse_args(argv)
    for name, value, low in (("--stages", args.stages, 2), ("--sim-stages", args.sim_stages, 2),
                             ("--repetitions", args.repetitions, 1)):  # fmt: skip
        if not low <= value <= 10_000:
            parser.error(f"{name} must be between {low} and 10000, got {value}")
    chosen = set(args.scenario or [])
    known = {s.name for s in SCENARIOS} | {"simulator-paired"}
    if chosen - known:
        parser.error(f"unknown scenario(s) {sorted(chosen - known)}; known: {sorted(known)}")
    worst = 0.0
    for scenario in SCENARIOS:
        if chosen and scenario.name not in chosen:
            continue
        print(f"calibrating {scenario.name} ({args.stages} stages) ...", file=sys.stderr)
        result = calibrate_synthetic(scenario, args.stages, args.repetitions)
        print_calibration(result)
        worst = max(worst, result.calibration_error)
    if not chosen or "simulator-paired" in chosen:
        print(f"calibrating simulator-paired ({args.sim_stages} stages) ...", file=sys.stderr)
        result = calibrate_simulator(args.sim_stages, progress=False)
        print_calibration(result)
        worst = max(worst, result.calibration_error)
    print(f"calibration_error_worst={worst:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
