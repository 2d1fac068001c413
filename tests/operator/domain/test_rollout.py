"""rollout_state: the `kubectl rollout status` logic."""

from __future__ import annotations

from typing import Any

import pytest
from spillover_operator.domain.rollout import rollout_state, rollout_step


def dep(
    *,
    replicas: int | None = 2,
    generation: int = 3,
    observed: int | None = 3,
    total: int = 2,
    updated: int = 2,
    ready: int = 2,
    available: int = 2,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if replicas is not None:
        spec["replicas"] = replicas
    status: dict[str, Any] = {
        "replicas": total,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": available,
    }
    if observed is not None:
        status["observedGeneration"] = observed
    if conditions:
        status["conditions"] = conditions
    return {"metadata": {"name": "wrc", "generation": generation}, "spec": spec, "status": status}


def test_complete() -> None:
    state = rollout_state(dep())
    assert state.complete
    assert (state.desired, state.updated, state.ready, state.available) == (2, 2, 2, 2)
    assert (state.generation, state.observed_generation) == (3, 3)
    assert "successfully rolled out" in state.message


def test_generation_not_observed() -> None:
    state = rollout_state(dep(observed=2))
    assert not state.complete
    assert "spec update to be observed" in state.message


def test_no_status_at_all() -> None:
    state = rollout_state({"metadata": {"name": "wrc", "generation": 1}, "spec": {}})
    assert not state.complete
    assert state.desired == 1  # replicas defaults to 1
    assert state.observed_generation is None


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"updated": 1, "total": 3}, "1 of 2 new replicas have been updated"),
        ({"total": 3}, "1 old replicas are pending termination"),
        ({"available": 1}, "1 of 2 updated replicas are available"),
        (
            {"conditions": [{"type": "Progressing", "reason": "ProgressDeadlineExceeded"}]},
            "exceeded its progress deadline",
        ),
    ],
)
def test_incomplete(kwargs: dict[str, Any], fragment: str) -> None:
    state = rollout_state(dep(**kwargs))
    assert not state.complete
    assert fragment in state.message


def test_zero_replicas_is_complete() -> None:
    state = rollout_state(dep(replicas=0, total=0, updated=0, ready=0, available=0))
    assert state.complete


def test_to_status_leaves_unknown_out() -> None:
    state = rollout_state({"metadata": {"name": "wrc"}, "spec": {"replicas": 0}})
    body = state.to_status()
    assert "generation" not in body and "observedGeneration" not in body
    assert body["complete"] is True


@pytest.mark.parametrize(
    ("kwargs", "step"),
    [
        ({"updated": 1, "available": 1}, True),  # observed, on its way
        ({"total": 3}, True),  # an old replica still terminating
        ({}, False),  # the end of the rollout
        ({"observed": 2, "updated": 1}, False),  # a new generation: a change, not a step
        ({"observed": None, "updated": 1}, False),  # nothing observed yet
    ],
)
def test_rollout_step(kwargs: dict[str, Any], step: bool) -> None:
    assert rollout_step(dep(**kwargs)) is step
