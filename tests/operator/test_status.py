"""Status building, merge patches, conflict ordering, Events: the pure parts of reconcile."""

from __future__ import annotations

import datetime
from typing import Any

from spillover_operator.constants import BUDGET_VAR, ENABLED_VAR, PASSTHROUGH_VAR, THRESHOLD_VAR
from spillover_operator.envplan import EnvChange
from spillover_operator.events import event_body
from spillover_operator.reconcile import competing_policies, describe_changes
from spillover_operator.rollout import rollout_state
from spillover_operator.status import Condition, build_status, effective_status, merge_patch


def test_effective_status_leaves_absent_out() -> None:
    env = {ENABLED_VAR: "true", THRESHOLD_VAR: None, BUDGET_VAR: "2097152", PASSTHROUGH_VAR: "A"}
    assert effective_status(env) == {
        "enabled": "true",
        "budgetBytes": "2097152",
        "passthrough": "A",
    }


def _build(current: dict[str, Any] | None, ready: bool, *, now: str, kill: bool = False) -> Any:
    return build_status(
        current,
        generation=2,
        ready=Condition("Ready", ready, "R" if ready else "X", "m"),
        applied=Condition("Applied", True, "Applied", "m"),
        kill_switch_engaged=kill,
        now=now,
    )


def test_last_transition_time_only_changes_on_a_flip() -> None:
    first = _build(None, False, now="2026-01-01T00:00:00Z")
    same = _build(first, False, now="2026-01-02T00:00:00Z")
    assert same == first
    assert merge_patch(first, same) == {}
    flipped = _build(same, True, now="2026-01-03T00:00:00Z")
    ready, applied = flipped["conditions"]
    assert ready["lastTransitionTime"] == "2026-01-03T00:00:00Z"
    assert applied["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert ready["observedGeneration"] == 2


def test_kill_switch_engaged_at_is_kept_until_released() -> None:
    engaged = _build(None, True, now="2026-01-01T00:00:00Z", kill=True)
    assert engaged["killSwitch"] == {"engagedAt": "2026-01-01T00:00:00Z"}
    later = _build(engaged, True, now="2026-01-05T00:00:00Z", kill=True)
    assert later["killSwitch"] == {"engagedAt": "2026-01-01T00:00:00Z"}
    released = _build(later, True, now="2026-01-06T00:00:00Z")
    assert "killSwitch" not in released
    assert merge_patch(later, released) == {"killSwitch": None}


def test_merge_patch() -> None:
    current = {"a": 1, "b": {"x": 1, "y": 2}, "c": [1], "gone": True}
    desired = {"a": 1, "b": {"x": 1, "z": 3}, "c": [1, 2]}
    assert merge_patch(current, desired) == {"b": {"y": None, "z": 3}, "c": [1, 2], "gone": None}
    assert merge_patch(desired, desired) == {}
    assert merge_patch(None, {"a": 1}) == {"a": 1}


def test_rollout_in_status_is_stable() -> None:
    dep = {"metadata": {"name": "w", "generation": 1}, "spec": {"replicas": 0}, "status": {}}
    status = build_status(
        None,
        generation=1,
        ready=Condition("Ready", False, "R", "m"),
        applied=Condition("Applied", True, "A", "m"),
        rollout=rollout_state(dep),
        now="t",
    )
    assert merge_patch(status, dict(status)) == {}


def _policy(name: str, created: str, target: str = "wrc", deleting: bool = False) -> Any:
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-09T00:00:00Z"
    return {"metadata": meta, "spec": {"target": {"deployment": target}}}


def test_competing_policies_oldest_first_then_name() -> None:
    policies = [
        _policy("b", "2026-01-02T00:00:00Z"),
        _policy("a", "2026-01-02T00:00:00Z"),
        _policy("z", "2026-01-01T00:00:00Z"),
        _policy("other", "2025-01-01T00:00:00Z", target="another"),
        _policy("old-deleting", "2020-01-01T00:00:00Z", deleting=True),
        {
            "metadata": {"name": "invalid", "creationTimestamp": "2019-01-01T00:00:00Z"},
            "spec": {"target": {"deployment": "wrc"}, "thresholdBytes": 1},
        },
    ]
    assert competing_policies(policies, "wrc") == ["z", "a", "b"]
    assert competing_policies(policies, "wrc", include="old-deleting") == [
        "old-deleting",
        "z",
        "a",
        "b",
    ]


def test_describe_changes() -> None:
    text = describe_changes(
        [EnvChange("A", None, "1"), EnvChange("B", "1", "2"), EnvChange("C", "3", None)]
    )
    assert text == "set A=1; set B=2 (was 1); removed C (was 3)"
    assert describe_changes([]) == "no change"


def test_event_body() -> None:
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "wrc", "namespace": "clerum", "uid": "u1", "resourceVersion": "7"},
    }
    now = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    body = event_body(obj, "Normal", "Applied", "x" * 2000, now=now)
    assert body["involvedObject"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "wrc",
        "namespace": "clerum",
        "uid": "u1",
        "resourceVersion": "7",
    }
    assert body["metadata"] == {"generateName": "wrc.", "namespace": "clerum"}
    assert body["firstTimestamp"] == "2026-01-02T03:04:05Z"
    assert len(body["message"]) == 1000
