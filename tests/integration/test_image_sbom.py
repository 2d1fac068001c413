"""The SBOM `make image` writes beside the operator image: valid CycloneDX 1.5 JSON,
made for the image as it is now (its image ID), listing the Python packages at the
versions operator/requirements.lock pins (kopf among them) with the hash of a
distribution the lock allows, and the Debian packages of its base at the versions the
image's dpkg database holds."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from repo_paths import REPO_ROOT

pytestmark = pytest.mark.integration

IMAGE = os.environ.get("SPILLOVER_OPERATOR_IMAGE", "localhost/spillover-operator:dev")
OPERATOR_LOCK = REPO_ROOT / "operator" / "requirements.lock"
# Removed from the image after building the operator (operator/Dockerfile).
BUILD_ONLY = {"setuptools"}


def _locked() -> dict[str, tuple[str, set[str]]]:
    """name -> (version, hashes) of operator/requirements.lock (read here)."""
    text = re.sub(r"\\\n", " ", OPERATOR_LOCK.read_text())
    found = {}
    for line in text.splitlines():
        pin = re.match(r"^([a-z0-9][a-z0-9._-]*)==(\S+)", line)
        if pin:
            found[pin.group(1)] = (pin.group(2), set(re.findall(r"sha256:([0-9a-f]{64})", line)))
    return found


def _podman() -> str:
    podman = shutil.which("podman")
    if podman is None:
        pytest.fail("podman is missing: run `make host-deps` (as root)", pytrace=False)
    if subprocess.run([podman, "image", "exists", IMAGE], check=False).returncode != 0:
        pytest.fail(f"image {IMAGE} not built: run `make image`", pytrace=False)
    return podman


@pytest.fixture(scope="module")
def sbom_text() -> str:
    _podman()
    where = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tools/image_sbom.py"), "--image", IMAGE, "--print-path"],
        capture_output=True,
        text=True,
        check=True,
    )
    path = Path(where.stdout.strip())
    if not path.is_file():
        pytest.fail(f"no SBOM of {IMAGE} at {path}: run `make image`", pytrace=False)
    return path.read_text()


@pytest.fixture(scope="module")
def sbom(sbom_text: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(sbom_text)
    return found


def _components(sbom: dict[str, Any], purl_type: str) -> dict[str, dict[str, Any]]:
    return {
        c["name"]: c
        for c in sbom["components"]
        if c.get("purl", "").startswith(f"pkg:{purl_type}/")
    }


def test_the_sbom_is_valid_cyclonedx_1_5(sbom_text: str, sbom: dict[str, Any]) -> None:
    error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(sbom_text)
    assert error is None, f"not valid CycloneDX 1.5: {error}"
    assert sbom["bomFormat"] == "CycloneDX"
    assert sbom["specVersion"] == "1.5"


def test_the_sbom_describes_the_image_as_built_now(sbom: dict[str, Any]) -> None:
    podman = _podman()
    inspect = subprocess.run(
        [podman, "image", "inspect", "--format", "{{.Id}}", IMAGE],
        capture_output=True,
        text=True,
        check=True,
    )
    image_id = inspect.stdout.strip().removeprefix("sha256:")
    subject = sbom["metadata"]["component"]
    assert subject["type"] == "container"
    properties = {p["name"]: p["value"] for p in subject["properties"]}
    assert properties["spillover-ops:image:id"] == f"sha256:{image_id}", (
        f"the SBOM is of another build of {IMAGE}: run `make image`"
    )
    assert properties["spillover-ops:image:tag"] == IMAGE


def test_the_sbom_lists_the_locked_python_packages_kopf_among_them(sbom: dict[str, Any]) -> None:
    locked = _locked()
    python = _components(sbom, "pypi")
    kopf = python.get("kopf")
    assert kopf is not None, sorted(python)
    assert kopf["version"] == locked["kopf"][0]
    assert kopf["purl"] == f"pkg:pypi/kopf@{locked['kopf'][0]}"
    expected = {name for name in locked if name not in BUILD_ONLY}
    assert set(python) == expected
    for name, component in python.items():
        version, hashes = locked[name]
        assert component["version"] == version, name
        (digest,) = [h["content"] for h in component["hashes"] if h["alg"] == "SHA-256"]
        assert digest in hashes, f"{name}: installed from a distribution the lock does not list"
    operator = [c for c in sbom["components"] if c["name"] == "spillover-operator"]
    assert [c["type"] for c in operator] == ["application"]


def test_the_sbom_lists_the_debian_packages_of_the_image(sbom: dict[str, Any]) -> None:
    podman = _podman()
    debian = _components(sbom, "deb")
    assert len(debian) > 50, sorted(debian)
    query = subprocess.run(
        [
            podman,
            "run",
            "--rm",
            "--runtime",
            "runc",
            "--network",
            "none",
            "--ulimit",
            "nofile=4096:4096",
            "--ulimit",
            "nproc=4096:4096",
            "--entrypoint",
            "dpkg-query",
            IMAGE,
            "-W",
            "-f",
            "${Package} ${Version}\n",
            "libc6",
            "python3",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert query.returncode == 0, query.stderr[-2000:]
    in_image = dict(line.split(" ", 1) for line in query.stdout.strip().splitlines())
    for name, version in in_image.items():
        assert debian[name]["version"] == version
        assert debian[name]["purl"].startswith(f"pkg:deb/debian/{name}@")
    system = [c for c in sbom["components"] if c["type"] == "operating-system"]
    assert [c["name"] for c in system] == ["debian"]
