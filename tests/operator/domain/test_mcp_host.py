"""mcp_host: what an mcp-host process reports it runs with (how each raw value is read:
tests/operator/domain/test_env_reading.py)."""

from __future__ import annotations

import json as _json

import pytest
from spillover_operator.domain.mcp_host import (
    REPORT_ANNOTATION,
    ReportError,
    parse_report,
    report_address,
)
from spillover_operator.domain.model import BUDGET_VAR, DEFAULTS, ENABLED_VAR, THRESHOLD_VAR


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
