"""Process-wide state of the operator: the `OperatorRuntime` (the settings read at
start-up, the API connection, reconcile locks, metrics) that the start-up handler puts
in kopf's memo and every handler takes from there. Nothing lives in module
globals, so tests build their own runtime."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import datetime
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import kopf

from spillover_operator.client import Connection, check_reachable, connect, renew_lease
from spillover_operator.domain import heartbeat, leadership
from spillover_operator.domain.constants import FIELD_MANAGER, FINALIZER
from spillover_operator.domain.policy import PolicyCopy
from spillover_operator.domain.resource import GROUP
from spillover_operator.domain.settings import OperatorSettings
from spillover_operator.handlers import election, liveness
from spillover_operator.handlers.metrics import Metrics

log = logging.getLogger(__name__)

MEMO_KEY = "spillover_runtime"
# Threads running coalesced Deployment/pod event passes (`OperatorRuntime.run_passes`).
PASS_THREADS = 4


@dataclass(frozen=True)
class Pass:
    """What a pass reconciles with: the latest event's reader, and the changes made
    ahead of it that its reconcile reports (policy -> `reconcile.EarlyApply`)."""

    reader: Any
    early: dict[str, Any]
    # When it may run (time.monotonic()); 0: at once. A pod event's pass waits for the
    # rest of its burst (`handlers.policies.POD_SETTLE_SECONDS`).
    due: float = 0.0


@dataclass
class OperatorRuntime:
    """What every handler shares.

    Locks per target Deployment (`lock_for`): a policy handler, a Deployment event and
    the resync timer may want the same policy and Deployment at once, so what concerns
    one Deployment runs one at a time; different Deployments run in parallel (kopf's
    `max_workers` threads).
    """

    cluster: Connection
    metrics: Metrics
    # What the operator was configured with, read once at its start (`settings`).
    settings: OperatorSettings = field(default_factory=OperatorSettings)
    # When the operator started (or, a standby, began to lead): the watches' grace.
    started: float = field(default_factory=time.monotonic)
    # The leader election (`handlers.election`); None in tests that build a runtime.
    elector: election.Elector | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)  # guards `locks`
    locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    # The namespaces the operator has seen objects in: it renews its heartbeat Lease
    # there (`spillover_operator.domain.heartbeat`).
    namespaces: set[str] = field(default_factory=set)
    wake: threading.Event = field(default_factory=threading.Event)
    # (namespace, Deployment) -> newest metadata.generation seen; -> the pass left by
    # the latest Deployment event not reconciled yet (see `leave_pass`).
    generations: dict[tuple[str, str], int] = field(default_factory=dict)
    passes: dict[tuple[str, str], Pass] = field(default_factory=dict)
    waiting: dict[tuple[str, str], int] = field(default_factory=dict)
    # (namespace, policy) -> the policy as the operator's last status write answered it
    # (`views.IndexReader.written`).
    written: dict[tuple[str | None, str], PolicyCopy] = field(default_factory=dict)
    # (namespace, Deployment) -> the Deployment as the operator's last patch of it
    # answered (`views.IndexReader.written_deployments`).
    written_deployments: dict[tuple[str | None, str], dict[str, Any]] = field(default_factory=dict)
    # What has a look again scheduled (`later_once`): (namespace, Deployment), or a key
    # of the caller's such as (namespace, Deployment, "pods").
    rechecks: set[tuple[str, ...]] = field(default_factory=set)
    # The event loop's ticks, for /livez (`spillover_operator.handlers.liveness`).
    liveness: liveness.Liveness = field(default_factory=liveness.Liveness)
    pass_threads: concurrent.futures.ThreadPoolExecutor = field(
        default_factory=lambda: concurrent.futures.ThreadPoolExecutor(
            max_workers=PASS_THREADS, thread_name_prefix="pass"
        )
    )

    def watching(self, namespace: str | None) -> None:
        """Note a namespace the operator saw an object in (its first sight wakes the
        heartbeat at once)."""
        if namespace and namespace not in self.namespaces:
            with self.lock:
                self.namespaces.add(namespace)
            self.wake.set()

    def lock_for(self, namespace: str, deployment: str) -> threading.Lock:
        with self.lock:
            return self.locks.setdefault((namespace, deployment), threading.Lock())

    # -- Deployment events, coalesced ------------------------------------------------
    # kopf hands a Deployment's events over one at a time, and a rollout makes a dozen
    # (status updates) in a second. Reconciling each behind the target's lock queued
    # them, and a policy change waited behind the queue. Instead a Deployment event
    # leaves its pass here ("reconcile with this copy"; a newer event replaces it) and
    # the pass threads run the latest pass under the target's lock
    # (`handlers.policies._drain`).

    def note_generation(self, namespace: str, deployment: str, generation: Any) -> bool:
        """Record a Deployment's metadata.generation as seen (an event's, or a patch's
        answer); False when a newer generation was seen already: the copy is stale (its
        spec is older than one the operator knows) and the newer one's event comes."""
        if not isinstance(generation, int):
            return True
        key = (namespace, deployment)
        with self.lock:
            newest = self.generations.get(key, 0)
            if generation < newest:
                return False
            self.generations[key] = generation
        return True

    def leave_pass(
        self,
        namespace: str,
        deployment: str,
        reader: Any,
        early: Mapping[str, Any] | None = None,
        *,
        settle: float = 0.0,
    ) -> None:
        """Leave a pass: reconcile the Deployment's policies with `reader` (it replaces
        the reader of a pass left before, which is older), reporting the changes in
        `early` (policy -> a change made ahead; kept from the pass replaced). `settle`:
        not before that many seconds from now, unless a pass left before (or after,
        without `settle`) may run sooner: the earliest wins."""
        key = (namespace, deployment)
        due = time.monotonic() + settle if settle > 0 else 0.0
        with self.lock:
            before = self.passes.get(key)
            kept = dict(before.early) if before is not None else {}
            kept.update(early or {})
            if before is not None:
                due = min(due, before.due)
            self.passes[key] = Pass(reader, kept, due)

    def pass_wait(self, namespace: str, deployment: str) -> float:
        """Seconds until the pass left for this Deployment may run (0: now, or none)."""
        with self.lock:
            left = self.passes.get((namespace, deployment))
        return 0.0 if left is None else max(0.0, left.due - time.monotonic())

    def take_pass(self, namespace: str, deployment: str) -> Pass | None:
        """The pass left for this Deployment (None: none), removed."""
        with self.lock:
            return self.passes.pop((namespace, deployment), None)

    def has_pass(self, namespace: str, deployment: str) -> bool:
        with self.lock:
            return (namespace, deployment) in self.passes

    @contextlib.contextmanager
    def waiting_for(self, namespace: str, deployment: str) -> Iterator[None]:
        """While a policy handler waits for (and holds) the target's lock: passes wait."""
        key = (namespace, deployment)
        with self.lock:
            self.waiting[key] = self.waiting.get(key, 0) + 1
        try:
            yield
        finally:
            with self.lock:
                self.waiting[key] -= 1
                if not self.waiting[key]:
                    del self.waiting[key]

    def handler_waiting(self, namespace: str, deployment: str) -> bool:
        with self.lock:
            return (namespace, deployment) in self.waiting

    def run_passes(self, work: Callable[..., None], *args: Any) -> None:
        """Run `work(*args)` on the pass threads (a few: passes of different Deployments
        run side by side, each under its own lock)."""
        self.pass_threads.submit(work, *args)

    def later(self, delay: float, work: Callable[..., None], *args: Any) -> None:
        """Run `work(*args)` on the pass threads after `delay` seconds (a retry)."""
        timer = threading.Timer(delay, self.run_passes, args=(work, *args))
        timer.daemon = True
        timer.start()

    def later_once(
        self, key: tuple[str, ...], delay: float, work: Callable[..., None], *args: Any
    ) -> bool:
        """`later`, unless one for `key` is scheduled already (a refresh that waits is
        looked at again once per `delay`, however many reconciles said so); False then."""
        with self.lock:
            if key in self.rechecks:
                return False
            self.rechecks.add(key)

        def fire() -> None:
            with self.lock:
                self.rechecks.discard(key)
            work(*args)

        self.later(delay, fire)
        return True


class SpecDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's record of the last handled configuration (the annotation
    `spillover.clerum.io/last-handled-configuration`, against which it finds what
    changed), of the policy's spec alone.

    kopf's own record also copies the policy's labels and annotations into that one
    annotation, so its size was the policy author's to decide: 1800 labels (344 KB;
    the API server bounds no label set as a whole) made every write of kopf's fail with
    422 `metadata.annotations: Too long` (all annotations of an object share 256 KiB),
    and the policy was never handled again. Nothing reads them there: the change
    handler reacts to the spec only (`field="spec"`), and the refresh request is read
    from the event's object. So the record leaves `metadata` out, and its size is the
    spec's, which the CRD bounds (docs/operator.md, "What kopf keeps on a policy")."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        essence = dict(super().build(body=body, extra_fields=extra_fields))
        essence.pop("metadata", None)
        return cast(kopf.BodyEssence, essence)


def configure(settings: kopf.OperatorSettings) -> None:
    """kopf settings for running with only a namespaced Role."""
    # No peering objects (cluster-wide CRD), no namespace/CRD scanning (cluster-wide
    # list): the operator watches one namespace. Of several replicas only the holder
    # of the namespace's leader Lease starts kopf's watches (`leadership`).
    settings.peering.standalone = True
    settings.scanning.disabled = True
    # kopf's own state lives in annotations on the policy (patch verb, no status schema
    # entry needed); our status is ours alone.
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    # What changed is judged on the spec alone (SpecDiffBaseStorage).
    settings.persistence.diffbase_storage = SpecDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # The operator posts its own Events (Applied, DriftCorrected, Removed); kopf only
    # reports handler failures.
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "spillover-operator"
    settings.execution.max_workers = 8
    # Back after an API outage within about half a second: kopf retries a failed
    # request (the watch's LIST included) after these delays; its defaults grow to 21 s,
    # so the first change after an outage waited up to that long. Short steps for two
    # minutes: when they run out the watcher starts over, which took longer than a
    # step (ten steps of up to 1 s gave 0.6-1.9 s in `make bench-operator`'s 75 s
    # outage, ten of 0.5 s 2.9 s). A refused connection costs nothing, so retrying
    # twice a second during an outage is cheap.
    settings.networking.error_backoffs = [0.25] + [0.5] * 240
    settings.networking.connect_timeout = 5
    settings.watching.connect_timeout = 5
    # The server ends each watch after this long (kopf opens the next one at once), so
    # a watch silently cut by the network is replaced within this time.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330


