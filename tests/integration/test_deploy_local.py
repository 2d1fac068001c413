"""The operator as users run it: `make deploy-local` builds nothing it need not, loads the
image into the real node and applies manifests/overlays/local, so the operator runs as a
pod with exactly the base's args, probes, securityContext and RBAC (in-cluster config,
its ServiceAccount's token, the Roles as its only permissions).

One scenario on it: the sample policy, kill, restore, drift corrected, with not one 403
or traceback in the pod's log. Then the probes: through an API outage longer than the
liveness budget the pod goes NotReady but is not restarted, and applies the next change
once the API is back (how soon: `make bench-realnode`); an operator whose loop is
wedged (stopped by a signal, API reachable) is restarted by the kubelet."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane.localcluster import LocalCluster
from controlplane.realnode import RealNode
from k8s_helpers import deployment_manifest, env_map, read_deployment, read_policy, wait_for
from kubernetes import client
from kustomize_build import OVERLAYS, build
from repo_paths import REPO_ROOT
from spillover_operator.domain.model import PASSTHROUGH_VAR, REASON_APPLIED, REASON_DRIFT_CORRECTED

pytestmark = pytest.mark.integration

NS = "clerum"
OPERATOR_NS = "spillover-system"
OPERATOR_SELECTOR = "app.kubernetes.io/name=spillover-operator"
WRC = "workflow-recipe-controller"
ENABLED = "CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED"
THRESHOLD = "CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD"
# Longer than the liveness budget the base shipped before (3 failures x 20 s).
OUTAGE_S = 75.0


def _env(cluster: LocalCluster) -> dict[str, str]:
    return {
        **os.environ,
        "SPILLOVER_CLUSTER_DIR": str(cluster.workdir),
        "KUBECONFIG": str(cluster.kubeconfig),
    }


def _ctl(
    cluster: LocalCluster, *args: str, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "spilloverctl"), "-n", NS, *args],
        env=_env(cluster),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _operator_pod(core: client.CoreV1Api, name: str | None = None) -> Any:
    """The operator pod `name`, else the one leading (two replicas run: the holder of the
    Lease spillover-operator-leader in the watched namespace acts, the other waits)."""
    pods = core.list_namespaced_pod(OPERATOR_NS, label_selector=OPERATOR_SELECTOR).items
    live = {p.metadata.name: p for p in pods if p.metadata.deletion_timestamp is None}
    if name is None:
        lease = client.CoordinationV1Api(core.api_client).read_namespaced_lease(
            "spillover-operator-leader", NS
        )
        name = lease.spec.holder_identity
    assert name in live, f"operator pod {name!r} not among {sorted(live)}"
    return live[name]


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _restarts(pod: Any) -> int:
    return sum(s.restart_count for s in pod.status.container_statuses or [])


def _log(core: client.CoreV1Api, pod: Any, *, previous: bool = False) -> str:
    return str(core.read_namespaced_pod_log(pod.metadata.name, OPERATOR_NS, previous=previous))


def _subset_problems(want: Any, have: Any, path: str = "") -> list[str]:
    """Where `have` (the live object, with the API's defaults) lacks what `want` (the
    rendered manifest) says."""
    if isinstance(want, Mapping):
        if not isinstance(have, Mapping):
            return [f"{path}: {have!r} is not a mapping"]
        out = []
        for key, value in want.items():
            if key == "value" and value == "" and have.get(key) is None:
                continue  # an env var set to "": the API server stores it without `value`
            out += _subset_problems(value, have.get(key), f"{path}.{key}")
        return out
    if isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            return [f"{path}: {have!r} != {want!r}"]
        return [p for w, h in zip(want, have, strict=True) for p in _subset_problems(w, h, path)]
    return [] if str(want) == str(have) else [f"{path}: {have!r} != {want!r}"]


@pytest.fixture(scope="module")
def deployed(real_node_cluster: LocalCluster) -> Iterator[LocalCluster]:
    cluster = real_node_cluster
    with cluster.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
        # The WRC stand-in (on a kwok node: the operator only patches its Deployment).
        wrc = deployment_manifest(
            WRC,
            [
                {
                    "name": "wrc",
                    "image": "wrc:test",
                    "env": [{"name": PASSTHROUGH_VAR, "value": "OTHER_VAR"}],
                }
            ],
            namespace=NS,
        )
        client.AppsV1Api(api).create_namespaced_deployment(NS, wrc)
    deploy = subprocess.run(
        ["make", "--no-print-directory", "deploy-local", f"NAMESPACE={NS}", "TIMEOUT=180"],
        cwd=REPO_ROOT,
        env=_env(cluster),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert deploy.returncode == 0, f"make deploy-local failed:\n{deploy.stderr[-4000:]}"
    yield cluster


def test_the_operator_pod_runs_exactly_the_shipped_manifests(deployed: LocalCluster) -> None:
    rendered = next(
        d
        for d in build(OVERLAYS / "local")
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "spillover-operator"
    )
    want = rendered["spec"]["template"]["spec"]
    with deployed.api_client() as api:
        core = client.CoreV1Api(api)
        pod = wait_for(
            "the operator pod Ready",
            lambda: (p := _operator_pod(core)) and _ready(p) and p,
            retry_on=(client.ApiException, AssertionError),
        )
        live = api.sanitize_for_serialization(pod.spec)
        assert pod.spec.node_name == "real-node-0"
        problems = _subset_problems(
            {
                "serviceAccountName": want["serviceAccountName"],
                "securityContext": want["securityContext"],
                "containers": [
                    {
                        k: c[k]
                        for k in (
                            "image",
                            "args",
                            "env",
                            "ports",
                            "livenessProbe",
                            "readinessProbe",
                            "securityContext",
                            "resources",
                        )
                    }
                    for c in want["containers"]
                ],
            },
            live,
        )
        assert problems == [], "the pod differs from manifests/overlays/local:\n" + "\n".join(
            problems
        )
        # The manifests' Roles are its only permissions: it runs as its ServiceAccount.
        assert pod.spec.service_account_name == "spillover-operator"
        assert pod.spec.automount_service_account_token is not False


def test_kill_restore_and_drift_through_the_operator_pod_with_no_403_or_traceback(
    deployed: LocalCluster,
) -> None:
    sample = yaml.safe_load((REPO_ROOT / "manifests/samples/default.yaml").read_text())
    with deployed.api_client() as api:
        core = client.CoreV1Api(api)
        apps = client.AppsV1Api(api)
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "spillover.clerum.io", "v1alpha1", NS, "spilloverpolicies", sample
        )

        def wrc_env() -> dict[str, Any]:
            return env_map(read_deployment(api, NS, WRC))

        wait_for("the sample policy applied", lambda: wrc_env().get(ENABLED) == "true")
        passthrough = str(wrc_env()[PASSTHROUGH_VAR])
        assert ENABLED in passthrough and "OTHER_VAR" in passthrough

        kill = _ctl(deployed, "kill", "--wait", "--timeout", "120", "--reason", "scenario")
        assert kill.returncode == 0, kill.stdout + kill.stderr
        assert wrc_env()[ENABLED] == "false"

        restore = _ctl(deployed, "restore", "--wait", "--timeout", "120")
        assert restore.returncode == 0, restore.stdout + restore.stderr
        assert wrc_env()[ENABLED] == "true"

        # Drift: someone edits the WRC's env by hand; the operator puts it back.
        dep = read_deployment(api, NS, WRC)
        env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
        for entry in env:
            if entry["name"] == ENABLED:
                entry["value"] = "false"
        apps.patch_namespaced_deployment(
            WRC, NS, {"spec": {"template": {"spec": {"containers": [{"name": "wrc", "env": env}]}}}}
        )
        wait_for("the drift corrected", lambda: wrc_env().get(ENABLED) == "true")

        def operator_event_reasons() -> set[str]:
            events = core.list_namespaced_event(NS).items
            reasons = {
                e.reason for e in events if e.source and "spillover" in str(e.source.component)
            }
            return reasons | {
                e.reason for e in events if e.reporting_component == "spillover-operator"
            }

        # The Event follows the patch that corrected the env: wait for it, do not race it.
        wanted = {REASON_APPLIED, REASON_DRIFT_CORRECTED}
        wait_for(
            f"the operator's Events {sorted(wanted)}",
            lambda: wanted <= operator_event_reasons(),
            timeout=30,
        )
        policy = read_policy(api, NS)
        assert policy["status"]["observedGeneration"] == policy["metadata"]["generation"]

        # Both replicas: the leader acted, the standby waited; neither may have been refused.
        pods = core.list_namespaced_pod(OPERATOR_NS, label_selector=OPERATOR_SELECTOR).items
        log = "\n".join(_log(core, p) for p in pods)
        assert " 403" not in log and "Forbidden" not in log, log[-4000:]
        assert "Traceback" not in log, log[-4000:]


def test_an_api_outage_makes_the_pod_not_ready_but_never_restarts_it(
    deployed: LocalCluster,
) -> None:
    with deployed.api_client() as api:
        core = client.CoreV1Api(api)
        pod = wait_for(
            "the operator pod Ready",
            lambda: (p := _operator_pod(core)) and _ready(p) and p,
            retry_on=(client.ApiException, AssertionError),
        )
        restarts = _restarts(pod)
        started = pod.status.container_statuses[0].state.running.started_at
        leader = pod.metadata.name
    node = RealNode.from_state(deployed)
    assert node is not None
    deployed.stop_apiserver()
    not_ready_seen = False
    try:
        deadline = time.monotonic() + OUTAGE_S
        while time.monotonic() < deadline:
            # The kubelet's own view (the API is down): its probes' results in its log.
            log = node.log_file("kubelet").read_text(errors="replace").splitlines()
            not_ready_seen = not_ready_seen or any(
                '"Probe failed"' in line
                and 'probeType="Readiness"' in line
                and "spillover-operator" in line
                for line in log
            )
            time.sleep(5)
    finally:
        deployed.start_apiserver()
    # The next change applies once the API is back, by the same pod (how soon is measured
    # by `make bench-realnode`: outage_first_change_s).
    with deployed.api_client() as api:
        core = client.CoreV1Api(api)
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            "spillover.clerum.io",
            "v1alpha1",
            NS,
            "spilloverpolicies",
            "spillover",
            {"spec": {"thresholdBytes": 65536}},
        )
        wait_for(
            "the change after the outage applied",
            lambda: env_map(read_deployment(api, NS, WRC)).get(THRESHOLD) == "65536",
            timeout=30,
        )
        pod = _operator_pod(core, leader)
        assert _restarts(pod) == restarts, "the kubelet restarted the operator during an API outage"
        assert pod.status.container_statuses[0].state.running.started_at == started
    assert not_ready_seen, "the kubelet never saw the operator NotReady during the outage"


def test_a_wedged_operator_is_restarted_by_the_kubelet(deployed: LocalCluster) -> None:
    node = RealNode.from_state(deployed)
    assert node is not None
    with deployed.api_client() as api:
        core = client.CoreV1Api(api)
        pod = wait_for(
            "the operator pod Ready",
            lambda: (p := _operator_pod(core)) and _ready(p) and p,
            retry_on=(client.ApiException, AssertionError),
        )
        restarts = _restarts(pod)
        wedged = pod.metadata.name
        cid = pod.status.container_statuses[0].container_id.split("://", 1)[1]
        pid = node.task_pid(cid)
        # Wedged: the process stops making progress while the API answers.
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(
                "the kubelet to restart the wedged operator",
                lambda: _restarts(_operator_pod(core, wedged)) > restarts,
                timeout=150,
            )
        finally:
            # If it was not killed, let it go on (and the next run of this test start clean).
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        wait_for(
            "the restarted operator Ready", lambda: _ready(_operator_pod(core, wedged)), timeout=120
        )
