"""The operator image's SBOM: CycloneDX 1.5 JSON, written by `make image` beside the image.

What it lists, read from the image `make image` just built:
- the Debian packages of its base (the dpkg database, /var/lib/dpkg/status), each with a
  `pkg:deb/debian/...` package URL, and the Debian release (/etc/os-release);
- the Python packages of /opt/spillover-operator, each pinned in operator/requirements.lock,
  with the SHA-256 and address of the very distribution pip installed (from pip's install
  report, which the Dockerfile keeps as installed-from.json), a `pkg:pypi/...` package URL;
- the operator itself (spillover-operator).
The image is the BOM's subject (metadata.component: its tag, and its image ID as a
SHA-256 hash and a property). The BOM is made and serialized with cyclonedx-python-lib
and checked against the CycloneDX 1.5 JSON schema before it is written.

The image must agree with the lock: a Python package in the image the lock does not pin,
at another version, or from a distribution whose hash the lock does not list fails here
(the build backend the lock pins, setuptools, leaves the image and is not listed).

Usage: image_sbom.py --image TAG [--tool podman|docker] [--lock operator/requirements.lock]
                     [--out PATH]      (default: see --print-path)
       image_sbom.py --image TAG --print-path
The default path: ${SPILLOVER_IMAGE_CACHE:-~/.cache/spillover-ops/image}/<tag>.cdx.json,
the tag's `/` and `:` made `_`.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from lock import OPERATOR, Pin, canonical, read_pins, recorded_inputs  # noqa: E402

VENV = "/opt/spillover-operator"
REPORT = f"{VENV}/installed-from.json"
PROPERTY = "spillover-ops"

# Runs in the image with its own Python: what is installed, as JSON.
PROBE = f"""
import importlib.metadata, json, pathlib
dists = {{}}
for dist in importlib.metadata.distributions():
    if dist.metadata and dist.metadata["Name"]:
        dists[dist.metadata["Name"]] = dist.version