def start(memo: Any, settings: OperatorSettings) -> OperatorRuntime:
    """Connect (the in-cluster ServiceAccount, else $KUBECONFIG / ~/.kube/config), serve
    the metrics and keep the runtime, with the `settings` read at start, in kopf's
    `memo`."""
    runtime = OperatorRuntime(
        cluster=connect(field_manager=FIELD_MANAGER, prefer_in_cluster=True),
        metrics=Metrics.for_process(),
        settings=settings,
    )
    runtime.metrics.serve(settings.metrics_port)
    liveness.serve(runtime.liveness, settings.liveness_port)
    memo[MEMO_KEY] = runtime
    threading.Thread(target=_heartbeat, args=(runtime,), daemon=True, name="heartbeat").start()
    return runtime


def elector_for(
    rt: OperatorRuntime, argv: list[str]
) -> tuple[election.Elector, leadership.Endpoint | None]:
    """The leader election of the namespaces `kopf run` watches (`argv`; none named:
    the connection's namespace), with the operator's writes gated on it from now on;
    and kopf's readiness endpoint (a standby answers it)."""
    options = leadership.kopf_run_options(argv)
    namespaces = options.namespaces or (rt.cluster.namespace,)
    elector = election.Elector(rt.cluster, namespaces, rt.settings.identity(), rt.metrics)
    rt.elector = elector
    rt.cluster = dataclasses.replace(rt.cluster, write_gate=elector.gate)
    return elector, options.liveness


def _heartbeat(rt: OperatorRuntime) -> None:
    """Renew the heartbeat Lease in every namespace seen, every RENEW_SECONDS."""
    holder = socket.gethostname()
    failing: set[str] = set()
    while True:
        with rt.lock:
            namespaces = sorted(rt.namespaces)
        for namespace in namespaces:
            try:
                renew_lease(
                    rt.cluster.in_namespace(namespace),
                    heartbeat.LEASE_NAME,
                    holder,
                    heartbeat.DURATION_SECONDS,
                    datetime.datetime.now(datetime.UTC),
                )
                rt.metrics.beat(namespace)
                failing.discard(namespace)
            except Exception as exc:
                if namespace not in failing:  # once per failure streak
                    log.warning("cannot renew the heartbeat Lease in %s: %s", namespace, exc)
                failing.add(namespace)
        rt.wake.wait(heartbeat.RENEW_SECONDS)
        rt.wake.clear()


def of(memo: Any) -> OperatorRuntime:
    """The runtime `start` put in the memo (kopf copies the memo into every object's)."""
    runtime = memo.get(MEMO_KEY) if memo is not None else None
    if not isinstance(runtime, OperatorRuntime):
        raise RuntimeError("the operator's start-up handler has not run (no runtime in memo)")
    return runtime


def write_gate(memo: Any) -> Callable[[], None] | None:
    """The leader's write gate, once the start-up handler has set up the election
    (None before: nothing may be written yet)."""
    runtime = memo.get(MEMO_KEY) if memo is not None else None
    if not isinstance(runtime, OperatorRuntime) or runtime.elector is None:
        return None
    return runtime.elector.gate


class NotLive(RuntimeError):
    """The liveness probe failed: the API server is unreachable or a watch is gone."""


# The resources the operator must keep watching (kopf names each watcher task
# "watcher for <resource>@<namespace>").
WATCHED = ("spilloverpolicies", "deployments")


# kopf starts its watchers a moment after the health endpoint: no complaint before.
WATCH_GRACE_SECONDS = 30.0


def watch_problems(task_names: list[str], uptime: float) -> list[str]:
    """Which of the operator's watches have no running kopf watcher task (none within
    WATCH_GRACE_SECONDS of the start)."""
    if uptime < WATCH_GRACE_SECONDS:
        return []
    watchers = [name for name in task_names if name.startswith("watcher for ")]
    return [
        f"no running watch on {resource}"
        for resource in WATCHED
        if not any(resource in name for name in watchers)
    ]


def probe_api(rt: OperatorRuntime) -> str:
    """Liveness, part one: the API server answers /version within 2 s (NotLive if not)."""
    try:
        return check_reachable(rt.cluster)
    except Exception as exc:
        raise NotLive(f"the API server is unreachable: {exc}") from exc
