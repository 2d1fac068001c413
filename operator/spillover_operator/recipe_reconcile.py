"""Checking (and, when the policy says so, refreshing) the recipe mcp-host pods of a
policy, through the client library. The operator runs it on every reconcile;
`spilloverctl --direct` runs the same steps itself. What it decides is in the pure
`spillover_operator.recipe_pods`; this module reads and writes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spillover_operator.client import (
    ClientError,
    Connection,
    Forbidden,
    delete_pod,
    observe_recipe_pods,
    restart_workload,
)
from spillover_operator.constants import REFRESH_REQUEST_ANNOTATION
from spillover_operator.policy import PolicySpec
from spillover_operator.recipe_pods import (
    ChangedAt,
    Owner,
    RecipePods,
    RefreshStep,
    next_refresh,
    parse_time,
    recipe_condition,
    refresh_wanted,
    restart_patch,
)
from spillover_operator.resolved_env import ConfigMapLookup
from spillover_operator.status import Condition

log = logging.getLogger(__name__)

Event = tuple[str, str, str]  # (type, reason, message) on the policy


def refresh_request(policy: Mapping[str, Any]) -> str:
    """The token of a pending `--refresh-recipe-pods` request ("" when none)."""
    annotations = (policy.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(REFRESH_REQUEST_ANNOTATION) or "")


def run_step(conn: Connection, step: RefreshStep, at: str) -> None:
    """Do one refresh step: a rollout restart, or deleting the pods of a controller that
    recreates them. Raises the client's errors (Forbidden without the refresh Role)."""
    if step.owner is None:
        return
    if step.action == "restart":
        restart_workload(conn, step.owner.kind, step.owner.name, restart_patch(at))
    elif step.action == "delete":
        for name in step.pods:
            delete_pod(conn, name)


def describe_step(step: RefreshStep) -> str:
    """The step for Events and output: the owner and how many pods (no pod names)."""
    if step.action == "restart":
        return f"rollout restart of {step.owner} ({len(step.pods)} stale pods)"
    if step.action == "delete":
        return f"deleted {len(step.pods)} stale pods of {step.owner}, which recreates them"
    return "nothing"


RefreshRefusal = Callable[[Owner], str | None]


def refused_note(step: RefreshStep, refusal: RefreshRefusal) -> str:
    """Why the step's refused owners were left alone (each owner's reason)."""
    return "; ".join(str(refusal(owner)) for owner in step.refused)


@dataclass(frozen=True)
class RecipeOutcome:
    """What the recipe-pod step found and did: status.recipePods, the condition, the
    Events to post on the policy, and the seconds from the policy's last change to every
    pod current (once per change, for the histogram)."""

    pods: RecipePods
    status: dict[str, Any]
    condition: Condition
    events: list[Event] = field(default_factory=list)
    converged_seconds: float | None = None


def _previous_refreshes(
    previous: Mapping[str, Any], round_id: str
) -> tuple[dict[Owner, str], dict[Owner, int], dict[Owner, int]]:
    """(owner -> when last refreshed, owner -> how many stale pods it had then, owner ->
    how often it was refreshed) of this round."""
    if previous.get("refreshRound") != round_id:
        return {}, {}, {}
    at: dict[Owner, str] = {}
    pods: dict[Owner, int] = {}
    times: dict[Owner, int] = {}
    for item in previous.get("refreshed") or []:
        if isinstance(item, Mapping):
            kind, _, name = str(item.get("owner", "")).partition("/")
            at[Owner(kind, name)] = str(item.get("at", ""))
            count = item.get("pods")
            pods[Owner(kind, name)] = count if isinstance(count, int) else 0
            n = item.get("times")
            times[Owner(kind, name)] = n if isinstance(n, int) and n > 0 else 1
    return at, pods, times


