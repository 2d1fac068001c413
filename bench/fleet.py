"""Benchmark: `spilloverctl kill --wait` on a fleet of three clusters at once, against
the slowest of the three single-cluster `kill --wait` measured side by side in the
same run.

Three local control planes (etcd, kube-apiserver, controller-manager, scheduler, kwok),
each with the CRD, a WRC Deployment (3 replicas), its policy and the real operator
(`kopf run`); one kubeconfig names each by its context. Each round: `kill --wait` on
each cluster alone (`--context X`, restored after), then `kill --wait` with the three
`--context`s, then restore, then three single-context processes at once (what the
clusters cost in parallel on this host without the fleet), then restore. Prints one
`name=value` per line (medians over the rounds); every measured change starts after
`SETTLE_S` of quiet.
`ratio fleet_kill_wait_3` = fleet / slowest single. Asserts nothing.
Needs the control plane binaries: `make controlplane`.

It also charges each single-cluster kill the CPU time its cluster's processes (etcd,
kube-apiserver, the controllers, kwok), its operator and the `spilloverctl` process
used while it ran, read from /proc: `cpu_single_kill_s`, and `cores_busy_single_kill`
(that CPU time over the kill's wall time). From these, modelled rather than measured,
`ratio_floor fleet_kill_wait_3`: the three single kills' CPU time spread perfectly over
the host's cores, against the slowest single kill (the fleet starts one `spilloverctl`
where the singles start three, so it may come a little under). The CPU time is also
split by who used it (`cpu_single_kill_<part>_s`: the control plane, the operator,
`spilloverctl`).

The direct path, side by side in each round: the same change made straight to a twin
of the WRC Deployment that no policy targets. After each single kill and its restore,
this process copies the WRC's container environment as the operator left it onto the
twin (the killed one measured, the restored one after), and watches the twin as
`kubectl rollout status` does until the rollout is complete. Both Deployments move
between the same two templates, so their ReplicaSets are reused alike. It prints that
rollout's wall time (`ratio kill_wait_vs_direct_rollout` = single kill / direct
rollout) and its CPU time split into the control plane's, the operator's (it sees the
twin's events) and this client's. `ratio_floor_rollout_only fleet_kill_wait_3`
(modelled): three such rollouts' control-plane CPU time spread over the host's cores,
against the slowest single kill: the part of the floor that no client can remove.

And measured, each round: the three twins' direct rollouts at once (this process, one
thread each), against the slowest of the round's single direct rollouts:
`ratio direct_rollout_3`. That is what three clusters' bare rollouts cost each other on
this host, with no `spilloverctl` and no policy change: a `kill --wait` that adds no
idle time to its rollout cannot do better than it.

The fleet's goal is against that floor, measured in the same round: `ratio
fleet_vs_direct_3` = the fleet's `kill --wait` on the three clusters against the three
direct rollouts at once (goal <= 1.1; median over the rounds, and its range).
"""

from __future__ import annotations

import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, watch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from controlplane.fleet import merged_kubeconfig  # noqa: E402
from controlplane.localcluster import LocalCluster  # noqa: E402
from controlplane.processes import cpu_seconds  # noqa: E402
from spillover_operator.domain.rollout import rollout_state  # noqa: E402

BIN = Path(sys.executable).parent
ROUNDS = int(os.environ.get("FLEET_ROUNDS", "3"))
NAMESPACE = "bench"
WRC = "workflow-recipe-controller"
TWIN = "wrc-twin"  # the direct path's Deployment: no policy targets it
# Quiet before each measured change (a single kill, the direct path's, the fleet's, the
# three processes'): here a rollout started right after another on the same cluster
# took up to six times as long (1.07-1.12 s against 0.18 s).
SETTLE_S = 2.0
CONTEXTS = ("east", "west", "north")


