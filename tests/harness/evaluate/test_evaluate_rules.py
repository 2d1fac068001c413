"""The opt-in non-inferiority rule (matrix `acceptance.rules`, docs/reference.md §5.4):
pinned on hand-made records, with both readings kept, the decision the literal rule
would reach, the stability drawn under the chosen rule, and `plan`'s figures for it."""

from __future__ import annotations

from typing import Any

import pytest
from record_builders import make_dataset, plain_record
from spillover_harness.evaluate import evaluate
from spillover_harness.evaluate.rule_draws import observed_statuses
from spillover_harness.evaluate.rules import difference_lower, wilson
from spillover_harness.plan.false_fail import Assumptions, p_non_inferior, plan
from spillover_harness.plan.matrix import Matrix, MatrixError, load_matrix, parse_matrix
from spillover_harness.report.report import render_markdown
from spillover_harness.results.verdict import Verdict

CELL = ("summarize", "document")


def with_rules(rules: dict[str, Any]) -> Matrix:
    data = load_matrix(None).model_dump(mode="json")
    data["acceptance"]["rules"] = rules
    return parse_matrix(data)


NI = {"success_rate": {"rule": "non_inferiority", "margin": 0.10, "confidence": 0.95}}
FAILED = {"outcome": "failed"}


def verdict(
    matrix: Matrix, n: int, config: list[dict[str, Any]], base: list[dict[str, Any]]
) -> Verdict:
    cells = {
        (name, *CELL): specs
        for name, specs in (("128KiB", config), ("32KiB", config), ("off", base))
    }
    return evaluate(make_dataset(plain_record, cells, n=n), matrix)


def cell_of(v: Verdict, key: str = "success_rate") -> Any:
    return next(c for c in v.configs["128KiB"].criteria[key].cells if (c.recipe, c.input) == CELL)


def test_five_of_five_each_passes_literally_but_shows_nothing_under_non_inferiority() -> None:
    v = verdict(with_rules(NI), 5, [{}] * 5, [{}] * 5)
    ev = cell_of(v)
    assert (ev.status, ev.rule, ev.literal_status) == ("fail", "non_inferiority", "pass")
    assert "lower bound of the rate difference -0.351 <= -0.1" in ev.reason
    assert v.rules == {"success_rate": "non_inferiority"}
    assert v.decision == "false" and v.literal_decision == "131072"
    text = render_markdown(v, make_dataset(plain_record, n=5), with_rules(NI))
    assert "**the literal rule decides `131072`**: the two readings disagree" in text
    assert "❌ fail (non-inferiority; literal: ✅ pass)" in text


def test_enough_runs_show_non_inferiority_where_the_literal_rule_fails() -> None:
    """49/50 against 50/50: the literal rule fails it; the data show the drop is below 10%
    (at 39/40 against 40/40 they do not yet: the bound is -0.105)."""
    v = verdict(with_rules(NI), 50, [{}] * 49 + [FAILED], [{}] * 50)
    ev = cell_of(v)
    assert (ev.status, ev.literal_status) == ("pass", "fail")
    assert float(difference_lower(49, 50, 50, 50, 0.95)) == pytest.approx(-0.0848, abs=1e-4)
    assert float(difference_lower(39, 40, 40, 40, 0.95)) < -0.10
    assert v.decision == "131072" and v.literal_decision == "false"


def test_literal_matrices_carry_no_rule() -> None:
    v = verdict(load_matrix(None), 5, [{}] * 5, [{}] * 5)
    assert v.rules == {} and v.literal_decision is None
    assert cell_of(v).rule == "literal" and cell_of(v).literal_status is None


TOKENS_NI = {"input_tokens": {"rule": "non_inferiority", "margin": 0.10, "confidence": 0.95}}


def with_token_rule(repetitions: int) -> Matrix:
    data = with_rules(TOKENS_NI).model_dump(mode="json")
    data["repetitions"]["sim"] = repetitions
    return parse_matrix(data)


def token_cells(v: Verdict, config: str = "128KiB") -> dict[tuple[str, str | None], Any]:
    return {(c.recipe, c.input): c for c in v.configs[config].criteria["input_tokens"].cells}


def test_the_token_ratio_under_non_inferiority_needs_a_bound_from_enough_runs() -> None:
    """The token form of the rule: the one-sided 95% upper bound of median(config) /
    median(off) must be at most 1 + margin (below 1 on large inputs). Four runs a side
    give no such bound of a median: every token cell fails as not shown, though 900
    against 1,000 passes literally; five runs give one."""
    few = with_token_rule(4)
    records = make_dataset(plain_record, n=4)
    v = evaluate(records, few)
    for ev in token_cells(v).values():
        assert (ev.status, ev.rule, ev.literal_status) == ("fail", "non_inferiority", "pass")
        assert "not shown: fewer than 5 known values on a side" in ev.reason
    assert v.decision == "false" and v.literal_decision == "131072"
    text = render_markdown(v, records, few)
    assert "**the literal rule decides `131072`**: the two readings disagree" in text

    enough = evaluate(make_dataset(plain_record, n=5), with_token_rule(5))
    cells = token_cells(enough)
    assert cells[("code-review", "small")].status == "pass"
    assert "95% upper bound of the median ratio 0.900 <= 1.10" in (
        cells[("code-review", "small")].reason
    )
    assert "95% upper bound of the median ratio 0.900 < 1.00" in (
        cells[("code-review", "large")].reason
    )
    assert enough.decision == "131072" == enough.literal_decision


