"""Each shipped overlay renders (`kubectl kustomize`) into a consistent confused-deputy
defence: the Role may patch only the allowed Deployment, the operator allows only it,
and the admission policy holds the same list, written in at build time. No cluster
needed; kubectl is."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kustomize_build import build, container_env, find, kubectl, overlay_names
from repo_paths import MANIFESTS, REPO_ROOT
from spillover_operator.domain.allowlist import ALLOWED_TARGETS_VAR, parse
from spillover_operator.domain.constants import DEFAULT_TARGET

WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "*"}
ALLOWED_CM = "spillover-allowed-targets"


def _deployment_rules(role: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        r
        for r in role["rules"]
        if {"apps", "*"} & set(r.get("apiGroups", []))
        and {"deployments", "*"} & set(r.get("resources", []))
    ]


def built_in_lists(vap: dict[str, Any]) -> dict[str, str]:
    """The lists written into the policy spillover-allowed-targets at build time:
    variable -> its expression's leading CEL string (checked to be one: a value with a
    quote or backslash would change the expression, not the list)."""
    lists = {}
    for variable in vap["spec"]["variables"]:
        if variable["name"] in ("allowed", "allowedSelectors", "allowedRefresh"):
            expression = variable["expression"]
            value = expression.split("'")[1]
            assert "\\" not in value and expression.startswith(f"'{value}'.split("), expression
            lists[variable["name"]] = value
    return lists


def check_build(docs: list[dict[str, Any]]) -> tuple[str, ...]:
    """The allowed names of a build, after checking every consumer agrees on them."""
    cm = find(docs, "ConfigMap", ALLOWED_CM)
    names = parse(cm["data"]["deployments"]).names
    assert not parse(cm["data"]["deployments"]).defaulted, "the ConfigMap names no Deployment"

    role = find(docs, "Role", "spillover-operator")
    rules = _deployment_rules(role)
    writes = [r for r in rules if WRITE_VERBS & set(r["verbs"])]
    assert writes, "the Role grants no patch on Deployments: the operator could not work"
    for rule in writes:
        assert set(rule["verbs"]) == {"patch"}, f"more than patch on Deployments: {rule}"
        assert tuple(rule.get("resourceNames") or ()) == names, (
            f"the Role may patch Deployments {rule.get('resourceNames')}, the allow-list "
            f"names {list(names)}"
        )
    # kopf watches Deployments: list/watch cannot be narrowed by name.
    reads = set().union(*(set(r["verbs"]) for r in rules if not r.get("resourceNames")))
    assert {"get", "list", "watch"} <= reads

    operator = find(docs, "Deployment", "spillover-operator")
    env = container_env(operator, "operator")
    assert parse(env[ALLOWED_TARGETS_VAR]).names == names

    vap = find(docs, "ValidatingAdmissionPolicy", ALLOWED_CM)
    binding = find(docs, "ValidatingAdmissionPolicyBinding", ALLOWED_CM)
    assert vap["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert vap["spec"]["failurePolicy"] == "Fail"
    rule = vap["spec"]["matchConstraints"]["resourceRules"][0]
    assert rule["apiGroups"] == ["spillover.clerum.io"]
    assert rule["resources"] == ["spilloverpolicies"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}
    # The lists are the ConfigMap's, written in when the overlay is built (no paramRef:
    # test_no_shipped_policy_reads_a_parameter says why).
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
    assert built_in_lists(vap) == {
        "allowed": cm["data"]["deployments"],
        "allowedSelectors": cm["data"]["recipeSelectors"],
        "allowedRefresh": cm["data"]["recipeRefresh"],
    }
    return names


@pytest.mark.parametrize("overlay", overlay_names())
def test_overlay_builds_with_patch_rbac_admission_and_operator_on_one_list(overlay: str) -> None:
    names = check_build(build(MANIFESTS / "overlays" / overlay))
    assert names == (DEFAULT_TARGET,)


def test_base_builds_consistently() -> None:
    assert check_build(build(MANIFESTS / "base")) == (DEFAULT_TARGET,)


def test_the_name_set_in_one_place_reaches_rbac_operator_and_admission(tmp_path: Path) -> None:
    """An overlay as a platform team writes one: only the ConfigMap literal changes."""
    dev = (MANIFESTS / "overlays" / "dev" / "kustomization.yaml").read_text()
    assert dev.count(f"deployments={DEFAULT_TARGET}") == 1
    overlay = tmp_path / "mine"
    overlay.mkdir()
    text = dev.replace(f"deployments={DEFAULT_TARGET}", "deployments=wrc-prod")
    # kustomize takes no absolute paths: reach the shipped base from tmp relatively.
    text = text.replace("../../", f"{os.path.relpath(MANIFESTS, overlay)}/")
    (overlay / "kustomization.yaml").write_text(text)
    docs = build(overlay)
    assert check_build(docs) == ("wrc-prod",)
    assert DEFAULT_TARGET not in str(find(docs, "Role", "spillover-operator"))


def test_the_recipe_lists_set_in_the_overlay_reach_the_targets_policy(tmp_path: Path) -> None:
    """The recipe selectors and refresh modes a policy may ask for: set in the overlay's
    literals, written into the admission policy (which reads no ConfigMap live)."""
    dev = (MANIFESTS / "overlays" / "dev" / "kustomization.yaml").read_text()
    anchor = f"      - deployments={DEFAULT_TARGET}\n"
    assert dev.count(anchor) == 1
    overlay = tmp_path / "mine"
    overlay.mkdir()
    literals = (
        "      - recipeSelectors=app.kubernetes.io/name=mcp-host,recipe=r1; team=ml\n"
        "      - recipeRefresh=OnKillSwitch,Always\n"
    )
    text = dev.replace(anchor, anchor + literals)
    text = text.replace("../../", f"{os.path.relpath(MANIFESTS, overlay)}/")
    (overlay / "kustomization.yaml").write_text(text)
    docs = build(overlay)
    check_build(docs)
    assert built_in_lists(find(docs, "ValidatingAdmissionPolicy", ALLOWED_CM)) == {
        "allowed": DEFAULT_TARGET,
        "allowedSelectors": "app.kubernetes.io/name=mcp-host,recipe=r1; team=ml",
        "allowedRefresh": "OnKillSwitch,Always",
    }


def shipped_builds(tmp_path: Path) -> dict[str, list[dict[str, Any]]]:
    """base, every overlay, and the dev overlay with every component included."""
    builds = {"base": build(MANIFESTS / "base")}
    for name in overlay_names():
        builds[name] = build(MANIFESTS / "overlays" / name)
    dev = (MANIFESTS / "overlays" / "dev" / "kustomization.yaml").read_text()
    component = "  - ../../components/allowed-targets\n"
    assert dev.count(component) == 1
    overlay = tmp_path / "every-component"
    overlay.mkdir()
    components = sorted(p.name for p in (MANIFESTS / "components").iterdir() if p.is_dir())
    extra = "".join(f"  - ../../components/{c}\n" for c in components if c != "allowed-targets")
    text = dev.replace(component, component + extra)
    text = text.replace("../../", f"{os.path.relpath(MANIFESTS, overlay)}/")
    (overlay / "kustomization.yaml").write_text(text)
    builds["dev+components"] = build(overlay)
    return builds


def test_no_shipped_policy_reads_a_parameter(tmp_path: Path) -> None:
    """No admission policy of any build takes a parameter (paramKind, paramRef): the
    API server (kube-apiserver v1.36) stops its informer for a core-type paramKind such
    as ConfigMap once no binding uses it for about a second (`make undeploy` then
    `make deploy`) and never restarts it, after which the policy refuses every matched
    write ("no params found for policy binding with `Deny` parameterNotFoundAction") or
    checks an outdated copy, until the API server restarts: kubernetes/kubernetes#130887
    (fix PR #141015; its backport #142150 is not merged). For spillover-allowed-targets
    that refuses `spilloverctl kill`. Lists go into the policies at build time instead."""
    for build_name, docs in shipped_builds(tmp_path).items():
        policies = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
        bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
        assert policies and bindings, build_name
        for vap in policies:
            assert "paramKind" not in vap["spec"], (build_name, vap["metadata"]["name"])
        for binding in bindings:
            assert "paramRef" not in binding["spec"], (build_name, binding["metadata"]["name"])


def test_a_missing_kubectl_fails_naming_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPILLOVER_KUBECTL_CACHE", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match=r"kubectl is not built: .*make kubectl"):
        kubectl()


def test_the_kubectl_is_ours_at_the_control_planes_version() -> None:
    """The tests' kubectl is built from the module the control plane pins, at the same
    version (kubectl supports one minor of skew; a machine's own may be far off)."""

    def pinned(go_mod: Path) -> str:
        found = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", go_mod.read_text(), re.M)
        assert found, go_mod
        return found.group(1)

    tests = REPO_ROOT / "tests"
    version = pinned(tests / "kubectl" / "go.mod")
    assert version == pinned(tests / "controlplane" / "go.mod")
    binary = kubectl()
    said = subprocess.run(
        [binary, "version", "--client", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert json.loads(said)["clientVersion"]["gitVersion"] == version


def test_a_second_wrc_is_one_list_and_one_patch_without_names(tmp_path: Path) -> None:
    """Two WRC Deployments as manifests/README.md shows: both in the one literal, and
    the patch that takes the single name off the Role's rule (kustomize cannot split
    the list into resourceNames), so that the admission policy on the operator's writes
    narrows it: no Role names "" or "wrc-a,wrc-b", the operator gets both names."""
    readme = (MANIFESTS / "README.md").read_text()
    patch = (
        "  - target: {kind: Role, name: spillover-operator}\n"
        "    patch: |-\n"
        "      - op: remove\n"
        "        path: /rules/0/resourceNames\n"
    )
    assert patch in readme  # the patch users copy is the one tested
    dev = (MANIFESTS / "overlays" / "dev" / "kustomization.yaml").read_text()
    assert dev.count("patches:\n") == 1
    overlay = tmp_path / "two"
    overlay.mkdir()
    text = dev.replace(f"deployments={DEFAULT_TARGET}", "deployments=wrc-a,wrc-b")
    text = text.replace("patches:\n", "patches:\n" + patch)
    text = text.replace("../../", f"{os.path.relpath(MANIFESTS, overlay)}/")
    (overlay / "kustomization.yaml").write_text(text)
    docs = build(overlay)

    writes = [
        r
        for r in _deployment_rules(find(docs, "Role", "spillover-operator"))
        if "patch" in r["verbs"]
    ]
    assert writes == [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["patch"]}]
    env = container_env(find(docs, "Deployment", "spillover-operator"), "operator")
    assert parse(env[ALLOWED_TARGETS_VAR]).names == ("wrc-a", "wrc-b")
    vap = find(docs, "ValidatingAdmissionPolicy", "spillover-operator-writes")
    (deployments,) = [v for v in vap["spec"]["variables"] if v["name"] == "deployments"]
    assert deployments["expression"].startswith("'wrc-a,wrc-b'.split(',')")
    for role in (d for d in docs if d["kind"] == "Role"):
        for rule in role["rules"]:
            assert all(n and "," not in n for n in rule.get("resourceNames") or []), rule
