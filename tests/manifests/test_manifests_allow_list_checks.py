"""The allow-list ConfigMap's values are checked when an overlay is built (`kubectl
kustomize`, as `kubectl apply -k` builds it): they are copied into the operator's Role,
its env and the CEL of the admission policies, so an empty `deployments` would render a
Role rule naming "" and a quote or backslash would change a policy's expression instead
of its list. A malformed value stops the build, with a message naming the key, the value
and the fix; well-formed values build as before, and the checks are never rendered
(manifests/base/allowed-targets-checks.yaml, manifests/components/allowed-targets)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kustomize_build import build, build_refusal, find
from repo_paths import MANIFESTS

ALLOWED_CM = "spillover-allowed-targets"
WRC_LITERAL = "      - deployments=workflow-recipe-controller\n"
# The policies' list variables and the ConfigMap key each one holds.
POLICY_LISTS = {
    ("spillover-allowed-targets", "allowed"): "deployments",
    ("spillover-allowed-targets", "allowedSelectors"): "recipeSelectors",
    ("spillover-allowed-targets", "allowedRefresh"): "recipeRefresh",
    ("spillover-operator-writes", "deployments"): "deployments",
    ("spillover-operator-writes", "recipeDeployments"): "recipeDeployments",
    ("spillover-operator-writes", "recipeStatefulSets"): "recipeStatefulSets",
}


def overlay(tmp_path: Path, literals: dict[str, str]) -> Path:
    """The dev overlay with the refresh opt-in (so that every key reaches a policy) and
    these ConfigMap literals, written as a platform team writes them; `deployments`
    replaces the dev overlay's own."""
    dev = (MANIFESTS / "overlays" / "dev" / "kustomization.yaml").read_text()
    component = "  - ../../components/allowed-targets\n"
    assert dev.count(WRC_LITERAL) == 1 and dev.count(component) == 1
    given = {"deployments": "workflow-recipe-controller", **literals}
    lines = "".join(f"      - {json.dumps(f'{k}={v}')}\n" for k, v in given.items())
    text = dev.replace(WRC_LITERAL, lines)
    text = text.replace(component, component + "  - ../../components/recipe-pods-refresh\n")
    path = tmp_path / "mine"
    path.mkdir()
    text = text.replace("../../", f"{os.path.relpath(MANIFESTS, path)}/")
    (path / "kustomization.yaml").write_text(text)
    return path


def check_refusal(error: str, key: str, value: str) -> None:
    """The build's error names the ConfigMap key, shows the value and says how to fix
    it (the literal of the overlay)."""
    flat = " ".join(error.split())
    assert f"data.{key} of ConfigMap spillover-system/{ALLOWED_CM} is `{value}`:" in flat, error
    assert f"Fix the {key}= literal" in flat or f"Set the {key}= literal" in flat, error
    assert "build again" in flat, error


@pytest.mark.parametrize("value", ["", ",", " , "])
def test_a_deployments_list_naming_nothing_is_refused(tmp_path: Path, value: str) -> None:
    """An empty list would render `resourceNames: [""]` in the operator's Role (a rule
    that looks like a grant and grants nothing) while the operator falls back to its
    default target: the build stops instead, naming the key and the fix."""
    error = build_refusal(overlay(tmp_path, {"deployments": value}))
    check_refusal(error, "deployments", value)
    assert "for example deployments=workflow-recipe-controller" in " ".join(error.split())


# Each key that goes into a policy's CEL string, with a quote, a backslash, and a value
# well-formed but for its kind (an uppercase name, a selector without a value's '=', a
# mode the CRD does not know).
MALFORMED = [
    ("deployments", "workflow-recipe-controller','payments-api"),
    ("deployments", "wrc\\"),
    ("deployments", "Workflow-Recipe-Controller"),
    ("deployments", "wrc,,payments-api"),
    ("recipeDeployments", "mcp-host-r1'"),
    ("recipeDeployments", "mcp-host-r1\\,x"),
    ("recipeStatefulSets", "mcp-host-s1' + 'x"),
    ("recipeStatefulSets", "mcp_host"),
    # The recipe lists go into the refresh Role name by name: no spaces, at most 16.
    ("recipeDeployments", "mcp-host-r1, mcp-host-r2"),
    ("recipeStatefulSets", "mcp-host-s1 ,mcp-host-s2"),
    ("recipeDeployments", ",".join(f"mcp-host-r{i}" for i in range(17))),
    ("recipeSelectors", "app.kubernetes.io/name=mcp-host'"),
    ("recipeSelectors", "app=mcp-host\\"),
    ("recipeSelectors", "app.kubernetes.io/name"),
    ("recipeSelectors", "app=mcp-host,"),
    ("recipeRefresh", "Always'"),
    ("recipeRefresh", "Never\\"),
    ("recipeRefresh", "always"),
]


