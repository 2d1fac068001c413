"""The local control plane itself: a real API server with RBAC, admission webhooks,
strategic merge patch, controllers and a fake kubelet that makes rollouts complete.

These tests guard what the operator's integration tests rely on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from controlplane.localcluster import LocalCluster, _pid_alive, find_bin_dir
from k8s_helpers import wait_for as _wait_for
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from pod_streams import exec_in_pod, http_get_through_port_forward, serve_text_on_loopback

pytestmark = pytest.mark.integration

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0) -> T:
    """k8s_helpers.wait_for, with an API error counting as "not yet"."""
    return _wait_for(what, probe, timeout=timeout, retry_on=(ApiException,))


def deployment(name: str, replicas: int = 2, containers: list[Any] | None = None) -> Any:
    labels = {"app": name}
    containers = containers or [
        client.V1Container(name="app", image="registry.invalid/app:1", ports=None)
    ]
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=containers),
            ),
        ),
    )


@pytest.fixture
def admin(control_plane: LocalCluster) -> Any:
    with control_plane.api_client() as api:
        yield api


def test_api_server_is_the_pinned_release_with_fake_nodes_ready(
    control_plane: LocalCluster, admin: Any
) -> None:
    info = client.VersionApi(admin).get_code()
    assert info.git_version.startswith("v1.36."), info.git_version
    assert control_plane.server.startswith("https://127.0.0.1:")
    nodes = client.CoreV1Api(admin).list_node().items
    assert [n.metadata.name for n in nodes] == control_plane.node_names
    for node in nodes:
        ready = {c.type: c.status for c in node.status.conditions}["Ready"]
        assert ready == "True", node.metadata.name
    # All five components still run.
    assert all(control_plane.running_components().values()), control_plane.running_components()


def test_rbac_is_enforced_for_a_service_account(
    control_plane: LocalCluster, admin: Any, namespace: str
) -> None:
    core = client.CoreV1Api(admin)
    rbac = client.RbacAuthorizationV1Api(admin)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="probe"))
    )
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "probe")
    with config.new_client_from_config(config_file=str(kubeconfig)) as sa_api:
        apps = client.AppsV1Api(sa_api)
        # Authenticated as the ServiceAccount ...
        review = client.AuthenticationV1Api(sa_api).create_self_subject_review(
            client.V1SelfSubjectReview()
        )
        assert review.status.user_info.username == f"system:serviceaccount:{namespace}:probe"
        # ... and, without a Role, forbidden.
        with pytest.raises(ApiException) as forbidden:
            apps.list_namespaced_deployment(namespace)
        assert forbidden.value.status == 403

        rbac.create_namespaced_role(
            namespace,
            client.V1Role(
                metadata=client.V1ObjectMeta(name="deployments-reader"),
                rules=[
                    client.V1PolicyRule(
                        api_groups=["apps"], resources=["deployments"], verbs=["get", "list"]
                    )
                ],
            ),
        )
        rbac.create_namespaced_role_binding(
            namespace,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name="probe-reads-deployments"),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="Role", name="deployments-reader"
                ),
                subjects=[
                    client.RbacV1Subject(kind="ServiceAccount", name="probe", namespace=namespace)
                ],
            ),
        )
        listed = wait_for(
            "the Role to allow listing deployments",
            lambda: apps.list_namespaced_deployment(namespace),
            timeout=10,
        )
        assert listed.items == []
        # The Role grants exactly what it says: no write, nothing in other namespaces.
        with pytest.raises(ApiException) as no_write:
            apps.create_namespaced_deployment(namespace, deployment("nope"))
        assert no_write.value.status == 403
        with pytest.raises(ApiException) as other_ns:
            apps.list_namespaced_deployment("default")
        assert other_ns.value.status == 403


def test_strategic_merge_patch_merges_containers_and_env_by_name(
    admin: Any, namespace: str
) -> None:
    apps = client.AppsV1Api(admin)
    containers = [
        client.V1Container(
            name="app",
            image="registry.invalid/app:1",
            env=[
                client.V1EnvVar(name="KEEP_ME", value="1"),
                client.V1EnvVar(name="CHANGE_ME", value="old"),
            ],
        ),
        client.V1Container(
            name="sidecar",
            image="registry.invalid/sidecar:1",
            env=[client.V1EnvVar(name="SIDE", value="car")],
        ),
    ]
    created = apps.create_namespaced_deployment(
        namespace, deployment("smp", replicas=1, containers=containers)
    )
    assert created.metadata.generation == 1

    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "env": [
                                {"name": "CHANGE_ME", "value": "new"},
                                {"name": "ADDED", "value": "yes"},
                            ],
                        }
                    ]
                }
            }
        }
    }
    # The Python client picks the strategic-merge content type for a dict body.
    patched = apps.patch_namespaced_deployment("smp", namespace, patch)
    by_name = {c.name: c for c in patched.spec.template.spec.containers}
    assert set(by_name) == {"app", "sidecar"}, "a JSON merge patch would have dropped sidecar"
    env = {e.name: e.value for e in by_name["app"].env}
    assert env == {"KEEP_ME": "1", "CHANGE_ME": "new", "ADDED": "yes"}
    assert [(e.name, e.value) for e in by_name["sidecar"].env] == [("SIDE", "car")]
    assert by_name["sidecar"].image == "registry.invalid/sidecar:1"
    assert patched.metadata.generation == 2

    # The same patch again changes nothing: same spec, no new generation (the
    # resourceVersion may move: the controller writes status meanwhile).
    again = apps.patch_namespaced_deployment("smp", namespace, patch)
    assert again.metadata.generation == 2
    assert again.spec.template == patched.spec.template


def _available(apps: Any, name: str, namespace: str, replicas: int) -> Any:
    dep = apps.read_namespaced_deployment_status(name, namespace)
    st = dep.status
    done = (
        st.observed_generation == dep.metadata.generation
        and st.updated_replicas == replicas
        and st.available_replicas == replicas
        and (st.replicas or 0) == replicas
    )
    return dep if done else None


def test_deployment_rolls_out_on_the_fake_node(
    control_plane: LocalCluster, admin: Any, namespace: str
) -> None:
    apps = client.AppsV1Api(admin)
    core = client.CoreV1Api(admin)
    apps.create_namespaced_deployment(namespace, deployment("web", replicas=2))
    dep = wait_for("2 available replicas", lambda: _available(apps, "web", namespace, 2))
    assert dep.status.available_replicas == 2

    pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
    assert len(pods) == 2
    for pod in pods:
        assert pod.spec.node_name in control_plane.node_names
        assert pod.status.phase == "Running"
        assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "True"

    # A template change rolls out a new ReplicaSet; the old one scales to zero.
    apps.patch_namespaced_deployment(
        "web",
        namespace,
        {"spec": {"template": {"metadata": {"annotations": {"rollout": "2"}}}}},
    )
    dep = wait_for("the second rollout to complete", lambda: _available(apps, "web", namespace, 2))
    assert dep.metadata.generation == 2

    def new_rs_ready() -> Any:
        sets = apps.list_namespaced_replica_set(namespace, label_selector="app=web").items
        by_rev = {rs.metadata.annotations["deployment.kubernetes.io/revision"]: rs for rs in sets}
        new, old = by_rev.get("2"), by_rev.get("1")
        if new is None or old is None:
            return None
        ok = new.status.available_replicas == 2 and (old.status.replicas or 0) == 0
        return new if ok else None

    new_rs = wait_for("the new ReplicaSet to own the 2 ready pods", new_rs_ready)
    assert new_rs.metadata.owner_references[0].name == "web"


def test_admission_webhooks_are_called(admin: Any, namespace: str) -> None:
    """MutatingAdmissionWebhook is on: a webhook with failurePolicy=Fail that nobody
    serves (a closed loopback port) makes writes in its namespace fail."""
    reg = client.AdmissionregistrationV1Api(admin)
    core = client.CoreV1Api(admin)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    name = f"{namespace}-closed"
    reg.create_mutating_webhook_configuration(
        client.V1MutatingWebhookConfiguration(
            metadata=client.V1ObjectMeta(name=name),
            webhooks=[
                client.V1MutatingWebhook(
                    name="closed.spillover-ops.test",
                    admission_review_versions=["v1"],
                    side_effects="None",
                    failure_policy="Fail",
                    timeout_seconds=2,
                    client_config=client.AdmissionregistrationV1WebhookClientConfig(
                        url=f"https://127.0.0.1:{closed_port}/mutate"
                    ),
                    namespace_selector=client.V1LabelSelector(
                        match_labels={"kubernetes.io/metadata.name": namespace}
                    ),
                    rules=[
                        client.V1RuleWithOperations(
                            api_groups=[""],
                            api_versions=["v1"],
                            operations=["CREATE"],
                            resources=["configmaps"],
                        )
                    ],
                )
            ],
        )
    )
    try:

        def rejected() -> Any:
            try:
                core.create_namespaced_config_map(
                    namespace,
                    client.V1ConfigMap(metadata=client.V1ObjectMeta(generate_name="probe-")),
                )
            except ApiException as exc:
                return exc
            return None

        exc = wait_for("the webhook to be called", rejected, timeout=15)
        assert "failed calling webhook" in exc.body, exc.body
    finally:
        reg.delete_mutating_webhook_configuration(name)


def test_pod_logs_are_served_by_kwok(
    control_plane: LocalCluster, admin: Any, namespace: str
) -> None:
    """kube-apiserver -> "kubelet" (kwok's server, TLS on loopback) -> ClusterLogs file."""
    apps = client.AppsV1Api(admin)
    core = client.CoreV1Api(admin)
    apps.create_namespaced_deployment(namespace, deployment("logs", replicas=1))
    wait_for("1 available replica", lambda: _available(apps, "logs", namespace, 1))
    pod = core.list_namespaced_pod(namespace, label_selector="app=logs").items[0]
    marker = f"hello from {namespace}"
    control_plane.append_pod_log(marker)
    text = core.read_namespaced_pod_log(pod.metadata.name, namespace, container="app")
    assert f"{marker}\n" in text


def test_cli_up_status_down_leaves_no_process(tmp_path: Path) -> None:
    """`localcluster.py up` starts a second, detached cluster; `down` stops every PID."""
    script = Path(__file__).resolve().parents[1] / "controlplane" / "localcluster.py"
    workdir = tmp_path / "cli-cluster"
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(script), *args, "--workdir", str(workdir)],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
            check=False,
        )

    up = run("up")
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.strip() == f"export KUBECONFIG={workdir / 'kubeconfig'}"
        state = json.loads((workdir / "state.json").read_text())
        pids = state["pids"]
        assert set(pids) == {
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
        }
        assert all(_pid_alive(pid) for pid in pids.values())
        status = run("status")
        assert status.returncode == 0, status.stdout + status.stderr
        env_out = run("env")
        assert env_out.stdout.strip() == up.stdout.strip()
        # A second `up` on the same workdir refuses instead of starting twins.
        again = run("up")
        assert again.returncode != 0
        assert "already runs" in again.stderr
        with config.new_client_from_config(config_file=str(workdir / "kubeconfig")) as api:
            assert client.CoreV1Api(api).read_namespace("default").metadata.name == "default"
    finally:
        down = run("down")
    assert down.returncode == 0, down.stderr
    assert not any(_pid_alive(pid) for pid in pids.values()), pids
    assert not (workdir / "state.json").exists()


