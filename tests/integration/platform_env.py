"""The platform the cluster-mode tests drive, on real parts:

- the local control plane (etcd, kube-apiserver, controllers, kwok) started with kwok's
  ClusterExec (exec runs on this host, so the harness's `find`/`cat` see the
  simulator's output directories) and ClusterPortForward (pod port 8080 -> the
  simulator, 8081 -> a simulator with its fault switches on), ClusterLogs fed with the
  simulators' log lines by `LogShipper`;
- the simulator served over HTTP on loopback playing the platform (runs, logs,
  metrics), twice (clean and faulty);
- a real Prometheus scraping both simulators;
- in a fresh namespace: the SpilloverPolicy CRD, a policy `spillover`, and Deployments
  `wrc` (the WRC, Service `wrc` on 8080/8081), `mcp-host`, `coordinator` and
  `spillover-operator` (the latter only for preflight's "operator running" check: the
  real operator runs as a process, `PlatformEnv.operator()`).

`platform_env(tmp, matrix)` starts it all and stops it all, by PID.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane.localcluster import LocalCluster, find_bin_dir, missing_binaries
from k8s_helpers import (
    container_manifest,
    create_object,
    deployment_manifest,
    env_map,
    install_crd,
    policy_manifest,
    read_deployment,
    read_policy,
    wait_for,
)
from kopf_operator import OperatorProcess, running_operator
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kustomize_build import kubectl
from prometheus.server import PrometheusServer, find_prometheus
from spillover_harness.fixtures import build_fixtures, export_fixtures
from spillover_harness.sim.server import SimServer, serve
from spillover_harness.sim.steprun import SimFaults
from spillover_operator.domain.model import PASSTHROUGH_VAR
from wrc_renderer import WrcRendererForTests

SIM_POD_PORT = 8080
FAULTY_POD_PORT = 8081
# The standing mcp-host Deployment's pods: the profile's selector (name=mcp-host) finds
# them; the Deployment selects on the instance label too, so that it never adopts an
# mcp-host pod created per run (recipe_run_bridge.py).
MCP_HOST_LABELS = {"app.kubernetes.io/name": "mcp-host", "app.kubernetes.io/instance": "standing"}
MCP_HOST_SELECTOR = "app.kubernetes.io/name=mcp-host"
MCP_HOST_IMAGE = "example.invalid/mcp-host:1"


def fake_deployment(
    namespace: str,
    name: str,
    labels: dict[str, str],
    container: str,
    env: dict[str, str] | None = None,
    ports: list[int] | None = None,
    image: str | None = None,
) -> dict[str, Any]:
    """A one-replica Deployment of one container, labelled `labels` (kwok runs it)."""
    spec = container_manifest(container, image or f"example.invalid/{name}:1", env or {})
    spec["ports"] = [{"containerPort": p} for p in ports or []]
    return deployment_manifest(
        name, [spec], namespace=namespace, labels=labels, deployment_labels=True
    )


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` merged into a copy of `base`, mappings key by key."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class LogShipper:
    """Plays the container runtime: appends the simulators' log lines (as they are
    written) to what kwok serves as every pod's log."""

    def __init__(self, cluster: LocalCluster, sims: list[SimServer]) -> None:
        self.cluster, self.sims = cluster, sims
        self.offsets: dict[Path, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(0.05):
            self.ship()

    def ship(self) -> None:
        for sim in self.sims:
            for path in sorted((sim.out_dir / "runs").glob("*/logs.jsonl")):
                data = path.read_bytes()
                done = self.offsets.get(path, 0)
                end = data.rfind(b"\n") + 1
                if end > done:
                    self.cluster.append_pod_log(data[done:end].decode("utf-8"))
                    self.offsets[path] = end


def image_digest(image: str) -> str:
    """The imageID a container runtime would report for `image` here: a digest made
    from the image reference (no registry is involved)."""
    repo = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    return f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def report_image_ids_as_kubelet(api: client.ApiClient, namespace: str, selector: str) -> list[str]:
    """Stand-in for the kubelet's image report, which kwok's fake kubelet does not
    make (its pod status has no `imageID`): writes `imageID` = `image_digest(image)`
    into the status of every Running pod matching `selector` that lacks one. Returns
    the imageIDs of those pods' containers, newest pod first."""
    core: Any = client.CoreV1Api(api)
    listing = json.loads(
        core.list_namespaced_pod(namespace, label_selector=selector, _preload_content=False).data
    )
    pods = sorted(listing["items"], key=lambda p: p["metadata"]["creationTimestamp"], reverse=True)
    reported: list[str] = []
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
            continue
        containers = status.get("containerStatuses") or []
        changed = False
        for container in containers:
            if not container.get("imageID"):
                container["imageID"] = image_digest(container["image"])
                changed = True
            reported.append(container["imageID"])
        if changed:
            core.patch_namespaced_pod_status(
                pod["metadata"]["name"],
                namespace,
                {"status": {"containerStatuses": containers}},
                _content_type="application/merge-patch+json",
            )
    return reported


def standing_mcp_host_env(api: client.ApiClient, namespace: str) -> dict[str, str]:
    """Stand-in for the mcp-host process reading its environment: the literal env of
    the newest live pod of the standing mcp-host Deployment (what the simulator runs
    with, through `SimServer.env_source`)."""
    core: Any = client.CoreV1Api(api)
    selector = ",".join(f"{k}={v}" for k, v in MCP_HOST_LABELS.items())
    pods = [
        p
        for p in core.list_namespaced_pod(namespace, label_selector=selector).items
        if p.status and p.status.phase == "Running" and not p.metadata.deletion_timestamp
    ]
    if not pods:
        return {}
    newest = max(pods, key=lambda p: p.metadata.creation_timestamp)
    return {e.name: e.value for e in newest.spec.containers[0].env or [] if e.value is not None}


@dataclass
class PlatformEnv:
    cluster: LocalCluster
    api: client.ApiClient
    namespace: str
    prometheus: PrometheusServer
    sim: SimServer
    faulty: SimServer
    fixtures_dir: Path
    matrix_path: Path
    profile_path: Path  # http mode, the clean simulator
    faulty_profile_path: Path  # http mode, the faulty simulator
    tmp: Path
    renderer: WrcRendererForTests
    scrape_interval_s: float = 0.2

    @property
    def context(self) -> str:
        return str(yaml.safe_load(self.cluster.kubeconfig.read_text())["current-context"])

    def policy(self) -> dict[str, Any]:
        return read_policy(self.api, self.namespace, "spillover")

    def wrc_env(self) -> dict[str, str]:
        env = env_map(read_deployment(self.api, self.namespace, "wrc"))
        return {k: v for k, v in env.items() if isinstance(v, str)}

    def operator(self, name: str) -> AbstractContextManager[OperatorProcess]:
        """The real operator (admin kubeconfig) watching the namespace, for a block."""
        return running_operator(self.cluster.kubeconfig, self.namespace, self.tmp, name=name)

    def profile(self, faulty: bool = False) -> dict[str, Any]:
        """The http-mode profile (as a dict) for the clean or the faulty simulator."""
        sim = self.faulty if faulty else self.sim
        port = FAULTY_POD_PORT if faulty else SIM_POD_PORT
        target = sim.url.removeprefix("http://")
        return {
            "name": f"local-{port}",
            "kube_context": None,
            "namespace": self.namespace,
            "wrc": {"deployment": "wrc", "container": "controller"},
            "policy": "spillover",
            "mcp_host_version": "sha256:local-simulator",
            # Our kubectl runs the port-forward, whatever the machine has on PATH.
            "kubectl": kubectl(),
            "run": {
                "mode": "http",
                "access": "port-forward",
                "service": "wrc",
                "port": port,
                "execute_path": "/runs",
                "body": {
                    "recipe": "{recipe}",
                    "input": "{input}",
                    "run_id": "{run_id}",
                    "seed": "{seed}",
                    "repetition": "{repetition}",
                    "env": "{env}",
                },
                "run_id_path": "$.run_id",
                "poll_path": "/runs/{platform_run_id}",
                "logs_path": "/runs/{platform_run_id}/logs",
                "cancel_path": "/runs/{platform_run_id}/cancel",
                "poll_interval_s": 0.2,
            },
            "pods": {
                "mcp_host": {"selector": MCP_HOST_SELECTOR, "container": "mcp-host"},
                "coordinator": {"selector": "app.kubernetes.io/name=workflow-coordinator"},
                "current_timeout_s": 60,
            },
            "logs": {
                "spill_persisted": "spillover result persisted",
                "spill_read": "spillover read\\b",
                "budget_inline": "spillover budget reached; result kept inline",
            },
            "prometheus": {
                "url": self.prometheus.url,
                "scrape_interval_s": self.scrape_interval_s,
                "selector": f'instance="{target}"',
            },
            # no kube-state-metrics here: restarts from the pods' own status
            "memory": {"restarts_from": "pod-status"},
            "disk": {
                "output_dir_path": "$.outputDir",
                "pod": {"selector": MCP_HOST_SELECTOR, "container": "mcp-host"},
                "poll_interval_s": 0.3,
            },
            "fixtures": {"dir": str(self.fixtures_dir)},
            "operator": {
                "namespace": self.namespace,
                "selector": "app.kubernetes.io/name=spillover-operator",
            },
        }

    def write_profile(self, name: str, profile: Mapping[str, Any]) -> Path:
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(dict(profile), sort_keys=False))
        return path

    def stage_args(self, profile: Path, out: Path, stage: str = "minikube") -> list[str]:
        """`spillover-harness run` arguments for a stage of the env's matrix."""
        return [
            "run", "--stage", stage, "--profile", str(profile), "--kubeconfig",
            str(self.cluster.kubeconfig), "--context", self.context, "--matrix",
            str(self.matrix_path), "--out", str(out), "--no-progress", "--apply-timeout", "90",
        ]  # fmt: skip


