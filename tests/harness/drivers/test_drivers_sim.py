"""SimDriver: one job -> one complete run record, with the leak checks of criterion 5."""

from __future__ import annotations

import threading
from functools import cache
from pathlib import Path

from spillover_harness.drivers.base import RunJob
from spillover_harness.drivers.sim import SimDriver
from spillover_harness.fixtures import FixtureSet, build_fixtures
from spillover_harness.plan.matrix import Configuration, InputSpec
from spillover_harness.results.records import OPTIONAL_FIELDS, RunRecord
from spillover_harness.sim.steprun import SimFaults
from spillover_operator.domain.model import ENABLED_VAR, THRESHOLD_VAR

SEED = 424242
OFF = Configuration(name="off", env={ENABLED_VAR: "false"})
DEFAULT = Configuration(name="128KiB", env={})
KIB32 = Configuration(name="32KiB", env={THRESHOLD_VAR: "32768"})


@cache
def fixtures() -> FixtureSet:
    return build_fixtures(SEED)


def job(
    out: Path,
    config: Configuration = DEFAULT,
    recipe: str = "code-review",
    name: str = "large",
    size_class: str = "large",
    rep: int = 1,
    timeout_s: float = 900.0,
) -> RunJob:
    return RunJob(
        run_id=f"sim-{config.name}-{recipe}-{name}-r{rep}",
        stage="sim",
        config=config,
        recipe=recipe,
        input=InputSpec(name=name, size_class=size_class),  # type: ignore[arg-type]
        repetition=rep,
        seed=SEED + rep,
        timeout_s=timeout_s,
        out_dir=out,
    )


def run(driver: SimDriver, j: RunJob, cancel: threading.Event | None = None) -> RunRecord:
    return driver.run(j, cancel or threading.Event())


def test_a_run_fills_every_field_and_writes_its_directory(tmp_path: Path) -> None:
    record = run(SimDriver(fixtures=fixtures()), job(tmp_path))
    assert record.outcome == "succeeded" and record.stage == "sim"
    for name, value in record.model_dump().items():
        if name not in OPTIONAL_FIELDS:  # the cache's and the cluster stages' fields
            assert value is not None, name
    assert record.cache_evictions is None and record.cache_ref_misses is None
    assert record.spillover_persisted == 3 and record.spillover_reads
    assert record.quality_ok and record.disk_clean and record.logs_clean
    assert record.hit_iteration_limit is False
    run_dir = tmp_path / "runs" / record.run_id
    assert (run_dir / "output" / "review.md").is_file()
    assert (run_dir / "output" / "result.json").is_file()
    assert (run_dir / "status-report.json").stat().st_size == record.status_report_bytes
    assert (run_dir / "logs.jsonl").read_text().count("LLM call started") == record.iterations
    RunRecord.from_json(record.to_json())  # schema 1 round trip


def test_off_run_measures_zero_spillover_not_null(tmp_path: Path) -> None:
    record = run(
        SimDriver(fixtures=fixtures()), job(tmp_path, OFF, "code-review", "small", "small")
    )
    assert record.spillover_persisted == 0 and record.spillover_reads == 0


def test_spill_to_disk_fault_is_caught(tmp_path: Path) -> None:
    driver = SimDriver(SimFaults(write_spill_to_disk=True), fixtures=fixtures())
    record = run(driver, job(tmp_path))
    assert record.disk_clean is False and record.logs_clean is True
    assert any(n.startswith("disk: spill entry output/.spill") for n in record.notes)
    off = run(driver, job(tmp_path, OFF))
    assert off.disk_clean is True  # nothing spills with spillover off


def test_log_results_fault_is_caught_without_repeating_the_content(tmp_path: Path) -> None:
    driver = SimDriver(SimFaults(log_tool_results=True), fixtures=fixtures())
    fixture = fixtures().get("code-review", "small")
    record = run(driver, job(tmp_path, DEFAULT, "code-review", "small", "small"))
    assert record.logs_clean is False and record.disk_clean is True
    leak_notes = [n for n in record.notes if n.startswith("logs: ")]
    assert leak_notes
    for note in record.notes:
        assert not any(c in note for c in fixture.canaries)


def test_deterministic_for_the_same_job(tmp_path: Path) -> None:
    driver = SimDriver(fixtures=fixtures())
    a = run(driver, job(tmp_path / "a", KIB32, "summarize", "document", "medium", rep=2))
    b = run(driver, job(tmp_path / "b", KIB32, "summarize", "document", "medium", rep=2))
    skip = {"started_at", "finished_at"}
    assert {k: v for k, v in a.model_dump().items() if k not in skip} == {
        k: v for k, v in b.model_dump().items() if k not in skip
    }


def test_a_rerun_starts_from_a_clean_directory(tmp_path: Path) -> None:
    broken = SimDriver(SimFaults(write_spill_to_disk=True), fixtures=fixtures())
    assert run(broken, job(tmp_path)).disk_clean is False
    again = run(SimDriver(fixtures=fixtures()), job(tmp_path))
    assert again.disk_clean is True