def _note(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


def _wrc(name: str = WRC) -> dict[str, Any]:
    labels = {"app": name}
    container = {"name": "controller", "image": "example.invalid/wrc:1", "env": []}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def _prepare(api: Any) -> None:
    crd = yaml.safe_load((REPO / "manifests/crd/spilloverpolicies.yaml").read_text())
    client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
    for _ in range(240):  # the default ServiceAccount, then the served CRD
        if client.CoreV1Api(api).list_namespaced_service_account(NAMESPACE).items:
            break
        time.sleep(0.25)
    client.AppsV1Api(api).create_namespaced_deployment(NAMESPACE, _wrc())
    client.AppsV1Api(api).create_namespaced_deployment(NAMESPACE, _wrc(TWIN))
    policy = {
        "apiVersion": "spillover.clerum.io/v1alpha1",
        "kind": "SpilloverPolicy",
        "metadata": {"name": "spillover"},
        "spec": {"enabled": True, "target": {"deployment": WRC}},
    }
    for _ in range(240):
        try:
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                "spillover.clerum.io", "v1alpha1", NAMESPACE, "spilloverpolicies", policy
            )
            return
        except client.ApiException:
            time.sleep(0.25)
    raise SystemExit("bench: the SpilloverPolicy CRD was never served")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _parts_cpu_s(control_plane: list[int], operator: int) -> dict[str, float]:
    """The CPU time used so far by one cluster's control plane, its operator and the
    `spilloverctl` processes that have ended."""
    return {
        "control_plane": sum(cpu_seconds(p) for p in control_plane),
        "operator": cpu_seconds(operator),
        "spilloverctl": _children_cpu_s(),
    }


def _children_cpu_s() -> float:
    """CPU time of this process's children that have ended (each `spilloverctl`)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _self_cpu_s() -> float:
    """CPU time of this process so far (the direct path's client)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def _wrc_env(api: Any) -> list[Any]:
    """The WRC's container environment as the operator left it."""
    apps: Any = client.AppsV1Api(api)
    wrc = apps.read_namespaced_deployment(WRC, NAMESPACE)
    return list(api.sanitize_for_serialization(wrc.spec.template.spec.containers[0].env) or [])


def _roll_twin(api: Any, env: list[Any]) -> float:
    """The direct path: set the twin's container environment to `env` (a JSON patch,
    the one change) and watch the twin until its rollout is complete
    (`rollout_state`, the logic of `kubectl rollout status`). Returns the wall
    seconds."""
    apps: Any = client.AppsV1Api(api)
    start = time.perf_counter()
    patched = apps.patch_namespaced_deployment(
        TWIN, NAMESPACE,
        [{"op": "replace", "path": "/spec/template/spec/containers/0/env", "value": env}],
        _content_type="application/json-patch+json",
    )  # fmt: skip
    stream = watch.Watch().stream(
        apps.list_namespaced_deployment, NAMESPACE,
        field_selector=f"metadata.name={TWIN}",
        resource_version=patched.metadata.resource_version, timeout_seconds=300,
    )  # fmt: skip
    for event in stream:
        if rollout_state(api.sanitize_for_serialization(event["object"])).complete:
            return time.perf_counter() - start
    raise SystemExit("bench: the twin Deployment's rollout did not complete in 300 s")


def _roll_twins_at_once(apis: dict[str, Any], envs: dict[str, list[Any]]) -> float:
    """The direct path on every cluster at once (a thread each); wall seconds until
    the last twin's rollout is complete."""
    start = time.perf_counter()
    with ThreadPoolExecutor(len(envs)) as pool:
        list(pool.map(lambda name: _roll_twin(apis[name], envs[name]), envs))
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
            f"bench: spilloverctl {' '.join(args)} exited {done.returncode}:\n"
            f"{done.stdout}{done.stderr}"
        )
    return time.perf_counter() - start


