"""Partial data never gives a decisive verdict (issue 12 item 2), and the decision
values come from the matrix (issue 8): `Verdict.incomplete`, `allow_incomplete`,
`Verdict.decided` and `Verdict.decision_values`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from record_builders import MATRIX, Spec, make_dataset, make_record
from spillover_harness.drivers.sim import SimDriver
from spillover_harness.evaluate import evaluate
from spillover_harness.fixtures import build_fixtures
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.records import RunRecord
from spillover_harness.results.verdict import CRITERIA
from spillover_harness.run.runner import plan_jobs, run_stage


def _good_run(config: str) -> Spec:
    return {
        "hit_iteration_limit": False,
        "iterations": 5,
        "input_tokens": 1000 if config == "off" else 900,
        "output_tokens": 100,
        "duration_s": 10.0,
        "quality_ok": True,
        "disk_clean": True,
        "logs_clean": True,
    }


def rec(config: str, recipe: str, inp: str, *, stage: str = "sim", **fields: Any) -> RunRecord:
    return make_record(_good_run, config, recipe, inp, stage=stage, **fields)


def full(stage: str = "sim") -> list[RunRecord]:
    """Every run the stage plans, all good: 128KiB passes."""
    return make_dataset(rec, n=MATRIX.repetitions.for_stage(stage), stage=stage)


@pytest.fixture(scope="module")
def sim_stage(tmp_path_factory: pytest.TempPathFactory) -> list[RunRecord]:
    """A real sim stage of the default matrix (60 runs), in the order it recorded them."""
    out = tmp_path_factory.mktemp("sim") / "out"
    result = run_stage(
        MATRIX,
        "sim",
        SimDriver(fixtures=build_fixtures(MATRIX.seed)),
        out,
        resume=False,
        concurrency=2,
        progress=False,
        quiet=True,
    )
    assert len(result.records) == 60
    return list(result.records)


# -- a stage killed at 13 of 60 records -------------------------------------------------


def test_a_stage_cut_at_13_of_60_records_is_inconclusive_and_says_what_is_missing(
    sim_stage: list[RunRecord],
) -> None:
    v = evaluate(sim_stage[:13], MATRIX, resamples=20)
    assert v.decision == "inconclusive" and not v.decided
    assert v.decision_reason.startswith("incomplete: 47 of 60 runs missing")
    inc = v.incomplete
    assert inc is not None and not inc.judged
    assert (inc.expected, inc.recorded, inc.missing) == (60, 13, 47)
    assert inc.reason == "incomplete: 47 of 60 runs missing"
    assert sum(c.missing for c in inc.cells) == 47
    recorded = {(r.config, r.recipe, r.input, r.repetition) for r in sim_stage[:13]}
    for c in inc.cells:
        assert c.expected == 5 and c.recorded + c.missing == 5
        for rep in c.missing_repetitions:
            assert (c.config, c.recipe, c.input, rep) not in recorded
    # computed before the criteria: nothing is judged, the missing runs are what is needed
    assert v.configs == {} and v.advisory.token_ratios == ()
    assert sum(n.runs for n in v.runs_needed) == 47
    assert all(n.criteria == CRITERIA for n in v.runs_needed)
    data = v.to_json()
    assert data["incomplete"]["missing"] == 47 and data["decided"] is False


def test_allow_incomplete_judges_what_is_there_and_records_it(
    sim_stage: list[RunRecord],
) -> None:
    v = evaluate(sim_stage[:13], MATRIX, allow_incomplete=True, resamples=20)
    inc = v.incomplete
    assert inc is not None and inc.judged and inc.missing == 47
    assert set(v.configs) == {"128KiB", "32KiB"}
    assert v.decision_reason.startswith("judged on incomplete data (47 of 60 runs missing)")
    assert v.records_evaluated == 13


def test_the_full_stage_is_decided(sim_stage: list[RunRecord]) -> None:
    v = evaluate(sim_stage, MATRIX, resamples=20)
    assert v.incomplete is None and v.to_json()["incomplete"] is None
    assert v.decided and v.decision in v.decision_values
    assert v.decision == "131072"  # what the simulator gives on the default matrix


# -- what counts as recorded ------------------------------------------------------------


def test_a_harness_error_is_a_run_that_exists() -> None:
    records = [
        rec(r.config, r.recipe, r.input, repetition=r.repetition, outcome="harness_error")
        if (r.config, r.input, r.repetition) == ("32KiB", "small", 1)
        else r
        for r in full()
    ]
    v = evaluate(records, MATRIX, resamples=20)
    assert v.incomplete is None
    assert v.harness_errors["32KiB"] == 1
    assert v.decided


def test_records_beyond_the_plan_do_not_fill_a_gap() -> None:
    records = [r for r in full() if not (r.config == "off" and r.repetition == 5)]
    extra = rec("off", "code-review", "small", repetition=6)
    v = evaluate([*records, extra], MATRIX, resamples=20)
    inc = v.incomplete
    assert inc is not None and inc.missing == 4
    assert {(c.config, c.missing_repetitions) for c in inc.cells} == {("off", (5,))}


def test_one_missing_run_is_enough_to_withhold_the_decision() -> None:
    records = full()[1:]
    v = evaluate(records, MATRIX, resamples=20)
    assert v.decision == "inconclusive"
    assert v.decision_reason.startswith("incomplete: 1 of 60 runs missing")
    (need,) = v.runs_needed
    assert need.runs == 1 and "repetition(s) 1 of 5" in need.reason


def test_the_plan_follows_the_stage_repetitions() -> None:
    assert evaluate(full("minikube"), MATRIX, resamples=20).incomplete is None  # 2 per cell
    v = evaluate(full("minikube")[2:], MATRIX, resamples=20)
    assert v.incomplete is not None and v.incomplete.expected == 3 * 4 * 2


def test_an_explicit_stage_without_records_misses_every_run() -> None:
    v = evaluate([], MATRIX, stage="dev", resamples=20)
    assert v.incomplete is not None
    assert v.incomplete.missing == v.incomplete.expected == 3 * 4 * MATRIX.repetitions.dev


def test_the_killed_stage_in_plan_order_matches_the_plan(tmp_path: Path) -> None:
    """The first 13 runs of the runner's plan leave exactly the other 47 missing."""
    plan = plan_jobs(MATRIX, "sim", tmp_path)
    records = [
        rec(j.config.name, j.recipe, j.input.name, repetition=j.repetition) for j in plan[:13]
    ]
    inc = evaluate(records, MATRIX, resamples=20).incomplete
    assert inc is not None
    missing = {(c.config, c.recipe, c.input, r) for c in inc.cells for r in c.missing_repetitions}
    assert missing == {(j.config.name, j.recipe, j.input.name, j.repetition) for j in plan[13:]}


