"""The spillover variables reach real mcp-host processes, and the kill switch is done only
when those processes say so. On the real node: the operator from the shipped overlay
(`make deploy-local`), the WRC stand-in rendering each recipe's mcp-host Deployment
from its own MCP_HOST_ENV_PASSTHROUGH variables (`make platform-local`), and mcp-host
processes (the simulator) reporting on /spillover what they run with, read through the
API server's pod proxy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controlplane.localcluster import LocalCluster
from k8s_helpers import wait_for
from kubernetes import client
from repo_paths import REPO_ROOT
from spillover_operator.domain.model import ENABLED_VAR

pytestmark = pytest.mark.integration

NS = "clerum"
SELECTOR = "app.kubernetes.io/name=mcp-host"


def _env(cluster: LocalCluster) -> dict[str, str]:
    return {**os.environ, "SPILLOVER_CLUSTER_DIR": str(cluster.workdir),
            "KUBECONFIG": str(cluster.kubeconfig)}  # fmt: skip


def _make(cluster: LocalCluster, *args: str) -> None:
    run = subprocess.run(
        ["make", "--no-print-directory", *args, f"NAMESPACE={NS}", "TIMEOUT=180"],
        cwd=REPO_ROOT, env=_env(cluster), capture_output=True, text=True, timeout=900,
        check=False,
    )  # fmt: skip
    assert run.returncode == 0, f"make {' '.join(args)} failed:\n{run.stderr[-4000:]}"


def _ctl(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "spilloverctl"), "-n", NS, *args],
        env=_env(cluster), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _reports(core: client.CoreV1Api) -> dict[str, dict[str, Any]]:
    """pod name -> what its process reports: GET /spillover straight at the pod's address
    on the real node's bridge (not the API server's proxy the operator uses)."""
    out = {}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for pod in core.list_namespaced_pod(NS, label_selector=SELECTOR).items:
        if pod.metadata.deletion_timestamp is not None or pod.status.phase != "Running":
            continue
        if not pod.status.pod_ip:
            continue
        try:
            with opener.open(f"http://{pod.status.pod_ip}:8080/spillover", timeout=5) as resp:
                out[pod.metadata.name] = json.load(resp)
        except OSError:
            continue  # not serving yet, or gone
    return out


def _enabled_in_effect(report: dict[str, Any]) -> str:
    value = report["runsWith"].get(ENABLED_VAR)
    return "false" if value == "false" else "true"


@pytest.fixture(scope="module")
def platform(real_node_cluster: LocalCluster) -> Iterator[LocalCluster]:
    cluster = real_node_cluster
    with cluster.api_client() as api:
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=NS))
        )
    _make(cluster, "deploy-local")
    _make(cluster, "platform-local", "RECIPES=r1=2")
    with cluster.api_client() as api:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "spillover.clerum.io", "v1alpha1", NS, "spilloverpolicies",
            {"apiVersion": "spillover.clerum.io/v1alpha1", "kind": "SpilloverPolicy",
             "metadata": {"name": "spillover", "namespace": NS},
             "spec": {"enabled": True, "target": {"deployment": "workflow-recipe-controller"},
                      "recipePods": {"selector": {"matchLabels": {
                          "app.kubernetes.io/name": "mcp-host"}}}}},
        )  # fmt: skip
    yield cluster


def test_kill_wait_exits_0_only_once_every_mcp_host_process_reports_spillover_off(
    platform: LocalCluster,
) -> None:
    with platform.api_client() as api:
        core = client.CoreV1Api(api)
        wait_for(
            "two mcp-host processes reporting spillover ON",
            lambda: len(r := _reports(core)) == 2
            and all(_enabled_in_effect(x) == "true" for x in r.values()),
            timeout=180, retry_on=(client.ApiException,),
        )  # fmt: skip
        kill = _ctl(platform, "kill", "--wait", "--timeout", "180", "--reason", "processes")
        # The moment it exits 0, every process says spillover is off.
        reports = _reports(core)
        assert kill.returncode == 0, kill.stdout + kill.stderr
        assert len(reports) == 2, reports
        assert {name: _enabled_in_effect(r) for name, r in reports.items()} == dict.fromkeys(
            reports, "false"
        )
        assert all(r["source"] == "process environment" for r in reports.values())
        status = _ctl(platform, "status")
        assert "its process reports the policy's values" in status.stdout or status.returncode == 0


def test_a_process_that_ignores_its_environment_keeps_kill_wait_from_succeeding(
    platform: LocalCluster,
) -> None:
    """Its pod spec says spillover is off; its process runs (and reports) the default:
    on. kill --wait must not say done."""
    restore = _ctl(platform, "restore", "--wait", "--timeout", "180")
    assert restore.returncode == 0, restore.stdout + restore.stderr
    _make(platform, "platform-local", "RECIPES=r1=2 r2=1:ignore-env")
    with platform.api_client() as api:
        core = client.CoreV1Api(api)
        wait_for(
            "three mcp-host processes, one of them ignoring its environment",
            lambda: len(_reports(core)) == 3,
            timeout=180, retry_on=(client.ApiException,),
        )  # fmt: skip
        kill = _ctl(platform, "kill", "--wait", "--timeout", "60")
        reports = _reports(core)
    assert kill.returncode == 3, kill.stdout + kill.stderr  # timed out: not done
    faulty = [n for n in reports if n.startswith("mcp-host-r2-")]
    assert len(faulty) == 1 and _enabled_in_effect(reports[faulty[0]]) == "true"
    assert faulty[0] in kill.stderr
    assert "its process reports it runs" in kill.stderr
    # The pod spec of that pod says off: only the process's report told the truth.
    with platform.api_client() as api:
        pod = client.CoreV1Api(api).read_namespaced_pod(faulty[0], NS)
        env = {e.name: e.value for e in pod.spec.containers[0].env or []}
    assert env.get(ENABLED_VAR) == "false"
    others = [r for n, r in reports.items() if n not in faulty]
    assert len(others) == 2 and all(_enabled_in_effect(r) == "false" for r in others)


def test_the_operator_pod_read_every_report_with_its_own_rbac(platform: LocalCluster) -> None:
    """The operator (its ServiceAccount, the shipped Roles) reads the reports through the
    pod proxy: its status says what the processes report, and its log has no 403."""
    with platform.api_client() as api:
        core = client.CoreV1Api(api)
        policy = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "spillover.clerum.io", "v1alpha1", NS, "spilloverpolicies", "spillover"
        )
        pods = core.list_namespaced_pod(
            "spillover-system", label_selector="app.kubernetes.io/name=spillover-operator"
        ).items
        # Both replicas' logs: the leader reconciles, the standby waits (and must not
        # have tried either).
        log = "\n".join(
            core.read_namespaced_pod_log(p.metadata.name, "spillover-system") for p in pods
        )
    recipe = policy["status"]["recipePods"]
    assert recipe["matched"] == 3 and recipe["stale"] == 1, recipe
    assert " 403" not in log and "Forbidden" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_recipe_pods_that_keep_old_values_are_refreshed_by_the_operator_pod(
    platform: LocalCluster,
) -> None:
    """A WRC that passes the variables in a ConfigMap its mcp-host pods read at start
    (`RECIPES=r1=2:configmap`): a change never rolls those pods, so they keep running
    the old values. With `refresh: OnKillSwitch` (the local overlay opts in for
    mcp-host-r1 only, as users do), `kill --wait` exits 0 once the operator pod has
    restarted mcp-host-r1 and each new process reports spillover off; no 403."""
    restore = _ctl(platform, "restore", "--wait", "--timeout", "180")
    assert restore.returncode == 0, restore.stdout + restore.stderr
    with platform.api_client() as api:
        apps = client.AppsV1Api(api)
        apps.delete_namespaced_deployment("mcp-host-r2", NS)
    _make(platform, "platform-local", "RECIPES=r1=2:configmap")
    with platform.api_client() as api:
        core = client.CoreV1Api(api)
        apps = client.AppsV1Api(api)

        def r1_from_config_map() -> bool:
            pods = core.list_namespaced_pod(NS, label_selector=SELECTOR).items
            live = [p for p in pods if p.metadata.deletion_timestamp is None]
            reports = _reports(core)
            return (
                len(live) == 2
                and all(p.spec.containers[0].env_from for p in live)
                and len(reports) == 2
                and all(_enabled_in_effect(r) == "true" for r in reports.values())
            )

        wait_for("two r1 processes reading a ConfigMap, spillover ON", r1_from_config_map,
                 timeout=180, retry_on=(client.ApiException,))  # fmt: skip
        before = set(_reports(core))
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            "spillover.clerum.io", "v1alpha1", NS, "spilloverpolicies", "spillover",
            {"spec": {"recipePods": {"refresh": "OnKillSwitch"}}},
        )  # fmt: skip
        kill = _ctl(platform, "kill", "--wait", "--timeout", "180", "--reason", "refresh")
        reports = _reports(core)
        assert kill.returncode == 0, kill.stdout + kill.stderr
        assert len(reports) == 2 and not set(reports) & before, (before, reports)
        assert all(_enabled_in_effect(r) == "false" for r in reports.values()), reports
        template = apps.read_namespaced_deployment("mcp-host-r1", NS).spec.template
        assert "kubectl.kubernetes.io/restartedAt" in (template.metadata.annotations or {})
        policy = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "spillover.clerum.io", "v1alpha1", NS, "spilloverpolicies", "spillover"
        )
        refreshed = (policy["status"].get("recipePods") or {}).get("refreshed") or []
        assert any("mcp-host-r1" in json.dumps(r) for r in refreshed), policy["status"]
        pods = core.list_namespaced_pod(
            "spillover-system", label_selector="app.kubernetes.io/name=spillover-operator"
        ).items
        log = "\n".join(
            core.read_namespaced_pod_log(p.metadata.name, "spillover-system") for p in pods
        )
    assert " 403" not in log and "Forbidden" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
