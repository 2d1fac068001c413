"""The pieces of the direct read of the scrape targets (collectors/targets.py) that
need no server: the selector's matchers and the labels Prometheus stores a sample
under. The read itself meets a real Prometheus in
tests/integration/test_block_end_direct.py."""

from __future__ import annotations

import pytest
from spillover_harness.collectors.targets import (
    DirectReadFailed,
    matched_targets,
    parse_matchers,
    series_labels,
)


def _matches(selector: str, labels: dict[str, str]) -> bool:
    return all(m.matches(labels) for m in parse_matchers(selector))


def test_the_matchers_read_as_promql_does() -> None:
    labels = {"namespace": "clerum", "instance": "10.0.0.7:9090", "job": "mcp-host"}
    assert _matches("", labels)
    assert _matches('namespace="clerum", job=~"mcp-.*",', labels)
    assert not _matches('namespace="clerum", job=~"mcp"', labels)  # anchored, as PromQL
    assert _matches('instance!~"10\\\\.0\\\\.0\\\\.8:.*", namespace!="other"', labels)
    assert not _matches('pod!=""', labels)  # an absent label is ""
    assert _matches('pod=""', labels)
    assert _matches('namespace="a,b", job="x"', {"namespace": "a,b", "job": "x"})


@pytest.mark.parametrize("selector", ['namespace="clerum" job="x"', "namespace=clerum", 'j=~"("'])
def test_a_selector_not_understood_fails_the_direct_read(selector: str) -> None:
    with pytest.raises(DirectReadFailed):
        parse_matchers(selector)


def test_a_samples_labels_are_stored_as_prometheus_stores_them() -> None:
    target = {"instance": "h:1", "job": "mcp-host", "namespace": "clerum"}
    assert series_labels(target, {"tool": "read_document"}) == {**target, "tool": "read_document"}
    # honor_labels false: the target's label wins, the sample's is kept as exported_<name>
    assert series_labels(target, {"namespace": "x", "exported_namespace": "y", "e": ""}) == {
        **target,
        "exported_exported_namespace": "x",
        "exported_namespace": "y",
    }


def test_an_unhealthy_matched_target_fails_the_direct_read() -> None:
    active = [
        {"labels": {"instance": "a:1"}, "health": "up", "scrapeUrl": "http://a:1/metrics"},
        {"labels": {"instance": "b:1"}, "health": "down", "scrapeUrl": "http://b:1/metrics"},
    ]
    picked = matched_targets(active, parse_matchers('instance="a:1"'))
    assert [t.scrape_url for t in picked] == ["http://a:1/metrics"]
    with pytest.raises(DirectReadFailed, match="b:1/metrics was 'down'"):
        matched_targets(active, parse_matchers('instance=~".*"'))
