"""How much the simulated decision depends on the simulator's model (plan/sim_model.py).

The matrix is run once with its own model (the reference) and once per tested value
of each parameter, one parameter changed at a time (on top of the matrix's
`sim_model:`). Each run is a whole `sim` stage in its own results directory under
`<out>/points/` (durable and resumable like `run`), judged by the evaluator. A
value flips the decision when its decision differs from the reference's; for each
parameter the report names the nearest flipping value below and above the
reference value (docs/simulator.md §7). A flip says only that a line was crossed;
the margins (`Margin`) say how far each chain configuration's criteria are from
their limits at every value, so a reader sees how close a value came to crossing.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spillover_harness.evaluate import evaluate
from spillover_harness.plan.matrix import Matrix
from spillover_harness.plan.sim_model import PARAMETERS, ModelParameter, parameter
from spillover_harness.results.verdict import CellEvidence, CriterionResult, Verdict

__all__ = [
    "Margin",
    "ParameterStudy",
    "SensitivityPoint",
    "SensitivityResult",
    "plan_points",
    "point_dir",
    "point_matrix",
    "run_point",
]

REFERENCE = "reference"


@dataclass(frozen=True)
class Margin:
    """How far one criterion of one configuration is from its limit, in its tightest
    cell (the cell nearest to failing, or failing the most).

    `margin` is signed: positive on the passing side, negative on the failing side,
    in `unit`; it passes at 0 unless `strict`. `value` and `limit` are the figures
    compared (for input_tokens both as a ratio to the baseline's median, so the
    limit is 1 + tolerance, or 1 strictly for large inputs). The figures are the
    literal comparison of docs/reference.md §3; `status` is the criterion's own
    (a matrix's acceptance.rules may judge the same figures otherwise). None where
    the criterion has no figure (inconclusive, not applicable)."""

    criterion: str
    status: str
    cell: str | None
    value: float | None
    limit: float | None
    margin: float | None
    strict: bool
    unit: str
    cells: dict[str, float] = field(default_factory=dict)  # every cell's margin, by label


# criterion -> (unit, larger is better?)
_MARGIN_UNITS: dict[str, tuple[str, bool]] = {
    "success_rate": ("success-rate difference", True),
    "iteration_limit": ("iteration-limit hits", False),
    "input_tokens": ("share of the baseline's median", False),
    "summary_quality": ("quality-rate difference", True),
    "no_leak": ("clean runs of the valid runs (margin: minus the runs not clean)", True),
}


def _cell_margin(key: str, ev: CellEvidence) -> tuple[float, float, float, bool] | None:
    """(value, limit, signed margin, strict) of one cell, or None without figures."""
    if ev.value is None or ev.limit is None:
        return None
    if key == "input_tokens":
        if not ev.baseline_value:
            return None
        value = float(ev.value / ev.baseline_value)
        limit = float(ev.limit / ev.baseline_value)
        return value, limit, limit - value, ev.size_class == "large"
    _, higher_better = _MARGIN_UNITS[key]
    value, limit = float(ev.value), float(ev.limit)
    return value, limit, (value - limit) if higher_better else (limit - value), False


def criterion_margin(key: str, result: CriterionResult) -> Margin:
    """The criterion's margin in its tightest cell (module docstring of `Margin`)."""
    unit = _MARGIN_UNITS.get(key, ("", True))[0]
    tightest: tuple[float, float, float, bool] | None = None
    where: str | None = None
    cells: dict[str, float] = {}
    for ev in result.cells:
        figures = _cell_margin(key, ev) if key in _MARGIN_UNITS else None
        if figures is None:
            continue
        cells[ev.label] = figures[2]
        if tightest is None or figures[2] < tightest[2]:
            tightest, where = figures, ev.label
    if tightest is None:
        return Margin(key, result.status, None, None, None, None, False, unit)
    value, limit, margin, strict = tightest
    return Margin(key, result.status, where, value, limit, margin, strict, unit, cells)


@dataclass(frozen=True)
class SensitivityPoint:
    """The decision of the matrix with one parameter at one value."""

    parameter: str  # REFERENCE for the matrix's own model
    value: float
    decision: str
    decided: bool
    failed: dict[str, list[str]]  # chain configuration -> criteria not passed
    input_tokens: dict[str, float | None]  # configuration -> sum of the cells' medians
    # chain configuration -> criterion -> how far it is from its limit
    margins: dict[str, dict[str, Margin]] = field(default_factory=dict)


@dataclass(frozen=True)
class ParameterStudy:
    parameter: ModelParameter
    reference_value: float
    points: tuple[SensitivityPoint, ...]  # in value order
    reference_decision: str

    def flips(self) -> tuple[SensitivityPoint, ...]:
        return tuple(p for p in self.points if p.decision != self.reference_decision)

    def flip_below(self) -> SensitivityPoint | None:
        """The flipping value nearest below the reference value."""
        below = [p for p in self.flips() if p.value < self.reference_value]
        return max(below, key=lambda p: p.value) if below else None

    def flip_above(self) -> SensitivityPoint | None:
        above = [p for p in self.flips() if p.value > self.reference_value]
        return min(above, key=lambda p: p.value) if above else None


@dataclass(frozen=True)
class SensitivityResult:
    reference: SensitivityPoint
    studies: tuple[ParameterStudy, ...]

    @property
    def flipping(self) -> tuple[ParameterStudy, ...]:
        return tuple(s for s in self.studies if s.flips())

    def ranked(self) -> list[ParameterStudy]:
        """Most sensitive first: the most flips, then the closest flip to the reference."""
        return sorted(self.studies, key=lambda s: (-len(s.flips()), s.parameter.name))


def plan_points(
    base: Matrix, names: Sequence[str], values: Mapping[str, Sequence[float]]
) -> list[tuple[ModelParameter, list[float]]]:
    """(parameter, values to test) for each parameter studied, reference value left out.

    Raises KeyError (naming the known ones) for an unknown parameter and
    ValueError for a value outside a parameter's bounds."""
    chosen = [parameter(n) for n in names] if names else list(PARAMETERS)
    for name in values:
        parameter(name)
        if names and name not in names:
            raise ValueError(f"--values {name}=...: {name} is not among --parameters")
    model = base.simulator_model()
    plan: list[tuple[ModelParameter, list[float]]] = []
    for p in chosen:
        given = values.get(p.name, p.sweep)
        wrong = [v for v in given if not math.isfinite(v) or (p.integer and v != int(v))]
        if wrong:
            kind = "an integer" if p.integer else "a finite number"
            raise ValueError(
                f"--values {p.name}: {', '.join(f'{v:g}' for v in wrong)} is not {kind}; "
                f"allowed: {kind} from {p.low:g} to {p.high:g} ({p.unit})"
            )
        tested = [p.typed(v) for v in given]
        bad = [v for v in tested if not p.low <= v <= p.high]
        if bad:
            raise ValueError(
                f"--values {p.name}: {', '.join(f'{v:g}' for v in bad)} out of range; "
                f"allowed: {p.low:g}..{p.high:g} ({p.unit})"
            )
        current = getattr(model, p.name)
        kept = sorted({v for v in tested if v != current})
        _refuse_shared_dirs(p.name, kept)
        plan.append((p, kept))
    return plan


def _refuse_shared_dirs(name: str, values: Sequence[float]) -> None:
    """Two different values whose points would share one directory (`point_dir` keeps six
    significant digits: 1000000 and 1000001 are both `1e+06`): refused before anything
    runs, or the second point would resume the first one's runs."""
    by_dir: dict[str, list[float]] = {}
    for value in values:
        by_dir.setdefault(point_dir(Path(), name, value).name, []).append(value)
    for folder, shared in by_dir.items():
        if len(shared) > 1:
            raise ValueError(
                f"--values {name}: {' and '.join(repr(v) for v in shared)} share one "
                f"results directory (points/{folder}: six significant digits); pass values "
                "that differ within their first six digits"
            )


def point_matrix(base: Matrix, name: str, value: float) -> Matrix:
    """The base matrix with `sim_model.<name>` set to `value`."""
    data = base.model_dump()
    data["sim_model"] = {**(base.sim_model or {}), name: parameter(name).typed(value)}
    return Matrix.model_validate(data)


def point_dir(out_dir: Path, name: str, value: float | None) -> Path:
    return out_dir / "points" / (REFERENCE if value is None else f"{name}={value:g}")


def _figures(verdict: Verdict, matrix: Matrix, name: str, value: float) -> SensitivityPoint:
    failed = {
        step.config: [k for k, c in cv.criteria.items() if c.status != "pass"]
        for step in matrix.decision.chain
        for cv in [verdict.configs.get(step.config)]
        if cv is not None
    }
    tokens: dict[str, float | None] = {}
    for config in matrix.configurations:
        medians = [c.median_input_tokens for c in verdict.cells if c.config == config.name]
        tokens[config.name] = (
            None if not medians or any(m is None for m in medians) else sum(m or 0 for m in medians)
        )
    margins = {
        step.config: {k: criterion_margin(k, c) for k, c in cv.criteria.items()}
        for step in matrix.decision.chain
        for cv in [verdict.configs.get(step.config)]
        if cv is not None
    }
    return SensitivityPoint(name, value, verdict.decision, verdict.decided, failed, tokens, margins)


def run_point(
    matrix: Matrix,
    out_dir: Path,
    name: str,
    value: float,
    *,
    resume: bool,
    concurrency: int | None,
    resume_hint: str,
    cancel: threading.Event,
) -> SensitivityPoint | None:
    """Run (or continue) one point's stage and judge it; None when interrupted."""
    from spillover_harness.stages.sim_stage import SimStageSpec, sim_stage

    spec = SimStageSpec(
        study="sensitivity",
        matrix_source=f"sensitivity of {matrix.name}: {name}={value:g}",
        resume=resume,
        concurrency=concurrency,
        progress=False,
        quiet=True,
        resume_hint=resume_hint,
    )
    result = sim_stage(matrix, spec).run(matrix, out_dir, cancel=cancel)
    if result.interrupted:
        return None
    verdict = evaluate(result.records, matrix, stage="sim")
    return _figures(verdict, matrix, name, value)


def assemble(
    reference: SensitivityPoint,
    plan: Iterable[tuple[ModelParameter, list[float]]],
    points: Mapping[tuple[str, float], SensitivityPoint],
    base: Matrix,
) -> SensitivityResult:
    model = base.simulator_model()
    studies = []
    for p, values in plan:
        ref_value = getattr(model, p.name)
        measured = [points[(p.name, v)] for v in values]
        with_ref = sorted(
            [
                *measured,
                SensitivityPoint(
                    p.name,
                    ref_value,
                    reference.decision,
                    reference.decided,
                    reference.failed,
                    reference.input_tokens,
                    reference.margins,
                ),
            ],
            key=lambda s: s.value,
        )
        studies.append(ParameterStudy(p, ref_value, tuple(with_ref), reference.decision))
    return SensitivityResult(reference, tuple(studies))