# -- decision values from the matrix ----------------------------------------------------


def _chain(matrix: Matrix, first: str, second: str, fallback: str) -> Matrix:
    chain = [
        matrix.decision.chain[0].model_copy(update={"default": first}),
        matrix.decision.chain[1].model_copy(update={"default": second}),
    ]
    decision = matrix.decision.model_copy(update={"chain": chain, "fallback": fallback})
    return matrix.model_copy(update={"decision": decision})


def test_a_chain_ending_in_65536_is_decided_as_65536() -> None:
    matrix = _chain(MATRIX, "131072", "65536", "false")
    records = make_dataset(
        rec,
        {("128KiB", "code-review", "small"): [{"disk_clean": False}] + [{}] * 4},
        n=5,
    )
    v = evaluate(records, matrix, resamples=20)
    assert v.decision == "65536"
    assert v.decided is True
    assert v.decision_values == ("131072", "65536", "false")
    data = v.to_json()
    assert data["decided"] is True and data["decision_values"] == ["131072", "65536", "false"]


@pytest.mark.parametrize(
    ("values", "broken", "expected"),
    [
        (("262144", "65536", "off"), [], "262144"),
        (("262144", "65536", "off"), ["128KiB"], "65536"),
        (("262144", "65536", "off"), ["128KiB", "32KiB"], "off"),
    ],
)
def test_any_chain_values_are_decisions(
    values: tuple[str, str, str], broken: list[str], expected: str
) -> None:
    matrix = _chain(MATRIX, *values)
    cells = {(cfg, "code-review", "large"): [{"logs_clean": False}] * 5 for cfg in broken}
    v = evaluate(make_dataset(rec, cells, n=5), matrix, resamples=20)
    assert (v.decision, v.decided, v.decision_values) == (expected, True, values)


def test_inconclusive_is_not_decided() -> None:
    records = make_dataset(
        rec, {("128KiB", "code-review", "small"): [{"logs_clean": None}] + [{}] * 4}, n=5
    )
    v = evaluate(records, MATRIX, resamples=20)
    assert v.incomplete is None
    assert v.decision == "inconclusive" and v.decided is False
    assert v.decision_values == ("131072", "32768", "false")
