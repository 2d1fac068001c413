"""Handlers for SpilloverPolicy objects and their target Deployments, and the pass
scheduler that runs their reconciles.

Reads come from what kopf watches (`views.IndexReader`), never from GET/LIST requests;
work on one target Deployment is serialised by its lock (`OperatorRuntime.lock_for`).

The pass scheduler. Key: (namespace, target Deployment). State in `OperatorRuntime`:
`passes[key]` (at most one Pass: the newest reader and the early changes to report),
`waiting[key]` (policy handlers waiting for or holding the lock), `generations[key]`
(the newest metadata.generation seen), `lock_for(key)`.

    kopf threads (one object's events at a time)        pass threads (PASS_THREADS)
    --------------------------------------------        ---------------------------
    policy change --apply_change (no lock)---+
        |                                    |
        +--leave_pass(key, reader, early)----+--> passes[key] ---------+
    Deployment event                         |    (a newer pass        |
        +--note_generation: older? drop      |     replaces the older  |
        +--leave_pass(key, reader)-----------+     reader, merges the  |
    pod event (selector matches)             |     early changes)      |
        +--leave_pass(target key, reader)----+                         |
        |                                                              v
        +--_schedule_drain(key): has_pass? -> run_passes(_drain) -> _drain(key):
        |  (a pod event's after POD_SETTLE_SECONDS)    while has_pass(key):
    resume / resync / refresh / conflict           handler_waiting(key)? -> return
    takeover / a refused change:                   lock not free?        -> return
        reconcile(): waiting_for(key) + lock         _run_pass: take_pass, reconcile
        -> _reconcile_locked -> _schedule_drain      each policy of the Deployment
    delete: finalize() under the lock alone          (failure: later(delay, _retry))

Rules that keep it correct (check each when changing it):

1. Only the newest pass matters: `leave_pass` replaces the reader and keeps every
   early change not yet reported, so a coalesced burst reports each change once.
2. Whoever holds the lock runs the passes; a drain that finds the lock taken returns,
   and the holder looks again when it lets go (`reconcile` and `_drain` both end with
   `_schedule_drain`/the while loop). A pass is never lost, only merged.
3. A policy handler goes first: while `waiting[key]` is set, drains step aside
   (`handler_waiting`), so a kill switch never queues behind a rollout's passes.
4. Passes run on the pass threads, never on the kopf handler that left them: kopf
   handles one object's events in order, and that policy's next change must not wait.
5. A stale copy is never planned on: `note_generation` drops older Deployment events,
   and a pass whose copy is behind confirms the Deployment with the API first.
6. A failed pass is left again after its delay (`_retry`), reading the indexes as they
   are then, not the old copies.
7. A pod event's pass waits for the rest of its burst (`POD_SETTLE_SECONDS`,
   `Pass.due`): a drain leaves a pass not due to the timer `_settle_then_drain` set
   (one per Deployment, looking again while a newer burst is not due), and any other
   pass left for the Deployment makes it due at once.

To change it: keep the state under `rt.lock` (short critical sections, no I/O), keep
I/O under the per-Deployment lock, and extend tests/operator/handlers/test_handlers.py (the
drain, coalescing and handler-first cases run there without a cluster) before
`make bench-operator` (the figures in README.md are the scheduler's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import kopf

from spillover_operator.client import ApiUnavailable, remove_policy_finalizer
from spillover_operator.domain.constants import FINALIZER
from spillover_operator.domain.policy import PolicyCopy, target_of
from spillover_operator.handlers.metrics import (
    ERROR_API_UNAVAILABLE,
    ERROR_APPLY_FAILED,
    ERROR_UNEXPECTED,
)
from spillover_operator.handlers.runtime import OperatorRuntime
from spillover_operator.handlers.views import IndexReader, target_entry
from spillover_operator.reconciler import reconcile as domain
from spillover_operator.reconciler.recipe_reconcile import refresh_request

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
    rt: OperatorRuntime,
    reader: IndexReader,
    name: str,
    logger: Logger,
    *,
    early: domain.EarlyApply | None = None,
) -> domain.ReconcileResult:
    """Reconcile one policy under its target Deployment's lock (a refused change is
    retried by kopf), then run the pass a Deployment event left meanwhile."""
    namespace = reader.namespace
    target = _target(reader.policy(name)) or f"(no target: {name})"
    with rt.waiting_for(namespace, target), rt.lock_for(namespace, target):
        result = _reconcile_locked(rt, reader, name, logger, early=early)
    _schedule_drain(rt, namespace, target, logger)
    return result


def _reconcile_locked(
    rt: OperatorRuntime,
    reader: IndexReader,
    name: str,
    logger: Logger,
    *,
    early: domain.EarlyApply | None = None,
) -> domain.ReconcileResult:
    namespace = reader.namespace
    try:
        result = domain.reconcile_policy(
            rt.cluster, namespace, name, reader, early=early, settings=rt.settings
        )
    except domain.ApplyFailedError as exc:
        rt.metrics.record_failure(ERROR_APPLY_FAILED)
        raise kopf.TemporaryError(str(exc), delay=RETRY_DELAY) from exc
    except ApiUnavailable as exc:
        rt.metrics.record_failure(ERROR_API_UNAVAILABLE)
        raise kopf.TemporaryError(exc.message, delay=UNREACHABLE_RETRY_DELAY) from exc
    except domain.StaleCopyError as exc:
        raise kopf.TemporaryError(
            f"{exc}; the policy keeps changing, trying again", delay=STALE_RETRY_DELAY
        ) from exc
    except Exception:
        rt.metrics.record_failure(ERROR_UNEXPECTED)
        raise
    if result.deployment is not None and result.spec is not None:
        generation = (result.deployment.get("metadata") or {}).get("generation")
        rt.note_generation(namespace, result.spec.deployment, generation)
    rt.metrics.record(namespace, name, result)
    recheck = None if result.recipe is None else result.recipe.recheck_seconds
    if recheck is not None and result.spec is not None:
        # The refresh waits for what no watch reports (a ConfigMap): look again.
        target = result.spec.deployment
        rt.later_once(
            (namespace, target), recheck, _retry, rt, namespace, target, reader, {}, logger
        )
    if result.outcome in (domain.Outcome.IN_SYNC, domain.Outcome.GONE):
        logger.debug("policy %s/%s: %s", namespace, name, result.outcome.value)
    else:
        logger.info("policy %s/%s: %s: %s", namespace, name, result.outcome.value, result.message)
    return result


def _run_pass(rt: OperatorRuntime, namespace: str, deployment: str, logger: Logger) -> None:
    """With the target's lock held: reconcile the policies of the pass left for the
    Deployment (the latest one). A failure is logged and the pass retried after the
    delay it asks for: the kopf handler that left it has returned already."""
    left = rt.take_pass(namespace, deployment)
    if left is None:
        return
    reader: IndexReader = left.reader
    copy = reader.deployment(deployment)
    generation = ((copy or {}).get("metadata") or {}).get("generation")
    if not rt.note_generation(namespace, deployment, generation):
        # A pod or policy event's pass reads the index, which may lag behind a change
        # the operator made: read the Deployment rather than plan from an old copy.
        reader = reader.confirmed(policy=None, deployment=deployment) or reader
    for policy in reader.names_targeting(deployment):
        early = left.early.get(policy)
        try:
            _reconcile_locked(rt, reader, policy, logger, early=early)
        except Exception as exc:
            delay = exc.delay if isinstance(exc, kopf.TemporaryError) else RETRY_DELAY
            logger.warning(
                "policy %s/%s: not reconciled (again in %gs): %s", namespace, policy, delay, exc
            )
            retry = {policy: early} if early is not None else {}
            rt.later(delay or RETRY_DELAY, _retry, rt, namespace, deployment, reader, retry, logger)


def _retry(
    rt: OperatorRuntime,
    namespace: str,
    deployment: str,
    reader: IndexReader,
    early: dict[str, domain.EarlyApply],
    logger: Logger,
) -> None:
    """Leave a failed pass again, reading what the indexes hold by then rather than the
    copies of the events that left it."""
    rt.leave_pass(namespace, deployment, reader.without_copies(), early)
    _drain(rt, namespace, deployment, logger)


def _schedule_drain(rt: OperatorRuntime, namespace: str, deployment: str, logger: Logger) -> None:
    """Have the passes left for `deployment` run on the runtime's pass threads, not on
    the kopf handler calling this: kopf handles one object's events one at a time, so a
    policy handler busy with a rollout's passes would hold back that policy's next
    change."""
    if rt.has_pass(namespace, deployment):
        rt.run_passes(_drain, rt, namespace, deployment, logger)


PassRunner = Callable[[OperatorRuntime, str, str, Logger], None]


def _drain(
    rt: OperatorRuntime,
    namespace: str,
    deployment: str,
    logger: Logger,
    run: PassRunner | None = None,
) -> None:
    """Run the pass left for `deployment` (and any left meanwhile), unless another thread
    holds its lock (that one looks again after letting go), a policy handler waits
    for it (that one schedules this again when done), or it is a pod event's pass not
    due yet (its timer runs this then)."""
    lock = rt.lock_for(namespace, deployment)
    while rt.has_pass(namespace, deployment):
        # A policy handler waiting for the lock goes first (it schedules this again); a
        # pod event's pass not due yet waits for its timer (`_settle_then_drain`).
        if (
            rt.handler_waiting(namespace, deployment)
            or rt.pass_wait(namespace, deployment) > 0
            or not lock.acquire(blocking=False)
        ):
            return
        try:
            (run or _run_pass)(rt, namespace, deployment, logger)
        finally:
            lock.release()


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
    *,
    early_apply: bool = True,
) -> None:
    """A policy was created, changed or resumed; if it left a Deployment, the policies
    waiting for that one take over.

    A change (`early_apply`) is made on the Deployment here, at once
    (`reconcile.apply_change`), and reported (status, Events, recipe pods) by a pass
    under the target's lock, after this handler returns: kopf handles a policy's events
    one at a time, so the policy's next change does not wait for the report of this
    one. A change the API server refuses is reconciled here, which reports it and
    raises for kopf to retry. At resume everything is reconciled here.
    """
    target = _target(reader.policy(name))
    if not early_apply or target is None:
        reconcile(rt, reader, name, logger)
    else:
        try:
            early = domain.apply_change(rt.cluster, reader.namespace, name, reader, rt.settings)
        except ApiUnavailable as exc:
            raise kopf.TemporaryError(exc.message, delay=UNREACHABLE_RETRY_DELAY) from exc
        except domain.ApplyFailedError:
            early = None
            reconcile(rt, reader, name, logger)  # reports ApplyFailed and raises
        if early is not None:
            generation = (early.after.get("metadata") or {}).get("generation")
            rt.note_generation(reader.namespace, early.spec.deployment, generation)
        rt.leave_pass(reader.namespace, target, reader, {name: early} if early else None)
        _schedule_drain(rt, reader.namespace, target, logger)
    old_target = _target({"spec": old_spec}) if old_spec is not None else None
    if old_target is not None and old_target != target:
        reconcile_waiting(rt, reader, [old_target], logger, exclude=name)


def finalize(rt: OperatorRuntime, reader: IndexReader, body: PolicyCopy, logger: Logger) -> None:
    """The policy is being deleted: apply onDelete, then let a waiting policy take over.
    The deleted body is the copy acted on."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    target = _target(body) or f"(no target: {name})"
    with rt.lock_for(namespace, target):
        try:
            result = domain.finalize_policy(rt.cluster, body, reader, rt.settings)
        except domain.ApplyFailedError as exc:
            rt.metrics.record_failure(ERROR_APPLY_FAILED)
            raise kopf.TemporaryError(str(exc), delay=RETRY_DELAY) from exc
        except ApiUnavailable as exc:
            rt.metrics.record_failure(ERROR_API_UNAVAILABLE)
            raise kopf.TemporaryError(exc.message, delay=UNREACHABLE_RETRY_DELAY) from exc
    rt.metrics.forget(namespace, name)
    rt.written.pop((namespace, name), None)
    logger.info(
        "policy %s/%s deleted: %s: %s", namespace, name, result.outcome.value, result.message
    )
    reconcile_waiting(rt, reader, [_target(body)], logger, exclude=name)
    # onDelete is done: the finalizer comes off in a patch of its own, which does not
    # depend on kopf's (kopf's also writes its annotations, which the API server may
    # refuse). kopf's patch that follows finds it gone.
    try:
        remove_policy_finalizer(rt.cluster.in_namespace(namespace), name, FINALIZER)
    except ApiUnavailable as exc:
        raise kopf.TemporaryError(exc.message, delay=UNREACHABLE_RETRY_DELAY) from exc


