"""handlers.views: the operator's reads from kopf's indexes (no API needed)."""

from __future__ import annotations

from typing import Any

from spillover_operator.handlers import views

NS = "ns"


def _policy(name: str, target: str, rv: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS, "resourceVersion": rv},
        "spec": {"target": {"deployment": target}},
    }


def _indexes(*policies: dict[str, Any]) -> dict[str, Any]:
    by_target: dict[Any, list[str]] = {}
    for p in policies:
        by_target.setdefault((NS, p["spec"]["target"]["deployment"]), []).append(
            p["metadata"]["name"]
        )
    return {
        views.POLICIES: {(NS, p["metadata"]["name"]): [p] for p in policies},
        views.DEPLOYMENTS: {(NS, "wrc"): [{"metadata": {"name": "wrc"}}]},
        views.BY_TARGET: by_target,
    }


def test_the_events_own_object_wins_over_its_index_entry() -> None:
    stale = _policy("a", "wrc", rv="1")
    current = _policy("a", "wrc", rv="2")
    reader = views.IndexReader(NS, _indexes(stale), {("policy", "a"): current})
    assert reader.policy("a") == current
    assert reader.deployment("wrc") == {"metadata": {"name": "wrc"}}
    assert reader.deployment("gone") is None


def test_policies_targeting_come_from_the_target_index() -> None:
    reader = views.IndexReader(NS, _indexes(_policy("b", "wrc"), _policy("a", "wrc")))
    assert reader.names_targeting("wrc") == ["a", "b"]
    assert [p["metadata"]["name"] for p in reader.policies_targeting("wrc")] == ["a", "b"]
    assert reader.policies_targeting("other") == []


def test_a_trusted_reader_or_one_without_a_cluster_confirms_nothing() -> None:
    reader = views.IndexReader(NS, _indexes(_policy("a", "wrc")), trusted=True)
    assert reader.confirmed(policy="a", deployment="wrc") is None
    assert views.IndexReader(NS, _indexes()).confirmed(policy="a", deployment=None) is None


def test_snapshot_drops_managed_fields_and_copies() -> None:
    body = {"metadata": {"name": "x", "managedFields": [{"manager": "m"}]}, "spec": {"a": [1]}}
    copy = views.snapshot(body)
    assert copy == {"metadata": {"name": "x"}, "spec": {"a": [1]}}
    copy["spec"]["a"].append(2)
    assert body["spec"]["a"] == [1]
