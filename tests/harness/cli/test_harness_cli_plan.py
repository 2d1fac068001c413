"""`spillover-harness plan`, through the console script: the exact binomial figures of
issue 26 for the default matrix, the repetitions search, rates measured in an earlier
stage, and every bad input refused with exit 2 and a message naming it."""

from __future__ import annotations

import json
from math import comb
from pathlib import Path

import pytest
from harness_cli import Run
from spillover_harness.plan.false_fail import p_not_lower
from spillover_operator import exit_codes


def plan_json(cli: Run, *argv: str) -> dict:
    code, out, err = cli(["plan", "--format", "json", *argv])
    assert code == exit_codes.OK, err
    return json.loads(out)


def by_hand(n: int, p: float, cells: int = 4) -> float:
    """1 - P(X >= Y)^cells, X, Y ~ Binomial(n, p): a reviewer's few lines."""

    def pmf(k: int) -> float:
        return comb(n, k) * p**k * (1 - p) ** (n - k)

    tie_or_better = sum(pmf(a) * pmf(b) for a in range(n + 1) for b in range(n + 1) if a >= b)
    return 1 - tie_or_better**cells


@pytest.mark.parametrize(("repetitions", "expected"), [(5, 0.715), (2, 0.492), (20, 0.864)])
def test_the_literal_success_rule_fails_an_identical_configuration_this_often(
    cli: Run, repetitions: int, expected: float
) -> None:
    data = plan_json(cli, "--success-rate", "0.9", "--repetitions", str(repetitions))
    figure = data["criteria"]["success_rate"]["false_fail"]
    assert round(figure, 3) == expected
    assert figure == pytest.approx(by_hand(repetitions, 0.9))
    assert data["criteria"]["success_rate"]["repetitions_for_target"] is None
    assert data["chain"]["false_fail"] >= figure


def test_the_stage_gives_the_repetitions_and_the_text_says_no_number_helps(cli: Run) -> None:
    assert plan_json(cli, "--stage", "minikube")["repetitions"] == 2
    assert plan_json(cli, "--stage", "dev")["repetitions"] == 5
    code, out, _ = cli(["plan", "--stage", "dev"])
    assert code == exit_codes.OK
    line = next(x for x in out.splitlines() if x.startswith("success_rate"))
    assert "0.715" in line and "none up to 1000" in line
    assert "no number of repetitions keeps it under the target" in out


def test_a_criterion_that_more_runs_settle_gets_its_repetitions(cli: Run) -> None:
    """Criterion 3 on small and medium inputs fails an identical configuration less often
    as runs are added; at the repetitions named it is under the target."""
    data = plan_json(cli, "--success-rate", "1", "--quality-rate", "1")
    tokens = data["criteria"]["input_tokens"]
    needed = tokens["repetitions_for_target"]
    assert needed is not None and needed > 5
    at = plan_json(cli, "--success-rate", "1", "--quality-rate", "1", "--repetitions", str(needed))
    assert at["criteria"]["input_tokens"]["false_fail"] <= 0.1
    assert data["criteria"]["success_rate"]["false_fail"] == 0.0
    assert data["chain"]["repetitions_for_target"] is not None


def test_exact_helpers() -> None:
    assert p_not_lower(1, 0.9) == pytest.approx(1 - 0.1 * 0.9)
    assert p_not_lower(3, 1.0) == 1.0
    assert p_not_lower(3, 0.0) == 1.0


