"""Process-wide state of the operator: settings, API clients, the reconcile lock."""

from __future__ import annotations

import logging
import os
import threading

import kopf
from kubernetes import client, config

from spillover_operator.constants import FINALIZER, GROUP
from spillover_operator.events import ApiEventRecorder
from spillover_operator.handlers import metrics
from spillover_operator.reconcile import Clients

log = logging.getLogger(__name__)

RESYNC_VAR = "SPILLOVER_RESYNC_SECONDS"
METRICS_PORT_VAR = "SPILLOVER_METRICS_PORT"
DEFAULT_RESYNC_SECONDS = 300.0
DEFAULT_METRICS_PORT = 9090

# One reconcile at a time: a policy handler, a Deployment event and the resync timer
# may want the same policy and Deployment at once; the operator manages one namespace
# with (normally) one policy, so serialising everything costs nothing.
RECONCILE_LOCK = threading.Lock()

_clients: Clients | None = None


class ConfigError(ValueError):
    pass


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
    metrics.start_metrics_server(metrics_port())
    get_clients()


def get_clients() -> Clients:
    """API clients from the in-cluster ServiceAccount, else $KUBECONFIG / ~/.kube/config."""
    global _clients
    if _clients is None:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        api = client.ApiClient()
        _clients = Clients(
            apps=client.AppsV1Api(api),
            custom=client.CustomObjectsApi(api),
            events=ApiEventRecorder(client.CoreV1Api(api)),
        )
    return _clients
