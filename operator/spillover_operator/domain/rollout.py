"""The rollout state of a Deployment, judged as `kubectl rollout status` does."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RolloutState:
    desired: int
    updated: int
    ready: int
    available: int
    observed_generation: int | None
    generation: int | None
    complete: bool
    message: str

    def to_status(self) -> dict[str, Any]:
        """The camelCase form written to a SpilloverPolicy's status.rollout (unknown
        generations left out)."""
        body: dict[str, Any] = {
            "desired": self.desired,
            "updated": self.updated,
            "ready": self.ready,
            "available": self.available,
            "observedGeneration": self.observed_generation,
            "generation": self.generation,
            "complete": self.complete,
            "message": self.message,
        }
        return {key: value for key, value in body.items() if value is not None}


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return value


def _opt_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def rollout_state(deployment: Mapping[str, Any]) -> RolloutState:
    """Whether the Deployment's current template is fully rolled out.

    Complete means: the controller observed the current generation, every desired
    replica is updated and available, and no old replica is left (the logic of
    `kubectl rollout status`).
    """
    meta = deployment.get("metadata") or {}
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    name = meta.get("name", "<unnamed>")

    replicas = spec.get("replicas")
    desired = 1 if replicas is None else _int(replicas)
    generation = _opt_int(meta.get("generation"))
    observed = _opt_int(status.get("observedGeneration"))
    total = _int(status.get("replicas"))
    updated = _int(status.get("updatedReplicas"))
    ready = _int(status.get("readyReplicas"))
    available = _int(status.get("availableReplicas"))

    def state(complete: bool, message: str) -> RolloutState:
        return RolloutState(
            desired=desired,
            updated=updated,
            ready=ready,
            available=available,
            observed_generation=observed,
            generation=generation,
            complete=complete,
            message=message,
        )

    if generation is not None and (observed is None or observed < generation):
        return state(False, "waiting for the deployment spec update to be observed")
    for cond in status.get("conditions") or []:
        if (
            isinstance(cond, Mapping)
            and cond.get("type") == "Progressing"
            and cond.get("reason") == "ProgressDeadlineExceeded"
        ):
            return state(False, f"deployment {name!r} exceeded its progress deadline")
    if updated < desired:
        return state(
            False,
            f"waiting for rollout to finish: {updated} of {desired} new replicas have been updated",
        )
    if total > updated:
        return state(
            False,
            f"waiting for rollout to finish: {total - updated} old replicas are "
            "pending termination",
        )
    if available < updated:
        return state(
            False,
            f"waiting for rollout to finish: {available} of {updated} updated replicas "
            "are available",
        )
    return state(True, f"deployment {name!r} successfully rolled out")


def rollout_step(deployment: Mapping[str, Any]) -> bool:
    """Whether the Deployment is in a rollout the controller has already observed: its
    status is at a step on the way (counts moving), not at a change of its spec (a new
    generation not observed yet) nor at the rollout's end."""
    state = rollout_state(deployment)
    return (
        not state.complete
        and state.generation is not None
        and state.observed_generation == state.generation
    )
