"""may_end_wait: when a watch event is worth a look while `kill --wait` waits."""

from __future__ import annotations

from typing import Any

import pytest
from spillover_operator.observed.waiting import may_end_wait


def _policy(observed: int | None, ready: str | None = None, reason: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {}
    if observed is not None:
        status["observedGeneration"] = observed
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": ready, "reason": reason}]
    return {"metadata": {"name": "spillover", "generation": 4}, "status": status}


def _deployment(updated: int, observed: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": "wrc", "generation": 2},
        "spec": {"replicas": 3},
        "status": {
            "observedGeneration": observed,
            "replicas": 3,
            "updatedReplicas": updated,
            "readyReplicas": updated,
            "availableReplicas": updated,
        },
    }


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (None, True),  # no event yet: look
        (_policy(3, "True", "RolloutComplete"), False),  # the operator has not seen gen 4
        (_policy(None), False),  # nor ever reported
        (_policy(4, "False", "RolloutInProgress"), False),  # it says: still rolling out
        (_policy(4, "True", "RolloutComplete"), True),  # it says done: look, to settle
        (_policy(4, "False", "Conflict"), True),  # it refused: look, to fail fast
        (_policy(4), True),  # no Ready condition: the look judges
    ],
)
def test_through_the_operator_the_policys_last_event_decides(
    policy: dict[str, Any] | None, expected: bool
) -> None:
    # The Deployment's rollout is not what decides here: the operator's report is.
    assert may_end_wait(policy, _deployment(updated=1), direct=False) is expected


@pytest.mark.parametrize(
    ("deployment", "expected"),
    [
        (None, True),  # no event yet, or deleted: look (a missing target fails fast)
        (_deployment(updated=1), False),  # rolling out
        (_deployment(updated=3, observed=1), False),  # the new generation not observed
        (_deployment(updated=3), True),  # rolled out: look, to settle
    ],
)
def test_direct_the_deployments_last_event_decides(
    deployment: dict[str, Any] | None, expected: bool
) -> None:
    assert may_end_wait(_policy(3), deployment, direct=True) is expected
