"""mcp_host.value_in_effect: what the mcp-host runs with for each raw value."""

from __future__ import annotations

import json as _json

import pytest
from spillover_operator.domain.constants import BUDGET_VAR, ENABLED_VAR, THRESHOLD_VAR
from spillover_operator.domain.mcp_host import (
    DEFAULTS,
    REPORT_ANNOTATION,
    ReportError,
    parse_report,
    report_address,
    value_in_effect,
)


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


# ---- the process's own report ---------------------------------------------------------


def test_report_address_reads_port_and_path_and_refuses_anything_else() -> None:
    assert report_address({}) is None
    assert report_address(None) is None
    assert report_address({REPORT_ANNOTATION: "8080/spillover"}) == (8080, "spillover")
    assert report_address({REPORT_ANNOTATION: "9090/status/spillover"}) == (
        9090,
        "status/spillover",
    )
    for bad in (
        "spillover",
        "0/x",
        "70000/x",
        "80a/x",
        "8080/../secrets",
        "8080/a?b=c",
        "8080/" + "a" * 300,
    ):
        with pytest.raises(ReportError, match=REPORT_ANNOTATION):
            report_address({REPORT_ANNOTATION: bad})


def test_parse_report_takes_the_three_raw_values_and_nothing_malformed() -> None:
    body = _json.dumps({"runsWith": {ENABLED_VAR: "false", THRESHOLD_VAR: None}}).encode()
    assert parse_report(body) == {ENABLED_VAR: "false", THRESHOLD_VAR: None, BUDGET_VAR: None}
    for bad, why in (
        (b"not json", "not JSON"),
        (b"[]", "no 'runsWith'"),
        (_json.dumps({"runsWith": {ENABLED_VAR: False}}).encode(), "not a string"),
        (b"{" + b" " * 5000 + b"}", "bytes"),
    ):
        with pytest.raises(ReportError, match=why):
            parse_report(bad)
