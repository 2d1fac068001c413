"""Helpers the integration tests share: polling, free ports, the SpilloverPolicy CRD,
manifests for Deployments and policies, and readers that fail naming what is gone.

Everything here talks to the real API server of the local control plane; nothing is a
stand-in.
"""

from __future__ import annotations

import copy
import hashlib
import socket
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient as _DynamicClient
from spillover_operator.client import Connection, find_deployment, find_policy
from spillover_operator.domain.resource import GROUP, VERSION

if TYPE_CHECKING:
    from kopf_operator import OperatorProcess

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "manifests" / "crd" / "spilloverpolicies.yaml"
WAIT = 120.0  # seconds: a generous bound for slow machines, never a timing assertion

T = TypeVar("T")
# kubernetes ships py.typed but leaves the dynamic client unannotated.
_dynamic_client = cast(Callable[..., Any], _DynamicClient)
# The dynamic client's discovery cache. Left to itself the library writes one
# /tmp/osrcp-<hash>.json per API server and never removes it; this directory goes when
# the tests end.
_DISCOVERY_CACHE = tempfile.TemporaryDirectory(prefix="spillover-tests-discovery-")


def DynamicClient(api: client.ApiClient) -> Any:
    """The kubernetes dynamic client on `api`, its discovery cache (one file per API
    server, as the library keys it) in a directory removed when the tests end."""
    host = hashlib.md5(str(api.configuration.host).encode(), usedforsecurity=False).hexdigest()
    cache = Path(_DISCOVERY_CACHE.name) / f"discovery-{host}.json"
    return _dynamic_client(api, cache_file=str(cache))


# ---------------------------------------------------------------------------- waiting


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    *,
    timeout: float = WAIT,
    operator: OperatorProcess | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll `probe` every 0.2 s until it returns something truthy, and return that.

    Fails the test naming `what` and the last value seen when `timeout` passes (with
    the operator's log tail when `operator` is given; at once, with that tail, if the
    operator process exits meanwhile). Exceptions of the types in `retry_on` count as
    "not yet"."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        if operator is not None:
            operator.check_alive()
        try:
            value = probe()
        except retry_on as exc:
            last = exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    tail = f"\n--- operator log ---\n{operator.log_tail()}" if operator is not None else ""
    pytest.fail(f"timed out after {timeout:g}s waiting for {what}; last: {last!r}{tail}")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------------------- objects


def model(cls: Any, body: Mapping[str, Any]) -> Any:
    """A kubernetes client model from an API JSON dict."""
    built = cls.from_dict(dict(body))
    assert built is not None, f"could not build {cls.__name__}"
    return built


def create_object(api: client.ApiClient, doc: Mapping[str, Any]) -> dict[str, Any]:
    """Create any object from its manifest (dynamic client); the created object."""
    resource = DynamicClient(api).resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    created: dict[str, Any] = resource.create(
        body=dict(doc), namespace=doc["metadata"].get("namespace")
    ).to_dict()
    return created


