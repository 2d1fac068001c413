"""`hold_results_dir`: the OS lock of a results directory, with real processes
(a Python subprocess holds it), and the directories it creates and removes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from spillover_harness.plan.matrix import load_matrix
from spillover_harness.results.results_dir import (
    LOCK_FILE,
    Provenance,
    ResultsDirError,
    ResultsDirLocked,
    StageDir,
    StageSetup,
    TreeState,
    harness_commit,
    harness_version,
    hold_results_dir,
    prepare_results_dir,
)

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from spillover_harness.results.results_dir import hold_results_dir
    with hold_results_dir(Path(sys.argv[1]), command="holder --out x"):
        print("held", flush=True)
        time.sleep(600)
    """
)


@contextmanager
def holder(out: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_another_process_holding_it_is_named_and_nothing_is_touched(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with holder(out) as proc:
        before = sorted(p.name for p in out.iterdir())
        content = (out / LOCK_FILE).read_bytes()
        with pytest.raises(ResultsDirLocked) as info, hold_results_dir(out):
            pass
        assert info.value.pid == proc.pid
        assert f"PID {proc.pid}" in str(info.value) and "holder --out x" in str(info.value)
        assert f"kill {proc.pid}" in str(info.value)
        assert sorted(p.name for p in out.iterdir()) == before
        assert (out / LOCK_FILE).read_bytes() == content


def test_a_holder_killed_by_sigkill_releases_it(tmp_path: Path) -> None:
    """The lock is the kernel's: a dead holder (even SIGKILL) never blocks the next run."""
    out = tmp_path / "out"
    with holder(out) as proc:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        with hold_results_dir(out):
            assert (out / LOCK_FILE).exists()
    assert not (out / LOCK_FILE).exists()


def test_it_is_reentrant_in_one_process_and_removed_at_the_end(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with hold_results_dir(out):
        (out / "runs.jsonl").write_text("")
        with hold_results_dir(out):  # run_stage inside the CLI's hold
            pass
        assert (out / LOCK_FILE).exists()
    assert not (out / LOCK_FILE).exists()
    assert (out / "runs.jsonl").exists()  # what was written stays


def test_directories_it_created_are_removed_when_left_empty(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "out"
    with pytest.raises(RuntimeError), hold_results_dir(out):
        assert out.is_dir()
        raise RuntimeError("the stage stopped before writing anything")
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (lambda tmp: tmp / "file" / "x", "is a file, not a directory"),
        (lambda tmp: tmp / "file", "exists and is not a directory"),
        (lambda tmp: Path("/proc/spillover-x"), "cannot create the directory"),
        (lambda tmp: Path("/proc/self"), "cannot write in the directory"),
    ],
    ids=["under-a-file", "a-file", "under-proc", "proc-dir"],
)
def test_unusable_paths_are_refused(tmp_path: Path, target: object, expected: str) -> None:
    """Paths that fail even for root (the tests run as root, who ignores file modes):
    under a regular file, in /proc (no files can be created there)."""
    (tmp_path / "file").write_text("x")
    assert callable(target)
    out = target(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ResultsDirError, match=expected), hold_results_dir(out):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# -- provenance --------------------------------------------------------------------------


def test_the_harness_commit_is_the_checkouts_head_or_none(tmp_path: Path) -> None:
    """A git checkout: its HEAD; a directory in no checkout, or no git at all: None,
    never an error (a stage must not fail because git is missing)."""
    repo = Path(__file__).resolve().parents[3]
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert harness_commit() == head  # the harness's own source tree (this checkout)
    outside = tmp_path / "not-a-checkout"
    outside.mkdir()
    assert harness_commit(outside) is None
    assert harness_commit(tmp_path / "missing") is None


def test_no_git_on_the_path_gives_no_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    assert harness_commit() is None


def test_a_new_stage_json_holds_provenance_and_a_resume_keeps_it(tmp_path: Path) -> None:
    """prepare_results_dir writes the provenance given (or the version and commit
    alone); resuming never rewrites what made the stage."""
    matrix = load_matrix()
    out = tmp_path / "dev"
    out.mkdir()
    gate = {"status": "overridden", "flag": "--override-stage1-false", "stage1_decision": "false"}
    setup = StageSetup(
        matrix=matrix,
        stage="dev",
        driver={"kind": "cluster", "profile": "dev"},
        matrix_source="<default>",
        resume_command=None,
        provenance=Provenance(
            profile="profiles/dev.yaml", stage1_gate=gate, commit=None, tree=TreeState(None)
        ),
    )
    prepare_results_dir(out, setup, resume=False)
    stage = StageDir(out).read_stage()
    assert stage is not None
    assert stage.to_json()["provenance"] == {
        "harness_version": harness_version(),
        "harness_commit": None,
        "harness_dirty": None,
        "harness_diff_sha256": None,
        "simulator_parameters": None,
        "profile": "profiles/dev.yaml",
        "stage1_gate": gate,
        "seed": matrix.seed,
    }
    (out / "runs.jsonl").write_text('{"run_id": "x"}\n', encoding="utf-8")
    later = StageSetup(
        matrix=matrix,
        stage="dev",
        driver={"kind": "cluster", "profile": "dev"},
        matrix_source="<default>",
        resume_command=None,
    )
    prepare_results_dir(out, later, resume=True)
    assert StageDir(out).read_stage() == stage
    bare = tmp_path / "bare"
    bare.mkdir()
    prepare_results_dir(bare, later, resume=False)
    bare_stage = StageDir(bare).read_stage()
    assert bare_stage is not None
    assert set(bare_stage.to_json()["provenance"]) == {
        "harness_version",
        "harness_commit",
        "harness_dirty",
        "harness_diff_sha256",
        "simulator_parameters",
        "profile",
        "seed",
    }
    assert bare_stage.provenance is not None and bare_stage.provenance.profile is None