print(json.dumps({{
    "dpkg_status": pathlib.Path("/var/lib/dpkg/status").read_text(errors="replace"),
    "os_release": pathlib.Path("/etc/os-release").read_text(),
    "dists": dists,
    "installed_from": json.loads(pathlib.Path("{REPORT}").read_text()),
}}))
"""


def default_path(tag: str) -> Path:
    cache = os.environ.get("SPILLOVER_IMAGE_CACHE") or Path.home() / ".cache/spillover-ops/image"
    return Path(cache) / f"{tag.replace('/', '_').replace(':', '_')}.cdx.json"


class Refused(Exception):
    """The image and the lock disagree, or the image cannot be read."""


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    arch: str
    source: str


def dpkg_installed(status: str) -> list[DebPackage]:
    """The installed packages of a dpkg status file (its stanzas, `Status: install ok
    installed`)."""
    found = []
    for stanza in status.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        if fields.get("Status", "").split()[-1:] != ["installed"] or "Package" not in fields:
            continue
        source = fields.get("Source", fields["Package"]).split(" ")[0]
        found.append(
            DebPackage(fields["Package"], fields["Version"], fields["Architecture"], source)
        )
    return sorted(found, key=lambda p: p.name)


def os_release(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key] = value.strip().strip('"')
    return fields


def inspect(tool: str, image: str) -> dict[str, Any]:
    run = subprocess.run([tool, "image", "inspect", image], capture_output=True, text=True)
    if run.returncode != 0:
        raise Refused(f"{image}: not in {tool}'s store ({run.stderr.strip()[-200:]})")
    found: dict[str, Any] = json.loads(run.stdout)[0]
    return found


def probe(tool: str, image: str) -> dict[str, Any]:
    flags = ["--rm", "--network", "none", "--entrypoint", f"{VENV}/bin/python3"]
    if Path(tool).name == "podman":
        if shutil.which("runc"):
            flags += ["--runtime", "runc"]
        # Below this host's hard limits (runc may not raise them here).
        flags += ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]
    run = subprocess.run(
        [tool, "run", *flags, image, "-c", PROBE], capture_output=True, text=True, timeout=300
    )
    if run.returncode != 0:
        raise Refused(f"reading {image} failed: {run.stderr.strip()[-1000:]}")
    found: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return found


def installed_from_report(report: list[dict[str, Any]]) -> dict[str, tuple[str, str, str]]:
    """canonical name -> (version, the distribution's address, its sha256) from the
    image's installed-from.json (name, version and download_info of pip's install report)."""
    found = {}
    for item in report:
        info = item.get("download_info", {})
        archive = info.get("archive_info", {})
        sha256 = archive.get("hashes", {}).get("sha256", "")
        if not sha256:  # older pips give only "hash": "sha256=..."
            algorithm, _, value = archive.get("hash", "").partition("=")
            sha256 = value if algorithm == "sha256" else ""
        found[canonical(item["name"])] = (item["version"], info.get("url", ""), sha256)
    return found


def python_packages(
    pins: dict[str, Pin], build_only: set[str], dists: dict[str, str], report: list[dict[str, Any]]
) -> list[tuple[Pin, str, str]]:
    """(pin, distribution address, its sha256) for every package of the lock in the image;
    Refused where the image and the lock disagree."""
    in_image = {canonical(name): version for name, version in dists.items()}
    in_image.pop("spillover-operator", None)
    installed = installed_from_report(report)
    problems = []
    for name, version in sorted(in_image.items()):
        pin = pins.get(name)
        if pin is None:
            problems.append(f"{name} {version} is in the image, not in {OPERATOR.lock}")
        elif pin.version != version:
            problems.append(f"{name} is {version} in the image, {pin.version} in {OPERATOR.lock}")
    listed = []
    for name, pin in sorted(pins.items()):
        if name not in in_image:
            if name not in build_only:
                problems.append(f"{name}=={pin.version} of {OPERATOR.lock} is not in the image")
            continue
        version, url, sha256 = installed.get(name, ("", "", ""))
        if version != pin.version or sha256 not in pin.hashes:
            problems.append(
                f"{name}: pip's report says {version or 'nothing'} ({sha256 or 'no hash'}),"
                f" {OPERATOR.lock} {pin.version} with {len(pin.hashes)} hashes"
            )
            continue
        listed.append((pin, url, sha256))
    if problems:
        raise Refused("the image and the lock disagree:\n  " + "\n  ".join(problems))
    return listed


def build_bom(image: str, inspected: dict[str, Any], probed: dict[str, Any], lock: Path) -> str:
    """The SBOM as CycloneDX 1.5 JSON (validated)."""
    from cyclonedx.model import (
        ExternalReference,
        ExternalReferenceType,
        HashAlgorithm,
        HashType,
        Property,
        XsUri,
    )
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot5
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator
    from packageurl import PackageURL
    from packaging.requirements import Requirement

    pins = read_pins(lock)
    # The build backend the lock pins leaves the image (operator/Dockerfile).
    build_only = {
        canonical(Requirement(line.partition(": ")[2]).name)
        for line in recorded_inputs(lock.read_text())
        if line.startswith("build-system: ")
    }
    python = python_packages(pins, build_only, probed["dists"], probed["installed_from"])
    release = os_release(probed["os_release"])
    distro = f"{release.get('ID', 'debian')}-{release.get('VERSION_ID', '')}".rstrip("-")
    debs = dpkg_installed(probed["dpkg_status"])
    if not debs:
        raise Refused(f"{image}: no installed Debian package in /var/lib/dpkg/status")

    image_id = str(inspected["Id"]).removeprefix("sha256:")
    repository, colon, tag = image.rpartition(":")
    if not colon or "/" in tag:  # no tag; a registry's port
        repository, tag = image, ""
    labels = inspected.get("Labels") or inspected.get("Config", {}).get("Labels") or {}
    lock_sha256 = hashlib.sha256(lock.read_bytes()).hexdigest()
    subject = Component(
        type=ComponentType.CONTAINER,
        name=repository,
        version=tag or None,
        bom_ref=f"image:{image_id}",
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=image_id)],
        properties=[
            Property(name=f"{PROPERTY}:image:id", value=f"sha256:{image_id}"),
            Property(name=f"{PROPERTY}:image:tag", value=image),
            Property(
                name=f"{PROPERTY}:image:base",
                value=str(labels.get("io.clerum.spillover.base-image", "")),
            ),
            Property(name=f"{PROPERTY}:python-lock", value=f"{OPERATOR.lock}"),
            Property(name=f"{PROPERTY}:python-lock:sha256", value=lock_sha256),
        ],
    )
    bom = Bom()
    bom.metadata.component = subject
    for tool, version in (
        ("spillover-ops tools/image_sbom.py", None),
        ("cyclonedx-python-lib", importlib.metadata.version("cyclonedx-python-lib")),
    ):
        bom.metadata.tools.components.add(
            Component(type=ComponentType.APPLICATION, name=tool, version=version)
        )

    system = Component(
        type=ComponentType.OPERATING_SYSTEM,
        name=release.get("ID", "debian"),
        version=release.get("VERSION_ID"),
        description=release.get("PRETTY_NAME"),
        bom_ref=f"os:{distro}",
    )
    components = [system]
    for deb in debs:
        purl = PackageURL(
            type="deb",
            namespace="debian",
            name=deb.name,
            version=deb.version,
            qualifiers={"arch": deb.arch, "distro": distro},
        )
        properties = []
        if deb.source != deb.name:
            properties.append(Property(name=f"{PROPERTY}:deb:source", value=deb.source))
        components.append(
            Component(
                type=ComponentType.LIBRARY,
                name=deb.name,
                version=deb.version,
                purl=purl,
                bom_ref=purl.to_string(),
                properties=properties,
            )
        )
    for pin, url, sha256 in python:
        purl = PackageURL(type="pypi", name=pin.name, version=pin.version)
        references = []
        if url:
            references.append(
                ExternalReference(
                    type=ExternalReferenceType.DISTRIBUTION,
                    url=XsUri(url),
                    hashes=[HashType(alg=HashAlgorithm.SHA_256, content=sha256)],
                )
            )
        components.append(
            Component(
                type=ComponentType.LIBRARY,
                name=pin.name,
                version=pin.version,
                purl=purl,
                bom_ref=purl.to_string(),
                hashes=[HashType(alg=HashAlgorithm.SHA_256, content=sha256)],
                external_references=references,
            )
        )
    operator_version = next(
        (v for n, v in probed["dists"].items() if canonical(n) == "spillover-operator"), None
    )
    if operator_version is None:
        raise Refused(f"{image}: spillover-operator is not installed in {VENV}")
    components.append(
        Component(
            type=ComponentType.APPLICATION,
            name="spillover-operator",
            version=operator_version,
            bom_ref=f"spillover-operator@{operator_version}",
        )
    )
    for component in components:
        bom.components.add(component)
    bom.register_dependency(subject, components)

    text = JsonV1Dot5(bom).output_as_string(indent=2)
    error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(text)
    if error is not None:
        raise Refused(f"the SBOM is not valid CycloneDX 1.5: {error}")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="image_sbom.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--tool", default=os.environ.get("IMAGE_TOOL") or "podman")
    parser.add_argument("--lock", type=Path, default=ROOT / OPERATOR.lock)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--print-path", action="store_true")
    args = parser.parse_args(argv)
    out = args.out or default_path(args.image)
    if args.print_path:
        print(out)
        return 0
    try:
        text = build_bom(
            args.image, inspect(args.tool, args.image), probe(args.tool, args.image), args.lock
        )
    except Refused as e:
        print(f"image_sbom.py: {e}", file=sys.stderr)
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = out.with_name(f".{out.name}.tmp")
    staged.write_text(text + "\n")
    os.replace(staged, out)
    counts = json.loads(text)["components"]
    debs = sum(1 for c in counts if str(c.get("purl", "")).startswith("pkg:deb/"))
    pypi = sum(1 for c in counts if str(c.get("purl", "")).startswith("pkg:pypi/"))
    print(f"SBOM (CycloneDX 1.5): {out}: {debs} Debian packages, {pypi} Python packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
