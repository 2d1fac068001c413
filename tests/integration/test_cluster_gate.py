"""The Stage 1 -> Stage 2 gate end to end through the CLI (`spillover-harness` as a
subprocess), on the platform of platform_env.py (local control plane with kwok, the
HTTP simulator, a real Prometheus, the real operator).

Stage `minikube` records the mcp-host version it validated: here the `imageID` of the
running mcp-host pod (the profile leaves `mcp_host_version` unset). kwok's fake kubelet
reports no imageID, so `report_image_ids_as_kubelet` writes one into the pod status,
as a kubelet would after pulling the image. Stage `dev` then starts only on an accepted
Stage 1 verdict for that same digest, unless overridden.

The matrix is tiny: off and 128KiB, one input, one repetition (2 runs per stage).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import connection, wait_for
from kubernetes import client
from platform_env import (
    MCP_HOST_IMAGE,
    MCP_HOST_SELECTOR,
    PlatformEnv,
    deep_merge,
    image_digest,
    platform_env,
    report_image_ids_as_kubelet,
)
from spillover_harness.cluster.observe import mcp_host_image
from spillover_harness.profile import PodSelector
from spillover_harness.results.records import read_records
from spillover_operator.domain.model import ENABLED_VAR
from spillover_operator.exit_codes import API as EXIT_CLUSTER
from spillover_operator.exit_codes import INCONCLUSIVE as EXIT_INCONCLUSIVE
from spillover_operator.exit_codes import OK as EXIT_OK

pytestmark = pytest.mark.integration

HARNESS = Path(sys.executable).parent / "spillover-harness"
GATE_FIX = (
    "run Stage 1 first (make validate-minikube), pass --stage1-results DIR, or "
    "--override-stage1 REASON"
)

MATRIX: dict[str, Any] = {
    "name": "cluster-gate",
    "seed": 20261130,
    "configurations": [
        {"name": "off", "env": {ENABLED_VAR: "false"}},
        {"name": "128KiB", "env": {}},
    ],
    "recipes": [
        {"name": "summarize", "inputs": [{"name": "document", "size_class": "medium"}]},
    ],
    "repetitions": {"sim": 1, "minikube": 1, "dev": 1},
    "run_timeout_s": 120,
    "concurrency": 1,
    "acceptance": {"baseline": "off", "token_tolerance": 0.1, "quality_recipes": ["summarize"]},
    "decision": {"chain": [{"config": "128KiB", "default": "131072"}], "fallback": "false"},
}


@dataclass
class Gate:
    env: PlatformEnv
    profile: Path  # mcp_host_version unset: the stage reads the pod's imageID
    digest: str  # the imageID of the mcp-host pod while Stage 1 ran


def harness(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a person runs it."""
    return subprocess.run(
        [str(HARNESS), *argv], capture_output=True, text=True, timeout=timeout, check=False
    )


def dev_args(gate: Gate, out: Path, *extra: str) -> list[str]:
    args = gate.env.stage_args(gate.profile, out, stage="dev")
    # Should the gate wrongly let a stage start, the first configuration's wait ends soon.
    args[args.index("--apply-timeout") + 1] = "60"
    return [*args, *extra]


def set_mcp_host_image(env: PlatformEnv, image: str) -> str:
    """Roll the mcp-host Deployment out to `image`; return the imageID the harness then
    reads from the cluster (after the stand-in kubelet reported it)."""
    apps = client.AppsV1Api(env.api)
    apps.patch_namespaced_deployment(
        "mcp-host",
        env.namespace,
        {"spec": {"template": {"spec": {"containers": [{"name": "mcp-host", "image": image}]}}}},
    )
    want = image_digest(image)
    core = client.CoreV1Api(env.api)
    selector = PodSelector(selector=MCP_HOST_SELECTOR, container="mcp-host")

    def only_the_new_pod_reports() -> bool:
        pods = core.list_namespaced_pod(env.namespace, label_selector=MCP_HOST_SELECTOR).items
        if [p.spec.containers[0].image for p in pods] != [image]:
            return False  # the old pod is still there
        report_image_ids_as_kubelet(env.api, env.namespace, MCP_HOST_SELECTOR)
        return mcp_host_image(connection(env.api, env.namespace), env.namespace, selector) == want

    wait_for(f"the mcp-host pod to run {image} and report {want}", only_the_new_pod_reports)
    return want


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gate]:
    with platform_env(tmp_path_factory.mktemp("cluster-gate"), MATRIX, "cluster-gate") as env:
        digest = set_mcp_host_image(env, MCP_HOST_IMAGE)
        profile = env.write_profile(
            "profile-gate", deep_merge(env.profile(), {"mcp_host_version": None})
        )
        yield Gate(env, profile, digest)


