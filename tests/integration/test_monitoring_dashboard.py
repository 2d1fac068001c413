"""The dashboard and the alerts of manifests/monitoring/ against a real operator.

Two real operator processes (`kopf run`, as a ServiceAccount bound to the Role of
manifests/base), as the shipped Deployment's `replicas: 2` runs them: one leads, one
stands by. They run against the local control plane with a SpilloverPolicy, its WRC
Deployment and one recipe mcp-host Deployment. The test Prometheus scrapes both
operators' metrics ports the way the PodMonitor asks (its job label, `honorLabels`, the
target's namespace label spillover-system) and loads the PrometheusRule's rules. Then:

- every `expr` of every dashboard panel, with `$namespace` set to the test's namespace,
  is evaluated through Prometheus's HTTP API without error, and the key panels return
  the values the cluster has (both replicas up, exactly one leading, spillover on,
  policy Ready, one recipe pod current, ...): the standby adds no second policy series;
  the dashboard's `namespace` variable lists the namespace;
- every rule loads and evaluates without error, and no alert's condition holds while
  all is well;
- with the kill switch engaged the conditions of SpilloverKillSwitchEngagedTooLong and
  SpilloverRecipePodsStale hold for that policy (before their `for:` times, which
  promtool's unit tests check);
- the leader stopped: the standby takes over, the dashboard shows one replica leading
  again and SpilloverOperatorNoLeader's condition does not hold; with both stopped
  SpilloverOperatorDown's condition holds.
"""

from __future__ import annotations

import math
import urllib.error
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane.localcluster import LocalCluster
from k8s_helpers import (
    connection,
    container_manifest,
    deployment_manifest,
    is_ready,
    model,
    policy_manifest,
    read_policy,
    wait_for,
)
from kopf_operator import OperatorProcess
from kubernetes import client
from monitoring_manifests import (
    JOB,
    PODMONITOR_FILE,
    Query,
    alerts,
    dashboard,
    queries,
    substitute,
    write_rules,
)
from prometheus.server import PrometheusServer
from spillover_operator.client import patch_policy
from spillover_operator.domain import leadership
from spillover_operator.domain.model import ENABLED_VAR
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

BASE = Path(__file__).resolve().parents[2] / "manifests" / "base"
WRC = "workflow-recipe-controller"
POLICY = "spillover"
# Grafana's own variables, as it would fill them in for a 0.2 s scrape interval.
RATE_INTERVAL = "1m"
# Panels that must show data for a running operator with a Ready policy and a current
# recipe pod: (panel title, refId). The others (drift corrections, the quantiles of a
# rate over one observation, firing alerts) may be empty here.
KEY_PANELS = {
    ("Operator up", "A"),
    ("Replicas leading (1 = one operator acts)", "A"),
    ("Replicas leading (1 = one operator acts)", "B"),
    ("Heartbeat Lease age", "A"),
    ("Spillover enabled (0 = kill switch engaged)", "A"),
    ("Policy Ready", "A"),
    ("Recipe pods by state", "A"),
    ("Time from a policy change to every recipe pod current", "C"),
    ("Reconciles by result", "A"),
    ("Reconcile errors by reason", "A"),
    ("Since the last successful reconcile", "A"),
    ("Last change applied to the WRC Deployment", "A"),
}


