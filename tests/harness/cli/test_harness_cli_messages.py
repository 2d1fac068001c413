"""The CLI's messages (issue 12, item 6, and issue 8's "resume command built once"):
the resume command quotes correctly and never says `--matrix <default>`; options
that do not apply to the stage are refused; Ctrl-C while the modules load, or while
Python itself starts (issue 38, item 7), prints no traceback; Ctrl-C during the
evaluation says the report was not written."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from console_interrupts import interrupted_after, interrupted_in_site, launcher_hint
from spillover_harness import evaluate as evaluate_module
from spillover_harness.cli import main
from spillover_harness.cli.app import build_parser
from spillover_harness.cli.run import RUN_OPTIONS, resume_command
from spillover_harness.report import report as report_module
from spillover_operator.exit_codes import BAD_INPUT, INTERRUPTED, OK

EXE = str(Path(sys.executable).parent / "spillover-harness")

SMALL = """\
name: messages
seed: 5
configurations:
  - name: "off"
    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED: "false"}
  - name: 128KiB
recipes:
  - name: code-review
    inputs: [{name: small, size_class: small}]
repetitions: {sim: 2, minikube: 1, dev: 1}
run_timeout_s: 60
concurrency: 2
acceptance: {baseline: "off", token_tolerance: 0.1, quality_recipes: []}
decision:
  chain: [{config: 128KiB, default: "131072"}]
  fallback: "false"
"""


# -- the resume command ------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--stage", "sim", "--out", "results/my run's dir", "--fault", "log-results"],
        ["--stage", "sim", "--matrix", "m a.yaml", "--out", "o", "--concurrency", "2",
         "--no-progress"],
        ["--stage", "dev", "--profile", "dev", "--context", "ctx", "--kubeconfig", "k f",
         "--kubectl", "/opt/my tools/kubectl",
         "--stage1-results", "s1", "--override-stage1", "hotfix; approved by $LEAD",
         "--apply-timeout", "30", "--out", "results/dev"],
    ],
    ids=["quotes", "matrix", "dev"],
)  # fmt: skip
def test_the_resume_command_is_the_same_command_plus_resume(argv: list[str]) -> None:
    args = build_parser().parse_args(["run", *argv])
    command = resume_command(args)
    words = shlex.split(command)  # what a shell would run
    assert words[:2] == ["spillover-harness", "run"] and words[-1] == "--resume"
    again = build_parser().parse_args(words[1:])
    for name in ("stage", *(o.dest for o in RUN_OPTIONS)):
        assert getattr(again, name) == getattr(args, name), name
    assert "<default>" not in command
    if "--matrix" not in argv:
        assert "--matrix" not in command  # the packaged matrix needs none


def test_every_run_option_is_in_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    """RUN_OPTIONS decides what the resume command repeats and which stage an option
    is for: an option missing from it would be dropped from the resume command."""
    with pytest.raises(SystemExit):
        main(["run", "--bogus"])  # prints the usage line: every option of `run`
    usage = capsys.readouterr().err.split("error:")[0]
    flags = {w.strip("[]") for w in usage.split() if w.lstrip("[").startswith("--")}
    assert flags - {"--stage", "--resume", "-h", "--help"} == {o.flag for o in RUN_OPTIONS}


# -- options that do not apply -----------------------------------------------------------


@pytest.mark.parametrize(
    ("stage", "extra", "named"),
    [
        ("sim", ["--profile", "dev"], "--profile"),
        ("sim", ["--kubeconfig", "k"], "--kubeconfig"),
        ("sim", ["--context", "c"], "--context"),
        ("sim", ["--kubectl", "kubectl"], "--kubectl"),
        ("sim", ["--apply-timeout", "5"], "--apply-timeout"),
        ("sim", ["--stage1-results", "s"], "--stage1-results"),
        ("sim", ["--override-stage1", "why"], "--override-stage1"),
        ("minikube", ["--profile", "minikube", "--stage1-results", "s"], "--stage1-results"),
        ("minikube", ["--profile", "minikube", "--override-stage1", "y"], "--override-stage1"),
        ("sim", ["--override-stage1-false"], "--override-stage1-false"),
        (
            "minikube",
            ["--profile", "minikube", "--override-stage1-false"],
            "--override-stage1-false",
        ),
        ("minikube", ["--profile", "minikube", "--fault", "log-results"], "--fault"),
        ("dev", ["--profile", "dev", "--fault", "spill-to-disk"], "--fault"),
    ],
)
def test_an_option_that_does_not_apply_is_refused(
    stage: str, extra: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(["run", "--stage", stage, "--out", str(out), *extra])
    err = capsys.readouterr().err
    assert code == BAD_INPUT
    assert f"{named} is for --stage " in err and f"does not apply to --stage {stage}" in err
    assert not out.exists()


# -- Ctrl-C while the modules load -------------------------------------------------------


def _loaded(pid: int, library: str) -> bool:
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("after_s", [0.0, 0.05, 0.1, 0.2])
def test_ctrl_c_in_the_first_moments_prints_no_traceback(after_s: float, tmp_path: Path) -> None:
    """SIGINT to the real console script once it is importing its modules (pydantic's
    compiled core is mapped: that import happens inside `main`), then later: exit
    130 and no traceback, whatever it was doing."""
    (tmp_path / "m.yaml").write_text(SMALL)
    proc = subprocess.Popen(
        [EXE, "run", "--stage", "sim", "--matrix", str(tmp_path / "m.yaml"),
         "--out", str(tmp_path / "out"), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _loaded(proc.pid, "pydantic_core"):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.001)
        time.sleep(after_s)
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in err, err
    assert proc.returncode == INTERRUPTED, out + err
    assert "interrupted" in err


LAUNCHER_HINT = launcher_hint(EXE)


@pytest.mark.parametrize("after_s", [0.02, 0.05, 0.1])
def test_ctrl_c_soon_after_the_command_starts_is_an_interruption(
    after_s: float, tmp_path: Path
) -> None:
    """SIGINT a fixed time after the real console script was started, as a user's Ctrl-C
    lands: at 0.02 s Python is still starting and loading the script's first import,
    before any of the project's code can catch it (pip's own script printed a traceback
    there every time). The launcher holds it back until `main`'s try: exit 130, no
    traceback."""
    (tmp_path / "m.yaml").write_text(SMALL)
    code, out, err = interrupted_after(
        [
            EXE,
            "run",
            "--stage",
            "sim",
            "--matrix",
            str(tmp_path / "m.yaml"),
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ],
        after_s,
        timeout=120,
    )
    assert "Traceback" not in err, f"{LAUNCHER_HINT}\n{err}"
    assert code == INTERRUPTED, f"{LAUNCHER_HINT}\n{out}{err}"


def test_ctrl_c_while_python_imports_site_is_an_interruption(tmp_path: Path) -> None:
    """The moment the timed test can only hope to hit, every time: SIGINT while Python
    imports `site` (a sitecustomize sends it), before the console script's first line.
    pip's own script ended there in "Fatal Python error" and a traceback."""
    proc = interrupted_in_site([EXE, "--help"], tmp_path, timeout=120)
    assert "Traceback" not in proc.stderr, f"{LAUNCHER_HINT}\n{proc.stderr}"
    assert proc.returncode == INTERRUPTED, f"{LAUNCHER_HINT}\n{proc.stdout}{proc.stderr}"
    assert proc.stderr == "interrupted\n"


