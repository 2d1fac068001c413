"""The memory queries' placeholders and answers (collectors/memory.py, profile.memory);
the queries themselves run on a real Prometheus in
tests/integration/test_block_memory_prometheus.py."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from spillover_harness.collectors.memory import render_query, single_value
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


def test_the_profile_refuses_unknown_placeholders_and_empty_queries() -> None:
    assert MemoryQueries(limit=None).limit is None
    with pytest.raises(ValidationError, match=r"unknown placeholder\(s\) \$pod"):
        MemoryQueries(peak_working_set='max(x{pod=~"$pod"})')
    with pytest.raises(ValidationError, match="cannot be empty"):
        MemoryQueries(restarts=" ")
