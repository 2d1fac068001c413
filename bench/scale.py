"""Benchmark: what the recipe pods cost the operator in API requests, at scale.

One run on the local control plane (kube-apiserver with an audit log, etcd, the
controller-manager, the scheduler, kwok's fake nodes), the real operator (`kopf run`,
as a user of its own so the audit log tells its requests apart) and the test-only WRC
stand-in (tests/integration/wrc_stand_in.py) keeping `SCALE_BENCH_DEPLOYMENTS` recipe
Deployments of `SCALE_BENCH_PODS` pods in all (default 10 and 300), whose pods read the
WRC's values from a ConfigMap when they start (the `at-pod-creation` behaviour): a kill
switch leaves them stale until the operator's refresh (`refresh: OnKillSwitch`)
restarts their Deployments one at a time.

Two phases, each until the policy reports every pod current and the operator has been
quiet for a while:

- create: the recipe Deployments appear and their pods start;
- kill: `spilloverctl kill` (as the admin, not counted), the WRC rolls out, the
  stand-in passes the value on, the operator restarts every recipe Deployment.

Printed, `name=value` per line: `requests_per_recipe_pod_create`,
`requests_per_recipe_pod_kill` (the operator's requests from the audit log, Leases left
out: its heartbeat and leader Lease renewals go on whatever the pods do; shown beside),
`reconciles_create`, `reconciles_kill` (spillover_operator_reconcile_total), and
`ratio requests_create`, `ratio requests_kill`: the operator's requests against the
control plane's own controllers' (kube-controller-manager and kube-scheduler, from the
same audit log, in the same phase): the direct path's work for the same pods. Asserts
nothing. Needs the control plane binaries: `make controlplane`.
"""

from __future__ import annotations

import io
import math
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from controlplane.localcluster import LocalCluster  # noqa: E402
from k8s_helpers import install_crd, read_policy  # noqa: E402
from kopf_operator import OperatorProcess  # noqa: E402
from kubernetes import client  # noqa: E402
from spillover_operator.cli.main import run as spilloverctl  # noqa: E402
from spillover_operator.domain.allowlist import REFRESH_DEPLOYMENTS_VAR  # noqa: E402
from spillover_operator.domain.model import (  # noqa: E402
    COND_READY,
    COND_RECIPE_PODS,
    PASSTHROUGH_VAR,
)
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION  # noqa: E402
from wrc_stand_in import WrcStandIn  # noqa: E402

NAMESPACE = "bench"
WRC = "workflow-recipe-controller"
POLICY = "spillover"
OPERATOR_USER = "spillover-bench-operator"
# The control plane's own controllers, as the audit log names them.
CONTROLLERS = ("system:kube-controller-manager", "system:kube-scheduler")
PODS = int(os.environ.get("SCALE_BENCH_PODS", "300"))
DEPLOYMENTS = int(os.environ.get("SCALE_BENCH_DEPLOYMENTS", "10"))
TIMEOUT_S = float(os.environ.get("SCALE_BENCH_TIMEOUT_S", "900"))
QUIET_S = 8.0  # the operator counts as done after this long without a request


