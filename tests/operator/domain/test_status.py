"""Status building and merge patches (spillover_operator.domain.status)."""

from __future__ import annotations

from typing import Any

from spillover_operator.domain.model import BUDGET_VAR, ENABLED_VAR, PASSTHROUGH_VAR, THRESHOLD_VAR
from spillover_operator.domain.rollout import rollout_state
from spillover_operator.domain.status import Condition, build_status, effective_status, merge_patch


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


def test_now_with_milliseconds_tells_two_changes_in_one_second_apart() -> None:
    import datetime
    import re

    from spillover_operator.domain.status import now_rfc3339

    precise = now_rfc3339(millis=True)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", precise), precise
    assert datetime.datetime.fromisoformat(precise.replace("Z", "+00:00")).tzinfo is not None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", now_rfc3339())
