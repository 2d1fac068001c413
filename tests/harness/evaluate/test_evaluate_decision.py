"""The decision chain, stages, ignored records, runs needed, to_json's shape, purity."""

from __future__ import annotations

import json
from typing import Any

import pytest
from record_builders import CELLS, MATRIX, CellKey, Spec, make_dataset, make_record
from spillover_harness import stats
from spillover_harness.evaluate import evaluate
from spillover_harness.results.records import RunRecord
from spillover_harness.results.verdict import CRITERIA, Verdict


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


def dataset(
    cells: dict[CellKey, list[Spec]] | None = None, *, n: int = 2, stage: str = "sim"
) -> list[RunRecord]:
    return make_dataset(rec, cells, n=n, stage=stage)


# Ways to make a configuration fail or be inconclusive (in one cell).
FAIL = [{"disk_clean": False}, {}]
INCONCLUSIVE = [{"logs_clean": None}, {}]


def verdict_for(kib128: str, kib32: str, *, stage: str = "sim") -> Verdict:
    cells: dict[CellKey, list[Spec]] = {}
    for cfg, status in (("128KiB", kib128), ("32KiB", kib32)):
        if status == "fail":
            cells[(cfg, "code-review", "small")] = FAIL
        elif status == "inconclusive":
            cells[(cfg, "code-review", "medium")] = INCONCLUSIVE
    v = evaluate(dataset(cells, stage=stage), MATRIX, allow_incomplete=True, resamples=50)
    assert v.configs["128KiB"].verdict == kib128
    assert v.configs["32KiB"].verdict == kib32
    return v


# -- the decision chain ---------------------------------------------------------------


@pytest.mark.parametrize("kib32", ["pass", "fail", "inconclusive"])
def test_128kib_passes_keeps_the_default(kib32: str) -> None:
    v = verdict_for("pass", kib32)
    assert v.decision == "131072"
    assert "128KiB passes" in v.decision_reason
    assert v.runs_needed == ()


def test_128kib_fails_and_32kib_passes_lowers_the_default() -> None:
    v = verdict_for("fail", "pass")
    assert v.decision == "32768"
    assert "128KiB fails" in v.decision_reason and "32KiB passes" in v.decision_reason


def test_both_fail_goes_back_to_false() -> None:
    v = verdict_for("fail", "fail")
    assert v.decision == "false"
    assert "no configuration of the chain passes" in v.decision_reason


@pytest.mark.parametrize("kib32", ["pass", "fail", "inconclusive"])
def test_128kib_inconclusive_stops_the_chain(kib32: str) -> None:
    v = verdict_for("inconclusive", kib32)
    assert v.decision == "inconclusive"
    assert "128KiB is inconclusive" in v.decision_reason
    assert "32KiB" not in v.decision_reason
    (need,) = v.runs_needed
    assert (need.config, need.recipe, need.input) == ("128KiB", "code-review", "medium")
    assert need.criteria == ("no_leak",)


def test_128kib_fails_and_32kib_inconclusive_is_inconclusive() -> None:
    v = verdict_for("fail", "inconclusive")
    assert v.decision == "inconclusive"
    assert "128KiB fails" in v.decision_reason
    assert "32KiB is inconclusive" in v.decision_reason
    assert [n.config for n in v.runs_needed] == ["32KiB"]


def test_no_records_at_all_is_inconclusive_and_asks_for_the_whole_cells() -> None:
    v = evaluate([], MATRIX, allow_incomplete=True, resamples=10)
    assert v.decision == "inconclusive"
    assert v.stage is None
    assert all(cv.verdict == "inconclusive" for cv in v.configs.values())
    needed = {(n.config, n.recipe, n.input) for n in v.runs_needed}
    assert needed == {(c, r, i) for c in ("128KiB", "off") for r, i, _ in CELLS}


def test_runs_needed_counts_the_stage_plan_for_missing_cells() -> None:
    records = [
        r
        for r in dataset(n=2, stage="minikube")
        if not (r.config == "128KiB" and r.input == "large")
    ]
    v = evaluate(records, MATRIX, allow_incomplete=True, resamples=10)
    assert v.decision == "inconclusive"
    (need,) = v.runs_needed
    assert (need.config, need.recipe, need.input) == ("128KiB", "code-review", "large")
    assert need.runs == MATRIX.repetitions.minikube
    assert set(need.criteria) == {"success_rate", "iteration_limit", "input_tokens", "no_leak"}


# -- stages and ignored records ---------------------------------------------------------


def test_mixed_stages_raise_a_clear_error() -> None:
    records = dataset(stage="sim") + dataset(stage="minikube")
    with pytest.raises(ValueError, match="several stages"):
        evaluate(records, MATRIX)


