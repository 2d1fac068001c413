"""The threshold sweep: the matrix's recipes and inputs at many thresholds (and budgets),
each judged against the baseline on the five criteria (docs/harness.md, "sweep").

The sweep is one stage of a derived matrix (`sweep_matrix`): the base matrix's
baseline plus one configuration per (threshold, budget) point, named `t<threshold>`
or `t<threshold>-b<budget>`, with the base's recipes, inputs, repetitions, seed,
acceptance and simulator model. It runs through the runner like `run --stage sim`
(records appended durably, `--resume` continues it), and the records are judged
by the evaluator in one call: every point is a configuration, so each gets its
five criteria against the same baseline runs. `summarize` reads the points out of
the verdict. Pure except for `run_sweep`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from spillover_operator.domain.model import BUDGET_VAR, THRESHOLD_VAR

from spillover_harness.evaluate import evaluate
from spillover_harness.plan.matrix import (
    Configuration,
    Decision,
    DecisionStep,
    Matrix,
    env_value_problem,
)
from spillover_harness.results.records import RunRecord
from spillover_harness.results.verdict import CRITERIA, Verdict

__all__ = [
    "SweepPoint",
    "SweepResult",
    "check_points",
    "edge_reasons",
    "input_result_sizes",
    "point_name",
    "run_sweep",
    "summarize",
    "sweep_matrix",
]


def point_name(threshold: int, budget: int | None) -> str:
    return f"t{threshold}" if budget is None else f"t{threshold}-b{budget}"


def check_points(thresholds: Sequence[int], budgets: Sequence[int]) -> list[str]:
    """Every threshold or budget the mcp-host would not take as set, one line each."""
    problems: list[str] = []
    for var, flag, values in (
        (THRESHOLD_VAR, "--thresholds", thresholds),
        (BUDGET_VAR, "--budgets", budgets),
    ):
        for value in values:
            why = env_value_problem(var, str(value))
            if why is not None:
                problems.append(f"{flag}: {why}")
        dupes = sorted({v for v in values if list(values).count(v) > 1})
        if dupes:
            problems.append(f"{flag}: given twice: {', '.join(map(str, dupes))}")
    if not thresholds:
        problems.append("--thresholds: name at least one threshold")
    return problems


def sweep_matrix(base: Matrix, thresholds: Sequence[int], budgets: Sequence[int]) -> Matrix:
    """The base matrix with its configurations replaced by the baseline and the points."""
    baseline = base.configuration(base.acceptance.baseline)
    points: list[Configuration] = []
    chain: list[DecisionStep] = []
    budget_points: list[int | None] = [*sorted(budgets)] or [None]
    for threshold in sorted(thresholds, reverse=True):
        for budget in budget_points:
            env = {THRESHOLD_VAR: str(threshold)}
            if budget is not None:
                env[BUDGET_VAR] = str(budget)
            name = point_name(threshold, budget)
            points.append(Configuration(name=name, env=env, description=f"sweep point {name}"))
            chain.append(DecisionStep(config=name, default=str(threshold)))
    data = base.model_dump()
    data.update(
        name=f"{base.name}-sweep",
        description=f"threshold sweep of {base.name}",
        configurations=[baseline.model_dump(), *(p.model_dump() for p in points)],
        decision=Decision(chain=chain, fallback=base.decision.fallback).model_dump(),
    )
    return Matrix.model_validate(data)


@dataclass(frozen=True)
class SweepPoint:
    """One point of the sweep as judged against the baseline."""

    name: str
    threshold: int
    budget: int | None
    verdict: str  # pass | fail | inconclusive
    criteria: dict[str, str]  # criterion -> status, in CRITERIA order
    token_ratios: dict[str, float | None]  # "recipe/input" -> median / baseline median
    input_tokens: float | None  # sum over the cells of the median input tokens
    success_rate: float | None  # succeeded / valid runs, over every cell

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


@dataclass(frozen=True)
class SweepResult:
    """The points in threshold order, the baseline's figures and what they add up to."""

    points: tuple[SweepPoint, ...]
    baseline: str
    baseline_tokens: float | None
    baseline_success_rate: float | None
    cells: tuple[str, ...]

    @property
    def passing(self) -> tuple[SweepPoint, ...]:
        return tuple(p for p in self.points if p.passed)

    @property
    def best(self) -> SweepPoint | None:
        """The passing point with the lowest input tokens (ties: the higher threshold)."""
        scored = [p for p in self.passing if p.input_tokens is not None]
        if not scored:
            return None
        return min(scored, key=lambda p: (p.input_tokens, -p.threshold))

    def passing_range(self) -> str:
        """The thresholds that pass everything, as ranges of consecutive sweep points."""
        if not self.passing:
            return "none"
        spans: list[list[SweepPoint]] = []
        for p in self.points:
            if p.passed and spans and spans[-1][-1] is self._previous(p):
                spans[-1].append(p)
            elif p.passed:
                spans.append([p])
        return ", ".join(
            _label(s[0]) if len(s) == 1 else f"{_label(s[0])} .. {_label(s[-1])}" for s in spans
        )

    def _previous(self, point: SweepPoint) -> SweepPoint | None:
        i = self.points.index(point)
        return self.points[i - 1] if i > 0 else None


ResultSizes = Mapping[str, Sequence[tuple[int, int]]]  # "recipe/input" -> (least, most) bytes


