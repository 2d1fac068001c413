"""How often the literal decision comes out the same when the runs are drawn again. Pure.

A seeded bootstrap: each resample draws every cell's runs again, with replacement, on
both sides, and walks the acceptance rule and the decision chain once more. What is
drawn is the cell's counts and medians, not its records (a cell of n runs with k
successes draws Binomial(n, k/n) successes; a median is drawn from its order
statistics, `stats.bootstrap_medians`), so the cost is per cell and resample, whatever
the number of records.

Held at their observed status, never drawn: a cell the evaluator found inconclusive
(missing or unmeasured data cannot be drawn away), a cell with an unmeasured
iteration-limit value, `no_leak` (a leak seen is a fact, not noise), input_tokens under
the opt-in non-inferiority rule (its bound is itself a bootstrap), and a configuration
whose consistency check broke. Rates under the non-inferiority rule are drawn and
judged by it.

The rule is evaluated here in vectorized form; `observed_statuses` is the same code
with every draw replaced by the observed figure, and the tests hold it equal to the
evaluator's statuses, so the two readings of the rule cannot drift apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from spillover_harness.evaluate.context import CellData, Context
from spillover_harness.evaluate.rules import rate_non_inferior
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.verdict import (
    DECISION_INCONCLUSIVE,
    FAIL,
    INCONCLUSIVE,
    PASS,
    ConfigVerdict,
    FlippingCell,
    Stability,
    Status,
)
from spillover_harness.stats import bootstrap_medians

RESAMPLES = 1000
METHOD = (
    "seeded bootstrap within each cell (counts drawn binomially, medians from their "
    "order statistics), the literal rule and the decision chain applied to every resample"
)
FLIPPING_CELLS = 5  # how many of the cells that flip the decision are named

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Codes = npt.NDArray[np.int8]
_CODE: dict[Status, int] = {PASS: 0, FAIL: 1, INCONCLUSIVE: 2}
_STATUS: dict[int, Status] = {v: k for k, v in _CODE.items()}


class Draws:
    """Where the figures of a resample come from: drawn (`rng`) or observed (`None`)."""

    def __init__(self, size: int, rng: np.random.Generator | None) -> None:
        self.size, self.rng = size, rng

    def count(self, k: int, n: int) -> IntArray:
        if self.rng is None or n == 0:
            return np.full(self.size, k, dtype=np.int64)
        return self.rng.binomial(n, k / n, size=self.size).astype(np.int64)

    def median(self, values: Sequence[int]) -> npt.NDArray[np.float64]:
        ordered = np.sort(np.asarray(values, dtype=np.float64))
        if self.rng is None:
            n = len(ordered)
            return np.full(self.size, (ordered[(n - 1) // 2] + ordered[n // 2]) / 2.0)
        return bootstrap_medians(ordered, self.size, self.rng)


UnitKey = tuple[str, str, str, str | None]  # configuration, criterion, recipe, input


@dataclass(frozen=True)
class _Unit:
    key: UnitKey
    observed: Status
    codes: Codes


def _rate_pass(kc: IntArray, nc: int, kb: IntArray, nb: int) -> BoolArray:
    """kc/nc >= kb/nb, exactly (cross-multiplied integers)."""
    return np.asarray(kc * nb >= kb * nc)


def _unit_codes(
    ctx: Context, criterion: str, config: str, recipe: str, inputs: Sequence[tuple[str, str]],
    observed: Status, draws: Draws,
) -> Codes:  # fmt: skip
    """The unit's status in every resample, 0 pass, 1 fail, 2 inconclusive."""
    fixed = np.full(draws.size, _CODE[observed], dtype=np.int8)
    if observed == INCONCLUSIVE or criterion == "no_leak":
        return fixed
    c = _data(ctx, config, recipe, inputs)
    b = _data(ctx, ctx.baseline, recipe, inputs)
    rule = ctx.rule(criterion)
    if criterion == "input_tokens" and rule is not None:
        return fixed  # a bootstrap bound within each resample: not drawn (module doc)
    if criterion == "success_rate":
        kc, kb = draws.count(c.succeeded, c.valid), draws.count(b.succeeded, b.valid)
        if rule is not None:
            ok = rate_non_inferior(kc, c.valid, kb, b.valid, rule)
        else:
            ok = _rate_pass(kc, c.valid, kb, b.valid)
    elif criterion == "iteration_limit":
        if c.hit_null_ids or b.hit_null_ids:
            return fixed
        ok = np.asarray(draws.count(c.hits, c.valid) <= draws.count(b.hits, b.valid))
    elif criterion == "input_tokens":
        large = inputs[0][1] == "large" and len(inputs) == 1
        med_c, med_b = draws.median(c.tokens), draws.median(b.tokens)
        if large:
            ok = np.asarray(med_c < med_b)
        else:
            tol = Fraction(ctx.tolerance)
            # med_c <= (1 + tol) * med_b, in integers: medians are halves of integers.
            ok = np.asarray(
                2 * med_c * tol.denominator <= 2 * med_b * (tol.denominator + tol.numerator)
            )
    elif criterion == "summary_quality":
        kc = draws.count(c.quality_true, c.quality_known)
        kb = draws.count(b.quality_true, b.quality_known)
        if rule is not None:
            ok = rate_non_inferior(kc, c.quality_known, kb, b.quality_known, rule)
        else:
            ok = _rate_pass(kc, c.quality_known, kb, b.quality_known)
    else:  # a criterion this module does not know is held where it was
        return fixed
    return np.where(ok, _CODE[PASS], _CODE[FAIL]).astype(np.int8)


