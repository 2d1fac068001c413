"""Criterion 5, nothing on disk and nothing in the logs (docs/reference.md §3).

Per (recipe, input), the configuration's valid runs only (the baseline's
leaks are not the configuration's criterion; the advisory mentions them): a
false `disk_clean` or `logs_clean` fails, otherwise a null is inconclusive
and the runs with a null are named for rerun.
"""

from __future__ import annotations

from fractions import Fraction

from spillover_harness.evaluate.context import CellData, Context
from spillover_harness.evaluate.render import CellText
from spillover_harness.evaluate.walker import CellCriterion, Figures, Judgement, Unit, rerun
from spillover_harness.results.verdict import FAIL, INCONCLUSIVE, PASS, CellEvidence


class NoLeak(CellCriterion):
    key = "no_leak"
    title = "Nothing on disk, nothing in the logs"
    with_baseline = False

    def rule(self, ctx: Context) -> str:
        return (
            "disk_clean and logs_clean true on every valid run of the configuration "
            "(a false anywhere fails; otherwise a null makes it inconclusive)"
        )

    def figures(self, ctx: Context, unit: Unit, c: CellData, b: CellData) -> Figures:
        return Figures(
            value=Fraction(c.clean),
            baseline_value=None,
            limit=Fraction(c.valid),
            comparison=(
                "value == limit (runs with disk_clean and logs_clean both true, of valid runs)"
            ),
            counts={
                "clean": c.clean,
                "leaked": len(c.leak_ids),
                "unchecked": len(c.leak_unknown_ids),
                "valid": c.valid,
            },
        )

    def compare(
        self, ctx: Context, config: str, unit: Unit, c: CellData, b: CellData, f: Figures
    ) -> Judgement:
        if c.leak_ids:
            shown = ", ".join(c.leak_ids[:5]) + (", ..." if len(c.leak_ids) > 5 else "")
            return Judgement(
                FAIL,
                f"{len(c.leak_ids)} run(s) wrote to disk or logged result content ({shown})",
            )
        if c.leak_unknown_ids:
            reason = f"{len(c.leak_unknown_ids)} run(s) without the disk or log check"
            need = rerun(
                config,
                unit,
                self.key,
                f"{reason}: run them again with both checks working (a recorded null "
                "keeps the cell inconclusive)",
                c.leak_unknown_ids,
            )
            return Judgement(INCONCLUSIVE, reason, (need,))
        return Judgement(PASS, f"disk and logs clean on all {c.valid} valid run(s)")

    def cell_text(self, ev: CellEvidence, baseline: str) -> CellText:
        counts = ev.counts
        extra = []
        if counts["leaked"]:
            extra.append(f"{counts['leaked']} leaked")
        if counts["unchecked"]:
            extra.append(f"{counts['unchecked']} unchecked")
        tail = f" ({', '.join(extra)})" if extra else ""
        return CellText(
            f"{counts['clean']}/{counts['valid']} clean{tail}", "not judged", "all clean"
        )
