"""counter_deltas: per-run deltas of the two spillover counters from two instant snapshots."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from spillover_harness.collectors.prometheus import (
    PERSISTED,
    READS,
    CounterSnapshot,
    Labels,
    PrometheusCollector,
    PrometheusUnavailable,
    counter_deltas,
)

POD_A = {"namespace": "clerum", "pod": "mcp-host-a", "instance": "10.0.0.1:9100"}
POD_B = {"namespace": "clerum", "pod": "mcp-host-b", "instance": "10.0.0.2:9100"}


def L(target: dict[str, str], **labels: str) -> Labels:
    return frozenset({**target, **labels}.items())


def snap(
    persisted: dict[Labels, float] | None = None,
    reads: dict[Labels, float] | None = None,
    starts: dict[Labels, float] | None = None,
) -> CounterSnapshot:
    return CounterSnapshot(
        at=0.0, persisted=persisted or {}, reads=reads or {}, start_times=starts or {}
    )


def test_no_series_at_all_is_none_not_zero() -> None:
    d = counter_deltas(snap(), snap())
    assert d["persisted"] is None
    assert d["reads"] is None
    assert d["persisted_by_tool"] == {} and d["reads_by_with_range"] == {}
    assert any(PERSISTED in n and "not measured" in n for n in d["notes"])
    assert any(READS in n and "not measured" in n for n in d["notes"])


def test_series_unchanged_is_zero() -> None:
    s = snap({L(POD_A, tool="read_file"): 4.0}, {L(POD_A, with_range="false"): 2.0})
    d = counter_deltas(s, s)
    assert (d["persisted"], d["reads"]) == (0, 0)
    assert d["notes"] == []


def test_sums_over_tool_and_with_range_keeping_the_breakdown() -> None:
    before = snap(
        {L(POD_A, tool="read_file"): 1.0, L(POD_A, tool="git_diff"): 5.0},
        {L(POD_A, with_range="true"): 0.0, L(POD_A, with_range="false"): 3.0},
    )
    after = snap(
        {L(POD_A, tool="read_file"): 4.0, L(POD_A, tool="git_diff"): 7.0},
        {L(POD_A, with_range="true"): 2.0, L(POD_A, with_range="false"): 4.0},
    )
    d = counter_deltas(before, after)
    assert d["persisted"] == 5
    assert d["persisted_by_tool"] == {"read_file": 3, "git_diff": 2}
    assert d["reads"] == 3
    assert d["reads_by_with_range"] == {"true": 2, "false": 1}
    assert {s["delta"] for s in d["series"] if s["metric"] == PERSISTED} == {3, 2}


def test_breakdown_sums_the_same_label_over_pods() -> None:
    before = snap({L(POD_A, tool="read_file"): 1.0, L(POD_B, tool="read_file"): 10.0})
    after = snap({L(POD_A, tool="read_file"): 2.0, L(POD_B, tool="read_file"): 13.0})
    d = counter_deltas(before, after)
    assert d["persisted"] == 4
    assert d["persisted_by_tool"] == {"read_file": 4}
    assert d["reads"] is None


def test_series_only_after_counts_its_whole_value() -> None:
    d = counter_deltas(snap(), snap({L(POD_A, tool="read_file"): 2.0}))
    assert d["persisted"] == 2
    assert d["reads"] is None  # still no read series: not measured


def test_new_label_value_next_to_existing_series() -> None:
    before = snap({L(POD_A, tool="read_file"): 2.0})
    after = snap({L(POD_A, tool="read_file"): 2.0, L(POD_A, tool="git_diff"): 1.0})
    assert counter_deltas(before, after)["persisted"] == 1


def test_counter_reset_value_went_down() -> None:
    before = snap({L(POD_A, tool="read_file"): 9.0}, {L(POD_A, with_range="false"): 5.0})
    after = snap({L(POD_A, tool="read_file"): 2.0}, {L(POD_A, with_range="false"): 0.0})
    d = counter_deltas(before, after)
    assert d["persisted"] == 2
    assert d["reads"] == 0
    assert [s["reset"] for s in d["series"]] == [True, True]
    assert any("reset" in n for n in d["notes"])


def test_counter_reset_seen_through_process_start_time() -> None:
    # The value went UP, but the process restarted in between: the whole value is the run's.
    target = L(POD_A)
    before = snap({L(POD_A, tool="read_file"): 2.0}, starts={target: 1000.0})
    after = snap({L(POD_A, tool="read_file"): 5.0}, starts={target: 2000.0})
    d = counter_deltas(before, after)
    assert d["persisted"] == 5
    assert d["series"][0]["reset"] is True


def test_same_start_time_is_no_reset() -> None:
    target = L(POD_A)
    before = snap({L(POD_A, tool="read_file"): 2.0}, starts={target: 1000.0})
    after = snap({L(POD_A, tool="read_file"): 5.0}, starts={target: 1000.0})
    d = counter_deltas(before, after)
    assert d["persisted"] == 3
    assert d["series"][0]["reset"] is False


def test_series_only_before_counts_zero_with_a_note() -> None:
    before = snap({L(POD_A, tool="read_file"): 3.0, L(POD_B, tool="read_file"): 1.0})
    after = snap({L(POD_B, tool="read_file"): 4.0})
    d = counter_deltas(before, after)
    assert d["persisted"] == 3
    assert any("disappeared" in n and "mcp-host-a" in n for n in d["notes"])


def test_only_before_and_gone_is_zero_not_none() -> None:
    # The series existed: the platform was measured, the pod went away.
    d = counter_deltas(snap({L(POD_A, tool="read_file"): 3.0}), snap())
    assert d["persisted"] == 0


def test_float_values_are_rounded_to_counts() -> None:
    before = snap({L(POD_A, tool="t"): 1.0000000001})
    after = snap({L(POD_A, tool="t"): 3.9999999999})
    assert counter_deltas(before, after)["persisted"] == 3


def test_series_without_the_split_label() -> None:
    d = counter_deltas(snap(), snap({L(POD_A): 2.0}))
    assert d["persisted_by_tool"] == {"": 2}


def test_a_fifo_as_the_bearer_token_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    """The profile names the token file: a FIFO there would block the stage forever."""
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    collector = PrometheusCollector("http://127.0.0.1:9", bearer_token_file=fifo)
    with pytest.raises(PrometheusUnavailable, match=r"is a FIFO \(named pipe\)"):
        collector.connect()
