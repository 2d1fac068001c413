"""Fixtures shared by the tests of the harness's commands."""

from __future__ import annotations

import pytest
from harness_cli import Run, run_captured


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Run:
    """`spillover-harness ARGV` in this process: (exit code, stdout, stderr)."""
    return run_captured(capsys)
