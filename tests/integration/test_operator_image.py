"""The operator image `make image` builds: the operator and its dependencies only, run
the way the shipped Deployment runs it (uid 10001, read-only root filesystem, every
capability dropped, no privilege escalation)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.integration

IMAGE = os.environ.get("SPILLOVER_OPERATOR_IMAGE", "localhost/spillover-operator:dev")
# The most the image may add above its base (the layers `make image` builds).
MAX_ADDED_BYTES = 100 * 1000 * 1000

# Imports every module of the operator (handlers, client, CLI) and says what else is
# importable: a harness dependency in the image would show here.
PROBE = """
import getpass, importlib, importlib.util, json, pkgutil, os
import spillover_operator
names = [m.name for m in pkgutil.walk_packages(spillover_operator.__path__, "spillover_operator.")]
for name in names:
    importlib.import_module(name)
extra = [m for m in ("spillover_harness", "matplotlib", "numpy", "pandas", "prometheus_api_client",
                     "kubernetes.aio") if importlib.util.find_spec(m) is not None]
open("/tmp/written", "w").write("tmp is writable")
try:
    open("/opt/spillover-operator/x", "w")
    root_writable = True
except OSError:
    root_writable = False
# kopf names itself after the user (getpass.getuser()): uid 10001 needs a passwd entry.
print(json.dumps({"modules": len(names), "extra": extra, "uid": os.getuid(), "gid": os.getgid(),
                  "user": getpass.getuser(),
                  "root_writable": root_writable,
                  "caps": open("/proc/self/status").read().split("CapEff:")[1].split()[0]}))
"""


def _podman() -> str:
    podman = shutil.which("podman")
    if podman is None:
        pytest.fail("podman is missing: run `make host-deps` (as root)", pytrace=False)
    if subprocess.run([podman, "image", "exists", IMAGE], check=False).returncode != 0:
        pytest.fail(f"image {IMAGE} not built: run `make image`", pytrace=False)
    return podman


def _run_as_deployed(podman: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """`podman run` with the Deployment's securityContext (manifests/base/deployment.yaml):
    runAsUser/Group 10001, readOnlyRootFilesystem, capabilities drop ALL,
    allowPrivilegeEscalation false; /tmp is its emptyDir."""
    return subprocess.run(
        [
            podman,
            "run",
            "--rm",
            "--runtime",
            "runc",
            "--network",
            "none",
            # Below this host's hard limits (runc may not raise them here).
            "--ulimit",
            "nofile=4096:4096",
            "--ulimit",
            "nproc=4096:4096",
            "--user",
            "10001:10001",
            "--read-only",
            "--read-only-tmpfs=false",
            "--tmpfs",
            "/tmp:rw,size=16m",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_image_holds_the_operator_only_and_runs_as_the_deployment_runs_it() -> None:
    podman = _podman()
    run = _run_as_deployed(podman, "--entrypoint", "python3", IMAGE, "-c", PROBE)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["modules"] > 30, report
    assert report["extra"] == [], f"not the operator's: {report['extra']}"
    assert (report["uid"], report["gid"]) == (10001, 10001)
    assert report["user"] == "spillover"
    assert report["root_writable"] is False
    assert int(report["caps"], 16) == 0


def test_the_entrypoint_is_kopf_running_the_operator() -> None:
    podman = _podman()
    inspect = subprocess.run(
        [podman, "image", "inspect", IMAGE], capture_output=True, text=True, check=True
    )
    cfg = json.loads(inspect.stdout)[0]["Config"]
    assert cfg["Entrypoint"] == ["kopf", "run", "-m", "spillover_operator.main"]
    assert cfg["User"] == "10001:10001"
    run = _run_as_deployed(podman, IMAGE, "--help")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "--standalone" in run.stdout
    ctl = _run_as_deployed(podman, "--entrypoint", "spilloverctl", IMAGE, "--help")
    assert ctl.returncode == 0, ctl.stderr[-2000:]
    assert "kill" in ctl.stdout


def test_the_image_adds_at_most_100_mb_above_its_base() -> None:
    podman = _podman()

    def inspect(image: str) -> dict[str, object]:
        out = subprocess.run(
            [podman, "image", "inspect", image], capture_output=True, text=True, check=True
        )
        return dict(json.loads(out.stdout)[0])

    image = inspect(IMAGE)
    labels = image["Labels"] if isinstance(image["Labels"], dict) else {}
    base_name = labels.get("io.clerum.spillover.base-image")
    assert base_name, f"{IMAGE} does not name its base (label io.clerum.spillover.base-image)"
    base = inspect(str(base_name))
    added = int(str(image["Size"])) - int(str(base["Size"]))
    assert 0 < added <= MAX_ADDED_BYTES, f"{added / 1e6:.0f} MB above {base_name}"
