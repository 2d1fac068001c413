"""Reading pods (the recipe mcp-host pods) and the label selectors that pick them;
what their processes serve (`proxy_get`); the workloads a refresh restarts. (Judging
the pods against a policy is `spillover_operator.observed`.)

The operator, spilloverctl and the harness all ask the same question of a pod: what
do its spillover variables resolve to in the process (`resolved_env`)? They list the
pods here and resolve with `pod_values`, so they agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from spillover_operator.client._api import JsonDict, api_call, request
from spillover_operator.client.connection import Connection
from spillover_operator.client.errors import NotFound
from spillover_operator.domain.labels import parse_selector
from spillover_operator.domain.resolved_env import (
    ConfigMapLookup,
    Resolved,
    no_config_maps,
    resolve,
)

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


def proxy_get(
    conn: Connection, pod: str, port: int, path: str, *, timeout: tuple[float, float]
) -> bytes:
    """GET `path` on `port` of pod `pod` through the API server's pod proxy
    (`pods/proxy` get): what a pod's process serves, without a route to the pod."""
    with api_call(conn, "get", "pods/proxy", f"Pod '{pod}' port {port}"):
        data: bytes = conn.transport.request(
            "GET",
            f"/api/v1/namespaces/{conn.namespace}/pods/{pod}:{port}/proxy/{path}",
            timeout=timeout,
        )
    return data


def get_stateful_set(conn: Connection, name: str) -> JsonDict:
    """The StatefulSet as stored; NotFound when it does not exist."""
    return request(
        conn,
        "GET",
        f"/apis/apps/v1/namespaces/{conn.namespace}/statefulsets/{name}",
        verb="get",
        resource="statefulsets.apps",
        what=f"StatefulSet '{name}'",
    )
