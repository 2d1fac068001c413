"""Run records (docs/reference.md §3): round-trip, every kind of bad line named file:line,
and the crash-safe log (a torn last line is moved aside, never lost)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from spillover_harness.results.records import (
    RecordError,
    RecordLog,
    RunKey,
    RunRecord,
    iter_records,
    not_before,
    parse_line,
    read_records,
)


def record_dict(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "schema": 1,
        "run_id": "sim-off-code_review-small-r1-0000abcd",
        "stage": "sim",
        "config": "off",
        "recipe": "code-review",
        "input": "small",
        "size_class": "small",
        "repetition": 1,
        "outcome": "succeeded",
        "hit_iteration_limit": False,
        "iterations": 7,
        "input_tokens": 12000,
        "output_tokens": 900,
        "duration_s": 1.25,
        "spillover_persisted": 0,
        "spillover_reads": 0,
        "status_report_bytes": 2048,
        "quality_ok": True,
        "disk_clean": True,
        "logs_clean": True,
        "started_at": "2026-11-30T10:00:00.000+00:00",
        "finished_at": "2026-11-30T10:00:01.250Z",
        "notes": ["a note"],
    }
    data.update(overrides)
    return data


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_round_trip_through_the_log(tmp_path: Path) -> None:
    rec = RunRecord.from_json(record_dict())
    nulls = RunRecord.from_json(
        record_dict(
            run_id="x2",
            repetition=2,
            outcome="harness_error",
            hit_iteration_limit=None,
            iterations=None,
            input_tokens=None,
            output_tokens=None,
            duration_s=None,
            quality_ok=None,
            disk_clean=None,
            logs_clean=None,
            notes=[],
        )
    )
    log = RecordLog(tmp_path / "runs.jsonl")
    assert log.open() == []
    log.extend([rec, nulls])
    back = read_records(tmp_path / "runs.jsonl")
    assert back == [rec, nulls]
    assert back[0].to_json() == record_dict()
    assert back[1].key == RunKey("sim", "off", "code-review", "small", 2)
    # null stays null (never zero) on disk
    line2 = json.loads((tmp_path / "runs.jsonl").read_text().splitlines()[1])
    assert line2["input_tokens"] is None and line2["schema"] == 1


def test_integer_duration_is_read_as_float() -> None:
    assert RunRecord.from_json(record_dict(duration_s=3)).duration_s == 3.0


BAD_LINES: list[tuple[str, str, str]] = [
    ("not-json", "{not json", "not valid JSON"),
    ("not-an-object", json.dumps([1, 2]), "must be a JSON object, got list"),
    (
        "missing-field",
        json.dumps({k: v for k, v in record_dict().items() if k != "outcome"}),
        "missing field 'outcome'",
    ),
    (
        "missing-schema",
        json.dumps({k: v for k, v in record_dict().items() if k != "schema"}),
        "missing field 'schema'",
    ),
    ("unknown-field", json.dumps(record_dict(colour="blue")), "unknown field 'colour'"),
    ("wrong-type", json.dumps(record_dict(iterations="7")), "field 'iterations'"),
    ("bool-for-int", json.dumps(record_dict(input_tokens=True)), "field 'input_tokens'"),
    ("bool-for-schema", json.dumps(record_dict(schema=True)), "field 'schema'"),
    ("float-for-int", json.dumps(record_dict(iterations=7.5)), "field 'iterations'"),
    ("negative-count", json.dumps(record_dict(spillover_reads=-1)), "cannot be negative"),
    ("negative-duration", json.dumps(record_dict(duration_s=-0.5)), "cannot be negative"),
    ("nan-duration", json.dumps(record_dict(duration_s=float("nan"))), "finite"),
    ("zero-repetition", json.dumps(record_dict(repetition=0)), "1-based"),
    ("bad-timestamp", json.dumps(record_dict(started_at="yesterday")), "field 'started_at'"),
    ("naive-timestamp", json.dumps(record_dict(finished_at="2026-11-30T10:00:00")), "UTC offset"),
    ("bad-outcome", json.dumps(record_dict(outcome="exploded")), "field 'outcome'"),
    ("bad-stage", json.dumps(record_dict(stage="prod")), "field 'stage'"),
    ("schema-2", json.dumps(record_dict(schema=2)), "schema 1"),
]


@pytest.mark.parametrize(("kind", "line", "expected"), BAD_LINES, ids=[b[0] for b in BAD_LINES])
def test_bad_line_names_file_line_and_problem(
    tmp_path: Path, kind: str, line: str, expected: str
) -> None:
    path = write_lines(tmp_path / "runs.jsonl", [json.dumps(record_dict()), line])
    with pytest.raises(RecordError) as info:
        read_records(path)
    message = str(info.value)
    assert message.startswith(f"{path}:2: "), message
    assert expected in message, message


def test_several_bad_fields_are_all_named() -> None:
    with pytest.raises(RecordError) as info:
        parse_line(json.dumps(record_dict(iterations=-3, quality_ok="yes")), path="f", lineno=9)
    assert "f:9:" in str(info.value)
    assert "iterations" in str(info.value) and "quality_ok" in str(info.value)


def test_blank_lines_are_ignored(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "runs.jsonl", ["", json.dumps(record_dict()), "  "])
    assert len(read_records(path)) == 1


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="no such records file"):
        read_records(tmp_path / "nope.jsonl")


def test_reader_reports_a_torn_tail_instead_of_trusting_it(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    whole = json.dumps(record_dict()) + "\n"
    path.write_text(whole + whole[:40], encoding="utf-8")
    with pytest.raises(RecordError, match=r":2: the last line is incomplete.*--resume"):
        list(iter_records(path))


def test_log_repairs_a_torn_tail_and_keeps_it_aside(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    first = json.dumps(record_dict()) + "\n"
    torn = json.dumps(record_dict(run_id="x2", repetition=2))[:57]
    path.write_text(first + torn, encoding="utf-8")

    log = RecordLog(path)
    existing = log.open()
    assert [r.run_id for r in existing] == [record_dict()["run_id"]]
    assert log.repaired_from == tmp_path / "runs.jsonl.torn-1"
    assert log.repaired_from.read_text(encoding="utf-8") == torn  # nothing lost
    assert path.read_text(encoding="utf-8") == first

    # a second repair does not overwrite the first one kept aside
    path.write_text(first + "{partial", encoding="utf-8")
    log2 = RecordLog(path)
    log2.open()
    assert log2.repaired_from == tmp_path / "runs.jsonl.torn-2"
    assert (tmp_path / "runs.jsonl.torn-1").read_text(encoding="utf-8") == torn

    # and the log goes on appending whole lines after the repair
    log2.append(RunRecord.from_json(record_dict(run_id="x3", repetition=3)))
    assert [r.repetition for r in read_records(path)] == [1, 3]


def test_append_writes_one_whole_line_per_record(tmp_path: Path) -> None:
    log = RecordLog(tmp_path / "sub" / "runs.jsonl")
    log.open()
    for rep in range(1, 4):
        log.append(RunRecord.from_json(record_dict(run_id=f"r{rep}", repetition=rep)))
    raw = (tmp_path / "sub" / "runs.jsonl").read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 3
    assert all(json.loads(line)["schema"] == 1 for line in raw.splitlines())


def test_memory_and_budget_fields_are_optional_and_checked() -> None:
    """`mcp_host_memory` and `budget_inline` (added to schema 1): absent in older records,
    written only when measured, refused when negative."""
    old = RunRecord.from_json(record_dict())
    assert old.mcp_host_memory is None and old.budget_inline is None
    assert "mcp_host_memory" not in old.to_json() and "budget_inline" not in old.to_json()
    memory = {"peak_bytes": 5, "limit_bytes": 10, "restarts": 0, "oom_kills": 0, "block": 2}
    new = RunRecord.from_json(record_dict(mcp_host_memory=memory, budget_inline=3))
    # start_bytes and end_bytes (the leak figure) and peak_source (where the peak came
    # from, at what step) came later still, and the store's own figures after them:
    # null when absent
    store = {"store_bytes": None, "store_results_bytes": None}
    unmeasured = {"start_bytes": None, "end_bytes": None, "peak_source": None, **store}
    assert new.to_json()["mcp_host_memory"] == {**memory, **unmeasured}
    assert new.to_json()["budget_inline"] == 3
    both = {**memory, "start_bytes": 7, "end_bytes": 9, "peak_source": "kubelet-summary@1s"}
    assert RunRecord.from_json(record_dict(mcp_host_memory=both)).to_json()["mcp_host_memory"] == {
        **both,
        **store,
    }
    full = {**both, "store_bytes": 1075, "store_results_bytes": 1000}
    back = RunRecord.from_json(record_dict(mcp_host_memory=full)).to_json()
    assert back["mcp_host_memory"] == full
    for bad in (
        {"mcp_host_memory": {**memory, "peak_bytes": -1}},
        {"mcp_host_memory": {**memory, "end_bytes": -1}},
        {"mcp_host_memory": {**memory, "block": 0}},
        {"mcp_host_memory": {**memory, "peak_source": ""}},
        {"mcp_host_memory": {**memory, "peak_source": 30}},
        {"mcp_host_memory": {**memory, "swap": 1}},
        {"budget_inline": -1},
    ):
        with pytest.raises(RecordError):
            RunRecord.from_json(record_dict(**bad))


def test_a_run_that_ends_before_it_starts_is_refused_but_a_clock_step_is_not_lost() -> None:
    late, early = "2026-12-03T10:00:01.000+00:00", "2026-12-03T10:00:00.000+00:00"
    with pytest.raises(RecordError, match=r"finished_at .* is before started_at"):
        RunRecord.from_json(record_dict(started_at=late, finished_at=early))
    # what the drivers write when the wall clock stepped back during a run
    assert not_before(late, early) == late and not_before(early, late) == late
    RunRecord.from_json(record_dict(started_at=late, finished_at=not_before(late, early)))
