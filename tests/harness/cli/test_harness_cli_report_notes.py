"""Every path that renders a report reads the stage beside the records (issue 21):
`evaluate --format md` and `report --out` show a faulted stage's "Faults injected"
note and a simulated platform's disclaimer as `run` does, and name no way to apply
either; a stage.json that cannot say is refused (exit 2), not reported without them.

Through `spillover-harness` as a user runs it, on a real (small) simulated stage run
once per module with a fault, copied into each test's own directory before it is
edited.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness_cli import Run
from matrix_builders import small_matrix
from spillover_harness.cli import main
from spillover_harness.report.report import SIMULATED_PLATFORM_DISCLAIMER
from spillover_harness.results.records import RunKey, run_id_for
from spillover_operator.exit_codes import BAD_INPUT, INCONCLUSIVE, OK

FAULT = "ignore-env"
FAULT_NOTE = f"**Faults injected into the simulator: `{FAULT}`.**"


def _run_stage(root: Path, *extra: str) -> Path:
    matrix = root / "matrix.yaml"
    matrix.write_text(small_matrix("notes", input_name="small"), encoding="utf-8")
    out = root / "sim"
    code = main(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out),
                 "--no-progress", *extra])  # fmt: skip
    assert code in (OK, INCONCLUSIVE), code  # a fault may leave the stage undecided
    return out


@pytest.fixture(scope="module")
def faulted_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield _run_stage(tmp_path_factory.mktemp("faulted"), "--fault", FAULT)


@pytest.fixture(scope="module")
def clean_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield _run_stage(tmp_path_factory.mktemp("clean"))


@pytest.fixture
def faulted(faulted_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "faulted"
    shutil.copytree(faulted_dir, copy)
    return copy


def as_cluster_stage(results: Path, *, simulated_platform: bool) -> Path:
    """The clean sim stage's records as a minikube stage's (repetition 1, the matrix's
    minikube repetitions), with the stage.json a cluster stage writes: the records are
    the simulator's either way, which is what a simulated platform is."""
    lines = [json.loads(x) for x in (results / "runs.jsonl").read_text("utf-8").splitlines()]
    kept = []
    for r in lines:
        if r["repetition"] != 1:
            continue
        r["stage"] = "minikube"
        r["run_id"] = run_id_for(RunKey("minikube", r["config"], r["recipe"], r["input"], 1))
        kept.append(r)
    (results / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept), "utf-8")
    stage = json.loads((results / "stage.json").read_text("utf-8"))
    stage["stage"] = "minikube"
    stage["driver"] = {"kind": "cluster", "profile": "local" if simulated_platform else "x",
                       "simulated_platform": simulated_platform}  # fmt: skip
    (results / "stage.json").write_text(json.dumps(stage), encoding="utf-8")
    for name in ("verdict.json", "report.md"):
        (results / name).unlink()
    return results


def edit_driver(results: Path, **fields: Any) -> None:
    stage = json.loads((results / "stage.json").read_text("utf-8"))
    stage["driver"].update(fields)
    (results / "stage.json").write_text(json.dumps(stage), encoding="utf-8")


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("note:", " "))]
    assert len(lines) == 1, err
    return lines[0]


# -- a faulted stage --------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [[], ["--format", "md"]], ids=["default", "md"])
def test_evaluate_md_of_a_faulted_stage_says_so_first(
    cli: Run, faulted: Path, fmt: list[str]
) -> None:
    code, out, err = cli(["evaluate", "--records", str(faulted / "runs.jsonl"), *fmt])
    assert "Traceback" not in err
    assert FAULT_NOTE in out, out[:2000]
    assert out.index(FAULT_NOTE) < out.index("**Decision:")
    assert "To apply it" not in out and "--allow-simulated" not in out
    # the same notes as the report `run` wrote
    run_report = (faulted / "report.md").read_text(encoding="utf-8")
    assert run_report.split("**Decision:")[0] == out.split("**Decision:")[0]
    assert code in (OK, INCONCLUSIVE)


def test_evaluate_json_is_unchanged_by_the_stage(cli: Run, faulted: Path) -> None:
    code, out, _ = cli(["evaluate", "--records", str(faulted / "runs.jsonl"), "--format", "json"])
    assert (
        json.loads(out)["decision"]
        == json.loads((faulted / "verdict.json").read_text(encoding="utf-8"))["decision"]
    )
    assert code in (OK, INCONCLUSIVE)


