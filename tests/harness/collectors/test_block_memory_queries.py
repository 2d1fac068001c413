"""The memory queries' placeholders and answers (collectors/memory.py, profile.memory);
the queries themselves run on a real Prometheus in
tests/integration/test_block_memory_prometheus.py."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from spillover_harness.collectors.memory import (
    ContainerRestarts,
    container_restarts,
    later_instant,
    render_query,
    restarts_between,
    single_value,
)
from spillover_harness.profile import MemoryQueries


def test_placeholders_are_filled_with_an_exact_pod_regex() -> None:
    text = render_query(
        'max(x{namespace="$namespace", pod=~"$pods", container="$container"}[$window])',
        namespace="clerum",
        pods=["mcp-host-b", "mcp-host.a", "mcp-host-b"],
        container="mcp-host",
        window_s=94.2,
    )
    assert text == (
        'max(x{namespace="clerum", pod=~"mcp\\\\-host\\\\-b|mcp\\\\-host\\\\.a", '
        'container="mcp-host"}[95s])'
    )


def test_no_pod_matches_nothing() -> None:
    assert 'pod=~"^$"' in render_query(
        'pod=~"$pods"', namespace="n", pods=[], container="c", window_s=0
    )


def test_single_value_takes_one_sample_or_a_scalar() -> None:
    assert single_value([{"metric": {}, "value": [1.0, "12.5"]}]) == 12.5
    assert single_value([1.0, "3"]) == 3.0
    assert single_value([]) is None
    assert single_value([{"value": [0, "1"]}, {"value": [0, "2"]}]) is None
    assert single_value([{"value": [0, "NaN"]}]) is None
    assert single_value([{"value": [0, "-1"]}]) is None


def test_a_figure_missing_at_the_end_is_read_one_scrape_later_or_before_the_pods_move_on() -> None:
    """The later read looks one scrape interval (and a second's margin) past the block's
    end, never past the instant something else began on its pods, nor past now."""
    assert later_instant(100.0, 30.0, until=1000.0) == 131.0
    assert later_instant(100.0, 30.0, until=112.5) == 112.5


def test_the_profile_refuses_unknown_placeholders_and_empty_queries() -> None:
    assert MemoryQueries(limit=None).limit is None
    with pytest.raises(ValidationError, match=r"unknown placeholder\(s\) \$pod"):
        MemoryQueries(peak_working_set='max(x{pod=~"$pod"})')
    with pytest.raises(ValidationError, match="cannot be empty"):
        MemoryQueries(restarts=" ")
    # the working set at a block's start and end (the leak figure) is checked alike
    assert MemoryQueries(working_set=None).working_set is None
    with pytest.raises(ValidationError, match=r"unknown placeholder\(s\) \$window2"):
        MemoryQueries(working_set="sum(x[$window2])")


# ---- restarts and OOM kills from the pods' status (memory.restarts_from: pod-status)


def _pod(name: str, restarts: int, reason: str | None = None, at: str = "") -> dict[str, object]:
    last = {"terminated": {"reason": reason, "finishedAt": at}} if reason else {}
    statuses = [
        {"name": "sidecar", "restartCount": 9},
        {"name": "mcp-host", "restartCount": restarts, "lastState": last},
    ]
    return {"metadata": {"name": name}, "status": {"containerStatuses": statuses}}


def test_the_restart_counts_are_the_mcp_host_container_s() -> None:
    pods = [
        _pod("a", 0),
        _pod("b", 2, "OOMKilled", "2026-12-02T15:00:10Z"),
        {"metadata": {"name": "pending"}, "status": {}},
    ]
    got = container_restarts(pods, "mcp-host")
    assert got == {
        "a": ContainerRestarts(0),
        "b": ContainerRestarts(2, 1796223610.0),
    }


def test_restarts_during_a_block_count_from_its_start_or_from_0_for_a_new_pod() -> None:
    start, end = 1796223600.0, 1796223700.0  # 15:00:00 .. 15:01:40
    before = {"a": ContainerRestarts(3), "b": ContainerRestarts(1)}
    after = {
        "a": ContainerRestarts(4, start + 10),  # OOM-killed in the block, restarted
        "b": ContainerRestarts(1, start - 500),  # its old OOM kill, no restart since
        "c": ContainerRestarts(1),  # created during the block, restarted once
        "d": ContainerRestarts(5),  # did not serve the block
    }
    assert restarts_between(before, after, ["a", "b", "c"], start, end) == (2, 1)
    assert restarts_between(before, before, ["a", "b"], start, end) == (0, 0)
    # a pod gone by the end is not counted (its restarts cannot be read)
    assert restarts_between(before, {}, ["a"], start, end) == (0, 0)


def test_restarts_from_is_pod_status_or_prometheus() -> None:
    assert MemoryQueries().restarts_from == "prometheus"
    assert MemoryQueries(restarts_from="pod-status").restarts_from == "pod-status"
    with pytest.raises(ValidationError):
        MemoryQueries(restarts_from="kubectl")  # type: ignore[arg-type]
