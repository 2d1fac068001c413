"""Building a SpilloverPolicy's status, and the merge patch that gets it there.

Pure functions: given what the reconciler found, what the status must say.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spillover_operator.domain.model import COND_READY, STATUS_KEYS
from spillover_operator.domain.resolved_env import Resolved
from spillover_operator.domain.rollout import RolloutState


def now_rfc3339(*, millis: bool = False) -> str:
    """Now, as Kubernetes writes times (whole seconds), or with milliseconds: a time
    that tells changes apart (lastAppliedTime: two changes in one second are two)."""
    now = datetime.datetime.now(datetime.UTC)
    if millis:
        return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
    return now.replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str


def effective_status(env: Mapping[str, str | None]) -> dict[str, Any]:
    """status.effective: the values set on the target container (absent keys: unset)."""
    fields = {key: env.get(var) for var, key in STATUS_KEYS.items()}
    return {key: value for key, value in fields.items() if value is not None}


def resolved_status(resolved: Mapping[str, Resolved]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(status.effective, status.effectiveSource) from the variables as the WRC process
    sees them: the value (`unknown` when it may not be read, a Secret), and where each
    value that is not a plain `env` entry comes from (`envFrom configMap wrc-tuning`,
    `env (secretKeyRef creds/t): Secrets are not read`). Unset variables are left out."""
    effective: dict[str, Any] = {}
    sources: dict[str, Any] = {}
    for var, key in STATUS_KEYS.items():
        found = resolved.get(var)
        if found is None or found.state == "unset":
            continue
        effective[key] = found.value if found.state == "set" else "unknown"
        if found.source != "env":
            sources[key] = found.source
    return effective, sources


def _conditions(
    current: Any, wanted: list[Condition], generation: int | None, now: str
) -> list[dict[str, Any]]:
    """The condition list; lastTransitionTime only changes when the status flips."""
    previous: dict[str, Mapping[str, Any]] = {}
    if isinstance(current, list):
        for cond in current:
            if isinstance(cond, Mapping) and isinstance(cond.get("type"), str):
                previous[cond["type"]] = cond
    result: list[dict[str, Any]] = []
    for cond in wanted:
        status = "True" if cond.status else "False"
        before = previous.get(cond.type)
        transition = now
        if (
            before is not None
            and before.get("status") == status
            and before.get("lastTransitionTime")
        ):
            transition = str(before["lastTransitionTime"])
        entry: dict[str, Any] = {
            "type": cond.type,
            "status": status,
            "reason": cond.reason,
            "message": cond.message,
            "lastTransitionTime": transition,
        }
        if generation is not None:
            entry["observedGeneration"] = generation
        result.append(entry)
    return result


def build_status(
    current: Mapping[str, Any] | None,
    *,
    generation: int | None,
    ready: Condition,
    applied: Condition,
    target: Mapping[str, Any] | None = None,
    effective: Mapping[str, Any] | None = None,
    rollout: RolloutState | None = None,
    kill_switch_engaged: bool = False,
    now: str | None = None,
    extra_conditions: list[Condition] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole desired status. Timestamps are carried over from `current` when the
    state they date did not change."""
    current = current or {}
    stamp = now or now_rfc3339()
    status: dict[str, Any] = {
        "conditions": _conditions(
            current.get("conditions"),
            [
                Condition(COND_READY, ready.status, ready.reason, ready.message),
                applied,
                *(extra_conditions or []),
            ],
            generation,
            stamp,
        )
    }
    if generation is not None:
        status["observedGeneration"] = generation
    if target is not None:
        status["target"] = dict(target)
    if effective is not None:
        status["effective"] = dict(effective)
    if rollout is not None:
        status["rollout"] = rollout.to_status()
    if kill_switch_engaged:
        engaged_at = None
        previous = current.get("killSwitch")
        if isinstance(previous, Mapping):
            engaged_at = previous.get("engagedAt")
        status["killSwitch"] = {"engagedAt": engaged_at or stamp}
    for key, value in (extra or {}).items():
        if value is not None:
            status[key] = value
    # Carried over: when the operator last changed the Deployment.
    if current.get("lastAppliedTime"):
        status["lastAppliedTime"] = current["lastAppliedTime"]
    return status


def merge_patch(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) turning `current` into `desired`; {} if equal.

    Keys of `current` missing from `desired` become null (removed). Lists are replaced.
    """
    current = current or {}
    patch: dict[str, Any] = {}
    for key, value in desired.items():
        before = current.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_patch(before, value)
            if sub:
                patch[key] = sub
        elif key not in current or before != value:
            patch[key] = value
    for key in current:
        if key not in desired:
            patch[key] = None
    return patch


def with_condition(
    status: dict[str, Any],
    current: Mapping[str, Any] | None,
    cond: Condition,
    *,
    generation: int | None,
    now: str,
) -> dict[str, Any]:
    """`status` (from build_status) with one more condition; its lastTransitionTime is
    carried over from `current` (the stored status) when its status did not flip."""
    previous = (current or {}).get("conditions")
    entry = _conditions(previous, [cond], generation, now)[0]
    kept = [c for c in status.get("conditions") or [] if c.get("type") != cond.type]
    return {**status, "conditions": [*kept, entry]}
