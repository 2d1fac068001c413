"""The acceptance rule and the decision chain applied to many draws of a stage at once.
Pure.

Two readings of "the stage again" use it: the bootstrap of `evaluate.stability` (each
cell's own runs drawn again) and the posterior predictive of
`evaluate.reproducibility` (what a fresh stage of the same design would record). Each
is a `Source`: it answers, per (configuration, recipe, inputs), the drawn count of a
quantity and the drawn median of the input tokens, one figure per draw. This module
turns those figures into every unit's status, every configuration's status and the
decision, in vectorized form.

Held at their observed status, never drawn: a cell the evaluator found inconclusive
(missing or unmeasured data cannot be drawn away), a cell with an unmeasured
iteration-limit value, `no_leak` (a leak seen is a fact, not noise), input_tokens under
the opt-in non-inferiority rule (its bound is itself a bootstrap), and a configuration
whose consistency check broke. Rates under the non-inferiority rule are drawn and
judged by it.

`observed_statuses` is the same code with every draw replaced by the observed figure;
the tests hold it equal to the evaluator's statuses, so the readings of the rule cannot
drift apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, Protocol

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
    Status,
)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
Codes = npt.NDArray[np.int8]
CODE: dict[Status, int] = {PASS: 0, FAIL: 1, INCONCLUSIVE: 2}
STATUS: dict[int, Status] = {v: k for k, v in CODE.items()}

# What a rate criterion counts, of what: succeeded of valid, limit hits of valid,
# quality true of quality known.
Quantity = Literal["succeeded", "hits", "quality"]
Inputs = Sequence[tuple[str, str]]  # (input, size class) of the unit
UnitKey = tuple[str, str, str, str | None]  # configuration, criterion, recipe, input


def counts(d: CellData, quantity: Quantity) -> tuple[int, int]:
    """(k, n) of a quantity in one cell's data."""
    if quantity == "succeeded":
        return d.succeeded, d.valid
    if quantity == "hits":
        return d.hits, d.valid
    return d.quality_true, d.quality_known


def cell_data(ctx: Context, config: str, recipe: str, inputs: Inputs) -> CellData:
    if len(inputs) == 1:
        return ctx.get(config, recipe, inputs[0][0])
    return CellData.merged(ctx.get(config, recipe, i) for i, _ in inputs)


class Source(Protocol):
    """Where each draw's figures come from."""

    size: int

    def count(self, config: str, recipe: str, inputs: Inputs, quantity: Quantity) -> IntArray:
        """The drawn count of `quantity` (of as many as the cell holds), one per draw."""

    def median(self, config: str, recipe: str, inputs: Inputs) -> FloatArray:
        """The drawn median input tokens, one per draw."""


