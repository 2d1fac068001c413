"""The last bad inputs of a hostile audit (issue 27, item 5), through `spillover-harness`
as a user runs it: each ends with exit 2, one line naming the problem and the fix, no
traceback, and nothing written.

The stage these tests break is a real one: a small matrix run on the simulator once per
module, copied into each test's own directory before it is edited.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness_cli import Run, lines_of, run_sim_stage, write_lines
from matrix_builders import small_matrix
from repo_paths import REPO_ROOT
from spillover_harness.cli import main
from spillover_operator.exit_codes import BAD_INPUT, INCONCLUSIVE, OK

MATRIX_TEXT = small_matrix("badinputs", input_name="small")
EXE = str(Path(sys.executable).parent / "spillover-harness")


def refused(result: tuple[int, str, str], *needles: str) -> str:
    """Assert exit 2, no traceback, one error line holding every needle; return it."""
    code, _, err = result
    assert "Traceback" not in err, err
    assert code == BAD_INPUT, err
    lines = [
        line
        for line in err.splitlines()
        if line.strip() and not line.startswith(("usage:", " ", "note:"))
    ]
    assert len(lines) == 1, err  # one line: the problem and the fix
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def run_process(argv: list[str]) -> tuple[int, str, str]:
    """`spillover-harness ARGV` as its own process, killed (and the test failed) if it hangs:
    the FIFO cases would otherwise hang the test run rather than fail it."""
    proc = subprocess.run([EXE, *argv], capture_output=True, text=True, timeout=120, check=False)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def stage_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_sim_stage(tmp_path_factory.mktemp("stage"), MATRIX_TEXT)


@pytest.fixture
def stage(stage_dir: Path, tmp_path: Path) -> Path:
    """This test's own copy of the simulated stage's results directory."""
    copy = tmp_path / "sim"
    shutil.copytree(stage_dir, copy)
    return copy


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


# -- 1, 2: a FIFO or a device is refused before it is read --------------------------------


@pytest.mark.parametrize("option", ["--records", "--matrix"])
def test_a_fifo_is_refused_not_waited_on(stage: Path, tmp_path: Path, option: str) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    argv = ["evaluate", "--records", str(stage / "runs.jsonl"), option, str(fifo)]
    refused(run_process(argv), "is a FIFO (named pipe)", "a pipe or device is never read")


def test_a_fifo_as_the_matrix_of_run_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    argv = ["run", "--stage", "sim", "--matrix", str(fifo), "--out", str(out), "--no-progress"]
    refused(run_process(argv), "is a FIFO (named pipe)")
    assert not out.exists()


@pytest.mark.parametrize("name", ["stage.json", "verdict.json"])
def test_a_fifo_in_the_results_directory_is_refused(stage: Path, tmp_path: Path, name: str) -> None:
    (stage / name).unlink()
    os.mkfifo(stage / name)
    manifest = tmp_path / "policy.yaml"
    manifest.write_text("kind: SpilloverPolicy\n", encoding="utf-8")
    argv = ["apply-decision", "--results", str(stage), "--gitops", str(manifest),
            "--allow-simulated"]  # fmt: skip
    refused(run_process(argv), "FIFO")
    assert manifest.read_text(encoding="utf-8") == "kind: SpilloverPolicy\n"


@pytest.mark.parametrize("option", ["--records", "--matrix"])
def test_dev_zero_is_refused_as_a_device(cli: Run, stage: Path, tmp_path: Path,
                                         option: str) -> None:  # fmt: skip
    out = tmp_path / "report"
    argv = ["report", "--records", str(stage / "runs.jsonl"), option, "/dev/zero",
            "--out", str(out)]  # fmt: skip
    refused(cli(argv), "/dev/zero: is a character device", "pass")
    assert not out.exists()


def test_a_records_line_longer_than_the_bound_is_refused(cli: Run, stage: Path) -> None:
    """A regular file reporting any size: the bound is on the bytes read from it."""
    with (stage / "runs.jsonl").open("ab") as handle:
        handle.write(b"x" * (16 * 1024 * 1024 + 10))
    refused(cli(["evaluate", "--records", str(stage / "runs.jsonl")]), "longer than")


# -- 3: a configuration name that would rewrite the report ---------------------------------


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        pytest.param("128\\u0000KiB", "U+0000", id="nul"),
        pytest.param("128KiB\\n| off | pass | pass |", "U+000A", id="newline-and-table-row"),
        pytest.param("\\u202eBiK821", "U+202E", id="right-to-left-override"),
        pytest.param("128\\u200bKiB", "U+200B", id="zero-width-space"),
        pytest.param("128\\u2028KiB", "U+2028", id="line-separator"),
    ],
)
def test_a_configuration_name_with_control_or_format_characters(
    cli: Run, tmp_path: Path, name: str, needle: str
) -> None:
    matrix = tmp_path / "m.yaml"
    text = MATRIX_TEXT.replace("  - name: 128KiB\n", f'  - name: "{name}"\n', 1)
    text = text.replace("{config: 128KiB,", f'{{config: "{name}",', 1)
    assert text != MATRIX_TEXT
    matrix.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    line = refused(cli(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out)]),
                   "configurations.1.name", needle, "rename it")  # fmt: skip
    assert "\u202e" not in line and "\x00" not in line
    assert not out.exists()


def test_a_record_whose_config_name_holds_a_bidi_override(
    cli: Run, stage: Path, tmp_path: Path
) -> None:
    """A name read back from the records never reaches the report raw."""
    records = lines_of(stage)
    records[0]["config"] = "\u202eBiK821"
    write_lines(stage, records)
    out = tmp_path / "report"
    refused(cli(["report", "--records", str(stage / "runs.jsonl"), "--out", str(out)]),
            "runs.jsonl:1", "U+202E")  # fmt: skip
    assert not out.exists()


# -- 7: a run that ends before it starts ---------------------------------------------------


def test_a_record_finished_before_it_started(cli: Run, stage: Path) -> None:
    records = lines_of(stage)
    records[1]["finished_at"] = "2020-01-01T00:00:00.000+00:00"
    write_lines(stage, records)
    before = snapshot(stage)
    argv = ["evaluate", "--records", str(stage / "runs.jsonl")]
    refused(cli(argv), "runs.jsonl:2", "finished_at 2020-01-01T00:00:00.000+00:00 is before")
    assert snapshot(stage) == before


# -- 8: two values that would share one results directory ---------------------------------


def test_sensitivity_values_sharing_one_directory_are_refused(cli: Run, tmp_path: Path) -> None:
    out = tmp_path / "sens"
    argv = ["sensitivity", "--parameters", "full_read_limit",
            "--values", "full_read_limit=1000000,1000001", "--out", str(out)]  # fmt: skip
    refused(cli(argv), "1000000 and 1000001 share one results directory",
            "points/full_read_limit=1e+06")  # fmt: skip
    assert not out.exists()


# -- 9: a profile naming an empty command --------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        pytest.param('kubectl: ""\n', "kubectl", id="empty-kubectl"),
        pytest.param('kubectl: "   "\n', "kubectl", id="blank-kubectl"),
        pytest.param('stage1_lane:\n  commands:\n    - {name: t2, argv: [""]}\n', "argv[0]",
                     id="empty-program"),
    ],
)  # fmt: skip
def test_a_profile_with_an_empty_command(cli: Run, tmp_path: Path, extra: str,
                                         needle: str) -> None:  # fmt: skip
    from spillover_harness.profile.shipped import __file__ as shipped

    text = (Path(shipped).parent / "minikube.yaml").read_text(encoding="utf-8")
    profile = tmp_path / "p.yaml"
    profile.write_text(text + extra, encoding="utf-8")
    out = tmp_path / "out"
    argv = ["run", "--stage", "minikube", "--profile", str(profile), "--out", str(out)]
    refused(cli(argv), needle, "empty")
    assert not out.exists()


@pytest.mark.parametrize("value", ["", "   "], ids=["empty", "blank"])
@pytest.mark.parametrize("command", ["run", "preflight"])
def test_an_empty_kubectl_flag_is_refused(cli: Run, tmp_path: Path, command: str,
                                          value: str) -> None:  # fmt: skip
    out = tmp_path / "out"
    argv = [command, "--stage", "minikube", "--profile", "minikube", "--kubectl", value]
    refused(cli(argv + (["--out", str(out)] if command == "run" else [])),
            "--kubectl", "empty", "name a kubectl binary")  # fmt: skip
    assert not out.exists()


# -- 4: every run OOM-killed is no decision -------------------------------------------------


def test_a_stage_whose_every_run_was_oom_killed_decides_nothing(cli: Run, tmp_path: Path) -> None:
    """The simulated mcp-host's limit is below what any execution needs: each run is
    OOM-killed at its first iteration. That is no evidence for or against spillover."""
    matrix = tmp_path / "oom.yaml"
    text = small_matrix("oom", input_name="large").replace(
        "concurrency: 2\n",
        "concurrency: 2\nmemory: {sim_limit_bytes: 1048576, sim_baseline_bytes: 1048000}\n",
    )
    matrix.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    code, stdout, err = cli(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out),
                             "--no-progress"])  # fmt: skip
    assert code == INCONCLUSIVE, err
    assert "decision: inconclusive" in stdout
    assert all(r["mcp_host_memory"]["oom_kills"] == 1 for r in lines_of(out))
    code, stdout, _ = cli(["evaluate", "--records", str(out / "runs.jsonl"), "--format", "json"])
    assert code == INCONCLUSIVE
    verdict = json.loads(stdout)
    assert verdict["decided"] is False
    assert "no run of off, 128KiB finished" in verdict["decision_reason"]
    assert {n["config"] for n in verdict["runs_needed"]} == {"off", "128KiB"}


@pytest.mark.parametrize("config", ["off", "128KiB"])
def test_one_configuration_all_oom_killed_decides_nothing(cli: Run, stage: Path,
                                                          config: str) -> None:  # fmt: skip
    records = lines_of(stage)
    for r in records:
        if r["config"] == config:
            r["mcp_host_memory"]["oom_kills"] = 1
    write_lines(stage, records)
    code, stdout, err = cli(["evaluate", "--records", str(stage / "runs.jsonl"),
                             "--format", "json"])  # fmt: skip
    assert code == INCONCLUSIVE, err
    assert f"no run of {config} finished" in json.loads(stdout)["decision_reason"]


# -- 5, 6: apply-decision takes the decision its records give -------------------------------

MANIFEST = (REPO_ROOT / "manifests" / "samples" / "threshold-32kib.yaml").read_text("utf-8")


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(MANIFEST, encoding="utf-8")
    return path


def apply_argv(stage: Path, manifest: Path) -> list[str]:
    return ["apply-decision", "--results", str(stage), "--gitops", str(manifest),
            "--allow-simulated"]  # fmt: skip


def edit_json(path: Path, **fields: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(fields)
    path.write_text(json.dumps(data), encoding="utf-8")


def test_the_unedited_stage_applies(cli: Run, stage: Path, manifest: Path) -> None:
    code, out, err = cli(apply_argv(stage, manifest))
    assert code == OK, err
    assert "decision: 131072" in out


def test_a_verdict_edited_to_another_reachable_decision(
    cli: Run, stage: Path, manifest: Path
) -> None:
    edit_json(stage / "verdict.json", decision="false")  # reachable: the chain's fallback
    refused(cli(apply_argv(stage, manifest)), "the verdict says false, but its records decide "
            "131072", "report --records")  # fmt: skip
    assert manifest.read_text(encoding="utf-8") == MANIFEST


def test_a_verdict_edited_to_decide_what_its_records_do_not(
    cli: Run, stage: Path, manifest: Path
) -> None:
    """Records whose 128KiB runs were all OOM-killed decide nothing; the verdict says 131072."""
    records = lines_of(stage)
    for r in records:
        if r["config"] == "128KiB":
            r["mcp_host_memory"]["oom_kills"] = 1
    write_lines(stage, records)
    code, _, err = cli(apply_argv(stage, manifest))
    assert code == INCONCLUSIVE, err
    assert "its records decide nothing" in err
    assert manifest.read_text(encoding="utf-8") == MANIFEST


@pytest.mark.parametrize("value", ["true", 1])
def test_a_verdict_whose_decided_is_not_a_boolean(cli: Run, stage: Path, manifest: Path,
                                                  value: Any) -> None:  # fmt: skip
    edit_json(stage / "verdict.json", decided=value)
    refused(cli(apply_argv(stage, manifest)), "decided: Input should be a valid boolean",
            "report --records")  # fmt: skip
    assert manifest.read_text(encoding="utf-8") == MANIFEST


@pytest.fixture(scope="module")
def faulted_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("faulted")
    matrix = root / "matrix.yaml"
    matrix.write_text(MATRIX_TEXT, encoding="utf-8")
    out = root / "sim"
    assert main(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out),
                 "--fault", "ignore-env", "--no-progress"]) == OK  # fmt: skip
    yield out


@pytest.mark.parametrize("resume_command_too", [False, True])
def test_a_stage_file_whose_faults_were_emptied(
    cli: Run, faulted_dir: Path, tmp_path: Path, manifest: Path, resume_command_too: bool
) -> None:
    stage = tmp_path / "faulted"
    shutil.copytree(faulted_dir, stage)
    data = json.loads((stage / "stage.json").read_text(encoding="utf-8"))
    assert data["driver"]["faults"] == ["ignore-env"]
    data["driver"]["faults"] = []
    if resume_command_too:
        data["resume_command"] = data["resume_command"].replace(" --fault ignore-env", "")
    (stage / "stage.json").write_text(json.dumps(data), encoding="utf-8")
    line = refused(cli(apply_argv(stage, manifest)), "faults injected", "without --fault")
    assert ("records were made" in line) is resume_command_too
    assert manifest.read_text(encoding="utf-8") == MANIFEST
