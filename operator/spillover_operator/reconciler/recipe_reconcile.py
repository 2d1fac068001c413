"""Checking (and, when the policy says so, refreshing) the recipe mcp-host pods of a
policy, through the client library. The operator runs it on every reconcile;
`spilloverctl --direct` runs the same steps itself. What it decides is in the pure
`spillover_operator.domain.recipe_pods`; this module reads and writes.
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
    restart_workload,
)
from spillover_operator.domain.constants import REFRESH_REQUEST_ANNOTATION
from spillover_operator.domain.model import (
    EVENT_RECIPE_PODS,
    EVENT_RECIPE_PODS_REFRESH,
    EVENT_RECIPE_PODS_REFRESH_FAILED,
    EVENT_RECIPE_PODS_REFRESH_FORBIDDEN,
    PolicySpec,
)
from spillover_operator.domain.recipe_pods import (
    ChangedAt,
    Owner,
    OwnerState,
    RecipePods,
    RefreshStep,
    next_refresh,
    parse_time,
    recipe_condition,
    refresh_wanted,
    restart_patch,
)
from spillover_operator.domain.resolved_env import ConfigMapLookup
from spillover_operator.domain.status import Condition
from spillover_operator.observed import observe_recipe_pods, observe_refresh

log = logging.getLogger(__name__)

Event = tuple[str, str, str]  # (type, reason, message) on the policy


def refresh_request(policy: Mapping[str, Any]) -> str:
    """The token of a pending `--refresh-recipe-pods` request ("" when none)."""
    annotations = (policy.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(REFRESH_REQUEST_ANNOTATION) or "")


def run_step(conn: Connection, step: RefreshStep, at: str) -> int | None:
    """Do one refresh step: a rollout restart, or deleting the pods of a controller that
    recreates them. Answers the generation a restart wrote (None otherwise). Raises the
    client's errors (Forbidden without the refresh Role)."""
    if step.owner is None:
        return None
    if step.action == "restart":
        body = restart_workload(conn, step.owner.kind, step.owner.name, restart_patch(at))
        generation = (body.get("metadata") or {}).get("generation")
        return generation if isinstance(generation, int) else None
    if step.action == "delete":
        for name in step.pods:
            delete_pod(conn, name)
    return None


def describe_step(step: RefreshStep, times: int = 1) -> str:
    """The step for Events and output: the owner and how many pods (no pod names);
    `times`: how often the owner was refreshed in this round with this step."""
    again = f", again: {_nth(times)} time in this round" if times > 1 else ""
    if step.action == "restart":
        return f"rollout restart of {step.owner} ({len(step.pods)} stale pods{again})"
    if step.action == "delete":
        return (
            f"deleted {len(step.pods)} stale pods of {step.owner}, which recreates them"
            f"{again.replace(', again', ' (again')}{')' if again else ''}"
        )
    return "nothing"


