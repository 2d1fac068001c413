"""The interface every criterion follows and the cell walk they share.

A criterion is anything with a `key`, a `title` and `judge(ctx, config)`
(`Criterion`), and shows itself in the report through `cell_text` and
`rule_notes` (`evaluate.render.CriterionView`; `CellCriterion` gives defaults
that render any evidence). The five of docs/reference.md §3 are `CellCriterion`s: the
walk over the matrix's cells (or, for criterion 4, over a recipe's inputs
together) is done here once -- which sides must have a valid run, the
inconclusive cell when one has none, the evidence of every cell, the
combined status -- and a criterion only says what it measures (`figures`)
and how it compares (`compare`).

Rules shared by every criterion: a cell with no valid run on a side the
criterion looks at is inconclusive and asks for the stage's planned runs;
a criterion fails if any cell fails, else is inconclusive if any cell is,
else passes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import ClassVar, Protocol

from spillover_harness.evaluate.context import CellData, Context
from spillover_harness.evaluate.noise import Noise
from spillover_harness.evaluate.render import CellText, CriterionView, default_cell_text
from spillover_harness.results.verdict import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    CellEvidence,
    CriterionResult,
    RunsNeeded,
    Status,
)


class Criterion(CriterionView, Protocol):
    """One acceptance criterion: judges a configuration against the baseline, and
    shows its evidence in the report (`CriterionView`)."""

    def judge(self, ctx: Context, config: str) -> CriterionResult: ...


def combine(statuses: Sequence[Status]) -> Status:
    """fail if any fails; otherwise inconclusive if any is; otherwise pass."""
    if FAIL in statuses:
        return FAIL
    if INCONCLUSIVE in statuses:
        return INCONCLUSIVE
    return PASS


def fmt(value: Fraction | None) -> str:
    """A fraction for a sentence: whole numbers as ints, else up to 2 decimals."""
    if value is None:
        return "n/a"
    if value.denominator == 1:
        return f"{value.numerator:,}"
    return f"{float(value):,.2f}".rstrip("0").rstrip(".")


def rate(num: int, den: int) -> str:
    return f"{num}/{den}"


@dataclass(frozen=True)
class Unit:
    """What one row of evidence covers: one cell, or every input of a recipe together."""

    recipe: str
    inputs: tuple[tuple[str, str], ...]  # (input, size_class)
    whole_recipe: bool = False

    @property
    def input(self) -> str | None:
        return None if self.whole_recipe else self.inputs[0][0]

    @property
    def size_class(self) -> str:
        if self.whole_recipe:
            return "/".join(sorted({size for _, size in self.inputs}))
        return self.inputs[0][1]

    @property
    def large(self) -> bool:
        return self.size_class == "large"


@dataclass(frozen=True)
class Figures:
    """A unit's figures for its evidence; `n`/`n_baseline` default to the valid runs."""

    value: Fraction | None
    baseline_value: Fraction | None
    limit: Fraction | None
    comparison: str
    counts: dict[str, int]
    baseline_counts: dict[str, int] | None = None
    n: int | None = None
    n_baseline: int | None = None


@dataclass(frozen=True)
class Judgement:
    """A unit's status, why, and the runs that would resolve it when inconclusive."""

    status: Status
    reason: str
    needs: tuple[RunsNeeded, ...] = ()
    # With an opt-in rule (evaluate.rules): the rule's name, and what the literal rule said.
    rule: str = "literal"
    literal: Status | None = None


def by_rule(literal: Judgement, rule: str, ok: bool, why: str) -> Judgement:
    """A cell judged by an opt-in rule, the literal reading kept beside it."""
    return Judgement(
        PASS if ok else FAIL,
        f"{rule.replace('_', '-')}: {why} (literal: {literal.reason})",
        literal.needs,
        rule=rule,
        literal=literal.status,
    )


def evidence(
    *,
    unit: Unit,
    judged: Judgement,
    figures: Figures,
    c: CellData,
    b: CellData | None,
    noise: Noise | None = None,
) -> CellEvidence:
    """The one evidence builder. `c` is the configuration's data, `b` the baseline's
    (None for a criterion that looks at the configuration only)."""
    f = figures
    return CellEvidence(
        recipe=unit.recipe,
        input=unit.input,
        size_class=unit.size_class,
        status=judged.status,
        value=f.value,
        baseline_value=f.baseline_value,
        limit=f.limit,
        comparison=f.comparison,
        n=c.valid if f.n is None else f.n,
        n_baseline=(None if b is None else b.valid) if f.n_baseline is None else f.n_baseline,
        harness_errors=c.harness_errors,
        harness_errors_baseline=None if b is None else b.harness_errors,
        counts=f.counts,
        baseline_counts=f.baseline_counts,
        reason=judged.reason,
        p_value=None if noise is None else noise.p_value,
        interval=None if noise is None else noise.interval,
        rule=judged.rule,
        literal_status=judged.literal,
        exercised=any(p > 0 for p in c.persisted) if c.persisted else None,
    )


