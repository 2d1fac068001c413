"""The mcp-host version that gates Stage 2, from the profile's source
(`mcp_host_version`, else `mcp_host_version_source`, else the whole imageID of the
newest running mcp-host pod).

A Minikube-built image and the registry image of the same commit have different
repositories (and usually different digests): the registry part is left out of an
image digest, and a pod label/annotation or a version endpoint names the commit.
"""

from __future__ import annotations

import json

import requests
from spillover_operator.client import Connection

from spillover_harness.cluster.kubeconn import ClusterStageError
from spillover_harness.cluster.observe import Pod, image_id, name_of, running_pods
from spillover_harness.profile import JsonPath, Profile, VersionSource


def digest_of(image_id: str) -> str:
    """`repo@sha256:abc` / `docker-pullable://repo@sha256:abc` -> `sha256:abc`."""
    return image_id.rsplit("@", 1)[-1]


def _newest_pod(profile: Profile, cluster: Connection) -> Pod:
    pods = running_pods(cluster, profile.namespace, profile.pods.mcp_host.selector)
    if not pods:
        raise ClusterStageError(
            f"no running mcp-host pod ({profile.pods.mcp_host.selector}) in namespace "
            f"{profile.namespace}, so the stage cannot read the mcp-host version it validates; "
            "start one, or set mcp_host_version in the profile"
        )
    return pods[0]


def read_version(profile: Profile, cluster: Connection) -> str:
    """The version; ClusterStageError saying what is missing and how to fix it."""
    if profile.mcp_host_version:
        return profile.mcp_host_version
    source = profile.mcp_host_version_source or VersionSource()
    whole_image_id = profile.mcp_host_version_source is None  # as before: repo@digest
    try:
        if source.kind == "endpoint":
            return _from_endpoint(source)
        pod = _newest_pod(profile, cluster)
    except ClusterStageError:
        raise
    except Exception as exc:
        raise ClusterStageError(
            f"cannot read the mcp-host version ({source.kind}): {type(exc).__name__}"
        ) from None
    name = name_of(pod)
    if source.kind == "image_digest":
        found = image_id(pod, profile.pods.mcp_host.container)
        if found is not None:
            return found if whole_image_id else digest_of(found)
        raise ClusterStageError(
            f"mcp-host pod {name} reports no imageID, so the stage cannot record the version "
            "it validates; set mcp_host_version_source (a pod label or annotation with the "
            "commit, or a version endpoint) or mcp_host_version in the profile"
        )
    meta = pod.get("metadata") or {}
    where = meta.get("labels") if source.kind == "pod_label" else meta.get("annotations")
    value = (where or {}).get(source.key)
    if not value:
        raise ClusterStageError(
            f"mcp-host pod {name} has no {source.kind.removeprefix('pod_')} {source.key!r} "
            "(mcp_host_version_source): label the mcp-host pods with the commit their image "
            "was built from, or choose another source"
        )
    return str(value)


def _from_endpoint(source: VersionSource) -> str:
    assert source.url is not None
    try:
        resp = requests.get(source.url, timeout=10)
    except requests.RequestException as exc:
        raise ClusterStageError(
            f"the mcp-host version endpoint {source.url} is unreachable: {type(exc).__name__}"
        ) from None
    if resp.status_code >= 300:
        raise ClusterStageError(
            f"the mcp-host version endpoint {source.url} answered HTTP {resp.status_code}"
        )
    if source.json_path is None:
        text = resp.text.strip()
    else:
        try:
            found = JsonPath.parse(source.json_path).first(json.loads(resp.text))
        except ValueError:
            raise ClusterStageError(
                f"the mcp-host version endpoint {source.url} did not answer JSON"
            ) from None
        text = "" if found is None else str(found)
    if not text:
        raise ClusterStageError(f"the mcp-host version endpoint {source.url} gave no version")
    return text[:200]
