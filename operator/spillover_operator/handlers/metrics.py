"""Prometheus metrics of the operator: one `Metrics` per process, made at start-up and
kept in kopf's memo (tests make their own, on their own registry)."""

from __future__ import annotations

import contextlib
import logging
import time

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

from spillover_operator.domain.recipe_pods import STATES
from spillover_operator.reconciler.reconcile import Outcome, ReconcileResult

log = logging.getLogger(__name__)

_OK = {Outcome.APPLIED, Outcome.DRIFT_CORRECTED, Outcome.IN_SYNC}

# Why a reconciliation raised instead of returning an outcome (record_failure).
ERROR_APPLY_FAILED = "apply_failed"  # the API refused the change to the Deployment
ERROR_API_UNAVAILABLE = "api_unavailable"  # the API server could not be reached
ERROR_UNEXPECTED = "unexpected"  # anything else: a bug, or an answer not understood
ERROR_REASONS = (ERROR_APPLY_FAILED, ERROR_API_UNAVAILABLE, ERROR_UNEXPECTED)


class Metrics:
    """The operator's series, registered in `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.policy_enabled = Gauge(
            "spillover_operator_policy_enabled",
            "1 if the policy enables spillover, 0 if its kill switch is engaged.",
            ["namespace", "policy"],
            registry=registry,
        )
        self.policy_ready = Gauge(
            "spillover_operator_policy_ready",
            "1 if the policy is applied and its Deployment rolled out, else 0.",
            ["namespace", "policy"],
            registry=registry,
        )
        self.reconciles = Counter(
            "spillover_operator_reconcile_total",
            "Reconciliations of SpilloverPolicies, by result.",
            ["result"],
            registry=registry,
        )
        self.drift_corrections = Counter(
            "spillover_operator_drift_corrections_total",
            "Hand edits of a target Deployment's env that the operator reverted.",
            ["namespace", "policy"],
            registry=registry,
        )
        self.last_apply = Gauge(
            "spillover_operator_last_apply_timestamp_seconds",
            "Unix time the operator last changed the policy's Deployment.",
            ["namespace", "policy"],
            registry=registry,
        )
        self.last_success = Gauge(
            "spillover_operator_last_successful_reconcile_timestamp_seconds",
            "Unix time the policy's Deployment was last found or made to match the policy.",
            ["namespace", "policy"],
            registry=registry,
        )
        self.reconcile_errors = Counter(
            "spillover_operator_reconcile_errors",
            "Reconciliations that failed with an error (retried), by reason: "
            "apply_failed, api_unavailable, unexpected.",
            ["reason"],
            registry=registry,
        )
        # Every reason at 0 from the start: rate() and increase() see the first error
        # only if the series existed before it.
        for reason in ERROR_REASONS:
            self.reconcile_errors.labels(reason)
        self.reconciles.labels("error")
        self.heartbeat = Gauge(
            "spillover_operator_heartbeat_timestamp_seconds",
            "Unix time the operator last renewed its heartbeat Lease in the namespace.",
            ["namespace"],
            registry=registry,
        )
        self.leader = Gauge(
            "spillover_operator_leader",
            "1 while this operator holds the leader Lease of the namespace (it acts "
            "there), 0 while it is a passive standby.",
            ["namespace"],
            registry=registry,
        )

        self.recipe_pods = Gauge(
            "spillover_operator_recipe_pods",
            "Recipe mcp-host pods matched by the policy's selector, by state "
            "(current, stale, unknown).",
            ["namespace", "policy", "state"],
            registry=registry,
        )
        self.recipe_pods_current_seconds = Histogram(
            "spillover_operator_recipe_pods_current_seconds",
            "Seconds from the operator's change of the WRC Deployment (a policy change) to "
            "every matched recipe pod running the policy's values.",
            ["namespace", "policy"],
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, float("inf")),
            registry=registry,
        )

    @classmethod
    def for_process(cls) -> Metrics:
        """A registry of its own with the usual process, platform and GC series."""
        registry = CollectorRegistry()
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            registry.register(collector)
        return cls(registry)

    def record(self, namespace: str, policy: str, result: ReconcileResult) -> None:
        self.reconciles.labels(result.outcome.value).inc()
        if result.outcome == Outcome.GONE:
            self.forget(namespace, policy)
            return
        if result.spec is not None:
            self.policy_enabled.labels(namespace, policy).set(1 if result.spec.enabled else 0)
        self.policy_ready.labels(namespace, policy).set(1 if result.ready else 0)
        now = time.time()
        if result.outcome in _OK:
            self.last_success.labels(namespace, policy).set(now)
        if result.outcome in (Outcome.APPLIED, Outcome.DRIFT_CORRECTED):
            self.last_apply.labels(namespace, policy).set(now)
        if result.outcome == Outcome.DRIFT_CORRECTED:
            self.drift_corrections.labels(namespace, policy).inc()
        if result.recipe is not None:
            for state in STATES:
                self.recipe_pods.labels(namespace, policy, state).set(
                    result.recipe.pods.count(state)
                )
            if result.recipe.converged_seconds is not None:
                self.recipe_pods_current_seconds.labels(namespace, policy).observe(
                    result.recipe.converged_seconds
                )

    def record_failure(self, reason: str) -> None:
        """A reconciliation raised; `reason` is one of ERROR_REASONS."""
        if reason not in ERROR_REASONS:
            raise ValueError(f"unknown reconcile error reason {reason!r}")
        self.reconciles.labels("error").inc()
        self.reconcile_errors.labels(reason).inc()

    def beat(self, namespace: str) -> None:
        """The heartbeat Lease in `namespace` was renewed just now."""
        self.heartbeat.labels(namespace).set(time.time())

    def forget(self, namespace: str, policy: str) -> None:
        for gauge in (self.policy_enabled, self.policy_ready, self.last_apply, self.last_success):
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, policy)
        for state in STATES:
            with contextlib.suppress(KeyError):
                self.recipe_pods.remove(namespace, policy, state)

    def serve(self, port: int) -> None:
        """Serve /metrics on `port` (0: not at all)."""
        if port <= 0:
            log.info("metrics disabled (SPILLOVER_METRICS_PORT=%d)", port)
            return
        start_http_server(port, registry=self.registry)
        log.info("metrics served on :%d/metrics", port)
