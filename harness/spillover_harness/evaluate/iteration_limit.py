"""Criterion 2, iteration limit (docs/reference.md §3-4).

Per (recipe, input): the configuration's count of limit hits must not exceed
the baseline's -- count against count, as the reference says, even when the
number of valid runs differs (the evidence says so).

Nulls (an interpretation, docs/reference.md §4): a null
`hit_iteration_limit` makes the cell inconclusive, except when the
configuration's known hits already exceed every hit the baseline could have
(its hits plus its unmeasured runs): then the cell fails whatever the
unmeasured runs show, as a false `disk_clean` does for criterion 5. A pass
always needs every run measured. The runs with a null are named for rerun.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from spillover_harness.evaluate.context import CellData, Context
from spillover_harness.evaluate.noise import Noise, count_higher_p, exact_interval
from spillover_harness.evaluate.render import CellText
from spillover_harness.evaluate.walker import CellCriterion, Figures, Judgement, Unit, rerun
from spillover_harness.results.verdict import FAIL, INCONCLUSIVE, PASS, CellEvidence, RunsNeeded


class IterationLimit(CellCriterion):
    key = "iteration_limit"
    title = "Iteration limit"

    def rule(self, ctx: Context) -> str:
        return (
            f"per (recipe, input): the count of limit hits must not exceed {ctx.baseline}'s; "
            "an unmeasured hit_iteration_limit makes the cell inconclusive"
        )

    def figures(self, ctx: Context, unit: Unit, c: CellData, b: CellData) -> Figures:
        return Figures(
            value=Fraction(c.hits),
            baseline_value=Fraction(b.hits),
            limit=Fraction(b.hits),
            comparison="value <= baseline_value (counts of limit hits)",
            counts={"hits": c.hits, "unknown": len(c.hit_null_ids), "valid": c.valid},
            baseline_counts={"hits": b.hits, "unknown": len(b.hit_null_ids), "valid": b.valid},
        )

    def compare(
        self, ctx: Context, config: str, unit: Unit, c: CellData, b: CellData, f: Figures
    ) -> Judgement:
        base = ctx.baseline
        c_null, b_null = len(c.hit_null_ids), len(b.hit_null_ids)
        note = ""
        if c.valid != b.valid:
            note = (
                f" (counts compared as the reference states, although the valid runs differ: "
                f"{c.valid} vs {b.valid})"
            )
        if c.hits > b.hits + b_null:
            reason = f"{c.hits} limit hit(s) > {base}'s {b.hits}"
            if c_null or b_null:
                reason += " whatever the unmeasured runs show"
            return Judgement(FAIL, reason + note)
        if c_null or b_null:
            parts: list[str] = []
            needs: list[RunsNeeded] = []
            for side, d in ((config, c), (base, b)):
                if d.hit_null_ids:
                    count = len(d.hit_null_ids)
                    parts.append(f"{count} run(s) of {side} did not measure hit_iteration_limit")
                    needs.append(
                        rerun(
                            side,
                            unit,
                            self.key,
                            f"{count} run(s) without hit_iteration_limit: run them again with "
                            "the measurement working (a recorded null keeps the cell "
                            "inconclusive)",
                            d.hit_null_ids,
                        )
                    )
            return Judgement(INCONCLUSIVE, "; ".join(parts), tuple(needs))
        ok = c.hits <= b.hits
        return Judgement(
            PASS if ok else FAIL,
            f"{c.hits} limit hit(s) {'<=' if ok else '>'} {base}'s {b.hits}{note}",
        )

    def noise(self, ctx: Context, unit: Unit, c: CellData, b: CellData) -> Noise:
        return Noise(
            count_higher_p(c.hits, c.valid, b.hits, b.valid), exact_interval(c.hits, c.valid)
        )

    def cell_text(self, ev: CellEvidence, baseline: str) -> CellText:
        def hits(c: Mapping[str, int]) -> str:
            unknown = f", {c['unknown']} unmeasured" if c["unknown"] else ""
            return f"{c['hits']} hit(s) in {c['valid']} run(s){unknown}"

        bcounts = ev.baseline_counts or {}
        return CellText(hits(ev.counts), hits(bcounts), f"<= {bcounts['hits']} hit(s)")
