"""The CLI's surface: every subcommand explains itself, the exit codes are
documented, and usage mistakes exit 2 with a clear message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from spillover_harness.cli import main
from spillover_operator import exit_codes

SUBCOMMANDS = [[], ["run"], ["evaluate"], ["report"], ["fixtures"], ["fixtures", "export"]]


@pytest.mark.parametrize("words", SUBCOMMANDS, ids=lambda w: " ".join(w) or "top")
def test_every_subcommand_has_help(words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*words, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: spillover-harness")
    assert len(out.splitlines()) > 5


def test_top_level_help_documents_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """The epilog is the shared table (spillover_operator.exit_codes), the harness's rows."""
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for code in (0, 1, 2, 5, 7, 8, 9, 10, 130):
        row = next(r for r in exit_codes.TABLE if r.code == code)
        assert f"  {code:<5}{row.meaning.split()[0]}" in out, code
    for line in ["8    the verdict is inconclusive", "10   another spillover-harness process"]:
        assert line in out, line
    assert "\n  3    " not in out and "\n  4    " not in out  # spilloverctl's own rows
    for command in ["run", "evaluate", "report", "fixtures"]:
        assert command in out


@pytest.mark.parametrize(
    ("words", "codes"),
    [
        (["evaluate"], (0, 1, 2, 8, 9, 130)),
        (["report"], (0, 1, 2, 8, 9, 10, 130)),
        (["preflight"], (0, 1, 2, 5, 7, 130)),
        (["fixtures", "export"], (0, 1, 2, 130)),
    ],
)
def test_each_command_lists_the_codes_it_returns(
    words: list[str], codes: tuple[int, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([*words, "--help"])
    out = capsys.readouterr().out
    listed = [int(line.split()[0]) for line in out.split("exit codes:")[1].splitlines()
              if line.startswith("  ") and line.split()[0].isdigit()]  # fmt: skip
    assert tuple(listed) == codes


def test_run_help_names_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    for option in [
        "--stage",
        "--matrix",
        "--out",
        "--resume",
        "--concurrency",
        "--no-progress",
        "--fault",
        "spill-to-disk",
        "log-results",
    ]:
        assert option in out, option


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "required"),
        (["run", "--out", "x"], "--stage"),
        (["run", "--stage", "prod", "--out", "x"], "invalid choice: 'prod'"),
        (["run", "--stage", "sim", "--out", "x", "--concurrency", "0"], "must be >= 1"),
        (["run", "--stage", "sim", "--out", "x", "--fault", "melt"], "invalid choice: 'melt'"),
        (["evaluate"], "--records"),
        (["evaluate", "--records", "r", "--format", "xml"], "invalid choice: 'xml'"),
        (["fixtures", "export"], "DIR"),
    ],
)
def test_usage_mistakes_exit_2(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert expected in capsys.readouterr().err


@pytest.mark.parametrize("stage", ["minikube", "dev"])
def test_cluster_stages_need_a_profile(
    stage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--stage", stage, "--out", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err
    assert f"stage '{stage}' runs on a cluster and needs --profile" in err
    assert not (tmp_path / "out").exists()


def test_cluster_stages_refuse_sim_only_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "out")
    base = ["run", "--stage", "minikube", "--profile", "minikube", "--out", out]
    assert main([*base, "--fault", "log-results"]) == 2
    assert "--fault is for --stage sim only" in capsys.readouterr().err
    assert main([*base, "--override-stage1", "why"]) == 2
    assert "--override-stage1 is for --stage dev only" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_bad_matrix_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "m.yaml"
    bad.write_text("name: x\ncolour: blue\n")
    code = main(["run", "--stage", "sim", "--matrix", str(bad), "--out", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: bad matrix: {bad}: ")
    assert f"{bad}: unknown key 'colour'" in err and f"{bad}: missing key 'decision'" in err
    assert "Traceback" not in err


def test_console_script_is_installed() -> None:
    exe = Path(sys.executable).parent / "spillover-harness"
    proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "exit codes" in proc.stdout