def log(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


def until(what: str, check: Callable[[], bool], timeout: float = TIMEOUT_S) -> float:
    start = time.perf_counter()
    while not check():
        if time.perf_counter() - start > timeout:
            raise SystemExit(f"bench: timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.5)
    return time.perf_counter() - start


def _condition(policy: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in (policy.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def all_current(api: client.ApiClient, pods: int, enabled: bool) -> bool:
    """The policy reports `pods` recipe pods, every one current, for the spec it holds."""
    policy = read_policy(api, NAMESPACE, POLICY)
    counts = (policy.get("status") or {}).get("recipePods") or {}
    return (
        bool(policy["spec"].get("enabled", True)) == enabled
        and (policy.get("status") or {}).get("observedGeneration")
        == policy["metadata"]["generation"]
        and _condition(policy, COND_READY).get("status") == "True"
        and _condition(policy, COND_RECIPE_PODS).get("status") == "True"
        and counts.get("matched") == pods
        and counts.get("current") == pods
    )


class Audit:
    """The requests of the audit log since a mark, by who made them: each request once
    (its auditID), whatever stages it was logged at."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.seen: set[str] = set()

    def mark(self) -> None:
        self.seen = {str(e.get("auditID")) for e in self.cluster.audit_events()}

    def since(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        ids = set(self.seen)
        for event in self.cluster.audit_events():
            audit_id = str(event.get("auditID"))
            if audit_id not in ids:
                ids.add(audit_id)
                out.append(event)
        return out


def _user(event: dict[str, Any]) -> str:
    return str((event.get("user") or {}).get("username") or "")


def _resource(event: dict[str, Any]) -> str:
    ref = event.get("objectRef") or {}
    sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
    return f"{ref.get('resource', event.get('requestURI', '?'))}{sub}"


def operator_requests(events: list[dict[str, Any]]) -> tuple[int, int, Counter[str]]:
    """(requests without Leases, Lease requests, requests by `verb resource`)."""
    mine = [e for e in events if _user(e) == OPERATOR_USER]
    by_kind = Counter(f"{e.get('verb')} {_resource(e)}" for e in mine)
    leases = sum(1 for e in mine if (e.get("objectRef") or {}).get("resource") == "leases")
    return len(mine) - leases, leases, by_kind


def controller_requests(events: list[dict[str, Any]]) -> int:
    """The control plane's controllers' requests (their leader-election Leases left out,
    as the operator's are)."""
    return sum(
        1
        for e in events
        if (_user(e) in CONTROLLERS or _user(e).startswith("system:serviceaccount:kube-system:"))
        and (e.get("objectRef") or {}).get("resource") != "leases"
    )


def quiet(audit: Audit, timeout: float = TIMEOUT_S) -> None:
    """Until the operator made no request (Leases aside) for QUIET_S seconds."""
    start = last_change = time.perf_counter()
    seen = operator_requests(audit.since())[0]
    while time.perf_counter() - last_change < QUIET_S:
        if time.perf_counter() - start > timeout:
            log(f"the operator did not go quiet in {timeout:g} s; counted so far")
            return
        time.sleep(1.0)
        now = operator_requests(audit.since())[0]
        if now != seen:
            seen, last_change = now, time.perf_counter()


def ctl(cluster: LocalCluster, *argv: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = spilloverctl(
        ["--kubeconfig", str(cluster.kubeconfig), "-n", NAMESPACE, *argv], stdout=out, stderr=err
    )
    if code != 0:
        raise SystemExit(f"bench: spilloverctl {' '.join(argv)} exited {code}:\n{err.getvalue()}")


def main() -> int:
    if PODS < DEPLOYMENTS or PODS % DEPLOYMENTS:
        raise SystemExit(
            f"bench: SCALE_BENCH_PODS={PODS} is not a multiple of "
            f"SCALE_BENCH_DEPLOYMENTS={DEPLOYMENTS}; pick one that is (default 300 and 10)"
        )
    replicas = PODS // DEPLOYMENTS
    recipes = tuple(f"r{i:02d}" for i in range(1, DEPLOYMENTS + 1))
    # kwok's fake nodes take 110 pods each: the recipe pods with a rollout's surge, the WRC.
    nodes = math.ceil((PODS * 1.3 + 10) / 110)
    results: list[str] = []

    def emit(line: str) -> None:
        results.append(line)
        print(line, flush=True)

    with (
        tempfile.TemporaryDirectory(prefix="spillover-bench-scale-") as tmp_name,
        LocalCluster(Path(tmp_name) / "cluster", nodes=nodes, audit=True) as cluster,
        cluster.api_client() as api,
        cluster.api_client() as stand_in_api,
    ):
        tmp = Path(tmp_name)
        install_crd(api)
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        until("the default ServiceAccount", lambda: _has_default_sa(api), 60)
        env = [
            {"name": "LOG_LEVEL", "value": "info"},
            {"name": PASSTHROUGH_VAR, "value": "OPENAI_BASE_URL"},
        ]
        labels = {"app": "wrc"}
        client.AppsV1Api(api).create_namespaced_deployment(
            NAMESPACE,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": WRC, "labels": labels},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "containers": [
                                {"name": "wrc", "image": "example.invalid/wrc:1", "env": env}
                            ]
                        },
                    },
                },
            },
        )
        kubeconfig = cluster.user_kubeconfig(OPERATOR_USER, groups=("system:masters",))
        operator = OperatorProcess(
            NAMESPACE,
            kubeconfig,
            tmp / "operator",
            extra_env={REFRESH_DEPLOYMENTS_VAR: ",".join(f"mcp-host-{r}" for r in recipes)},
        )
        stand_in = WrcStandIn(
            stand_in_api,
            NAMESPACE,
            "at-pod-creation",
            via="deployment",
            recipes=recipes,
            replicas=replicas,
        )
        try:
            operator.start()
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                GROUP,
                VERSION,
                NAMESPACE,
                PLURAL,
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "SpilloverPolicy",
                    "metadata": {"name": POLICY},
                    "spec": {
                        "enabled": True,
                        "target": {"deployment": WRC, "container": "wrc"},
                        "recipePods": {"refresh": "OnKillSwitch"},
                    },
                },
            )
            until("the policy Ready with no recipe pods", lambda: _ready(api), 120)
            quiet(Audit(cluster), 60)
            audit = Audit(cluster)

            def phase(name: str, start: Callable[[], None], enabled: bool) -> None:
                audit.mark()
                reconciles = operator.metric("spillover_operator_reconcile_total")
                began = time.perf_counter()
                start()
                seconds = until(
                    f"{PODS} current recipe pods ({name})",
                    lambda: all_current(api, PODS, enabled),
                )
                quiet(audit)
                events = audit.since()
                requests, leases, by_kind = operator_requests(events)
                controllers = controller_requests(events)
                reconciled = operator.metric("spillover_operator_reconcile_total") - reconciles
                top = ", ".join(f"{k}: {v}" for k, v in by_kind.most_common(10))
                emit(
                    f"requests_per_recipe_pod_{name}={requests / PODS:.2f}  # {requests} "
                    f"requests for {PODS} pods (and {leases} Lease requests); {top}"
                )
                emit(f"reconciles_{name}={reconciled:.0f}  # converged in {seconds:.1f} s")
                emit(
                    f"ratio requests_{name}={requests / max(controllers, 1):.2f}  "
                    f"# operator {requests} vs the control plane's controllers {controllers} "
                    f"({controllers / PODS:.2f} per pod), same phase"
                )
                log(f"{name}: {time.perf_counter() - began:.1f} s")

            log(f"create: {DEPLOYMENTS} recipe Deployments, {PODS} pods")
            phase("create", stand_in.start, enabled=True)
            log("kill: spilloverctl kill, refresh OnKillSwitch")
            phase("kill", lambda: ctl(cluster, "kill"), enabled=False)
        finally:
            stand_in.stop()
            operator.stop()
            if stand_in.errors:
                log("the WRC stand-in failed: " + stand_in.errors[0])
    log("figures: " + "; ".join(r.split("  #")[0] for r in results))
    return 0


def _has_default_sa(api: client.ApiClient) -> bool:
    try:
        client.CoreV1Api(api).read_namespaced_service_account("default", NAMESPACE)
    except client.ApiException:
        return False
    return True


def _ready(api: client.ApiClient) -> bool:
    try:
        policy = read_policy(api, NAMESPACE, POLICY)
    except client.ApiException:
        return False
    return _condition(policy, COND_READY).get("status") == "True"


if __name__ == "__main__":
    raise SystemExit(main())