def install_crd(api: client.ApiClient, doc: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Create (or replace) a CRD, by default manifests/crd's SpilloverPolicy, and wait
    until it is Established and its resource is served. Returns the manifest."""
    body = copy.deepcopy(dict(doc) if doc is not None else yaml.safe_load(CRD_FILE.read_text()))
    ext = client.ApiextensionsV1Api(api)
    name = body["metadata"]["name"]
    try:
        existing: Any = ext.read_custom_resource_definition(name)
    except ApiException as exc:
        if exc.status != 404:
            raise
        ext.create_custom_resource_definition(model(client.V1CustomResourceDefinition, body))
    else:
        replacement = copy.deepcopy(body)
        replacement["metadata"]["resourceVersion"] = existing.metadata.resource_version
        ext.replace_custom_resource_definition(
            name, model(client.V1CustomResourceDefinition, replacement)
        )

    def established() -> bool:
        crd: Any = ext.read_custom_resource_definition(name)
        conds = {c.type: c.status for c in (crd.status.conditions or [])}
        return conds.get("Established") == "True"

    wait_for(f"CRD {name} to be Established", established, timeout=60)
    group, plural = body["spec"]["group"], body["spec"]["names"]["plural"]
    version = next(v["name"] for v in body["spec"]["versions"] if v.get("served", True))

    def served() -> bool:
        client.CustomObjectsApi(api).list_cluster_custom_object(group, version, plural)
        return True

    wait_for(
        f"{plural}.{group}/{version} to be served", served, timeout=60, retry_on=(ApiException,)
    )
    return body


def container_manifest(
    name: str,
    image: str,
    env: Mapping[str, str] | Sequence[Mapping[str, Any]] | None = None,
    ports: Sequence[int] = (),
) -> dict[str, Any]:
    """A container; `env` as a name -> value mapping or as the API's list of entries."""
    out: dict[str, Any] = {"name": name, "image": image}
    if env is not None:
        out["env"] = (
            [{"name": k, "value": v} for k, v in env.items()]
            if isinstance(env, Mapping)
            else [dict(e) for e in env]
        )
    if ports:
        out["ports"] = [{"containerPort": p} for p in ports]
    return out


def deployment_manifest(
    name: str,
    containers: Sequence[Mapping[str, Any]],
    *,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    replicas: int = 1,
    deployment_labels: bool = False,
) -> dict[str, Any]:
    """An apps/v1 Deployment whose pods carry `labels` (default `app: <name>`), selected
    by them; `deployment_labels` puts them on the Deployment's metadata too."""
    pod_labels = dict(labels or {"app": name})
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if deployment_labels:
        metadata["labels"] = dict(pod_labels)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": dict(pod_labels)},
                "spec": {"containers": [dict(c) for c in containers]},
            },
        },
    }


def policy_manifest(
    namespace: str, spec: Mapping[str, Any], name: str = "spillover"
) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SpilloverPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": dict(spec),
    }


# ---------------------------------------------------------------------------- readers


def connection(api: client.ApiClient, namespace: str) -> Connection:
    """The client library's connection over the test's admin ApiClient."""
    return Connection.from_api_client(api, namespace, field_manager="integration-test")


def read_deployment(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The Deployment as the API returns it (JSON); fails the test if it is gone."""
    found = find_deployment(connection(api, namespace), name)
    assert found is not None, f"Deployment {namespace}/{name} not found"
    return found


def read_policy(api: client.ApiClient, namespace: str, name: str = "spillover") -> dict[str, Any]:
    """The SpilloverPolicy as the API returns it; fails the test if it is gone."""
    found = find_policy(connection(api, namespace), name)
    assert found is not None, f"SpilloverPolicy {namespace}/{name} not found"
    return found


def policy_gone(api: client.ApiClient, namespace: str, name: str) -> bool:
    return find_policy(connection(api, namespace), name) is None


def condition(policy: Mapping[str, Any], type_: str) -> dict[str, Any]:
    """The policy's status condition of that type ({} when there is none)."""
    for cond in (policy.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def current(policy: Mapping[str, Any]) -> bool:
    """The operator has processed the policy's current generation."""
    status = policy.get("status") or {}
    return bool(status.get("observedGeneration") == policy["metadata"]["generation"])


def is_ready(policy: Mapping[str, Any]) -> bool:
    """Ready=True for the current generation (applied and rolled out)."""
    return current(policy) and condition(policy, "Ready").get("status") == "True"


def container_env(dep: Mapping[str, Any], container: str | None = None) -> list[dict[str, Any]]:
    """The env entries of a container of the Deployment's pod template (the first when
    `container` is None)."""
    containers = dep["spec"]["template"]["spec"]["containers"]
    if container is None:
        return list(containers[0].get("env") or [])
    for c in containers:
        if c["name"] == container:
            return list(c.get("env") or [])
    raise AssertionError(
        f"no container {container!r} in {[c['name'] for c in containers]} "
        f"(Deployment {dep['metadata'].get('name')})"
    )


def env_map(dep: Mapping[str, Any], container: str | None = None) -> dict[str, Any]:
    """name -> value (or the `valueFrom` object) of a container's env."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container_env(dep, container)}
