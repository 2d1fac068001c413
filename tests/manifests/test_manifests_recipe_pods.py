"""The recipe-pod RBAC of the shipped manifests (`kubectl kustomize`): the operator's
Role reads pods, their ReplicaSets and ConfigMaps (never Secrets); restarting owners
is a separate Role + binding that a platform team can leave out."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from kustomize_build import build, find, overlay_names
from repo_paths import MANIFESTS

REFRESH = "spillover-operator-refresh"


def _grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) for every rule without resourceNames."""
    return {
        (group, resource, verb)
        for rule in role["rules"]
        if not rule.get("resourceNames")
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def check_recipe_rbac(docs: list[dict[str, Any]], *, refresh: bool) -> None:
    role = find(docs, "Role", "spillover-operator")
    grants = _grants(role)
    for verb in ("get", "list", "watch"):
        assert ("", "pods", verb) in grants, f"the operator's Role lacks {verb} pods"
    assert ("apps", "replicasets", "get") in grants
    assert ("apps", "replicasets", "list") in grants
    assert ("", "configmaps", "get") in grants
    assert not any(r == "secrets" for _, r, _ in grants), "the operator must not read Secrets"
    # The main Role neither deletes pods nor patches other workloads.
    assert ("", "pods", "delete") not in grants
    assert ("apps", "statefulsets", "patch") not in grants

    refresh_roles = [
        d for d in docs if d.get("kind") == "Role" and d["metadata"]["name"] == REFRESH
    ]
    if not refresh:
        assert not refresh_roles
        assert not [d for d in docs if d["metadata"].get("name") == REFRESH]
        return
    refresh_role = find(docs, "Role", REFRESH)
    assert refresh_role["metadata"]["namespace"] == role["metadata"]["namespace"]
    assert _grants(refresh_role) == {
        ("apps", "deployments", "patch"),
        ("apps", "statefulsets", "patch"),
        ("", "pods", "delete"),
    }
    binding = find(docs, "RoleBinding", REFRESH)
    main_binding = find(docs, "RoleBinding", "spillover-operator")
    assert binding["roleRef"]["name"] == REFRESH
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"]
    assert binding["subjects"] == main_binding["subjects"]


@pytest.mark.parametrize("overlay", overlay_names())
def test_overlays_read_pods_and_ship_the_refresh_role(overlay: str) -> None:
    check_recipe_rbac(build(MANIFESTS / "overlays" / overlay), refresh=True)


def test_base_reads_pods_and_ships_the_refresh_role() -> None:
    check_recipe_rbac(build(MANIFESTS / "base"), refresh=True)


def test_a_platform_team_can_leave_the_refresh_role_out(tmp_path: Path) -> None:
    """The overlay manifests/README.md shows: the dev overlay plus two delete patches."""
    dev = (MANIFESTS / "overlays" / "dev" / "kustomization.yaml").read_text()
    overlay = tmp_path / "no-refresh"
    overlay.mkdir()
    text = dev.replace("../../", f"{os.path.relpath(MANIFESTS, overlay)}/")
    text += (
        "  - patch: |-\n"
        "      $patch: delete\n"
        "      apiVersion: rbac.authorization.k8s.io/v1\n"
        "      kind: Role\n"
        "      metadata: {name: spillover-operator-refresh, namespace: clerum}\n"
        "  - patch: |-\n"
        "      $patch: delete\n"
        "      apiVersion: rbac.authorization.k8s.io/v1\n"
        "      kind: RoleBinding\n"
        "      metadata: {name: spillover-operator-refresh, namespace: clerum}\n"
    )
    (overlay / "kustomization.yaml").write_text(text)
    check_recipe_rbac(build(overlay), refresh=False)
