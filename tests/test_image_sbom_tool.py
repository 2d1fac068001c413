"""tools/image_sbom.py without an image: it reads a dpkg database as dpkg does, and
refuses an image whose Python packages are not the lock's (tests/integration/
test_image_sbom.py checks the SBOM `make image` wrote)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

import pytest
from repo_paths import REPO_ROOT


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "image_sbom", REPO_ROOT / "tools" / "image_sbom.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("image_sbom", module)
    spec.loader.exec_module(module)
    return module


sbom = _tool()
A, B, C = ("a" * 64, "b" * 64, "c" * 64)

STATUS = """\
Package: libc6
Status: install ok installed
Architecture: amd64
Source: glibc
Version: 2.36-9+deb12u14
Description: GNU C Library
 a continuation line: with a colon

Package: gone
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: libpython3.11-minimal
Status: install ok installed
Architecture: amd64
Source: python3.11 (3.11.2-6+deb12u9)
Version: 3.11.2-6+deb12u9
"""


def test_installed_debian_packages_are_read_from_the_dpkg_status_file() -> None:
    found = sbom.dpkg_installed(STATUS)
    assert [(p.name, p.version, p.arch, p.source) for p in found] == [
        ("libc6", "2.36-9+deb12u14", "amd64", "glibc"),
        ("libpython3.11-minimal", "3.11.2-6+deb12u9", "amd64", "python3.11"),
    ]


def _pins() -> dict[str, Any]:
    return {
        "kopf": sbom.Pin("kopf", "1.45.2", frozenset({A, B})),
        "setuptools": sbom.Pin("setuptools", "84.2.1", frozenset({C})),
    }


def _report(version: str = "1.45.2", sha256: str = A) -> list[dict[str, Any]]:
    return [
        {
            "name": "kopf",
            "version": version,
            "download_info": {
                "url": "https://files.example/kopf.whl",
                "archive_info": {"hashes": {"sha256": sha256}},
            },
        }
    ]


def test_the_locked_packages_of_the_image_are_listed_with_the_installed_distribution() -> None:
    dists = {"kopf": "1.45.2", "spillover-operator": "0.1.0"}
    listed = sbom.python_packages(_pins(), {"setuptools"}, dists, _report())
    assert [(p.name, p.version, url, sha) for p, url, sha in listed] == [
        ("kopf", "1.45.2", "https://files.example/kopf.whl", A)
    ]


@pytest.mark.parametrize(
    ("dists", "report", "says"),
    [
        ({"kopf": "1.45.2", "left-pad": "1.0"}, _report(), "left-pad 1.0 is in the image"),
        ({"kopf": "1.44.0"}, _report("1.44.0"), "kopf is 1.44.0 in the image, 1.45.2"),
        ({"kopf": "1.45.2"}, _report(sha256=C), "kopf: pip's report says 1.45.2"),
        ({}, [], "kopf==1.45.2 of operator/requirements.lock is not in the image"),
    ],
    ids=["unlocked package", "other version", "unlisted hash", "locked package missing"],
)
def test_an_image_that_strays_from_the_lock_is_refused(
    dists: dict[str, str], report: list[dict[str, Any]], says: str
) -> None:
    with pytest.raises(sbom.Refused, match="the image and the lock disagree") as refused:
        sbom.python_packages(_pins(), {"setuptools"}, dists, report)
    assert says in str(refused.value)


def test_the_sbom_is_written_beside_the_image_in_the_projects_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPILLOVER_IMAGE_CACHE", raising=False)
    path = sbom.default_path("localhost/spillover-operator:dev")
    assert str(path).endswith(
        ".cache/spillover-ops/image/localhost_spillover-operator_dev.cdx.json"
    )
