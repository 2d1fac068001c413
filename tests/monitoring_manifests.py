"""The monitoring manifests (manifests/monitoring/) as the tests read them: the
PrometheusRule's rule groups as a plain Prometheus rules file, the Grafana dashboard's
queries with its template variables filled in, and the scrape job the PodMonitor
makes. One place, so the promtool tests and the dashboard test read them alike."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from repo_paths import MANIFESTS

MONITORING = MANIFESTS / "monitoring"
RULE_FILE = MONITORING / "prometheusrule.yaml"
PODMONITOR_FILE = MONITORING / "podmonitor.yaml"
DASHBOARD_FILE = MONITORING / "dashboard.json"
RULES_TEST_FILE = MONITORING / "tests" / "rules-test.yaml"
# The name rules-test.yaml's `rule_files` gives the extracted rules.
RULES_FILE_NAME = "spillover-operator.rules.yaml"
# The job label the PodMonitor gives the operator's series (its `jobLabel` is the pod
# label app.kubernetes.io/name); the alerts and the dashboard select it.
JOB = "spillover-operator"


def rule_groups(rule: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """spec.groups of the PrometheusRule (the shipped file unless one is given)."""
    doc = rule if rule is not None else yaml.safe_load(RULE_FILE.read_text(encoding="utf-8"))
    assert doc["kind"] == "PrometheusRule", doc["kind"]
    return [dict(g) for g in doc["spec"]["groups"]]


def alerts(groups: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every alerting rule, in order."""
    return [r for g in (groups or rule_groups()) for r in g["rules"] if "alert" in r]


def write_rules(directory: Path, groups: list[dict[str, Any]] | None = None) -> Path:
    """The groups as a Prometheus rules file, with the unit tests copied beside it (their
    `rule_files` names it). Returns the rules file."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / RULES_FILE_NAME
    path.write_text(
        yaml.safe_dump({"groups": groups or rule_groups()}, sort_keys=False), encoding="utf-8"
    )
    shutil.copyfile(RULES_TEST_FILE, directory / RULES_TEST_FILE.name)
    return path


def dashboard() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))
    return found


@dataclass(frozen=True)
class Query:
    panel: str
    ref_id: str
    expr: str


def panels(board: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    out: list[dict[str, Any]] = []
    for panel in (board or dashboard())["panels"]:
        out.append(panel)
        out.extend(panel.get("panels") or [])
    return out


def queries(board: Mapping[str, Any] | None = None) -> list[Query]:
    """The `expr` of every target of every panel."""
    return [
        Query(p["title"], t["refId"], t["expr"])
        for p in panels(board)
        for t in p.get("targets") or []
        if "expr" in t
    ]


_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def variables_used(expr: str) -> set[str]:
    return {a or b for a, b in _VARIABLE.findall(expr)}


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """`$name` / `${name}` replaced as Grafana does; a variable without a value raises."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise KeyError(f"no value for ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(one, expr)
