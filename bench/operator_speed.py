"""Benchmark: the operator against the direct path, side by side, on the local control plane.

One run, one API server (kube-apiserver + etcd + kwok's fake kubelet), the real operator
(`kopf run`). Every ratio is operator path / direct path, measured alternately in the
same run:

- `reaction_p95_1`, `reaction_p95_200`: from sending a policy PATCH to a Deployment watch
  seeing the new env on the target Deployment, p95, with 1 then 200 policies (and 200
  Deployments) in the namespace; direct: from sending the same env change as a
  Deployment PATCH (to a Deployment no policy targets) to the watch seeing it.
- `kill_command`: the whole `spilloverctl kill` process vs `kubectl patch` of the same
  policy field (median).
- `kill_wait`: `spilloverctl kill --wait` vs `kubectl patch` of the Deployment env +
  `kubectl rollout status` (median; same replicas).
- `ready_200_s`: 199 more Deployments + policies created (200 in all): seconds until
  every policy is Ready for its generation (its change rolled out); `ready_200`: that
  against the control plane doing the same work without the operator (199 other
  Deployments created, then the same env patched onto each, all rolled out).
- `lists_on_restart_200`, `writes_on_restart_200`: the operator restarted with 200
  policies: LIST requests for SpilloverPolicies and Deployments, and writes (POST, PUT,
  PATCH, DELETE) of SpilloverPolicies and Deployments, counted by the API server
  (`apiserver_request_total`) until the operator has been quiet for a while, plus the
  Events the operator posted (reportingComponent spillover-operator; the control
  plane's own are shown beside).
- `recovery_after_outage_s`: the kube-apiserver stopped for `OPERATOR_BENCH_OUTAGE_S`
  seconds (default 75), started again: seconds from its /readyz answering until a
  policy change sent then is on the Deployment.

When `kubectl` is not on PATH the direct path is the same request sent with the
Python client (the output names which). Prints `name=value` lines; asserts nothing.
Needs the control plane binaries: `make controlplane`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from controlplane.localcluster import LocalCluster  # noqa: E402
from spillover_operator.domain.model import ENABLED_VAR  # noqa: E402
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION  # noqa: E402

BIN = Path(sys.executable).parent
NAMESPACE = "bench"
WRC = "workflow-recipe-controller"
DIRECT = "wrc-direct"
POLICY = "spillover"
MANY = 200
REACTION_ROUNDS = int(os.environ.get("OPERATOR_BENCH_REACTION_ROUNDS", "40"))
COMMAND_ROUNDS = int(os.environ.get("OPERATOR_BENCH_COMMAND_ROUNDS", "7"))
OUTAGE_S = float(os.environ.get("OPERATOR_BENCH_OUTAGE_S", "75"))
READY_TIMEOUT_S = float(os.environ.get("OPERATOR_BENCH_READY_TIMEOUT_S", "300"))
QUIET_S = 5.0  # the operator counts as done restarting after this long without requests
KUBECTL = shutil.which("kubectl")
OPERATOR = "spillover-operator"  # the Events' reportingComponent


def log(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


def _deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    container = {"name": "controller", "image": "example.invalid/wrc:1", "env": []}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def _policy(name: str, target: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SpilloverPolicy",
        "metadata": {"name": name},
        "spec": {"enabled": True, "target": {"deployment": target}},
    }


def _env_value(deployment: dict[str, Any]) -> str | None:
    for container in deployment["spec"]["template"]["spec"]["containers"]:
        if container["name"] == "controller":
            for var in container.get("env") or []:
                if var.get("name") == ENABLED_VAR:
                    return str(var.get("value"))
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


class DeploymentWatch:
    """A raw watch on the namespace's Deployments (JSON lines, no model decoding): the
    moment each Deployment was last seen with each value of the enabled variable."""

    def __init__(self, api: client.ApiClient) -> None:
        self.apps = client.AppsV1Api(api)
        self.seen: dict[tuple[str, str | None], float] = {}
        self.cond = threading.Condition()
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped:
            try:
                listing: Any = self.apps.list_namespaced_deployment(
                    NAMESPACE, _preload_content=False
                )
                body = json.loads(listing.data)
                for item in body["items"]:
                    self._note(item)
                resp: Any = self.apps.list_namespaced_deployment(
                    NAMESPACE,
                    watch=True,
                    resource_version=body["metadata"]["resourceVersion"],
                    timeout_seconds=600,
                    _preload_content=False,
                )
                buf = b""
                for chunk in resp.stream(65536):
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        event = json.loads(line)
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            self._note(event["object"])
            except Exception:
                time.sleep(0.05)

    def _note(self, deployment: dict[str, Any]) -> None:
        now = time.perf_counter()
        key = (deployment["metadata"]["name"], _env_value(deployment))
        with self.cond:
            self.seen.setdefault(key, now)
            self.cond.notify_all()

    def forget(self, name: str) -> None:
        with self.cond:
            for key in [k for k in self.seen if k[0] == name]:
                del self.seen[key]

    def wait(self, name: str, value: str, timeout: float = 60.0) -> float:
        deadline = time.perf_counter() + timeout
        with self.cond:
            while (name, value) not in self.seen:
                left = deadline - time.perf_counter()
                if left <= 0:
                    raise SystemExit(f"bench: Deployment {name} never showed {ENABLED_VAR}={value}")
                self.cond.wait(left)
            return self.seen[(name, value)]


class Bench:
    def __init__(self, cluster: LocalCluster, api: client.ApiClient, tmp: Path) -> None:
        self.cluster = cluster
        self.api = api
        self.tmp = tmp
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.operator: subprocess.Popen[bytes] | None = None
        self.operator_runs = 0
        self.health_port = 0
        self.allowed = ",".join([WRC, *(f"wrc-{i:03d}" for i in range(1, MANY))])
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")},
            "KUBECONFIG": str(cluster.kubeconfig),
        }

    # ---- the operator ------------------------------------------------------------

    def start_operator(self) -> None:
        self.operator_runs += 1
        self.health_port = _free_port()
        env = {
            **self.env,
            "SPILLOVER_ALLOWED_TARGETS": self.allowed,
            "SPILLOVER_METRICS_PORT": str(_free_port()),
            "SPILLOVER_LIVENESS_PORT": str(_free_port()),
        }
        logfile = (self.tmp / f"operator-{self.operator_runs}.log").open("wb")
        self.operator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kopf",
                "run",
                "--standalone",
                f"--namespace={NAMESPACE}",
                f"--liveness=http://127.0.0.1:{self.health_port}/healthz",
                "-m",
                "spillover_operator.main",
            ],
            env=env,
            stdout=logfile,
            stderr=subprocess.STDOUT,
        )
        until("the operator's /healthz", self.healthy, 60)

    def healthy(self) -> bool:
        assert self.operator is not None
        if self.operator.poll() is not None:
            raise SystemExit(f"bench: the operator exited; see {self.tmp}/operator-*.log")
        try:
            url = f"http://127.0.0.1:{self.health_port}/healthz"
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def stop_operator(self) -> None:
        if self.operator is not None and self.operator.poll() is None:
            self.operator.terminate()
            self.operator.wait(timeout=60)
        self.operator = None

    # ---- objects -----------------------------------------------------------------

    def patch_policy(self, name: str, enabled: bool) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NAMESPACE,
            PLURAL,
            name,
            {"spec": {"enabled": enabled}},
            _preload_content=False,
        )

    def patch_direct(self, value: str) -> None:
        self.apps.patch_namespaced_deployment(
            DIRECT, NAMESPACE, _env_patch(value), _preload_content=False
        )

    def policies(self) -> list[dict[str, Any]]:
        raw: Any = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, _preload_content=False
        )
        return list(json.loads(raw.data)["items"])

    def all_ready(self, count: int) -> bool:
        items = self.policies()
        ready = 0
        for item in items:
            status = item.get("status") or {}
            if status.get("observedGeneration") != item["metadata"].get("generation"):
                continue
            for cond in status.get("conditions") or []:
                if cond.get("type") == "Ready" and cond.get("status") == "True":
                    ready += 1
        return ready >= count

    def events(self) -> list[tuple[str, str, str]]:
        """(uid, reporting component, reason) of every Event in the namespace."""
        raw: Any = client.CoreV1Api(self.api).list_namespaced_event(
            NAMESPACE, _preload_content=False
        )
        return [
            (
                str(e["metadata"].get("uid")),
                str(e.get("reportingComponent") or (e.get("source") or {}).get("component")),
                str(e.get("reason")),
            )
            for e in json.loads(raw.data)["items"]
        ]

    def request_counts(self) -> dict[tuple[str, str], float]:
        """apiserver_request_total summed by (verb, resource)."""
        method, url, headers, _body, _ = self.api.param_serialize(
            method="GET", resource_path="/metrics", auth_settings=["BearerToken"]
        )
        data = self.api.call_api(method, url, header_params=headers).read().decode()
        counts: dict[tuple[str, str], float] = {}
        for line in data.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels_part, value = line.rsplit(" ", 1)
            labels = dict(
                item.split("=", 1)
                for item in labels_part[len("apiserver_request_total{") : -1]
                .replace('"', "")
                .split(",")
                if "=" in item
            )
            key = (labels.get("verb", ""), labels.get("resource", ""))
            counts[key] = counts.get(key, 0.0) + float(value)
        return counts

    # ---- the direct path ---------------------------------------------------------

    def kubectl(self, *args: str) -> float:
        start = time.perf_counter()
        _run([KUBECTL or "kubectl", "-n", NAMESPACE, *args], self.env)
        return time.perf_counter() - start

    def ctl(self, *args: str) -> float:
        start = time.perf_counter()
        _run([str(BIN / "spilloverctl"), "-n", NAMESPACE, *args], self.env)
        return time.perf_counter() - start

    def direct_patch_policy(self, enabled: bool) -> float:
        if KUBECTL:
            body = json.dumps({"spec": {"enabled": enabled}})
            return self.kubectl("patch", "spilloverpolicy", POLICY, "--type=merge", "-p", body)
        start = time.perf_counter()
        self.patch_policy(POLICY, enabled)
        return time.perf_counter() - start

    def direct_patch_and_rollout(self, value: str) -> float:
        if KUBECTL:
            start = time.perf_counter()
            self.kubectl(
                "patch", "deployment", DIRECT, "--type=strategic", "-p",
                json.dumps(_env_patch(value)),
            )  # fmt: skip
            self.kubectl("rollout", "status", f"deployment/{DIRECT}", "--timeout=120s")
            return time.perf_counter() - start
        from spillover_operator.domain.rollout import rollout_state

        start = time.perf_counter()
        self.patch_direct(value)
        until(
            "the direct rollout",
            lambda: rollout_state(self._deployment(DIRECT)).complete,
            120,
        )
        return time.perf_counter() - start

    def _deployment(self, name: str) -> dict[str, Any]:
        raw: Any = self.apps.read_namespaced_deployment(name, NAMESPACE, _preload_content=False)
        return dict(json.loads(raw.data))


def _env_patch(value: str) -> dict[str, Any]:
    env = [{"name": ENABLED_VAR, "value": value}]
    return {"spec": {"template": {"spec": {"containers": [{"name": "controller", "env": env}]}}}}


def _run(argv: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench: {' '.join(argv)} exited {done.returncode}:\n{done.stderr}")


def until(what: str, check: Callable[[], bool], timeout: float) -> float:
    start = time.perf_counter()
    while not check():
        if time.perf_counter() - start > timeout:
            raise SystemExit(f"bench: timed out waiting for {what}")
        time.sleep(0.02)
    return time.perf_counter() - start


class NoReaction(Exception):
    """The operator did not apply a policy change within the wait."""


def reaction(bench: Bench, watch: DeploymentWatch, rounds: int) -> tuple[float, float]:
    """p95 of (operator, direct) reaction times, alternating, in seconds (NoReaction
    when the operator does not apply a change within 60 s)."""
    op: list[float] = []
    direct: list[float] = []
    state = True
    for _ in range(rounds):
        state = not state
        value = "true" if state else "false"
        watch.forget(WRC)
        start = time.perf_counter()
        bench.patch_policy(POLICY, state)
        try:
            op.append(watch.wait(WRC, value) - start)
        except SystemExit as exc:
            raise NoReaction(str(exc)) from None
        watch.forget(DIRECT)
        start = time.perf_counter()
        bench.patch_direct(value)
        direct.append(watch.wait(DIRECT, value) - start)
    if not state:  # leave spillover on
        bench.patch_policy(POLICY, True)
        bench.patch_direct("true")
        watch.wait(WRC, "true")
    return p95(op), p95(direct)


def ready_direct(bench: Bench) -> float | None:
    """The direct path of `ready_200_s`: the same work without the operator, on other
    Deployments (`direct-NNN`, no policy targets them): 199 Deployments created, then
    the env a policy would write patched onto each, until every one is rolled out (two
    rollouts each, as under the operator). Seconds, or None after READY_TIMEOUT_S."""
    from spillover_operator.domain.rollout import rollout_state

    names = [f"direct-{i:03d}" for i in range(1, MANY)]
    start = time.perf_counter()
    for name in names:
        bench.apps.create_namespaced_deployment(NAMESPACE, _deployment(name, 1))
    for name in names:
        bench.apps.patch_namespaced_deployment(
            name, NAMESPACE, _env_patch("true"), _preload_content=False
        )

    def all_rolled_out() -> bool:
        raw: Any = bench.apps.list_namespaced_deployment(NAMESPACE, _preload_content=False)
        items = [i for i in json.loads(raw.data)["items"] if i["metadata"]["name"] in names]
        return len(items) == len(names) and all(rollout_state(i).complete for i in items)

    while not all_rolled_out():
        if time.perf_counter() - start > READY_TIMEOUT_S:
            return None
        time.sleep(0.1)
    return time.perf_counter() - start


def quiet(bench: Bench, timeout: float = 300) -> None:
    """Until no write to Deployments, ReplicaSets, pods or Events for QUIET_S seconds."""
    watched = ("deployments", "replicasets", "pods", "events")

    def writes() -> float:
        return sum(
            v
            for (verb, resource), v in bench.request_counts().items()
            if verb in ("POST", "PUT", "PATCH", "DELETE") and resource in watched
        )

    start = last_change = time.perf_counter()
    seen = writes()
    while time.perf_counter() - last_change < QUIET_S:
        if time.perf_counter() - start > timeout:
            log(f"the control plane did not go quiet in {timeout:g} s; going on")
            return
        time.sleep(0.5)
        now = writes()
        if now != seen:
            seen, last_change = now, time.perf_counter()


def settle(bench: Bench, timeout: float = 300) -> bool:
    """Wait until every policy is Ready; False (and go on) after `timeout` seconds."""
    start = time.perf_counter()
    while not bench.all_ready(len(bench.policies())):
        if time.perf_counter() - start > timeout:
            log(f"not every policy Ready after {timeout:g} s; going on")
            return False
        time.sleep(0.1)
    return True


def _count_ready(bench: Bench) -> int:
    return sum(
        1
        for item in bench.policies()
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (item.get("status") or {}).get("conditions") or []
        )
    )


def main() -> int:
    direct_name = "kubectl" if KUBECTL else "python-client"
    results: list[str] = []

    def emit(line: str) -> None:
        results.append(line)
        print(line, flush=True)

    with (
        tempfile.TemporaryDirectory(prefix="spillover-bench-op-") as tmp_name,
        # kwok's fake nodes take 110 pods each: 4 for the 405 pods (200 Deployments under
        # policies, 199 changed directly, the two 3-replica ones).
        LocalCluster(Path(tmp_name) / "cluster", nodes=4) as cluster,
        cluster.api_client() as api,
    ):
        tmp = Path(tmp_name)
        crd = yaml.safe_load((REPO / "manifests/crd/spilloverpolicies.yaml").read_text())
        client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        bench = Bench(cluster, api, tmp)
        bench.apps.create_namespaced_deployment(NAMESPACE, _deployment(WRC, 3))
        bench.apps.create_namespaced_deployment(NAMESPACE, _deployment(DIRECT, 3))
        bench.patch_direct("true")

        def create_policy(name: str, target: str) -> bool:
            try:
                bench.custom.create_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, PLURAL, _policy(name, target)
                )
            except client.ApiException as exc:
                if exc.status == 404:  # the CRD is served a moment after it is created
                    return False
                raise
            return True

        until("the CRD to be served", lambda: create_policy(POLICY, WRC), 30)
        watch = DeploymentWatch(api)
        try:
            bench.start_operator()
            watch.wait(WRC, "true")
            settle(bench)

            log("reaction with 1 policy")
            op, direct = reaction(bench, watch, REACTION_ROUNDS)
            emit(
                f"ratio reaction_p95_1={op / direct:.2f}  "
                f"# operator {op * 1000:.1f} ms vs direct PATCH {direct * 1000:.1f} ms"
            )
            settle(bench)

            skip_kill = os.environ.get("OPERATOR_BENCH_SKIP_KILL") == "1"
            log("kill command" + (" (skipped: OPERATOR_BENCH_SKIP_KILL=1)" if skip_kill else ""))
            if not skip_kill:
                ctl: list[float] = []
                kube: list[float] = []
                for _ in range(COMMAND_ROUNDS):
                    ctl.append(bench.ctl("kill"))
                    bench.patch_policy(POLICY, True)
                    kube.append(bench.direct_patch_policy(False))
                    bench.patch_policy(POLICY, True)
                c, k = statistics.median(ctl), statistics.median(kube)
                emit(
                    f"ratio kill_command={c / k:.2f}  # spilloverctl kill {c * 1000:.0f} ms vs "
                    f"{direct_name} patch {k * 1000:.0f} ms (median of {COMMAND_ROUNDS})"
                )
                settle(bench)

                log("kill --wait")
                ctl, kube = [], []
                for _ in range(COMMAND_ROUNDS):
                    ctl.append(bench.ctl("kill", "--wait", "--timeout", "120"))
                    bench.ctl("restore", "--wait", "--timeout", "120")
                    kube.append(bench.direct_patch_and_rollout("false"))
                    bench.direct_patch_and_rollout("true")
                c, k = statistics.median(ctl), statistics.median(kube)
                emit(
                    f"ratio kill_wait={c / k:.2f}  # spilloverctl kill --wait {c * 1000:.0f} ms vs "
                    f"{direct_name} patch + rollout status {k * 1000:.0f} ms "
                    f"(median of {COMMAND_ROUNDS}, 3 replicas)"
                )

            # First, on an empty namespace as the operator's part below finds it; then
            # until the control plane is quiet again (its writes would be counted below).
            log(f"{MANY - 1} Deployments changed directly (the control plane's own time)")
            direct_ready = ready_direct(bench)
            quiet(bench)
            log(f"{MANY} Deployments and policies")
            start = time.perf_counter()
            for i in range(1, MANY):
                bench.apps.create_namespaced_deployment(NAMESPACE, _deployment(f"wrc-{i:03d}", 1))
                create_policy(f"policy-{i:03d}", f"wrc-{i:03d}")
            ready: float | None = None
            if settle(bench, READY_TIMEOUT_S):
                ready = time.perf_counter() - start
                emit(f"ready_200_s={ready:.1f}")
            else:
                ready = _count_ready(bench)
                emit(
                    f"ready_200_s=>{READY_TIMEOUT_S:g}  # only {ready} of {MANY} Ready "
                    f"after {READY_TIMEOUT_S:g} s; the rest measured while it catches up"
                )

            log(f"reaction with {MANY} policies")
            try:
                op, direct = reaction(bench, watch, REACTION_ROUNDS)
                emit(
                    f"ratio reaction_p95_200={op / direct:.2f}  "
                    f"# operator {op * 1000:.1f} ms vs direct PATCH {direct * 1000:.1f} ms"
                )
            except NoReaction:
                emit("ratio reaction_p95_200=inf  # the operator applied no change within 60 s")
            settle(bench, 60)

            log(f"restart with {MANY} policies")
            bench.stop_operator()
            time.sleep(1.0)
            events_before = set(bench.events())
            before = bench.request_counts()
            bench.start_operator()
            last, quiet_since = bench.request_counts(), time.perf_counter()
            started = time.perf_counter()
            while time.perf_counter() - quiet_since < QUIET_S:
                if time.perf_counter() - started > 300:
                    log("the restarted operator did not go quiet in 300 s: counted so far")
                    break
                time.sleep(0.5)
                now = bench.request_counts()
                mine = {
                    k: v for k, v in now.items() if k[1] in ("spilloverpolicies", "deployments")
                }
                was = {
                    k: v for k, v in last.items() if k[1] in ("spilloverpolicies", "deployments")
                }
                if mine != was:
                    quiet_since = time.perf_counter()
                last = now
            after = bench.request_counts()

            def delta(verbs: tuple[str, ...], resources: tuple[str, ...]) -> int:
                return int(
                    sum(
                        v - before.get(k, 0.0)
                        for k, v in after.items()
                        if k[0] in verbs and k[1] in resources
                    )
                )

            lists = delta(("LIST",), ("spilloverpolicies", "deployments"))
            gets = delta(("GET",), ("spilloverpolicies", "deployments"))
            # Events are the operator's when it reported them (the control plane posts
            # its own, about nodes and pods); policies and Deployments, anyone's.
            # LeaderElected (on the leader Lease: every start takes the Lease and says so)
            # is the election's, not a write about a policy: shown, not counted.
            from_operator = [
                e for e in bench.events() if e not in events_before and e[1] == OPERATOR
            ]
            ours = [e for e in from_operator if e[2] != "LeaderElected"]
            elected = len(from_operator) - len(ours)
            writes = len(ours) + delta(
                ("POST", "PUT", "PATCH", "DELETE"), ("spilloverpolicies", "deployments")
            )
            emit(f"lists_on_restart_200={lists}  # and {gets} GETs")
            by_kind = {
                f"{verb} {resource}": n
                for (verb, resource) in sorted(after)
                if verb in ("POST", "PUT", "PATCH", "DELETE")
                and resource in ("spilloverpolicies", "deployments")
                and (n := int(after[(verb, resource)] - before.get((verb, resource), 0.0)))
            }
            if ours:
                by_kind["operator Events"] = len(ours)
            others = len([e for e in bench.events() if e not in events_before]) - len(from_operator)
            detail = ", ".join(f"{k}: {v}" for k, v in by_kind.items()) or "none"
            detail += f"; LeaderElected (not counted): {elected}"
            detail += f"; the control plane's own Events meanwhile: {others}"
            emit(f"writes_on_restart_200={writes}  # {detail}")

            log(f"API outage of {OUTAGE_S:g} s")
            cluster.stop_apiserver()
            time.sleep(OUTAGE_S)
            cluster.start_apiserver()
            back = time.perf_counter()
            until(
                "the policy PATCH after the outage",
                lambda: _try(lambda: bench.patch_policy(POLICY, False)),
                30,
            )
            until(
                "the change after the outage",
                lambda: _env_value(bench._deployment(WRC)) == "false",
                120,
            )
            emit(
                f"recovery_after_outage_s={time.perf_counter() - back:.2f}  "
                f"# after a {OUTAGE_S:g} s outage"
            )

            if direct_ready is None:
                emit(f"ratio ready_200=unknown  # the direct rollouts took > {READY_TIMEOUT_S:g} s")
            elif ready is not None:
                emit(
                    f"ratio ready_200={ready / direct_ready:.2f}  # operator {ready:.1f} s vs "
                    f"{MANY - 1} Deployments created, then the same env patched on each "
                    f"directly, all rolled out: {direct_ready:.1f} s"
                )
        finally:
            watch.stopped = True
            bench.stop_operator()
    log("figures: " + "; ".join(r.split("  #")[0] for r in results))
    return 0


def _try(action: Callable[[], None]) -> bool:
    try:
        action()
    except Exception:
        return False
    return True


if __name__ == "__main__":
    raise SystemExit(main())