def _running_pod(api: Any, namespace: str, name: str) -> str:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment(namespace, deployment(name, replicas=1))
    wait_for("1 available replica", lambda: _available(apps, name, namespace, 1))
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"app={name}")
    return str(pods.items[0].metadata.name)


@pytest.fixture(scope="module")
def host_http() -> Iterator[tuple[int, str]]:
    """A tiny HTTP server on 127.0.0.1 answering every GET with a marker text."""
    marker = "hello from the host's loopback"
    with serve_text_on_loopback(marker) as port:
        yield port, marker


def test_exec_and_port_forward_reach_the_host_when_enabled(
    tmp_path: Path, host_http: tuple[int, str]
) -> None:
    """LocalCluster(exec_on_host=True, port_forwards={8080: port}): kwok's ClusterExec
    and ClusterPortForward, through the API server's pods/exec and pods/portforward."""
    port, marker = host_http
    cluster = LocalCluster(
        tmp_path / "exec-cluster", find_bin_dir(), exec_on_host=True, port_forwards={8080: port}
    )
    with cluster, cluster.api_client() as api:
        config_text = cluster.kwok_server_config.read_text()
        assert "ClusterExec" in config_text and "ClusterPortForward" in config_text
        namespace = cluster.create_namespace("exec")
        pod = _running_pod(api, namespace, "exec")
        core = client.CoreV1Api(api)

        result = exec_in_pod(core, namespace, pod, ["sh", "-c", "echo exec-works; pwd"])
        assert result.error is None, result.error
        assert result.stdout.splitlines() == ["exec-works", "/tmp"]  # ran on the host, in /tmp

        assert http_get_through_port_forward(core, namespace, pod, 8080) == marker


def test_exec_and_port_forward_are_unavailable_by_default(
    control_plane: LocalCluster, admin: Any, namespace: str, host_http: tuple[int, str]
) -> None:
    """The session cluster is built without the opt-ins: kwok has no exec and no
    forward for any pod, and says so through the API server."""
    config_text = control_plane.kwok_server_config.read_text()
    assert "ClusterExec" not in config_text and "ClusterPortForward" not in config_text
    pod = _running_pod(admin, namespace, "noexec")
    core = client.CoreV1Api(admin)

    result = exec_in_pod(core, namespace, pod, ["echo", "exec-works"])
    assert result.stdout == ""
    assert result.error is not None
    assert "no exec found for container" in result.error, result.error

    with pytest.raises(OSError):
        http_get_through_port_forward(core, namespace, pod, 8080)
