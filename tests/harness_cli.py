"""`spillover-harness` run in the test's own process, as the tests of its commands use
it: the `Run` signature of the `cli` fixture (tests/harness/cli/conftest.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spillover_harness.cli import main
from spillover_operator.exit_codes import OK

# argv -> (exit code, stdout, stderr)
Run = Callable[[list[str]], tuple[int, str, str]]


def run_captured(capsys: pytest.CaptureFixture[str]) -> Run:
    """A `Run` that calls the console script's `main` and returns what it printed."""

    def run(argv: list[str]) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err

    return run


def run_sim_stage(root: Path, matrix_text: str) -> Path:
    """A whole simulated stage of `matrix_text` in `root`/sim, run through `run` as a user
    runs it; its results directory."""
    matrix = root / "matrix.yaml"
    matrix.write_text(matrix_text, encoding="utf-8")
    out = root / "sim"
    argv = ["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out), "--no-progress"]
    assert main(argv) == OK
    return out


def lines_of(results: Path) -> list[dict[str, Any]]:
    """The records of `results`/runs.jsonl as plain JSON objects (to edit)."""
    text = (results / "runs.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def write_lines(results: Path, records: list[dict[str, Any]]) -> None:
    """Replace `results`/runs.jsonl with `records`."""
    text = "".join(json.dumps(r) + "\n" for r in records)
    (results / "runs.jsonl").write_text(text, encoding="utf-8")
