"""The kopf entry point: handler registrations only (the logic is in `handlers/`).

Run with:
    kopf run --standalone --namespace=clerum --liveness=http://0.0.0.0:8080/healthz \
        -m spillover_operator.main
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from spillover_operator.constants import GROUP, PLURAL, VERSION
from spillover_operator.handlers import policies, runtime

Logger = logging.Logger | logging.LoggerAdapter[Any]

RESYNC_SECONDS = runtime.resync_seconds()


@kopf.on.startup()
def startup(*, settings: kopf.OperatorSettings, **_: Any) -> None:
    runtime.configure(settings)


@kopf.on.probe(id="clients")
def probe(**_: Any) -> bool:
    return runtime.get_clients() is not None


@kopf.index(GROUP, VERSION, PLURAL)
def policies_by_target(
    *, namespace: str | None, name: str, spec: kopf.Spec, **_: Any
) -> dict[Any, Any]:
    return policies.index_entry(namespace, name, spec)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def reconcile_policy(*, namespace: str | None, name: str, logger: Logger, **_: Any) -> None:
    policies.reconcile(str(namespace), name, logger)


@kopf.timer(GROUP, VERSION, PLURAL, interval=RESYNC_SECONDS, initial_delay=RESYNC_SECONDS)
def resync_policy(*, namespace: str | None, name: str, logger: Logger, **_: Any) -> None:
    policies.reconcile(str(namespace), name, logger)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def delete_policy(*, body: kopf.Body, logger: Logger, **_: Any) -> None:
    policies.finalize(body, logger)


@kopf.on.event("apps", "v1", "deployments")
def deployment_event(
    *,
    event: kopf.RawEvent,
    namespace: str | None,
    name: str,
    logger: Logger,
    **kwargs: Any,
) -> None:
    index: kopf.Index[Any, Any] = kwargs["policies_by_target"]
    targeting: list[Any] = list(index.get((namespace, name), []))
    policies.deployment_event(event, namespace, name, targeting, logger)
