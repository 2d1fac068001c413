"""A stage with runs of its matrix missing is not decided (exit 9, INCOMPLETE) unless
the user asks to judge what is there (`--allow-incomplete`): records made by the real
simulator, then a line removed as an interrupted stage would leave them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spillover_harness.cli import main
from spillover_operator.exit_codes import INCOMPLETE, OK

MATRIX = """\
name: two-configs
seed: 20261201
configurations:
  - name: "off"
    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED: "false"}
  - name: 64KiB
    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD: "65536"}
recipes:
  - name: code-review
    inputs: [{name: small, size_class: small}]
repetitions: {sim: 2, minikube: 1, dev: 1}
run_timeout_s: 60
concurrency: 2
acceptance: {baseline: "off", token_tolerance: 0.1, quality_recipes: []}
decision:
  chain:
    - {config: 64KiB, default: "65536"}
  fallback: "false"
"""


@pytest.fixture
def partial_records(tmp_path: Path) -> tuple[Path, Path]:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(MATRIX, encoding="utf-8")
    out = tmp_path / "out"
    code = main(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out),
                 "--no-progress"])  # fmt: skip
    assert code == OK, "the full stage must decide before a run is taken away"
    lines = (out / "runs.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(lines) == 4
    dropped = [ln for ln in lines if json.loads(ln)["config"] != "64KiB" or
               json.loads(ln)["repetition"] != 2]  # fmt: skip
    partial = tmp_path / "partial.jsonl"
    partial.write_text("".join(dropped), encoding="utf-8")
    return partial, matrix


def test_evaluate_refuses_to_decide_with_a_run_missing(
    partial_records: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    records, matrix = partial_records
    capsys.readouterr()
    code = main(["evaluate", "--records", str(records), "--matrix", str(matrix),
                 "--format", "json"])  # fmt: skip
    verdict = json.loads(capsys.readouterr().out)
    assert code == INCOMPLETE
    assert verdict["decision"] == "inconclusive"
    assert verdict["decided"] is False
    assert verdict["incomplete"]["missing"] == 1
    assert verdict["incomplete"]["judged"] is False


def test_allow_incomplete_judges_what_is_there_and_says_so(
    partial_records: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records, matrix = partial_records
    capsys.readouterr()
    report_dir = tmp_path / "r"
    code = main(["report", "--records", str(records), "--matrix", str(matrix),
                 "--out", str(report_dir), "--allow-incomplete"])  # fmt: skip
    verdict = json.loads((report_dir / "verdict.json").read_text(encoding="utf-8"))
    assert verdict["incomplete"]["judged"] is True
    assert verdict["decided"] is True and verdict["decision"] == "65536"
    assert code == OK
    first = (report_dir / "report.md").read_text(encoding="utf-8").splitlines()[0]
    assert "judged on incomplete data" in first