def test_the_token_rule_fails_what_the_data_do_not_show_and_stability_holds_it() -> None:
    """1,200 against 1,000 on a small input, and as many tokens as off on a large one:
    both fail under either reading; the stability holds token cells judged by this rule
    at their status (their bound is itself a bootstrap) and agrees with the evaluator."""
    matrix = with_token_rule(5)
    cells = {
        ("128KiB", "code-review", "small"): [{"input_tokens": 1200}] * 5,
        ("128KiB", "code-review", "large"): [{"input_tokens": 1000}] * 5,
    }
    records = make_dataset(plain_record, cells, n=5)
    v = evaluate(records, matrix)
    small, large = (
        token_cells(v)[("code-review", "small")],
        token_cells(v)[("code-review", "large")],
    )
    assert (small.status, small.literal_status) == ("fail", "fail")
    assert "95% upper bound of the median ratio 1.200 > 1.10" in small.reason
    assert (large.status, large.literal_status) == ("fail", "fail")
    assert "95% upper bound of the median ratio 1.000 >= 1.00" in large.reason
    assert v.decision == "32768"
    from test_evaluate_stability import context_of

    ours = observed_statuses(context_of(records, matrix), v.configs)
    for name, cv in v.configs.items():
        assert ours[name] == cv.verdict
        for key, result in cv.criteria.items():
            for ev in result.cells:
                assert ours[(name, key, ev.recipe, ev.input)] == ev.status
    assert v.stability is not None and v.stability.distribution == {"32768": 1.0}


def test_wilson_and_newcombe_match_hand_figures() -> None:
    z = 1.6448536269514722  # one-sided 95%
    low, high = wilson(5, 5, z)
    assert float(low) == pytest.approx(5 / (5 + z * z)) and float(high) == pytest.approx(
        1.0
    )  # k = n
    # 5/5 vs 5/5: d = 0, the bound is -(1 - 5 / (5 + z^2)) = -0.3511.
    assert float(difference_lower(5, 5, 5, 5, 0.95)) == pytest.approx(-(1 - 5 / (5 + z * z)))


def test_the_stability_draws_under_the_chosen_rule() -> None:
    """The vectorized reading of the rule agrees with the evaluator under the opt-in rule
    too, and a marginal non-inferiority cell is unstable."""
    matrix = with_rules({**NI, "summary_quality": NI["success_rate"]})
    v = verdict(matrix, 40, [{}] * 37 + [FAILED] * 3, [{}] * 40)
    from test_evaluate_stability import context_of

    records = make_dataset(
        plain_record,
        {(name, *CELL): [{}] * 37 + [FAILED] * 3 for name in ("128KiB", "32KiB")}
        | {("off", *CELL): [{}] * 40},
        n=40,
    )
    ctx = context_of(records, matrix)
    ours = observed_statuses(ctx, v.configs)
    for name, cv in v.configs.items():
        assert ours[name] == cv.verdict
        for key, result in cv.criteria.items():
            for ev in result.cells:
                assert ours[(name, key, ev.recipe, ev.input)] == ev.status
    assert v.stability is not None and v.stability.decision < 1.0


def test_plan_under_non_inferiority_falls_with_repetitions() -> None:
    matrix = with_rules(NI)
    a = Assumptions.uniform(
        matrix, success=0.9, limit=0.0, quality=1.0, token_spread=0.1, large_drop=0.2, source="t"
    )
    small, large = plan(matrix, "dev", 5, 0.1, a), plan(matrix, "dev", 200, 0.1, a)
    first = small.criteria["success_rate"]
    assert first.false_fail == pytest.approx(
        1 - p_non_inferior(5, 0.9, matrix.acceptance.rules["success_rate"]) ** 4
    )
    assert first.false_fail > large.criteria["success_rate"].false_fail
    needed = first.repetitions_for_target
    assert needed is not None
    at = plan(matrix, "dev", needed, 0.1, a).criteria["success_rate"].false_fail
    before = plan(matrix, "dev", needed - 1, 0.1, a).criteria["success_rate"].false_fail
    assert at is not None and at <= 0.1 < (before or 1.0)
    assert "non-inferiority rule" in first.note


def test_plan_does_not_model_the_token_rule() -> None:
    matrix = with_rules({"input_tokens": {"rule": "non_inferiority"}})
    a = Assumptions.uniform(
        matrix, success=1.0, limit=0.0, quality=1.0, token_spread=0.1, large_drop=0.2, source="t"
    )
    result = plan(matrix, "dev", 5, 0.1, a)
    assert result.criteria["input_tokens"].false_fail is None
    assert result.chain_false_fail is None
    assert "not modelled" in result.criteria["input_tokens"].note


@pytest.mark.parametrize(
    ("rules", "needle"),
    [
        ({"no_leak": {"rule": "non_inferiority"}}, "no_leak: no such rule can be chosen"),
        ({"success_rate": {"rule": "lenient"}}, "rule"),
        ({"success_rate": {"rule": "non_inferiority", "margin": 0}}, "margin"),
        ({"success_rate": {"rule": "non_inferiority", "confidence": 1.2}}, "confidence"),
    ],
)
def test_a_bad_rule_is_refused_naming_it(rules: dict[str, Any], needle: str) -> None:
    with pytest.raises(MatrixError, match=needle):
        with_rules(rules)
