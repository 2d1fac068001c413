"""Prometheus metrics of the operator (served by `start_metrics_server`)."""

from __future__ import annotations

import contextlib
import logging
import time

from prometheus_client import Counter, Gauge, start_http_server

from spillover_operator.reconcile import Outcome, ReconcileResult

log = logging.getLogger(__name__)

POLICY_ENABLED = Gauge(
    "spillover_operator_policy_enabled",
    "1 if the policy enables spillover, 0 if its kill switch is engaged.",
    ["namespace", "policy"],
)
POLICY_READY = Gauge(
    "spillover_operator_policy_ready",
    "1 if the policy is applied and its Deployment rolled out, else 0.",
    ["namespace", "policy"],
)
RECONCILES = Counter(
    "spillover_operator_reconcile_total",
    "Reconciliations of SpilloverPolicies, by result.",
    ["result"],
)
DRIFT_CORRECTIONS = Counter(
    "spillover_operator_drift_corrections_total",
    "Hand edits of a target Deployment's env that the operator reverted.",
    ["namespace", "policy"],
)
LAST_APPLY = Gauge(
    "spillover_operator_last_apply_timestamp_seconds",
    "Unix time the operator last changed the policy's Deployment.",
    ["namespace", "policy"],
)
LAST_SUCCESS = Gauge(
    "spillover_operator_last_successful_reconcile_timestamp_seconds",
    "Unix time the policy's Deployment was last found or made to match the policy.",
    ["namespace", "policy"],
)

_OK = {Outcome.APPLIED, Outcome.DRIFT_CORRECTED, Outcome.IN_SYNC}


def record(namespace: str, policy: str, result: ReconcileResult) -> None:
    RECONCILES.labels(result.outcome.value).inc()
    if result.outcome == Outcome.GONE:
        forget(namespace, policy)
        return
    if result.spec is not None:
        POLICY_ENABLED.labels(namespace, policy).set(1 if result.spec.enabled else 0)
    POLICY_READY.labels(namespace, policy).set(1 if result.ready else 0)
    now = time.time()
    if result.outcome in _OK:
        LAST_SUCCESS.labels(namespace, policy).set(now)
    if result.outcome in (Outcome.APPLIED, Outcome.DRIFT_CORRECTED):
        LAST_APPLY.labels(namespace, policy).set(now)
    if result.outcome == Outcome.DRIFT_CORRECTED:
        DRIFT_CORRECTIONS.labels(namespace, policy).inc()


def record_failure() -> None:
    RECONCILES.labels("error").inc()


def forget(namespace: str, policy: str) -> None:
    for gauge in (POLICY_ENABLED, POLICY_READY, LAST_APPLY, LAST_SUCCESS):
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, policy)


def start_metrics_server(port: int) -> None:
    if port <= 0:
        log.info("metrics disabled (SPILLOVER_METRICS_PORT=%d)", port)
        return
    start_http_server(port)
    log.info("metrics served on :%d/metrics", port)
