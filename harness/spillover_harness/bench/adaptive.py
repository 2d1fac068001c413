"""Benchmark: the runs `run --until-stable S` spends against a uniform increase of
repetitions reaching the same target S (wired into `make bench`).

- On marginal scenarios (`bench.scenarios.MARGINAL`, synthetic stages whose truth is
  known), for several seeds: the adaptive procedure is `plan.adaptive.next_round`, the
  planner the command runs between rounds, applied to the scenario's runs (the
  first r repetitions of a cell are the same runs whatever the design, as on the
  simulator); the uniform design is the smallest r, from the matrix's repetitions up
  to the cap, whose verdict's reproduction probability reaches the same target S in
  every cell. `ratio adaptive_runs` is the median over scenarios and seeds of adaptive
  runs / uniform runs, over the pairs where both reached S.
- On the shipped simulator, the real command (`run --stage sim --until-stable S
  --max-repetitions 10`): the runs it spent (`sim_adaptive_runs`).
- The procedure's own error rates (`error_rates`): over more seeds, how often the
  decision taken at the matrix's fixed repetitions, and the one `--until-stable`
  reaches, fail a configuration that is acceptable (as good as off, or under the
  token limit) or accept one that is not (over the token limit).
"""

from __future__ import annotations

import contextlib
import io
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spillover_harness.bench.scenarios import (
    CELLS,
    MARGINAL,
    STAGE,
    Scenario,
    by_name,
    matrix_at,
    stage_records,
)
from spillover_harness.evaluate import evaluate
from spillover_harness.plan.adaptive import Round, next_round
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.verdict import Verdict

OWN = 5  # the default matrix's dev repetitions


@dataclass(frozen=True)
class Adaptive:
    runs: int
    reached: float
    decision: str


@dataclass(frozen=True)
class Pair:
    scenario: str
    seed: int
    adaptive: Adaptive
    uniform_runs: int | None  # None: no r up to the cap reached the target

    @property
    def ratio(self) -> float | None:
        if self.uniform_runs is None or self.adaptive.reached < 0:
            return None
        return self.adaptive.runs / self.uniform_runs


def _judge(scenario: Scenario, seed: int, reps: dict[int, int]) -> tuple[Matrix, Verdict, int]:
    extension = {f"{r}/{i}": reps[n] for n, (r, i, _) in enumerate(CELLS) if reps[n] != OWN}
    matrix = matrix_at(extension) if extension else matrix_at(OWN)
    records = stage_records(scenario, seed, reps)
    return matrix, evaluate(records, matrix, stage=STAGE, seed=seed), len(records)


def _fresh(verdict: Verdict) -> float:
    r = verdict.reproducibility
    return -1.0 if r is None or r.decision is None else r.decision


def run_adaptive(scenario: Scenario, seed: int, target: float, cap: int) -> Adaptive:
    """The rounds `run --until-stable` would add, on the scenario's runs."""
    reps = {n: OWN for n in range(len(CELLS))}
    while True:
        matrix, verdict, runs = _judge(scenario, seed, reps)
        step = next_round(matrix, STAGE, verdict, target=target, cap=cap)
        if not isinstance(step, Round):
            reached = _fresh(verdict)
            return Adaptive(runs, reached if reached >= target else -1.0, verdict.decision)
        for key, n in step.cells.items():
            recipe, inp = key.split("/", 1)
            reps[next(i for i, (r, p, _) in enumerate(CELLS) if (r, p) == (recipe, inp))] = n


def uniform_runs(scenario: Scenario, seed: int, target: float, cap: int) -> int | None:
    for r in range(OWN, cap + 1):
        _, verdict, runs = _judge(scenario, seed, {n: r for n in range(len(CELLS))})
        if _fresh(verdict) >= target:
            return runs
    return None


def bench_pairs(target: float, cap: int, seeds: int) -> list[Pair]:
    return [
        Pair(s.name, seed, run_adaptive(s, seed, target, cap), uniform_runs(s, seed, target, cap))
        for s in MARGINAL
        for seed in range(seeds)
    ]


