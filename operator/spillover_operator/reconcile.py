"""Reconciling a SpilloverPolicy onto its target Deployment.

Plain functions over Kubernetes API clients: kopf handlers call them, tests call them
directly. Every write happens only when something differs, so a resync or an operator
restart never changes the Deployment (no rollout) nor rewrites an unchanged status.
"""

from __future__ import annotations

import enum
import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import ApiException, AppsV1Api, CustomObjectsApi

from spillover_operator import allowlist, kube
from spillover_operator.constants import (
    API_VERSION,
    COND_APPLIED,
    COND_READY,
    KIND,
    PASSTHROUGH_VAR,
    REASON_TARGET_NOT_ALLOWED,
)
from spillover_operator.envplan import (
    EnvChange,
    EnvPlan,
    TargetError,
    UnmanageableTargetError,
    effective_env,
    plan_apply,
    plan_remove,
    select_container,
)
from spillover_operator.events import EventRecorder
from spillover_operator.policy import InvalidSpecError, PolicySpec, parse_spec
from spillover_operator.rollout import rollout_state
from spillover_operator.status import (
    Condition,
    build_status,
    effective_status,
    merge_patch,
    now_rfc3339,
)

log = logging.getLogger(__name__)

MAX_CONFLICT_RETRIES = 5


class Outcome(enum.StrEnum):
    APPLIED = "applied"
    IN_SYNC = "in_sync"
    DRIFT_CORRECTED = "drift_corrected"
    CONFLICT = "conflict"
    INVALID_SPEC = "invalid_spec"
    TARGET_NOT_ALLOWED = "target_not_allowed"
    TARGET_NOT_FOUND = "target_not_found"
    TARGET_NOT_SUPPORTED = "target_not_supported"
    APPLY_FAILED = "apply_failed"
    GONE = "gone"
    REMOVED = "removed"
    RETAINED = "retained"
    HANDED_OVER = "handed_over"


@dataclass(frozen=True)
class ReconcileResult:
    outcome: Outcome
    message: str
    spec: PolicySpec | None = None
    changes: list[EnvChange] = field(default_factory=list)
    deployment: dict[str, Any] | None = None
    ready: bool = False


class ApplyFailedError(RuntimeError):
    """The API server refused a change (other than a resourceVersion conflict)."""


@dataclass
class Clients:
    apps: AppsV1Api
    custom: CustomObjectsApi
    events: EventRecorder


# ---- pure helpers -----------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def policy_target(policy: Mapping[str, Any]) -> str | None:
    """The target Deployment name of a stored policy, or None if its spec is invalid."""
    try:
        return parse_spec(policy.get("spec") or {}).deployment
    except InvalidSpecError:
        return None


def competing_policies(
    policies: Iterable[Mapping[str, Any]], deployment: str, *, include: str | None = None
) -> list[str]:
    """Names of the valid, live policies targeting `deployment`, oldest first (by
    creationTimestamp, then name). The first one owns the Deployment.

    Policies being deleted are left out, except `include` (the caller itself).
    """
    found: list[tuple[str, str]] = []
    for policy in policies:
        meta = _meta(policy)
        name = str(meta.get("name", ""))
        if meta.get("deletionTimestamp") and name != include:
            continue
        if policy_target(policy) != deployment:
            continue
        found.append((str(meta.get("creationTimestamp") or ""), name))
    return [name for _, name in sorted(found)]


def describe_changes(changes: Iterable[EnvChange]) -> str:
    parts: list[str] = []
    for change in changes:
        if change.after is None:
            parts.append(f"removed {change.name} (was {change.before})")
        elif change.before is None:
            parts.append(f"set {change.name}={change.after}")
        else:
            parts.append(f"set {change.name}={change.after} (was {change.before})")
    return "; ".join(parts) if parts else "no change"


