"""The real node: `make cluster-up REAL_NODE=1` joins an upstream kubelet on containerd
and runc to the local control plane; its pods are processes that read their own
environment and reach the API server in-cluster; `make cluster-down` leaves the host as
it found it (processes, mounts, cgroups, iptables chains, sysctls, links, paths)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from controlplane import hoststate
from controlplane.realnode import NODE_LABEL, NODE_NAME, missing_host_parts
from kubernetes import client, config
from repo_paths import REPO_ROOT

pytestmark = pytest.mark.integration

IMAGE = os.environ.get("SPILLOVER_OPERATOR_IMAGE", "localhost/spillover-operator:dev")

# Runs in the pod, as the image's own python: the variable from its own process
# environment, and the API server's /version through the in-cluster address.
PROBE = """
import json, os, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
ctx = ssl.create_default_context(cafile=f"{sa}/ca.crt")
req = urllib.request.Request(
    f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}/version",
    headers={"Authorization": "Bearer " + open(f"{sa}/token").read()},
)
version = json.load(urllib.request.urlopen(req, context=ctx, timeout=10))["gitVersion"]
print(json.dumps({"env": os.environ.get("SPILLOVER_PROBE"), "api": version, "uid": os.getuid()}))
"""


def _make(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _require_host() -> None:
    missing = missing_host_parts()
    if missing:
        pytest.fail(
            f"the real node needs Debian packages this host lacks: {', '.join(missing)}; "
            "run `make host-deps` as root",
            pytrace=False,
        )
    if os.geteuid() != 0:
        pytest.fail("the real node needs root (as CI runs): run the tests as root", pytrace=False)
    probe = subprocess.run(["podman", "image", "exists", IMAGE], check=False)
    if probe.returncode != 0:
        pytest.fail(f"image {IMAGE} not built: run `make image`", pytrace=False)


def test_cluster_up_real_node_runs_real_processes_and_cluster_down_leaves_nothing(
    tmp_path: Path,
) -> None:
    _require_host()
    workdir = tmp_path / "cluster"
    env = {**os.environ, "SPILLOVER_CLUSTER_DIR": str(workdir)}
    before = hoststate.snapshot()
    up = _make("cluster-up", "REAL_NODE=1", env=env, timeout=600)
    try:
        assert up.returncode == 0, f"make cluster-up REAL_NODE=1 failed:\n{up.stderr[-3000:]}"
        state = json.loads((workdir / "realnode" / "state.json").read_text())
        assert state["pids"]["kubelet"] and state["pids"]["containerd"]

        load = subprocess.run(
            [
                sys.executable,
                "tests/controlplane/localcluster.py",
                "load-image",
                IMAGE,
                "--workdir",
                str(workdir),
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert load.returncode == 0, load.stderr

        api = config.new_client_from_config(config_file=str(workdir / "kubeconfig"))
        core = client.CoreV1Api(api)
        node = core.read_node(NODE_NAME)
        assert node.metadata.labels[NODE_LABEL] == "true"
        assert [(t.key, t.effect) for t in node.spec.taints or []] == [(NODE_LABEL, "NoSchedule")]

        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe"},
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {NODE_LABEL: "true"},
                "tolerations": [{"key": NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
                "securityContext": {"runAsUser": 10001, "runAsNonRoot": True},
                "containers": [
                    {
                        "name": "probe",
                        "image": IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["python3", "-c", PROBE],
                        "env": [{"name": "SPILLOVER_PROBE", "value": "from-the-pod-spec"}],
                        "securityContext": {
                            "readOnlyRootFilesystem": True,
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }
                ],
            },
        }
        core.create_namespaced_pod("default", pod)
        deadline = time.monotonic() + 120
        phase = None
        while time.monotonic() < deadline:
            phase = core.read_namespaced_pod("probe", "default").status.phase
            if phase in ("Succeeded", "Failed"):
                break
            time.sleep(0.5)
        logs = core.read_namespaced_pod_log("probe", "default")
        assert phase == "Succeeded", f"probe pod {phase}; logs:\n{logs}"
        report = json.loads(logs.strip().splitlines()[-1])
        assert report["env"] == "from-the-pod-spec"
        assert report["api"].startswith("v1.36.")
        assert report["uid"] == 10001
        api.close()
    finally:
        down = _make("cluster-down", env=env, timeout=300)
    assert down.returncode == 0, f"make cluster-down failed:\n{down.stderr[-3000:]}"
    left = hoststate.difference(before, hoststate.snapshot())
    assert left == [], "make cluster-down left this behind:\n" + "\n".join(left)