def sim_adaptive_runs(target: float, cap: int = 10) -> int:
    """Runs the real command spends on the shipped simulator."""
    from spillover_harness.cli import main as harness
    from spillover_harness.results.records import read_records
    from spillover_harness.results.results_dir import StageDir

    with tempfile.TemporaryDirectory(prefix="spillover-bench-adaptive-") as tmp:
        out = Path(tmp) / "sim"
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            code = harness(
                ["run", "--stage", "sim", "--out", str(out), "--no-progress",
                 "--until-stable", f"{target}", "--max-repetitions", str(cap)]
            )  # fmt: skip
        if code != 0:
            raise RuntimeError(f"run --until-stable exited {code}: {quiet.getvalue()[-2000:]}")
        return len(read_records(StageDir(out).records_file))


# The decision a configuration's truth calls for: acceptable ones pass, the rest fail.
ERROR_SCENARIOS = (("identical", "131072"), ("tokens-under-limit", "131072"),
                   ("tokens-over-limit", "false"), ("success-worse", "false"))  # fmt: skip


@dataclass(frozen=True)
class ErrorRate:
    scenario: str
    right: str
    fixed: float  # the share of seeds whose fixed-repetition decision is not `right`
    adaptive: float
    adaptive_runs: float  # mean runs


def error_rates(target: float, cap: int, seeds: int) -> list[ErrorRate]:
    out: list[ErrorRate] = []
    for name, right in ERROR_SCENARIOS:
        scenario = by_name(name)
        fixed = adaptive = 0
        runs = 0
        for seed in range(100, 100 + seeds):
            _, verdict, _ = _judge(scenario, seed, {n: OWN for n in range(len(CELLS))})
            fixed += verdict.decision != right
            a = run_adaptive(scenario, seed, target, cap)
            adaptive += a.decision != right
            runs += a.runs
        out.append(ErrorRate(name, right, fixed / seeds, adaptive / seeds, runs / seeds))
    return out


def print_adaptive(target: float, cap: int, seeds: int, error_seeds: int) -> None:
    pairs = bench_pairs(target, cap, seeds)
    for p in pairs:
        uniform = "not reached" if p.uniform_runs is None else str(p.uniform_runs)
        reached = "not reached" if p.adaptive.reached < 0 else f"reached {p.adaptive.reached:.3f}"
        print(f"{p.scenario} seed {p.seed}: adaptive {p.adaptive.runs} runs ({reached}), "
              f"uniform {uniform}", file=sys.stderr)  # fmt: skip
    ratios = [r for p in pairs if (r := p.ratio) is not None]
    print(f"adaptive_target={target}")
    print(f"adaptive_cap={cap}")
    print(f"adaptive_pairs={len(pairs)}")
    print(f"adaptive_pairs_both_reached={len(ratios)}")
    print(f"adaptive_runs_median={statistics.median(p.adaptive.runs for p in pairs):g}")
    if ratios:
        print(f"ratio adaptive_runs={statistics.median(ratios):.2f}")
    else:
        print("ratio adaptive_runs=none_reached")
    print(f"sim_adaptive_runs={sim_adaptive_runs(target)}")
    for e in error_rates(target, cap, error_seeds):
        name = e.scenario.replace("-", "_")
        print(f"error_rate_{name}_fixed={e.fixed:.3f}")
        print(f"error_rate_{name}_until_stable={e.adaptive:.3f}")
        print(f"until_stable_runs_{name}={e.adaptive_runs:.1f}")


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m spillover_harness.bench.adaptive",
        description="run --until-stable against a uniform increase reaching the same target",
    )
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--cap", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--error-seeds", type=int, default=40)
    args = parser.parse_args(argv)
    if not 0 < args.target < 1 or not OWN <= args.cap <= 200:
        parser.error(f"--target must be in (0, 1) and --cap in [{OWN}, 200]")
    if not 1 <= args.seeds <= 1000 or not 1 <= args.error_seeds <= 1000:
        parser.error("--seeds and --error-seeds must be between 1 and 1000")
    print_adaptive(args.target, args.cap, args.seeds, args.error_seeds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