def _build_a_class_interrupted_by_ctrl_c(*args: Any) -> int:
    """What CI once hit: SIGINT while pydantic built `Matrix`. Python 3.11 wraps the
    KeyboardInterrupt raised in a descriptor's `__set_name__` in a RuntimeError."""

    class Interrupted:
        def __set_name__(self, owner: type, name: str) -> None:
            raise KeyboardInterrupt

    class Built:
        field = Interrupted()

    return 0


def test_ctrl_c_while_a_module_builds_a_class_is_an_interruption(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The interrupt arrives wrapped (3.11) or bare (3.12+); both end as exit 130 with
    no traceback, at start-up (`main`) and in a command's lazy imports (`dispatch`)."""
    from spillover_harness.cli import app

    monkeypatch.setattr(app, "dispatch", _build_a_class_interrupted_by_ctrl_c)
    assert main(["evaluate"]) == INTERRUPTED
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err
    monkeypatch.undo()

    from spillover_harness.cli import evaluate as evaluate_command

    monkeypatch.setattr(evaluate_command, "cmd_evaluate", _build_a_class_interrupted_by_ctrl_c)
    assert app.dispatch(["evaluate", "--records", "r.jsonl"]) == INTERRUPTED
    err = capsys.readouterr().err
    assert "interrupted" in err and "internal error" not in err


# -- Ctrl-C during the evaluation and the report -----------------------------------------


def ctrl_c_during(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> Callable[..., Any]:
    """Deliver a real SIGINT to this process at the start of `module.name` (the real
    function then runs and is interrupted by Python's own KeyboardInterrupt): the only
    way to hit that moment every time."""
    real = getattr(module, name)

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, interrupted)
    return real


@pytest.fixture
def complete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, list[str]]:
    (tmp_path / "m.yaml").write_text(SMALL)
    out = tmp_path / "out"
    argv = ["run", "--stage", "sim", "--matrix", str(tmp_path / "m.yaml"), "--out", str(out),
            "--no-progress"]  # fmt: skip
    assert main(argv) == OK
    for name in ("report.md", "verdict.json"):
        (out / name).unlink()
    capsys.readouterr()
    return out, argv


def test_ctrl_c_during_the_evaluation_of_run_says_the_report_was_not_written(
    complete: tuple[Path, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, argv = complete
    before = (out / "runs.jsonl").read_bytes()
    ctrl_c_during(monkeypatch, evaluate_module, "evaluate")
    code = main([*argv, "--resume"])
    err = capsys.readouterr().err
    assert code == INTERRUPTED and "Traceback" not in err
    assert "interrupted during the evaluation" in err and "the report was not written" in err
    assert f"{out / 'runs.jsonl'}" in err and "--resume" in err
    assert not (out / "report.md").exists()
    assert (out / "runs.jsonl").read_bytes() == before
    assert not (out / ".spillover-harness.lock").exists()


@pytest.mark.parametrize(("module", "name"), [(evaluate_module, "evaluate"),
                                              (report_module, "write_report")])  # fmt: skip
def test_ctrl_c_during_report_says_it_was_not_written(
    module: Any,
    name: str,
    complete: tuple[Path, list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, _ = complete
    target = tmp_path / "report"
    ctrl_c_during(monkeypatch, module, name)
    code = main(["report", "--records", str(out / "runs.jsonl"), "--out", str(target)])
    err = capsys.readouterr().err
    assert code == INTERRUPTED and "Traceback" not in err
    assert "was not written" in err
    assert not (target / "report.md").exists()


def test_ctrl_c_during_evaluate_prints_no_partial_verdict(
    complete: tuple[Path, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, _ = complete
    ctrl_c_during(monkeypatch, evaluate_module, "evaluate")
    code = main(["evaluate", "--records", str(out / "runs.jsonl"), "--format", "json"])
    captured = capsys.readouterr()
    assert code == INTERRUPTED and captured.out == ""
    assert "no verdict was printed" in captured.err
