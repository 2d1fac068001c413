"""The harness's exec-based observation (`cluster.observe`) against a real API server
where exec is refused: the session control plane, whose kwok has no ClusterExec. A
refused exec must be a failure to observe (a note, the field null), never an empty
output directory or an empty output file."""

from __future__ import annotations

import pytest
from controlplane.localcluster import LocalCluster
from k8s_helpers import connection, container_manifest, deployment_manifest, wait_for
from kubernetes import client
from spillover_harness.cluster.observe import exec_sh, look_for_spill, read_output
from spillover_harness.profile import PodSelector
from spillover_operator.client import ExecFailed

pytestmark = pytest.mark.integration

SELECTOR = PodSelector(selector="app=observe", container="mcp-host")


def _running_pod(api: client.ApiClient, namespace: str) -> str:
    dep = deployment_manifest(
        "observe", [container_manifest("mcp-host", "example.invalid/mcp-host:1")]
    )
    client.AppsV1Api(api).create_namespaced_deployment(namespace, dep)
    core = client.CoreV1Api(api)

    def running() -> str | None:
        pods = core.list_namespaced_pod(namespace, label_selector="app=observe").items
        ok = [p for p in pods if p.status and p.status.phase == "Running"]
        return str(ok[0].metadata.name) if ok else None

    return wait_for("the pod to run", running)


def test_a_refused_exec_is_not_an_empty_answer(control_plane: LocalCluster, namespace: str) -> None:
    with control_plane.api_client() as api:
        pod = _running_pod(api, namespace)
        conn = connection(api, namespace)

        with pytest.raises(ExecFailed, match="no exec found for container"):
            exec_sh(conn, namespace, pod, "mcp-host", "echo hello")

        look = look_for_spill(conn, namespace, SELECTOR, "/var/lib/clerum/runs/x", ".spill")
        assert look.entries is None  # not checked, rather than "no spill entry"
        assert look.note is not None
        assert f"disk: exec in pod {pod} failed: ExecFailed" in look.note

        out = read_output(conn, namespace, SELECTOR, "/var/lib/clerum/runs/x", ["a.md"])
        assert out.text is None and not out.checked
        assert out.note is not None and f"exec in pod {pod} failed: ExecFailed" in out.note


def test_a_serving_pod_that_ended_is_replaced_by_the_newest_running_pod(
    control_plane: LocalCluster, namespace: str
) -> None:
    """One mcp-host pod per run: the platform may end the pod that served the run
    between the harness's last look and its exec. The check then runs in the newest
    running pod of the selector and says so, instead of failing on the ended pod."""
    with control_plane.api_client() as api:
        pod = _running_pod(api, namespace)
        conn = connection(api, namespace)
        ended = ("observe-ended-0", "mcp-host")

        look = look_for_spill(conn, namespace, SELECTOR, "/d", ".spill", target=ended)
        assert look.entries is None  # kwok refuses the exec in the newest pod as well
        assert look.note is not None
        assert "the pod that served the run (observe-ended-0) ended before the check" in look.note
        assert f"exec in pod {pod} failed: ExecFailed" in look.note

        out = read_output(conn, namespace, SELECTOR, "/d", ["a.md"], target=ended)
        assert not out.checked and out.note is not None
        assert "(observe-ended-0) ended before the check" in out.note
        assert f"exec in pod {pod} failed" in out.note

        # A target that is still running is not replaced: its own failure is the answer.
        look = look_for_spill(conn, namespace, SELECTOR, "/d", ".spill", target=(pod, "mcp-host"))
        assert look.note is not None and "ended before the check" not in look.note
