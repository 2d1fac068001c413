"""handlers.views: the operator's reads from kopf's indexes (no API needed)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration
from spillover_operator.client import Connection
from spillover_operator.domain.model import PolicySpec
from spillover_operator.domain.policy import InvalidSpecError, PolicyCopy
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
        views.POLICIES: {
            key: [copy]
            for p in policies
            for key, copy in views.policy_entry(NS, p["metadata"]["name"], p).items()
        },
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


def test_a_reader_is_current_for_what_it_read_from_the_api_or_cannot_confirm() -> None:
    # Never used to send a request: `current` only asks what the reader holds.
    conn = Connection(ApiClient(Configuration()), NS, "spillover-operator")
    reader = views.IndexReader(NS, _indexes(_policy("a", "wrc")), cluster=conn)
    assert not reader.current(policy="a", deployment=None)
    assert reader.current(policy=None, deployment=None)
    read_policy = replace(reader, read=frozenset({("policy", "a")}))
    assert read_policy.current(policy="a", deployment=None)
    assert not read_policy.current(policy="a", deployment="wrc")
    assert replace(reader, trusted=True).current(policy="a", deployment="wrc")
    assert views.IndexReader(NS, _indexes()).current(policy="a", deployment="wrc")


def test_snapshot_drops_managed_fields_and_copies() -> None:
    body = {"metadata": {"name": "x", "managedFields": [{"manager": "m"}]}, "spec": {"a": [1]}}
    copy = views.snapshot(body)
    assert copy == {"metadata": {"name": "x"}, "spec": {"a": [1]}}
    copy["spec"]["a"].append(2)
    assert body["spec"]["a"] == [1]


def _with_uid(policy: dict[str, Any], uid: str = "u1") -> dict[str, Any]:
    policy["metadata"]["uid"] = uid
    return policy


def test_a_status_write_answer_newer_than_the_index_copy_is_read() -> None:
    old = _with_uid(_policy("p", "wrc", rv="10"))
    written = {(NS, "p"): _with_uid(_policy("p", "wrc", rv="12"))}
    reader = views.IndexReader(NS, _indexes(old), written=written)
    assert reader.policy("p") == written[(NS, "p")]
    # An index copy newer than the answer (the policy changed since) wins.
    newer_copy = _with_uid(_policy("p", "wrc", rv="15"))
    assert views.IndexReader(NS, _indexes(newer_copy), written=written).policy("p") == newer_copy


def test_an_answer_about_another_object_or_without_a_number_is_never_newer() -> None:
    copy = _with_uid(_policy("p", "wrc", rv="10"))
    other_uid = _with_uid(_policy("p", "wrc", rv="99"), uid="u2")  # deleted and recreated
    assert views.newer(copy, other_uid) is copy
    opaque = _with_uid(_policy("p", "wrc", rv="abc"))
    assert views.newer(copy, opaque) is copy
    assert views.newer(copy, None) is copy


def test_remember_keeps_the_answer_for_every_reader_sharing_the_dict() -> None:
    written: dict[Any, dict[str, Any]] = {}
    copy = _with_uid(_policy("p", "wrc", rv="3"))
    first = views.IndexReader(NS, _indexes(copy), written=written)
    first.remember(_with_uid(_policy("p", "wrc", rv="4")))
    second = views.IndexReader(NS, _indexes(copy), written=written)
    assert second.policy("p") is not None
    assert second.policy("p")["metadata"]["resourceVersion"] == "4"  # type: ignore[index]


def test_without_copies_reads_the_index_again() -> None:
    """A failed pass is retried with what the indexes hold then, not the event's copy
    (nor what it confirmed) that failed."""
    indexed = _policy("p", "wrc", rv="7")
    event_copy = _policy("p", "wrc", rv="5")
    reader = views.IndexReader(NS, _indexes(indexed), {("policy", "p"): event_copy})
    assert reader.policy("p") == event_copy
    again = reader.without_copies()
    assert again.policy("p") == indexed and again.read == frozenset()


def test_the_operator_s_own_patch_of_a_deployment_is_newer_than_the_index_copy() -> None:
    """A change the operator has just made must not look not made because kopf's copy
    lags behind it: planned again, it would be announced again (a second Applied)."""
    indexes = _indexes(_policy("p", "wrc"))
    indexes[views.DEPLOYMENTS] = {(NS, "wrc"): [_with_uid(_policy("wrc", "x", rv="10"))]}
    patched: dict[Any, dict[str, Any]] = {}
    views.IndexReader(NS, indexes, written_deployments=patched).remember_deployment(
        _with_uid(_policy("wrc", "x", rv="11"))
    )
    later = views.IndexReader(NS, indexes, written_deployments=patched)
    assert later.deployment("wrc")["metadata"]["resourceVersion"] == "11"  # type: ignore[index]
    # The index catching up past it (someone changed it since) wins again.
    indexes[views.DEPLOYMENTS] = {(NS, "wrc"): [_with_uid(_policy("wrc", "x", rv="12"))]}
    assert later.deployment("wrc")["metadata"]["resourceVersion"] == "12"  # type: ignore[index]


def test_the_index_handler_parses_each_copy_and_every_reader_keeps_its_parse() -> None:
    """The spec is parsed where a copy comes in: kopf's index handler for what the watch
    delivers; the event's own object, a status write's answer and a GET of the same
    spec (same uid and generation) keep that parse; a new generation is parsed."""
    indexed = _with_uid(_policy("p", "wrc", rv="3"))
    indexed["metadata"]["generation"] = 1
    entry = views.policy_entry(NS, "p", indexed)[(NS, "p")]
    assert isinstance(entry, PolicyCopy) and isinstance(entry.spec, InvalidSpecError)
    indexes = _indexes(indexed)
    kept = indexes[views.POLICIES][(NS, "p")][0]

    same = views.event_policy(indexes, NS, {**indexed, "status": {"seen": True}})
    assert same.spec is kept.spec and same["status"] == {"seen": True}
    assert views.event_policy(indexes, NS, same) is same

    written: dict[Any, Any] = {}
    reader = views.IndexReader(NS, indexes, written=written)
    reader.remember({**indexed, "metadata": {**indexed["metadata"], "resourceVersion": "4"}})
    assert written[(NS, "p")].spec is kept.spec

    edited = {**indexed, "metadata": {**indexed["metadata"], "generation": 2}}
    edited["spec"] = {"enabled": False, "target": {"deployment": "wrc"}}
    fresh = views.event_policy(indexes, NS, edited)
    assert isinstance(fresh.spec, PolicySpec) and fresh.spec.enabled is False


def test_a_policy_index_of_plain_dicts_is_refused_not_parsed_again() -> None:
    indexes = _indexes()
    indexes[views.POLICIES] = {(NS, "p"): [_policy("p", "wrc")]}
    with pytest.raises(TypeError, match="not a PolicyCopy"):
        views.IndexReader(NS, indexes).policy("p")
