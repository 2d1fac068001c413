"""The recipe mcp-host pods a policy's selector picks, judged against the policy
(`recipe_pods.assess_pods`), what their processes report they run with, and the
rollout state of their owners: the pods and workloads read through the client."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from spillover_operator.client.connection import Connection
from spillover_operator.client.deployments import list_deployments
from spillover_operator.client.errors import ClientError
from spillover_operator.client.pods import (
    get_stateful_set,
    list_pods,
    list_replica_sets,
    proxy_get,
    selector_string,
)
from spillover_operator.domain.mcp_host import (
    REPORT_ANNOTATION,
    ReportError,
    parse_report,
    report_address,
)
from spillover_operator.domain.model import PolicySpec
from spillover_operator.domain.recipe_pods import (
    ChangedAt,
    Owner,
    OwnerState,
    RecipePods,
    ReportUnavailable,
    assess_pods,
    deployment_state,
    stateful_set_state,
)
from spillover_operator.domain.resolved_env import ConfigMapLookup

JsonDict = dict[str, Any]

# A process that does not answer within this long is reported unknown (and asked again
# on the next look): one slow mcp-host must not hold up the reconcile of the rest.
REPORT_TIMEOUT: tuple[float, float] = (2.0, 2.0)


def read_process_report(conn: Connection, pod: Mapping[str, Any]) -> dict[str, str | None] | None:
    """What the pod's process reports it runs with (`mcp_host.parse_report`), read through
    the API server's pod proxy (`pods/proxy` get) at the address its annotation gives;
    None when it declares no report. ReportUnavailable when it cannot be read."""
    meta = pod.get("metadata") or {}
    name = str(meta.get("name"))
    try:
        address = report_address(meta.get("annotations"))
    except ReportError as exc:
        raise ReportUnavailable(str(exc)) from None
    if address is None:
        return None
    if (pod.get("status") or {}).get("phase") != "Running":
        raise ReportUnavailable(f"the pod is {(pod.get('status') or {}).get('phase')}")
    port, path = address
    try:
        return parse_report(proxy_get(conn, name, port, path, timeout=REPORT_TIMEOUT))
    except (ClientError, ReportError) as exc:
        raise ReportUnavailable(str(exc)) from None
    except Exception as exc:  # a time-out or a cut connection: ask again next time
        raise ReportUnavailable(f"{type(exc).__name__}: {exc}") from None


# A process runs with the values it started with: within one container's life a second
# read of its report says the same again. Each is kept this long (an image that reads its
# values anew would be seen within it), for at most this many processes.
REPORT_TTL = 30.0
MAX_REMEMBERED_REPORTS = 10_000

Report = dict[str, str | None] | None
ProcessKey = tuple[str, str, str, str, tuple[tuple[str, str], ...]]


def process_key(conn: Connection, pod: Mapping[str, Any]) -> ProcessKey | None:
    """Who answers a pod's report: the cluster, the pod (its uid), the report address
    and every container by its containerID (a restart gives a new one). None while a
    container has no ID yet: such a pod's report is read every time."""
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ids = tuple(sorted((str(s.get("name")), str(s.get("containerID") or "")) for s in statuses))
    if not uid or not ids or any(not cid for _, cid in ids):
        return None
    address = str((meta.get("annotations") or {}).get(REPORT_ANNOTATION, ""))
    where = f"{conn.server or conn.kubeconfig}#{conn.context}/{conn.namespace}"
    return (where, str(uid), str(meta.get("name")), address, ids)


