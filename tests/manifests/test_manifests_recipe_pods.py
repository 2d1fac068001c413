"""The recipe-pod RBAC of the shipped manifests (`kubectl kustomize`): the operator's
Role reads pods, their ReplicaSets and ConfigMaps (never Secrets) and restarts nothing;
restarting recipe workloads is an opt-in component whose Role names exactly the
workloads the allow-list ConfigMap lists (resourceNames, one name per entry, however
many up to 16 of each kind; no rule for an empty list), the same names the admission
policy spillover-operator-writes and the operator are given. No Role names "" or a
comma-joined list. (On the API server: tests/integration/test_confused_deputy.py.)"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kustomize_build import build, container_env, find, overlay_names
from repo_paths import MANIFESTS
from spillover_operator.domain.allowlist import (
    ALLOWED_TARGETS_VAR,
    REFRESH_DEPLOYMENTS_VAR,
    REFRESH_STATEFULSETS_VAR,
    refresh_allow_list,
)
from spillover_operator.domain.recipe_pods import Owner

# A Deployment's or StatefulSet's name (DNS-1123 subdomain).
DNS_1123 = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")

REFRESH = "spillover-operator-refresh"
ALLOWED_CM = "spillover-allowed-targets"
REFRESHER = "spillover-recipe-pods-refresher"
WRITES = "spillover-operator-writes"
REFRESH_COMPONENT = MANIFESTS / "components" / "recipe-pods-refresh"
# How many names of each kind the refresh Role takes (components/recipe-pods-refresh/
# names/slots.yaml; the allow-list checks refuse more).
SLOTS = 16


def refresh_rules(deployments: list[str], statefulsets: list[str]) -> list[dict[str, Any]]:
    """The refresh Role exactly: patch on the listed Deployments, get and patch on the
    listed StatefulSets (a StatefulSet's refresh is judged by its status), never pods;
    no rule for an empty list (a rule without resourceNames would name every one)."""
    rules = []
    if deployments:
        rules.append(
            {
                "apiGroups": ["apps"],
                "resources": ["deployments"],
                "verbs": ["patch"],
                "resourceNames": deployments,
            }
        )
    if statefulsets:
        rules.append(
            {
                "apiGroups": ["apps"],
                "resources": ["statefulsets"],
                "verbs": ["get", "patch"],
                "resourceNames": statefulsets,
            }
        )
    return rules


def names(value: str) -> list[str]:
    return [n for n in value.split(",") if n]


def check_refresh_role_names_the_configmap_lists(docs: list[dict[str, Any]]) -> None:
    """The refresh Role, the admission policy and the operator hold the same lists, the
    ConfigMap's: the Role name by name."""
    data = find(docs, "ConfigMap", ALLOWED_CM)["data"]
    deployments, statefulsets = names(data["recipeDeployments"]), names(data["recipeStatefulSets"])
    role = find(docs, "Role", REFRESH)
    assert role["rules"] == refresh_rules(deployments, statefulsets)
    main = find(docs, "Role", "spillover-operator")
    assert role["metadata"]["namespace"] == main["metadata"]["namespace"]
    lists = policy_lists(find(docs, "ValidatingAdmissionPolicy", WRITES))
    assert names(lists["recipeDeployments"]) == deployments
    assert names(lists["recipeStatefulSets"]) == statefulsets
    env = container_env(find(docs, "Deployment", "spillover-operator"), "operator")
    assert refresh_allow_list(env).owners == frozenset(
        {Owner("Deployment", n) for n in deployments}
        | {Owner("StatefulSet", n) for n in statefulsets}
    )


def _grants(role: dict[str, Any], *, named: bool = False) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) for every rule without resourceNames (`named`: every
    rule)."""
    return {
        (group, resource, verb)
        for rule in role["rules"]
        if named or not rule.get("resourceNames")
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def check_recipe_rbac(docs: list[dict[str, Any]]) -> None:
    """The operator's main Role: reads only, for the recipe pods."""
    role = find(docs, "Role", "spillover-operator")
    grants = _grants(role)
    for verb in ("get", "list", "watch"):
        assert ("", "pods", verb) in grants, f"the operator's Role lacks {verb} pods"
    assert ("apps", "replicasets", "get") in grants
    assert ("apps", "replicasets", "list") in grants
    assert ("", "configmaps", "get") in grants
    assert ("", "configmaps", "list") in grants  # one LIST per reconcile, not a GET each
    assert not any(r == "secrets" for _, r, _ in grants), "the operator must not read Secrets"
    every = _grants(role, named=True)
    assert ("", "pods", "delete") not in every
    assert ("apps", "statefulsets", "patch") not in every


