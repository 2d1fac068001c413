"""A stage `run --until-stable` extended, read by the other commands as a user runs them:
`plan --from` measures its rates (the added repetitions are the stage's own), and
`evaluate --format md` shows what was added, as report.md does."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness_cli import Run
from spillover_operator import exit_codes


@pytest.fixture(scope="module")
def extended(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default sim stage, extended by `--until-stable 0.99` (above what it reaches at
    the matrix's 5 repetitions) up to 7 per cell."""
    from spillover_harness.cli import main

    out = tmp_path_factory.mktemp("extended") / "sim"
    argv = ["run", "--stage", "sim", "--out", str(out), "--no-progress",
            "--until-stable", "0.99", "--max-repetitions", "7"]  # fmt: skip
    assert main(argv) == exit_codes.OK
    assert "extension" in (out / "stage.json").read_text()
    return out


def test_plan_from_an_extended_stage(cli: Run, extended: Path) -> None:
    code, stdout, stderr = cli(["plan", "--stage", "dev", "--from", str(extended)])
    assert code == exit_codes.OK, stderr
    assert "outside the matrix" not in stderr
    assert f"measured in {extended}" in stdout


def test_evaluate_md_shows_the_repetitions_added(cli: Run, extended: Path) -> None:
    code, stdout, stderr = cli(["evaluate", "--records", str(extended / "runs.jsonl")])
    assert code == exit_codes.OK, stderr
    assert "**Repetitions added (`--until-stable`):**" in stdout
    assert "**Repetitions added (`--until-stable`):**" in (extended / "report.md").read_text()
