"""Adaptive repetitions (`run --until-stable S --max-repetitions N`): which cells get more
runs next, from the verdict's reproduction probability. Pure.

After the matrix's own repetitions, while the probability that a fresh stage of the
design decides the same (`Verdict.reproducibility`) is below S, the cells whose fresh
runs most often go with another decision (`Reproducibility.cells` with a share of at
least HINGE_SHARE, the first always; every configuration of those (recipe, input)
cells, so the comparisons stay paired) get half the matrix's repetitions more (at least
ROUND_MIN), up to N per cell. A cell a configuration did not act on (paired, its runs
equal the baseline's seed for seed) is drawn as the baseline's: it never moves the
decision, so it is never chosen for it. The stage records each round in stage.json
before its runs start (`results_dir.extend_stage`).
"""

from __future__ import annotations

from dataclasses import dataclass

from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.verdict import Verdict

# A cell counts when its status differs in at least this share of the fresh stages that
# decide otherwise (Reproducibility.cells' `share`).
HINGE_SHARE = 0.5
# A round adds 1/ROUND_DIVISOR of the stage's repetitions (at least ROUND_MIN) to each
# chosen cell:
# small rounds overshoot the target less; each round costs a configuration switch on a
# cluster, so not one run at a time.
ROUND_MIN = 2
ROUND_DIVISOR = 2


@dataclass(frozen=True)
class Round:
    """One extension: the cells' new repetitions (recipe/input -> in all) and why."""

    cells: dict[str, int]
    reproducibility: float
    decision: str
    why: str

    def record(self) -> dict[str, object]:
        return {
            "reproducibility": self.reproducibility,
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
    fresh = verdict.reproducibility
    if verdict.incomplete is not None and not verdict.incomplete.judged:
        return Stop("the stage is incomplete: finish it first (--resume)")
    if fresh is None or fresh.decision is None:
        return Stop("the reproduction probability was not computed (no configuration was judged)")
    p = fresh.decision
    if p >= target:
        return Stop(
            f"a fresh stage would decide {verdict.decision} with probability {p:.2f} "
            f"(target {target:g})"
        )
    # The units that flip it often enough to matter (the first one always).
    flips = [c for n, c in enumerate(fresh.cells) if n == 0 or c.share >= HINGE_SHARE]
    hinge = list(dict.fromkeys((c.recipe, c.input) for c in flips if c.input))
    hinge += [
        (c.recipe, i.name)
        for c in flips
        if c.input is None  # a whole recipe (summary_quality): each of its inputs
        for r, i in matrix.cells()
        if r.name == c.recipe and (c.recipe, i.name) not in hinge
    ]
    if not hinge:
        return Stop(
            f"no cell's fresh runs move the decision ({verdict.decision} with probability "
            f"{p:.2f}): more runs would not change it"
        )
    step = max(ROUND_MIN, matrix.repetitions.for_stage(stage) // ROUND_DIVISOR)
    cells: dict[str, int] = {}
    for recipe, inp in hinge:
        now = matrix.repetitions_for(stage, recipe, inp)
        more = min(cap, now + step)
        if more > now:
            cells[f"{recipe}/{inp}"] = more
    if not cells:
        return Stop(
            f"the cap: the cells that move the decision have {cap} repetitions already "
            f"(--max-repetitions); a fresh stage would decide {verdict.decision} with "
            f"probability {p:.2f}"
        )
    named = ", ".join(
        f"{key} ({matrix.repetitions_for(stage, *key.split('/', 1))} -> {n})"
        for key, n in cells.items()
    )
    return Round(
        cells=cells,
        reproducibility=p,
        decision=verdict.decision,
        why=(
            f"a fresh stage would decide {verdict.decision} with probability only {p:.2f} "
            f"(target {target:g}); the cells whose fresh runs most often move it get more "
            f"runs: {named}"
        ),
    )


def extended(matrix: Matrix, step: Round) -> Matrix:
    """The matrix planned with the round's repetitions."""
    return matrix.model_copy(update={"extension": {**matrix.extension, **step.cells}})
