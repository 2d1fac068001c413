"""requirements.lock (what `make install` installs) and operator/requirements.lock (what
the operator image installs) cover pyproject.toml: every requirement, its extras and
everything they require in turn (read from the installed packages' metadata, .venv being
installed from the lock) is pinned at a version that meets it. A dependency added to
pyproject.toml without `make lock` fails here and in `make lock-check`, which names the
fix."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from repo_paths import REPO_ROOT

LOCK_TOOL = REPO_ROOT / "tools" / "lock.py"
FILES = (
    "pyproject.toml",
    "requirements.lock",
    "operator/pyproject.toml",
    "operator/requirements.lock",
)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", re.MULTILINE)


def locked(path: Path) -> dict[str, str]:
    """The lock's pins, canonical name -> version (read here, not with tools/lock.py)."""
    return {canonicalize_name(m.group(1)): m.group(2) for m in _PIN.finditer(path.read_text())}


def roots(project: dict[str, Any], extras: tuple[str, ...]) -> list[str]:
    requirements = list(project["project"].get("dependencies", []))
    for extra in extras:
        requirements += project["project"]["optional-dependencies"][extra]
    return requirements + list(project["build-system"]["requires"])


def unlocked(requirements: list[str], pins: dict[str, str]) -> list[str]:
    """What the pins leave out: each requirement and, through the installed metadata,
    everything it requires (with the extras asked for), that applies on this Python."""
    problems: list[str] = []
    queue: deque[tuple[Requirement, str]] = deque(
        (Requirement(r), "pyproject.toml") for r in requirements
    )
    seen: set[tuple[str, frozenset[str]]] = set()
    while queue:
        requirement, wanted_by = queue.popleft()
        name = canonicalize_name(requirement.name)
        pin = pins.get(name)
        if pin is None:
            problems.append(f"{requirement} (wanted by {wanted_by}) is not locked")
            continue
        if not requirement.specifier.contains(Version(pin), prereleases=True):
            problems.append(f"{requirement} (wanted by {wanted_by}): locked {pin}")
            continue
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        installed = importlib.metadata.distribution(name)
        if Version(installed.version) != Version(pin):
            problems.append(f"{name}: {installed.version} installed, {pin} locked: make install")
            continue
        for text in installed.requires or []:
            needed = Requirement(text)
            contexts = ["", *sorted(requirement.extras)]
            marker = needed.marker
            if marker is None or any(marker.evaluate({"extra": e}) for e in contexts):
                queue.append((needed, f"{name} {pin}"))
    return problems


def _project(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


def test_the_lock_covers_pyproject_and_everything_it_requires() -> None:
    project = _project(REPO_ROOT / "pyproject.toml")
    pins = locked(REPO_ROOT / "requirements.lock")
    assert unlocked(roots(project, ("dev",)), pins) == []
    # make install's own pip is locked too.
    assert "pip" in pins


def test_the_coverage_check_fails_on_a_dependency_pyproject_gained_without_make_lock() -> None:
    project = _project(REPO_ROOT / "pyproject.toml")
    project["project"]["dependencies"] += ["left-pad>=1", "kopf>=99"]
    problems = unlocked(roots(project, ("dev",)), locked(REPO_ROOT / "requirements.lock"))
    assert any(p.startswith("left-pad>=1 ") and "not locked" in p for p in problems), problems
    assert any(p.startswith("kopf>=99 ") for p in problems), problems


def test_the_operator_lock_covers_the_operators_pyproject_with_the_repository_pins() -> None:
    repository = locked(REPO_ROOT / "requirements.lock")
    operator = locked(REPO_ROOT / "operator" / "requirements.lock")
    assert operator, "operator/requirements.lock pins nothing"
    differ = {n: (v, repository.get(n)) for n, v in operator.items() if repository.get(n) != v}
    assert differ == {}, f"operator pin vs repository pin: {differ}"
    project = _project(REPO_ROOT / "operator" / "pyproject.toml")
    assert unlocked(roots(project, ()), operator) == []
    # Nothing of the harness's in the image.
    for harness_only in ("matplotlib", "scipy", "numpy", "prometheus-api-client", "tqdm"):
        assert harness_only not in operator


def _check(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LOCK_TOOL), "--root", str(root), "check", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_lock_check_passes_on_the_repository() -> None:
    run = _check(REPO_ROOT)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("quick", [False, True], ids=["lock-check", "install's-quick-check"])
def test_lock_check_fails_saying_run_make_lock_when_pyproject_gains_a_dependency(
    tmp_path: Path, quick: bool
) -> None:
    for name in FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / name, tmp_path / name)
    assert _check(tmp_path).returncode == 0
    pyproject = tmp_path / "pyproject.toml"
    text = pyproject.read_text()
    assert '    "tqdm>=4.66",\n' in text
    pyproject.write_text(
        text.replace('    "tqdm>=4.66",\n', '    "tqdm>=4.66",\n    "left-pad>=1",\n')
    )
    run = _check(tmp_path, *(["--quick"] if quick else []))
    assert run.returncode == 1, run.stderr
    assert "+ dependencies: left-pad>=1" in run.stderr
    assert "run `make lock`" in run.stderr
    if not quick:
        assert "left-pad>=1 from pyproject.toml (dependencies) is not in requirements.lock" in (
            run.stderr
        )


def test_lock_check_fails_when_the_operator_lock_strays_from_the_repository_lock(
    tmp_path: Path,
) -> None:
    for name in FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / name, tmp_path / name)
    operator_lock = tmp_path / "operator" / "requirements.lock"
    kopf = locked(operator_lock)["kopf"]
    operator_lock.write_text(operator_lock.read_text().replace(f"kopf=={kopf} ", "kopf==1.38.0 "))
    run = _check(tmp_path, "--quick")
    assert run.returncode == 1
    assert f"operator/requirements.lock pins kopf==1.38.0, requirements.lock kopf=={kopf}" in (
        run.stderr
    )


def test_make_install_installs_exactly_the_lock_with_hashes() -> None:
    """The install recipe as make would run it (-n: printed, not run): the lock with
    --require-hashes, the project with --no-deps (so nothing unlocked comes in)."""
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is missing", pytrace=False)
    run = subprocess.run(
        [make, "-n", "-B", "install"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    installs = [line for line in run.stdout.splitlines() if " install " in f"{line} "]
    installs = [line for line in installs if "/pip " in line or line.startswith("pip ")]
    assert any(
        "--require-hashes" in line and "-r requirements.lock" in line for line in installs
    ), installs
    for line in installs:
        assert "--require-hashes" in line or "--no-deps" in line, line
    assert "tools/lock.py check --quick" in run.stdout