def deployment_event(
    rt: OperatorRuntime,
    reader: IndexReader,
    name: str | None,
    generation: Any,
    logger: Logger,
    pod_labels: Mapping[str, Any] | None = None,
    *,
    rollout_step: bool = False,
) -> None:
    """A target Deployment appeared, changed or went away: reconcile its policies (with
    nothing to change on it, a status update during a rollout, that writes only the
    policies' rollout status, and only what changed). Coalesced: the event leaves its
    pass and whoever holds the Deployment's lock runs the latest one; an event older
    than a generation already seen is skipped (its newer event comes).

    Any other Deployment whose pods (`pod_labels`, its template's labels) a policy's
    recipe-pod selector matches: its rollout is what a refresh waits for, so those
    policies are reconciled as on a pod event.

    `rollout_step`: the event is a step of a rollout the controller has observed
    (`domain.rollout.rollout_step`): its pass settles `ROLLOUT_STEP_SETTLE_SECONDS`, so
    the steps of a burst cost one pass; the rollout's end, a new generation and a
    deletion run at once."""
    if name is None:
        return
    if not reader.names_targeting(name):
        if pod_labels:
            pod_event(rt, reader, pod_labels, logger)
        return
    if not rt.note_generation(reader.namespace, name, generation):
        return
    if rollout_step:
        rt.leave_pass(reader.namespace, name, reader, settle=ROLLOUT_STEP_SETTLE_SECONDS)
        _settle_then_drain(rt, reader.namespace, name, logger, timer="rollout")
        return
    rt.leave_pass(reader.namespace, name, reader)
    _schedule_drain(rt, reader.namespace, name, logger)


