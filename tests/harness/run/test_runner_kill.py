"""Real interruptions of `spillover-harness run --stage sim` (a subprocess with the
real SimDriver): SIGKILL mid-matrix then `--resume` gives exactly the planned
records; SIGINT / SIGTERM exit 130 with a valid file and say how to resume.

To interrupt "mid-matrix" deterministically the test freezes the process with
SIGSTOP as soon as runs.jsonl has records, checks that runs are still to go,
and only then delivers the signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pytest
from spillover_harness.plan.matrix import load_matrix
from spillover_harness.results.records import RunKey, read_records
from spillover_harness.run.runner import job_key, plan_jobs
from spillover_operator.exit_codes import INCONCLUSIVE, INTERRUPTED, OK

EXE = str(Path(sys.executable).parent / "spillover-harness")
REPS = 4  # 3 configs x 4 inputs x 4 reps = 48 runs


def small_matrix(directory: Path) -> Path:
    text = (
        resources.files("spillover_harness.plan.matrices")
        .joinpath("spillover-default.yaml")
        .read_text(encoding="utf-8")
    )
    path = directory / "matrix.yaml"
    path.write_text(text.replace("  sim: 5\n", f"  sim: {REPS}\n"), encoding="utf-8")
    return path


def planned(matrix: Path, out: Path) -> set[RunKey]:
    return {job_key(j) for j in plan_jobs(load_matrix(matrix), "sim", out)}


def count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def start(matrix: Path, out: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as handle:
        return subprocess.Popen(
            [
                EXE,
                "run",
                "--stage",
                "sim",
                "--matrix",
                str(matrix),
                "--out",
                str(out),
                "--concurrency",
                "1",
                "--no-progress",
            ],
            stdout=handle,
            stderr=subprocess.STDOUT,
        )


def freeze_mid_matrix(proc: subprocess.Popen[bytes], records: Path, total: int) -> int:
    """Wait for the first records, SIGSTOP the process, return the lines recorded."""
    deadline = time.monotonic() + 120
    while count_lines(records) < 2:
        assert proc.poll() is None, "the stage ended before it could be interrupted"
        assert time.monotonic() < deadline, "no record appeared"
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGSTOP)
    time.sleep(0.05)
    done = count_lines(records)
    assert done <= total - 3, f"too late to interrupt: {done}/{total} already recorded"
    return done


def resume(matrix: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            EXE,
            "run",
            "--stage",
            "sim",
            "--matrix",
            str(matrix),
            "--out",
            str(out),
            "--resume",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.parametrize("torn", [False, True], ids=["clean-kill", "kill-mid-write"])
def test_sigkill_mid_matrix_then_resume_gives_exactly_the_plan(tmp_path: Path, torn: bool) -> None:
    matrix = small_matrix(tmp_path)
    out = tmp_path / "out"
    records_path = out / "runs.jsonl"
    plan = planned(matrix, out)
    proc = start(matrix, out, tmp_path / "first.log")
    try:
        freeze_mid_matrix(proc, records_path, len(plan))
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    before = read_records(records_path)  # what SIGKILL left is a valid file
    assert 2 <= len(before) < len(plan)
    if torn:  # as if the kill had landed in the middle of an append
        with records_path.open("a") as handle:
            handle.write('{"schema": 1, "run_id": "sim-32KiB-code-review-lar')

    done = resume(matrix, out)
    assert done.returncode in (OK, INCONCLUSIVE), done.stdout + done.stderr
    assert "decision: " in done.stdout and "report: " in done.stdout
    after = read_records(records_path)
    keys = [r.key for r in after]
    assert len(keys) == len(set(keys)), "a run was recorded twice"
    assert set(keys) == plan, "a run is missing or unexpected"
    assert after[: len(before)] == before, "a record was rewritten"
    assert f"{len(before)} runs already recorded" in done.stderr
    if torn:
        assert (out / "runs.jsonl.torn-1").read_text().startswith('{"schema": 1')
        assert "moved aside" in done.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_exits_130_with_a_valid_file_and_resume_completes(
    tmp_path: Path, sig: signal.Signals
) -> None:
    matrix = small_matrix(tmp_path)
    out = tmp_path / "out"
    records_path = out / "runs.jsonl"
    plan = planned(matrix, out)
    log = tmp_path / "first.log"
    proc = start(matrix, out, log)
    try:
        frozen_at = freeze_mid_matrix(proc, records_path, len(plan))
        os.kill(proc.pid, sig)
        os.kill(proc.pid, signal.SIGCONT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = log.read_text()
    assert proc.returncode == INTERRUPTED, output
    assert f"interrupted by {sig.name}" in output
    assert "--resume" in output and f"--out {out}" in output
    before = read_records(records_path)
    assert frozen_at <= len(before) < len(plan)
    assert not (out / "report.md").exists()  # no verdict from a partial stage

    done = resume(matrix, out)
    assert done.returncode in (OK, INCONCLUSIVE), done.stdout + done.stderr
    after = read_records(records_path)
    assert len(after) == len(plan) and {r.key for r in after} == plan
    assert after[: len(before)] == before
