"""Benchmark: the real node (`make bench-realnode`). Needs root, `make host-deps`.

- `realnode_up_s`: from a running control plane to the real node Ready (containerd,
  the pause image, the kubelet; `make cluster-up REAL_NODE=1` pays it on top of the
  control plane's start).
- `ratio kill_wait_real`: `spilloverctl kill --wait` (then `restore --wait`) through
  the operator pod on real mcp-host processes, against the direct path side by side in
  the same run: `kubectl patch` of the WRC Deployment's env, then `kubectl rollout
  status` of the WRC and of the mcp-host Deployment it re-renders (the operator scaled
  to zero meanwhile, so it does not put the policy back). Median of ROUNDS each way.
- `outage_first_change_s`: after a 75 s API outage, from the API server's return
  (`/readyz` 200) to a policy change seen on the WRC Deployment, the operator pod
  unrestarted (docs/operator.md, "Probes").

One `name=value` per line on stdout; asserts nothing.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kubernetes import client

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from controlplane.localcluster import LocalCluster, kubernetes_module_dir  # noqa: E402
from controlplane.realnode import RealNode  # noqa: E402

BIN = Path(sys.executable).parent
ROUNDS = int(os.environ.get("REALNODE_ROUNDS", "3"))
NS = "clerum"
WRC = "workflow-recipe-controller"
ENABLED = "CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED"
OUTAGE_S = float(os.environ.get("REALNODE_OUTAGE_S", "75"))


def say(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


def run(argv: list[str], env: dict[str, str], timeout: float = 600) -> None:
    proc = subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    if os.geteuid() != 0:
        print("bench-realnode needs root (a real kubelet): run it as root", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-realnode-") as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster")
        cluster.start()
        try:
            node = RealNode(cluster)
            say("starting the real node")
            up = timed(lambda: node.start(kubernetes_module_dir()))
            print(f"realnode_up_s={up:.2f}", flush=True)
            env = {
                **os.environ,
                "SPILLOVER_CLUSTER_DIR": str(cluster.workdir),
                "KUBECONFIG": str(cluster.kubeconfig),
            }
            with cluster.api_client() as api:
                client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
            say("make deploy-local, make platform-local")
            run(["make", "--no-print-directory", "deploy-local", f"NAMESPACE={NS}"], env)
            run(
                [
                    "make",
                    "--no-print-directory",
                    "platform-local",
                    f"NAMESPACE={NS}",
                    "RECIPES=r1=2",
                ],
                env,
            )
            _policy(env)
            ctl = [str(BIN / "spilloverctl"), "-n", NS]
            kubectl = ["kubectl", "-n", NS]
            # Settled before the first round: applied, rolled out, every process current.
            run([*ctl, "restore", "--wait", "--timeout", "300"], env)

            def ours() -> float:
                kill = timed(lambda: run([*ctl, "kill", "--wait", "--timeout", "300"], env))
                run([*ctl, "restore", "--wait", "--timeout", "300"], env)
                return kill

            def direct() -> float:
                def once(value: str) -> None:
                    container = {"name": "wrc", "env": [{"name": ENABLED, "value": value}]}
                    patch = json.dumps(
                        {"spec": {"template": {"spec": {"containers": [container]}}}}
                    )
                    run([*kubectl, "patch", "deployment", WRC, "-p", patch], env)
                    run([*kubectl, "rollout", "status", f"deployment/{WRC}", "--timeout=300s"], env)
                    run(
                        [*kubectl, "rollout", "status", "deployment/mcp-host-r1", "--timeout=300s"],
                        env,
                    )

                kill = timed(lambda: once("false"))
                once("true")
                return kill

            say(f"kill --wait through the operator, {ROUNDS} rounds")
            ours_s = [ours() for _ in range(ROUNDS)]
            run(
                [
                    "kubectl",
                    "-n",
                    "spillover-system",
                    "scale",
                    "deployment/spillover-operator",
                    "--replicas=0",
                ],
                env,
            )
            run(
                [
                    "kubectl",
                    "-n",
                    "spillover-system",
                    "wait",
                    "--for=delete",
                    "pod",
                    "-l",
                    "app.kubernetes.io/name=spillover-operator",
                    "--timeout=120s",
                ],
                env,
            )
            say(f"kubectl patch + rollout status, {ROUNDS} rounds")
            direct_s = [direct() for _ in range(ROUNDS)]
            o, d = statistics.median(ours_s), statistics.median(direct_s)
            print(f"kill_wait_real_s={o:.2f}", flush=True)
            print(f"kill_wait_real_direct_s={d:.2f}", flush=True)
            print(f"ratio kill_wait_real={o / d:.2f}", flush=True)
            run(
                [
                    "kubectl",
                    "-n",
                    "spillover-system",
                    "scale",
                    "deployment/spillover-operator",
                    "--replicas=1",
                ],
                env,
            )
            run(
                [
                    "kubectl",
                    "-n",
                    "spillover-system",
                    "rollout",
                    "status",
                    "deployment/spillover-operator",
                    "--timeout=300s",
                ],
                env,
            )
            say(f"API outage of {OUTAGE_S:g} s")
            print(f"outage_first_change_s={_outage(cluster, env):.2f}", flush=True)
        finally:
            cluster.stop()
    return 0


def _outage(cluster: LocalCluster, env: dict[str, str]) -> float:
    """Seconds from the API server's return to a policy change seen on the WRC."""
    cluster.stop_apiserver()
    try:
        time.sleep(OUTAGE_S)
    finally:
        cluster.start_apiserver()  # returns once /readyz answers 200
    back = time.perf_counter()
    with cluster.api_client() as api:
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            "spillover.clerum.io",
            "v1alpha1",
            NS,
            "spilloverpolicies",
            "spillover",
            {"spec": {"thresholdBytes": 65536}},
        )
        apps = client.AppsV1Api(api)
        while time.perf_counter() - back < 120:
            dep = apps.read_namespaced_deployment(WRC, NS)
            env_vars = {e.name: e.value for e in dep.spec.template.spec.containers[0].env or []}
            if env_vars.get("CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD") == "65536":
                return time.perf_counter() - back
            time.sleep(0.05)
    raise SystemExit("the change after the outage did not apply within 120 s")


def _policy(env: dict[str, str]) -> None:
    doc = (
        "apiVersion: spillover.clerum.io/v1alpha1\nkind: SpilloverPolicy\n"
        f"metadata: {{name: spillover, namespace: {NS}}}\n"
        "spec:\n  enabled: true\n  target: {deployment: workflow-recipe-controller}\n"
        "  recipePods: {selector: {matchLabels: {app.kubernetes.io/name: mcp-host}}}\n"
    )
    proc = subprocess.run(
        ["kubectl", "apply", "-f", "-"],
        input=doc,
        env=env,
        text=True,
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"applying the policy failed: {proc.stderr}")


if __name__ == "__main__":
    sys.exit(main())
