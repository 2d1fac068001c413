"""The kubelet Summary's working sets and the peak taken from them and Prometheus
(`cluster/kubelet_summary.py`). The Summary below has the shape the kubelet serves at
/stats/summary (k8s.io/kubelet/pkg/apis/stats/v1alpha1: `node`, then `pods[]` with
`podRef`, `containers[]` whose `memory` has `time`, `workingSetBytes`, `usageBytes`,
`rssBytes`...). That a real kubelet's Summary is read for a real pod is the integration
test's (tests/integration/test_kubelet_summary_real_node.py)."""

from __future__ import annotations

import json
from typing import Any

from spillover_harness.cluster.kubelet_summary import (
    Figure,
    block_edges,
    combine_peak,
    source_label,
    working_sets,
)

MIB = 1024 * 1024


def _container(name: str, working_set: int | None) -> dict[str, Any]:
    memory: dict[str, Any] = {
        "time": "2026-12-03T13:40:07Z",
        "usageBytes": 300 * MIB,
        "rssBytes": 120 * MIB,
        "pageFaults": 52_000,
        "majorPageFaults": 3,
    }
    if working_set is not None:
        memory["workingSetBytes"] = working_set
    return {
        "name": name,
        "startTime": "2026-12-03T13:01:12Z",
        "cpu": {"time": "2026-12-03T13:40:07Z", "usageNanoCores": 21_000_000},
        "memory": memory,
        "rootfs": {"time": "2026-12-03T13:40:07Z", "usedBytes": 40_960},
        "logs": {"time": "2026-12-03T13:40:07Z", "usedBytes": 8_192},
    }


def _pod(namespace: str, name: str, containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "podRef": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "startTime": "2026-12-03T13:01:10Z",
        "containers": containers,
        "memory": {"time": "2026-12-03T13:40:07Z", "workingSetBytes": 999 * MIB},
        "volume": [{"name": "spill", "usedBytes": 4096}],
    }


SUMMARY = {
    "node": {
        "nodeName": "node-a",
        "startTime": "2026-12-03T12:00:00Z",
        "memory": {"time": "2026-12-03T13:40:07Z", "workingSetBytes": 3_000 * MIB},
        "systemContainers": [{"name": "kubelet", "memory": {"workingSetBytes": 80 * MIB}}],
    },
    "pods": [
        _pod("clerum", "mcp-host-code-review-7f9c", [
            _container("mcp-host", 212 * MIB), _container("istio-proxy", 60 * MIB),
        ]),
        _pod("clerum", "mcp-host-summarize-5d2a", [_container("mcp-host", 180 * MIB)]),
        # before the kubelet's first housekeeping of a new pod: no workingSetBytes yet
        _pod("clerum", "mcp-host-code-review-new", [_container("mcp-host", None)]),
        # another namespace's pod of the same name is not ours
        _pod("other", "mcp-host-code-review-7f9c", [_container("mcp-host", 900 * MIB)]),
    ],
}  # fmt: skip


def test_working_sets_are_the_mcp_host_containers_of_the_namespace() -> None:
    # through JSON, as the API server hands it over
    summary = json.loads(json.dumps(SUMMARY))
    assert working_sets(summary, "clerum", "mcp-host") == {
        "mcp-host-code-review-7f9c": 212 * MIB,
        "mcp-host-summarize-5d2a": 180 * MIB,
    }
    assert working_sets(summary, "clerum", "istio-proxy") == {"mcp-host-code-review-7f9c": 60 * MIB}
    assert working_sets(summary, "nowhere", "mcp-host") == {}


