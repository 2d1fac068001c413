"""Adaptive repetitions (`run --until-stable S --max-repetitions N`): which cells get more
runs next, from the verdict's stability. Pure.

After the matrix's own repetitions, while the decision is the same in fewer than S of
the stability resamples, the cells whose resampling flips it (`Stability.flipping_cells`
with a share of at least HINGE_SHARE, the first always; every configuration of those
(recipe, input) cells, so the comparisons stay paired) get the matrix's repetitions once
more, up to N per cell. The stage records each round
in stage.json before its runs start (`results_dir.extend_stage`).
"""

from __future__ import annotations

from dataclasses import dataclass

from spillover_harness.evaluate.stability import percent
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.verdict import Verdict

# A flipping cell counts when its status differs in at least this share of the resamples
# that decide otherwise (Stability.flipping_cells' `share`).
HINGE_SHARE = 0.2


@dataclass(frozen=True)
class Round:
    """One extension: the cells' new repetitions (recipe/input -> in all) and why."""

    cells: dict[str, int]
    stability: float
    decision: str
    why: str

    def record(self) -> dict[str, object]:
        return {
            "stability": self.stability,
            "decision": self.decision,
            "cells": dict(self.cells),
            "why": self.why,
        }


@dataclass(frozen=True)
class Stop:
    """No more rounds, and why."""

    why: str


def next_round(
    matrix: Matrix, stage: str, verdict: Verdict, *, target: float, cap: int
) -> Round | Stop:
    steady = verdict.stability
    if verdict.incomplete is not None and not verdict.incomplete.judged:
        return Stop("the stage is incomplete: finish it first (--resume)")
    if steady is None or steady.resamples == 0:
        return Stop("the decision was not resampled (no configuration was judged)")
    if steady.decision >= target:
        return Stop(
            f"stable: {verdict.decision} in {percent(steady.decision)} of the resamples "
            f"(target {_target(target)})"
        )
    # The units that flip it often enough to matter (the first one always).
    flips = [c for n, c in enumerate(steady.flipping_cells) if n == 0 or c.share >= HINGE_SHARE]
    hinge = list(dict.fromkeys((c.recipe, c.input) for c in flips if c.input))
    hinge += [
        (c.recipe, i.name)
        for c in flips
        if c.input is None  # a whole recipe (summary_quality): each of its inputs
        for r, i in matrix.cells()
        if r.name == c.recipe and (c.recipe, i.name) not in hinge
    ]
    if not hinge:
        hinge = [(r.name, i.name) for r, i in matrix.cells()]
    step = matrix.repetitions.for_stage(stage)
    cells: dict[str, int] = {}
    for recipe, inp in hinge:
        now = matrix.repetitions_for(stage, recipe, inp)
        more = min(cap, now + step)
        if more > now:
            cells[f"{recipe}/{inp}"] = more
    if not cells:
        return Stop(
            f"the cap: the cells that flip the decision have {cap} repetitions already "
            f"(--max-repetitions); {verdict.decision} in {percent(steady.decision)} of the "
            "resamples"
        )
    named = ", ".join(
        f"{key} ({matrix.repetitions_for(stage, *key.split('/', 1))} -> {n})"
        for key, n in cells.items()
    )
    return Round(
        cells=cells,
        stability=steady.decision,
        decision=verdict.decision,
        why=(
            f"{verdict.decision} in only {percent(steady.decision)} of the resamples (target "
            f"{_target(target)}); the cells whose resampling flips it get more runs: {named}"
        ),
    )


def _target(share: float) -> str:
    """0.9 as 90%, 0.999 as 99.9% (never rounded up to 100%)."""
    whole = f"{share:.0%}"
    return whole if abs(share * 100 - round(share * 100)) < 1e-9 else f"{share:.1%}"


def extended(matrix: Matrix, step: Round) -> Matrix:
    """The matrix planned with the round's repetitions."""
    return matrix.model_copy(update={"extension": {**matrix.extension, **step.cells}})
