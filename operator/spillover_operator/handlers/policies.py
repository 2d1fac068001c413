"""Handlers for SpilloverPolicy objects and their target Deployments.

Reads come from what kopf watches (`views.IndexReader`), never from GET/LIST requests;
work on one target Deployment is serialised by its lock (`OperatorRuntime.lock_for`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from spillover_operator import reconcile as domain
from spillover_operator.client import ApiUnavailable
from spillover_operator.handlers.runtime import OperatorRuntime
from spillover_operator.handlers.views import IndexReader, target_entry
from spillover_operator.policy import target_of
from spillover_operator.recipe_reconcile import refresh_request

Logger = logging.Logger | logging.LoggerAdapter[Any]

RETRY_DELAY = 30.0
# The API server could not be reached: try again soon (it is usually back in seconds).
UNREACHABLE_RETRY_DELAY = 1.0
# The policy kept changing while its status was written: soon again.
STALE_RETRY_DELAY = 0.5


def index_entry(namespace: str | None, name: str | None, spec: Mapping[str, Any]) -> dict[Any, Any]:
    """The index from (namespace, target Deployment) to the policies targeting it."""
    return target_entry(namespace, str(name), spec)


def _target(policy: Mapping[str, Any] | None) -> str | None:
    target = target_of((policy or {}).get("spec"))
    return None if target is None else target.deployment


def reconcile(
    rt: OperatorRuntime, reader: IndexReader, name: str, logger: Logger
) -> domain.ReconcileResult:
    """Reconcile one policy under its target Deployment's lock; a refused change is
    retried by kopf."""
    namespace = reader.namespace
    target = _target(reader.policy(name)) or f"(no target: {name})"
    with rt.lock_for(namespace, target):
        try:
            result = domain.reconcile_policy(rt.cluster, namespace, name, reader)
        except domain.ApplyFailedError as exc:
            rt.metrics.record_failure()
            raise kopf.TemporaryError(str(exc), delay=RETRY_DELAY) from exc
        except ApiUnavailable as exc:
            rt.metrics.record_failure()
            raise kopf.TemporaryError(exc.message, delay=UNREACHABLE_RETRY_DELAY) from exc
        except domain.StaleCopyError as exc:
            raise kopf.TemporaryError(
                f"{exc}; the policy keeps changing, trying again", delay=STALE_RETRY_DELAY
            ) from exc
        except Exception:
            rt.metrics.record_failure()
            raise
    rt.metrics.record(namespace, name, result)
    if result.outcome in (domain.Outcome.IN_SYNC, domain.Outcome.GONE):
        logger.debug("policy %s/%s: %s", namespace, name, result.outcome.value)
    else:
        logger.info("policy %s/%s: %s: %s", namespace, name, result.outcome.value, result.message)
    return result


def reconcile_waiting(
    rt: OperatorRuntime,
    reader: IndexReader,
    deployments: Iterable[str | None],
    logger: Logger,
    *,
    exclude: str,
) -> None:
    """Re-evaluate at once the other policies targeting `deployments` (the ones left
    in Conflict may now own it): after a policy was deleted or retargeted."""
    for deployment in sorted({d for d in deployments if d}):
        for other in reader.names_targeting(deployment):
            if other != exclude:
                reconcile(rt, reader, other, logger)


def policy_changed(
    rt: OperatorRuntime,
    reader: IndexReader,
    name: str,
    old_spec: Mapping[str, Any] | None,
    logger: Logger,
) -> None:
    """A policy was created, changed or resumed: reconcile it; if it left a Deployment,
    the policies waiting for that one take over."""
    reconcile(rt, reader, name, logger)
    old_target = _target({"spec": old_spec}) if old_spec is not None else None
    if old_target is not None and old_target != _target(reader.policy(name)):
        reconcile_waiting(rt, reader, [old_target], logger, exclude=name)


def finalize(
    rt: OperatorRuntime, reader: IndexReader, body: Mapping[str, Any], logger: Logger
) -> None:
    """The policy is being deleted: apply onDelete, then let a waiting policy take over."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    target = _target(body) or f"(no target: {name})"
    with rt.lock_for(namespace, target):
        try:
            result = domain.finalize_policy(rt.cluster, body, reader)
        except domain.ApplyFailedError as exc:
            rt.metrics.record_failure()
            raise kopf.TemporaryError(str(exc), delay=RETRY_DELAY) from exc
        except ApiUnavailable as exc:
            rt.metrics.record_failure()
            raise kopf.TemporaryError(exc.message, delay=UNREACHABLE_RETRY_DELAY) from exc
    rt.metrics.forget(namespace, name)
    logger.info(
        "policy %s/%s deleted: %s: %s", namespace, name, result.outcome.value, result.message
    )
    reconcile_waiting(rt, reader, [_target(body)], logger, exclude=name)


def deployment_event(
    rt: OperatorRuntime, reader: IndexReader, name: str | None, logger: Logger
) -> None:
    """A target Deployment appeared, changed or went away: reconcile its policies. With
    nothing to change on it (a status update during a rollout) that writes only the
    policies' rollout status, and only what changed."""
    if name is None:
        return
    for policy in reader.names_targeting(name):
        reconcile(rt, reader, policy, logger)


def pod_event(
    rt: OperatorRuntime, reader: IndexReader, labels: Mapping[str, Any] | None, logger: Logger
) -> None:
    """A pod appeared, changed or went away: reconcile the policies whose recipe-pod
    selector matches it (their status.recipePods counts it). The policies come from
    kopf's index, not a LIST per pod event."""
    for name in domain.policies_selecting(reader.policies(), labels or {}):
        reconcile(rt, reader, name, logger)


def refresh_pending(body: Mapping[str, Any], **_: Any) -> bool:
    """Whether the policy carries a `--refresh-recipe-pods` request not carried out yet
    (an annotation change alone does not trigger the spec handlers)."""
    token = refresh_request(body)
    status = body.get("status") or {}
    pods = status.get("recipePods") if isinstance(status, Mapping) else None
    handled = pods.get("handledRequest") if isinstance(pods, Mapping) else None
    return bool(token) and token != handled