def test_a_summary_of_another_shape_gives_nothing_rather_than_a_wrong_figure() -> None:
    bad_figures = {
        "pods": [
            _pod("clerum", "a", [_container("mcp-host", -1)]),
            _pod("clerum", "b", [{"name": "mcp-host", "memory": {"workingSetBytes": "212"}}]),
            _pod("clerum", "c", [{"name": "mcp-host", "memory": {"workingSetBytes": 1.5e9}}]),
            _pod("clerum", "d", [{"name": "mcp-host", "memory": {"workingSetBytes": True}}]),
            {"podRef": "clerum/e", "containers": []},
            "not a pod",
        ]
    }
    assert working_sets(bad_figures, "clerum", "mcp-host") == {}
    for shape in (None, [], "summary", {"pods": "none"}, {"node": {}}):
        assert working_sets(shape, "clerum", "mcp-host") == {}


def test_the_higher_peak_wins_and_names_its_source_and_step() -> None:
    samples = {"mcp-host-a": 300 * MIB, "mcp-host-b": 250 * MIB, "mcp-host-other": 900 * MIB}
    served = ["mcp-host-a", "mcp-host-b"]  # the other pod served none of the executions
    finer = combine_peak(280 * MIB, 30, samples, served, 1)
    assert (finer.peak_bytes, finer.source) == (300 * MIB, "kubelet-summary@1s")
    coarser = combine_peak(320 * MIB, 30, samples, served, 1)
    assert (coarser.peak_bytes, coarser.source) == (320 * MIB, "prometheus@30s")
    tie = combine_peak(300 * MIB, 15, samples, served, 0.5)
    assert tie.source == "kubelet-summary@0.5s"


def test_without_samples_the_prometheus_peak_stands_and_says_so() -> None:
    """A node whose Summary is refused (403, 404, a kwok node) leaves no sample."""
    fallback = combine_peak(280 * MIB, 30, {}, ["mcp-host-a"])
    assert (fallback.peak_bytes, fallback.source) == (280 * MIB, "prometheus@30s")
    unserved = combine_peak(280 * MIB, 30, {"mcp-host-x": 900 * MIB}, ["mcp-host-a"])
    assert unserved.source == "prometheus@30s"
    only_kubelet = combine_peak(None, 30, {"mcp-host-a": 5}, ["mcp-host-a"])
    assert (only_kubelet.peak_bytes, only_kubelet.source) == (5, "kubelet-summary@1s")
    neither = combine_peak(None, 30, {}, ["mcp-host-a"])
    assert (neither.peak_bytes, neither.source) == (None, None)


def test_source_labels() -> None:
    assert source_label("prometheus", 30.0) == "prometheus@30s"
    assert source_label("kubelet-summary", 1.0) == "kubelet-summary@1s"


def test_a_blocks_edges_are_its_pods_first_and_last_figures_summed() -> None:
    """A block from 100 to 160 (1 s step): each pod's first figure read by its start
    (plus a step), its last at its end (less a step) or later."""
    first = {"a": Figure(200 * MIB, 99.5), "b": Figure(100 * MIB, 101.0)}
    last = {"a": Figure(230 * MIB, 161.0), "b": Figure(120 * MIB, 159.5)}
    assert block_edges(first, last, ["a", "b"], 100.0, 160.0) == (300 * MIB, 350 * MIB)
    assert block_edges(first, last, {"a"}, 100.0, 160.0) == (200 * MIB, 230 * MIB)


def test_a_figure_read_mid_block_is_not_its_start_or_end() -> None:
    first = {"a": Figure(200 * MIB, 99.0), "late": Figure(150 * MIB, 130.0)}
    last = {"a": Figure(230 * MIB, 161.0), "late": Figure(150 * MIB, 140.0)}
    # the late pod was first measured mid-block, and last read 20 s before the end
    assert block_edges(first, last, ["a", "late"], 100.0, 160.0) == (None, None)
    # a pod never measured: neither edge is the block's
    assert block_edges(first, last, ["a", "unseen"], 100.0, 160.0) == (None, None)
    assert block_edges(first, last, [], 100.0, 160.0) == (None, None)
    # the step is the tolerance on both sides
    assert block_edges(first, last, ["late"], 128.0, 142.0, step_s=2) == (150 * MIB, 150 * MIB)
