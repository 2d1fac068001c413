"""Process-wide state of the operator: settings from the environment, and the
`OperatorRuntime` (API connection, reconcile lock, metrics) that the start-up handler
puts in kopf's memo and every handler takes from there. Nothing lives in module
globals, so tests build their own runtime."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import kopf

from spillover_operator.client import Connection, connect
from spillover_operator.constants import FIELD_MANAGER, FINALIZER, GROUP
from spillover_operator.handlers.metrics import Metrics

log = logging.getLogger(__name__)

RESYNC_VAR = "SPILLOVER_RESYNC_SECONDS"
METRICS_PORT_VAR = "SPILLOVER_METRICS_PORT"
DEFAULT_RESYNC_SECONDS = 300.0
DEFAULT_METRICS_PORT = 9090
MEMO_KEY = "spillover_runtime"


class ConfigError(ValueError):
    pass


@dataclass
class OperatorRuntime:
    """What every handler shares.

    `lock`: one reconcile at a time. A policy handler, a Deployment event and the resync
    timer may want the same policy and Deployment at once; the operator manages one
    namespace with (normally) one policy, so serialising everything costs nothing.
    """

    cluster: Connection
    metrics: Metrics
    lock: threading.Lock = field(default_factory=threading.Lock)


def _number(var: str, default: float, *, minimum: float) -> float:
    raw = os.environ.get(var)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{var} must be a number, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{var} must be at least {minimum:g}, got {raw!r}")
    return value


def resync_seconds() -> float:
    """How often every policy is reconciled even without a change (drift safety net)."""
    return _number(RESYNC_VAR, DEFAULT_RESYNC_SECONDS, minimum=1)


def metrics_port() -> int:
    return int(_number(METRICS_PORT_VAR, DEFAULT_METRICS_PORT, minimum=0))


def configure(settings: kopf.OperatorSettings) -> None:
    """kopf settings for running with only a namespaced Role."""
    # No peering objects (cluster-wide CRD), no namespace/CRD scanning (cluster-wide
    # list): the operator runs as a single replica in one namespace.
    settings.peering.standalone = True
    settings.scanning.disabled = True
    # kopf's own state lives in annotations on the policy (patch verb, no status schema
    # entry needed); our status is ours alone.
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # The operator posts its own Events (Applied, DriftCorrected, Removed); kopf only
    # reports handler failures.
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "spillover-operator"
    settings.execution.max_workers = 4


def start(memo: Any) -> OperatorRuntime:
    """Connect (the in-cluster ServiceAccount, else $KUBECONFIG / ~/.kube/config), serve
    the metrics and keep the runtime in kopf's `memo`."""
    runtime = OperatorRuntime(
        cluster=connect(field_manager=FIELD_MANAGER, prefer_in_cluster=True),
        metrics=Metrics.for_process(),
    )
    runtime.metrics.serve(metrics_port())
    memo[MEMO_KEY] = runtime
    return runtime


def of(memo: Any) -> OperatorRuntime:
    """The runtime `start` put in the memo (kopf copies the memo into every object's)."""
    runtime = memo.get(MEMO_KEY) if memo is not None else None
    if not isinstance(runtime, OperatorRuntime):
        raise RuntimeError("the operator's start-up handler has not run (no runtime in memo)")
    return runtime
