"""Cluster stage pieces that need no cluster: the block order, the policy mapping,
and the runner's StageAbort / order hooks (the Stage 1 gate: test_cluster_stage1_gate.py)."""

from __future__ import annotations

import json
import threading
from functools import partial
from pathlib import Path

import pytest
from spillover_harness.cluster.configs import ConfigApplyError, expected_env, policy_fields
from spillover_harness.drivers.base import RunJob, StageAbort
from spillover_harness.drivers.sim import SimDriver
from spillover_harness.plan.matrix import Configuration, load_matrix
from spillover_harness.results.records import RunRecord
from spillover_harness.run.runner import plan_jobs, run_stage
from spillover_harness.stages.cluster_plan import block_order, switches

ENABLED = "CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED"
THRESHOLD = "CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD"
BUDGET = "CLERUM_WORKFLOW_TOOL_SPILLOVER_BUDGET_BYTES"


def test_block_order_runs_configuration_blocks_rotated_per_round(tmp_path: Path) -> None:
    matrix = load_matrix()
    jobs = plan_jobs(matrix, "minikube", tmp_path)
    names = [c.name for c in matrix.configurations]
    ordered = block_order(jobs, names)
    assert sorted(j.run_id for j in ordered) == sorted(j.run_id for j in jobs)
    blocks: list[tuple[int, str]] = []
    for job in ordered:
        if not blocks or blocks[-1] != (job.repetition, job.config.name):
            blocks.append((job.repetition, job.config.name))
    assert blocks == [
        (1, "off"), (1, "128KiB"), (1, "32KiB"),
        (2, "128KiB"), (2, "32KiB"), (2, "off"),
    ]  # fmt: skip
    assert switches(ordered) == 6 < switches(jobs)
    cells = [
        (j.recipe, j.input.name) for j in ordered if j.repetition == 1 and j.config.name == "off"
    ]
    assert cells == [(r.name, i.name) for r, i in matrix.cells()]


def test_policy_fields_and_expected_env() -> None:
    off = Configuration(name="off", env={ENABLED: "false"})
    default = Configuration(name="128KiB", env={})
    small = Configuration(name="32KiB", env={THRESHOLD: "32768", BUDGET: "2097152"})
    assert policy_fields(off) == {"enabled": False, "thresholdBytes": None, "budgetBytes": None}
    # `enabled` is required by the CRD: an unset switch is written as its default (true)
    assert policy_fields(default) == {"enabled": True, "thresholdBytes": None, "budgetBytes": None}
    assert policy_fields(small) == {
        "enabled": True,
        "thresholdBytes": 32768,
        "budgetBytes": 2097152,
    }
    assert expected_env(off) == {ENABLED: "false", THRESHOLD: None, BUDGET: None}
    assert expected_env(default) == {ENABLED: "true", THRESHOLD: None, BUDGET: None}
    assert expected_env(small) == {ENABLED: "true", THRESHOLD: "32768", BUDGET: "2097152"}
    with pytest.raises(ConfigApplyError, match="32k"):
        policy_fields(Configuration(name="bad", env={THRESHOLD: "32k"}))
    with pytest.raises(ConfigApplyError, match="TRUE"):
        policy_fields(Configuration(name="bad", env={ENABLED: "TRUE"}))


class AbortOnConfig:
    """A real SimDriver that raises StageAbort for one configuration (as the cluster
    driver does when a configuration cannot be applied)."""

    def __init__(self, config: str) -> None:
        self.inner = SimDriver()
        self.config = config
        self.seen: list[str] = []

    def run(self, job: RunJob, cancel: threading.Event) -> RunRecord:
        self.seen.append(job.config.name)
        if job.config.name == self.config:
            raise StageAbort(f"configuration '{job.config.name}' not applied")
        return self.inner.run(job, cancel)


def test_stage_abort_records_nothing_for_that_run_and_stops(tmp_path: Path) -> None:
    matrix = load_matrix()
    driver = AbortOnConfig("128KiB")
    names = [c.name for c in matrix.configurations]
    with pytest.raises(StageAbort, match="128KiB"):
        run_stage(
            matrix, "minikube", driver, tmp_path, resume=False, concurrency=1,
            quiet=True, order=partial(block_order, config_names=names),
        )  # fmt: skip
    lines = (tmp_path / "runs.jsonl").read_text().splitlines()
    cells = len(list(matrix.cells()))
    assert len(lines) == cells  # the whole `off` block, nothing of 128KiB
    assert driver.seen == ["off"] * cells + ["128KiB"]
    assert all(json.loads(line)["config"] == "off" for line in lines)