class Observed:
    """Every draw is the observed figure: the evaluator's own reading of the rule."""

    def __init__(self, ctx: Context, size: int = 1) -> None:
        self.ctx, self.size = ctx, size

    def count(self, config: str, recipe: str, inputs: Inputs, quantity: Quantity) -> IntArray:
        k, _ = counts(cell_data(self.ctx, config, recipe, inputs), quantity)
        return np.full(self.size, k, dtype=np.int64)

    def median(self, config: str, recipe: str, inputs: Inputs) -> FloatArray:
        ordered = np.sort(np.asarray(cell_data(self.ctx, config, recipe, inputs).tokens, float))
        n = len(ordered)
        return np.full(self.size, (ordered[(n - 1) // 2] + ordered[n // 2]) / 2.0)


@dataclass(frozen=True)
class Unit:
    key: UnitKey
    observed: Status
    codes: Codes


# The rates judged "at least as high as the baseline's", and what each counts.
_RATES: dict[str, Quantity] = {"success_rate": "succeeded", "summary_quality": "quality"}


def _rate_pass(kc: IntArray, nc: int, kb: IntArray, nb: int) -> BoolArray:
    """kc/nc >= kb/nb, exactly (cross-multiplied integers)."""
    return np.asarray(kc * nb >= kb * nc)


def _unit_codes(
    ctx: Context, criterion: str, config: str, recipe: str, inputs: Inputs,
    observed: Status, src: Source,
) -> Codes:  # fmt: skip
    """The unit's status in every draw, 0 pass, 1 fail, 2 inconclusive."""
    fixed = np.full(src.size, CODE[observed], dtype=np.int8)
    if observed == INCONCLUSIVE or criterion == "no_leak":
        return fixed
    c = cell_data(ctx, config, recipe, inputs)
    b = cell_data(ctx, ctx.baseline, recipe, inputs)
    base = ctx.baseline
    rule = ctx.rule(criterion)
    if criterion == "input_tokens" and rule is not None:
        return fixed  # a bootstrap bound within each draw: not drawn (module doc)
    if criterion in _RATES:
        quantity = _RATES[criterion]
        kc = src.count(config, recipe, inputs, quantity)
        kb = src.count(base, recipe, inputs, quantity)
        (_, nc), (_, nb) = counts(c, quantity), counts(b, quantity)
        if rule is not None:
            ok = rate_non_inferior(kc, nc, kb, nb, rule)
        else:
            ok = _rate_pass(kc, nc, kb, nb)
    elif criterion == "iteration_limit":
        if c.hit_null_ids or b.hit_null_ids:
            return fixed
        hc = src.count(config, recipe, inputs, "hits")
        ok = np.asarray(hc <= src.count(base, recipe, inputs, "hits"))
    elif criterion == "input_tokens":
        large = inputs[0][1] == "large" and len(inputs) == 1
        med_c, med_b = src.median(config, recipe, inputs), src.median(base, recipe, inputs)
        if large:
            ok = np.asarray(med_c < med_b)
        else:
            tol = Fraction(ctx.tolerance)
            # med_c <= (1 + tol) * med_b, in integers: medians are halves of integers.
            ok = np.asarray(
                2 * med_c * tol.denominator <= 2 * med_b * (tol.denominator + tol.numerator)
            )
    else:  # a criterion this module does not know is held where it was
        return fixed
    return np.where(ok, CODE[PASS], CODE[FAIL]).astype(np.int8)


def units(ctx: Context, verdict: ConfigVerdict, src: Source) -> list[Unit]:
    """Every judged cell of every criterion of one configuration, drawn."""
    out: list[Unit] = []
    for key, result in verdict.criteria.items():
        for ev in result.cells:
            if ev.input is None:
                inputs = [(i, s) for r, i, s in ctx.cells if r == ev.recipe]
            else:
                inputs = [(ev.input, ev.size_class or "")]
            codes = _unit_codes(ctx, key, verdict.name, ev.recipe, inputs, ev.status, src)
            out.append(Unit((verdict.name, key, ev.recipe, ev.input), ev.status, codes))
    return out


def _combine(parts: Sequence[Unit], size: int) -> Codes:
    """fail if any fails; otherwise inconclusive if any is; otherwise pass."""
    if not parts:
        return np.zeros(size, dtype=np.int8)
    stacked = np.stack([u.codes for u in parts])
    fail = (stacked == CODE[FAIL]).any(axis=0)
    inconclusive = (stacked == CODE[INCONCLUSIVE]).any(axis=0)
    return np.where(fail, CODE[FAIL], np.where(inconclusive, CODE[INCONCLUSIVE], 0)).astype(np.int8)


def config_codes(verdict: ConfigVerdict, parts: Sequence[Unit], size: int) -> Codes:
    codes = _combine(parts, size)
    if verdict.consistency:  # runs that may not be of their configuration: it cannot pass
        codes = np.where(codes == CODE[FAIL], codes, CODE[INCONCLUSIVE]).astype(np.int8)
    return codes


def decisions(matrix: Matrix, by_config: Mapping[str, Codes], size: int) -> list[str]:
    """The decision chain walked in every draw."""
    out = np.full(size, matrix.decision.fallback, dtype=object)
    open_ = np.ones(size, dtype=bool)
    for step in matrix.decision.chain:
        codes = by_config[step.config]
        passes = open_ & (codes == CODE[PASS])
        stops = open_ & (codes == CODE[INCONCLUSIVE])
        out[passes] = step.default
        out[stops] = DECISION_INCONCLUSIVE
        open_ &= codes == CODE[FAIL]
    return [str(v) for v in out]


@dataclass(frozen=True)
class Drawn:
    """A stage drawn `size` times: each draw's decision and every unit's statuses."""

    decisions: list[str]
    units: list[Unit]
    size: int

    def distribution(self) -> dict[str, float]:
        return {v: n / self.size for v, n in Counter(self.decisions).most_common()}

    def share(self, decision: str) -> float:
        return sum(d == decision for d in self.decisions) / self.size

    def flipping(self, decision: str, most: int) -> tuple[FlippingCell, ...]:
        """The units whose status differs from the observed one most often in the draws
        that decide otherwise (`share` of those)."""
        other = np.array([d != decision for d in self.decisions])
        others = int(other.sum())
        if not others:
            return ()
        flips: Counter[UnitKey] = Counter()
        for u in self.units:
            changed = int(((u.codes != CODE[u.observed]) & other).sum())
            if changed:
                flips[u.key] = changed
        return tuple(
            FlippingCell(config=c, criterion=k, recipe=r, input=i, share=n / others)
            for (c, k, r, i), n in flips.most_common(most)
        )


def draw_stage(
    ctx: Context, matrix: Matrix, configs: Mapping[str, ConfigVerdict], src: Source
) -> Drawn:
    """Every configuration judged and the chain walked in each of the source's draws."""
    every: list[Unit] = []
    by_config: dict[str, Codes] = {}
    for name, verdict in configs.items():
        parts = units(ctx, verdict, src)
        every.extend(parts)
        by_config[name] = config_codes(verdict, parts, src.size)
    return Drawn(decisions(matrix, by_config, src.size), every, src.size)


def observed_statuses(
    ctx: Context, configs: Mapping[str, ConfigVerdict]
) -> dict[UnitKey | str, Status]:
    """The statuses this module's reading of the rule gives to the observed figures:
    every unit's, and every configuration's (keyed by name). Equal to the evaluator's."""
    src = Observed(ctx)
    out: dict[UnitKey | str, Status] = {}
    for name, verdict in configs.items():
        parts = units(ctx, verdict, src)
        for u in parts:
            out[u.key] = STATUS[int(u.codes[0])]
        out[name] = STATUS[int(config_codes(verdict, parts, 1)[0])]
    return out
