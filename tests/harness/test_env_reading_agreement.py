"""The harness reads the spillover variables as the operator does: the simulator, the
matrix, the cluster stage's policy mapping and the recipe pods' comparison, each run
against the one table (tests/env_readings.py; the operator's side:
tests/operator/domain/test_env_reading.py)."""

from __future__ import annotations

import pytest
from env_readings import READINGS, Row
from spillover_harness.cluster.configs import ConfigApplyError, expected_env, policy_fields
from spillover_harness.cluster.recipe_pods import effective
from spillover_harness.plan.matrix import Configuration, effective_threshold, env_value_problem
from spillover_harness.sim.config import parse_spillover_env
from spillover_operator.domain.model import (
    BUDGET_VAR,
    ENABLED_VAR,
    FIELD_OF_VAR,
    THRESHOLD_VAR,
)

ROWS = [pytest.param(row, id=row.id()) for row in READINGS]
GIVEN = [pytest.param(row, id=row.id()) for row in READINGS if row.raw is not None]


def _env(row: Row) -> dict[str, str]:
    return {} if row.raw is None else {row.var: row.raw}


@pytest.mark.parametrize("row", ROWS)
def test_the_simulator_runs_what_the_table_says(row: Row) -> None:
    config, warnings = parse_spillover_env(_env(row))
    runs = {
        ENABLED_VAR: "true" if config.enabled else "false",
        THRESHOLD_VAR: str(config.threshold),
        BUDGET_VAR: str(config.budget),
    }
    assert runs[row.var] == row.runs
    assert [w.variable for w in warnings] == ([row.var] if row.state == "invalid" else [])


@pytest.mark.parametrize("row", ROWS)
def test_the_recipe_pods_comparison_runs_what_the_table_says(row: Row) -> None:
    assert effective({row.var: row.raw})[row.var] == row.runs


@pytest.mark.parametrize("row", GIVEN)
def test_the_matrix_takes_exactly_what_the_mcp_host_takes_and_keeps_its_text(row: Row) -> None:
    """A value the mcp-host takes is kept as the text it runs with; any other is refused
    (an unset one too: in a matrix, leave the key out)."""
    problem = env_value_problem(row.var, row.raw or "")
    assert (problem is None) == (row.state == "set"), problem
    if row.state == "set":
        config = Configuration(name="c", env=_env(row))
        assert config.env == {row.var: row.runs}
        if row.var == THRESHOLD_VAR:
            assert effective_threshold(config) == int(row.runs)
        if row.var == ENABLED_VAR:
            assert (effective_threshold(config) is None) == (row.runs == "false")
    elif row.state == "invalid":
        assert repr(row.raw) in str(problem) and FIELD_OF_VAR[row.var].allowed in str(problem)


@pytest.mark.parametrize("row", ROWS)
def test_the_cluster_stage_writes_what_the_table_says(row: Row) -> None:
    """The policy the stage writes for a configuration makes the WRC carry the value the
    mcp-host would run with; a value it would replace by its default is refused."""
    config = Configuration.model_construct(name="c", env=_env(row))  # as written, unchecked
    if row.state == "invalid":
        with pytest.raises(ConfigApplyError, match="cannot be expressed by the policy"):
            policy_fields(config)
        return
    carried = expected_env(config)[row.var]
    field = FIELD_OF_VAR[row.var]
    if row.state == "unset" and field.kind == "bytes":
        assert carried is None  # absent: the mcp-host default
    else:
        assert carried == row.runs
