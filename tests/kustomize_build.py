"""The shipped manifests as a platform team applies them: rendered by `kubectl
kustomize`, so tests check what `kubectl apply -k manifests/overlays/<name>` creates
(RBAC, admission, the operator's env), never a hand-copied YAML file."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from repo_paths import MANIFESTS, REPO_ROOT

OVERLAYS = MANIFESTS / "overlays"
BUILD_TIMEOUT_S = 120
KUBECTL_BUILD = REPO_ROOT / "tests" / "kubectl" / "build.sh"


def kubectl() -> str:
    """Our kubectl, built from the pinned k8s.io/kubernetes module (`make kubectl`),
    whatever the machine has on PATH; fails the test naming what is missing and the fix."""
    proc = subprocess.run(
        ["bash", str(KUBECTL_BUILD), "--check"],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip()
        pytest.fail(
            f"kubectl is not built: {said}. The manifests are rendered with `kubectl "
            "kustomize` from the kubectl `make kubectl` builds (make unit and make test "
            "build it first).",
            pytrace=False,
        )
    return str(Path(proc.stdout.strip().splitlines()[-1]) / "kubectl")


def overlay_names() -> list[str]:
    """Every overlay shipped under manifests/overlays."""
    return sorted(p.name for p in OVERLAYS.iterdir() if (p / "kustomization.yaml").is_file())


def _kustomize(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl(), "kustomize", str(path)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )


def build(path: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize <path>` as a list of objects; fails with kustomize's error."""
    proc = _kustomize(path)
    if proc.returncode != 0:
        pytest.fail(
            f"`kubectl kustomize {path}` failed ({proc.returncode}):\n{proc.stderr}",
            pytrace=False,
        )
    return [doc for doc in yaml.safe_load_all(proc.stdout) if isinstance(doc, dict)]


def build_refusal(path: Path) -> str:
    """kustomize's error for a build that must fail (`kubectl kustomize <path>`); fails
    the test, showing what was rendered, when it builds."""
    proc = _kustomize(path)
    if proc.returncode == 0:
        pytest.fail(
            f"`kubectl kustomize {path}` built, and should have been refused:\n{proc.stdout}",
            pytrace=False,
        )
    return proc.stderr


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
