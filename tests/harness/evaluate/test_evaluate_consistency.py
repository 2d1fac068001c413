"""A broken consistency check (a record's `consistency_ok: false`) makes the
configuration unable to pass, and the report says which runs and why."""

from __future__ import annotations

from typing import Any

from record_builders import MATRIX, make_dataset, make_record
from spillover_harness.evaluate import evaluate
from spillover_harness.report.report import render_markdown
from spillover_harness.results.records import RunRecord


def _good(config: str) -> dict[str, Any]:
    return {
        "hit_iteration_limit": False,
        "iterations": 5,
        "input_tokens": 1000 if config == "off" else 900,
        "output_tokens": 100,
        "duration_s": 10.0,
        "quality_ok": True,
        "disk_clean": True,
        "logs_clean": True,
        "consistency_ok": True,
    }


def rec(config: str, recipe: str, inp: str, *, stage: str = "minikube", **f: Any) -> RunRecord:
    return make_record(_good, config, recipe, inp, stage=stage, **f)


BROKEN = {
    "consistency_ok": False,
    "notes": ["consistency: every tool result stays below the threshold 131072, yet the run "
              "persisted 2"],
}  # fmt: skip


def test_consistent_records_decide_as_before() -> None:
    v = evaluate(make_dataset(rec, None, n=2, stage="minikube"), MATRIX, resamples=50)
    assert v.decision == "131072"
    assert v.configs["128KiB"].consistency == ()


def test_a_broken_check_keeps_the_configuration_from_passing() -> None:
    cells = {("128KiB", "summarize", "document"): [BROKEN, {}]}
    records = make_dataset(rec, cells, n=2, stage="minikube")
    v = evaluate(records, MATRIX, resamples=50)
    cv = v.configs["128KiB"]
    assert cv.verdict == "inconclusive"
    assert "consistency: 1 run(s)" in cv.reason and "persisted 2" in cv.reason
    assert v.decision == "inconclusive"
    report = render_markdown(v, records, MATRIX)
    assert "## Consistency checks that broke" in report
    broken = next(r for r in records if r.consistency_ok is False)
    assert f"- `128KiB`: {broken.run_id}: every tool result" in report


def test_a_broken_baseline_run_stops_every_configuration() -> None:
    cells = {("off", "code-review", "large"): [BROKEN, {}]}
    v = evaluate(make_dataset(rec, cells, n=2, stage="minikube"), MATRIX, resamples=50)
    assert all(cv.verdict != "pass" for cv in v.configs.values())
    assert all(cv.consistency for cv in v.configs.values())


def test_a_failing_configuration_stays_failed() -> None:
    cells = {("128KiB", "summarize", "document"): [{**BROKEN, "disk_clean": False}, {}]}
    v = evaluate(make_dataset(rec, cells, n=2, stage="minikube"), MATRIX, resamples=50)
    assert v.configs["128KiB"].verdict == "fail"
    assert "consistency" in v.configs["128KiB"].reason
