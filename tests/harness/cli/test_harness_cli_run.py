"""`spillover-harness run --stage sim` end to end with the real SimDriver, on a
reduced copy of the default matrix (2 repetitions): decision printed, report
written, faults caught, results directories refused when they must be."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from spillover_harness.cli import main
from spillover_harness.plan.matrix import load_matrix
from spillover_harness.results.records import read_records
from spillover_harness.run.runner import job_key, plan_jobs
from spillover_operator.exit_codes import BAD_INPUT, INCONCLUSIVE, OK

DECISIONS = {"131072", "32768", "false", "inconclusive"}
CRITERIA = {"success_rate", "iteration_limit", "input_tokens", "summary_quality", "no_leak"}


def small_matrix(directory: Path, *, reps: int = 2, seed: int | None = None) -> Path:
    """The packaged default matrix with `sim: reps` (and optionally another seed)."""
    text = (
        resources.files("spillover_harness.plan.matrices")
        .joinpath("spillover-default.yaml")
        .read_text(encoding="utf-8")
    )
    assert "  sim: 5\n" in text
    text = text.replace("  sim: 5\n", f"  sim: {reps}\n")
    if seed is not None:
        text = text.replace("seed: 20261130", f"seed: {seed}")
    path = directory / f"matrix-sim{reps}-{seed}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def sim_args(matrix: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out), *extra]


def test_run_sim_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix_path = small_matrix(tmp_path)
    out = tmp_path / "results" / "sim"
    code, stdout, stderr = run_cli(sim_args(matrix_path, out, "--no-progress"), capsys)

    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["decision"] in DECISIONS
    assert code == (INCONCLUSIVE if verdict["decision"] == "inconclusive" else OK)
    lines = stdout.splitlines()
    assert lines[-5].startswith(f"decision: {verdict['decision']}")
    assert lines[-4].startswith("not exercised: ")
    assert lines[-3].startswith(f"reproducibility: {verdict['decision']}; a fresh sim stage")
    assert f"with probability {verdict['reproducibility']['decision']:.2f}" in lines[-3]
    assert lines[-2].startswith("stability: ")
    assert f"of {verdict['stability']['resamples']} resamples" in lines[-2]
    assert lines[-1] == f"report: {out / 'report.md'}"
    assert f"records: {out / 'runs.jsonl'}" in lines
    assert (out / "report.md").read_text().strip()
    assert set(verdict["configs"]) == {"128KiB", "32KiB"}
    for cfg in verdict["configs"].values():
        assert set(cfg["criteria"]) == CRITERIA

    records = read_records(out / "runs.jsonl")
    matrix = load_matrix(matrix_path)
    planned = {job_key(j) for j in plan_jobs(matrix, "sim", out)}
    assert len(records) == 3 * 4 * 2 == len(planned)
    assert {r.key for r in records} == planned
    assert not [r for r in records if r.outcome == "harness_error"], [
        r.notes for r in records if r.outcome == "harness_error"
    ]
    # configurations interleaved in the file, not all of `off` first
    assert len({r.config for r in records[:6]}) >= 2
    stage = json.loads((out / "stage.json").read_text())
    assert stage["driver"] == {"kind": "sim", "faults": []}
    assert stage["matrix_source"] == str(matrix_path)
    # progress went to stderr as plain lines, never the records' content
    assert "[sim] 24/24 runs" in stderr


def test_the_default_matrix_decides_131072_on_the_simulator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The seed's matrix, unchanged but for the repetitions: the simulator's model
    of the 128 KiB default passes against `off`."""
    out = tmp_path / "sim"
    code, stdout, _ = run_cli(
        sim_args(small_matrix(tmp_path, reps=3), out, "--no-progress"), capsys
    )
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["decision"] == "131072", verdict["decision_reason"]
    assert code == OK
    assert "decision: 131072 (128KiB passed)" in stdout.splitlines()


