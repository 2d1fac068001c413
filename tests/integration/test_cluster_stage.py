"""Cluster mode end to end on real parts.

- the local control plane (etcd, kube-apiserver, controllers, kwok) started by this
  module with kwok's ClusterExec (exec runs on this host) and ClusterPortForward
  (pod port 8080 -> the simulator, 8081 -> a simulator with its fault switches on)
  added to kwok's server config, and ClusterLogs fed with the simulators' log lines;
- the real operator (`kopf run`) applying the SpilloverPolicy to a WRC Deployment;
- the simulator served over HTTP on loopback playing the platform (runs, logs, metrics);
- a real Prometheus scraping both simulators.

The harness runs a reduced matrix (3 configurations x 2 inputs x 1 repetition)
through `spillover-harness run --stage minikube`, applying each configuration
through the policy.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
import yaml
from controlplane.localcluster import LocalCluster, find_bin_dir, missing_binaries
from kopf_operator import running_operator
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient as _DynamicClient
from prometheus.server import PrometheusServer, find_prometheus
from spillover_harness.cli import EXIT_CLUSTER, EXIT_OK, EXIT_PREFLIGHT, main
from spillover_harness.cluster.kubeconn import Target
from spillover_harness.cluster.preflight import run_preflight
from spillover_harness.fixtures import build_fixtures, export_fixtures
from spillover_harness.matrix import load_matrix
from spillover_harness.profile import load_profile
from spillover_harness.records import read_records
from spillover_harness.sim.server import SimServer, serve
from spillover_harness.sim.step import SimFaults
from spillover_operator.constants import ENABLED_VAR, PASSTHROUGH_VAR, THRESHOLD_VAR

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "manifests" / "crd" / "spilloverpolicies.yaml"
WAIT = 120.0
T = TypeVar("T")
DynamicClient = cast(Callable[[client.ApiClient], Any], _DynamicClient)

MATRIX = {
    "name": "cluster-e2e",
    "seed": 20261130,
    "configurations": [
        {"name": "off", "env": {ENABLED_VAR: "false"}},
        {"name": "128KiB", "env": {}},
        {"name": "32KiB", "env": {THRESHOLD_VAR: "32768"}},
    ],
    "recipes": [
        {"name": "code-review", "inputs": [{"name": "large", "size_class": "large"}]},
        {"name": "summarize", "inputs": [{"name": "document", "size_class": "medium"}]},
    ],
    "repetitions": {"sim": 1, "minikube": 1, "dev": 1},
    "run_timeout_s": 120,
    "concurrency": 1,
    "acceptance": {"baseline": "off", "token_tolerance": 0.1, "quality_recipes": ["summarize"]},
    "decision": {
        "chain": [
            {"config": "128KiB", "default": "131072"},
            {"config": "32KiB", "default": "32768"},
        ],
        "fallback": "false",
    },
}


def eventually(probe: Callable[[], T | None], what: str, timeout: float = WAIT) -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.2)


class KwokExecCluster(LocalCluster):
    """The local control plane with kwok's ClusterExec and ClusterPortForward added to
    the server config it generates (tests/controlplane/ stays untouched)."""

    def __init__(self, workdir: Path, forwards: dict[int, int]) -> None:
        super().__init__(workdir, find_bin_dir())
        self.forwards = forwards

    def _prepare(self) -> None:
        super()._prepare()
        config = self.workdir / "kwok" / "server.yaml"
        forwards = "".join(
            f"  - ports: [{pod_port}]\n    target: {{port: {host_port}, address: 127.0.0.1}}\n"
            for pod_port, host_port in self.forwards.items()
        )
        config.write_text(
            config.read_text() + "---\napiVersion: kwok.x-k8s.io/v1alpha1\nkind: ClusterExec\n"
            "metadata: {name: exec-on-host}\nspec:\n  execs:\n  - local: {workDir: /tmp}\n"
            "---\napiVersion: kwok.x-k8s.io/v1alpha1\nkind: ClusterPortForward\n"
            "metadata: {name: forward-to-simulators}\nspec:\n  forwards:\n" + forwards
        )


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


@dataclass
class Env:
    cluster: KwokExecCluster
    api: client.ApiClient
    namespace: str
    profile_path: Path
    faulty_profile_path: Path
    matrix_path: Path
    prometheus: PrometheusServer
    tmp: Path

    def policy(self) -> dict[str, Any]:
        obj = client.CustomObjectsApi(self.api).get_namespaced_custom_object(
            "spillover.clerum.io", "v1alpha1", self.namespace, "spilloverpolicies", "spillover"
        )
        return cast(dict[str, Any], obj)

    def wrc_env(self) -> dict[str, str]:
        dep = client.AppsV1Api(self.api).read_namespaced_deployment("wrc", self.namespace)
        return {e.name: e.value for e in dep.spec.template.spec.containers[0].env or []}

    def operator(self, name: str) -> Any:
        return running_operator(self.cluster.kubeconfig, self.namespace, self.tmp / f"{name}.log")

    def run_cli(self, *argv: str) -> int:
        return main(["--no-progress" if a == "@np" else a for a in argv])


def _create(api: client.ApiClient, doc: dict[str, Any]) -> None:
    res = DynamicClient(api).resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    res.create(body=doc, namespace=doc["metadata"].get("namespace"))


def install_crd(api: client.ApiClient) -> None:
    doc = yaml.safe_load(CRD_FILE.read_text())
    crds = DynamicClient(api).resources.get(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
    )
    try:
        crds.create(body=doc)
    except ApiException as exc:
        if exc.status != 409:
            raise

    def served() -> bool:
        try:
            client.CustomObjectsApi(api).list_cluster_custom_object(
                "spillover.clerum.io", "v1alpha1", "spilloverpolicies"
            )
        except ApiException:
            return False
        return True

    eventually(served, "the SpilloverPolicy CRD to be served")


def deployment(
    namespace: str,
    name: str,
    labels: dict[str, str],
    container: str,
    env: dict[str, str] | None = None,
    ports: list[int] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": container,
                            "image": f"example.invalid/{name}:1",
                            "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                            "ports": [{"containerPort": p} for p in ports or []],
                        }
                    ]
                },
            },
        },
    }


def write_profile(path: Path, namespace: str, port: int, prom_url: str, prom_selector: str,
                  fixtures_dir: Path) -> Path:  # fmt: skip
    profile = {
        "name": f"local-{port}",
        "kube_context": None,
        "namespace": namespace,
        "wrc": {"deployment": "wrc", "container": "controller"},
        "policy": "spillover",
        "mcp_host_version": "sha256:local-simulator",
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
            "mcp_host": {"selector": "app.kubernetes.io/name=mcp-host", "container": "mcp-host"},
            "coordinator": {"selector": "app.kubernetes.io/name=workflow-coordinator"},
        },
        "prometheus": {"url": prom_url, "scrape_interval_s": 0.2, "selector": prom_selector},
        "disk": {
            "output_dir_path": "$.outputDir",
            "pod": {"selector": "app.kubernetes.io/name=mcp-host", "container": "mcp-host"},
            "poll_interval_s": 0.3,
        },
        "fixtures": {"dir": str(fixtures_dir)},
        "operator": {
            "namespace": namespace,
            "selector": "app.kubernetes.io/name=spillover-operator",
        },
    }
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    missing = missing_binaries(find_bin_dir())
    if missing:
        pytest.fail(f"local control plane not built: {missing}; run `make controlplane`")
    find_prometheus()  # fails naming the binary and tests/prometheus/install.sh
    tmp = tmp_path_factory.mktemp("cluster-stage")
    sim, _ = serve(out_dir=tmp / "sim", pace=0.02)
    faulty, _ = serve(out_dir=tmp / "sim-faulty", pace=0.02, faults=SimFaults(True, True))
    ports = {8080: int(sim.url.rsplit(":", 1)[1]), 8081: int(faulty.url.rsplit(":", 1)[1])}
    cluster = KwokExecCluster(tmp / "controlplane", ports)
    prom = PrometheusServer(
        tmp / "prometheus",
        [sim.url.removeprefix("http://"), faulty.url.removeprefix("http://")],
        scrape_interval_s=0.2,
        labels={"namespace": "clerum"},
    )
    shipper: LogShipper | None = None
    try:
        cluster.start()
        prom.start()
        prom.wait_for_targets_up()
        shipper = LogShipper(cluster, [sim, faulty])
        shipper.thread.start()
        api = cluster.api_client()
        install_crd(api)
        ns = cluster.create_namespace("cluster-stage")
        mcp = {"app.kubernetes.io/name": "mcp-host"}
        for doc in (
            deployment(ns, "wrc", {"app": "wrc"}, "controller", {PASSTHROUGH_VAR: "OPENAI_API_KEY"},
                       [8080, 8081]),
            deployment(ns, "mcp-host", mcp, "mcp-host"),
            deployment(ns, "coordinator", {"app.kubernetes.io/name": "workflow-coordinator"},
                       "main"),
            deployment(ns, "spillover-operator", {"app.kubernetes.io/name": "spillover-operator"},
                       "operator"),
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "wrc", "namespace": ns},
                "spec": {
                    "selector": {"app": "wrc"},
                    "ports": [
                        {"name": "sim", "port": 8080, "targetPort": 8080},
                        {"name": "faulty", "port": 8081, "targetPort": 8081},
                    ],
                },
            },
            {
                "apiVersion": "spillover.clerum.io/v1alpha1",
                "kind": "SpilloverPolicy",
                "metadata": {"name": "spillover", "namespace": ns},
                "spec": {
                    "enabled": True,
                    "target": {"deployment": "wrc", "container": "controller"},
                },
            },
        ):  # fmt: skip
            _create(api, doc)
        fixtures_dir = tmp / "fixtures"
        export_fixtures(build_fixtures(MATRIX["seed"]), fixtures_dir)  # type: ignore[arg-type]
        matrix_path = tmp / "matrix.yaml"
        matrix_path.write_text(yaml.safe_dump(MATRIX, sort_keys=False))
        sim_target = sim.url.removeprefix("http://")
        faulty_target = faulty.url.removeprefix("http://")
        yield Env(
            cluster=cluster,
            api=api,
            namespace=ns,
            profile_path=write_profile(
                tmp / "profile.yaml", ns, 8080, prom.url, f'instance="{sim_target}"', fixtures_dir
            ),
            faulty_profile_path=write_profile(
                tmp / "profile-faulty.yaml",
                ns,
                8081,
                prom.url,
                f'instance="{faulty_target}"',
                fixtures_dir,
            ),
            matrix_path=matrix_path,
            prometheus=prom,
            tmp=tmp,
        )
        api.close()
    finally:
        if shipper is not None:
            shipper.stop.set()
        prom.stop()
        cluster.stop()
        for server in (sim, faulty):
            server.shutdown()
            server.server_close()


def _ready_for_generation(e: Env) -> bool:
    pol = e.policy()
    status = pol.get("status") or {}
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    return bool(
        status.get("observedGeneration") == pol["metadata"]["generation"]
        and ready
        and ready[0]["status"] == "True"
    )


def _replica_set_envs(e: Env) -> list[dict[str, str]]:
    sets = client.AppsV1Api(e.api).list_namespaced_replica_set(
        e.namespace, label_selector="app=wrc"
    )
    return [
        {v.name: v.value for v in rs.spec.template.spec.containers[0].env or []}
        for rs in sets.items
    ]


def _stage_args(e: Env, profile: Path, out: Path) -> list[str]:
    return [
        "run", "--stage", "minikube", "--profile", str(profile), "--kubeconfig",
        str(e.cluster.kubeconfig), "--context", _context(e), "--matrix", str(e.matrix_path),
        "--out", str(out), "--no-progress", "--apply-timeout", "90",
    ]  # fmt: skip


def _context(e: Env) -> str:
    return str(yaml.safe_load(e.cluster.kubeconfig.read_text())["current-context"])


# ---------------------------------------------------------------------------- tests


def test_preflight_passes_against_the_local_cluster(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    with env.operator("op-preflight"):
        eventually(lambda: _ready_for_generation(env), "the operator to apply the policy")
        code = main([
            "preflight", "--stage", "minikube", "--profile", str(env.profile_path),
            "--kubeconfig", str(env.cluster.kubeconfig), "--context", _context(env),
            "--matrix", str(env.matrix_path),
        ])  # fmt: skip
    out = capsys.readouterr().out
    assert code == EXIT_OK, out
    for name in ("kube context", "SpilloverPolicy CRD", "operator", "policy", "WRC passthrough",
                 "recipes", "Prometheus", "fixtures"):  # fmt: skip
        assert f"✔ {name}:" in out, out
    assert "preflight passed" in out


def test_minikube_stage_end_to_end_through_the_operator(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    before = env.policy()["spec"]
    out_dir = env.tmp / "results-clean"
    with env.operator("op-e2e"):
        code = main(_stage_args(env, env.profile_path, out_dir))
        captured = capsys.readouterr()
        assert code == EXIT_OK, captured.out + captured.err
        eventually(lambda: _ready_for_generation(env), "the restored policy to be applied")
    assert "decision: 131072" in captured.out, captured.out
    assert "mcp-host version: sha256:local-simulator" in captured.out
    # Preflight ran first, then each configuration was applied and verified.
    assert "preflight passed" in captured.err
    for name in ("off", "128KiB", "32KiB"):
        assert f"configuration {name}: applied" in captured.err, captured.err
    # The Deployment's template carried each configuration (one ReplicaSet each).
    envs = _replica_set_envs(env)
    assert any(e.get(ENABLED_VAR) == "false" and THRESHOLD_VAR not in e for e in envs), envs
    assert any(e.get(ENABLED_VAR) == "true" and THRESHOLD_VAR not in e for e in envs), envs
    assert any(e.get(ENABLED_VAR) == "true" and e.get(THRESHOLD_VAR) == "32768" for e in envs), envs
    # Policy restored to what it was before the stage.
    after = env.policy()["spec"]
    assert {k: after.get(k) for k in ("enabled", "thresholdBytes", "budgetBytes")} == {
        k: before.get(k) for k in ("enabled", "thresholdBytes", "budgetBytes")
    }
    assert env.wrc_env()[ENABLED_VAR] == "true" and THRESHOLD_VAR not in env.wrc_env()
    # Records complete: every field measured.
    records = read_records(out_dir / "runs.jsonl")
    assert len(records) == 6
    assert [r.config for r in records] == ["off", "off", "128KiB", "128KiB", "32KiB", "32KiB"]
    for r in records:
        assert r.stage == "minikube"
        assert r.outcome in ("succeeded", "failed"), r.notes
        for name in ("hit_iteration_limit", "iterations", "input_tokens", "output_tokens",
                     "duration_s", "status_report_bytes", "quality_ok", "disk_clean",
                     "logs_clean"):  # fmt: skip
            assert getattr(r, name) is not None, (r.run_id, name, r.notes)
        # A counter with no series at all yet (a fresh mcp-host, spillover off) is "not
        # measured", never 0: null with the collector's note.
        for name, metric in (("spillover_persisted", "persisted"), ("spillover_reads", "reads")):
            if getattr(r, name) is None:
                assert any(metric in n and "not measured" in n for n in r.notes), r.notes
        assert r.disk_clean is True and r.logs_clean is True, r.notes
    by = {(r.config, r.input): r for r in records}
    assert by[("off", "large")].spillover_persisted in (0, None)
    assert (by[("128KiB", "large")].spillover_persisted or 0) > 0  # the config reached the runs
    assert (by[("32KiB", "document")].spillover_persisted or 0) > 0
    assert by[("128KiB", "document")].spillover_persisted in (0, None)
    stage = json.loads((out_dir / "stage.json").read_text())
    assert stage["driver"]["mcp_host_version"] == "sha256:local-simulator"
    assert "sha256:local-simulator" in (out_dir / "report.md").read_text()
    # The harness's own files never carry tool-result content.
    canaries = build_fixtures(MATRIX["seed"]).all_canaries()  # type: ignore[arg-type]
    for path in (out_dir / "runs.jsonl", out_dir / "report.md", out_dir / "verdict.json"):
        text = path.read_text()
        assert not [c for c in canaries if c in text], path
    assert not [c for c in canaries if c in captured.out + captured.err]


def test_faulty_mcp_host_fails_no_leak(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = env.tmp / "results-faulty"
    with env.operator("op-faulty"):
        code = main(_stage_args(env, env.faulty_profile_path, out_dir))
    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.out + captured.err
    assert "decision: false" in captured.out, captured.out
    assert "no_leak" in captured.out
    records = read_records(out_dir / "runs.jsonl")
    enabled = [r for r in records if r.config != "off"]
    assert all(r.logs_clean is False for r in enabled), [r.notes for r in enabled]
    assert any(r.disk_clean is False for r in enabled)
    verdict = json.loads((out_dir / "verdict.json").read_text())
    assert verdict["configs"]["128KiB"]["criteria"]["no_leak"]["status"] == "fail"


def test_a_configuration_not_applied_stops_the_stage_before_any_run(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    """No operator running: the first configuration never becomes Ready; the stage stops
    with exit 5 and a clear message, no record is written, the policy is restored."""
    before = env.policy()["spec"]
    out_dir = env.tmp / "results-mismatch"
    args = _stage_args(env, env.profile_path, out_dir)
    args[args.index("--apply-timeout") + 1] = "3"
    code = main(args)
    captured = capsys.readouterr()
    assert code == EXIT_CLUSTER, captured.out + captured.err
    assert "configuration 'off': not applied" in captured.err
    assert "is the operator running?" in captured.err
    records_file = out_dir / "runs.jsonl"
    assert not records_file.exists() or records_file.read_text().strip() == ""
    after = env.policy()["spec"]
    assert after.get("enabled") == before.get("enabled")
    assert after.get("thresholdBytes") == before.get("thresholdBytes")


def test_ctrl_c_restores_the_policy(env: Env) -> None:
    """SIGINT to the real CLI after the first configuration was applied: exit 130, and
    the policy is back to what it was before the stage (applied by the operator)."""
    before = env.policy()["spec"]
    out_dir = env.tmp / "results-ctrl-c"
    script = Path(sys.executable).parent / "spillover-harness"
    with env.operator("op-ctrl-c"):
        eventually(lambda: _ready_for_generation(env), "the operator to apply the policy")
        proc = subprocess.Popen(
            [str(script), *_stage_args(env, env.profile_path, out_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stderr is not None
            seen: list[str] = []
            for line in proc.stderr:
                seen.append(line)
                if "configuration off: applied" in line:
                    break
            assert any("configuration off: applied" in s for s in seen), "".join(seen)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 130, out + err
        assert "policy restored to" in err, err
        eventually(lambda: _ready_for_generation(env), "the restored policy to be applied")
    after = env.policy()["spec"]
    for key in ("enabled", "thresholdBytes", "budgetBytes"):
        assert after.get(key) == before.get(key), (key, before, after)
    assert env.wrc_env()[ENABLED_VAR] == "true"


def test_preflight_names_each_failure_and_its_fix(env: Env) -> None:
    matrix = load_matrix(env.matrix_path)
    fixtures = build_fixtures(matrix.seed)
    target = Target(str(env.cluster.kubeconfig), _context(env))
    profile = load_profile(env.profile_path)
    apps = client.AppsV1Api(env.api)

    def failed() -> dict[str, str]:
        result = run_preflight(profile, target, "minikube", matrix, fixtures)
        return {c.name: c.detail + " | fix: " + c.fix for c in result.checks if not c.ok}

    # Operator missing (its Deployment gone).
    apps.delete_namespaced_deployment("spillover-operator", env.namespace)
    eventually(lambda: "operator" in failed(), "preflight to notice the operator is gone")
    assert "make deploy" in failed()["operator"]
    op_labels = {"app.kubernetes.io/name": "spillover-operator"}
    _create(env.api, deployment(env.namespace, "spillover-operator", op_labels, "operator"))
    eventually(lambda: "operator" not in failed(), "the operator to be back")

    # Passthrough missing: the WRC container forwards nothing (no operator to fix it).
    dep = apps.read_namespaced_deployment("wrc", env.namespace)
    for var in dep.spec.template.spec.containers[0].env:
        if var.name == PASSTHROUGH_VAR:
            var.value = "OPENAI_API_KEY"
    apps.replace_namespaced_deployment("wrc", env.namespace, dep)
    problems = failed()
    assert "WRC passthrough" in problems
    assert "lacks CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED" in problems["WRC passthrough"]

    # Prometheus missing: nothing listens at the profile's URL.
    bad = profile.model_copy(
        update={"prometheus": profile.prometheus.model_copy(update={"url": "http://127.0.0.1:1"})}
    )
    result = run_preflight(bad, target, "minikube", matrix, fixtures)
    prom = next(c for c in result.checks if c.name == "Prometheus")
    assert not prom.ok and "unreachable" in prom.detail and "port-forward" in prom.fix

    # The CRD missing (last: it deletes every policy). The operator is not running to
    # remove its finalizer from the policy, so drop it, as an admin would.
    custom = client.CustomObjectsApi(env.api)
    group = ("spillover.clerum.io", "v1alpha1", env.namespace, "spilloverpolicies", "spillover")
    custom.patch_namespaced_custom_object(*group, {"metadata": {"finalizers": None}})
    custom.delete_namespaced_custom_object(*group)
    DynamicClient(env.api).resources.get(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
    ).delete(name="spilloverpolicies.spillover.clerum.io")
    eventually(lambda: "SpilloverPolicy CRD" in failed(), "preflight to notice the CRD is gone")
    assert "kubectl apply -k manifests/crd" in failed()["SpilloverPolicy CRD"]
    code = main([
        "preflight", "--stage", "minikube", "--profile", str(env.profile_path),
        "--kubeconfig", str(env.cluster.kubeconfig), "--context", _context(env),
        "--matrix", str(env.matrix_path),
    ])  # fmt: skip
    assert code == EXIT_PREFLIGHT
