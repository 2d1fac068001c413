"""The kopf entry point: handler registrations only (the logic is in `handlers/`).

Run with:
    kopf run --standalone --namespace=clerum --liveness=http://0.0.0.0:8080/healthz \
        -m spillover_operator.main
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

import kopf

from spillover_operator import exit_codes
from spillover_operator.domain import settings as settings_module
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION
from spillover_operator.domain.rollout import rollout_step
from spillover_operator.handlers import election, liveness, policies, runtime, views

Logger = logging.Logger | logging.LoggerAdapter[Any]


def load_settings(environ: Mapping[str, str]) -> settings_module.OperatorSettings:
    """The operator's settings (`settings.py`), read once, as `kopf run` imports this
    module: before it connects or watches anything. A bad one stops the operator here
    with one line naming the variable and the fix, exit code 2 (no traceback)."""
    try:
        return settings_module.from_environ(environ)
    except settings_module.SettingsError as exc:
        print(f"spillover-operator: not started: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(exit_codes.BAD_INPUT) from None


SETTINGS = load_settings(os.environ)
# kopf needs the timer's interval when it registers it.
RESYNC_SECONDS = SETTINGS.resync_seconds


@kopf.on.startup()
async def startup(*, settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    runtime.configure(settings)
    rt = await asyncio.to_thread(runtime.start, memo, SETTINGS)
    # /livez (liveness.py) answers from how recently this loop ticked.
    memo["loop_ticker"] = asyncio.get_running_loop().create_task(
        _tick(rt.liveness), name="liveness ticker"
    )
    # One operator acts per namespace: a standby waits here, passive and Ready, until it
    # holds the leader Lease (`leadership`); kopf starts its watches only after this.
    elector, readiness = runtime.elector_for(rt, sys.argv)
    await election.lead(elector, readiness)
    rt.started = time.monotonic()


@kopf.on.login()
async def login(
    *, memo: kopf.Memo, logger: Logger, settings: kopf.OperatorSettings, **kwargs: Any
) -> Any:
    """kopf's usual login (the Kubernetes client's: in-cluster, else the kubeconfig),
    with every write of kopf's own (its Events, annotations, the finalizer) passing the
    leader's write gate, as ours do: a leader whose Lease may have passed to another
    writes nothing (handlers/election.py)."""
    info = await asyncio.to_thread(
        kopf.login_via_client, logger=logger, settings=settings, **kwargs
    )
    if info is None:
        return None
    return election.gated_session(info, lambda: runtime.write_gate(memo))


@kopf.on.cleanup()
async def cleanup(*, memo: kopf.Memo, **_: Any) -> None:
    # Stop writing, and hand the Lease over: a standby takes it at its next read.
    elector = runtime.of(memo).elector
    if elector is not None:
        await asyncio.to_thread(elector.release)


async def _tick(alive: liveness.Liveness) -> None:
    while True:
        alive.tick()
        await asyncio.sleep(liveness.TICK_SECONDS)


# Readiness, kopf's /healthz (500 when a probe raises; kopf caches the answer 10 s): the
# API server is reachable, and kopf's watches of policies and Deployments run. Liveness
# is /livez (liveness.py): an API outage makes the pod NotReady, never restarted.
@kopf.on.probe(id="api")
# (A probe's failure is permanent: kopf would otherwise retry it before answering.)
async def probe_api(*, memo: kopf.Memo, **_: Any) -> str:
    try:
        return await asyncio.to_thread(runtime.probe_api, runtime.of(memo))
    except runtime.NotLive as exc:
        raise kopf.PermanentError(str(exc)) from exc


@kopf.on.probe(id="watches")
async def probe_watches(*, memo: kopf.Memo, **_: Any) -> str:
    uptime = time.monotonic() - runtime.of(memo).started
    problems = runtime.watch_problems([t.get_name() for t in asyncio.all_tasks()], uptime)
    if problems:
        raise kopf.PermanentError("; ".join(problems))
    return "running"


# What the handlers read instead of GET/LIST requests (handlers/views.py).
@kopf.index(GROUP, VERSION, PLURAL)
def policies_by_target(
    *, namespace: str | None, name: str, spec: kopf.Spec, **_: Any
) -> dict[Any, Any]:
    return views.target_entry(namespace, name, spec)


@kopf.index(GROUP, VERSION, PLURAL)
def policy_bodies(*, namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return views.policy_entry(namespace, name, body)


@kopf.index("apps", "v1", "deployments")
def deployment_bodies(
    *, namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Any, Any]:
    return views.deployment_entry(namespace, name, body)


def _reader(
    memo: kopf.Memo,
    namespace: str | None,
    kwargs: dict[str, Any],
    *,
    trusted: bool = False,
    **fresh: Any,
) -> views.IndexReader:
    rt = runtime.of(memo)
    rt.watching(namespace)
    indexes = views.indexes_of(kwargs)
    own: dict[tuple[str, str], Any] = {
        (kind, str(body["metadata"]["name"])): (
            views.event_policy(indexes, namespace, body)
            if kind == "policy"
            else views.snapshot(body)
        )
        for kind, body in fresh.items()
    }
    return views.IndexReader(
        str(namespace),
        indexes,
        own,
        cluster=rt.cluster,
        trusted=trusted,
        written=rt.written,
        written_deployments=rt.written_deployments,
    )


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def reconcile_policy(
    *,
    namespace: str | None,
    name: str,
    body: kopf.Body,
    memo: kopf.Memo,
    logger: Logger,
    **kwargs: Any,
) -> None:
    # On update (field="spec") kopf gives the old spec itself; on create/resume None.
    old = kwargs.get("old")
    old_spec = old if isinstance(old, Mapping) else None
    if old_spec is not None and isinstance(old_spec.get("spec"), Mapping):
        old_spec = old_spec["spec"]  # a whole body, should kopf ever pass one
    # At start (resume) the indexes were just listed: their copies are current.
    trusted = kwargs.get("reason") == "resume"
    reader = _reader(memo, namespace, kwargs, trusted=trusted, policy=body)
    policies.policy_changed(
        runtime.of(memo), reader, name, old_spec, logger, early_apply=not trusted
    )


@kopf.timer(GROUP, VERSION, PLURAL, interval=RESYNC_SECONDS, initial_delay=RESYNC_SECONDS)
def resync_policy(
    *,
    namespace: str | None,
    name: str,
    body: kopf.Body,
    memo: kopf.Memo,
    logger: Logger,
    **kwargs: Any,
) -> None:
    policies.reconcile(
        runtime.of(memo), _reader(memo, namespace, kwargs, policy=body), name, logger
    )


@kopf.on.event(GROUP, VERSION, PLURAL, when=policies.refresh_pending)
def refresh_requested(
    *,
    namespace: str | None,
    name: str,
    body: kopf.Body,
    memo: kopf.Memo,
    logger: Logger,
    **kwargs: Any,
) -> None:
    reader = _reader(memo, namespace, kwargs, policy=body)
    policies.reconcile(runtime.of(memo), reader, name, logger)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def delete_policy(
    *, namespace: str | None, body: kopf.Body, memo: kopf.Memo, logger: Logger, **kwargs: Any
) -> None:
    deleted = views.event_policy(views.indexes_of(kwargs), namespace, body)
    reader = _reader(memo, namespace, kwargs, policy=deleted)
    policies.finalize(runtime.of(memo), reader, deleted, logger)


@kopf.on.event("apps", "v1", "deployments")
def deployment_event(
    *,
    namespace: str | None,
    name: str,
    body: kopf.Body,
    type: str | None,
    memo: kopf.Memo,
    logger: Logger,
    **kwargs: Any,
) -> None:
    fresh = {} if type == "DELETED" else {"deployment": body}
    # type None: the initial listing at start, when the indexes are current.
    reader = _reader(memo, namespace, kwargs, trusted=type is None, **fresh)
    generation = (body.get("metadata") or {}).get("generation")
    template = ((body.get("spec") or {}).get("template") or {}).get("metadata") or {}
    policies.deployment_event(
        runtime.of(memo),
        reader,
        name,
        generation,
        logger,
        template.get("labels"),
        rollout_step=type is not None and type != "DELETED" and rollout_step(body),
    )


@kopf.on.event("v1", "pods")
def pod_event(
    *,
    namespace: str | None,
    labels: kopf.Labels,
    memo: kopf.Memo,
    logger: Logger,
    **kwargs: Any,
) -> None:
    if namespace is None:
        return
    rt = runtime.of(memo)
    # Not `_reader`: a pod alone does not make its namespace one the operator heartbeats.
    reader = views.IndexReader(
        namespace,
        views.indexes_of(kwargs),
        cluster=rt.cluster,
        written=rt.written,
        written_deployments=rt.written_deployments,
    )
    policies.pod_event(rt, reader, labels, logger)