class ProcessReports:
    """The process reports read so far, so that a reconcile a second (or a wait's look
    at every event) does not ask every recipe pod's process again through the API
    server's pod proxy: a report is kept for its process (`process_key`) at most
    `ttl` seconds; one that could not be read (ReportUnavailable) is never kept.
    Thread-safe: the operator's pass threads share one."""

    def __init__(
        self,
        read: Callable[[Connection, Mapping[str, Any]], Report] | None = None,
        *,
        ttl: float = REPORT_TTL,
        max_entries: int = MAX_REMEMBERED_REPORTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read or read_process_report
        self._ttl, self._max, self._clock = ttl, max_entries, clock
        self._known: dict[ProcessKey, tuple[float, Report]] = {}
        self._lock = threading.Lock()

    def read(self, conn: Connection, pod: Mapping[str, Any]) -> Report:
        """`read_process_report`, from what this process reported less than `ttl`
        seconds ago when it did."""
        key = process_key(conn, pod)
        if key is None:
            return self._read(conn, pod)
        now = self._clock()
        with self._lock:
            kept = self._known.get(key)
        if kept is not None and now - kept[0] < self._ttl:
            return kept[1]
        report = self._read(conn, pod)  # ReportUnavailable: nothing kept
        with self._lock:
            self._known.pop(key, None)
            self._known[key] = (now, report)
            while len(self._known) > self._max:  # the oldest read first
                del self._known[next(iter(self._known))]
        return report


# One per process: the operator's reconciles and spilloverctl's or the harness's waits.
_REPORTS = ProcessReports()


def observe_recipe_pods(
    conn: Connection,
    spec: PolicySpec,
    desired: Mapping[str, str | None],
    config_maps: ConfigMapLookup,
    changed_at: ChangedAt | None = None,
    *,
    from_cache: bool = False,
) -> RecipePods:
    """List the pods the policy's selector matches and classify them (`changed_at`: when
    a ConfigMap last changed, see `recipe_pods.classify`; `from_cache`: see
    `client.list_pods`)."""
    pods, _ = _observe(conn, spec, desired, config_maps, changed_at, from_cache=from_cache)
    return pods


def observe_refresh(
    conn: Connection,
    spec: PolicySpec,
    desired: Mapping[str, str | None],
    config_maps: ConfigMapLookup,
    changed_at: ChangedAt | None = None,
    *,
    from_cache: bool = False,
) -> tuple[RecipePods, dict[Owner, OwnerState]]:
    """`observe_recipe_pods`, and the state of every Deployment and StatefulSet owning a
    matched pod (`read_owner_states`): what a refresh judges its progress by."""
    pods, replica_sets = _observe(
        conn, spec, desired, config_maps, changed_at, from_cache=from_cache
    )
    owners = {v.owner for v in pods.pods if v.owner.restartable}
    return pods, read_owner_states(conn, owners, replica_sets, from_cache=from_cache)


def _observe(
    conn: Connection,
    spec: PolicySpec,
    desired: Mapping[str, str | None],
    config_maps: ConfigMapLookup,
    changed_at: ChangedAt | None,
    *,
    from_cache: bool,
) -> tuple[RecipePods, dict[str, JsonDict]]:
    selector = selector_string(spec.recipe_pods.selector)
    pods = list_pods(conn, selector, from_cache=from_cache)
    replica_sets: dict[str, Any] = {}
    if any(
        ref.get("kind") == "ReplicaSet"
        for pod in pods
        for ref in (pod.get("metadata") or {}).get("ownerReferences") or []
    ):
        replica_sets = list_replica_sets(conn, from_cache=from_cache)
    found = assess_pods(
        pods,
        spec,
        desired,
        selector=selector,
        replica_sets=replica_sets,
        config_maps=config_maps,
        changed_at=changed_at,
        process_report=lambda pod: _REPORTS.read(conn, pod),
    )
    return found, replica_sets


def read_owner_states(
    conn: Connection,
    owners: Iterable[Owner],
    replica_sets: Mapping[str, JsonDict] | None = None,
    *,
    from_cache: bool = False,
) -> dict[Owner, OwnerState]:
    """The rollout state of each Deployment and StatefulSet among `owners`
    (`recipe_pods.deployment_state`, `stateful_set_state`): Deployments from one LIST
    (with their ReplicaSets: `replica_sets`, else listed), each StatefulSet by a GET. One
    that cannot be read (gone, or a StatefulSet the operator may not get) is left out:
    its refresh is then judged by its pods' creation times."""
    wanted = sorted(set(owners))
    states: dict[Owner, OwnerState] = {}
    deployments = {o.name for o in wanted if o.kind == "Deployment"}
    if deployments:
        items = list_deployments(conn, from_cache=from_cache)
        sets = replica_sets if replica_sets else list_replica_sets(conn, from_cache=from_cache)
        for dep in items:
            name = str((dep.get("metadata") or {}).get("name"))
            if name in deployments:
                state = deployment_state(dep, sets.values())
                states[state.owner] = state
    for owner in wanted:
        if owner.kind != "StatefulSet":
            continue
        try:
            sts = get_stateful_set(conn, owner.name)
        except ClientError:  # NotFound, Forbidden: judged by its pods instead
            continue
        states[owner] = stateful_set_state(sts)
    return states