def missing_runs(
    ctx: Context, criterion: str, sides: Sequence[str], recipe: str, input_name: str
) -> tuple[list[str], list[RunsNeeded]]:
    """Sides without a valid run in the cell: the reasons and the runs they need."""
    reasons: list[str] = []
    needs: list[RunsNeeded] = []
    for side in sides:
        d = ctx.get(side, recipe, input_name)
        if d.valid:
            continue
        why = (
            f"no valid run of {side} ({d.harness_errors} harness_error)"
            if d.harness_errors
            else f"no run of {side} recorded"
        )
        reasons.append(why)
        needs.append(
            RunsNeeded(
                config=side,
                recipe=recipe,
                input=input_name,
                runs=ctx.target,
                criteria=(criterion,),
                reason=f"{why}: needs {ctx.target} valid run(s)",
            )
        )
    return reasons, needs


def rerun(side: str, unit: Unit, criterion: str, reason: str, run_ids: Sequence[str]) -> RunsNeeded:
    """Recorded runs whose null keeps a cell inconclusive: they must be run again."""
    assert unit.input is not None
    return RunsNeeded(
        config=side,
        recipe=unit.recipe,
        input=unit.input,
        runs=len(run_ids),
        criteria=(criterion,),
        reason=reason,
        rerun_ids=tuple(run_ids),
    )


@dataclass
class _Walk:
    cells: list[CellEvidence] = field(default_factory=list)
    needs: list[RunsNeeded] = field(default_factory=list)


class CellCriterion(ABC):
    """A criterion judged unit by unit (the common walk); see the module docstring."""

    key: ClassVar[str]
    title: ClassVar[str]
    # Whose runs the criterion looks at: the configuration and the baseline, or
    # the configuration only (criterion 5: the baseline's leaks are not its criterion).
    with_baseline: ClassVar[bool] = True
    empty_reason: ClassVar[str] = ""  # the reason when there is no unit to judge

    def units(self, ctx: Context) -> list[Unit]:
        """One unit per cell of the matrix, in matrix order."""
        return [Unit(recipe, ((inp, size),)) for recipe, inp, size in ctx.cells]

    def tolerance(self, ctx: Context) -> Fraction | None:
        return None

    @abstractmethod
    def rule(self, ctx: Context) -> str: ...

    @abstractmethod
    def figures(self, ctx: Context, unit: Unit, c: CellData, b: CellData) -> Figures:
        """The unit's figures, whether or not the unit can be judged."""

    @abstractmethod
    def compare(
        self, ctx: Context, config: str, unit: Unit, c: CellData, b: CellData, f: Figures
    ) -> Judgement:
        """The unit's status; only called when every side has a valid run."""

    def noise(self, ctx: Context, unit: Unit, c: CellData, b: CellData) -> Noise | None:
        """How far the unit's difference could be noise (`evaluate.noise`); only called
        for a unit judged pass or fail. None: the criterion has no such figure."""
        return None

    # -- how the report shows it (evaluate.render.CriterionView) ------------------------

    def cell_text(self, ev: CellEvidence, baseline: str) -> CellText:
        """One evidence row as text; the default shows the evidence's numbers."""
        return default_cell_text(ev, with_baseline=self.with_baseline)

    def rule_notes(self, baseline: str, tolerance: Fraction) -> list[str]:
        """Lines printed under the rule (none by default)."""
        return []

    def judge(self, ctx: Context, config: str) -> CriterionResult:
        sides = (config, ctx.baseline) if self.with_baseline else (config,)
        walk = _Walk()
        for unit in self.units(ctx):
            missing: list[str] = []
            for inp, _ in unit.inputs:
                reasons, needs = missing_runs(ctx, self.key, sides, unit.recipe, inp)
                if unit.whole_recipe:
                    reasons = [f"{inp}: {why}" for why in reasons]
                missing.extend(reasons)
                walk.needs.extend(needs)
            c = self._data(ctx, config, unit)
            b = self._data(ctx, ctx.baseline, unit)
            figures = self.figures(ctx, unit, c, b)
            noise: Noise | None = None
            if missing:
                judged = Judgement(INCONCLUSIVE, "; ".join(missing))
            else:
                judged = self.compare(ctx, config, unit, c, b, figures)
                walk.needs.extend(judged.needs)
                if judged.status != INCONCLUSIVE:
                    noise = self.noise(ctx, unit, c, b)
            walk.cells.append(
                evidence(
                    unit=unit,
                    judged=judged,
                    figures=figures,
                    c=c,
                    b=b if self.with_baseline else None,
                    noise=noise,
                )
            )
        return self._result(ctx, walk)

    @staticmethod
    def _data(ctx: Context, config: str, unit: Unit) -> CellData:
        if len(unit.inputs) == 1:
            return ctx.get(config, unit.recipe, unit.inputs[0][0])
        return CellData.merged(ctx.get(config, unit.recipe, i) for i, _ in unit.inputs)

    def _result(self, ctx: Context, walk: _Walk) -> CriterionResult:
        cells = walk.cells
        status = combine([c.status for c in cells])
        if not cells:
            reason = self.empty_reason
        elif status == PASS:
            reason = "every cell passes" if len(cells) > 1 else cells[0].reason
        else:
            bad = [c for c in cells if c.status == status]
            reason = "; ".join(f"{c.label}: {c.reason}" for c in bad)
        return CriterionResult(
            key=self.key,
            status=status,
            rule=self.rule(ctx),
            reason=reason,
            tolerance=self.tolerance(ctx),
            cells=tuple(cells),
            runs_needed=tuple(walk.needs),
        )
