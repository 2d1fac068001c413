"""Criterion 3, median input tokens (docs/reference.md §3).

Per (recipe, input), the median over the completed (`succeeded`) runs with
input_tokens measured: a run that ended early (the context overflowed, a
timeout) stopped spending tokens, so counting it would flatter whichever side
died more. A side that completed no run falls back to its runs that ended
early, each a lower bound of what it spends, and the reason says so: against
an `off` that never finishes, a configuration passes only by spending less
than off had spent when it died, which holds against off's full cost too.
The size class is the one the matrix declares (a record's own `size_class`
is never used): small and medium inputs <= (1 + tolerance) x the baseline's
median; large inputs strictly below the baseline's median. The tolerance is
read as the decimal the matrix states (0.10 -> 1/10) and every comparison is
exact, so 110 <= 1.10 x 100 holds.
"""

from __future__ import annotations

from fractions import Fraction

from spillover_harness.evaluate.context import CellData, Context
from spillover_harness.evaluate.noise import Noise, median_higher_p
from spillover_harness.evaluate.render import CellText, number
from spillover_harness.evaluate.rules import tokens_non_inferior
from spillover_harness.evaluate.walker import CellCriterion, Figures, Judgement, Unit, by_rule, fmt
from spillover_harness.results.verdict import FAIL, INCONCLUSIVE, PASS, CellEvidence, RunsNeeded
from spillover_harness.stats import median


def token_limit(
    baseline_median: Fraction | None, large: bool, tolerance: Fraction
) -> Fraction | None:
    """What a cell's median is held against: the baseline's median (large inputs,
    strictly below) or (1 + tolerance) x it (small and medium, at most)."""
    if baseline_median is None:
        return None
    return baseline_median if large else (1 + tolerance) * baseline_median


def _counts(d: CellData) -> dict[str, int]:
    """`known`: the values compared; `completed` and `ended_early`: the runs with
    input_tokens known by how they ended (completed 0 and known > 0: lower bounds)."""
    return {
        "known": len(d.tokens),
        "valid": d.valid,
        "completed": len(d.completed_tokens),
        "ended_early": len(d.early_tokens),
    }


def _sample_note(config: str, c: CellData, base: str, b: CellData) -> str:
    """What the medians were taken over, when it is not simply every completed run."""
    parts: list[str] = []
    shown = [
        f"{d.tokens_left_out} of {side}'s"
        for side, d in ((config, c), (base, b))
        if d.tokens_left_out
    ]
    if shown:
        parts.append(
            f"completed runs only: {' and '.join(shown)} run(s) ended early "
            "(failed, aborted or timed out) and are left out"
        )
    if b.tokens_lower_bound:
        parts.append(
            f"{base} completed no run: its median is over its {len(b.tokens)} run(s) that "
            "ended early, a lower bound of what it spends (a pass holds against its full cost; "
            "a fail may not: its full cost is not known)"
        )
    if c.tokens_lower_bound:
        parts.append(
            f"{config} completed no run: its median is over its {len(c.tokens)} run(s) that "
            "ended early, a lower bound of what it spends (criterion 1 judges that it "
            "completed none)"
        )
    return "".join(f"; {p}" for p in parts)


class InputTokens(CellCriterion):
    key = "input_tokens"
    title = "Median input tokens"

    def tolerance(self, ctx: Context) -> Fraction | None:
        return ctx.tolerance

    def rule(self, ctx: Context) -> str:
        base = ctx.baseline
        return (
            "per (recipe, input), median over completed runs with known input_tokens (a side "
            "that completed none: its runs that ended early, lower bounds): small and medium "
            f"inputs <= {fmt(1 + ctx.tolerance)} x {base}'s median; large inputs < {base}'s median"
        )

    def figures(self, ctx: Context, unit: Unit, c: CellData, b: CellData) -> Figures:
        b_med = median(b.tokens)
        return Figures(
            value=median(c.tokens),
            baseline_value=b_med,
            limit=token_limit(b_med, unit.large, ctx.tolerance),
            comparison=(
                "value < baseline_value (median)"
                if unit.large
                else f"value <= {fmt(1 + ctx.tolerance)} x baseline_value"
            ),
            counts=_counts(c),
            baseline_counts=_counts(b),
            n=len(c.tokens),
            n_baseline=len(b.tokens),
        )

    def compare(
        self, ctx: Context, config: str, unit: Unit, c: CellData, b: CellData, f: Figures
    ) -> Judgement:
        base = ctx.baseline
        c_med, b_med, limit = f.value, f.baseline_value, f.limit
        if c_med is None or b_med is None or limit is None:
            parts: list[str] = []
            needs: list[RunsNeeded] = []
            for side, d in ((config, c), (base, b)):
                if not d.tokens:
                    why = (
                        f"input_tokens not measured on any of the {d.valid} valid run(s) of {side}"
                    )
                    parts.append(why)
                    assert unit.input is not None
                    needs.append(
                        RunsNeeded(
                            config=side,
                            recipe=unit.recipe,
                            input=unit.input,
                            runs=ctx.target,
                            criteria=(self.key,),
                            reason=f"{why}: needs {ctx.target} run(s) with input_tokens measured",
                        )
                    )
            return Judgement(INCONCLUSIVE, "; ".join(parts), tuple(needs))
        if unit.large:
            ok = c_med < limit
            reason = (
                f"median {fmt(c_med)} {'<' if ok else 'is not below'} "
                f"{base}'s median {fmt(b_med)} (large input)"
            )
        else:
            ok = c_med <= limit
            reason = (
                f"median {fmt(c_med)} {'<=' if ok else '>'} {fmt(1 + ctx.tolerance)} x "
                f"{base}'s median {fmt(b_med)} = {fmt(limit)} ({unit.size_class} input)"
            )
        reason += _sample_note(config, c, base, b)
        literal = Judgement(PASS if ok else FAIL, reason)
        rule = ctx.rule(self.key)
        if rule is None:
            return literal
        reading = tokens_non_inferior(c.tokens, b.tokens, large=unit.large, rule=rule)
        return by_rule(literal, rule.rule, *reading)

    def noise(self, ctx: Context, unit: Unit, c: CellData, b: CellData) -> Noise:
        """The permutation p-value of the criterion's own question (no interval: not a
        rate; the advisory bootstrap gives the median ratio's interval). Small and medium
        inputs: could a configuration exactly at the tolerance (median 1.10 x the
        baseline's) show a median this high? Its values divided by 1 + tolerance are then
        exchangeable with the baseline's. Large inputs: could one exactly as good (no
        fewer tokens) show a median this high?"""
        if unit.large:
            return Noise(median_higher_p(c.tokens, b.tokens))
        at_limit = [v / (1 + float(ctx.tolerance)) for v in c.tokens]
        return Noise(median_higher_p(at_limit, b.tokens))

    def cell_text(self, ev: CellEvidence, baseline: str) -> CellText:
        op = "<" if ev.size_class == "large" else "<="
        return CellText(number(ev.value), number(ev.baseline_value), f"{op} {number(ev.limit)}")

    def rule_notes(self, baseline: str, tolerance: Fraction) -> list[str]:
        return [
            f"Tolerance: {number(tolerance * 100)}% above {baseline}'s median for small and "
            f"medium inputs; strictly below {baseline}'s median for large inputs."
        ]
