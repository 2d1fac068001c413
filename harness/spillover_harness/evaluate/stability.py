"""How often the literal decision comes out the same when the runs are drawn again. Pure.

A seeded bootstrap: each resample draws every cell's runs again, with replacement, on
both sides, and walks the acceptance rule and the decision chain once more. What is
drawn is the cell's counts and medians, not its records (a cell of n runs with k
successes draws Binomial(n, k/n) successes; a median is drawn from its order
statistics, `stats.bootstrap_medians`), so the cost is per cell and resample, whatever
the number of records.

A diagnostic: it says how fragile this verdict is to its own runs, not how often a
fresh stage would agree (a cell of 5/5 is drawn as 5/5 every time). The headline figure
is `evaluate.reproducibility`'s. What is held at its observed status, and the rule's
vectorized reading, are `evaluate.rule_draws`'.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from spillover_harness.evaluate.context import Context
from spillover_harness.evaluate.rule_draws import (
    FloatArray,
    Inputs,
    IntArray,
    Quantity,
    cell_data,
    counts,
    draw_stage,
)
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.verdict import ConfigVerdict, Stability
from spillover_harness.stats import bootstrap_medians

RESAMPLES = 1000
METHOD = (
    "seeded bootstrap within each cell (counts drawn binomially, medians from their "
    "order statistics), the literal rule and the decision chain applied to every resample"
)
FLIPPING_CELLS = 5  # how many of the cells that flip the decision are named


class Bootstrap:
    """Each unit's two sides drawn again from their own runs, afresh for every unit."""

    def __init__(self, ctx: Context, size: int, rng: np.random.Generator) -> None:
        self.ctx, self.size, self.rng = ctx, size, rng

    def count(self, config: str, recipe: str, inputs: Inputs, quantity: Quantity) -> IntArray:
        k, n = counts(cell_data(self.ctx, config, recipe, inputs), quantity)
        if n == 0:
            return np.full(self.size, k, dtype=np.int64)
        return self.rng.binomial(n, k / n, size=self.size).astype(np.int64)

    def median(self, config: str, recipe: str, inputs: Inputs) -> FloatArray:
        values = cell_data(self.ctx, config, recipe, inputs).tokens
        ordered = np.sort(np.asarray(values, dtype=np.float64))
        return bootstrap_medians(ordered, self.size, self.rng)


def stability(
    ctx: Context,
    matrix: Matrix,
    configs: Mapping[str, ConfigVerdict],
    decision: str,
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Stability:
    """The fraction of resamples whose literal decision is `decision`, the distribution of
    decisions, and the units whose status differs from the observed one most often in
    the resamples that decide otherwise."""
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if not configs:
        return Stability(
            decision=1.0,
            distribution={decision: 1.0},
            resamples=0,
            seed=seed,
            method="not resampled: no configuration was judged",
            flipping_cells=(),
        )
    drawn = draw_stage(ctx, matrix, configs, Bootstrap(ctx, resamples, np.random.default_rng(seed)))
    return Stability(
        decision=drawn.share(decision),
        distribution=drawn.distribution(),
        resamples=resamples,
        seed=seed,
        method=METHOD,
        flipping_cells=drawn.flipping(decision, FLIPPING_CELLS),
    )


STABLE_AT = 0.9  # below this share of resamples agreeing, the decision is called unstable


def percent(share: float) -> str:
    """A share as a percentage that never rounds across STABLE_AT (89.7% is not 90%)."""
    text = f"{share:.0%}"
    return f"{share:.1%}" if f"{share:.2f}" == f"{STABLE_AT:.2f}" else text


def describe(decision: str, steady: Stability | None) -> str:
    """One sentence, a diagnostic: `131072 in 93% of 1000 resamples of this stage's own
    runs`. Not how often a fresh stage agrees (that is `reproducibility`)."""
    if steady is None:
        return f"{decision}: stability not computed"
    if steady.resamples == 0:
        return f"{decision}: stability not computed ({steady.method})"
    others = ", ".join(
        f"{value} {fraction:.0%}"
        for value, fraction in steady.distribution.items()
        if value != decision
    )
    text = (
        f"{decision} in {percent(steady.decision)} of {steady.resamples} resamples of this "
        "stage's own runs"
    )
    if others:
        text += f" (otherwise: {others})"
    return text + " (a diagnostic of this verdict's fragility, not a probability)"
