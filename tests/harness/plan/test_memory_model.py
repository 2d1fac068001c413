"""The simulated mcp-host's memory: what an execution holds over time, freed at its
end, and N executions started together."""

from __future__ import annotations

from pathlib import Path

from spillover_harness.fixtures import build_fixtures
from spillover_harness.plan.memory_model import MemoryModel, peak_at_once
from spillover_harness.sim.step import run_step
from spillover_operator.domain.model import ENABLED_VAR, THRESHOLD_VAR

SEED = 20261130
MODEL = MemoryModel(baseline_bytes=1000, limit_bytes=10_000, store_overhead=1.5)


def test_held_counts_the_store_with_its_overhead() -> None:
    assert MODEL.held(prompt_bytes=100, store_bytes=200) == 400
    assert MODEL.working_set(400) == 1400
    assert not MODEL.over_limit(9000) and MODEL.over_limit(9001)


def test_peak_at_once_adds_what_is_held_at_the_same_instant() -> None:
    a = [(0.0, 10), (1.0, 500), (3.0, 0)]
    b = [(0.0, 10), (2.0, 300), (4.0, 0)]
    assert peak_at_once([], MODEL) == 1000
    assert peak_at_once([a], MODEL) == 1500
    # at t=2: a holds 500, b 300 (a freed at 3, b's peak after it never meets a's)
    assert peak_at_once([a, b], MODEL) == 1800
    late = [(0.0, 10), (3.0, 300), (4.0, 0)]  # starts holding when a has freed
    assert peak_at_once([a, late], MODEL) == 1510


def _run(tmp_path: Path, env: dict[str, str]) -> tuple[int, list[tuple[float, int]]]:
    fixture = build_fixtures(SEED).get("code-review", "large")
    run = run_step(fixture=fixture, env=env, seed=1, repetition=1, run_id="m", output_dir=tmp_path)
    assert run.outcome == "succeeded"
    return run.peak_bytes, run.memory_trace


def test_an_execution_frees_what_it_held_at_its_end(tmp_path: Path) -> None:
    peak, trace = _run(tmp_path / "a", {THRESHOLD_VAR: "32768"})
    assert trace[-1][1] == 0
    assert [t for t, _ in trace] == sorted(t for t, _ in trace)
    assert peak == MemoryModel().working_set(max(h for _, h in trace))


def test_stored_results_cost_more_than_inline_ones(tmp_path: Path) -> None:
    """The seed's +7%: a store holding results costs more than the same bytes inline,
    so spilling every large file holds more at the peak than off."""
    off, _ = _run(tmp_path / "off", {ENABLED_VAR: "false"})
    low, _ = _run(tmp_path / "low", {THRESHOLD_VAR: "32768"})
    assert low > off > MemoryModel().baseline_bytes