@pytest.mark.parametrize(("key", "value"), MALFORMED)
def test_a_malformed_value_is_refused_before_it_reaches_rbac_or_cel(
    tmp_path: Path, key: str, value: str
) -> None:
    error = build_refusal(overlay(tmp_path, {key: value}))
    check_refusal(error, key, value)


def test_two_malformed_keys_with_the_same_value_are_refused_naming_one(tmp_path: Path) -> None:
    error = build_refusal(
        overlay(tmp_path, {"recipeDeployments": "x'", "recipeStatefulSets": "x'"})
    )
    assert re.search(r"data\.recipe(Deployments|StatefulSets) of ConfigMap", error), error


WELL_FORMED: list[dict[str, str]] = [
    {},
    {
        "deployments": "wrc-a, wrc-b",
        "recipeDeployments": "mcp-host-r1,mcp-host-r2,mcp-host-r3",
        "recipeStatefulSets": "mcp-host-s1,mcp-host-s2",
        "recipeSelectors": "app.kubernetes.io/name=mcp-host,recipe=r1; team = ml , tier=",
        "recipeRefresh": "OnKillSwitch, Always,Never",
    },
    {
        "deployments": "wrc.prod",
        "recipeDeployments": "",
        "recipeStatefulSets": "",
        "recipeSelectors": "",
        "recipeRefresh": "",
    },
    {
        "recipeDeployments": ",".join(f"mcp-host-r{i}" for i in range(16)),
        "recipeStatefulSets": ",".join(f"db.s{i}" for i in range(16)),
    },
]


@pytest.mark.parametrize("literals", WELL_FORMED)
def test_well_formed_lists_build_into_one_cel_string_each_and_no_check_is_rendered(
    tmp_path: Path, literals: dict[str, str]
) -> None:
    """Each policy's expression is the shipped one with the list in its CEL string."""
    shipped = build(MANIFESTS / "base")
    docs = build(overlay(tmp_path, literals))
    assert not [d for d in docs if d["kind"] == "AllowListCheck"]
    data = find(docs, "ConfigMap", ALLOWED_CM)["data"]
    shipped_data = find(shipped, "ConfigMap", ALLOWED_CM)["data"]
    for (policy, variable), key in POLICY_LISTS.items():
        expression = list_expression(docs, policy, variable)
        original = list_expression(shipped, policy, variable)
        assert original.startswith(f"'{shipped_data[key]}'.split(")
        want = f"'{data[key]}'" + original.removeprefix(f"'{shipped_data[key]}'")
        assert expression == want, (policy, variable)


def list_expression(docs: list[dict[str, Any]], policy: str, variable: str) -> str:
    vap = find(docs, "ValidatingAdmissionPolicy", policy)
    (expression,) = [v["expression"] for v in vap["spec"]["variables"] if v["name"] == variable]
    return str(expression)


def test_every_key_of_the_allow_list_has_a_check() -> None:
    """A key added to the ConfigMap is copied somewhere: it needs a check too."""
    base = build(MANIFESTS / "base")
    keys = set(find(base, "ConfigMap", ALLOWED_CM)["data"])
    checks: list[dict[str, Any]] = list(
        yaml.safe_load_all((MANIFESTS / "base" / "allowed-targets-checks.yaml").read_text())
    )
    messages = [
        c["metadata"]["annotations"]["spillover.clerum.io/refused"]
        for c in checks
        if "spillover.clerum.io/refused" in c["metadata"].get("annotations", {})
    ]
    checked = {m.split(" ", 1)[0].removeprefix("data.") for m in messages}
    assert checked == keys
    assert set(POLICY_LISTS.values()) == keys