def test_report_into_a_new_directory_keeps_the_faults_note(
    cli: Run, faulted: Path, tmp_path: Path
) -> None:
    out_dir = tmp_path / "copy"
    code, _, err = cli(["report", "--records", str(faulted / "runs.jsonl"), "--out", str(out_dir)])
    assert "Traceback" not in err
    report = (out_dir / "report.md").read_text(encoding="utf-8")
    assert FAULT_NOTE in report and report.index(FAULT_NOTE) < report.index("**Decision:")
    assert "To apply it" not in report and "--allow-simulated" not in report
    assert code in (OK, INCONCLUSIVE)


def test_report_into_the_records_directory_keeps_the_faults_note(cli: Run, faulted: Path) -> None:
    (faulted / "report.md").unlink()
    cli(["report", "--records", str(faulted / "runs.jsonl"), "--out", str(faulted)])
    assert FAULT_NOTE in (faulted / "report.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("command", ["evaluate", "report"])
def test_a_stage_json_whose_faults_cannot_be_read_is_refused(
    cli: Run, faulted: Path, tmp_path: Path, command: str
) -> None:
    edit_driver(faulted, faults=5)
    argv = [command, "--records", str(faulted / "runs.jsonl")]
    if command == "report":
        argv += ["--out", str(tmp_path / "copy")]
    code, out, err = cli(argv)
    line = one_error_line(err)
    assert code == BAD_INPUT, err
    assert "stage.json" in line and "driver.faults" in line
    assert "whether faults were injected" in line and "restore the stage.json" in line
    assert out == ""
    assert not (tmp_path / "copy").exists()  # nothing written


# -- a cluster stage on a simulated platform, and one on the platform --------------------


@pytest.fixture
def cluster_stage(clean_dir: Path, tmp_path: Path) -> Callable[[bool], Path]:
    def make(simulated_platform: bool) -> Path:
        copy = tmp_path / "minikube"
        shutil.copytree(clean_dir, copy)
        return as_cluster_stage(copy, simulated_platform=simulated_platform)

    return make


def test_evaluate_md_of_a_simulated_platform_carries_its_disclaimer(
    cli: Run, cluster_stage: Callable[[bool], Path]
) -> None:
    results = cluster_stage(True)
    code, out, err = cli(["evaluate", "--records", str(results / "runs.jsonl")])
    assert code == OK, err
    assert SIMULATED_PLATFORM_DISCLAIMER in out
    assert out.index(SIMULATED_PLATFORM_DISCLAIMER) < out.index("**Decision:")
    assert "To apply it" not in out and "--allow-simulated" not in out


def test_report_of_a_simulated_platform_into_a_new_directory_carries_its_disclaimer(
    cli: Run, cluster_stage: Callable[[bool], Path], tmp_path: Path
) -> None:
    results = cluster_stage(True)
    out_dir = tmp_path / "copy"
    code, _, err = cli(["report", "--records", str(results / "runs.jsonl"), "--out", str(out_dir)])
    assert code == OK, err
    report = (out_dir / "report.md").read_text(encoding="utf-8")
    assert SIMULATED_PLATFORM_DISCLAIMER in report
    assert "To apply it" not in report and "--allow-simulated" not in report


def test_a_platform_stage_names_the_apply_command_only_beside_its_records(
    cli: Run, cluster_stage: Callable[[bool], Path], tmp_path: Path
) -> None:
    results = cluster_stage(False)
    records = str(results / "runs.jsonl")
    assert cli(["report", "--records", records, "--out", str(results)])[0] == OK
    report = (results / "report.md").read_text(encoding="utf-8")
    assert SIMULATED_PLATFORM_DISCLAIMER not in report and "Faults injected" not in report
    assert f"**To apply it:** `spillover-harness apply-decision --results {results} " in report
    # a copy elsewhere has no records beside it: apply-decision refuses it, so no command
    out_dir = tmp_path / "copy"
    assert cli(["report", "--records", records, "--out", str(out_dir)])[0] == OK
    assert "apply-decision" not in (out_dir / "report.md").read_text(encoding="utf-8")