def input_result_sizes(matrix: Matrix) -> dict[str, list[tuple[int, int]]]:
    """Each input's tool results as (text bytes, serialized bytes at most), from the
    fixtures the sweep runs on (the matrix's seed): what a threshold is compared with."""
    from spillover_harness.checks.consistency import tool_result_sizes
    from spillover_harness.fixtures import build_fixtures

    fixtures = build_fixtures(matrix.seed)
    return {
        f"{r.name}/{i.name}": tool_result_sizes(fixtures.get(r.name, i.name))
        for r, i in matrix.cells()
    }


def _kb(n: int) -> str:
    return f"{n / 1000:,.0f} KB"


def _between(sizes: ResultSizes, low: int, high: int) -> list[str]:
    """The inputs with a tool result that a threshold of `low` spills and one of `high`
    keeps inline (a result of at least the threshold spills), with their sizes."""
    said: list[str] = []
    for cell, results in sizes.items():
        hit = sorted(least for least, most in results if most >= low and least < high)
        if hit:
            span = _kb(hit[0]) if _kb(hit[0]) == _kb(hit[-1]) else f"{_kb(hit[0])}-{_kb(hit[-1])}"
            said.append(f"{cell} ({len(hit)} result(s) of ~{span})")
    return said


def edge_reasons(result: SweepResult, sizes: ResultSizes) -> list[str]:
    """Why the passing range ends where it does: for each edge, the inputs whose tool
    results lie between the last passing point and the failing point next to it. The
    sweep's answer is bounded by the sizes of these inputs, not by a property of the
    threshold itself; other inputs could move the edges."""
    lines: list[str] = []
    points = result.points
    for i, p in enumerate(points):
        if not p.passed:
            continue
        for j, side in ((i - 1, "below"), (i + 1, "above")):
            if not 0 <= j < len(points):
                continue
            q = points[j]
            if q.passed or q.budget != p.budget:
                continue
            low, high = sorted((p.threshold, q.threshold))
            inputs = _between(sizes, low, high)
            what = (
                "; ".join(inputs)
                if inputs
                else "no tool result of the inputs lies between them (the step differs "
                "for another reason: see the evidence)"
            )
            lines.append(
                f"{_label(p)} passes, {_label(q)} {side} it does not: between {low} and "
                f"{high} bytes lie {what}"
            )
    return lines


def _label(p: SweepPoint) -> str:
    return str(p.threshold) if p.budget is None else f"{p.threshold} (budget {p.budget})"


def _cell_figures(verdict: Verdict, config: str) -> tuple[dict[str, float | None], int, int]:
    medians: dict[str, float | None] = {}
    succeeded = valid = 0
    for c in verdict.cells:
        if c.config == config:
            medians[f"{c.recipe}/{c.input}"] = c.median_input_tokens
            succeeded += c.succeeded
            valid += c.valid
    return medians, succeeded, valid


def _total(medians: dict[str, float | None]) -> float | None:
    values = list(medians.values())
    return None if not values or any(v is None for v in values) else sum(v or 0 for v in values)


def summarize(verdict: Verdict, matrix: Matrix) -> SweepResult:
    """The sweep's points out of the verdict of its matrix."""
    base = matrix.acceptance.baseline
    base_medians, base_ok, base_valid = _cell_figures(verdict, base)
    points: list[SweepPoint] = []
    for config in matrix.configurations:
        if config.name == base:
            continue
        medians, ok, valid = _cell_figures(verdict, config.name)
        judged = verdict.configs.get(config.name)
        ratios = {
            cell: (m / b if m is not None and b else None)
            for cell, m in medians.items()
            for b in [base_medians.get(cell)]
        }
        budget = config.env.get(BUDGET_VAR)
        points.append(
            SweepPoint(
                name=config.name,
                threshold=int(config.env[THRESHOLD_VAR]),
                budget=int(budget) if budget is not None else None,
                verdict=judged.verdict if judged is not None else "inconclusive",
                criteria={
                    k: (judged.criteria[k].status if judged is not None else "inconclusive")
                    for k in CRITERIA
                    if judged is None or k in judged.criteria
                },
                token_ratios=ratios,
                input_tokens=_total(medians),
                success_rate=ok / valid if valid else None,
            )
        )
    points.sort(key=lambda p: (p.budget or 0, p.threshold))
    return SweepResult(
        points=tuple(points),
        baseline=base,
        baseline_tokens=_total(base_medians),
        baseline_success_rate=base_ok / base_valid if base_valid else None,
        cells=tuple(f"{r.name}/{i.name}" for r, i in matrix.cells()),
    )


def run_sweep(
    matrix: Matrix,
    out_dir: Path,
    *,
    resume: bool,
    concurrency: int | None,
    progress: bool,
    resume_hint: str,
    cancel: threading.Event,
) -> tuple[list[RunRecord], bool, int]:
    """Run (or continue) the sweep's stage on the simulator: (records, interrupted, planned)."""
    from spillover_harness.stages.sim_stage import SimStageSpec, sim_stage

    spec = SimStageSpec(
        study="sweep",
        matrix_source=f"sweep of {matrix.name.removesuffix('-sweep')}",
        resume=resume,
        concurrency=concurrency,
        progress=progress,
        resume_hint=resume_hint,
    )
    result = sim_stage(matrix, spec).run(matrix, out_dir, cancel=cancel)
    return result.records, result.interrupted, result.planned


def judge_sweep(records: Sequence[RunRecord], matrix: Matrix) -> tuple[Verdict, SweepResult]:
    """The evaluator's verdict on the sweep's records, and the points read out of it."""
    verdict = evaluate(records, matrix, stage="sim")
    return verdict, summarize(verdict, matrix)
