"""`spillover-harness apply-decision` applies a verdict only beside the records it was
judged from: a directory with verdict.json and no runs.jsonl (a report written
elsewhere, a copied verdict) is refused with exit 2 and one line naming the missing
file and the fix, and nothing is applied. Through the CLI, with --gitops on a
manifest (no cluster), on a real small simulated stage run once per module.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from harness_cli import run_sim_stage
from matrix_builders import small_matrix
from repo_paths import REPO_ROOT
from spillover_harness.cli import main
from spillover_operator.exit_codes import BAD_INPUT, OK

MANIFEST = (REPO_ROOT / "manifests" / "samples" / "threshold-32kib.yaml").read_text("utf-8")


@pytest.fixture(scope="module")
def stage_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    matrix = small_matrix("apply-records", input_name="small")
    return run_sim_stage(tmp_path_factory.mktemp("stage"), matrix)


@pytest.fixture
def stage(stage_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "sim"
    shutil.copytree(stage_dir, copy)
    return copy


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(MANIFEST, encoding="utf-8")
    return path


def apply(results: Path, manifest: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    argv = ["apply-decision", "--results", str(results), "--gitops", str(manifest),
            "--allow-simulated"]  # fmt: skip
    code = main(argv)
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_the_stage_directory_is_applied(
    stage: Path, manifest: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = apply(stage, manifest, capsys)
    assert code == OK, err
    assert manifest.read_text(encoding="utf-8") != MANIFEST


def test_a_verdict_without_its_records_is_refused(
    stage: Path, manifest: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (stage / "runs.jsonl").unlink()
    code, err = apply(stage, manifest, capsys)
    assert code == BAD_INPUT, err
    line = one_line(err)
    assert f"{stage / 'runs.jsonl'}: no such file" in line
    assert "nothing is applied" in line and "Pass the results directory the stage wrote" in line
    assert manifest.read_text(encoding="utf-8") == MANIFEST


def test_a_report_written_elsewhere_is_not_applied(
    stage: Path, manifest: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`report --out` into a new directory writes verdict.json there without records:
    that copy is for reading; the stage's own directory is the one to apply."""
    copy = tmp_path / "for-the-pr"
    assert main(["report", "--records", str(stage / "runs.jsonl"), "--out", str(copy)]) == OK
    # the stage.json beside the records names the matrix, so the copy's chain can be checked
    shutil.copy2(stage / "stage.json", copy / "stage.json")
    code, err = apply(copy, manifest, capsys)
    assert code == BAD_INPUT, err
    assert f"{copy / 'runs.jsonl'}: no such file" in one_line(err)
    assert manifest.read_text(encoding="utf-8") == MANIFEST


def test_a_dangling_records_link_is_refused_as_missing(
    stage: Path, manifest: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (stage / "runs.jsonl").unlink()
    (stage / "runs.jsonl").symlink_to(stage / "gone.jsonl")
    code, err = apply(stage, manifest, capsys)
    assert code == BAD_INPUT, err
    assert f"{stage / 'runs.jsonl'}: no such file" in one_line(err)
    assert manifest.read_text(encoding="utf-8") == MANIFEST


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("ratio_to_baseline", "abc", "memory.configs.128KiB.ratio_to_baseline"),
        ("peak_bytes", -1, "memory.configs.128KiB.peak_bytes = -1"),
    ],
)
def test_a_verdict_with_an_impossible_memory_figure_is_not_applied(
    stage: Path, manifest: Path, capsys: pytest.CaptureFixture[str],
    field: str, value: object, needle: str,
) -> None:  # fmt: skip
    """The verdict's memory section is read with the rest: a wrong type or a figure below
    0 is refused, naming the field, and nothing is applied."""
    import json

    verdict = json.loads((stage / "verdict.json").read_text())
    assert verdict["memory"] is not None, "the simulated stage carries a memory section"
    verdict["memory"]["configs"]["128KiB"][field] = value
    (stage / "verdict.json").write_text(json.dumps(verdict))
    code, err = apply(stage, manifest, capsys)
    assert code == BAD_INPUT, err
    assert needle in one_line(err)
    assert manifest.read_text(encoding="utf-8") == MANIFEST