def _nth(n: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


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
    # Look again after this many seconds: the refresh waits for something no watch of
    # the operator reports (a ConfigMap the WRC passes the value on through, a recipe
    # workload's rollout).
    recheck_seconds: float | None = None


@dataclass
class RefreshRecord:
    """status.recipePods.refreshed of one round, by owner: when it was last refreshed,
    how many stale pods it had then, how often it was refreshed, and the generation its
    last restart wrote. What a restarted operator resumes from."""

    at: dict[Owner, str] = field(default_factory=dict)
    pods: dict[Owner, int] = field(default_factory=dict)
    times: dict[Owner, int] = field(default_factory=dict)
    generations: dict[Owner, int] = field(default_factory=dict)

    def note(self, owner: Owner, at: str, pods: int, generation: int | None) -> None:
        self.times[owner] = self.times.get(owner, 0) + 1 if owner in self.at else 1
        self.at[owner] = at
        self.pods[owner] = pods
        if generation is not None:
            self.generations[owner] = generation
        else:
            self.generations.pop(owner, None)

    def to_status(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for owner, at in sorted(self.at.items()):
            item: dict[str, Any] = {
                "owner": str(owner),
                "at": at,
                "pods": self.pods.get(owner, 0),
                "times": self.times.get(owner, 1),
            }
            if owner in self.generations:
                item["generation"] = self.generations[owner]
            out.append(item)
        return out


def previous_refreshes(previous: Mapping[str, Any], round_id: str) -> RefreshRecord:
    """The refresh record of this round from status.recipePods (empty for another
    round)."""
    record = RefreshRecord()
    if previous.get("refreshRound") != round_id:
        return record
    for item in previous.get("refreshed") or []:
        if isinstance(item, Mapping):
            kind, _, name = str(item.get("owner", "")).partition("/")
            owner = Owner(kind, name)
            record.at[owner] = str(item.get("at", ""))
            count = item.get("pods")
            record.pods[owner] = count if isinstance(count, int) else 0
            n = item.get("times")
            record.times[owner] = n if isinstance(n, int) and n > 0 else 1
            generation = item.get("generation")
            if isinstance(generation, int) and not isinstance(generation, bool):
                record.generations[owner] = generation
    return record


# How soon a waiting refresh looks again by itself (ConfigMaps are not watched).
RECHECK_SECONDS = 2.0


def events_key(body: Mapping[str, Any], condition: Condition) -> list[str]:
    """What a RecipePods Event is posted on a change of: the condition's reason and the
    owners with stale pods (not every count: a rollout of 300 pods changes the counts
    hundreds of times, Events are aggregated per owner)."""
    owners = [str(item.get("owner")) for item in body.get("staleOwners") or []]
    return [condition.reason, *owners]


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

    The refresh judges its progress by what the cluster says now (the owners' rollout
    state, `recipe_pods.next_refresh`) and the record of this round in
    status.recipePods.refreshed, so an operator restarted mid-refresh resumes it.

    `refusal` says why an owner of stale pods may not be refreshed (None: it may): the
    operator's refresh allow-list. A refused owner is never restarted nor are its pods
    deleted, whatever the policy's selector matched; a Warning
    `RecipePodsRefreshForbidden` names it, once per set of refused owners."""
    meta = policy.get("metadata") or {}
    status = policy.get("status") or {}
    previous = status.get("recipePods") if isinstance(status.get("recipePods"), Mapping) else {}
    previous = previous or {}

    token = refresh_request(policy)
    requested = bool(token) and previous.get("handledRequest") != token
    round_id = f"{meta.get('generation')}/{token if requested else ''}"
    record = previous_refreshes(previous, round_id)
    wanted = refresh_wanted(spec.recipe_pods, spec.enabled, requested)
    owners: dict[Owner, OwnerState] = {}
    if wanted:
        pods, owners = observe_refresh(
            conn, spec, desired, config_maps, changed_at, from_cache=True
        )
    else:
        pods = observe_recipe_pods(conn, spec, desired, config_maps, changed_at, from_cache=True)
    events: list[Event] = []
    note = ""
    recheck: float | None = None
    step = next_refresh(
        pods,
        record.at,
        record.pods,
        lambda owner: refusal(owner) is None,
        times=record.times,
        owners=owners,
        generations=record.generations,
    )
    handled = previous.get("handledRequest")
    if wanted and not rollout_complete and pods.stale_pods():
        note = "refresh waits for the WRC rollout to complete"
    elif wanted and step.action in ("restart", "delete") and step.owner is not None:
        try:
            generation = run_step(conn, step, now)
        except Forbidden as exc:
            note = (
                f"refresh of {step.owner} not permitted ({exc.message}); include "
                "manifests/components/recipe-pods-refresh with this workload in "
                "recipeDeployments/recipeStatefulSets of ConfigMap "
                "spillover-system/spillover-allowed-targets (the refresh Role's "
                "resourceNames and the admission policy spillover-operator-writes), or "
                "restart the pods by hand"
            )
            events.append(("Warning", EVENT_RECIPE_PODS_REFRESH_FORBIDDEN, note))
        except ClientError as exc:
            note = f"refresh of {step.owner} failed: {exc.message}"
            events.append(("Warning", EVENT_RECIPE_PODS_REFRESH_FAILED, note))
        else:
            record.note(step.owner, now, len(step.pods), generation)
            times = record.times[step.owner]
            events.append(("Normal", EVENT_RECIPE_PODS_REFRESH, describe_step(step, times)))
            note = f"refresh: {describe_step(step, times)}"
    elif wanted and step.action == "wait" and step.owner is not None:
        note = f"refresh: waiting for {step.owner}: {step.why}"
        recheck = RECHECK_SECONDS
    elif wanted and step.action == "none" and requested:
        handled = token
    refused = [str(o) for o in step.refused] if wanted else []
    if refused:
        why = refused_note(step, refusal)
        note = (note + "; " if note else "") + f"refresh refused: {why}"
        if previous.get("refreshRefused") != refused:
            events.append(
                ("Warning", EVENT_RECIPE_PODS_REFRESH_FORBIDDEN, f"refresh refused: {why}")
            )
    if wanted and step.stalled:
        note = (note + "; " if note else "") + (
            "not refreshed, their rollout exceeded its progress deadline (a restart would not "
            "help; see `kubectl rollout status`): " + ", ".join(str(o) for o in step.stalled)
        )
    if step.unrefreshable:
        note = (note + "; " if note else "") + (
            f"{len(step.unrefreshable)} stale pods not refreshed (no controller recreates them)"
        )

    condition = recipe_condition(pods, stale_after_refresh=step.stale_after_refresh, note=note)
    body = pods.to_status()
    body["refreshRound"] = round_id
    body["refreshed"] = record.to_status()
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

    key = events_key(body, condition)
    if previous.get("eventKey") != key:
        type_ = "Warning" if body["stale"] else "Normal"
        events.append((type_, EVENT_RECIPE_PODS, condition.message))
    body["eventKey"] = key
    return RecipeOutcome(pods, body, condition, events, converged, recheck)
