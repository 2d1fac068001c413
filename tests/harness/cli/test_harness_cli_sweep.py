"""`spillover-harness sweep` end to end on the simulator: a small matrix at three
thresholds (and two budgets), the report, the plot, the passing range and the
lowest-token passing point, resume, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spillover_harness.cli import main
from spillover_harness.results.records import read_records
from spillover_operator.exit_codes import BAD_INPUT, OK

MATRIX = """\
name: sweep-small
seed: 20261130
configurations:
  - name: "off"
    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED: "false"}
  - name: 128KiB
recipes:
  - name: code-review
    inputs: [{name: large, size_class: large}]
  - name: summarize
    inputs: [{name: document, size_class: medium}]
repetitions: {sim: 2, minikube: 1, dev: 1}
run_timeout_s: 900
concurrency: 2
acceptance: {baseline: "off", token_tolerance: 0.1, quality_recipes: [summarize]}
decision:
  chain:
    - {config: 128KiB, default: "131072"}
  fallback: "false"
"""


def matrix_file(tmp_path: Path) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX, encoding="utf-8")
    return path


def test_sweep_reports_points_range_and_best(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    argv = [
        "sweep",
        "--thresholds",
        "32768,131072,262144",
        "--matrix",
        str(matrix_file(tmp_path)),
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == OK
    data = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    names = [p["name"] for p in data["points"]]
    assert names == ["t32768", "t131072", "t262144"]
    by_name = {p["name"]: p for p in data["points"]}
    # 32 KiB spills the ~100 KiB document, which a lazy reader does not read to its end
    # (criterion 4); 256 KiB spills nothing, so the large review is no cheaper than off
    # (criterion 3).
    assert by_name["t32768"]["criteria"]["summary_quality"] == "fail"
    assert by_name["t262144"]["criteria"]["input_tokens"] == "fail"
    assert by_name["t131072"]["verdict"] == "pass"
    assert data["passing"] == ["t131072"]
    assert data["passing_range"] == "131072"
    assert data["lowest_token_passing"] == "t131072"
    ratio = by_name["t131072"]["token_ratios"]["code-review/large"]
    assert 0 < ratio < 1
    assert by_name["t262144"]["token_ratios"]["code-review/large"] == 1.0
    report = (out / "sweep.md").read_text(encoding="utf-8")
    assert "**Passing range:** 131072" in report
    # the edges explained by the inputs' sizes: the ~103 KB document below, the
    # 155-228 KB files of the large review above
    assert "**What sets the edges:** the inputs' sizes" in report
    assert (
        "- 131072 passes, 32768 below it does not: between 32768 and 131072 bytes lie "
        "code-review/large (2 result(s) of ~34 KB-46 KB); summarize/document (1 result(s) "
        "of ~103 KB)"
    ) in report
    assert (
        "- 131072 passes, 262144 above it does not: between 131072 and 262144 bytes lie "
        "code-review/large (3 result(s) of ~155 KB-228 KB)"
    ) in report
    assert data["passing_range_edges"][1].startswith("131072 passes, 262144 above")
    assert report.index("embedded simulator") < report.index("**Passing range:**")
    assert "**Lowest-token passing point:** `t131072`" in report
    assert "plots/sweep.png" in report
    assert (out / "plots" / "sweep.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "evidence" / "report.md").exists()
    assert len(read_records(out / "runs.jsonl")) == 4 * 2 * 2  # (off + 3 points) x cells x reps
    stages = [json.loads(p.read_text(encoding="utf-8")) for p in out.rglob("stage.json")]
    assert stages and all(s["provenance"]["simulator_parameters"]["model"] for s in stages)

    # Done already: --resume runs nothing again and writes the same answer.
    assert main([*argv, "--resume"]) == OK
    assert len(read_records(out / "runs.jsonl")) == 16
    # Without --resume, a directory with records is refused (records never overwritten).
    assert main(argv) == BAD_INPUT


def test_sweep_resumes_a_cut_short_stage(tmp_path: Path) -> None:
    """A sweep whose records file lost its last runs (as after Ctrl-C) is finished by
    --resume: only the missing runs run, and the answer is the same."""
    out = tmp_path / "sweep"
    argv = [
        "sweep",
        "--thresholds",
        "131072",
        "--matrix",
        str(matrix_file(tmp_path)),
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == OK
    first = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    lines = (out / "runs.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (out / "runs.jsonl").write_text("".join(lines[:3]), encoding="utf-8")
    assert main([*argv, "--resume"]) == OK
    assert len(read_records(out / "runs.jsonl")) == len(lines)
    again = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    assert again["passing"] == first["passing"] == ["t131072"]


def test_sweep_with_budgets_has_a_point_per_pair(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    argv = [
        "sweep",
        "--thresholds",
        "131072",
        "--budgets",
        "1048576,16777216",
        "--matrix",
        str(matrix_file(tmp_path)),
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == OK
    data = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    points = {p["name"]: p for p in data["points"]}
    assert set(points) == {"t131072-b1048576", "t131072-b16777216"}
    assert points["t131072-b1048576"]["budget"] == 1048576


def test_sweep_refuses_values_the_platform_would_not_take(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--thresholds", "1024,32768,32768", "--out", str(out)]) == BAD_INPUT
    message = capsys.readouterr().err
    assert "--thresholds: '1024' is out of range" in message
    assert "given twice: 32768" in message
    with pytest.raises(SystemExit) as usage:
        main(["sweep", "--thresholds", "32k", "--out", str(out)])
    assert usage.value.code == BAD_INPUT
    assert "not a comma-separated list of byte counts: '32k'" in capsys.readouterr().err
    assert main(["sweep", "--budgets", "5", "--out", str(out)]) == BAD_INPUT
    assert not (out / "runs.jsonl").exists()