@pytest.mark.parametrize("fault", ["spill-to-disk", "log-results"])
def test_a_fault_makes_no_leak_fail(
    fault: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / fault
    code, stdout, stderr = run_cli(
        sim_args(small_matrix(tmp_path), out, "--no-progress", "--fault", fault), capsys
    )
    verdict = json.loads((out / "verdict.json").read_text())
    for name in ("128KiB", "32KiB"):
        no_leak = verdict["configs"][name]["criteria"]["no_leak"]
        assert no_leak["status"] == "fail", (name, no_leak)
        assert verdict["configs"][name]["verdict"] == "fail"
    assert verdict["decision"] == "false"
    assert code == OK  # `false` is a decision, not an error
    decision = next(line for line in stdout.splitlines() if line.startswith("decision: "))
    assert decision.startswith("decision: false (128KiB failed: ")
    assert decision.count("no_leak") == 2 and "; 32KiB failed: " in decision
    assert f"faults injected into the simulator: {fault}" in stderr
    assert json.loads((out / "stage.json").read_text())["driver"]["faults"] == [fault]


@pytest.mark.parametrize(
    ("fault", "broken_on"),
    [
        # the baseline `off` runs spillover anyway: it persists results
        ("ignore-env", "off"),
        # 128KiB (every variable unset) spills at 32768: the ~104 KB document persists
        ("default-threshold", "128KiB"),
        # every spilled result also moves the first-party counters
        ("first-party", "128KiB"),
    ],
)
def test_a_consistency_fault_breaks_a_check_and_changes_the_decision(
    fault: str, broken_on: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The faults the consistency checks must catch (checks/consistency.py): the runs
    say so, the configuration cannot pass, and the clean decision (131072) is lost."""
    out = tmp_path / fault
    code, _, stderr = run_cli(
        sim_args(small_matrix(tmp_path), out, "--no-progress", "--fault", fault), capsys
    )
    records = read_records(out / "runs.jsonl")
    broken = [r for r in records if r.consistency_ok is False]
    assert broken and broken_on in {r.config for r in broken}, fault
    assert all(any(n.startswith("consistency: ") for n in r.notes) for r in broken)
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["decision"] != "131072", verdict["decision_reason"]
    assert "consistency" in verdict["decision_reason"]
    assert f"faults injected into the simulator: {fault}" in stderr
    assert json.loads((out / "stage.json").read_text())["driver"]["faults"] == [fault]
    report = (out / "report.md").read_text(encoding="utf-8")
    assert f"**Faults injected into the simulator: `{fault}`.**" in report
    assert code in (OK, INCONCLUSIVE)
    # a faulted stage is never a decision to apply, even knowingly simulated
    refused = main(["apply-decision", "--results", str(out), "--dry-run", "--allow-simulated"])
    assert refused == BAD_INPUT
    assert "never a decision to apply" in capsys.readouterr().err


def test_a_clean_sim_run_is_consistent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "clean"
    run_cli(sim_args(small_matrix(tmp_path, reps=1), out, "--no-progress"), capsys)
    records = read_records(out / "runs.jsonl")
    assert {r.consistency_ok for r in records} == {True}, [
        (r.run_id, r.notes) for r in records if r.consistency_ok is not True
    ]


def test_an_existing_results_dir_is_refused_without_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix = small_matrix(tmp_path, reps=1)
    out = tmp_path / "out"
    first, _, _ = run_cli(sim_args(matrix, out, "--no-progress"), capsys)
    assert first in (OK, INCONCLUSIVE)
    before = (out / "runs.jsonl").read_bytes()

    code, stdout, stderr = run_cli(sim_args(matrix, out, "--no-progress"), capsys)
    assert code == BAD_INPUT and stdout == ""
    assert "already holds run records" in stderr and "records are never overwritten" in stderr
    assert "--resume" in stderr and "another --out" in stderr
    assert (out / "runs.jsonl").read_bytes() == before

    # resuming a complete stage runs nothing and reports again
    code, stdout, _ = run_cli(sim_args(matrix, out, "--no-progress", "--resume"), capsys)
    assert code == first and "(0 this time" in stdout
    assert (out / "runs.jsonl").read_bytes() == before


def test_resume_with_another_matrix_or_faults_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusal says what changed (fields of the matrix, fault switches), never two
    hashes, and gives the exact command that continues the stage as it was made."""
    matrix = small_matrix(tmp_path, reps=1)
    out = tmp_path / "out"
    run_cli(sim_args(matrix, out, "--no-progress"), capsys)
    before = (out / "runs.jsonl").read_bytes()
    made_with = (
        f"spillover-harness run --stage sim --matrix {matrix} --out {out} --no-progress --resume"
    )

    other = small_matrix(tmp_path, reps=1, seed=42)
    code, _, stderr = run_cli(sim_args(other, out, "--no-progress", "--resume"), capsys)
    assert code == BAD_INPUT
    assert f"refusing to resume into {out}: its records were made with another matrix" in stderr
    assert "  - matrix seed: 20261130 -> 42" in stderr.splitlines()
    assert "sha256" not in stderr
    assert f"To continue that stage as it was made: {made_with}" in stderr

    code, _, stderr = run_cli(
        sim_args(matrix, out, "--no-progress", "--resume", "--fault", "log-results"), capsys
    )
    assert code == BAD_INPUT
    assert "its records were made with other fault switches" in stderr
    assert "  - fault switches: none -> log-results" in stderr.splitlines()
    assert "different matrices" not in stderr and "another matrix" not in stderr
    assert f"To continue that stage as it was made: {made_with}" in stderr
    assert (out / "runs.jsonl").read_bytes() == before


def test_out_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    code, _, stderr = run_cli(sim_args(small_matrix(tmp_path, reps=1), target), capsys)
    assert code == BAD_INPUT and "is not a directory" in stderr


def test_a_memory_hungry_matrix_shows_its_peak_and_the_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The packaged memory-budget matrix (a small simulated limit, the 1 MiB budget,
    the full 16 MiB budget, a concurrency lane): report.md shows each configuration's
    peak against its limit, the results kept inline because the budget was full, the
    lane, and the warnings."""
    matrix = Path(
        str(resources.files("spillover_harness.plan.matrices").joinpath("memory-budget.yaml"))
    )
    out = tmp_path / "sim"
    code, _, err = run_cli([*sim_args(matrix, out), "--no-progress"], capsys)
    # off never completes code-review/budget-16MiB (18 MB inline, past even a 1M-token
    # window): criterion 3 holds 128KiB against off's runs that ended early (lower
    # bounds) and says so, so the demo still decides (exit 0)
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    assert (code, verdict["decision"]) == (OK, "false"), err
    tokens = verdict["configs"]["128KiB"]["criteria"]["input_tokens"]["cells"]
    budget = next(c for c in tokens if c["input"] == "budget-16MiB")
    assert budget["baseline_counts"]["completed"] == 0
    assert "off completed no run: its median is over its 2 run(s)" in budget["reason"]
    # issue 38: the claim on the store's own bytes at the full budget, the headroom from
    # that cell (128KiB completes it), none for off, whose lane runs there end early
    memory = verdict["memory"]["configs"]
    assert (memory["128KiB"]["claim"], memory["128KiB"]["leak"]) == ("within", "none")
    assert memory["128KiB"]["headroom_executions"] == 1
    assert memory["off"]["headroom_executions"] is None
    assert "ended early" in memory["off"]["reasons"]["headroom_executions"]
    report = (out / "report.md").read_text(encoding="utf-8")
    section = report.split("## mcp-host memory", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in section.splitlines() if line.startswith("| 128KiB |"))
    assert "28.0 MiB" in row and "%" in row
    # the 1 MiB budget on `budget` and `budget-16MiB`, the 16 MiB one on `budget-16MiB`
    assert " in 2 run(s)" in row  # results kept inline because the budget was full
    budget_row = next(
        line for line in section.splitlines() if line.startswith("| 128KiB-budget-1MiB |")
    )
    assert " in 4 run(s)" in budget_row
    assert "**Concurrency lane** (code-review/budget-16MiB" in section
    assert "**Warning:** `128KiB`: the mcp-host's peak working set" in section
    assert "`128KiB` with 2 execution(s) at once: the working set would reach" in section
    records = read_records(out / "runs.jsonl")
    assert all(r.mcp_host_memory is not None for r in records)
    assert sum(r.budget_inline or 0 for r in records if r.config == "128KiB-budget-1MiB") > 0
    full = [r for r in records if r.config == "128KiB" and r.input == "budget-16MiB"]
    assert len(full) == 2 and all(r.budget_inline == 1 for r in full)  # the full 16 MiB
    assert (out / "memory-lane.json").is_file()


def test_the_default_matrix_reports_memory_without_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sim"
    code, _, err = run_cli(
        [*sim_args(small_matrix(tmp_path, reps=1), out), "--no-progress"], capsys
    )
    assert code in (OK, INCONCLUSIVE), err
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## mcp-host memory" in report
    assert "No configuration came within 80% of its limit" in report
    assert not (out / "memory-lane.json").exists()
