"""`spillover-harness` run in the test's own process, as the tests of its commands use
it: the `Run` signature of the `cli` fixture (tests/harness/cli/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from spillover_harness.cli import main

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
