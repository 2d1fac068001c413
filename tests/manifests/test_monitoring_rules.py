"""manifests/monitoring/ as shipped: the PrometheusRule's rules pass `promtool check
rules`, its unit tests (manifests/monitoring/tests/rules-test.yaml) pass `promtool test
rules`, each alert's unit tests fail when the alert fires too early or never, and the
PodMonitor selects the operator's pods and metrics port as every overlay deploys them.

promtool is built from the same pinned Prometheus module as the test server
(`make prometheus`); a missing one fails the test naming that command. No cluster.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kustomize_build import build, container_env, find, overlay_names
from monitoring_manifests import (
    DASHBOARD_FILE,
    JOB,
    MONITORING,
    RULES_TEST_FILE,
    alerts,
    dashboard,
    queries,
    rule_groups,
    variables_used,
    write_rules,
)
from prometheus.binary import PrometheusBinary
from repo_paths import MANIFESTS

PROMTOOL_TIMEOUT_S = 120
# The alerts issue 19 asks for, by what they watch.
EXPECTED_ALERTS = {
    "SpilloverOperatorDown",  # no operator answers its scrape
    "SpilloverOperatorHeartbeatStale",  # the heartbeat Lease is not renewed
    "SpilloverOperatorNoLeader",  # replicas run, none holds the leader Lease
    "SpilloverKillSwitchEngagedTooLong",
    "SpilloverRecipePodsStale",  # recipe pods still run old values after a change
    "SpilloverPolicyNotReady",
    "SpilloverOperatorReconcileErrors",
}


def run_promtool(
    promtool: PrometheusBinary, *args: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool.path, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=PROMTOOL_TIMEOUT_S,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def monitoring_build() -> list[dict[str, Any]]:
    """`kubectl kustomize manifests/monitoring`: what `kubectl apply -k` creates."""
    return build(MONITORING)


def test_the_build_ships_the_rule_the_podmonitor_and_the_dashboard(
    monitoring_build: list[dict[str, Any]],
) -> None:
    rule = find(monitoring_build, "PrometheusRule", "spillover-operator")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "spillover-system"
    # The rendered rule is the file the promtool tests below read.
    assert rule_groups(rule) == rule_groups()
    assert {a["alert"] for a in alerts(rule_groups(rule))} == EXPECTED_ALERTS
    monitor = find(monitoring_build, "PodMonitor", "spillover-operator")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    cm = find(monitoring_build, "ConfigMap", "spillover-operator-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"]["spillover-operator.json"] == DASHBOARD_FILE.read_text(encoding="utf-8")


def test_promtool_checks_the_rules(promtool_binary: PrometheusBinary, tmp_path: Path) -> None:
    rules = write_rules(tmp_path)
    proc = run_promtool(promtool_binary, "check", "rules", rules.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in proc.stdout + proc.stderr


def test_promtool_check_refuses_a_broken_rule(
    promtool_binary: PrometheusBinary, tmp_path: Path
) -> None:
    """The check above can fail: a syntax error in an alert's expression is reported."""
    groups = copy.deepcopy(rule_groups())
    groups[0]["rules"][0]["expr"] = "sum by (job (up)"
    rules = write_rules(tmp_path, groups)
    proc = run_promtool(promtool_binary, "check", "rules", rules.name, cwd=tmp_path)
    assert proc.returncode != 0
    assert "parse error" in proc.stdout + proc.stderr


def test_promtool_unit_tests_pass(promtool_binary: PrometheusBinary, tmp_path: Path) -> None:
    write_rules(tmp_path)
    proc = run_promtool(promtool_binary, "test", "rules", RULES_TEST_FILE.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_every_alert_is_unit_tested_firing_and_not_firing() -> None:
    tests = yaml.safe_load(RULES_TEST_FILE.read_text(encoding="utf-8"))["tests"]
    checks = [c for t in tests for c in t.get("alert_rule_test") or []]
    for name in EXPECTED_ALERTS:
        mine = [c for c in checks if c["alertname"] == name]
        assert any(c["exp_alerts"] for c in mine), f"{name}: no test where it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{name}: no test where it does not"


@pytest.mark.parametrize("alert", sorted(EXPECTED_ALERTS))
@pytest.mark.parametrize("mutation", ["fires at once", "never fires"])
def test_the_unit_tests_catch_a_wrong_alert(
    promtool_binary: PrometheusBinary, tmp_path: Path, alert: str, mutation: str
) -> None:
    """Each alert's unit tests fail when its `for:` is dropped (it would fire before the
    condition held long enough) and when its expression never matches."""
    groups = copy.deepcopy(rule_groups())
    (rule,) = [r for r in alerts(groups) if r["alert"] == alert]
    if mutation == "fires at once":
        rule["for"] = "0s"
    else:
        rule["expr"] = "vector(1) == 0"
    write_rules(tmp_path, groups)
    proc = run_promtool(promtool_binary, "test", "rules", RULES_TEST_FILE.name, cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"the unit tests did not notice {alert} {mutation}:\n{output}"
    assert f"alertname: {alert}," in output, output


@pytest.mark.parametrize("overlay", overlay_names())
def test_the_podmonitor_selects_the_operator_pods_metrics_port(
    monitoring_build: list[dict[str, Any]], overlay: str
) -> None:
    """As each overlay deploys the operator: the PodMonitor's namespace and label selector
    match its pods, its port name is the container port the operator serves metrics on
    (SPILLOVER_METRICS_PORT), and the job label it sets is the one the alerts select."""
    monitor = find(monitoring_build, "PodMonitor", "spillover-operator")
    deployment = find(build(MANIFESTS / "overlays" / overlay), "Deployment", "spillover-operator")
    spec = monitor["spec"]
    template = deployment["spec"]["template"]
    pod_labels = template["metadata"]["labels"]

    assert deployment["metadata"]["namespace"] in spec["namespaceSelector"]["matchNames"]
    assert not spec["selector"].get("matchExpressions")
    for key, value in spec["selector"]["matchLabels"].items():
        assert pod_labels.get(key) == value, f"pods lack {key}={value}: {pod_labels}"
    assert pod_labels.get(spec["jobLabel"]) == JOB

    (endpoint,) = spec["podMetricsEndpoints"]
    (container,) = [c for c in template["spec"]["containers"] if c["name"] == "operator"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert endpoint["port"] in ports, f"no container port named {endpoint['port']}: {ports}"
    env = container_env(deployment, "operator")
    assert str(ports[endpoint["port"]]) == env["SPILLOVER_METRICS_PORT"]
    assert endpoint["path"] == "/metrics"
    # The policy series' `namespace` (the WRC's) must survive the scrape.
    assert endpoint["honorLabels"] is True


def test_the_alerts_and_the_dashboard_select_the_podmonitor_job() -> None:
    down = next(a for a in alerts() if a["alert"] == "SpilloverOperatorDown")
    assert f'job="{JOB}"' in down["expr"]
    ups = [q for q in queries() if q.expr.startswith("up{")]
    assert ups and all(f'job="{JOB}"' in q.expr for q in ups)


def test_the_dashboard_defines_every_variable_its_queries_use() -> None:
    board = dashboard()
    defined = {v["name"] for v in board["templating"]["list"]}
    grafana_builtin = {"__rate_interval", "__interval", "__range"}
    assert queries(board), "the dashboard has no queries"
    for q in queries(board):
        assert variables_used(q.expr) <= defined | grafana_builtin, (q.panel, q.expr)
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
