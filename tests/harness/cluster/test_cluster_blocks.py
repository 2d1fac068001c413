"""cluster/blocks.py's per-series deltas: a block whose pods the switch replaced is
judged on its own series (the Prometheus side is tests/integration/test_block_end_direct.py)."""

from __future__ import annotations

from spillover_harness.cluster.blocks import _pods_not_read, series_deltas
from spillover_harness.collectors.prometheus import PERSISTED, READS


def key(name: str, pod: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return (name, frozenset({"pod": pod, **labels}.items()))


def test_a_pod_started_in_the_block_counts_from_zero_and_an_old_one_not_at_all() -> None:
    start = {key(PERSISTED, "old", tool="read"): 7.0, key(READS, "old"): 9.0}
    end = {key(PERSISTED, "new", tool="read"): 3.0, key(READS, "new"): 4.0}
    deltas = series_deltas(start, end)
    assert (deltas[PERSISTED], deltas[READS]) == (3.0, 4.0)


def test_a_pod_kept_across_the_switch_counts_on_from_its_value_at_the_start() -> None:
    start = {key(PERSISTED, "kept", tool="a"): 5.0, key(PERSISTED, "kept", tool="b"): 1.0}
    end = {key(PERSISTED, "kept", tool="a"): 8.0, key(PERSISTED, "kept", tool="b"): 1.0}
    assert series_deltas(start, end)[PERSISTED] == 3.0


def test_a_series_that_went_down_restarted_and_counts_its_end_value() -> None:
    start = {key(READS, "p"): 10.0}
    end = {key(READS, "p"): 2.0}
    assert series_deltas(start, end)[READS] == 2.0


def test_unknown_metric_names_are_ignored() -> None:
    assert series_deltas({}, {("other_total", frozenset()): 5.0})[PERSISTED] == 0.0


def test_no_series_at_all_means_none_of_the_block_s_pods_was_read() -> None:
    """An end read that found nothing (the block's pods not found yet, the replaced ones
    gone) must not pass for "+0": every pod of the block is unread."""
    assert _pods_not_read({}, {"b", "a"}) == ["a", "b"]


def test_the_pods_not_named_by_any_series_are_the_unread_ones() -> None:
    end = {key(READS, "a"): 1.0, key(PERSISTED, "other", tool="read"): 2.0}
    assert _pods_not_read(end, {"a", "b"}) == ["b"]


def test_series_without_a_pod_label_cannot_tell_which_pods_were_read() -> None:
    assert _pods_not_read({(READS, frozenset({"instance": "x"}.items())): 1.0}, {"a"}) == []
