"""One writer per results directory (issue 12, item 1), with two real processes.

Process A is a real `spillover-harness run --stage sim`, frozen with SIGSTOP once it
has recorded its first runs (so it holds the directory for as long as the test
needs). Process B, a second real CLI, is refused at once with exit LOCKED, naming
A's PID, and touches nothing; `report` into A's directory is refused the same way.
A then finishes with exactly its plan, and a later --resume works.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

from spillover_harness.plan.matrix import load_matrix
from spillover_harness.results.records import read_records
from spillover_harness.run.runner import job_key, plan_jobs
from spillover_operator.exit_codes import INCONCLUSIVE, LOCKED, OK

EXE = str(Path(sys.executable).parent / "spillover-harness")


def small_matrix(directory: Path) -> Path:
    text = (
        resources.files("spillover_harness.plan.matrices")
        .joinpath("spillover-default.yaml")
        .read_text(encoding="utf-8")
    )
    path = directory / "matrix.yaml"
    path.write_text(text.replace("  sim: 5\n", "  sim: 3\n"), encoding="utf-8")
    return path


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory under `directory`: (size, mtime in ns)."""
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
    }


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *argv], capture_output=True, text=True, timeout=120, check=False)


def test_a_second_writer_is_refused_at_once_and_touches_nothing(tmp_path: Path) -> None:
    matrix = small_matrix(tmp_path)
    out = tmp_path / "out"
    records = out / "runs.jsonl"
    run_args = ["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out)]
    log = tmp_path / "a.log"
    with log.open("wb") as handle:
        a = subprocess.Popen(
            [EXE, *run_args, "--concurrency", "1", "--no-progress"],
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while not records.exists() or records.read_bytes().count(b"\n") < 2:
            assert a.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "no record appeared"
            time.sleep(0.002)
        os.kill(a.pid, signal.SIGSTOP)  # A holds the directory, frozen mid-stage
        time.sleep(0.05)
        before = snapshot(out)

        for argv in (
            [*run_args, "--no-progress"],  # without --resume
            [*run_args, "--no-progress", "--resume"],
            ["report", "--records", str(records), "--out", str(out)],
        ):
            b = cli(*argv)
            assert b.returncode == LOCKED, b.stdout + b.stderr
            assert f"PID {a.pid}" in b.stderr and "nothing was touched" in b.stderr, b.stderr
            assert "another --out" in b.stderr
            assert "Traceback" not in b.stderr
            assert snapshot(out) == before, argv  # not a byte, not a timestamp
    finally:
        os.kill(a.pid, signal.SIGCONT)
        a.wait(timeout=300)
    assert a.returncode in (OK, INCONCLUSIVE), log.read_text()

    plan = {job_key(j) for j in plan_jobs(load_matrix(matrix), "sim", out)}
    keys = [r.key for r in read_records(records)]
    assert len(keys) == len(set(keys)) == len(plan) and set(keys) == plan
    assert not (out / ".spillover-harness.lock").exists()  # released and removed

    again = cli(*run_args, "--no-progress", "--resume")
    assert again.returncode == a.returncode, again.stderr
    assert "(0 this time" in again.stdout
