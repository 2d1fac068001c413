"""Criterion 4, summary quality (docs/reference.md §3).

Per recipe of `acceptance.quality_recipes`, all its inputs together:
quality_ok true / known of the configuration >= the baseline's, as exact
fractions. A matrix that declares no quality recipe makes the criterion pass
as "not applicable".
"""

from __future__ import annotations

from fractions import Fraction

from spillover_harness.evaluate.context import CellData, Context
from spillover_harness.evaluate.noise import Noise, rate_noise
from spillover_harness.evaluate.render import CellText, ratio
from spillover_harness.evaluate.success_rate import rate_reading
from spillover_harness.evaluate.walker import CellCriterion, Figures, Judgement, Unit, by_rule, rate
from spillover_harness.results.verdict import FAIL, INCONCLUSIVE, PASS, CellEvidence, RunsNeeded


class SummaryQuality(CellCriterion):
    key = "summary_quality"
    title = "Summary quality"
    empty_reason = "not applicable: the matrix declares no quality recipe"

    def units(self, ctx: Context) -> list[Unit]:
        return [
            Unit(
                recipe,
                tuple((inp, size) for r, inp, size in ctx.cells if r == recipe),
                whole_recipe=True,
            )
            for recipe in ctx.quality_recipes
        ]

    def rule(self, ctx: Context) -> str:
        return (
            f"for {', '.join(ctx.quality_recipes) or '(no quality recipe)'}, all inputs "
            f"together: quality_ok rate (true / known) >= {ctx.baseline}'s, compared as exact "
            "fractions"
        )

    def figures(self, ctx: Context, unit: Unit, c: CellData, b: CellData) -> Figures:
        baseline = Fraction(b.quality_true, b.quality_known) if b.quality_known else None
        return Figures(
            value=Fraction(c.quality_true, c.quality_known) if c.quality_known else None,
            baseline_value=baseline,
            limit=baseline,
            comparison="value >= baseline_value (quality_ok true / known)",
            counts={"quality_ok": c.quality_true, "known": c.quality_known, "valid": c.valid},
            baseline_counts={
                "quality_ok": b.quality_true,
                "known": b.quality_known,
                "valid": b.valid,
            },
            n=c.quality_known,
            n_baseline=b.quality_known,
        )

    def compare(
        self, ctx: Context, config: str, unit: Unit, c: CellData, b: CellData, f: Figures
    ) -> Judgement:
        base = ctx.baseline
        if f.value is None or f.baseline_value is None:
            parts: list[str] = []
            needs: list[RunsNeeded] = []
            for side, d in ((config, c), (base, b)):
                if d.quality_known:
                    continue
                why = f"quality_ok not judged on any of the {d.valid} valid run(s) of {side}"
                parts.append(why)
                needs.extend(
                    RunsNeeded(
                        config=side,
                        recipe=unit.recipe,
                        input=inp,
                        runs=ctx.target,
                        criteria=(self.key,),
                        reason=f"{why}: needs {ctx.target} run(s) with quality judged",
                    )
                    for inp, _ in unit.inputs
                )
            return Judgement(INCONCLUSIVE, "; ".join(parts), tuple(needs))
        ok = f.value >= f.baseline_value
        literal = Judgement(
            PASS if ok else FAIL,
            f"quality ok {rate(c.quality_true, c.quality_known)} {'>=' if ok else '<'} "
            f"{base}'s {rate(b.quality_true, b.quality_known)}",
        )
        rule = ctx.rule(self.key)
        if rule is None:
            return literal
        reading = rate_reading(c.quality_true, c.quality_known, b, rule, quality=True)
        return by_rule(literal, rule.rule, *reading)

    def noise(self, ctx: Context, unit: Unit, c: CellData, b: CellData) -> Noise:
        return rate_noise(c.quality_true, c.quality_known, b.quality_true, b.quality_known)

    def cell_text(self, ev: CellEvidence, baseline: str) -> CellText:
        counts, bcounts = ev.counts, ev.baseline_counts or {}
        return CellText(
            ratio(counts["quality_ok"], counts["known"], "none judged"),
            ratio(bcounts["quality_ok"], bcounts["known"], "none judged"),
            f">= {baseline}'s rate",
        )
