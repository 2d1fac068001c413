"""The five acceptance criteria of docs/reference.md §3, each in pass, fail and inconclusive."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from record_builders import MATRIX, CellKey, Spec, make_dataset, make_record
from spillover_harness.evaluate import evaluate
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.records import RunRecord
from spillover_harness.results.verdict import CellEvidence, CriterionResult, Verdict
from spillover_harness.stats import median


def _good_run(config: str) -> Spec:
    return {
        "hit_iteration_limit": False,
        "iterations": 5,
        "input_tokens": 1000 if config == "off" else 900,
        "output_tokens": 100,
        "duration_s": 10.0,
        "spillover_persisted": 0 if config == "off" else 1,
        "spillover_reads": 0 if config == "off" else 1,
        "status_report_bytes": 2000,
        "quality_ok": True,
        "disk_clean": True,
        "logs_clean": True,
    }


def rec(config: str, recipe: str, inp: str, *, stage: str = "sim", **fields: Any) -> RunRecord:
    """One record; every field measured and good unless `fields` says otherwise."""
    return make_record(_good_run, config, recipe, inp, stage=stage, **fields)


def dataset(
    cells: dict[CellKey, list[Spec]] | None = None,
    *,
    n: int = 2,
    stage: str = "sim",
    configs: list[str] | None = None,
) -> list[RunRecord]:
    """Every configuration x cell with `n` good runs, except the cells given (their specs)."""
    return make_dataset(rec, cells, n=n, stage=stage, configs=configs)


def crit(verdict: Verdict, key: str, config: str = "128KiB") -> CriterionResult:
    return verdict.configs[config].criteria[key]


def cell(result: CriterionResult, recipe: str, inp: str | None) -> CellEvidence:
    return next(c for c in result.cells if c.recipe == recipe and c.input == inp)


def run(cells: dict[CellKey, list[Spec]] | None = None, matrix: Matrix = MATRIX) -> Verdict:
    return evaluate(dataset(cells), matrix, allow_incomplete=True, resamples=50)


# -- baseline -------------------------------------------------------------------------


def test_all_good_runs_pass_every_criterion() -> None:
    v = run()
    for cfg in ("128KiB", "32KiB"):
        assert v.configs[cfg].verdict == "pass"
        assert {k: c.status for k, c in v.configs[cfg].criteria.items()} == {
            "success_rate": "pass",
            "iteration_limit": "pass",
            "input_tokens": "pass",
            "summary_quality": "pass",
            "no_leak": "pass",
        }
    assert v.decision == "131072"


# -- 1 success_rate --------------------------------------------------------------------


def test_success_rate_fails_when_lower_in_one_cell() -> None:
    v = run({("128KiB", "code-review", "small"): [{}, {"outcome": "failed"}]})
    result = crit(v, "success_rate")
    assert result.status == "fail"
    c = cell(result, "code-review", "small")
    assert c.status == "fail"
    assert c.value == Fraction(1, 2) and c.baseline_value == 1
    assert cell(result, "code-review", "medium").status == "pass"


def test_success_rate_compares_exact_fractions_2_3_equals_4_6() -> None:
    v = run(
        {
            ("128KiB", "code-review", "small"): [{}, {}, {"outcome": "timed_out"}],
            ("off", "code-review", "small"): [{}] * 4 + [{"outcome": "failed"}] * 2,
        }
    )
    c = cell(crit(v, "success_rate"), "code-review", "small")
    assert c.value == Fraction(2, 3) == c.baseline_value
    assert c.status == "pass"
    assert c.counts == {"succeeded": 2, "valid": 3}
    assert c.baseline_counts == {"succeeded": 4, "valid": 6}


def test_success_rate_leaves_harness_errors_out_and_counts_them() -> None:
    v = run({("128KiB", "code-review", "small"): [{}, {}, {"outcome": "harness_error"}]})
    c = cell(crit(v, "success_rate"), "code-review", "small")
    assert c.status == "pass"
    assert c.n == 2 and c.harness_errors == 1
    assert v.harness_errors["128KiB"] == 1
    assert v.harness_errors["off"] == 0


def test_success_rate_inconclusive_when_every_run_is_a_harness_error() -> None:
    v = run({("128KiB", "code-review", "large"): [{"outcome": "harness_error"}] * 2})
    result = crit(v, "success_rate")
    assert result.status == "inconclusive"
    assert cell(result, "code-review", "large").status == "inconclusive"
    assert "2 harness_error" in cell(result, "code-review", "large").reason
    assert v.harness_errors["128KiB"] == 2


def test_success_rate_inconclusive_when_the_baseline_cell_is_missing() -> None:
    v = run({("off", "summarize", "document"): []})
    assert crit(v, "success_rate").status == "inconclusive"
    # a missing baseline cell leaves both configurations inconclusive
    assert crit(v, "success_rate", "32KiB").status == "inconclusive"


def test_success_rate_fail_wins_over_an_inconclusive_cell() -> None:
    v = run(
        {
            ("128KiB", "code-review", "small"): [{"outcome": "failed"}, {}],
            ("128KiB", "code-review", "large"): [],
        }
    )
    result = crit(v, "success_rate")
    assert cell(result, "code-review", "large").status == "inconclusive"
    assert result.status == "fail"


# -- 2 iteration_limit -----------------------------------------------------------------


def test_iteration_limit_passes_on_equal_counts() -> None:
    v = run(
        {
            ("128KiB", "code-review", "large"): [{"hit_iteration_limit": True}, {}],
            ("off", "code-review", "large"): [{}, {"hit_iteration_limit": True}],
        }
    )
    c = cell(crit(v, "iteration_limit"), "code-review", "large")
    assert c.status == "pass"
    assert c.value == 1 and c.baseline_value == 1


def test_iteration_limit_fails_on_more_hits_than_off() -> None:
    v = run({("128KiB", "code-review", "large"): [{"hit_iteration_limit": True}, {}]})
    result = crit(v, "iteration_limit")
    assert result.status == "fail"
    assert cell(result, "code-review", "large").status == "fail"


@pytest.mark.parametrize("side", ["128KiB", "off"])
def test_iteration_limit_inconclusive_on_a_null_either_side(side: str) -> None:
    v = run({(side, "code-review", "medium"): [{"hit_iteration_limit": None}, {}]})
    result = crit(v, "iteration_limit")
    c = cell(result, "code-review", "medium")
    assert c.status == "inconclusive"
    assert result.status == "inconclusive"
    assert "did not measure hit_iteration_limit" in c.reason
    needs = [n for n in result.runs_needed if n.config == side]
    assert len(needs) == 1 and needs[0].runs == 1 and len(needs[0].rerun_ids) == 1


def test_iteration_limit_fails_despite_nulls_when_the_failure_is_certain() -> None:
    v = run(
        {
            ("128KiB", "code-review", "large"): [{"hit_iteration_limit": True}] * 2,
            ("off", "code-review", "large"): [{}, {"hit_iteration_limit": None}],
        }
    )
    c = cell(crit(v, "iteration_limit"), "code-review", "large")
    # 2 hits > off's 0 known + 1 unmeasured: fails whatever the null would show
    assert c.status == "fail"
    assert "whatever the unmeasured runs show" in c.reason


def test_iteration_limit_null_that_could_change_the_result_stays_inconclusive() -> None:
    v = run(
        {
            ("128KiB", "code-review", "large"): [{"hit_iteration_limit": True}, {}],
            ("off", "code-review", "large"): [{}, {"hit_iteration_limit": None}],
        }
    )
    assert cell(crit(v, "iteration_limit"), "code-review", "large").status == "inconclusive"


def test_iteration_limit_ignores_harness_error_runs_and_their_nulls() -> None:
    v = run({("128KiB", "code-review", "small"): [{}, {}, {"outcome": "harness_error"}]})
    assert crit(v, "iteration_limit").status == "pass"


def test_iteration_limit_compares_counts_and_notes_differing_n() -> None:
    v = run(
        {
            ("128KiB", "code-review", "small"): [{"hit_iteration_limit": True}] + [{}] * 3,
            ("off", "code-review", "small"): [{"hit_iteration_limit": True}, {}],
        }
    )
    c = cell(crit(v, "iteration_limit"), "code-review", "small")
    assert c.status == "pass"  # 1 vs 1, count against count as the reference states
    assert "4 vs 2" in c.reason


def test_iteration_limit_inconclusive_when_all_harness_error() -> None:
    v = run({("off", "code-review", "small"): [{"outcome": "harness_error"}] * 2})
    assert crit(v, "iteration_limit").status == "inconclusive"


# -- 3 input_tokens --------------------------------------------------------------------


@pytest.mark.parametrize("inp", ["small", "medium"])
def test_input_tokens_exactly_110_percent_passes_small_and_medium(inp: str) -> None:
    v = run(
        {
            ("128KiB", "code-review", inp): [{"input_tokens": 110}] * 2,
            ("off", "code-review", inp): [{"input_tokens": 100}] * 2,
        }
    )
    c = cell(crit(v, "input_tokens"), "code-review", inp)
    assert c.status == "pass"
    assert c.value == 110 and c.baseline_value == 100 and c.limit == 110


@pytest.mark.parametrize("inp", ["small", "medium"])
def test_input_tokens_just_above_110_percent_fails(inp: str) -> None:
    v = run(
        {
            ("128KiB", "code-review", inp): [{"input_tokens": 111}] * 2,
            ("off", "code-review", inp): [{"input_tokens": 100}] * 2,
        }
    )
    assert cell(crit(v, "input_tokens"), "code-review", inp).status == "fail"
    assert crit(v, "input_tokens").status == "fail"


def test_input_tokens_tolerance_product_is_exact_not_float() -> None:
    # in floats (1 + 0.10) * 50 is 55.00000000000001; the exact limit is 55
    assert (1 + MATRIX.acceptance.token_tolerance) * 50 != 55
    v = run(
        {
            ("128KiB", "summarize", "document"): [{"input_tokens": 55}] * 3,
            ("off", "summarize", "document"): [{"input_tokens": 50}] * 3,
        }
    )
    c = cell(crit(v, "input_tokens"), "summarize", "document")
    assert c.limit == 55
    assert c.status == "pass"
    v = run(
        {
            ("128KiB", "summarize", "document"): [{"input_tokens": 56}] * 3,
            ("off", "summarize", "document"): [{"input_tokens": 50}] * 3,
        }
    )
    assert cell(crit(v, "input_tokens"), "summarize", "document").status == "fail"


def test_input_tokens_equal_median_fails_for_large() -> None:
    v = run(
        {
            ("128KiB", "code-review", "large"): [{"input_tokens": 5000}] * 2,
            ("off", "code-review", "large"): [{"input_tokens": 5000}] * 2,
        }
    )
    c = cell(crit(v, "input_tokens"), "code-review", "large")
    assert c.status == "fail"
    assert "is not below" in c.reason


def test_input_tokens_lower_median_passes_for_large() -> None:
    v = run(
        {
            ("128KiB", "code-review", "large"): [{"input_tokens": 4999}] * 2,
            ("off", "code-review", "large"): [{"input_tokens": 5000}] * 2,
        }
    )
    assert cell(crit(v, "input_tokens"), "code-review", "large").status == "pass"


def test_input_tokens_compare_completed_runs_only() -> None:
    """An off run that died early (the context overflowed) stopped spending tokens: with
    it, off's median would drop below 128KiB's and fail a configuration that saves
    tokens on every completed run. It is left out, and the evidence says so."""
    died = {"outcome": "failed", "input_tokens": 1000}
    v = run(
        {
            ("128KiB", "code-review", "large"): [{"input_tokens": 4000}] * 3,
            ("off", "code-review", "large"): [{"input_tokens": 5000}, died, died],
        }
    )
    c = cell(crit(v, "input_tokens"), "code-review", "large")
    assert c.status == "pass"
    assert (c.value, c.baseline_value) == (4000, 5000)
    assert c.baseline_counts == {"known": 1, "valid": 3, "completed": 1, "ended_early": 2}
    assert c.counts == {"known": 3, "valid": 3, "completed": 3, "ended_early": 0}
    assert "completed runs only: 2 of off's run(s) ended early" in c.reason
    assert "lower bound" not in c.reason


def test_input_tokens_against_an_off_that_never_completes_use_its_lower_bounds() -> None:
    """off never finishes the cell: its runs that ended early are lower bounds of what it
    spends. A configuration below them passes (it is below off's full cost too); one
    above them fails, and the reason says what the medians were taken over. The cell
    stays decisive: no number of repetitions would make off complete."""
    died = {"outcome": "failed", "input_tokens": 5000}
    below = run(
        {
            ("128KiB", "code-review", "large"): [{"input_tokens": 4000}] * 2,
            ("off", "code-review", "large"): [died, died],
        }
    )
    c = cell(crit(below, "input_tokens"), "code-review", "large")
    assert c.status == "pass"
    assert (c.value, c.baseline_value) == (4000, 5000)
    assert c.baseline_counts == {"known": 2, "valid": 2, "completed": 0, "ended_early": 2}
    assert "off completed no run: its median is over its 2 run(s) that ended early" in c.reason
    above = run(
        {
            ("128KiB", "code-review", "large"): [{"input_tokens": 6000}] * 2,
            ("off", "code-review", "large"): [died, died],
        }
    )
    c = cell(crit(above, "input_tokens"), "code-review", "large")
    assert c.status == "fail" and "a lower bound of what it spends" in c.reason


def test_input_tokens_of_a_configuration_that_never_completes() -> None:
    """The configuration completed no run where off did: its ended-early runs are
    compared (lower bounds, said so) and criterion 1 fails the cell."""
    died = {"outcome": "failed", "input_tokens": 3000}
    v = run(
        {
            ("128KiB", "code-review", "large"): [died, died],
            ("off", "code-review", "large"): [{"input_tokens": 5000}] * 2,
        }
    )
    c = cell(crit(v, "input_tokens"), "code-review", "large")
    assert c.counts == {"known": 2, "valid": 2, "completed": 0, "ended_early": 2}
    assert "128KiB completed no run" in c.reason and "criterion 1 judges" in c.reason
    assert cell(crit(v, "success_rate"), "code-review", "large").status == "fail"


def test_input_tokens_even_count_median_is_the_mean_of_the_middle_two() -> None:
    assert median([4, 1, 3, 2]) == Fraction(5, 2)
    assert median([7]) == 7
    assert median([]) is None
    passing = run(
        {
            ("128KiB", "code-review", "small"): [{"input_tokens": t} for t in (100, 120)],
            ("off", "code-review", "small"): [{"input_tokens": 100}] * 2,
        }
    )
    c = cell(crit(passing, "input_tokens"), "code-review", "small")
    assert c.value == 110 and c.status == "pass"
    failing = run(
        {
            ("128KiB", "code-review", "small"): [{"input_tokens": t} for t in (100, 121)],
            ("off", "code-review", "small"): [{"input_tokens": 100}] * 2,
        }
    )
    c = cell(crit(failing, "input_tokens"), "code-review", "small")
    assert c.value == Fraction(221, 2) and c.status == "fail"


def test_input_tokens_median_over_known_values_only() -> None:
    v = run(
        {
            ("128KiB", "code-review", "small"): [
                {"input_tokens": 100},
                {"input_tokens": None},
                {"input_tokens": 104},
            ],
            ("off", "code-review", "small"): [{"input_tokens": 100}] * 2,
        }
    )
    c = cell(crit(v, "input_tokens"), "code-review", "small")
    assert c.value == 102 and c.n == 2 and c.status == "pass"


@pytest.mark.parametrize("side", ["128KiB", "off"])
def test_input_tokens_inconclusive_without_a_known_value_on_a_side(side: str) -> None:
    v = run({(side, "code-review", "medium"): [{"input_tokens": None}] * 2})
    result = crit(v, "input_tokens")
    assert cell(result, "code-review", "medium").status == "inconclusive"
    assert result.status == "inconclusive"
    assert any(n.config == side and n.recipe == "code-review" for n in result.runs_needed)


def test_input_tokens_inconclusive_when_all_harness_error() -> None:
    v = run({("128KiB", "code-review", "medium"): [{"outcome": "harness_error"}] * 2})
    assert crit(v, "input_tokens").status == "inconclusive"


def test_input_tokens_uses_the_matrix_size_class_not_the_record() -> None:
    # records mislabel the large cell as small: the strict large rule still applies
    v = run(
        {
            ("128KiB", "code-review", "large"): [{"input_tokens": 5000, "size_class": "small"}] * 2,
            ("off", "code-review", "large"): [{"input_tokens": 5000}] * 2,
        }
    )
    c = cell(crit(v, "input_tokens"), "code-review", "large")
    assert c.size_class == "large"
    assert c.status == "fail"
    assert any("size_class 'small'" in w for w in v.warnings)


def test_input_tokens_tolerance_comes_from_the_matrix() -> None:
    acceptance = MATRIX.acceptance.model_copy(update={"token_tolerance": 0.2})
    matrix = MATRIX.model_copy(update={"acceptance": acceptance})
    v = run(
        {
            ("128KiB", "code-review", "small"): [{"input_tokens": 120}] * 2,
            ("off", "code-review", "small"): [{"input_tokens": 100}] * 2,
        },
        matrix,
    )
    c = cell(crit(v, "input_tokens"), "code-review", "small")
    assert c.limit == 120 and c.status == "pass"
    assert crit(v, "input_tokens").tolerance == Fraction(1, 5)


# -- 4 summary_quality -----------------------------------------------------------------


def test_summary_quality_fails_when_worse() -> None:
    v = run({("128KiB", "summarize", "document"): [{"quality_ok": False}, {}]})
    result = crit(v, "summary_quality")
    assert result.status == "fail"
    c = cell(result, "summarize", None)
    assert c.value == Fraction(1, 2) and c.baseline_value == 1


def test_summary_quality_compares_exact_fractions_over_known_values() -> None:
    v = run(
        {
            ("128KiB", "summarize", "document"): [
                {},
                {},
                {"quality_ok": False},
                {"quality_ok": None},
            ],
            ("off", "summarize", "document"): [{}] * 4 + [{"quality_ok": False}] * 2,
        }
    )
    c = cell(crit(v, "summary_quality"), "summarize", None)
    assert c.value == Fraction(2, 3) == c.baseline_value
    assert c.status == "pass"
    assert c.counts["known"] == 3


def test_summary_quality_only_looks_at_the_quality_recipes() -> None:
    v = run({("128KiB", "code-review", "large"): [{"quality_ok": False}] * 2})
    assert crit(v, "summary_quality").status == "pass"


@pytest.mark.parametrize("side", ["128KiB", "off"])
def test_summary_quality_inconclusive_when_nothing_judged_on_a_side(side: str) -> None:
    v = run({(side, "summarize", "document"): [{"quality_ok": None}] * 2})
    result = crit(v, "summary_quality")
    assert result.status == "inconclusive"
    assert any(n.config == side for n in result.runs_needed)


def test_summary_quality_inconclusive_when_all_harness_error() -> None:
    v = run({("128KiB", "summarize", "document"): [{"outcome": "harness_error"}] * 3})
    assert crit(v, "summary_quality").status == "inconclusive"


def test_summary_quality_inconclusive_when_the_cell_is_missing() -> None:
    v = run({("off", "summarize", "document"): []})
    assert crit(v, "summary_quality").status == "inconclusive"


def test_summary_quality_not_applicable_without_quality_recipes() -> None:
    acceptance = MATRIX.acceptance.model_copy(update={"quality_recipes": []})
    matrix = MATRIX.model_copy(update={"acceptance": acceptance})
    v = run({("128KiB", "summarize", "document"): [{"quality_ok": False}] * 2}, matrix)
    result = crit(v, "summary_quality")
    assert result.status == "pass"
    assert result.cells == ()
    assert "not applicable" in result.reason


# -- 5 no_leak -------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["disk_clean", "logs_clean"])
def test_no_leak_fails_on_a_single_false(field: str) -> None:
    v = run({("128KiB", "code-review", "large"): [{}, {field: False}]})
    result = crit(v, "no_leak")
    assert result.status == "fail"
    assert cell(result, "code-review", "large").counts["leaked"] == 1


@pytest.mark.parametrize("field", ["disk_clean", "logs_clean"])
def test_no_leak_inconclusive_on_a_null(field: str) -> None:
    v = run({("128KiB", "code-review", "small"): [{}, {field: None}]})
    result = crit(v, "no_leak")
    assert result.status == "inconclusive"
    (need,) = result.runs_needed
    assert need.runs == 1 and len(need.rerun_ids) == 1


def test_no_leak_false_wins_over_null() -> None:
    v = run(
        {
            ("128KiB", "code-review", "small"): [{"disk_clean": None}, {}],
            ("128KiB", "code-review", "medium"): [{"logs_clean": False}, {}],
        }
    )
    assert crit(v, "no_leak").status == "fail"


def test_no_leak_ignores_harness_error_runs() -> None:
    v = run({("128KiB", "code-review", "small"): [{}, {"outcome": "harness_error"}]})
    assert crit(v, "no_leak").status == "pass"


def test_no_leak_inconclusive_without_runs() -> None:
    v = evaluate(dataset(configs=["off", "32KiB"]), MATRIX, allow_incomplete=True, resamples=20)
    result = crit(v, "no_leak")
    assert result.status == "inconclusive"
    assert all(c.status == "inconclusive" for c in result.cells)
    assert crit(v, "no_leak", "32KiB").status == "pass"


def test_no_leak_inconclusive_when_all_harness_error() -> None:
    v = run({("128KiB", "code-review", "small"): [{"outcome": "harness_error"}] * 2})
    assert crit(v, "no_leak").status == "inconclusive"


def test_no_leak_does_not_judge_the_configuration_on_the_baseline_leaks() -> None:
    v = run({("off", "code-review", "small"): [{"disk_clean": False}, {}]})
    assert crit(v, "no_leak").status == "pass"
    assert any("baseline" in h for h in v.advisory.hints)


# -- configuration verdict ------------------------------------------------------------


def test_configuration_fails_if_any_criterion_fails_even_with_inconclusive_ones() -> None:
    v = run(
        {
            ("128KiB", "code-review", "small"): [{"disk_clean": None}, {}],
            ("128KiB", "code-review", "large"): [{"input_tokens": 2000}] * 2,
        }
    )
    assert crit(v, "no_leak").status == "inconclusive"
    assert crit(v, "input_tokens").status == "fail"
    assert v.configs["128KiB"].verdict == "fail"


def test_configuration_inconclusive_if_no_criterion_fails_but_one_is_inconclusive() -> None:
    v = run({("128KiB", "code-review", "small"): [{"disk_clean": None}, {}]})
    assert v.configs["128KiB"].verdict == "inconclusive"
