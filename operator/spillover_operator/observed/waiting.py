"""Waiting until a policy change is in effect, with progress through a callback (the
library prints nothing: spilloverctl prints each progress line, the harness keeps its
own record)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spillover_operator.client.connection import Connection
from spillover_operator.client.errors import NotFound, OperatorRefused, TimedOut
from spillover_operator.client.pods import selector_string
from spillover_operator.client.watch import ChangeSignal, named
from spillover_operator.domain.assess import Area, Finding, StatusReport
from spillover_operator.domain.model import (
    COND_READY,
    PENDING_REASONS,
    REASON_STALE_AFTER_REFRESH,
    REFUSED_REASONS,
)
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION
from spillover_operator.domain.rollout import rollout_state
from spillover_operator.observed.observing import observe

INITIAL_DELAY = 0.5
MAX_DELAY = 5.0
# While the last watch events say a look cannot end the wait (the operator reports the
# rollout still in progress), events make a look at most this often: each look is a
# GET of the policy and of the Deployment and a LIST of the pods, and a rollout of
# three replicas makes some twenty events. An event after which a look may end the
# wait makes one at once.
LOOK_EVERY_S = 0.25


@dataclass(frozen=True)
class WaitProgress:
    """One look at the state while waiting: `elapsed` seconds since the start, the
    report, what is still `pending`, and whether this is the final, `settled` look."""

    elapsed: float
    report: StatusReport
    pending: list[Finding]
    settled: bool

    def state(self) -> tuple[object, ...]:
        """What a progress line shows; a callback is called again only when it changes."""
        report = self.report
        ready = report.condition(COND_READY)
        rollout = report.rollout
        return (
            report.generation,
            report.observed_generation,
            None if ready is None else (ready.get("status"), ready.get("reason")),
            sum(1 for f in self.pending if f.area in ("env", "passthrough")),
            None
            if report.recipe_pods is None
            else tuple(report.recipe_pods.count(s) for s in ("current", "stale", "unknown")),
            None
            if rollout is None
            else (rollout.updated, rollout.available, rollout.desired, rollout.complete),
        )


ProgressCallback = Callable[[WaitProgress], None]


def _fail_fast(
    conn: Connection, report: StatusReport, pending: list[Finding], *, direct: bool
) -> None:
    """Stop waiting when the state cannot settle by itself."""
    if report.deployment_name and not report.deployment_found:
        raise NotFound(
            f"the target Deployment {report.deployment_name!r} does not exist in namespace "
            f"{conn.namespace!r}; the policy is updated and the operator applies it when "
            "the Deployment appears"
        )
    for finding in pending:
        if finding.area == "target":
            raise NotFound(f"{finding.message}; nothing will roll out until that is fixed")
    for finding in pending:
        if finding.area == "recipe-pods" and finding.severity == "MISMATCH":
            raise OperatorRefused(
                f"{finding.message}; waiting cannot fix that", reason=REASON_STALE_AFTER_REFRESH
            )
    if direct or report.observed_generation != report.generation:
        return
    ready = report.condition(COND_READY)
    if (
        ready is not None
        and ready.get("status") != "True"
        and ready.get("reason") in REFUSED_REASONS
    ):
        raise OperatorRefused(
            f"the operator refused generation {report.generation}: Ready=False "
            f"reason={ready.get('reason')}: {ready.get('message')}",
            reason=str(ready.get("reason")),
        )


def wait_until_settled(
    conn: Connection,
    name: str,
    *,
    direct: bool = False,
    timeout: float,
    progress: ProgressCallback | None = None,
    recipe_pods: bool = True,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    follow: bool = True,
) -> StatusReport:
    """Look at once, then again whenever a watch on the policy or its Deployment reports
    a change (`follow`), at the latest after 0.5 s growing to 5 s without one, until the
    policy is in effect. Without `follow`, or when the watches cannot be opened, the
    looks are only that backoff (`sleep` between them).

    Through the operator: observedGeneration == metadata.generation, Ready=True, the
    Deployment env matches and its rollout is complete, and no matched recipe pod is
    stale (`recipe_pods=False`: the pods are not looked at). `direct`: only the Deployment
    (env matches, rollout complete); the policy status may be stale.

    `progress` is called whenever what it would show changes, and once more when
    settled. Raises NotFound (the policy, the Deployment or the container is missing),
    OperatorRefused, TimedOut (listing what is still pending), or the API errors.
    `sleep` may raise to cancel the wait (the harness's stop request does); while
    following, it is called with 0 after each wait so it still can.
    """
    ignore: tuple[Area, ...] = ("operator",) if direct else ()
    if not recipe_pods:
        ignore = (*ignore, "recipe-pods")
    start = clock()
    delay = INITIAL_DELAY
    last: tuple[object, ...] | None = None
    signal: ChangeSignal | None = None
    try:
        while True:
            report = observe(conn, name, recipe_pods=recipe_pods)
            looked = clock()
            done = _look(conn, report, ignore, direct, looked - start, timeout, progress, last)
            if isinstance(done, StatusReport):
                return done
            if follow and signal is None:
                # Its first events (the objects as they are) make one more look at once:
                # nothing that changed since the look above is missed.
                signal = _follow(conn, name, report, recipe_pods=recipe_pods)
            if done != last:
                last = done
                delay = INITIAL_DELAY
            wait = max(0.05, min(delay, timeout - (clock() - start)))
            if signal is not None and not signal.broken:
                if signal.wait(wait):
                    delay = INITIAL_DELAY / 1.5  # a change: look now, and soon again
                    _hold(signal, conn.namespace, direct, since=looked, clock=clock)
                sleep(0)
            else:
                sleep(wait)
            delay = min(delay * 1.5, MAX_DELAY)
    finally:
        if signal is not None:
            signal.close()


def _policies(namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"


def _deployments(namespace: str) -> str:
    return f"/apis/apps/v1/namespaces/{namespace}/deployments"


def _follow(
    conn: Connection, name: str, report: StatusReport, *, recipe_pods: bool
) -> ChangeSignal:
    """Watch the policy, its Deployment (keeping the last event's object of each, for
    `_hold`) and (when waited for) the recipe pods its selector picks."""
    namespace = conn.namespace
    watched = [named(_policies(namespace), name)]
    if report.deployment_name:
        watched.append(named(_deployments(namespace), report.deployment_name))
    if recipe_pods and report.spec is not None:
        # parse_spec validated the selector: selector_string cannot refuse it.
        selector = selector_string(report.spec.recipe_pods.selector)
        watched.append((f"/api/v1/namespaces/{namespace}/pods", "labelSelector", selector))
    return ChangeSignal(conn, watched, keep=(_policies(namespace), _deployments(namespace)))


def _hold(
    signal: ChangeSignal,
    namespace: str,
    direct: bool,
    *,
    since: float,
    clock: Callable[[], float],
) -> None:
    """After an event: return at once when a look may end the wait (`may_end_wait` on
    the objects as their last events left them), else when `LOOK_EVERY_S` has passed
    since the last look (`since`), or sooner at an event after which it may."""
    while not may_end_wait(
        signal.latest(_policies(namespace)), signal.latest(_deployments(namespace)), direct=direct
    ):
        left = since + LOOK_EVERY_S - clock()
        if left <= 0 or not signal.wait(left):
            return


def may_end_wait(
    policy: Mapping[str, Any] | None, deployment: Mapping[str, Any] | None, *, direct: bool
) -> bool:
    """Whether a look may end the wait (settled, or failing fast), judged from the
    policy and its Deployment as watch events last showed them (None: not known, so it
    may). Not while the operator reports this generation still rolling out (Ready=False
    for a pending reason) or has not reported it yet; with `direct`, not while the
    Deployment's rollout is incomplete. A hint for when to look: the look decides."""
    if direct:
        return deployment is None or rollout_state(deployment).complete
    if policy is None:
        return True
    generation = (policy.get("metadata") or {}).get("generation")
    status = policy.get("status") or {}
    if not isinstance(status, Mapping) or status.get("observedGeneration") != generation:
        return False
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == COND_READY:
            return cond.get("status") == "True" or cond.get("reason") not in PENDING_REASONS
    return True


def _look(
    conn: Connection,
    report: StatusReport,
    ignore: tuple[Area, ...],
    direct: bool,
    elapsed: float,
    timeout: float,
    progress: ProgressCallback | None,
    last: tuple[object, ...] | None,
) -> StatusReport | tuple[object, ...]:
    """One look: the report when settled, else the state shown (TimedOut past `timeout`)."""
    pending = report.problems(ignore=ignore)
    _fail_fast(conn, report, pending, direct=direct)
    look = WaitProgress(elapsed, report, pending, settled=not pending)
    if not pending:
        if progress is not None:
            progress(look)
        return report
    if look.state() != last and progress is not None:
        progress(look)
    if elapsed >= timeout:
        listed = "\n".join(f"  {f}" for f in pending)
        raise TimedOut(
            f"timed out after {timeout:g}s waiting; the change was made but is not fully "
            f"in effect yet. Still pending:\n{listed}",
            pending=[str(f) for f in pending],
        )
    return look.state()
