"""Handlers for SpilloverPolicy objects and their target Deployments."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from spillover_operator import reconcile as domain
from spillover_operator.handlers.runtime import OperatorRuntime
from spillover_operator.policy import target_of
from spillover_operator.recipe_reconcile import refresh_request

Logger = logging.Logger | logging.LoggerAdapter[Any]

RETRY_DELAY = 30.0


def index_entry(namespace: str | None, name: str | None, spec: Mapping[str, Any]) -> dict[Any, Any]:
    """The index from (namespace, target Deployment) to the policies targeting it (an
    invalid policy too: it is reconciled on Deployment events to report InvalidSpec)."""
    target = target_of(spec)
    if target is None:
        return {}
    return {(namespace, target.deployment): name}


def reconcile(rt: OperatorRuntime, namespace: str, name: str, logger: Logger) -> None:
    """Reconcile one policy; a refused change is retried by kopf."""
    with rt.lock:
        try:
            result = domain.reconcile_policy(rt.cluster, namespace, name)
        except domain.ApplyFailedError as exc:
            rt.metrics.record_failure()
            raise kopf.TemporaryError(str(exc), delay=RETRY_DELAY) from exc
        except Exception:
            rt.metrics.record_failure()
            raise
    rt.metrics.record(namespace, name, result)
    if result.outcome in (domain.Outcome.IN_SYNC, domain.Outcome.GONE):
        logger.debug("policy %s/%s: %s", namespace, name, result.outcome.value)
    else:
        logger.info("policy %s/%s: %s: %s", namespace, name, result.outcome.value, result.message)


def finalize(rt: OperatorRuntime, body: Mapping[str, Any], logger: Logger) -> None:
    """The policy is being deleted: apply onDelete, then let a waiting policy take over."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    with rt.lock:
        try:
            result = domain.finalize_policy(rt.cluster, body)
        except domain.ApplyFailedError as exc:
            rt.metrics.record_failure()
            raise kopf.TemporaryError(str(exc), delay=RETRY_DELAY) from exc
    rt.metrics.forget(namespace, name)
    logger.info(
        "policy %s/%s deleted: %s: %s", namespace, name, result.outcome.value, result.message
    )
    if result.spec is not None:
        others = domain.policies_targeting(
            rt.cluster, namespace, result.spec.deployment, exclude=name
        )
        for other in others:
            reconcile(rt, namespace, other, logger)


def deployment_event(
    rt: OperatorRuntime,
    namespace: str | None,
    name: str | None,
    policies: Iterable[Any],
    logger: Logger,
) -> None:
    """A target Deployment appeared, changed or went away: reconcile its policies."""
    if namespace is None or name is None:
        return
    for policy in sorted({str(p) for p in policies}):
        reconcile(rt, namespace, policy, logger)


def pod_event(
    rt: OperatorRuntime, namespace: str | None, labels: Mapping[str, Any] | None, logger: Logger
) -> None:
    """A pod appeared, changed or went away: reconcile the policies whose recipe-pod
    selector matches it (their status.recipePods counts it)."""
    if namespace is None:
        return
    for name in domain.policies_selecting(rt.cluster, namespace, labels or {}):
        reconcile(rt, namespace, name, logger)


def refresh_pending(body: Mapping[str, Any], **_: Any) -> bool:
    """Whether the policy carries a `--refresh-recipe-pods` request not carried out yet
    (an annotation change alone does not trigger the spec handlers)."""
    token = refresh_request(body)
    status = body.get("status") or {}
    pods = status.get("recipePods") if isinstance(status, Mapping) else None
    handled = pods.get("handledRequest") if isinstance(pods, Mapping) else None
    return bool(token) and token != handled