def pod_event(
    rt: OperatorRuntime, reader: IndexReader, labels: Mapping[str, Any] | None, logger: Logger
) -> None:
    """A pod appeared, changed or went away: reconcile the policies whose recipe-pod
    selector matches it (their status.recipePods counts it), coalesced as Deployment
    events are, and over a burst (`POD_SETTLE_SECONDS`). The policies come from kopf's
    index, not a LIST per pod event."""
    for name in domain.policies_selecting(reader.policies(), labels or {}):
        target = _target(reader.policy(name))
        if target is None:
            continue
        rt.leave_pass(reader.namespace, target, reader, settle=POD_SETTLE_SECONDS)
        _settle_then_drain(rt, reader.namespace, target, logger)


# Pod events come in bursts (a rollout of 30 recipe pods makes about a hundred, and
# their Deployments' status as many): the pass they leave runs this long after the
# first of a burst, with the latest reader, so a burst costs one reconcile (its LISTs,
# the ConfigMaps its pods read, a status write) a second, not one per event. A policy
# change or a target Deployment event makes the pass due at once.
POD_SETTLE_SECONDS = 1.0
# A target Deployment's status moves at every step of its rollout (about fifteen events
# for three replicas, even after kopf's batching), and each pass is a reconcile: a
# read of the Deployment, a LIST of the recipe pods, a status write (which every
# `kill --wait` watching the policy looks at again). A step's pass runs this long
# after the first step of a burst; the step that ends the rollout runs at once.
ROLLOUT_STEP_SETTLE_SECONDS = 0.25


def _settle_then_drain(
    rt: OperatorRuntime, namespace: str, deployment: str, logger: Logger, timer: str = "pods"
) -> None:
    """`_schedule_drain` once the pass left is due (`OperatorRuntime.pass_wait`): until
    then a timer (one per Deployment and `timer` kind, `later_once`) looks again, and
    meanwhile `_drain` leaves the pass alone."""
    wait = rt.pass_wait(namespace, deployment)
    if wait > 0:
        rt.later_once(
            (namespace, deployment, timer),
            wait,
            _settle_then_drain,
            rt,
            namespace,
            deployment,
            logger,
            timer,
        )
    else:
        _schedule_drain(rt, namespace, deployment, logger)


def refresh_pending(body: Mapping[str, Any], **_: Any) -> bool:
    """Whether the policy carries a `--refresh-recipe-pods` request not carried out yet
    (an annotation change alone does not trigger the spec handlers)."""
    token = refresh_request(body)
    status = body.get("status") or {}
    pods = status.get("recipePods") if isinstance(status, Mapping) else None
    handled = pods.get("handledRequest") if isinstance(pods, Mapping) else None
    return bool(token) and token != handled
