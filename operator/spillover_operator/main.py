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

# Read once, at registration: kopf needs the timer's interval when it registers it.
RESYNC_SECONDS = runtime.resync_seconds()


@kopf.on.startup()
def startup(*, settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    runtime.configure(settings)
    runtime.start(memo)


@kopf.on.probe(id="clients")
def probe(*, memo: kopf.Memo, **_: Any) -> bool:
    return runtime.of(memo).cluster is not None


@kopf.index(GROUP, VERSION, PLURAL)
def policies_by_target(
    *, namespace: str | None, name: str, spec: kopf.Spec, **_: Any
) -> dict[Any, Any]:
    return policies.index_entry(namespace, name, spec)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def reconcile_policy(
    *, namespace: str | None, name: str, memo: kopf.Memo, logger: Logger, **_: Any
) -> None:
    policies.reconcile(runtime.of(memo), str(namespace), name, logger)


@kopf.timer(GROUP, VERSION, PLURAL, interval=RESYNC_SECONDS, initial_delay=RESYNC_SECONDS)
def resync_policy(
    *, namespace: str | None, name: str, memo: kopf.Memo, logger: Logger, **_: Any
) -> None:
    policies.reconcile(runtime.of(memo), str(namespace), name, logger)


@kopf.on.event(GROUP, VERSION, PLURAL, when=policies.refresh_pending)
def refresh_requested(
    *, namespace: str | None, name: str, memo: kopf.Memo, logger: Logger, **_: Any
) -> None:
    policies.reconcile(runtime.of(memo), str(namespace), name, logger)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def delete_policy(*, body: kopf.Body, memo: kopf.Memo, logger: Logger, **_: Any) -> None:
    policies.finalize(runtime.of(memo), body, logger)


@kopf.on.event("apps", "v1", "deployments")
def deployment_event(
    *,
    namespace: str | None,
    name: str,
    memo: kopf.Memo,
    logger: Logger,
    **kwargs: Any,
) -> None:
    index: kopf.Index[Any, Any] = kwargs["policies_by_target"]
    targeting: list[Any] = list(index.get((namespace, name), []))
    policies.deployment_event(runtime.of(memo), namespace, name, targeting, logger)


@kopf.on.event("v1", "pods")
def pod_event(
    *,
    namespace: str | None,
    labels: kopf.Labels,
    memo: kopf.Memo,
    logger: Logger,
    **_: Any,
) -> None:
    policies.pod_event(runtime.of(memo), namespace, labels, logger)