def test_unknown_input_is_a_harness_error_record(tmp_path: Path) -> None:
    record = run(SimDriver(fixtures=fixtures()), job(tmp_path, name="huge"))
    assert record.outcome == "harness_error"
    assert record.input_tokens is None and record.quality_ok is None
    assert any("huge" in n for n in record.notes)


def test_cancel_and_timeout(tmp_path: Path) -> None:
    driver = SimDriver(fixtures=fixtures())
    cancel = threading.Event()
    cancel.set()
    aborted = run(driver, job(tmp_path, rep=1), cancel)
    assert aborted.outcome == "aborted" and aborted.quality_ok is None
    timed = run(driver, job(tmp_path, rep=2, timeout_s=2.0))
    assert timed.outcome == "timed_out" and timed.quality_ok is False


def test_size_class_mismatch_is_noted(tmp_path: Path) -> None:
    record = run(SimDriver(fixtures=fixtures()), job(tmp_path, size_class="small"))
    assert record.size_class == "small"
    assert any("size class" in n for n in record.notes)


def test_default_fixtures_come_from_the_fixture_seed(tmp_path: Path) -> None:
    driver = SimDriver(fixture_seed=SEED)
    assert driver.fixtures.get("summarize", "document") == fixtures().get("summarize", "document")


def test_a_run_records_its_memory_and_its_budget_fallbacks(tmp_path: Path) -> None:
    """The sim's mcp-host memory (plan/memory_model.py) and whether the budget was found
    full (`budget_inline`, read from the warning as on a cluster: 1, however many results
    were kept inline), on the `budget` input at the smallest budget."""
    from spillover_harness.plan.memory_model import MemoryModel
    from spillover_operator.domain.model import BUDGET_VAR

    small = Configuration(name="1MiB", env={BUDGET_VAR: "1048576"})
    driver = SimDriver(fixtures=fixtures())
    at_1mib = run(driver, job(tmp_path, small, name="budget"))
    assert at_1mib.budget_inline == 1
    # the warning once per step execution, as the mcp-host logs it, however many
    assert sum("budget reached" in line for line in _log(tmp_path, at_1mib)) == 1
    default = run(driver, job(tmp_path, DEFAULT, name="budget"))
    assert default.budget_inline == 0  # 16 MiB: everything over 128 KiB fits
    mem = default.mcp_host_memory
    assert mem is not None and mem.limit_bytes == MemoryModel().limit_bytes
    assert mem.peak_bytes is not None and mem.peak_bytes > MemoryModel().baseline_bytes
    assert (mem.restarts, mem.oom_kills, mem.block) == (0, 0, None)
    # the model frees what an execution holds at its end: start and end at the baseline
    assert mem.start_bytes == mem.end_bytes == MemoryModel().baseline_bytes
    RunRecord.from_json(default.to_json())

    # a limit just above the baseline: the mcp-host is OOM-killed and the run fails
    tight = MemoryModel(baseline_bytes=8 << 20, limit_bytes=(8 << 20) + 65536)
    killed = run(SimDriver(fixtures=fixtures(), memory=tight), job(tmp_path / "k"))
    assert killed.outcome == "failed"
    assert killed.mcp_host_memory is not None
    assert (killed.mcp_host_memory.oom_kills, killed.mcp_host_memory.restarts) == (1, 1)
    assert killed.mcp_host_memory.peak_bytes == tight.limit_bytes
    assert any("OOM-killed" in n for n in killed.notes)


def _log(out: Path, record: RunRecord) -> list[str]:
    return (out / "runs" / record.run_id / "logs.jsonl").read_text().splitlines()


def test_a_step_at_the_defaults_fills_the_whole_16_mib_budget(tmp_path: Path) -> None:
    """code-review/budget-16MiB (built on first use) at the shipped defaults: seven of
    its eight ~2.2 MB files are stored, the budget is then full, the last is kept
    inline (`budget_inline` 1) and the mcp-host warns once for the step execution. The
    inline result is ~2.2 MB, past the simulated context window: the step fails there,
    as a real one would, with the budget full and its memory held."""
    fresh = build_fixtures(SEED)  # its own set: the lazy input built here
    assert ("code-review", "budget-16MiB") not in {(f.recipe, f.input_name) for f in fresh}
    record = run(
        SimDriver(fixtures=fresh),
        job(tmp_path, DEFAULT, "code-review", "budget-16MiB", "large"),
    )
    assert record.budget_inline == 1 and record.spillover_persisted == 7
    assert record.outcome == "failed" and record.logs_clean
    assert record.mcp_host_memory is not None and record.mcp_host_memory.peak_bytes is not None
    held = record.mcp_host_memory.peak_bytes - SimDriver(fixtures=fresh).memory.baseline_bytes
    assert held > 15 * 1024 * 1024  # the store's ~15.7 MB, with its overhead
    logs = list(tmp_path.rglob("logs.jsonl"))
    assert len(logs) == 1
    lines = logs[0].read_text(encoding="utf-8").splitlines()
    warnings = [line for line in lines if "budget reached" in line]
    assert len(warnings) == 1 and '"budgetBytes":16777216' in warnings[0]
    assert ("code-review", "budget-16MiB") in {(f.recipe, f.input_name) for f in fresh}