def describe_spec(spec: PolicySpec) -> str:
    if not spec.enabled:
        return "spillover disabled (kill switch engaged)"
    threshold = (
        "default threshold" if spec.threshold_bytes is None else f"threshold {spec.threshold_bytes}"
    )
    budget = "default budget" if spec.budget_bytes is None else f"budget {spec.budget_bytes}"
    return f"spillover enabled, {threshold}, {budget}"


def _policy_ref(policy: Mapping[str, Any]) -> dict[str, Any]:
    """An object reference usable for Events even if `policy` lacks apiVersion/kind."""
    ref = dict(policy)
    ref.setdefault("apiVersion", API_VERSION)
    ref.setdefault("kind", KIND)
    return ref


def _deployment_ref(deployment: Mapping[str, Any]) -> dict[str, Any]:
    ref = dict(deployment)
    ref.setdefault("apiVersion", "apps/v1")
    ref.setdefault("kind", "Deployment")
    return ref


def _was_applied(policy: Mapping[str, Any]) -> bool:
    """Whether the policy's current generation had already been applied (so a
    difference now is drift, not a policy change)."""
    status = policy.get("status") or {}
    if status.get("observedGeneration") != _meta(policy).get("generation"):
        return False
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == COND_APPLIED:
            return bool(cond.get("status") == "True")
    return False


# ---- API-facing steps -------------------------------------------------------------


def write_status(clients: Clients, policy: Mapping[str, Any], desired: dict[str, Any]) -> bool:
    """Patch the status subresource if it differs; True if it wrote."""
    meta = _meta(policy)
    patch = merge_patch(policy.get("status") or {}, desired)
    if not patch:
        return False
    try:
        kube.patch_policy_status(clients.custom, meta["namespace"], meta["name"], patch)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _failed_status(
    policy: Mapping[str, Any], reason: str, message: str, **extra: Any
) -> dict[str, Any]:
    return build_status(
        policy.get("status"),
        generation=_meta(policy).get("generation"),
        ready=Condition(COND_READY, False, reason, message),
        applied=Condition(COND_APPLIED, False, reason, message),
        **extra,
    )


def _apply_with_retries(
    clients: Clients,
    namespace: str,
    deployment: dict[str, Any],
    planner: Any,
) -> tuple[dict[str, Any] | None, EnvPlan]:
    """Plan and patch, re-reading and re-planning on a resourceVersion conflict.

    Returns (deployment after, the plan that was applied or found empty). The
    deployment is None if it disappeared meanwhile.
    """
    name = str(_meta(deployment)["name"])
    current: dict[str, Any] | None = deployment
    for _attempt in range(MAX_CONFLICT_RETRIES):
        assert current is not None
        plan: EnvPlan = planner(current)
        if plan.patch is None:
            return current, plan
        try:
            return kube.apply_env_patch(clients.apps, namespace, name, plan), plan
        except ApiException as exc:
            if exc.status == 409:
                current = kube.read_deployment(clients.apps, namespace, name)
                if current is None:
                    return None, plan
                continue
            if exc.status == 404:
                return None, plan
            raise ApplyFailedError(
                f"the API server refused the change to Deployment {namespace}/{name} "
                f"({exc.status} {exc.reason}): {_api_message(exc)}"
            ) from exc
    raise ApplyFailedError(
        f"Deployment {namespace}/{name} kept changing while the operator patched it "
        f"({MAX_CONFLICT_RETRIES} conflicts in a row); will retry"
    )


def _api_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "")
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    except ValueError:
        pass
    return str(exc.body or exc.reason)


