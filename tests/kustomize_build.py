"""The shipped manifests as a platform team applies them: rendered by `kubectl
kustomize`, so tests check what `kubectl apply -k manifests/overlays/<name>` creates
(RBAC, admission, the operator's env), never a hand-copied YAML file."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from repo_paths import MANIFESTS

OVERLAYS = MANIFESTS / "overlays"
BUILD_TIMEOUT_S = 120


def kubectl() -> str:
    """The kubectl binary; fails the test naming it and how to get it."""
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail(
            "kubectl not found on PATH: the manifests are rendered with `kubectl kustomize`. "
            "Install kubectl (https://kubernetes.io/docs/tasks/tools/, or `apt-get install "
            "kubectl` where packaged) and run the tests again.",
            pytrace=False,
        )
    return found


def overlay_names() -> list[str]:
    """Every overlay shipped under manifests/overlays."""
    return sorted(p.name for p in OVERLAYS.iterdir() if (p / "kustomization.yaml").is_file())


def build(path: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize <path>` as a list of objects; fails with kustomize's error."""
    proc = subprocess.run(
        [kubectl(), "kustomize", str(path)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"`kubectl kustomize {path}` failed ({proc.returncode}):\n{proc.stderr}",
            pytrace=False,
        )
    return [doc for doc in yaml.safe_load_all(proc.stdout) if isinstance(doc, dict)]


def find(docs: Sequence[Mapping[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The one object of that kind and name in a build; fails naming what is there."""
    found = [d for d in docs if d.get("kind") == kind and d["metadata"].get("name") == name]
    if len(found) != 1:
        present = sorted(f"{d.get('kind')}/{d['metadata'].get('name')}" for d in docs)
        pytest.fail(f"expected one {kind}/{name} in the build, found {len(found)}: {present}")
    return dict(found[0])


def container_env(deployment: Mapping[str, Any], container: str) -> dict[str, Any]:
    """name -> literal value of a container's env in a Deployment manifest."""
    for c in deployment["spec"]["template"]["spec"]["containers"]:
        if c["name"] == container:
            return {e["name"]: e.get("value") for e in c.get("env") or []}
    raise AssertionError(f"no container {container!r} in {deployment['metadata']['name']}")
