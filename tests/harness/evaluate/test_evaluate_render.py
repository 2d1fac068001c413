"""Each criterion renders its own report cells: a new criterion needs no report change."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from record_builders import MATRIX, make_dataset, make_record
from spillover_harness.evaluate import evaluate
from spillover_harness.evaluate.context import CellData, Context, group
from spillover_harness.evaluate.render import DefaultView, number, view_for
from spillover_harness.evaluate.walker import CellCriterion, Figures, Judgement, Unit
from spillover_harness.report.report import CRITERION_VIEWS, render_markdown
from spillover_harness.results.records import RunRecord
from spillover_harness.results.verdict import FAIL, PASS, CellEvidence, Verdict


def _good(config: str) -> dict[str, Any]:
    return {
        "hit_iteration_limit": False,
        "iterations": 6,
        "input_tokens": 1000 if config == "off" else 900,
        "output_tokens": 100 if config == "off" else 120,
        "duration_s": 10.0,
        "spillover_persisted": 1,
        "spillover_reads": 2,
        "quality_ok": True,
        "disk_clean": True,
        "logs_clean": True,
    }


def _records() -> list[RunRecord]:
    def rec(config: str, recipe: str, inp: str, **fields: Any) -> RunRecord:
        return make_record(_good, config, recipe, inp, **fields)

    return make_dataset(rec, None, n=5, stage="sim")


class OutputTokens(CellCriterion):
    """A criterion the report has never heard of: only the judging parts, no rendering."""

    key = "output_tokens"
    title = "Output tokens"

    def rule(self, ctx: Context) -> str:
        return f"per (recipe, input): median output tokens <= {ctx.baseline}'s"

    def figures(self, ctx: Context, unit: Unit, c: CellData, b: CellData) -> Figures:
        c_med = Fraction(sorted(c.output_tokens)[len(c.output_tokens) // 2])
        b_med = Fraction(sorted(b.output_tokens)[len(b.output_tokens) // 2])
        return Figures(c_med, b_med, b_med, "value <= baseline_value", counts={"valid": c.valid})

    def compare(
        self, ctx: Context, config: str, unit: Unit, c: CellData, b: CellData, f: Figures
    ) -> Judgement:
        assert f.value is not None and f.limit is not None
        return Judgement(PASS if f.value <= f.limit else FAIL, "compared the medians")


def _with_new_criterion(records: list[RunRecord]) -> Verdict:
    verdict = evaluate(records, MATRIX, resamples=50)
    base = MATRIX.acceptance.baseline
    ctx = Context(
        baseline=base,
        target=MATRIX.repetitions.sim,
        tolerance=Fraction(1, 10),
        cells=tuple((r.name, i.name, i.size_class) for r, i in MATRIX.cells()),
        quality_recipes=tuple(MATRIX.acceptance.quality_recipes),
        data=group(records, MATRIX, "sim").data,
    )
    new = OutputTokens()
    configs = {
        name: cv.model_copy(update={"criteria": {**cv.criteria, new.key: new.judge(ctx, name)}})
        for name, cv in verdict.configs.items()
    }
    return verdict.model_copy(update={"configs": configs})


def test_a_new_criterion_renders_through_its_own_view_without_report_changes() -> None:
    records = _records()
    verdict = _with_new_criterion(records)
    text = render_markdown(
        verdict, records, MATRIX, views={**CRITERION_VIEWS, "output_tokens": OutputTokens()}
    )
    assert "### 6. Output tokens (`output_tokens`)" in text
    section = text.split("(`output_tokens`)", 1)[1].split("## ", 1)[0]
    assert "| 128KiB | code-review/small | small | 120 | 100 | 100 (value <= baseline_value) |" in (
        section
    )
    assert "❌ fail" in section  # 120 output tokens against off's 100
    # the configurations table has a column for it
    assert "| configuration | verdict | success_rate |" in text
    assert "no_leak | output_tokens | runs |" in text


def test_a_criterion_key_the_report_does_not_know_renders_from_its_numbers() -> None:
    records = _records()
    verdict = _with_new_criterion(records)
    text = render_markdown(verdict, records, MATRIX)  # the default views: no output_tokens
    assert "### 6. Output tokens (`output_tokens`)" in text
    assert "| 32KiB | summarize/document | medium | 120 | 100 |" in text


def test_the_five_criteria_keep_their_own_cells() -> None:
    records = _records()
    text = render_markdown(evaluate(records, MATRIX, resamples=50), records, MATRIX)
    assert "5/5 (100.0%)" in text  # success rate as a ratio
    assert "0 hit(s) in 5 run(s)" in text  # iteration limit as counts
    assert "<= 1,100" in text  # input tokens: small/medium limit
    assert "5/5 clean" in text  # no_leak
    assert "Tolerance: 10% above off's median" in text


def test_view_for_falls_back_to_the_default_view() -> None:
    view = view_for("made_up_rule", CRITERION_VIEWS)
    assert isinstance(view, DefaultView)
    assert view.title == "Made up rule"
    ev = CellEvidence(
        recipe="r",
        input="i",
        size_class="small",
        status=PASS,
        value=Fraction(3, 2),
        baseline_value=None,
        limit=None,
        comparison="value is shown",
        n=1,
        n_baseline=None,
        harness_errors=0,
        harness_errors_baseline=None,
        counts={},
        reason="ok",
    )
    cells = view.cell_text(ev, "off")
    assert (cells.value, cells.baseline_value, cells.limit) == ("1.5", "n/a", "value is shown")
    assert number(Fraction(1234)) == "1,234"