@pytest.fixture(scope="module")
def stage1(gate: Gate) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Stage 1 (minikube) once for the module, through the operator."""
    out = gate.env.tmp / "stage1"
    with gate.env.operator("op-stage1"):
        proc = harness(*gate.env.stage_args(gate.profile, out))
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    return out, proc


def _policy_fields(env: PlatformEnv) -> dict[str, Any]:
    spec = env.policy()["spec"]
    return {k: spec.get(k) for k in ("enabled", "thresholdBytes", "budgetBytes")}


def _no_records(out: Path) -> bool:
    records = out / "runs.jsonl"
    return not records.exists() or records.read_text().strip() == ""


# ---------------------------------------------------------------------------- tests


def test_stage1_records_the_image_digest_and_an_accepted_verdict(
    gate: Gate, stage1: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    out, proc = stage1
    assert gate.digest.startswith("example.invalid/mcp-host@sha256:")
    assert "preflight passed" in proc.stderr
    assert f"mcp-host version: {gate.digest}" in proc.stdout
    assert "decision: 131072" in proc.stdout, proc.stdout
    stage = json.loads((out / "stage.json").read_text())
    assert stage["stage"] == "minikube"
    assert stage["driver"]["mcp_host_version"] == gate.digest
    assert json.loads((out / "verdict.json").read_text())["decision"] == "131072"
    assert gate.digest in (out / "report.md").read_text()
    records = read_records(out / "runs.jsonl")
    assert sorted(r.config for r in records) == ["128KiB", "off"]
    assert all(r.stage == "minikube" and r.outcome == "succeeded" for r in records)


def test_dev_starts_when_stage1_accepted_the_same_version(
    gate: Gate, stage1: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    stage1_dir, _ = stage1
    out = gate.env.tmp / "dev-same-version"
    with gate.env.operator("op-dev-same"):
        proc = harness(*dev_args(gate, out, "--stage1-results", str(stage1_dir)))
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    accepted = f"Stage 1 accepted for this mcp-host version: decision 131072 ({stage1_dir})"
    assert accepted in proc.stderr
    assert f"mcp-host version: {gate.digest}" in proc.stdout
    assert "decision: 131072" in proc.stdout
    assert "overridden" not in (proc.stdout + proc.stderr).lower()
    assert accepted in (out / "report.md").read_text()
    assert json.loads((out / "stage.json").read_text())["driver"]["mcp_host_version"] == gate.digest
    records = read_records(out / "runs.jsonl")
    assert len(records) == 2 and all(r.stage == "dev" for r in records)


def test_dev_refuses_another_mcp_host_version(
    gate: Gate, stage1: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    """The dev cluster's mcp-host runs another image than Stage 1 validated: exit 5
    naming both digests and the fix, before any configuration is applied or run."""
    stage1_dir, _ = stage1
    before = _policy_fields(gate.env)
    out = gate.env.tmp / "dev-other-version"
    other = set_mcp_host_image(gate.env, "example.invalid/mcp-host:2")
    try:
        assert other != gate.digest
        proc = harness(*dev_args(gate, out, "--stage1-results", str(stage1_dir)))
    finally:
        set_mcp_host_image(gate.env, MCP_HOST_IMAGE)
    assert proc.returncode == EXIT_CLUSTER, proc.stdout + proc.stderr
    assert "error: stage dev stopped:" in proc.stderr
    assert f"validated mcp-host {gate.digest!r}, the dev cluster runs {other!r}" in proc.stderr
    assert GATE_FIX in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "configuration off" not in proc.stderr  # nothing was applied
    assert _no_records(out)
    assert _policy_fields(gate.env) == before


def test_dev_refuses_an_inconclusive_stage1(gate: Gate) -> None:
    """A real Stage 1 whose verdict is inconclusive (the output directory's pod cannot
    be found, so the leak and quality checks have no data): dev refuses it."""
    env = gate.env
    blind = deep_merge(
        env.profile(),
        {
            "mcp_host_version": None,
            "disk": {"pod": {"selector": "app.kubernetes.io/name=no-such-pod"}},
            "fixtures": {"pod": {"selector": MCP_HOST_SELECTOR, "container": "mcp-host"}},
        },
    )
    stage1_dir = env.tmp / "stage1-inconclusive"
    with env.operator("op-stage1-inconclusive"):
        first = harness(*env.stage_args(env.write_profile("profile-blind", blind), stage1_dir))
    assert first.returncode == EXIT_INCONCLUSIVE, first.stdout + first.stderr
    assert "decision: inconclusive" in first.stdout
    assert json.loads((stage1_dir / "verdict.json").read_text())["decision"] == "inconclusive"
    assert json.loads((stage1_dir / "stage.json").read_text())["driver"]["mcp_host_version"] == (
        gate.digest
    )

    out = env.tmp / "dev-after-inconclusive"
    proc = harness(*dev_args(gate, out, "--stage1-results", str(stage1_dir)))
    assert proc.returncode == EXIT_CLUSTER, proc.stdout + proc.stderr
    assert (
        f"Stage 1 in {stage1_dir} has no accepted verdict (decision 'inconclusive'); {GATE_FIX}"
    ) in proc.stderr
    assert _no_records(out)


def test_dev_refuses_when_stage1_results_are_missing(gate: Gate) -> None:
    missing = gate.env.tmp / "no-stage1-here"
    out = gate.env.tmp / "dev-no-stage1"
    proc = harness(*dev_args(gate, out, "--stage1-results", str(missing)))
    assert proc.returncode == EXIT_CLUSTER, proc.stdout + proc.stderr
    assert f"no Stage 1 results in {missing} (FileNotFoundError); {GATE_FIX}" in proc.stderr
    assert _no_records(out)


def test_override_lets_dev_start_and_the_report_says_why(gate: Gate) -> None:
    reason = "hotfix 4711 approved by the on-call lead"
    out = gate.env.tmp / "dev-override"
    missing = gate.env.tmp / "no-stage1-either"
    # The simulator, like a platform, refuses a run id it has already run, and run ids
    # are stable per (stage, configuration, recipe, input, repetition): this second dev
    # stage names its configurations differently so that its runs are new ones.
    matrix = deep_merge(MATRIX, {"name": "cluster-gate-override"})
    matrix["configurations"] = [
        {"name": f"{c['name']}-again", "env": c["env"]} for c in MATRIX["configurations"]
    ]
    matrix["acceptance"]["baseline"] = "off-again"
    matrix["decision"]["chain"] = [{"config": "128KiB-again", "default": "131072"}]
    matrix_path = gate.env.tmp / "matrix-override.yaml"
    matrix_path.write_text(yaml.safe_dump(matrix, sort_keys=False))
    args = dev_args(gate, out, "--stage1-results", str(missing), "--override-stage1", reason)
    args[args.index("--matrix") + 1] = str(matrix_path)
    with gate.env.operator("op-dev-override"):
        proc = harness(*args)
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    assert f"Stage 1 gate OVERRIDDEN: {reason}" in proc.stderr
    assert f"Stage 1 gate overridden: {reason}" in proc.stdout
    assert "decision: 131072" in proc.stdout
    report = (out / "report.md").read_text()
    assert "Stage 1 gate overridden" in report and reason in report
    records = read_records(out / "runs.jsonl")
    assert len(records) == 2 and all(r.outcome == "succeeded" for r in records)


def test_dev_refuses_a_stage1_that_decided_false_unless_told_to(
    gate: Gate, stage1: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    """A Stage 1 that decided `false` (spillover off) leaves no default to validate:
    dev refuses it (exit 5, naming the flag), and `--override-stage1-false` lets it
    start, recorded in stage.json's provenance and in the report. The Stage 1 here is
    the real one with its verdict's decision set to `false` (the gate reads
    verdict.json; a real `false` needs a failing platform)."""
    stage1_dir, _ = stage1
    decided_false = gate.env.tmp / "stage1-false"
    shutil.copytree(stage1_dir, decided_false)
    verdict = json.loads((decided_false / "verdict.json").read_text())
    verdict["decision"] = "false"
    (decided_false / "verdict.json").write_text(json.dumps(verdict))

    refused = gate.env.tmp / "dev-after-false"
    proc = harness(*dev_args(gate, refused, "--stage1-results", str(decided_false)))
    assert proc.returncode == EXIT_CLUSTER, proc.stdout + proc.stderr
    assert f"Stage 1 in {decided_false} decided `false` (spillover off)" in proc.stderr
    assert "--override-stage1-false" in proc.stderr
    assert _no_records(refused)

    # new configuration names: new run ids (see test_override_lets_dev_start...)
    matrix = deep_merge(MATRIX, {"name": "cluster-gate-false"})
    matrix["configurations"] = [
        {"name": f"{c['name']}-f", "env": c["env"]} for c in MATRIX["configurations"]
    ]
    matrix["acceptance"]["baseline"] = "off-f"
    matrix["decision"]["chain"] = [{"config": "128KiB-f", "default": "131072"}]
    matrix_path = gate.env.tmp / "matrix-false.yaml"
    matrix_path.write_text(yaml.safe_dump(matrix, sort_keys=False))
    out = gate.env.tmp / "dev-false-overridden"
    args = dev_args(gate, out, "--stage1-results", str(decided_false), "--override-stage1-false")
    args[args.index("--matrix") + 1] = str(matrix_path)
    with gate.env.operator("op-dev-false"):
        proc = harness(*args)
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    assert "Stage 1 decided `false`; Stage 2 ran anyway (--override-stage1-false)" in proc.stderr
    provenance = json.loads((out / "stage.json").read_text())["provenance"]
    assert provenance["profile"] == str(gate.profile)
    # the profile's content, as parsed: a profile edited under the same name shows
    from spillover_harness.profile.load import load_profile
    from spillover_harness.results.results_dir import content_hash

    parsed = load_profile(gate.profile).model_dump(mode="json", exclude={"kubectl"})
    assert provenance["profile_sha256"] == content_hash(parsed)
    assert provenance["simulator_parameters"] is None
    assert provenance["stage1_gate"] == {
        "status": "overridden",
        "flag": "--override-stage1-false",
        "stage1_results": str(decided_false),
        "stage1_decision": "false",
    }
    report = (out / "report.md").read_text()
    assert (
        "**Stage 1 gate overridden with `--override-stage1-false`** (Stage 1 decided `false`)"
        in report
    )
    assert (
        "--override-stage1-false" in json.loads((out / "stage.json").read_text())["resume_command"]
    )
