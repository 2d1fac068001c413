"""Reading pods (the recipe mcp-host pods) and the label selectors that pick them.

The operator, spilloverctl and the harness all ask the same question of a pod: what
do its spillover variables resolve to in the process (`resolved_env`)? They list the
pods here and resolve with `pod_values`, so they agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from spillover_operator.client._api import JsonDict, api_call, request
from spillover_operator.client.connection import Connection
from spillover_operator.client.errors import ClientError, NotFound
from spillover_operator.labels import SelectorError as SelectorError
from spillover_operator.labels import parse_selector
from spillover_operator.mcp_host import ReportError, parse_report, report_address
from spillover_operator.policy import PolicySpec
from spillover_operator.recipe_pods import (
    ChangedAt,
    Owner,
    OwnerState,
    RecipePods,
    ReportUnavailable,
    assess_pods,
    deployment_state,
    stateful_set_state,
)
from spillover_operator.resolved_env import ConfigMapLookup, Resolved, no_config_maps, resolve

RESOURCE = "pods"


def selector_string(selector: Mapping[str, Any]) -> str:
    """A `metav1.LabelSelector` (`matchLabels`, `matchExpressions`) as the string the
    list API takes (`app=mcp-host,tier in (a,b),!legacy`), rendered from its validated
    requirements (`labels.parse_selector`: SelectorError for a key, value or operator
    Kubernetes would refuse). An empty selector matches everything, as in Kubernetes."""
    return parse_selector(selector).render()


# A LIST with resourceVersion=0 is answered from the API server's watch cache at
# once; without it the server first makes sure its cache is current (a quorum read,
# seen taking 60-90 ms under a rollout on the local control plane). The operator reads
# the cache, as its watches do: a pod that changes after the answer sends a pod event,
# which is reconciled again.
FROM_CACHE: list[tuple[str, str]] = [("resourceVersion", "0")]


def list_pods(conn: Connection, label_selector: str, *, from_cache: bool = False) -> list[JsonDict]:
    """The pods of the connection's namespace matching `label_selector` (a selector
    string, see `selector_string`), as API dicts, sorted by name; `from_cache`: as the
    API server's watch cache has them (`FROM_CACHE`)."""
    query = [("labelSelector", label_selector)] if label_selector else []
    body = request(
        conn,
        "GET",
        f"/api/v1/namespaces/{conn.namespace}/pods",
        verb="list",
        resource=RESOURCE,
        what=f"pods matching {label_selector!r}",
        query=(query + (FROM_CACHE if from_cache else [])) or None,
    )
    items: list[JsonDict] = list(body.get("items") or [])
    return sorted(items, key=lambda pod: str(pod.get("metadata", {}).get("name", "")))


def pod_container(pod: Mapping[str, Any], name: str | None) -> Mapping[str, Any] | None:
    """The container `name` of the pod (None: the first one), or None if absent."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if name is None:
        return containers[0] if containers else None
    return next((c for c in containers if c.get("name") == name), None)


def pod_values(
    pod: Mapping[str, Any],
    names: Iterable[str],
    container: str | None = None,
    config_maps: ConfigMapLookup = no_config_maps,
) -> dict[str, Resolved] | None:
    """The variables `names` as the pod's container process sees them; None when the
    pod has no such container."""
    found = pod_container(pod, container)
    return None if found is None else resolve(found, names, config_maps)


def list_replica_sets(conn: Connection, *, from_cache: bool = False) -> dict[str, JsonDict]:
    """The ReplicaSets of the connection's namespace by name (a pod's owner is found
    through them: ReplicaSet -> Deployment); `from_cache`: see `list_pods`."""
    body = request(
        conn,
        "GET",
        f"/apis/apps/v1/namespaces/{conn.namespace}/replicasets",
        verb="list",
        resource="replicasets.apps",
        what="ReplicaSets",
        query=FROM_CACHE if from_cache else None,
    )
    items: list[JsonDict] = list(body.get("items") or [])
    return {str(rs.get("metadata", {}).get("name")): rs for rs in items}


MERGE_PATCH = "application/merge-patch+json"


def restart_workload(conn: Connection, kind: str, name: str, patch: Mapping[str, Any]) -> JsonDict:
    """A rollout restart of a Deployment or StatefulSet (`recipe_pods.restart_patch`: the
    pod template's restartedAt annotation only), answering the workload as patched (its
    new metadata.generation). Needs `patch` on that kind (the refresh Role in
    manifests/); Forbidden without it."""
    plural = {"Deployment": "deployments", "StatefulSet": "statefulsets"}.get(kind)
    if plural is None:
        raise ValueError(f"cannot rollout-restart a {kind}")
    return request(
        conn,
        "PATCH",
        f"/apis/apps/v1/namespaces/{conn.namespace}/{plural}/{name}",
        verb="patch",
        resource=f"{plural}.apps",
        what=f"{kind} '{name}'",
        query=[("fieldManager", conn.field_manager)],
        body=dict(patch),
        content_type=MERGE_PATCH,
    )


def delete_pod(conn: Connection, name: str) -> None:
    """Delete a pod (its controller recreates it); a pod already gone is fine."""
    try:
        request(
            conn,
            "DELETE",
            f"/api/v1/namespaces/{conn.namespace}/pods/{name}",
            verb="delete",
            resource=RESOURCE,
            what=f"Pod '{name}'",
        )
    except NotFound:
        return


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
        with api_call(conn, "get", "pods/proxy", f"Pod '{name}' port {port}"):
            data = conn.transport.request(
                "GET",
                f"/api/v1/namespaces/{conn.namespace}/pods/{name}:{port}/proxy/{path}",
                timeout=REPORT_TIMEOUT,
            )
        return parse_report(data)
    except (ClientError, ReportError) as exc:
        raise ReportUnavailable(str(exc)) from None
    except Exception as exc:  # a time-out or a cut connection: ask again next time
        raise ReportUnavailable(f"{type(exc).__name__}: {exc}") from None


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
    `list_pods`)."""
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
        process_report=lambda pod: read_process_report(conn, pod),
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
        body = request(
            conn,
            "GET",
            f"/apis/apps/v1/namespaces/{conn.namespace}/deployments",
            verb="list",
            resource="deployments.apps",
            what="Deployments",
            query=FROM_CACHE if from_cache else None,
        )
        sets = replica_sets if replica_sets else list_replica_sets(conn, from_cache=from_cache)
        for dep in body.get("items") or []:
            name = str((dep.get("metadata") or {}).get("name"))
            if name in deployments:
                state = deployment_state(dep, sets.values())
                states[state.owner] = state
    for owner in wanted:
        if owner.kind != "StatefulSet":
            continue
        try:
            sts = request(
                conn,
                "GET",
                f"/apis/apps/v1/namespaces/{conn.namespace}/statefulsets/{owner.name}",
                verb="get",
                resource="statefulsets.apps",
                what=f"StatefulSet '{owner.name}'",
            )
        except ClientError:  # NotFound, Forbidden: judged by its pods instead
            continue
        states[owner] = stateful_set_state(sts)
    return states