def reconcile_recipe_pods(
    conn: Connection,
    policy: Mapping[str, Any],
    spec: PolicySpec,
    desired: Mapping[str, str | None],
    *,
    rollout_complete: bool,
    config_maps: ConfigMapLookup,
    now: str,
    last_applied: str | None,
    refusal: RefreshRefusal,
    changed_at: ChangedAt | None = None,
) -> RecipeOutcome:
    """Classify the recipe pods and take at most one refresh step (only once the WRC
    rollout is complete: before that the WRC itself still runs the old values).

    `refusal` says why an owner of stale pods may not be refreshed (None: it may): the
    operator's refresh allow-list. A refused owner is never restarted nor are its pods
    deleted, whatever the policy's selector matched; a Warning
    `RecipePodsRefreshForbidden` names it, once per set of refused owners."""
    meta = policy.get("metadata") or {}
    status = policy.get("status") or {}
    previous = status.get("recipePods") if isinstance(status.get("recipePods"), Mapping) else {}
    previous = previous or {}
    pods = observe_recipe_pods(conn, spec, desired, config_maps, changed_at, from_cache=True)

    token = refresh_request(policy)
    requested = bool(token) and previous.get("handledRequest") != token
    round_id = f"{meta.get('generation')}/{token if requested else ''}"
    refreshed, expected, times = _previous_refreshes(previous, round_id)
    wanted = refresh_wanted(spec.recipe_pods, spec.enabled, requested)
    events: list[Event] = []
    note = ""
    step = next_refresh(
        pods, refreshed, expected, lambda owner: refusal(owner) is None, times=times
    )
    handled = previous.get("handledRequest")
    if wanted and not rollout_complete and pods.stale_pods():
        note = "refresh waits for the WRC rollout to complete"
    elif wanted and step.action in ("restart", "delete") and step.owner is not None:
        try:
            run_step(conn, step, now)
        except Forbidden as exc:
            note = (
                f"refresh of {step.owner} not permitted ({exc.message}); include "
                "manifests/components/recipe-pods-refresh with this workload in the "
                "allow-list (the Role spillover-operator-refresh), or restart the pods by hand"
            )
            events.append(("Warning", "RecipePodsRefreshForbidden", note))
        except ClientError as exc:
            note = f"refresh of {step.owner} failed: {exc.message}"
            events.append(("Warning", "RecipePodsRefreshFailed", note))
        else:
            times[step.owner] = times.get(step.owner, 0) + 1 if step.owner in refreshed else 1
            refreshed[step.owner] = now
            expected[step.owner] = len(step.pods)
            events.append(("Normal", "RecipePodsRefresh", describe_step(step)))
    elif wanted and step.action == "wait" and step.owner is not None:
        note = f"refresh: waiting for {step.owner} to replace its stale pods"
    elif wanted and step.action == "none" and requested:
        handled = token
    refused = [str(o) for o in step.refused] if wanted else []
    if refused:
        why = refused_note(step, refusal)
        note = (note + "; " if note else "") + f"refresh refused: {why}"
        if previous.get("refreshRefused") != refused:
            events.append(("Warning", "RecipePodsRefreshForbidden", f"refresh refused: {why}"))
    if step.unrefreshable:
        note = (note + "; " if note else "") + (
            f"{len(step.unrefreshable)} stale pods not refreshed (no controller recreates them)"
        )

    condition = recipe_condition(pods, stale_after_refresh=step.stale_after_refresh, note=note)
    body = pods.to_status()
    body["refreshRound"] = round_id
    body["refreshed"] = [
        {"owner": str(o), "at": at, "pods": expected.get(o, 0), "times": times.get(o, 1)}
        for o, at in sorted(refreshed.items())
    ]
    if refused:
        body["refreshRefused"] = refused
    if step.stale_after_refresh:
        body["staleAfterRefresh"] = [str(o) for o in step.stale_after_refresh]
    if handled:
        body["handledRequest"] = handled
    converged: float | None = None
    if pods.matched and not pods.stale_pods():
        body["currentFor"] = last_applied or previous.get("currentFor")
        if last_applied and previous.get("currentFor") != last_applied:
            start = parse_time(last_applied)
            if start is not None:
                converged = max(0.0, time.time() - start.timestamp())
    elif previous.get("currentFor"):
        body["currentFor"] = previous.get("currentFor")
    body = {k: v for k, v in body.items() if v is not None}

    counts = ("matched", "current", "stale", "unknown")
    if any(previous.get(k) != body.get(k) for k in counts):
        type_ = "Warning" if body["stale"] else "Normal"
        events.append((type_, "RecipePods", condition.message))
    return RecipeOutcome(pods, body, condition, events, converged)
