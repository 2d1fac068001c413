"""mcp_host.value_in_effect: what the mcp-host runs with for each raw value."""

from __future__ import annotations

import pytest
from spillover_operator.constants import BUDGET_VAR, ENABLED_VAR, THRESHOLD_VAR
from spillover_operator.mcp_host import DEFAULTS, value_in_effect


@pytest.mark.parametrize(
    ("var", "raw", "runs"),
    [
        (ENABLED_VAR, None, "true"),
        (ENABLED_VAR, "false", "false"),
        (ENABLED_VAR, " false ", "false"),
        (ENABLED_VAR, "FALSE", "true"),  # not `true`/`false`: the default, on
        (ENABLED_VAR, "0", "true"),
        (ENABLED_VAR, "", "true"),
        (THRESHOLD_VAR, None, "131072"),
        (THRESHOLD_VAR, "32768", "32768"),
        (THRESHOLD_VAR, "032768", "32768"),
        (THRESHOLD_VAR, "4096", "4096"),
        (THRESHOLD_VAR, "4095", "131072"),  # below the range
        (THRESHOLD_VAR, "1048577", "131072"),  # above it
        (THRESHOLD_VAR, "32KiB", "131072"),
        (THRESHOLD_VAR, "-5", "131072"),
        (THRESHOLD_VAR, "٣٢٧٦٨", "131072"),  # digits, but not ASCII ones
        (BUDGET_VAR, None, "16777216"),
        (BUDGET_VAR, "1048576", "1048576"),
        (BUDGET_VAR, "1", "16777216"),
    ],
)
def test_value_in_effect(var: str, raw: str | None, runs: str) -> None:
    assert value_in_effect(var, raw) == runs


def test_every_variable_has_a_default() -> None:
    assert set(DEFAULTS) == {ENABLED_VAR, THRESHOLD_VAR, BUDGET_VAR}