def _wrc_service(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "wrc", "namespace": namespace},
        "spec": {
            "selector": {"app": "wrc"},
            "ports": [
                {"name": "sim", "port": SIM_POD_PORT, "targetPort": SIM_POD_PORT},
                {"name": "faulty", "port": FAULTY_POD_PORT, "targetPort": FAULTY_POD_PORT},
            ],
        },
    }


def _wait_pods_running(api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)

    def all_running() -> bool:
        pods = core.list_namespaced_pod(namespace).items
        return len(pods) >= 4 and all(p.status and p.status.phase == "Running" for p in pods)

    wait_for("the platform's pods to run", all_running, retry_on=(ApiException,))


@contextmanager
def platform_env(
    tmp: Path, matrix: Mapping[str, Any], prefix: str, *, scrape_interval_s: float = 0.2
) -> Iterator[PlatformEnv]:
    """Start everything (see the module doc) under `tmp`; stop it all on exit.
    `scrape_interval_s`: Prometheus' (and the profiles'); the bench uses 30 s."""
    missing = missing_binaries(find_bin_dir())
    if missing:
        pytest.fail(f"local control plane not built: {missing}; run `make controlplane`")
    find_prometheus()  # fails naming the binary and `make prometheus`
    holder: dict[str, Any] = {}

    def pod_env(_recipe: str) -> dict[str, str]:
        return standing_mcp_host_env(holder["api"], holder["ns"])

    sim, _ = serve(out_dir=tmp / "sim", pace=0.02, env_source=pod_env)
    faulty, _ = serve(
        out_dir=tmp / "sim-faulty", pace=0.02, faults=SimFaults(True, True), env_source=pod_env
    )
    forwards = {
        SIM_POD_PORT: int(sim.url.rsplit(":", 1)[1]),
        FAULTY_POD_PORT: int(faulty.url.rsplit(":", 1)[1]),
    }
    cluster = LocalCluster(
        tmp / "controlplane", find_bin_dir(), exec_on_host=True, port_forwards=forwards
    )
    prom = PrometheusServer(
        tmp / "prometheus",
        [sim.url.removeprefix("http://"), faulty.url.removeprefix("http://")],
        scrape_interval_s=scrape_interval_s,
        labels={"namespace": "clerum"},
    )
    shipper: LogShipper | None = None
    renderer: WrcRendererForTests | None = None
    try:
        cluster.start()
        prom.start()
        prom.wait_for_targets_up(timeout_s=max(30.0, 3 * scrape_interval_s))
        shipper = LogShipper(cluster, [sim, faulty])
        shipper.thread.start()
        api = cluster.api_client()
        install_crd(api)
        ns = cluster.create_namespace(prefix)
        for doc in (
            fake_deployment(ns, "wrc", {"app": "wrc"}, "controller",
                            {PASSTHROUGH_VAR: "OPENAI_API_KEY"}, [SIM_POD_PORT, FAULTY_POD_PORT]),
            fake_deployment(ns, "mcp-host", MCP_HOST_LABELS, "mcp-host", image=MCP_HOST_IMAGE),
            fake_deployment(ns, "coordinator", {"app.kubernetes.io/name": "workflow-coordinator"},
                            "main"),
            fake_deployment(ns, "spillover-operator",
                            {"app.kubernetes.io/name": "spillover-operator"}, "operator"),
            _wrc_service(ns),
            policy_manifest(
                ns, {"enabled": True, "target": {"deployment": "wrc", "container": "controller"}}
            ),
        ):  # fmt: skip
            create_object(api, doc)
        _wait_pods_running(api, ns)
        holder.update(api=api, ns=ns)
        renderer = WrcRendererForTests(
            api, ns, on_tick=lambda: report_image_ids_as_kubelet(api, ns, MCP_HOST_SELECTOR)
        )
        renderer.__enter__()
        fixtures_dir = tmp / "fixtures"
        export_fixtures(build_fixtures(int(matrix["seed"])), fixtures_dir)
        matrix_path = tmp / "matrix.yaml"
        matrix_path.write_text(yaml.safe_dump(dict(matrix), sort_keys=False))
        env = PlatformEnv(
            cluster=cluster,
            api=api,
            namespace=ns,
            prometheus=prom,
            sim=sim,
            faulty=faulty,
            fixtures_dir=fixtures_dir,
            matrix_path=matrix_path,
            profile_path=tmp / "unused",
            faulty_profile_path=tmp / "unused",
            tmp=tmp,
            renderer=renderer,
            scrape_interval_s=scrape_interval_s,
        )
        env.profile_path = env.write_profile("profile", env.profile())
        env.faulty_profile_path = env.write_profile("profile-faulty", env.profile(faulty=True))
        yield env
        api.close()
    finally:
        if renderer is not None:
            renderer.__exit__()
        if shipper is not None:
            shipper.stop.set()
        prom.stop()
        cluster.stop()
        for server in (sim, faulty):
            server.shutdown()
            server.server_close()