def test_rates_measured_in_an_earlier_stage(cli: Run, tmp_path: Path) -> None:
    out = tmp_path / "sim"
    code, _, err = cli(["run", "--stage", "sim", "--out", str(out)])
    assert code == exit_codes.OK, err
    data = plan_json(cli, "--from", str(out), "--stage", "dev")
    assert data["assumptions"]["source"].startswith(f"measured in {out}")
    rates = {(c["recipe"], c["input"]): c["success_rate"] for c in data["assumptions"]["cells"]}
    records = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    large = [r for r in records if (r["config"], r["input"]) == ("off", "large")]
    # the posterior mean of k of n, (k + 1/2) / (n + 1): a measured 5/5 is not a rate of 1
    assert rates[("code-review", "large")] == pytest.approx(
        (sum(r["outcome"] == "succeeded" for r in large) + 0.5) / (len(large) + 1)
    )
    small = [r for r in records if (r["config"], r["input"]) == ("off", "small")]
    assert all(r["outcome"] == "succeeded" for r in small)
    assert rates[("code-review", "small")] == pytest.approx(5.5 / 6)
    assert "5/5 is not a rate of 1" in data["assumptions"]["source"]
    # the uncertainty is carried: the same stage's rates read as certain (1 where 5/5)
    # would give a lower false fail than the plan from the measured stage does
    point = {c: (1.0 if r > 0.9 else r) for c, r in rates.items()}
    assert all(v == 1.0 for c, v in point.items() if c != ("code-review", "large"))
    certain = plan_json(cli, "--stage", "dev", "--success-rate", "1", "--quality-rate", "1")
    assert data["criteria"]["success_rate"]["false_fail"] > 0.3
    assert certain["criteria"]["success_rate"]["false_fail"] == 0.0


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--target", "0"], "--target takes a number in (0, 0.99]"),
        (["--target", "1"], "--target takes a number in (0, 0.99]"),
        (["--success-rate", "1.2"], "--success-rate takes a number in [0, 1]"),
        (["--success-rate", "nan"], "--success-rate takes a number in [0, 1]"),
        (["--token-spread", "0"], "--token-spread takes a number in (0, 5]"),
        (["--repetitions", "0"], "--repetitions takes a whole number from 1 to 1000"),
        (["--repetitions", "1000000000"], "--repetitions takes a whole number from 1 to 1000"),
    ],
)
def test_bad_values_exit_2_naming_the_flag(cli: Run, argv: list[str], needle: str) -> None:
    code, out, err = cli(["plan", *argv])
    assert code == exit_codes.BAD_INPUT
    assert needle in err
    assert out == ""


def test_from_another_matrix_or_a_non_stage_is_refused(cli: Run, tmp_path: Path) -> None:
    code, _, err = cli(["plan", "--from", str(tmp_path / "nothing")])
    assert code == exit_codes.BAD_INPUT and "not a results directory" in err
    code, _, err = cli(["plan", "--from", str(tmp_path)])
    assert code == exit_codes.BAD_INPUT and "no stage.json" in err
    out = tmp_path / "memory"
    matrix = "harness/spillover_harness/plan/matrices/memory-budget.yaml"
    code, _, err = cli(["run", "--stage", "sim", "--matrix", matrix, "--out", str(out)])
    assert code == exit_codes.OK, err
    code, stdout, err = cli(["plan", "--from", str(out)])
    assert code == exit_codes.BAD_INPUT
    assert "another matrix than the one planned" in err
    assert stdout == ""
    code, _, err = cli(["plan", "--from", str(out), "--matrix", matrix, "--success-rate", "0.5"])
    assert code == exit_codes.BAD_INPUT and "both give the rates" in err


@pytest.mark.parametrize(("spread", "target"), [("0.1", "0.2"), ("0.1", "0.05")])
def test_the_repetitions_said_to_reach_a_target_reach_it(
    cli: Run, spread: str, target: str
) -> None:
    """`plan` agrees with itself: the repetitions it names for a target give, when asked
    for at those repetitions, a false fail under that target (the Monte Carlo figure
    printed, not the search's cheaper one). Both cases named one repetition too few."""
    base = ["plan", "--stage", "dev", "--success-rate", "0.99", "--token-spread", spread,
            "--target", target, "--format", "json"]  # fmt: skip
    code, stdout, stderr = cli(base)
    assert code == exit_codes.OK, stderr
    plan = json.loads(stdout)
    needed = plan["criteria"]["input_tokens"]["repetitions_for_target"]
    assert needed is not None
    code, stdout, stderr = cli([*base, "--repetitions", str(needed)])
    assert code == exit_codes.OK, stderr
    assert json.loads(stdout)["criteria"]["input_tokens"]["false_fail"] <= float(target)
    code, stdout, _ = cli([*base, "--repetitions", str(needed - 1)])
    assert json.loads(stdout)["criteria"]["input_tokens"]["false_fail"] > float(target)
