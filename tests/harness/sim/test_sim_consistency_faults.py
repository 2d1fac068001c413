"""Each consistency fault switch of the simulator changes what the consistency checks
say (checks/consistency.py), and without it they pass."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from spillover_harness.checks.consistency import check_run
from spillover_harness.cluster.configs import expected_env
from spillover_harness.fixtures import Fixture, build_fixtures
from spillover_harness.plan.matrix import Configuration
from spillover_harness.sim.metrics import (
    FIRST_PARTY_OUTPUT_METRIC,
    FIRST_PARTY_PERSISTED_METRIC,
    SpilloverMetrics,
)
from spillover_harness.sim.step import run_step
from spillover_harness.sim.steprun import SimFaults
from spillover_operator.domain.model import ENABLED_VAR, THRESHOLD_VAR

SEED = 20261130


@cache
def fx(recipe: str, name: str) -> Fixture:
    return build_fixtures(SEED).get(recipe, name)


def problems(
    tmp: Path, env: dict[str, str], faults: SimFaults, fixture: Fixture
) -> list[str] | None:
    run = run_step(
        fixture=fixture,
        env=env,
        seed=SEED,
        repetition=1,
        run_id="r1",
        output_dir=tmp / "out",
        faults=faults,
    )
    config = Configuration.model_validate({"name": "c", "env": env})
    return check_run(expected_env(config), fixture, run.persisted, run.outcome)


def test_an_mcp_host_that_ignores_the_env_breaks_a_set_threshold(tmp_path: Path) -> None:
    off = {ENABLED_VAR: "false"}
    large = fx("summarize", "document")
    kib32 = {THRESHOLD_VAR: "32768"}
    assert problems(tmp_path / "a", off, SimFaults(), large) == []
    assert problems(tmp_path / "b", kib32, SimFaults(), large) == []
    assert problems(tmp_path / "c", kib32, SimFaults(ignore_env=True), large)


def test_a_drifted_default_threshold_breaks_the_unset_threshold(tmp_path: Path) -> None:
    doc = fx("summarize", "document")
    assert problems(tmp_path / "a", {}, SimFaults(), doc) == []
    broken = problems(tmp_path / "b", {}, SimFaults(default_threshold=32768), doc)
    assert broken and "stays below the threshold 131072" in broken[0]


def test_fed_first_party_counters_move(tmp_path: Path) -> None:
    doc = fx("summarize", "document")
    for faults, moved in ((SimFaults(), False), (SimFaults(feed_first_party=True), True)):
        metrics = SpilloverMetrics()
        run_step(
            fixture=doc,
            env={THRESHOLD_VAR: "32768"},
            seed=SEED,
            repetition=1,
            run_id="r1",
            output_dir=tmp_path / str(moved),
            faults=faults,
            metrics=metrics,
        )
        assert (metrics.value(FIRST_PARTY_PERSISTED_METRIC) > 0) is moved
        assert b"clerum_spillover_persisted_total" in metrics.exposition()
        # the first-party histogram: every tool output of the run, only under the fault
        outputs = metrics.value(f"{FIRST_PARTY_OUTPUT_METRIC}_count", tool="read_document")
        assert (outputs > 0) is moved
        assert b"# TYPE clerum_tool_output_bytes histogram" in metrics.exposition()
