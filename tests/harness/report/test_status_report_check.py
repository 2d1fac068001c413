"""The status report as a check (status_report_check): per cell where the configuration
stored results, its growth per stored result against the baseline; `grows` past 1 KiB
per stored result; on hand-made records."""

from __future__ import annotations

from typing import Any

from record_builders import MATRIX, make_record
from spillover_harness.report.status_report_check import check_status_report
from spillover_harness.results.records import RunRecord


def good(_config: str) -> dict[str, Any]:
    return {"input_tokens": 1000}


def rec(config: str, report_bytes: int | None, persisted: int, **fields: Any) -> RunRecord:
    cell = fields.pop("cell", ("code-review", "large"))
    return make_record(
        good, config, *cell, status_report_bytes=report_bytes, spillover_persisted=persisted,
        **fields,
    )  # fmt: skip


def test_a_report_that_names_each_stored_result_is_flat() -> None:
    records = [rec("off", 3300, 0), rec("off", 3300, 0), rec("128KiB", 4164, 3)]
    check = check_status_report(records, MATRIX, "sim")
    assert check is not None
    got = check.configs["128KiB"]
    assert got.reading == "flat" and got.cell == "code-review/large"
    assert got.bytes_per_stored_result == 288  # (4164 - 3300) / 3


def test_a_report_that_carries_each_summary_grows() -> None:
    records = [rec("off", 3300, 0), rec("128KiB", 3300 + 3 * 3000, 3)]
    check = check_status_report(records, MATRIX, "sim")
    assert check is not None and check.configs["128KiB"].reading == "grows"
    assert check.configs["128KiB"].bytes_per_stored_result == 3000


def test_a_configuration_that_stored_nothing_cannot_tell() -> None:
    records = [rec("off", 3300, 0), rec("128KiB", 99_999, 0)]
    check = check_status_report(records, MATRIX, "sim")
    assert check is not None
    got = check.configs["128KiB"]
    assert got.reading == "not measured" and got.reason is not None
    assert "stored nothing" in got.reason and got.bytes_per_stored_result is None
    assert check.configs["32KiB"].reading == "not measured"  # no run at all


def test_no_report_size_anywhere_means_no_check() -> None:
    assert check_status_report([rec("off", None, 0), rec("128KiB", None, 2)], MATRIX, "sim") is None
    only_mine = [rec("off", None, 0), rec("128KiB", 5000, 2)]
    check = check_status_report(only_mine, MATRIX, "sim")
    assert check is not None and check.configs["128KiB"].reading == "not measured"
    assert "not measured" in (check.configs["128KiB"].reason or "")