def test_an_explicit_stage_evaluates_it_and_counts_the_others_as_ignored() -> None:
    sim = dataset(stage="sim")
    minikube = dataset({("128KiB", "code-review", "small"): FAIL}, stage="minikube")
    v = evaluate(sim + minikube, MATRIX, stage="minikube", resamples=10)
    assert v.stage == "minikube"
    assert v.decision == "32768"
    assert v.records_evaluated == len(minikube)
    assert v.ignored == {"stage 'sim' (evaluating 'minikube')": len(sim)}


def test_an_unknown_stage_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown stage"):
        evaluate([], MATRIX, stage="prod")


def test_records_outside_the_matrix_are_ignored_and_counted() -> None:
    extra = [
        rec("64KiB", "code-review", "small"),
        rec("64KiB", "code-review", "small"),
        rec("128KiB", "code-review", "huge", size_class="large"),
    ]
    v = evaluate(dataset() + extra, MATRIX, allow_incomplete=True, resamples=10)
    assert v.decision == "131072"
    assert v.ignored == {
        "configuration '64KiB' not in the matrix": 2,
        "cell code-review/huge not in the matrix": 1,
    }
    assert v.ignored_total == 3


def test_an_exact_copy_of_a_record_counts_once_and_is_noted() -> None:
    records = dataset()
    once = evaluate(records, MATRIX, allow_incomplete=True, resamples=10)
    twice = evaluate([*records, records[0]], MATRIX, allow_incomplete=True, resamples=10)
    assert twice.records_evaluated == once.records_evaluated == len(records)
    assert twice.cells == once.cells
    assert any("exact copies of a run already recorded" in w for w in twice.warnings)
    assert not any("repeat a run_id" in w for w in twice.warnings)


def test_records_of_the_same_run_that_differ_are_all_counted_and_warned_about() -> None:
    records = dataset()
    other = records[0].model_copy(update={"outcome": "failed"})
    v = evaluate([*records, other], MATRIX, allow_incomplete=True, resamples=10)
    assert v.records_evaluated == len(records) + 1
    assert any("repeat a (configuration" in w and "different content" in w for w in v.warnings)
    assert any("repeat a run_id" in w for w in v.warnings)


# -- to_json ----------------------------------------------------------------------------


def test_to_json_shape() -> None:
    v = verdict_for("fail", "inconclusive")
    data = json.loads(json.dumps(v.to_json()))
    assert data["decision"] == "inconclusive"
    # verdict.json's keys: those it always had, plus decided, decision_values, incomplete,
    # config_env (appended: each configuration's spillover variables)
    assert list(data) == [
        "decision",
        "decision_reason",
        "decided",
        "decision_values",
        "incomplete",
        "stage",
        "matrix",
        "baseline",
        "configs",
        "runs_needed",
        "records_evaluated",
        "harness_errors",
        "ignored",
        "warnings",
        "cells",
        "advisory",
        "config_env",
        "stability",
        "reproducibility",
        "rules",
        "literal_decision",
        "memory",  # memory as a check (report time, beside the records): null here
        "status_report",  # the status report as a check (report time too): null here
    ]
    assert data["memory"] is None and data["status_report"] is None
    assert data["config_env"] == {
        "off": {"CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED": "false"},
        "128KiB": {},
        "32KiB": {"CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD": "32768"},
    }
    assert set(data["ignored"]) == {"total", "by_reason"}
    assert list(data["configs"]["128KiB"]["criteria"]["input_tokens"]) == [
        "status",
        "rule",
        "reason",
        "tolerance",
        "cells",
    ]
    assert "tolerance" not in data["configs"]["128KiB"]["criteria"]["success_rate"]
    assert data["configs"]["128KiB"]["criteria"]["input_tokens"]["tolerance"] == 0.1
    assert list(data["configs"]["128KiB"]["criteria"]["no_leak"]["cells"][0]) == [
        "recipe",
        "input",
        "size_class",
        "status",
        "value",
        "baseline_value",
        "limit",
        "comparison",
        "n",
        "n_baseline",
        "harness_errors",
        "harness_errors_baseline",
        "counts",
        "baseline_counts",
        "reason",
        "p_value",
        "interval",
        "rule",
        "literal_status",
        "exercised",  # whether the configuration stored a result in the cell's runs
    ]
    for key in ("decision_reason", "runs_needed", "harness_errors", "stage", "advisory"):
        assert key in data
    assert set(data["configs"]) == {"128KiB", "32KiB"}
    for cfg in data["configs"].values():
        assert set(cfg) == {"verdict", "criteria"}
        assert cfg["verdict"] in {"pass", "fail", "inconclusive"}
        assert list(cfg["criteria"]) == list(CRITERIA)
        assert list(cfg["criteria"]) == [
            "success_rate",
            "iteration_limit",
            "input_tokens",
            "summary_quality",
            "no_leak",
        ]
        for criterion in cfg["criteria"].values():
            assert criterion["status"] in {"pass", "fail", "inconclusive"}
            assert criterion["cells"]
            for c in criterion["cells"]:
                assert {"status", "value", "baseline_value", "limit", "n", "reason"} <= set(c)
    assert data["configs"]["128KiB"]["verdict"] == "fail"
    assert data["configs"]["32KiB"]["criteria"]["no_leak"]["status"] == "inconclusive"
    assert data["stage"] == "sim"
    assert data["runs_needed"][0]["config"] == "32KiB"