def refresh_docs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["metadata"].get("name") == REFRESH]


# The local test cluster's overlay opts in (its scenario refreshes mcp-host-r1), as the
# README shows users; every overlay users run ships without refresh.
LOCAL = "local"


@pytest.mark.parametrize("overlay", [o for o in overlay_names() if o != LOCAL])
def test_overlays_read_pods_and_grant_no_refresh(overlay: str) -> None:
    docs = build(MANIFESTS / "overlays" / overlay)
    check_recipe_rbac(docs)
    no_empty_or_joined_names(docs)
    check_operator_writes_policy(docs)
    assert refresh_docs(docs) == []
    env = container_env(find(docs, "Deployment", "spillover-operator"), "operator")
    assert REFRESH_DEPLOYMENTS_VAR not in env and REFRESH_STATEFULSETS_VAR not in env
    assert find(docs, "ConfigMap", ALLOWED_CM)["data"]["recipeRefresh"] == "Never"


def test_base_reads_pods_and_grants_no_refresh() -> None:
    docs = build(MANIFESTS / "base")
    check_recipe_rbac(docs)
    assert refresh_docs(docs) == []


def opted_in(tmp_path: Path, literals: list[str]) -> list[dict[str, Any]]:
    """The dev overlay plus the opt-in as manifests/README.md shows it: the ConfigMap's
    recipe literals and the component."""
    dev = (MANIFESTS / "overlays" / "dev" / "kustomization.yaml").read_text()
    anchor = "      - deployments=workflow-recipe-controller\n"
    assert dev.count(anchor) == 1
    component = "  - ../../components/allowed-targets\n"
    assert dev.count(component) == 1
    overlay = tmp_path / "refresh"
    overlay.mkdir()
    text = dev.replace(anchor, anchor + "".join(f"      - {lit}\n" for lit in literals))
    text = text.replace(component, component + "  - ../../components/recipe-pods-refresh\n")
    text = text.replace("../../", f"{os.path.relpath(MANIFESTS, overlay)}/")
    (overlay / "kustomization.yaml").write_text(text)
    return build(overlay)


def policy_lists(vap: dict[str, Any]) -> dict[str, str]:
    """The name lists written into the policy spillover-operator-writes at build time:
    variable -> the text between the first two quotes of its expression."""
    return {
        v["name"]: v["expression"].split("'")[1]
        for v in vap["spec"]["variables"]
        if v["name"] in ("deployments", "recipeDeployments", "recipeStatefulSets")
    }