def reconcile_policy(clients: Clients, namespace: str, name: str) -> ReconcileResult:
    """Make the target Deployment match the policy and report it in the status."""
    policy = kube.read_policy(clients.custom, namespace, name)
    if policy is None or _meta(policy).get("deletionTimestamp"):
        return ReconcileResult(Outcome.GONE, f"policy {namespace}/{name} is gone or being deleted")

    try:
        spec = parse_spec(policy.get("spec") or {})
    except InvalidSpecError as exc:
        message = (
            "; ".join(exc.problems) + ". Fix the policy; nothing was changed on the Deployment."
        )
        write_status(clients, policy, _failed_status(policy, "InvalidSpec", message))
        return ReconcileResult(Outcome.INVALID_SPEC, message)

    target = {"deployment": spec.deployment, "container": spec.container}
    target = {k: v for k, v in target.items() if v is not None}

    refused = allowlist.refusal(spec.deployment, os.environ)
    if refused is not None:  # before anything reads or patches the Deployment
        failed = _failed_status(policy, REASON_TARGET_NOT_ALLOWED, refused, target=target)
        if write_status(clients, policy, failed):
            _record(clients, _policy_ref(policy), "Warning", REASON_TARGET_NOT_ALLOWED, refused)
        return ReconcileResult(Outcome.TARGET_NOT_ALLOWED, refused, spec)

    owners = competing_policies(kube.list_policies(clients.custom, namespace), spec.deployment)
    if owners and owners[0] != name:
        message = (
            f"policy {owners[0]!r} (older) already manages Deployment "
            f"{namespace}/{spec.deployment}; this policy changes nothing until that one is "
            "deleted or targets another Deployment"
        )
        write_status(clients, policy, _failed_status(policy, "Conflict", message, target=target))
        return ReconcileResult(Outcome.CONFLICT, message, spec)

    deployment = kube.read_deployment(clients.apps, namespace, spec.deployment)
    if deployment is None:
        message = (
            f"Deployment {namespace}/{spec.deployment} not found; the policy is applied "
            "as soon as it appears"
        )
        write_status(
            clients, policy, _failed_status(policy, "TargetNotFound", message, target=target)
        )
        return ReconcileResult(Outcome.TARGET_NOT_FOUND, message, spec)

    try:
        after, plan = _apply_with_retries(
            clients, namespace, deployment, lambda dep: plan_apply(dep, spec)
        )
    except UnmanageableTargetError as exc:
        message = f"{exc}. Nothing was changed."
        write_status(
            clients, policy, _failed_status(policy, "TargetNotSupported", message, target=target)
        )
        return ReconcileResult(Outcome.TARGET_NOT_SUPPORTED, message, spec)
    except TargetError as exc:
        message = f"{exc}. Nothing was changed."
        write_status(
            clients, policy, _failed_status(policy, "TargetNotFound", message, target=target)
        )
        return ReconcileResult(Outcome.TARGET_NOT_FOUND, message, spec)
    except ApplyFailedError as exc:
        write_status(
            clients, policy, _failed_status(policy, "ApplyFailed", str(exc), target=target)
        )
        raise

    if after is None:
        message = (
            f"Deployment {namespace}/{spec.deployment} disappeared while being updated; the "
            "policy is applied when it appears again"
        )
        write_status(
            clients, policy, _failed_status(policy, "TargetNotFound", message, target=target)
        )
        return ReconcileResult(Outcome.TARGET_NOT_FOUND, message, spec)

    container = str(select_container(after, spec.container).get("name"))
    target["container"] = container
    changed = plan.patch is not None
    outcome = Outcome.IN_SYNC
    current_status = dict(policy.get("status") or {})
    if changed:
        drift = _was_applied(policy)
        outcome = Outcome.DRIFT_CORRECTED if drift else Outcome.APPLIED
        reason = "DriftCorrected" if drift else "Applied"
        what = describe_changes(plan.changes)
        lead = (
            "restored the policy's values after the Deployment was changed by hand"
            if drift
            else describe_spec(spec)
        )
        note = f"{lead}: {what} on Deployment {namespace}/{spec.deployment} container {container}"
        _record(clients, _policy_ref(policy), "Normal", reason, note)
        _record(
            clients,
            _deployment_ref(after),
            "Normal",
            reason,
            f"{note} (SpilloverPolicy {name})",
        )
        current_status["lastAppliedTime"] = now_rfc3339()

    env = effective_env(after, container)
    rollout = rollout_state(after)
    applied_msg = (
        f"{describe_spec(spec)} on Deployment {namespace}/{spec.deployment} container "
        f"{container}; {PASSTHROUGH_VAR} lists the spillover variables"
    )
    if rollout.complete:
        ready = Condition(COND_READY, True, "RolloutComplete", f"{applied_msg}; {rollout.message}")
    else:
        ready = Condition(COND_READY, False, "RolloutInProgress", rollout.message)
    desired = build_status(
        current_status,
        generation=_meta(policy).get("generation"),
        ready=ready,
        applied=Condition(COND_APPLIED, True, "Applied", applied_msg),
        target=target,
        effective=effective_status(env),
        rollout=rollout,
        kill_switch_engaged=not spec.enabled,
    )
    write_status(clients, policy, desired)
    return ReconcileResult(
        outcome,
        describe_changes(plan.changes),
        spec,
        list(plan.changes),
        after,
        ready=rollout.complete,
    )