def install_rbac(control_plane: LocalCluster, api: client.ApiClient, namespace: str) -> Path:
    """The ServiceAccount, Role and RoleBinding of manifests/base, in `namespace`; a
    kubeconfig with the ServiceAccount's token."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    for name in ("serviceaccount.yaml", "role.yaml", "rolebinding.yaml"):
        doc = yaml.safe_load((BASE / name).read_text())
        doc["metadata"]["namespace"] = namespace
        if doc["kind"] == "ServiceAccount":
            core.create_namespaced_service_account(namespace, model(client.V1ServiceAccount, doc))
        elif doc["kind"] == "Role":
            rbac.create_namespaced_role(namespace, model(client.V1Role, doc))
        else:
            doc["subjects"][0]["namespace"] = namespace
            rbac.create_namespaced_role_binding(namespace, model(client.V1RoleBinding, doc))
    return Path(control_plane.service_account_kubeconfig(namespace, "spillover-operator"))


def create_workloads(api: client.ApiClient, namespace: str) -> None:
    """The WRC Deployment and one recipe mcp-host Deployment whose pod runs with
    spillover on (current for an enabled policy, stale once the kill switch is on)."""
    apps = client.AppsV1Api(api)
    wrc = deployment_manifest(
        WRC, [container_manifest("wrc", "example.invalid/wrc:1", {"LOG_LEVEL": "info"})]
    )
    recipe = deployment_manifest(
        "mcp-host-r1",
        [container_manifest("mcp-host", "example.invalid/mcp-host:1", {ENABLED_VAR: "true"})],
        labels={"app.kubernetes.io/name": "mcp-host", "recipe": "r1"},
    )
    for body in (wrc, recipe):
        apps.create_namespaced_deployment(namespace, model(client.V1Deployment, body))


def start_prometheus(
    prometheus_factory: Any, ops: list[OperatorProcess], rules: Path
) -> PrometheusServer:
    """The test Prometheus scraping the operators as the shipped PodMonitor would: the job
    named by its jobLabel, its honorLabels, and the target labels the Prometheus
    Operator adds (the pod's namespace; the replicas differ by `instance`)."""
    monitor = yaml.safe_load(PODMONITOR_FILE.read_text())
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["path"] == "/metrics"  # what the test server scrapes
    server: PrometheusServer = prometheus_factory(
        [f"127.0.0.1:{op.metrics_port}" for op in ops],
        job=JOB,
        labels={"namespace": "spillover-system", "pod": "spillover-operator-0"},
        honor_labels=bool(endpoint.get("honorLabels")),
        rule_files=[str(rules)],
        evaluation_interval_s=1.0,
    )
    return server


def query(prom: PrometheusServer, expr: str) -> list[dict[str, Any]]:
    """An instant query's result vector; a query Prometheus refuses fails the test."""
    try:
        data = prom.api("/api/v1/query", query=expr)
    except urllib.error.HTTPError as exc:
        pytest.fail(f"Prometheus refused {expr!r}: {exc.read().decode(errors='replace')}")
    assert isinstance(data, dict)
    if data["resultType"] == "scalar":
        return [{"metric": {}, "value": data["result"]}]
    result: list[dict[str, Any]] = data["result"]
    return result


def values(result: list[dict[str, Any]], **labels: str) -> list[float]:
    return [
        float(s["value"][1])
        for s in result
        if all(s["metric"].get(k) == v for k, v in labels.items())
    ]


def dashboard_results(
    prom: PrometheusServer, namespace: str
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    filled = {"namespace": namespace, "__rate_interval": RATE_INTERVAL}
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    q: Query
    for q in queries(dashboard()):
        out[(q.panel, q.ref_id)] = query(prom, substitute(q.expr, filled))
    return out


def test_dashboard_queries_and_alert_rules_against_a_real_operator(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    prometheus_factory: Any,
    tmp_path: Path,
) -> None:
    kubeconfig = install_rbac(control_plane, admin, namespace)
    create_workloads(admin, namespace)
    # Two replicas, as the shipped Deployment runs them; op leads, standby waits.
    op, standby = (
        OperatorProcess(
            namespace, kubeconfig, tmp_path / "operator", name=name,
            extra_env={leadership.ID_VAR: name},
        )
        for name in ("op-a", "op-b")
    )  # fmt: skip
    op.start()
    try:
        wait_for(
            "op-a leads",
            lambda: op.metric("spillover_operator_leader", namespace=namespace) == 1,
            operator=op,
        )
        standby.start()
        wait_for(
            "op-b stands by",
            lambda: standby.metric("spillover_operator_leader", namespace=namespace) == 0,
            operator=standby,
        )
        client.CustomObjectsApi(admin).create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            policy_manifest(namespace, {"enabled": True, "target": {"deployment": WRC}}, POLICY),
        )
        wait_for(
            "the policy Ready", lambda: is_ready(read_policy(admin, namespace, POLICY)), operator=op
        )
        wait_for(
            "the recipe pod current, and the time it took observed",
            lambda: (
                op.metric("spillover_operator_recipe_pods", state="current") == 1
                and op.metric("spillover_operator_recipe_pods_current_seconds_count") >= 1
            ),
            operator=op,
        )
        wait_for(
            "the heartbeat Lease renewed",
            lambda: op.metric(
                "spillover_operator_heartbeat_timestamp_seconds", namespace=namespace
            ),
            operator=op,
        )

        prom = start_prometheus(prometheus_factory, [op, standby], write_rules(tmp_path / "rules"))

        # ---- the dashboard: every query evaluates, the key ones have data
        last: dict[tuple[str, str], list[dict[str, Any]]] = {}

        def key_panels_have_data() -> bool:
            nonlocal last
            last = dashboard_results(prom, namespace)
            return all(last[key] for key in KEY_PANELS)

        assert {(q.panel, q.ref_id) for q in queries()} >= KEY_PANELS, "a key panel is gone"
        try:
            wait_for(
                "every key panel of the dashboard to show data", key_panels_have_data, operator=op
            )
        except pytest.fail.Exception as exc:
            empty = sorted(key for key in KEY_PANELS if not last.get(key))
            raise AssertionError(f"{exc}\nkey panels without data: {empty}") from None
        assert values(last[("Operator up", "A")]) == [1.0, 1.0]
        leading = ("Replicas leading (1 = one operator acts)", "A")
        assert values(last[leading]) == [1.0]
        per_replica = last[("Replicas leading (1 = one operator acts)", "B")]
        assert values(per_replica, instance=f"127.0.0.1:{op.metrics_port}") == [1.0]
        assert values(per_replica, instance=f"127.0.0.1:{standby.metrics_port}") == [0.0]
        # The policy's series come from the leader alone: one per panel, not two.
        assert values(
            last[("Spillover enabled (0 = kill switch engaged)", "A")], policy=POLICY
        ) == [1.0]
        assert values(last[("Policy Ready", "A")], policy=POLICY) == [1.0]
        assert values(last[("Recipe pods by state", "A")], policy=POLICY, state="current") == [1.0]
        assert values(last[("Recipe pods by state", "A")], policy=POLICY, state="stale") == [0.0]
        assert values(
            last[("Time from a policy change to every recipe pod current", "C")], policy=POLICY
        ) == [1.0]
        for key in KEY_PANELS:
            assert all(math.isfinite(v) for v in values(last[key])), (key, last[key])
        # The `namespace` variable (label_values of the enabled gauge) offers the WRC's.
        offered = prom.api(
            "/api/v1/label/namespace/values", **{"match[]": "spillover_operator_policy_enabled"}
        )
        assert offered == [namespace]

        # ---- the rules: loaded, evaluated without error, quiet while all is well
        def rules_evaluated() -> list[dict[str, Any]] | None:
            data = prom.api("/api/v1/rules")
            assert isinstance(data, dict)
            rules = [r for g in data["groups"] for r in g["rules"]]
            done = all(not r["lastEvaluation"].startswith("0001-") for r in rules)
            return rules if rules and done else None

        rules = wait_for("every rule evaluated once", rules_evaluated, operator=op)
        assert {r["name"] for r in rules} == {a["alert"] for a in alerts()}
        for rule in rules:
            assert rule["health"] == "ok" and not rule.get("lastError"), rule
        for alert in alerts():
            assert query(prom, alert["expr"]) == [], f"{alert['alert']} holds while all is well"

        # ---- the kill switch: the policy's alerts see it
        patch_policy(connection(admin, namespace), POLICY, {"spec": {"enabled": False}})
        kill = next(a for a in alerts() if a["alert"] == "SpilloverKillSwitchEngagedTooLong")
        stale = next(a for a in alerts() if a["alert"] == "SpilloverRecipePodsStale")
        wait_for(
            "the kill switch and the stale recipe pod in the alerts' conditions",
            lambda: (
                values(query(prom, kill["expr"]), namespace=namespace, policy=POLICY) == [0.0]
                and values(query(prom, stale["expr"]), namespace=namespace, policy=POLICY) == [1.0]
            ),
            operator=op,
        )
        board = dashboard_results(prom, namespace)
        assert values(board[("Spillover enabled (0 = kill switch engaged)", "A")]) == [0.0]

        # ---- the leader stopped: the standby takes over; one replica leads again
        op.stop()
        no_leader = next(a for a in alerts() if a["alert"] == "SpilloverOperatorNoLeader")
        stopped = f"127.0.0.1:{op.metrics_port}"

        def handed_over() -> dict[tuple[str, str], list[dict[str, Any]]] | None:
            """One board where Prometheus has seen the hand-over: the standby leading,
            one replica leading in all, and the stopped one scraped as down (its `up`
            turns 0 only at the first scrape after the stop: waited for, never raced)."""
            board = dashboard_results(prom, namespace)
            seen = (
                values(
                    board[("Replicas leading (1 = one operator acts)", "B")],
                    instance=f"127.0.0.1:{standby.metrics_port}",
                )
                == [1.0]
                and values(board[leading]) == [1.0]
                and values(board[("Operator up", "A")], instance=stopped) == [0.0]
            )
            return board if seen else None

        board = wait_for("the hand-over on the dashboard", handed_over, operator=standby)
        assert values(board[leading]) == [1.0]
        assert values(board[("Operator up", "A")], instance=stopped) == [0.0]
        assert query(prom, no_leader["expr"]) == [], "SpilloverOperatorNoLeader holds"
        # The new leader reports the policy as it is: kill switch engaged, Ready.
        wait_for(
            "the new leader's policy series",
            lambda: (
                values(dashboard_results(prom, namespace)[("Policy Ready", "A")], policy=POLICY)
                == [1.0]
            ),
            operator=standby,
        )
    finally:
        op.stop()
        standby.stop()

    # ---- both stopped: SpilloverOperatorDown's condition holds
    down = next(a for a in alerts() if a["alert"] == "SpilloverOperatorDown")
    wait_for(
        "SpilloverOperatorDown's condition", lambda: values(query(prom, down["expr"])) == [1.0]
    )