def check_operator_writes_policy(docs: list[dict[str, Any]]) -> None:
    """The admission policy that narrows the operator's writes: bound (Deny), matching
    the ServiceAccount the operator's RoleBindings bind, on Deployments and
    StatefulSets, with the lists of the allow-list ConfigMap the operator is given (the
    recipe lists only with the refresh component)."""
    vap = find(docs, "ValidatingAdmissionPolicy", WRITES)
    binding = find(docs, "ValidatingAdmissionPolicyBinding", WRITES)
    data = find(docs, "ConfigMap", ALLOWED_CM)["data"]
    assert vap["spec"]["failurePolicy"] == "Fail"
    assert "paramKind" not in vap["spec"]  # no live read: kubernetes/kubernetes#130887
    assert binding["spec"] == {"policyName": WRITES, "validationActions": ["Deny"]}
    (rule,) = vap["spec"]["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["apps"]
    assert set(rule["resources"]) == {"deployments", "statefulsets"}
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    # The identity the operator's Roles are bound to is the one the policy narrows.
    bindings = ["spillover-operator"] + ([REFRESH] if refresh_docs(docs) else [])
    (condition,) = vap["spec"]["matchConditions"]
    for name in bindings:
        (subject,) = find(docs, "RoleBinding", name)["subjects"]
        user = f"system:serviceaccount:{subject['namespace']}:{subject['name']}"
        assert condition["expression"].strip() == f"request.userInfo.username == '{user}'"
    opted = bool(refresh_docs(docs))
    assert policy_lists(vap) == {
        "deployments": data["deployments"],
        "recipeDeployments": data["recipeDeployments"] if opted else "",
        "recipeStatefulSets": data["recipeStatefulSets"] if opted else "",
    }
    env = container_env(find(docs, "Deployment", "spillover-operator"), "operator")
    assert env[ALLOWED_TARGETS_VAR] == data["deployments"]


def no_empty_or_joined_names(docs: list[dict[str, Any]]) -> None:
    """No Role of the build names "" (a rule that looks like a grant and grants
    nothing) or a comma-joined list (a name no object has)."""
    for role in (d for d in docs if d["kind"] == "Role"):
        for rule in role["rules"]:
            for name in rule.get("resourceNames") or []:
                assert name and "," not in name, (role["metadata"]["name"], rule)


def test_the_opt_in_grants_the_refresh_and_admission_narrows_it_to_the_allowed_workloads(
    tmp_path: Path,
) -> None:
    docs = opted_in(
        tmp_path,
        ["recipeDeployments=mcp-host-r1", "recipeStatefulSets=mcp-host-s1", "recipeRefresh=Always"],
    )
    check_recipe_rbac(docs)
    no_empty_or_joined_names(docs)
    check_operator_writes_policy(docs)
    check_refresh_role_names_the_configmap_lists(docs)
    role = find(docs, "Role", REFRESH)
    main = find(docs, "Role", "spillover-operator")
    assert role["rules"] == refresh_rules(["mcp-host-r1"], ["mcp-host-s1"])
    binding = find(docs, "RoleBinding", REFRESH)
    assert binding["roleRef"]["name"] == REFRESH
    assert binding["metadata"]["namespace"] == main["metadata"]["namespace"]
    assert binding["subjects"] == find(docs, "RoleBinding", "spillover-operator")["subjects"]

    # The operator is given the same names, and restarts nothing else.
    env = container_env(find(docs, "Deployment", "spillover-operator"), "operator")
    allowed = refresh_allow_list(env)
    assert allowed.owners == frozenset(
        {Owner("Deployment", "mcp-host-r1"), Owner("StatefulSet", "mcp-host-s1")}
    )
    assert find(docs, "ConfigMap", ALLOWED_CM)["data"]["recipeRefresh"] == "Always"


def test_several_recipe_deployments_are_one_list_in_the_configmap(tmp_path: Path) -> None:
    """Three recipe Deployments and two StatefulSets, listed once each in the ConfigMap:
    no Role to patch by hand; the Role, the operator and the admission policy get every
    name."""
    docs = opted_in(
        tmp_path,
        [
            "recipeDeployments=mcp-host-r1,mcp-host-r2,mcp-host-r3",
            "recipeStatefulSets=mcp-host-s1,mcp-host-s2",
            "recipeRefresh=OnKillSwitch",
        ],
    )
    no_empty_or_joined_names(docs)
    check_operator_writes_policy(docs)
    check_refresh_role_names_the_configmap_lists(docs)
    assert find(docs, "Role", REFRESH)["rules"] == refresh_rules(
        ["mcp-host-r1", "mcp-host-r2", "mcp-host-r3"], ["mcp-host-s1", "mcp-host-s2"]
    )
    data = find(docs, "ConfigMap", ALLOWED_CM)["data"]
    assert data["recipeDeployments"] == "mcp-host-r1,mcp-host-r2,mcp-host-r3"
    assert data["recipeStatefulSets"] == "mcp-host-s1,mcp-host-s2"
    env = container_env(find(docs, "Deployment", "spillover-operator"), "operator")
    assert refresh_allow_list(env).owners == frozenset(
        {Owner("Deployment", f"mcp-host-r{i}") for i in (1, 2, 3)}
        | {Owner("StatefulSet", f"mcp-host-s{i}") for i in (1, 2)}
    )


def test_the_opt_in_without_names_renders_no_empty_name_and_names_nothing(
    tmp_path: Path,
) -> None:
    docs = opted_in(tmp_path, [])
    no_empty_or_joined_names(docs)
    check_operator_writes_policy(docs)
    check_refresh_role_names_the_configmap_lists(docs)
    assert find(docs, "Role", REFRESH)["rules"] == []  # names nothing, grants nothing
    data = find(docs, "ConfigMap", ALLOWED_CM)["data"]
    assert data["recipeDeployments"] == data["recipeStatefulSets"] == ""
    env = container_env(find(docs, "Deployment", "spillover-operator"), "operator")
    assert refresh_allow_list(env).owners == frozenset()


@pytest.mark.parametrize(
    ("deployments", "statefulsets"),
    [
        ([f"mcp-host-r{i}" for i in range(1, SLOTS + 1)], [f"db-{i}.x" for i in range(SLOTS)]),
        ([], ["mcp-host-s1"]),
        (["mcp-host-r1", "mcp-host-r1"], []),
        ([f"d{i}" for i in range(SLOTS - 1, -1, -1)], [f"s{i}" for i in range(SLOTS // 2)]),
    ],
)
def test_the_refresh_role_names_every_listed_workload_up_to_sixteen_of_each_kind(
    tmp_path: Path, deployments: list[str], statefulsets: list[str]
) -> None:
    """However many names a list has (every slot of names/slots.yaml filled, in order),
    and whichever list is empty (its rule left out)."""
    literals = [
        f"recipeDeployments={','.join(deployments)}",
        f"recipeStatefulSets={','.join(statefulsets)}",
    ]
    docs = opted_in(tmp_path, literals)
    no_empty_or_joined_names(docs)
    check_operator_writes_policy(docs)
    check_refresh_role_names_the_configmap_lists(docs)
    assert find(docs, "Role", REFRESH)["rules"] == refresh_rules(deployments, statefulsets)
    # Nothing of the splitting is rendered.
    assert not [d for d in docs if d["kind"] == "RecipeWorkloadNames"]


def test_the_refresh_role_file_as_it_is_names_no_workload() -> None:
    """Applied without kustomize (`kubectl apply -f`), the component's Role grants
    nothing: its rules name placeholders no Deployment or StatefulSet can have (not a
    DNS-1123 name), never no name at all (every workload)."""
    role = yaml.safe_load((REFRESH_COMPONENT / "role-refresh.yaml").read_text())
    assert [r["resources"] for r in role["rules"]] == [["deployments"], ["statefulsets"]]
    for rule in role["rules"]:
        (placeholder,) = rule["resourceNames"]
        assert not DNS_1123.fullmatch(placeholder), placeholder


def test_the_slots_are_one_per_name_and_kind() -> None:
    """names/slots.yaml: for each kind, slot i takes element i of its list and writes it
    to resourceNames[i] of its rule only when the list has more than i names, for
    i < SLOTS (the bound the allow-list checks enforce)."""
    slots = yaml.safe_load((REFRESH_COMPONENT / "names" / "slots.yaml").read_text())
    assert len(slots) == 2 * SLOTS
    for n, slot in enumerate(slots):
        rule, i = divmod(n, SLOTS)
        field = ("deployments", "statefulSets")[rule]
        assert slot["source"] == {
            "kind": "RecipeWorkloadNames",
            "name": "recipe-workloads",
            "fieldPath": field,
            "options": {"delimiter": ",", "index": i},
        }
        (target,) = slot["targets"]
        assert target["fieldPaths"] == [f"rules.{rule}.resourceNames.{i}"]
        assert target["options"] == {"create": True}
        pattern = re.compile(target["select"]["namespace"])
        lists = [["a"] * SLOTS, ["b"] * SLOTS]
        for count in range(SLOTS + 1):
            lists[rule] = [f"n{k}" for k in range(count)]
            namespace = "clerum`" + "`".join(",".join(x) for x in lists)
            assert bool(pattern.fullmatch(namespace)) == (count > i), (field, i, count)
    padded = yaml.safe_load((REFRESH_COMPONENT / "names" / "recipe-names.yaml").read_text())
    assert padded["deployments"] == padded["statefulSets"] == "," * SLOTS


def test_the_refresh_request_needs_the_refresh_verb() -> None:
    docs = build(MANIFESTS / "base")
    vap = find(docs, "ValidatingAdmissionPolicy", "spillover-refresh-request")
    binding = find(docs, "ValidatingAdmissionPolicyBinding", "spillover-refresh-request")
    assert binding["spec"]["policyName"] == "spillover-refresh-request"
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert vap["spec"]["failurePolicy"] == "Fail"
    assert "check('refresh').allowed()" in vap["spec"]["validations"][0]["expression"]
    role = find(docs, "ClusterRole", REFRESHER)
    assert role["rules"] == [
        {
            "apiGroups": ["spillover.clerum.io"],
            "resources": ["spilloverpolicies"],
            "verbs": ["refresh"],
        }
    ]


def test_the_local_overlay_opts_in_to_refreshing_only_its_recipe_deployment() -> None:
    docs = build(MANIFESTS / "overlays" / LOCAL)
    check_recipe_rbac(docs)
    no_empty_or_joined_names(docs)
    check_operator_writes_policy(docs)
    check_refresh_role_names_the_configmap_lists(docs)
    assert find(docs, "Role", REFRESH)["rules"] == refresh_rules(["mcp-host-r1"], [])
    data = find(docs, "ConfigMap", ALLOWED_CM)["data"]
    assert (data["recipeDeployments"], data["recipeStatefulSets"]) == ("mcp-host-r1", "")
    env = container_env(find(docs, "Deployment", "spillover-operator"), "operator")
    assert refresh_allow_list(env).owners == frozenset({Owner("Deployment", "mcp-host-r1")})
    assert find(docs, "ConfigMap", ALLOWED_CM)["data"]["recipeRefresh"] == "OnKillSwitch"


def test_the_crd_says_what_a_refresh_does_and_the_operator_deletes_no_pods() -> None:
    """The CRD's text of spec.recipePods.refresh matches the behaviour: the operator
    restarts only allow-listed workloads, and the allow-list names only kinds it
    restarts (a rollout restart), so no refresh of the operator deletes a pod."""
    from spillover_operator.domain.allowlist import REFRESH_VARS

    crd = find(
        build(MANIFESTS / "crd"),
        "CustomResourceDefinition",
        "spilloverpolicies.spillover.clerum.io",
    )
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    text = schema["properties"]["spec"]["properties"]["recipePods"]["properties"]["refresh"][
        "description"
    ]
    assert "deletes no pods" in text and "allow-list" in text, text
    assert "deleting the pods" not in text, text
    assert all(Owner(kind, "x").restartable for kind in REFRESH_VARS), REFRESH_VARS
