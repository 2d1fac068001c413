"""The kubelet Summary read through the API server's node proxy, on the local cluster's
real node (a real kubelet on containerd): the harness's sampler (`cluster/
kubelet_summary.py`, through the client's `node_summary`) finds a real pod's container
working set there, and refuses a kwok node, which has no kubelet to answer, so that
Prometheus' peak stands for it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from controlplane.localcluster import LocalCluster
from controlplane.realnode import NODE_LABEL, NODE_NAME, SANDBOX_IMAGE
from k8s_helpers import wait_for
from kubernetes import client
from spillover_harness.cluster.kubelet_summary import SummarySampler, working_sets
from spillover_operator.client import ClientError, connect, node_summary

pytestmark = pytest.mark.integration

NS = "kubelet-summary"
LABEL = "app.kubernetes.io/name=summary-probe"


def _pod(name: str, real: bool) -> dict[str, object]:
    spec: dict[str, object] = {
        "containers": [
            # the pause image the node has (no registry): a real process, a small figure
            {"name": "mcp-host", "image": SANDBOX_IMAGE, "imagePullPolicy": "Never"}
        ],
    }
    if real:
        spec["nodeSelector"] = {NODE_LABEL: "true"}
        spec["tolerations"] = [{"key": NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}]
    else:
        spec["nodeName"] = "kwok-node-0"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "summary-probe"}},
        "spec": spec,
    }


@pytest.fixture(scope="module")
def pods(real_node_cluster: LocalCluster) -> Iterator[LocalCluster]:
    with real_node_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
        core.create_namespaced_pod(NS, _pod("on-the-real-node", real=True))
        core.create_namespaced_pod(NS, _pod("on-a-kwok-node", real=False))
        wait_for(
            "both probe pods running",
            lambda: all(
                core.read_namespaced_pod(n, NS).status.phase == "Running"
                for n in ("on-the-real-node", "on-a-kwok-node")
            ),
            timeout=180,
        )
    yield real_node_cluster


def test_the_summary_gives_a_real_pods_working_set_and_a_kwok_node_is_refused(
    pods: LocalCluster,
) -> None:
    conn = connect(str(pods.kubeconfig), None, NS, field_manager="spillover-harness-test")
    # the kubelet reports a new container after its first housekeeping (~10 s)
    sets = wait_for(
        "the real pod's working set in the kubelet Summary",
        lambda: working_sets(node_summary(conn, NODE_NAME), NS, "mcp-host"),
        timeout=120,
        retry_on=(ClientError,),
    )
    assert set(sets) == {"on-the-real-node"} and sets["on-the-real-node"] > 0
    with pytest.raises(ClientError):
        node_summary(conn, "kwok-node-0")

    with SummarySampler(conn, LABEL, "mcp-host", step_s=0.5) as sampler:
        wait_for("two Summary samples", lambda: sampler.samples >= 2, timeout=60)
    assert sampler.peaks.get("on-the-real-node", 0) > 0
    assert "on-a-kwok-node" not in sampler.peaks
    assert set(sampler.refused) == {"kwok-node-0"}, sampler.refused


def test_the_sampler_waits_for_a_new_pods_first_figure_and_not_for_a_kwok_pod(
    pods: LocalCluster,
) -> None:
    conn = connect(str(pods.kubeconfig), None, NS, field_manager="spillover-harness-test")
    with pods.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(NS, _pod("new-on-the-real-node", real=True))
        wait_for(
            "the new probe pod running",
            lambda: core.read_namespaced_pod("new-on-the-real-node", NS).status.phase == "Running",
            timeout=180,
        )
        try:
            # as a block starts right after a switch made new pods
            with SummarySampler(conn, LABEL, "mcp-host", step_s=0.5) as sampler:
                unmeasured = sampler.wait_measured(120)
                waited_until = time.time()
                assert unmeasured == set(), unmeasured
                # every running pod on the real node has a figure read before the wait
                # ended; the kwok pod, on a node that is refused, was not waited for
                assert {"on-the-real-node", "new-on-the-real-node"} <= set(sampler.first)
                assert sampler.first["new-on-the-real-node"].at <= waited_until
                assert "on-a-kwok-node" not in sampler.first
                assert set(sampler.refused) == {"kwok-node-0"}, sampler.refused
        finally:
            core.delete_namespaced_pod("new-on-the-real-node", NS, grace_period_seconds=0)
