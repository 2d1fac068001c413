"""The layer contracts of `make lint` (pyproject `[tool.importlinter]`): kept by the tree,
and able to fail: each contract is checked against a copy of the tree with one module
added that breaks it (a contract that cannot fail would guard nothing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

# contract id -> (a module of the copy, the import appended to it): one violation each,
# in modules the contracts name (a new module might fall outside a contract's sources).
VIOLATIONS: dict[str, tuple[str, str]] = {
    "harness-no-operator-entry-points": (
        "harness/spillover_harness/report/report.py",
        "from spillover_operator.cli import main\n",
    ),
    "cli-no-handlers": (
        "operator/spillover_operator/cli/render.py",
        "def _lazy() -> None:\n    from spillover_operator.handlers import views\n",
    ),
    "client-imports-no-domain": (
        "operator/spillover_operator/client/events.py",
        "from spillover_operator.domain.policy import target_of\n",
    ),
    "operator-domain-is-pure": (
        "operator/spillover_operator/domain/labels.py",
        "import kubernetes\n",
    ),
    # A lower layer reaching up: reading what is in effect may not run a reconciliation.
    "operator-layers": (
        "operator/spillover_operator/observed/deployments.py",
        "def _lazy() -> None:\n    from spillover_operator.reconciler import reconcile\n",
    ),
    "harness-layers": (
        "harness/spillover_harness/cluster/blocks.py",
        "def _lazy() -> None:\n    from spillover_harness.drivers import cluster\n",
    ),
    "harness-evaluation-is-pure": (
        "harness/spillover_harness/evaluate/core.py",
        "from spillover_harness.collectors import prometheus\n",
    ),
    "one-door-to-the-api": (
        "harness/spillover_harness/cluster/observe.py",
        "from kubernetes import client\n",
    ),
}


def _lint_imports(root: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    """lint-imports on the tree at `root` (its pyproject), importing the packages from
    `root` first, without the cache (the copy must be analysed, not remembered)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root / "operator"), str(root / "harness")])
    argv = [str(LINT_IMPORTS), "--no-cache", *(f"--contract={c}" for c in contracts)]
    return subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def _copy_tree(dest: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("operator", "harness"):
        shutil.copytree(REPO_ROOT / part, dest / part, ignore=ignore)
    shutil.copy2(REPO_ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_the_tree_keeps_every_contract() -> None:
    proc = _lint_imports(REPO_ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_the_contracts_check_what_the_issue_names() -> None:
    """The contracts are all there (a contract dropped from pyproject is a layer
    no longer guarded)."""
    import tomllib

    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    ids = {c["id"] for c in config["tool"]["importlinter"]["contracts"]}
    assert ids == set(VIOLATIONS)


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy_tree(tmp_path_factory.mktemp("tree"))


@pytest.mark.parametrize("contract", sorted(VIOLATIONS))
def test_a_violation_breaks_its_contract(tree_copy: Path, contract: str) -> None:
    path, line = VIOLATIONS[contract]
    module = tree_copy / path
    original = module.read_text()
    module.write_text(original + "\n" + line)
    try:
        proc = _lint_imports(tree_copy, contract)
    finally:
        module.write_text(original)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "1 broken" in proc.stdout, proc.stdout + proc.stderr
    assert "BROKEN" in proc.stdout


# The one door, from each side: a module of the operator outside the client, and a
# module of the harness, that import kubernetes themselves (typed objects, a
# CoreV1Api) each break it; an import inside the client is the door itself.
DOOR_BYPASSES = [
    ("operator/spillover_operator/__init__.py", "import kubernetes\n"),
    ("harness/spillover_harness/__init__.py", "from kubernetes.stream import stream\n"),
]


@pytest.mark.parametrize(("path", "line"), DOOR_BYPASSES)
def test_kubernetes_outside_the_client_breaks_the_door(
    tree_copy: Path, path: str, line: str
) -> None:
    module = tree_copy / path
    original = module.read_text()
    module.write_text(original + "\n" + line)
    try:
        proc = _lint_imports(tree_copy, "one-door-to-the-api")
    finally:
        module.write_text(original)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "1 broken" in proc.stdout, proc.stdout + proc.stderr


def test_kubernetes_inside_the_client_keeps_the_door(tree_copy: Path) -> None:
    module = tree_copy / "operator/spillover_operator/client/errors.py"
    original = module.read_text()
    module.write_text(original + "\nimport kubernetes\n")
    try:
        proc = _lint_imports(tree_copy, "one-door-to-the-api")
    finally:
        module.write_text(original)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout
