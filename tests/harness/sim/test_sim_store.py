"""The spillover store at its edges (docs/reference.md §1), on the real store code."""

from __future__ import annotations

import json
from pathlib import Path

from spillover_harness.sim.config import SpilloverConfig
from spillover_harness.sim.logs import SimClock, StepLog
from spillover_harness.sim.metrics import PERSISTED_METRIC, READS_METRIC, SpilloverMetrics
from spillover_harness.sim.store import (
    HEAD_BYTES,
    TAIL_BYTES,
    SpilloverStore,
    StoreClosedError,
    serialize_result,
)

THRESHOLD = 4096
EMPTY = len(serialize_result({"data": ""}))


def sized(n: int, fill: str = "x") -> dict[str, str]:
    """A result whose serialization is exactly n bytes."""
    result = {"data": fill * (n - EMPTY)}
    assert len(serialize_result(result).encode("utf-8")) == n
    return result


def store(
    threshold: int = THRESHOLD,
    budget: int = 16_777_216,
    *,
    enabled: bool = True,
    step: str = "review",
    execution: str = "exec-1",
    **kwargs: object,
) -> SpilloverStore:
    log = StepLog(SimClock(), {"stepId": step, "executionId": execution})
    return SpilloverStore(
        SpilloverConfig(enabled, threshold, budget),
        step,
        execution,
        metrics=SpilloverMetrics(),
        log=log,
        **kwargs,  # type: ignore[arg-type]
    )


def test_serialization_is_compact_json_without_ascii_escaping() -> None:
    assert serialize_result({"a": [1, "é"], "b": None}) == '{"a":[1,"é"],"b":null}'


def test_one_byte_under_the_threshold_stays_inline_and_unchanged() -> None:
    s = store()
    result = sized(THRESHOLD - 1)
    handled = s.handle_result("read_file", "call_1", result)
    assert not handled.spilled
    assert handled.content == serialize_result(result)
    assert handled.size == THRESHOLD - 1
    assert not s.read_tool_offered
    assert s.persisted == 0
    assert s.metrics is not None
    assert s.metrics.value(PERSISTED_METRIC, tool="read_file") == 0


def test_exactly_the_threshold_spills_with_a_summary() -> None:
    s = store()
    result = sized(THRESHOLD)
    data = serialize_result(result).encode("utf-8")
    handled = s.handle_result("read_file", "call_1", result)
    assert handled.spilled
    assert handled.ref == "spillover://review/call_1.json"
    summary = json.loads(handled.content)["spillover"]
    assert summary["ref"] == "spillover://review/call_1.json"
    assert summary["sizeBytes"] == THRESHOLD
    assert summary["head"] == data[:HEAD_BYTES].decode()
    assert summary["tail"] == data[-TAIL_BYTES:].decode()
    assert summary["structure"].startswith("object{data: string(")
    assert summary["maxReadBytes"] == THRESHOLD
    assert s.read_tool_offered
    assert s.held_bytes == THRESHOLD
    assert s.metrics is not None
    assert s.metrics.value(PERSISTED_METRIC, tool="read_file") == 1
    assert len(handled.content) < THRESHOLD


def test_budget_fallback_keeps_a_result_inline_and_a_later_one_that_fits_is_stored() -> None:
    budget = 1_048_576
    s = store(budget=budget)
    a = s.handle_result("read_file", "call_a", sized(600_000))
    b = s.handle_result("read_file", "call_b", sized(600_000))
    c = s.handle_result("read_file", "call_c", sized(400_000))
    d = s.handle_result("read_file", "call_d", sized(budget - 1_000_000))  # exactly to the budget
    e = s.handle_result("read_file", "call_e", sized(THRESHOLD))  # one byte-result too many
    assert a.spilled and c.spilled and d.spilled
    assert not b.spilled and b.budget_fallback
    assert b.content == serialize_result(sized(600_000))  # inline, as without spillover
    assert not e.spilled and e.budget_fallback
    assert s.held_bytes == budget
    assert s.persisted == 3
    assert s.budget_fallbacks == 2
    assert s.log is not None
    warnings = [json.loads(x) for x in s.log.lines() if '"level":"warn"' in x]
    # once per step execution, as the mcp-host logs it: at the first result kept inline
    assert [w["callId"] for w in warnings] == ["call_b"]
    assert warnings[0]["msg"].startswith("spillover budget reached")


def test_a_read_returns_at_most_threshold_bytes_and_ranges_read_the_rest() -> None:
    s = store()
    result = sized(10_000)
    data = serialize_result(result).encode("utf-8")
    ref = s.handle_result("get_diff", "call_1", result).ref
    first = json.loads(s.read({"ref": ref}).content)
    assert first["length"] == THRESHOLD and first["offset"] == 0
    assert first["data"].encode() == data[:THRESHOLD]
    assert first["eof"] is False and first["totalBytes"] == 10_000
    second = json.loads(s.read({"ref": ref, "offset": THRESHOLD, "length": 1_000_000}).content)
    assert second["length"] == THRESHOLD
    third = json.loads(s.read({"ref": ref, "offset": 2 * THRESHOLD}).content)
    assert third["length"] == 10_000 - 2 * THRESHOLD and third["eof"] is True
    small = json.loads(s.read({"ref": ref, "offset": 5, "length": 10}).content)
    assert small["data"].encode() == data[5:15]
    assembled = (first["data"] + second["data"] + third["data"]).encode()
    assert assembled == data
    assert s.reads == 4
    assert s.metrics is not None
    assert s.metrics.value(READS_METRIC, with_range="false") == 1
    assert s.metrics.value(READS_METRIC, with_range="true") == 3


def test_bad_reads_are_errors_and_not_counted() -> None:
    s = store()
    ref = s.handle_result("read_file", "call_1", sized(5000)).ref
    for args in (
        {"ref": ref, "offset": 5001},
        {"ref": ref, "offset": -1},
        {"ref": ref, "length": 0},
        {"ref": ref, "offset": "10"},
        {"ref": "file:///etc/passwd"},
        {},
    ):
        outcome = s.read(args)
        assert not outcome.ok, args
        assert "error" in json.loads(outcome.content)
    assert s.reads == 0
    assert s.metrics is not None
    assert s.metrics.value(READS_METRIC, with_range="true") == 0


def test_refs_of_another_step_or_unknown_calls_are_refused() -> None:
    s = store(step="review")
    s.handle_result("read_file", "call_1", sized(5000))
    other_step = s.read({"ref": "spillover://summarize/call_1.json"})
    assert not other_step.ok
    assert "another" in other_step.content or "belongs to step" in other_step.content
    unknown = s.read({"ref": "spillover://review/call_2.json"})
    assert not unknown.ok and "not stored by this step execution" in unknown.content


def test_two_executions_of_the_same_step_are_isolated() -> None:
    a = store(execution="exec-a")
    b = store(execution="exec-b")
    ref_a = a.handle_result("read_file", "call_a", sized(5000, "a")).ref
    assert ref_a is not None
    refused = b.read({"ref": ref_a})
    assert not refused.ok
    b.handle_result("read_file", "call_b", sized(5000, "b"))
    own_b = json.loads(b.read({"ref": "spillover://review/call_b.json"}).content)
    assert set(own_b["data"][len('{"data":"') :]) == {"b"}
    own_a = json.loads(a.read({"ref": ref_a, "offset": 100, "length": 50}).content)
    assert set(own_a["data"]) == {"a"}
    # The same call id in another execution is that execution's own result.
    b.handle_result("read_file", "call_a", sized(6000, "c"))
    assert "c" in json.loads(b.read({"ref": ref_a, "offset": 100, "length": 5}).content)["data"]
    assert "a" in json.loads(a.read({"ref": ref_a, "offset": 100, "length": 5}).content)["data"]


def test_drop_ends_the_store() -> None:
    s = store()
    ref = s.handle_result("read_file", "call_1", sized(5000)).ref
    s.drop("succeeded")
    assert s.closed and s.entries == 0 and s.held_bytes == 0
    assert not s.read({"ref": ref}).ok
    try:
        s.handle_result("read_file", "call_2", sized(5000))
    except StoreClosedError:
        pass
    else:
        raise AssertionError("a dropped store must not take results")
    assert s.log is not None
    dropped = [json.loads(x) for x in s.log.lines() if "store dropped" in x]
    assert dropped and dropped[0]["reason"] == "succeeded" and dropped[0]["entries"] == 1


def test_disabled_never_spills_counts_or_logs() -> None:
    s = store(enabled=False)
    result = sized(200_000)
    handled = s.handle_result("read_file", "call_1", result)
    assert not handled.spilled and handled.content == serialize_result(result)
    assert not s.read_tool_offered
    assert s.log is not None and s.log.lines() == []
    assert s.metrics is not None and s.metrics.value(PERSISTED_METRIC, tool="read_file") == 0


def test_logs_and_disk_hold_no_result_content(tmp_path: Path) -> None:
    s = store()
    ref = s.handle_result("read_file", "call_1", sized(9000, "Z"))
    s.read({"ref": ref.ref, "offset": 0, "length": 100})
    s.drop("succeeded")
    assert s.log is not None
    assert not any("ZZZZ" in line for line in s.log.lines())
    assert list(tmp_path.iterdir()) == []


def test_fault_switches_write_to_disk_and_log_content(tmp_path: Path) -> None:
    s = store(fault_spill_dir=tmp_path / ".spill", fault_log_results=True)
    s.handle_result("read_file", "call_1", sized(9000, "Z"))
    assert (tmp_path / ".spill" / "call_1.json").read_text() == serialize_result(sized(9000, "Z"))
    assert s.log is not None
    assert any("ZZZZ" in line for line in s.log.lines())


def test_reads_never_split_a_utf8_character() -> None:
    s = store()
    result = {"data": "é" * 6000}  # 2 bytes each
    data = serialize_result(result).encode("utf-8")
    ref = s.handle_result("read_file", "call_1", result).ref
    pieces, offset = [], 0
    while offset < len(data):
        r = json.loads(s.read({"ref": ref, "offset": offset, "length": 1001}).content)
        assert r["length"] <= 1001
        pieces.append(r["data"])
        offset += r["length"]
    assert "".join(pieces).encode("utf-8") == data