def _parallel(kubeconfig: Path, *args: str) -> float:
    """`spilloverctl --context X ARGS` for every context, as three processes at once;
    seconds until the last ends."""
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                str(BIN / "spilloverctl"),
                "--kubeconfig",
                str(kubeconfig),
                "-n",
                NAMESPACE,
                "--context",
                name,
                *args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in CONTEXTS
    ]
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(
                f"bench: spilloverctl {' '.join(args)} exited {proc.returncode}:\n{err}"
            )
    return time.perf_counter() - start


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="spillover-bench-fleet-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        clusters: dict[str, LocalCluster] = {}
        apis: dict[str, Any] = {}
        for name in CONTEXTS:
            _note(f"starting control plane {name}")
            cluster = stack.enter_context(LocalCluster(work / name))
            api = stack.enter_context(cluster.api_client())
            _prepare(api)
            clusters[name] = cluster
            apis[name] = api
        log = stack.enter_context((work / "operators.log").open("wb"))
        control_plane: dict[str, list[int]] = {
            n: list(c.pids.values()) for n, c in clusters.items()
        }
        operators: dict[str, int] = {}
        for name, cluster in clusters.items():
            env = {
                **os.environ,
                "KUBECONFIG": str(cluster.kubeconfig),
                # Ports of their own: the three share the host.
                "SPILLOVER_METRICS_PORT": str(_free_port()),
                "SPILLOVER_LIVENESS_PORT": str(_free_port()),
            }
            operator = subprocess.Popen(
                [str(BIN / "kopf"), "run", "--standalone", f"--namespace={NAMESPACE}",
                 "-m", "spillover_operator.main"],
                env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            stack.callback(operator.wait, 30)
            stack.callback(operator.terminate)
            operators[name] = operator.pid
        kubeconfig = merged_kubeconfig(
            work / "kubeconfig", {n: c.kubeconfig for n, c in clusters.items()}
        )
        fleet_args = [arg for name in CONTEXTS for arg in ("--context", name)]
        wait = ("--wait", "--timeout", "300")
        _note("first apply on every cluster")
        _ctl(kubeconfig, *fleet_args, "restore", *wait)
        for name in CONTEXTS:  # the twin starts where the WRC does
            _roll_twin(apis[name], _wrc_env(apis[name]))

        singles: dict[str, list[float]] = {name: [] for name in CONTEXTS}
        slowest: list[float] = []
        fleet: list[float] = []
        processes: list[float] = []
        cpu: list[float] = []  # each single kill's CPU seconds
        cores_busy: list[float] = []
        floors: list[float] = []
        parts: dict[str, list[float]] = {"control_plane": [], "operator": [], "spilloverctl": []}
        kills: list[float] = []  # each single kill's wall seconds, in the order run
        direct: list[float] = []  # each direct rollout's wall seconds, beside it
        direct_cpu: list[float] = []  # its control plane's CPU seconds
        direct_client_cpu: list[float] = []  # this process's, as its client
        direct_operator_cpu: list[float] = []  # what the operator spent watching it
        rollout_floors: list[float] = []
        direct_slowest: list[float] = []  # each round's slowest single direct rollout
        direct_three: list[float] = []  # the three direct rollouts at once
        for round_ in range(ROUNDS):
            _note(f"round {round_ + 1} of {ROUNDS}")
            this_round = []
            round_direct: list[float] = []
            killed_envs: dict[str, list[Any]] = {}
            round_cpu = 0.0
            round_direct_cpu = 0.0
            for name in CONTEXTS:
                time.sleep(SETTLE_S)
                before = _parts_cpu_s(control_plane[name], operators[name])
                seconds = _ctl(kubeconfig, "--context", name, "kill", *wait)
                after = _parts_cpu_s(control_plane[name], operators[name])
                for part in parts:
                    parts[part].append(after[part] - before[part])
                used = sum(after.values()) - sum(before.values())
                singles[name].append(seconds)
                kills.append(seconds)
                this_round.append(seconds)
                cpu.append(used)
                cores_busy.append(used / seconds)
                round_cpu += used
                killed = killed_envs[name] = _wrc_env(apis[name])
                _ctl(kubeconfig, "--context", name, "restore", *wait)
                # The direct path on the same cluster: the same change on the twin.
                time.sleep(SETTLE_S)
                before = _parts_cpu_s(control_plane[name], operators[name])
                self_before = _self_cpu_s()
                direct.append(_roll_twin(apis[name], killed))
                round_direct.append(direct[-1])
                after = _parts_cpu_s(control_plane[name], operators[name])
                spent = after["control_plane"] - before["control_plane"]
                direct_cpu.append(spent)
                direct_client_cpu.append(_self_cpu_s() - self_before)
                direct_operator_cpu.append(after["operator"] - before["operator"])
                round_direct_cpu += spent
                _roll_twin(apis[name], _wrc_env(apis[name]))  # restored, as the WRC
            slowest.append(max(this_round))
            floors.append(round_cpu / (os.cpu_count() or 1) / max(this_round))
            rollout_floors.append(round_direct_cpu / (os.cpu_count() or 1) / max(this_round))
            time.sleep(SETTLE_S)
            fleet.append(_ctl(kubeconfig, *fleet_args, "kill", *wait))
            _ctl(kubeconfig, *fleet_args, "restore", *wait)
            # The same three changes as three spilloverctl processes at once: what the
            # clusters themselves cost in parallel on this host, without the fleet.
            time.sleep(SETTLE_S)
            processes.append(_parallel(kubeconfig, "kill", *wait))
            _ctl(kubeconfig, *fleet_args, "restore", *wait)
            # The direct path on the three clusters at once: the same three changes on
            # the twins, against the slowest single direct rollout of the round.
            time.sleep(SETTLE_S)
            direct_slowest.append(max(round_direct))
            direct_three.append(_roll_twins_at_once(apis, killed_envs))
            for name in CONTEXTS:  # restored, as the WRCs
                _roll_twin(apis[name], _wrc_env(apis[name]))

    ratios = [f / s for f, s in zip(fleet, slowest, strict=True)]
    print(f"rounds={ROUNDS}")
    for name in CONTEXTS:
        print(f"kill_wait_{name}_s={statistics.median(singles[name]):.2f}")
    print(f"kill_wait_slowest_single_s={statistics.median(slowest):.2f}")
    print(f"fleet_kill_wait_3_s={statistics.median(fleet):.2f}")
    print(f"ratio fleet_kill_wait_3={statistics.median(ratios):.2f}")
    print(f"ratio_range fleet_kill_wait_3={min(ratios):.2f}-{max(ratios):.2f}")
    print(f"parallel_processes_kill_wait_3_s={statistics.median(processes):.2f}")
    print(
        "ratio fleet_vs_parallel_processes_3="
        f"{statistics.median([f / p for f, p in zip(fleet, processes, strict=True)]):.2f}"
    )
    print(f"cpu_single_kill_s={statistics.median(cpu):.2f}")
    print(f"cores_busy_single_kill={statistics.median(cores_busy):.2f}")
    print(f"host_cores={os.cpu_count()}")
    print(f"ratio_floor fleet_kill_wait_3={statistics.median(floors):.2f}")
    for part, values in parts.items():
        print(f"cpu_single_kill_{part}_s={statistics.median(values):.2f}")
    print(f"rollout_direct_s={statistics.median(direct):.2f}")
    print(
        "ratio kill_wait_vs_direct_rollout="
        f"{statistics.median([k / d for k, d in zip(kills, direct, strict=True)]):.2f}"
    )
    print(f"cpu_rollout_direct_control_plane_s={statistics.median(direct_cpu):.2f}")
    print(f"cpu_rollout_direct_client_s={statistics.median(direct_client_cpu):.2f}")
    print(f"cpu_rollout_direct_operator_s={statistics.median(direct_operator_cpu):.2f}")
    print(f"ratio_floor_rollout_only fleet_kill_wait_3={statistics.median(rollout_floors):.2f}")
    print(f"rollout_direct_slowest_single_s={statistics.median(direct_slowest):.2f}")
    print(f"rollout_direct_3_at_once_s={statistics.median(direct_three):.2f}")
    direct_ratios = [t / slow for t, slow in zip(direct_three, direct_slowest, strict=True)]
    print(f"ratio direct_rollout_3={statistics.median(direct_ratios):.2f}")
    print(f"ratio_range direct_rollout_3={min(direct_ratios):.2f}-{max(direct_ratios):.2f}")
    against_direct = [f / t for f, t in zip(fleet, direct_three, strict=True)]
    print(f"ratio fleet_vs_direct_3={statistics.median(against_direct):.2f}")
    print(f"ratio_range fleet_vs_direct_3={min(against_direct):.2f}-{max(against_direct):.2f}")
    print(f"load_average_1m={os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
