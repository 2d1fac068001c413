"""The model's reading of each variable (`EnvField.read`) and the operator's callers of
it agree with the one table (tests/env_readings.py)."""

from __future__ import annotations

import pytest
from env_readings import READINGS, Row
from repo_paths import REPO_ROOT
from spillover_operator.domain.model import ENV_FIELDS, FIELD_OF_VAR, read_env
from spillover_operator.domain.recipe_pods import NO_OWNER, classify

ROWS = [pytest.param(row, id=row.id()) for row in READINGS]


@pytest.mark.parametrize("row", ROWS)
def test_the_model_reads_each_raw_value_as_the_table_says(row: Row) -> None:
    reading = read_env(row.var, row.raw)
    assert (reading.state, reading.text) == (row.state, row.runs)
    assert (reading.problem is not None) == (row.state == "invalid")


@pytest.mark.parametrize("row", ROWS)
def test_a_recipe_pod_runs_what_the_table_says(row: Row) -> None:
    """The operator's recipe-pod verdict: a pod with `raw` is current for a policy whose
    value is the table's, stale for any other value."""
    env = {} if row.raw is None else {row.var: row.raw}
    pod = {
        "metadata": {"name": "p", "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "containers": [
                {"name": "mcp-host", "env": [{"name": k, "value": v} for k, v in env.items()]}
            ]
        },
        "status": {"phase": "Running"},
    }
    field = FIELD_OF_VAR[row.var]
    other = "false" if row.runs == "true" else "true" if field.kind == "switch" else str(field.low)
    if other == row.runs:
        other = str(field.high)
    current = classify(pod, {row.var: row.runs}, container=None, owner=NO_OWNER)
    stale = classify(pod, {row.var: other}, container=None, owner=NO_OWNER)
    assert (current.state, stale.state) == ("current", "stale"), (current.why, stale.why)


def test_every_variable_of_the_model_is_in_the_table_with_each_state() -> None:
    for field in ENV_FIELDS:
        states = {row.state for row in READINGS if row.var == field.var}
        assert states == {"set", "unset", "invalid"}, field.var


def test_the_allowed_text_says_the_bounds() -> None:
    for field in ENV_FIELDS:
        if field.kind == "bytes":
            assert f"{field.low} to {field.high}" in field.allowed
        else:
            assert '"true" or "false"' in field.allowed


def test_the_reference_table_says_each_default_and_range_of_the_model() -> None:
    """docs/reference.md §1.3 is written for people; it must say what the model reads."""
    text = (REPO_ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    for field in ENV_FIELDS:
        row = next(line for line in text.splitlines() if line.startswith(f"| `{field.var}` |"))
        if field.kind == "bytes":
            assert f"`{field.default}` bytes" in row and f"`{field.low}` to `{field.high}`" in row
        else:
            assert "`true` or `false`" in row and "unset means on" in row
    assert "Whitespace around a value is ignored" in text
