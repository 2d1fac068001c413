"""What a report says about where its figures come from, through the commands a user
runs: stage.json's provenance and its line in report.md, the simulator's figures
labelled modelled, a demo matrix never headlined as the shipped default's decision,
and the status report size (`bodyBytes`) in the per-cell table."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
from dataclasses import asdict
from importlib import metadata, resources
from pathlib import Path

import pytest
from harness_cli import Run
from matrix_builders import small_matrix
from spillover_harness.evaluate.render import number
from spillover_harness.plan.memory_model import MemoryModel
from spillover_harness.plan.sim_model import SimModel
from spillover_harness.results.records import read_records
from spillover_operator.exit_codes import BAD_INPUT, INCONCLUSIVE, OK

REPO = Path(__file__).resolve().parents[3]

SIM_MODEL_SECTION = "sim_model:\n  lazy_reader_p: 0.3\n"


def _sim(cli: Run, tmp_path: Path, name: str, *, extra_yaml: str = "") -> Path:
    matrix = tmp_path / f"{name}.yaml"
    matrix.write_text(small_matrix(name) + extra_yaml, encoding="utf-8")
    out = tmp_path / name
    code, _, err = cli(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out),
                        "--no-progress"])  # fmt: skip
    assert code in (OK, INCONCLUSIVE), err
    return out


def _git_head() -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_a_sim_stage_records_its_provenance_and_the_report_shows_it(
    cli: Run, tmp_path: Path
) -> None:
    out = _sim(cli, tmp_path, "prov", extra_yaml=SIM_MODEL_SECTION)
    provenance = json.loads((out / "stage.json").read_text(encoding="utf-8"))["provenance"]
    assert provenance["harness_version"] == metadata.version("spillover-ops")
    # the harness runs from this checkout (an editable install): its HEAD
    assert provenance["harness_commit"] == _git_head()
    assert provenance["profile"] is None
    model = asdict(SimModel())
    model["lazy_reader_p"] = 0.3  # the matrix's sim_model: the value in effect
    assert provenance["simulator_parameters"] == {
        "model": model,
        "memory": asdict(MemoryModel()),
    }
    report = (out / "report.md").read_text(encoding="utf-8")
    line = next(x for x in report.splitlines() if x.startswith("**Provenance:**"))
    assert f"spillover-harness {provenance['harness_version']}" in line
    assert f"commit `{provenance['harness_commit']}`" in line
    assert report.index("**Provenance:**") < report.index("## Configurations")
    assert "| model | lazy_reader_p | 0.3 |" in report
    assert "| memory | limit_bytes | 2147483648 |" in report
    # `evaluate --format md` prints the same provenance from the stage.json beside
    code, printed, _ = cli(["evaluate", "--records", str(out / "runs.jsonl")])
    assert code in (OK, INCONCLUSIVE)
    assert line in printed.splitlines()


def test_a_stage_json_without_provenance_still_reports(cli: Run, tmp_path: Path) -> None:
    """A stage.json written before provenance was recorded: the report is written and
    says so."""
    out = _sim(cli, tmp_path, "old")
    stage_path = out / "stage.json"
    stage = json.loads(stage_path.read_text(encoding="utf-8"))
    del stage["provenance"]
    stage_path.write_text(json.dumps(stage), encoding="utf-8")
    (out / "report.md").unlink()
    code, _, err = cli(["report", "--records", str(out / "runs.jsonl"), "--out", str(out)])
    assert code in (OK, INCONCLUSIVE), err
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "**Provenance:** not recorded" in report
    assert "parameter values in effect" not in report


def test_a_provenance_that_is_not_one_is_refused_by_report(cli: Run, tmp_path: Path) -> None:
    out = _sim(cli, tmp_path, "badprov")
    stage_path = out / "stage.json"
    stage = json.loads(stage_path.read_text(encoding="utf-8"))
    stage["provenance"] = {"harness_version": 7}
    stage_path.write_text(json.dumps(stage), encoding="utf-8")
    before = (out / "report.md").read_bytes()
    code, _, err = cli(["report", "--records", str(out / "runs.jsonl"), "--out", str(out)])
    assert code == BAD_INPUT
    assert "stage.json" in err and "provenance.harness_version" in err
    assert (out / "report.md").read_bytes() == before  # nothing written


def test_sim_memory_and_durations_are_labelled_modelled(cli: Run, tmp_path: Path) -> None:
    out = _sim(cli, tmp_path, "labels")
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## mcp-host memory (modelled)" in report
    memory = report.split("## mcp-host memory (modelled)", 1)[1].split("\n## ", 1)[0]
    assert "_Modelled, not measured:" in memory
    cells = report.split("## Per-cell results", 1)[1].split("\n## ", 1)[0]
    assert "| median duration (s, modelled) |" in cells
    assert "| median status report (bytes, modelled) |" in cells
    assert "Durations and status report sizes are modelled by the simulator" in cells


def test_the_status_report_size_is_in_the_per_cell_table(cli: Run, tmp_path: Path) -> None:
    """Each cell's median `status_report_bytes` (the coordinator's `bodyBytes`)."""
    out = _sim(cli, tmp_path, "body")
    records = [r for r in read_records(out / "runs.jsonl") if r.outcome != "harness_error"]
    sizes = [r.status_report_bytes for r in records if r.config == "128KiB"]
    assert sizes and all(s is not None and s > 0 for s in sizes)
    median = number(statistics.median(s for s in sizes if s is not None))
    report = (out / "report.md").read_text(encoding="utf-8")
    header = next(x for x in report.splitlines() if x.startswith("| recipe / input |"))
    column = [c.strip() for c in header.split("|")].index("median status report (bytes, modelled)")
    row = next(
        x for x in report.splitlines() if x.startswith("| code-review/large | large | 128KiB |")
    )
    assert [c.strip() for c in row.split("|")][column] == median


def test_the_memory_demo_is_not_headlined_as_the_shipped_default(cli: Run, tmp_path: Path) -> None:
    """`make memory`'s matrix: its decision is about the memory demo, and the report's
    first line and the printed outcome say so."""
    matrix = tmp_path / "memory-budget.yaml"
    shutil.copyfile(
        str(resources.files("spillover_harness.plan.matrices").joinpath("memory-budget.yaml")),
        matrix,
    )
    out = tmp_path / "memory"
    code, stdout, err = cli(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out),
                             "--no-progress"])  # fmt: skip
    assert code in (OK, INCONCLUSIVE), err
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    report = (out / "report.md").read_text(encoding="utf-8")
    first = report.splitlines()[0]
    assert first.startswith("# Spillover validation of matrix `memory-budget` (a demo): decision ")
    assert f"`{verdict['decision']}` for this matrix, not the shipped default" in first
    note = "> **Not the decision for the shipped default.** Matrix `memory-budget` is a demo"
    assert note in report and "(`make memory`)" in report
    assert report.index(note) < report.index("**Decision:")
    assert "matrix: memory-budget, a demo (make memory): its decision is about this matrix, " \
        "not the shipped default" in stdout.splitlines()  # fmt: skip


def test_the_shipped_matrix_keeps_its_plain_headline(cli: Run, tmp_path: Path) -> None:
    text = (
        resources.files("spillover_harness.plan.matrices")
        .joinpath("spillover-default.yaml")
        .read_text(encoding="utf-8")
    ).replace("  sim: 5\n", "  sim: 1\n")
    matrix = tmp_path / "default.yaml"
    matrix.write_text(text, encoding="utf-8")
    out = tmp_path / "default"
    code, stdout, err = cli(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out),
                             "--no-progress"])  # fmt: skip
    assert code in (OK, INCONCLUSIVE), err
    report = (out / "report.md").read_text(encoding="utf-8")
    assert report.splitlines()[0].startswith("# Spillover validation: decision `")
    assert "Not the decision for the shipped default" not in report
    assert not [x for x in stdout.splitlines() if x.startswith("matrix: ")]


@pytest.mark.parametrize("flag", ["--override-stage1-false"])
def test_run_help_explains_the_stage1_false_override(flag: str, cli: Run) -> None:
    code, out, _ = cli(["run", "--help"])
    assert code == 0
    assert flag in out and "decided `false`" in out


def _checkout_copy(tmp_path: Path) -> Path:
    """The harness and operator sources in a git checkout of their own, committed."""
    repo = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "harness" / "spillover_harness", repo / "harness" / "spillover_harness",
                    ignore=ignore)  # fmt: skip
    shutil.copytree(REPO / "operator" / "spillover_operator",
                    repo / "operator" / "spillover_operator", ignore=ignore)  # fmt: skip
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "copy"], check=True)
    return repo


def _run_from(repo: Path, out: Path) -> dict:
    import os
    import sys

    env = {**os.environ, "PYTHONPATH": f"{repo / 'harness'}:{repo / 'operator'}"}
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from spillover_harness.cli import main; "
         "sys.exit(main())", "run", "--stage", "sim", "--out", str(out), "--no-progress"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == OK, done.stderr
    return json.loads((out / "stage.json").read_text(encoding="utf-8"))["provenance"]


def test_a_stage_from_a_modified_checkout_says_so(tmp_path: Path) -> None:
    """A checkout with uncommitted changes to the harness gives another provenance than its
    commit (the flag and the diff's hash), and the report says so in its header; a clean
    one says it is clean. The seed is recorded."""
    repo = _checkout_copy(tmp_path)
    clean = _run_from(repo, tmp_path / "clean")
    assert clean["harness_dirty"] is False and clean["harness_diff_sha256"] is None
    assert clean["seed"] == 20261130
    assert "modified checkout" not in (tmp_path / "clean" / "report.md").read_text()

    threshold = repo / "harness" / "spillover_harness" / "sim" / "store.py"
    threshold.write_text(threshold.read_text() + "\n# a local edit\n")
    dirty = _run_from(repo, tmp_path / "dirty")
    assert dirty["harness_dirty"] is True
    assert dirty["harness_diff_sha256"].startswith("sha256:")
    assert dirty["harness_commit"] == clean["harness_commit"]
    report = (tmp_path / "dirty" / "report.md").read_text()
    assert report.index("**Made from a modified checkout:**") < report.index("**Decision:")

    (repo / "harness" / "spillover_harness" / "local.py").write_text("X = 1\n")
    other = _run_from(repo, tmp_path / "other")
    assert other["harness_dirty"] is True
    assert other["harness_diff_sha256"] != dirty["harness_diff_sha256"]


def test_a_provenance_edited_below_what_the_runs_used_is_refused(cli: Run, tmp_path: Path) -> None:
    """provenance max_iterations edited to 3, though the runs used more: the report would
    print 3 as the value the runs used. Refused, naming the field, by `evaluate`."""
    out = _sim(cli, tmp_path, "iters")
    stage_path = out / "stage.json"
    stage = json.loads(stage_path.read_text(encoding="utf-8"))
    stage["provenance"]["simulator_parameters"]["model"]["max_iterations"] = 3
    stage_path.write_text(json.dumps(stage), encoding="utf-8")
    code, _, err = cli(["evaluate", "--records", str(out / "runs.jsonl")])
    assert code == BAD_INPUT
    assert "provenance.simulator_parameters.model.max_iterations is 3" in err
    assert "Traceback" not in err
