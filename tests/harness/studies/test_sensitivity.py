"""The sensitivity study's margins: how far each criterion is from its limit, in its
tightest cell, signed so that a reader sees how close a value came to flipping."""

from __future__ import annotations

from fractions import Fraction

import pytest
from spillover_harness.results.verdict import CellEvidence, CriterionResult, Status
from spillover_harness.studies.sensitivity import Margin, criterion_margin
from spillover_harness.studies.sensitivity_report import margin_text


def cell(
    inp: str,
    value: Fraction | None,
    baseline: Fraction | None,
    limit: Fraction | None,
    *,
    size_class: str = "medium",
    status: str = "pass",
) -> CellEvidence:
    return CellEvidence.model_validate(
        {
            "recipe": "code-review",
            "input": inp,
            "size_class": size_class,
            "status": status,
            "value": value,
            "baseline_value": baseline,
            "limit": limit,
            "comparison": "as the criterion states",
            "n": 10,
            "n_baseline": 10,
            "harness_errors": 0,
            "harness_errors_baseline": 0,
            "counts": {},
            "reason": "",
        }
    )


def criterion(key: str, *cells: CellEvidence, status: Status = "pass") -> CriterionResult:
    return CriterionResult(key=key, status=status, rule="literal", reason="", cells=cells)


def test_input_tokens_margin_is_the_ratio_against_the_tolerance_in_the_tightest_cell() -> None:
    tolerance = Fraction(11, 10)
    result = criterion(
        "input_tokens",
        cell("small", Fraction(900), Fraction(1000), tolerance * 1000),  # ratio 0.9 vs 1.1
        cell("medium", Fraction(1050), Fraction(1000), tolerance * 1000),  # 1.05 vs 1.1
        cell("large", Fraction(600), Fraction(1000), Fraction(1000), size_class="large"),
    )
    m = criterion_margin("input_tokens", result)
    assert m.cell == "code-review/medium"
    assert m.value == pytest.approx(1.05) and m.limit == pytest.approx(1.1)
    assert m.margin == pytest.approx(0.05)
    assert not m.strict
    assert m.unit == "share of the baseline's median"
    assert margin_text(m) == (
        "input_tokens 1.05 <= 1.1 (+0.05); other cells: code-review/small +0.2, "
        "code-review/large +0.4"
    )
    assert m.cells == {
        "code-review/small": pytest.approx(0.2),
        "code-review/medium": pytest.approx(0.05),
        "code-review/large": pytest.approx(0.4),
    }


def test_a_large_input_at_the_baseline_fails_by_a_strict_zero() -> None:
    result = criterion(
        "input_tokens",
        cell("large", Fraction(1000), Fraction(1000), Fraction(1000), size_class="large"),
        status="fail",
    )
    m = criterion_margin("input_tokens", result)
    assert m.margin == 0 and m.strict
    assert margin_text(m) == "❌ input_tokens 1 < 1 (+0)"


def test_rates_are_held_above_and_counts_below_the_baseline() -> None:
    rates = criterion(
        "success_rate",
        cell("small", Fraction(9, 10), Fraction(1), Fraction(1), status="fail"),
        cell("large", Fraction(1), Fraction(7, 10), Fraction(7, 10)),
        status="fail",
    )
    m = criterion_margin("success_rate", rates)
    assert m.cell == "code-review/small"
    assert m.margin == pytest.approx(-0.1)
    assert m.status == "fail"
    assert margin_text(m) == "❌ success_rate 0.9 >= 1 (-0.1); other cells: code-review/large +0.3"
    hits = criterion(
        "iteration_limit",
        cell("large", Fraction(1), Fraction(3), Fraction(3)),  # 1 hit against off's 3
    )
    h = criterion_margin("iteration_limit", hits)
    assert h.margin == 2
    assert margin_text(h) == "iteration_limit 1 <= 3 (+2)"


def test_no_figure_no_margin() -> None:
    result = criterion(
        "summary_quality", cell("document", None, Fraction(1), Fraction(1)), status="inconclusive"
    )
    assert criterion_margin("summary_quality", result) == Margin(
        "summary_quality", "inconclusive", None, None, None, None, False, "quality-rate difference"
    )
    assert criterion_margin("summary_quality", criterion("summary_quality")).margin is None


def test_no_leak_margin_counts_the_runs_not_clean() -> None:
    """no_leak's figure is the clean runs held against the valid runs: its margin is
    minus the runs not clean (leaked or unchecked), and its unit says that."""
    result = criterion(
        "no_leak",
        cell("small", Fraction(3), None, Fraction(3)),
        cell("large", Fraction(1), None, Fraction(3), size_class="large"),
        status="fail",
    )
    m = criterion_margin("no_leak", result)
    assert m.cell == "code-review/large"
    assert (m.value, m.limit, m.margin) == (1, 3, -2)
    assert m.unit == "clean runs of the valid runs (margin: minus the runs not clean)"
