"""Criterion 1, success rate (docs/reference.md §3).

Per (recipe, input): succeeded / valid runs (runs - harness_error) of the
configuration >= the baseline's, compared as exact fractions (2/3 == 4/6).
"""

from __future__ import annotations

from fractions import Fraction

from spillover_harness.evaluate.context import CellData, Context
from spillover_harness.evaluate.noise import Noise, rate_noise
from spillover_harness.evaluate.render import CellText, ratio
from spillover_harness.evaluate.rules import difference_lower
from spillover_harness.evaluate.walker import (
    CellCriterion,
    Figures,
    Judgement,
    Unit,
    by_rule,
    rate,
)
from spillover_harness.plan.matrix import Rule
from spillover_harness.results.verdict import FAIL, PASS, CellEvidence


def rate_reading(
    k: int, n: int, b: CellData, rule: Rule, *, quality: bool = False
) -> tuple[bool, str]:
    """The non-inferiority reading of a rate cell: (passes, why)."""
    kb, nb = (b.quality_true, b.quality_known) if quality else (b.succeeded, b.valid)
    lower = float(difference_lower(k, n, kb, nb, rule.confidence))
    ok = lower > -rule.margin
    return ok, (
        f"{rule.confidence:.0%} lower bound of the rate difference {lower:+.3f} "
        f"{'>' if ok else '<='} -{rule.margin:g}"
    )


class SuccessRate(CellCriterion):
    key = "success_rate"
    title = "Success rate"

    def rule(self, ctx: Context) -> str:
        return (
            f"per (recipe, input): succeeded / (runs - harness_error) >= {ctx.baseline}'s, "
            "compared as exact fractions"
        )

    def figures(self, ctx: Context, unit: Unit, c: CellData, b: CellData) -> Figures:
        baseline = Fraction(b.succeeded, b.valid) if b.valid else None
        return Figures(
            value=Fraction(c.succeeded, c.valid) if c.valid else None,
            baseline_value=baseline,
            limit=baseline,
            comparison="value >= baseline_value",
            counts={"succeeded": c.succeeded, "valid": c.valid},
            baseline_counts={"succeeded": b.succeeded, "valid": b.valid},
        )

    def compare(
        self, ctx: Context, config: str, unit: Unit, c: CellData, b: CellData, f: Figures
    ) -> Judgement:
        assert f.value is not None and f.baseline_value is not None
        ok = f.value >= f.baseline_value
        literal = Judgement(
            PASS if ok else FAIL,
            f"{rate(c.succeeded, c.valid)} {'>=' if ok else '<'} "
            f"{ctx.baseline}'s {rate(b.succeeded, b.valid)}",
        )
        rule = ctx.rule(self.key)
        if rule is None:
            return literal
        return by_rule(literal, rule.rule, *rate_reading(c.succeeded, c.valid, b, rule))

    def noise(self, ctx: Context, unit: Unit, c: CellData, b: CellData) -> Noise:
        return rate_noise(c.succeeded, c.valid, b.succeeded, b.valid)

    def cell_text(self, ev: CellEvidence, baseline: str) -> CellText:
        counts, bcounts = ev.counts, ev.baseline_counts or {}
        return CellText(
            ratio(counts["succeeded"], counts["valid"], "no valid run"),
            ratio(bcounts["succeeded"], bcounts["valid"], "no valid run"),
            f">= {baseline}'s rate",
        )
