"""A stage `run --until-stable` extended, read by the other commands as a user runs them:
`plan --from` measures its rates (the added repetitions are the stage's own), and
`evaluate --format md` shows what was added, as report.md does."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pytest
import yaml
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


def _copy_with(extended: Path, tmp_path: Path, edit: Callable[[dict], None]) -> Path:
    out = tmp_path / "edited"
    shutil.copytree(extended, out)
    stage = json.loads((out / "stage.json").read_text())
    edit(stage)
    (out / "stage.json").write_text(json.dumps(stage))
    return out


def _raise_extension(stage: dict) -> None:
    cell = next(iter(stage["matrix"]["extension"]))
    stage["matrix"]["extension"][cell] += 2


def _round_to_99(stage: dict) -> None:
    rounds = stage["adaptive"]["rounds"]
    cell = next(iter(rounds[-1]["cells"]))
    rounds[-1]["cells"][cell] = 99


@pytest.mark.parametrize(
    ("edit", "field"),
    [(_raise_extension, "matrix.extension"), (_round_to_99, "adaptive.rounds")],
)
def test_a_stage_json_that_contradicts_its_rounds_is_refused(
    cli: Run, extended: Path, tmp_path: Path, edit: Callable[[dict], None], field: str
) -> None:
    """An extension raised above what its rounds recorded would report runs no round
    planned as missing; a round's cells edited would print cells that never ran. Both
    are refused with exit 2, naming the file and the field, by every command that reads
    the stage."""
    out = _copy_with(extended, tmp_path, edit)
    for argv in (["evaluate", "--records", str(out / "runs.jsonl")],
                 ["report", "--records", str(out / "runs.jsonl"), "--out", str(out)]):  # fmt: skip
        code, _, stderr = cli(argv)
        assert code == exit_codes.BAD_INPUT, (argv, stderr)
        assert "stage.json" in stderr and field in stderr, stderr
        assert "Traceback" not in stderr


def test_a_users_matrix_cannot_carry_an_extension(cli: Run, tmp_path: Path) -> None:
    """`extension` is what a stage records of its rounds, not a matrix key: in a user's
    matrix it would silently run 66 runs instead of 60."""
    default = resources.files("spillover_harness.plan.matrices") / "spillover-default.yaml"
    data = yaml.safe_load(default.read_text(encoding="utf-8"))
    data["extension"] = {"code-review/small": 7}
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(data))
    out = tmp_path / "sim"
    code, _, stderr = cli(["run", "--stage", "sim", "--matrix", str(matrix),
                                "--out", str(out)])  # fmt: skip
    assert code == exit_codes.BAD_INPUT
    assert "unknown key 'extension'" in stderr and "raise `repetitions`" in stderr
    assert not out.exists()