def test_to_json_numbers_are_plain_json_numbers() -> None:
    v = evaluate(
        dataset(
            {
                ("128KiB", "code-review", "small"): [{"input_tokens": t} for t in (100, 121)],
                ("off", "code-review", "small"): [{"input_tokens": 100}] * 2,
            }
        ),
        MATRIX,
        allow_incomplete=True,
        resamples=10,
    )
    cells = v.to_json()["configs"]["128KiB"]["criteria"]["input_tokens"]["cells"]
    small = next(c for c in cells if c["input"] == "small")
    assert small["value"] == 110.5 and small["baseline_value"] == 100 and small["limit"] == 110
    assert isinstance(small["baseline_value"], int)


# -- purity and the advisory statistics ------------------------------------------------


def test_evaluate_is_pure() -> None:
    records = dataset({("128KiB", "code-review", "small"): FAIL})
    before = list(records)
    first = evaluate(records, MATRIX, allow_incomplete=True, resamples=100)
    second = evaluate(records, MATRIX, allow_incomplete=True, resamples=100)
    assert records == before
    assert first.to_json() == second.to_json()


def _without_advisory(v: Verdict) -> dict[str, Any]:
    """The verdict less what the seed and resample counts drive (the advisory figures
    and the stability and reproducibility of the decision, which report on it and never
    change it)."""
    data = v.to_json()
    data.pop("advisory")
    data.pop("stability")
    data.pop("reproducibility")
    return data


@pytest.mark.parametrize(
    "fake",
    [None, (0.0, 0.0001), (100.0, 200.0), (0.0, 1e9)],
)
def test_the_bootstrap_never_changes_a_status_or_the_decision(
    monkeypatch: pytest.MonkeyPatch, fake: tuple[float, float] | None
) -> None:
    records = dataset(
        {
            ("128KiB", "code-review", "large"): [{"input_tokens": 1000}] * 2,  # equal: fails
            ("32KiB", "code-review", "small"): [{"input_tokens": t} for t in (1050, 1150)],
        }
    )
    real = evaluate(records, MATRIX, allow_incomplete=True, resamples=200)
    assert real.decision == "32768"
    for name in ("bootstrap_median_ratio_ci", "bootstrap_paired_median_ratio_ci"):
        monkeypatch.setattr(stats, name, lambda *a, **k: fake)
    faked = evaluate(records, MATRIX, allow_incomplete=True, resamples=200)
    assert _without_advisory(faked) == _without_advisory(real)


def test_the_advisory_settings_never_change_the_verdict() -> None:
    records = dataset({("32KiB", "code-review", "small"): [{"input_tokens": 1100}] * 2})
    a = evaluate(records, MATRIX, allow_incomplete=True, resamples=10, seed=1, confidence=0.5)
    b = evaluate(records, MATRIX, allow_incomplete=True, resamples=3000, seed=99, confidence=0.99)
    assert _without_advisory(a) == _without_advisory(b)


def test_a_close_call_gets_a_hint() -> None:
    records = dataset(
        {
            ("128KiB", "code-review", "small"): [{"input_tokens": t} for t in (900, 1200) * 3],
            ("off", "code-review", "small"): [{"input_tokens": t} for t in (950, 1050) * 3],
        }
    )
    v = evaluate(records, MATRIX, allow_incomplete=True, resamples=500)
    ratio = next(t for t in v.advisory.token_ratios if t.config == "128KiB" and t.input == "small")
    assert ratio.reading == "close call"
    assert any("128KiB code-review/small" in h for h in v.advisory.hints)


def test_fewer_valid_runs_than_planned_gets_a_hint() -> None:
    records = dataset(
        {("128KiB", "code-review", "small"): [{}, {"outcome": "harness_error"}]},
        stage="minikube",
    )
    v = evaluate(records, MATRIX, allow_incomplete=True, resamples=10)
    assert v.decision == "131072"
    assert any("1 valid run(s) of the 2 planned" in h for h in v.advisory.hints)