def _record(
    clients: Clients, obj: Mapping[str, Any], type_: str, reason: str, message: str
) -> None:
    try:
        clients.events(obj, type_, reason, message)
    except Exception as exc:  # an Event is best effort: never fail the change for it
        log.warning("could not post Event %s on %s: %s", reason, _meta(obj).get("name"), exc)


def finalize_policy(clients: Clients, policy: Mapping[str, Any]) -> ReconcileResult:
    """What deleting the policy does to its Deployment: `Retain` nothing, `Remove` the
    three variables (never the passthrough names). A policy that did not own the
    Deployment, or whose Deployment another policy takes over, changes nothing."""
    meta = _meta(policy)
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    try:
        spec = parse_spec(policy.get("spec") or {})
    except InvalidSpecError:
        return ReconcileResult(Outcome.RETAINED, "invalid spec: the Deployment was never changed")
    if spec.on_delete == "Retain":
        return ReconcileResult(
            Outcome.RETAINED, "onDelete is Retain: Deployment left as it is", spec
        )
    if allowlist.refusal(spec.deployment, os.environ) is not None:
        return ReconcileResult(Outcome.RETAINED, "target not allowed: never changed", spec)
    owners = competing_policies(
        kube.list_policies(clients.custom, namespace), spec.deployment, include=name
    )
    if owners and owners[0] != name:
        return ReconcileResult(Outcome.RETAINED, f"policy {owners[0]!r} owns the Deployment", spec)
    others = [other for other in owners if other != name]
    if others:
        return ReconcileResult(
            Outcome.HANDED_OVER,
            f"policy {others[0]!r} takes over Deployment {namespace}/{spec.deployment}",
            spec,
        )
    deployment = kube.read_deployment(clients.apps, namespace, spec.deployment)
    if deployment is None:
        return ReconcileResult(Outcome.RETAINED, "the target Deployment does not exist", spec)
    try:
        after, plan = _apply_with_retries(
            clients, namespace, deployment, lambda dep: plan_remove(dep, spec)
        )
    except TargetError as exc:
        return ReconcileResult(Outcome.RETAINED, str(exc), spec)
    if after is None or plan.patch is None:
        return ReconcileResult(Outcome.REMOVED, "nothing to remove", spec, [], after)
    note = (
        f"policy deleted with onDelete=Remove: {describe_changes(plan.changes)} on Deployment "
        f"{namespace}/{spec.deployment}"
    )
    _record(clients, _policy_ref(policy), "Normal", "Removed", note)
    _record(
        clients, _deployment_ref(after), "Normal", "Removed", f"{note} (SpilloverPolicy {name})"
    )
    return ReconcileResult(Outcome.REMOVED, note, spec, list(plan.changes), after)


def policies_targeting(
    clients: Clients, namespace: str, deployment: str, *, exclude: str | None = None
) -> list[str]:
    """Live policies (valid specs) targeting `deployment`, oldest first."""
    names = competing_policies(kube.list_policies(clients.custom, namespace), deployment)
    return [n for n in names if n != exclude]
