"""The simulator reads its configuration like the mcp-host (docs/reference.md §1, Configuration).

Each raw value against what it runs with, the same for every reader:
tests/harness/test_env_reading_agreement.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spillover_harness.fixtures import build_fixtures
from spillover_harness.sim.config import SpilloverConfig, parse_spillover_env
from spillover_harness.sim.step import run_step
from spillover_operator.domain.model import BUDGET_VAR, ENABLED_VAR, THRESHOLD_VAR


def test_defaults_when_unset() -> None:
    config, warnings = parse_spillover_env({})
    assert config == SpilloverConfig(True, 131_072, 16_777_216)
    assert warnings == []


def test_empty_or_blank_values_count_as_unset() -> None:
    config, warnings = parse_spillover_env({ENABLED_VAR: "", THRESHOLD_VAR: " ", BUDGET_VAR: "\t"})
    assert config == SpilloverConfig()
    assert warnings == []


@pytest.mark.parametrize(("raw", "enabled"), [("true", True), ("false", False)])
def test_enabled_accepts_only_true_and_false(raw: str, enabled: bool) -> None:
    config, warnings = parse_spillover_env({ENABLED_VAR: raw})
    assert config.enabled is enabled and warnings == []


@pytest.mark.parametrize("raw", ["TRUE", "False", "1", "0", "yes", "off", "t rue"])
def test_invalid_enabled_warns_and_keeps_the_default(raw: str) -> None:
    config, warnings = parse_spillover_env({ENABLED_VAR: raw})
    assert config.enabled is True
    assert [w.variable for w in warnings] == [ENABLED_VAR]
    assert warnings[0].default == "true"


@pytest.mark.parametrize("raw", ["4096", "32768", "1048576"])
def test_threshold_in_bounds(raw: str) -> None:
    config, warnings = parse_spillover_env({THRESHOLD_VAR: raw})
    assert config.threshold == int(raw) and warnings == []


@pytest.mark.parametrize(
    "raw", ["4095", "1048577", "0", "-1", "32k", "1e5", "+4096", "4 096", "abc"]
)
def test_invalid_threshold_warns_and_keeps_the_default(raw: str) -> None:
    config, warnings = parse_spillover_env({THRESHOLD_VAR: raw})
    assert config.threshold == 131_072
    assert [w.variable for w in warnings] == [THRESHOLD_VAR]
    assert warnings[0].value == raw


@pytest.mark.parametrize("raw", ["1048576", "268435456"])
def test_budget_in_bounds(raw: str) -> None:
    config, warnings = parse_spillover_env({BUDGET_VAR: raw})
    assert config.budget == int(raw) and warnings == []


@pytest.mark.parametrize("raw", ["1048575", "268435457", "16MiB", "-5"])
def test_invalid_budget_warns_and_keeps_the_default(raw: str) -> None:
    config, warnings = parse_spillover_env({BUDGET_VAR: raw})
    assert config.budget == 16_777_216
    assert [w.variable for w in warnings] == [BUDGET_VAR]


def test_each_invalid_variable_warns_once_and_the_valid_ones_apply() -> None:
    config, warnings = parse_spillover_env(
        {ENABLED_VAR: "nope", THRESHOLD_VAR: "32768", BUDGET_VAR: "1"}
    )
    assert config == SpilloverConfig(True, 32_768, 16_777_216)
    assert sorted(w.variable for w in warnings) == sorted([ENABLED_VAR, BUDGET_VAR])


def test_a_step_logs_a_warning_line_and_runs_with_the_default(tmp_path: Path) -> None:
    fixture = build_fixtures(7).get("code-review", "small")
    run = run_step(
        fixture=fixture,
        env={THRESHOLD_VAR: "12"},
        seed=1,
        repetition=1,
        run_id="warn",
        output_dir=tmp_path,
    )
    lines = [json.loads(x) for x in run.log_lines()]
    warns = [x for x in lines if x["level"] == "warn"]
    assert len(warns) == 1
    assert warns[0]["variable"] == THRESHOLD_VAR and warns[0]["default"] == "131072"
    configured = next(x for x in lines if x["msg"] == "spillover configuration")
    assert configured["thresholdBytes"] == 131_072
    assert run.config.threshold == 131_072
    assert any(THRESHOLD_VAR in note for note in run.notes)