def _data(ctx: Context, config: str, recipe: str, inputs: Sequence[tuple[str, str]]) -> CellData:
    if len(inputs) == 1:
        return ctx.get(config, recipe, inputs[0][0])
    return CellData.merged(ctx.get(config, recipe, i) for i, _ in inputs)


def _units(ctx: Context, verdict: ConfigVerdict, draws: Draws) -> list[_Unit]:
    units: list[_Unit] = []
    for key, result in verdict.criteria.items():
        for ev in result.cells:
            if ev.input is None:
                inputs = [(i, s) for r, i, s in ctx.cells if r == ev.recipe]
            else:
                inputs = [(ev.input, ev.size_class or "")]
            codes = _unit_codes(ctx, key, verdict.name, ev.recipe, inputs, ev.status, draws)
            units.append(_Unit((verdict.name, key, ev.recipe, ev.input), ev.status, codes))
    return units


def _combine(units: Sequence[_Unit], size: int) -> Codes:
    """fail if any fails; otherwise inconclusive if any is; otherwise pass."""
    if not units:
        return np.zeros(size, dtype=np.int8)
    stacked = np.stack([u.codes for u in units])
    fail = (stacked == _CODE[FAIL]).any(axis=0)
    inconclusive = (stacked == _CODE[INCONCLUSIVE]).any(axis=0)
    return np.where(fail, _CODE[FAIL], np.where(inconclusive, _CODE[INCONCLUSIVE], 0)).astype(
        np.int8
    )


def _config_codes(verdict: ConfigVerdict, units: Sequence[_Unit], size: int) -> Codes:
    codes = _combine(units, size)
    if verdict.consistency:  # runs that may not be of their configuration: it cannot pass
        codes = np.where(codes == _CODE[FAIL], codes, _CODE[INCONCLUSIVE]).astype(np.int8)
    return codes


def _decisions(matrix: Matrix, config_codes: Mapping[str, Codes], size: int) -> list[str]:
    """The decision chain walked in every resample."""
    out = np.full(size, matrix.decision.fallback, dtype=object)
    open_ = np.ones(size, dtype=bool)
    for step in matrix.decision.chain:
        codes = config_codes[step.config]
        passes = open_ & (codes == _CODE[PASS])
        stops = open_ & (codes == _CODE[INCONCLUSIVE])
        out[passes] = step.default
        out[stops] = DECISION_INCONCLUSIVE
        open_ &= codes == _CODE[FAIL]
    return [str(v) for v in out]


def observed_statuses(
    ctx: Context, configs: Mapping[str, ConfigVerdict]
) -> dict[UnitKey | str, Status]:
    """The statuses this module's reading of the rule gives to the observed figures:
    every unit's, and every configuration's (keyed by name). Equal to the evaluator's."""
    draws = Draws(1, None)
    out: dict[UnitKey | str, Status] = {}
    for name, verdict in configs.items():
        units = _units(ctx, verdict, draws)
        for u in units:
            out[u.key] = _STATUS[int(u.codes[0])]
        out[name] = _STATUS[int(_config_codes(verdict, units, 1)[0])]
    return out


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
    draws = Draws(resamples, np.random.default_rng(seed))
    all_units: list[_Unit] = []
    config_codes: dict[str, Codes] = {}
    for name, verdict in configs.items():
        units = _units(ctx, verdict, draws)
        all_units.extend(units)
        config_codes[name] = _config_codes(verdict, units, resamples)
    decisions = _decisions(matrix, config_codes, resamples)
    counts = Counter(decisions)
    other = np.array([d != decision for d in decisions])
    flips: Counter[UnitKey] = Counter()
    if other.any():
        for u in all_units:
            changed = int(((u.codes != _CODE[u.observed]) & other).sum())
            if changed:
                flips[u.key] = changed
    others = int(other.sum())
    return Stability(
        decision=counts.get(decision, 0) / resamples,
        distribution={v: n / resamples for v, n in counts.most_common()},
        resamples=resamples,
        seed=seed,
        method=METHOD,
        flipping_cells=tuple(
            FlippingCell(config=c, criterion=k, recipe=r, input=i, share=n / others)
            for (c, k, r, i), n in flips.most_common(FLIPPING_CELLS)
        ),
    )


STABLE_AT = 0.9  # below this share of resamples agreeing, the decision is called unstable


def percent(share: float) -> str:
    """A share as a percentage that never rounds across STABLE_AT (89.7% is not 90%)."""
    text = f"{share:.0%}"
    return f"{share:.1%}" if f"{share:.2f}" == f"{STABLE_AT:.2f}" else text


def describe(decision: str, steady: Stability | None) -> str:
    """One sentence: `131072, the same in 93% of 1000 resamples`, or `unstable: ...` with
    the cells whose resampling flips it."""
    if steady is None:
        return f"{decision}: stability not computed"
    if steady.resamples == 0:
        return f"{decision}: stability not computed ({steady.method})"
    share = f"{percent(steady.decision)} of {steady.resamples} resamples"
    if steady.decision >= STABLE_AT:
        return f"{decision}, the same in {share}"
    others = ", ".join(
        f"{value} {fraction:.0%}"
        for value, fraction in steady.distribution.items()
        if value != decision
    )
    cells = "; ".join(c.label for c in steady.flipping_cells) or "none named"
    return (
        f"unstable: {decision} in only {share} ({others}); add repetitions to the cells "
        f"whose resampling flips it: {cells}"
    )
