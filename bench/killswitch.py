"""Benchmark: how fast the kill switch takes effect, on the local control plane.

Measures, over several engage/release rounds on a real API server with the real
operator (`kopf run`) and kwok's fake kubelet:

- operator path: `spilloverctl kill` until the Deployment env says false
  (the operator's reaction time), and `spilloverctl kill --wait` end to end
  (policy Ready for its generation and the rollout complete);
- direct path (operator stopped): `spilloverctl kill --direct --wait`.

Prints figures; asserts nothing (speed is measured here, never in a test).
Needs the control plane binaries: `make controlplane`.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from controlplane.localcluster import LocalCluster  # noqa: E402
from spillover_operator.client import Connection, find_deployment  # noqa: E402
from spillover_operator.domain.envplan import effective_env  # noqa: E402
from spillover_operator.domain.model import ENABLED_VAR  # noqa: E402

BIN = Path(sys.executable).parent
ROUNDS = int(os.environ.get("KILLSWITCH_ROUNDS", "5"))
NAMESPACE = "bench"
WRC = "workflow-recipe-controller"


def _wrc() -> dict[str, Any]:
    labels = {"app": "wrc"}
    container = {"name": "controller", "image": "example.invalid/wrc:1", "env": []}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": WRC, "namespace": NAMESPACE},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def _until(what: str, check: Callable[[], bool], timeout: float = 120.0) -> float:
    start = time.perf_counter()
    while not check():
        if time.perf_counter() - start > timeout:
            raise SystemExit(f"bench: timed out waiting for {what}")
        time.sleep(0.01)
    return time.perf_counter() - start


def _ctl(kubeconfig: Path, *args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [str(BIN / "spilloverctl"), "--kubeconfig", str(kubeconfig), "-n", NAMESPACE, *args],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(
            f"bench: spilloverctl {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
        )
    return time.perf_counter() - start


def _fmt(values: list[float]) -> str:
    return (
        f"median {statistics.median(values) * 1000:7.0f} ms  "
        f"min {min(values) * 1000:7.0f} ms  max {max(values) * 1000:7.0f} ms  (n={len(values)})"
    )


def main() -> int:
    with (
        tempfile.TemporaryDirectory(prefix="spillover-bench-ks-") as tmp,
        LocalCluster(Path(tmp) / "cluster") as cluster,
        cluster.api_client() as api,
    ):
        crd = yaml.safe_load((REPO / "manifests/crd/spilloverpolicies.yaml").read_text())
        client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        client.AppsV1Api(api).create_namespaced_deployment(NAMESPACE, _wrc())
        conn = Connection.from_api_client(api, NAMESPACE, field_manager="bench")

        def enabled_on_deployment() -> str | None:
            dep = find_deployment(conn, WRC)
            return None if dep is None else effective_env(dep, None).get(ENABLED_VAR)

        log = (Path(tmp) / "operator.log").open("wb")
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}

        def start_operator() -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                [
                    str(BIN / "kopf"),
                    "run",
                    "--standalone",
                    f"--namespace={NAMESPACE}",
                    "-m",
                    "spillover_operator.main",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        for _ in range(120):  # the CRD is served a moment after it is created
            try:
                client.CustomObjectsApi(api).create_namespaced_custom_object(
                    "spillover.clerum.io",
                    "v1alpha1",
                    NAMESPACE,
                    "spilloverpolicies",
                    {
                        "apiVersion": "spillover.clerum.io/v1alpha1",
                        "kind": "SpilloverPolicy",
                        "metadata": {"name": "spillover"},
                        "spec": {"enabled": True, "target": {"deployment": WRC}},
                    },
                )
                break
            except client.ApiException:
                time.sleep(0.25)
        operator = start_operator()
        try:
            _until("the first apply", lambda: enabled_on_deployment() == "true")
            _ctl(cluster.kubeconfig, "restore", "--wait", "--timeout", "120")

            react: list[float] = []
            end_to_end: list[float] = []
            for _ in range(ROUNDS):
                start = time.perf_counter()
                _ctl(cluster.kubeconfig, "kill")
                _until("the operator to apply the kill", lambda: enabled_on_deployment() == "false")
                react.append(time.perf_counter() - start)
                _ctl(cluster.kubeconfig, "restore", "--wait", "--timeout", "120")
                end_to_end.append(_ctl(cluster.kubeconfig, "kill", "--wait", "--timeout", "120"))
                _ctl(cluster.kubeconfig, "restore", "--wait", "--timeout", "120")
        finally:
            operator.terminate()
            operator.wait(timeout=30)

        direct: list[float] = []
        for _ in range(ROUNDS):
            direct.append(
                _ctl(cluster.kubeconfig, "kill", "--direct", "--wait", "--timeout", "120")
            )
            _ctl(cluster.kubeconfig, "restore", "--direct", "--wait", "--timeout", "120")
        log.close()

    print("kill switch on the local control plane (3 replicas, kwok fake kubelet):")
    print(f"  kill -> Deployment env false (operator)  {_fmt(react)}")
    print(f"  kill --wait (operator, rollout complete) {_fmt(end_to_end)}")
    print(f"  kill --direct --wait (operator down)     {_fmt(direct)}")
    print("  (includes spilloverctl's own start-up, about a Python interpreter's worth)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
