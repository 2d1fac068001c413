"""`spillover-harness faults` (`make faults`): every switch planted, through the command a
user runs, caught by the check it proves; and a check disabled makes its switch's line
read MISSED and the command exit 6 (a proof that could not fail would prove nothing)."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest
from harness_cli import Run, run_captured
from spillover_harness.cli import main
from spillover_harness.report import memory_check
from spillover_harness.sim.faults import FAULT_SWITCHES
from spillover_harness.studies.faults import PROOFS
from spillover_operator.exit_codes import BAD_INPUT, MISMATCH, OK

SWITCHES = [f.name for f in FAULT_SWITCHES]


@pytest.fixture(scope="module")
def every_switch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str, Path]]:
    """One `faults --out DIR` of every switch, shared: about a minute of stages."""
    out = tmp_path_factory.mktemp("faults") / "out"
    stdout = io.StringIO()  # the module scope has no capsys: main's stdout, redirected
    with contextlib.redirect_stdout(stdout):
        code = main(["faults", "--out", str(out)])
    yield code, stdout.getvalue(), out


def test_every_switch_has_a_proof_and_the_catalogue_is_the_clis() -> None:
    assert [p.switch for p in PROOFS] == SWITCHES
    assert len(set(SWITCHES)) == len(SWITCHES) == 10


@pytest.mark.parametrize("switch", SWITCHES)
def test_the_switch_is_caught_by_its_check(
    every_switch: tuple[int, str, Path], switch: str
) -> None:
    code, out, _ = every_switch
    line = next(x for x in out.splitlines() if x.startswith(f"{switch}: "))
    assert re.search(r": caught \(", line) and "MISSED" not in line, line
    assert code == OK, out
    assert "faults: 10 of 10 caught" in out


def test_every_stage_is_kept_under_out(every_switch: tuple[int, str, Path]) -> None:
    _, _, out = every_switch
    for kind in ("checks", "memory"):
        assert (out / kind / "clean" / "runs.jsonl").is_file()
    for switch in SWITCHES:
        assert any((out / kind / switch / "stage.json").is_file() for kind in ("checks", "memory"))


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Run:
    return run_captured(capsys)


def test_a_claim_check_that_always_reads_within_misses_store_overhead(
    cli: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(memory_check, "CLAIM_LIMIT", Fraction(10**9))  # disabled
    code, out, err = cli(["faults", "--fault", "store-overhead", "--out", str(tmp_path / "o")])
    assert "store-overhead: " in out and "MISSED" in out, out
    assert code == MISMATCH and "missed store-overhead" in err


def test_a_leak_check_that_never_reads_leak_misses_store_leak(
    cli: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_check, "leak_reading", lambda leaked, tolerance: "none")
    code, out, _ = cli(["faults", "--fault", "store-leak"])
    assert "store-leak: " in out and "MISSED" in out and code == MISMATCH, out


def test_a_budget_read_as_0_when_unmatched_misses_budget_unreported(
    cli: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spillover_harness.drivers import sim

    real = sim.budget_reached
    monkeypatch.setattr(
        sim, "budget_reached", lambda lines, pattern, may_fill: real(lines, pattern, False)
    )
    code, out, _ = cli(["faults", "--fault", "budget-unreported"])
    assert "budget-unreported: " in out and "MISSED" in out and code == MISMATCH, out
    assert "null in 0, 0 in 6" in out


def test_a_status_report_check_with_no_limit_misses_status_report_grows(
    cli: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spillover_harness.report import status_report_check

    monkeypatch.setattr(status_report_check, "LIMIT_BYTES", 10**9)
    code, out, _ = cli(["faults", "--fault", "status-report-grows"])
    assert "status-report-grows: " in out and "MISSED" in out and code == MISMATCH, out


def test_a_quality_judge_that_passes_every_output_misses_read_tool_denied(
    cli: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spillover_harness.drivers import sim

    monkeypatch.setattr(sim, "judge_output", lambda output, fixture: True)
    code, out, _ = cli(["faults", "--fault", "read-tool-denied"])
    assert "read-tool-denied: " in out and "MISSED" in out and code == MISMATCH, out


def test_out_must_be_new_or_empty(cli: Run, tmp_path: Path) -> None:
    (tmp_path / "kept").write_text("a user's file")
    code, _, err = cli(["faults", "--fault", "store-leak", "--out", str(tmp_path)])
    assert code == BAD_INPUT and "not a new or empty directory" in err
    assert (tmp_path / "kept").read_text() == "a user's file"
