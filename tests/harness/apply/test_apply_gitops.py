"""apply-decision --gitops: the policy manifest is edited line by line (comments, order,
other documents kept), end to end from a simulated stage into a Git checkout."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from matrix_builders import small_matrix
from repo_paths import REPO_ROOT
from spillover_harness.apply.decision import spec_patch
from spillover_harness.apply.gitops import ManifestError, plan_manifest_edit
from spillover_harness.cli import main
from spillover_operator.exit_codes import BAD_INPUT, OK

SAMPLES = REPO_ROOT / "manifests" / "samples"

MULTI = """\
# the platform's spillover policy (reviewed by the platform team)
apiVersion: v1
kind: ConfigMap
metadata: {name: other}
data: {enabled: "true"}
---
apiVersion: spillover.clerum.io/v1alpha1
kind: SpilloverPolicy
metadata:
  name: spillover
  namespace: clerum
spec:
    enabled: true      # flip with the kill switch
    target:
        deployment: workflow-recipe-controller
    onDelete: Retain   # keep the env when the policy goes
---
apiVersion: spillover.clerum.io/v1alpha1
kind: SpilloverPolicy
metadata: {name: spillover, namespace: staging}
spec:
  enabled: false
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_threshold_added_with_the_specs_indentation_and_comments_kept(tmp_path: Path) -> None:
    path = write(tmp_path, MULTI)
    edit = plan_manifest_edit(path, "spillover", "clerum", spec_patch("32768"))
    assert edit.after["thresholdBytes"] == 32768 and edit.before.get("thresholdBytes") is None
    expected = MULTI.replace(
        "    onDelete: Retain   # keep the env when the policy goes\n",
        "    onDelete: Retain   # keep the env when the policy goes\n    thresholdBytes: 32768\n",
    )
    assert edit.text == expected


def test_kill_switch_replaces_only_the_value(tmp_path: Path) -> None:
    path = write(tmp_path, MULTI)
    edit = plan_manifest_edit(path, "spillover", "clerum", spec_patch("false"))
    assert edit.text == MULTI.replace(
        "    enabled: true      # flip", "    enabled: false      # flip"
    )


def test_default_removes_the_threshold_line(tmp_path: Path) -> None:
    text = (SAMPLES / "threshold-32kib.yaml").read_text(encoding="utf-8")
    path = write(tmp_path, text)
    edit = plan_manifest_edit(path, "spillover", None, spec_patch("131072"))
    assert edit.text == text.replace("  thresholdBytes: 32768\n", "")


def test_manifest_problems_are_named(tmp_path: Path) -> None:
    path = write(tmp_path, MULTI)
    with pytest.raises(ManifestError, match="no SpilloverPolicy named 'nope'"):
        plan_manifest_edit(path, "nope", None, spec_patch("false"))
    with pytest.raises(ManifestError, match="2 SpilloverPolicys named 'spillover'"):
        plan_manifest_edit(path, "spillover", None, spec_patch("false"))
    flow = write(tmp_path, "kind: SpilloverPolicy\nmetadata: {name: s}\nspec: {enabled: true}\n")
    with pytest.raises(ManifestError, match="flow style"):
        plan_manifest_edit(flow, "s", None, spec_patch("false"))
    with pytest.raises(ManifestError, match="no such manifest file"):
        plan_manifest_edit(tmp_path / "missing.yaml", "s", None, spec_patch("false"))


SIM_MATRIX = small_matrix("apply-small", input_name="large")


def git(repo: Path, *argv: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *argv], capture_output=True, text=True, check=True
    )
    return out.stdout


def test_end_to_end_from_a_simulated_stage_into_a_git_checkout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if shutil.which("git") is None:
        pytest.fail("git is needed for the --gitops test (a Git checkout); install git")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(SIM_MATRIX, encoding="utf-8")
    results = tmp_path / "sim"
    assert main(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(results)]) == OK
    assert json.loads((results / "verdict.json").read_text())["decision"] == "131072"
    report = (results / "report.md").read_text(encoding="utf-8")
    # A simulated verdict's report names no apply command (no bypass flag handed over):
    # the disclaimer comes first, then what it would take (the cluster stage).
    assert "apply-decision --results" not in report and "--allow-simulated" not in report
    assert report.index("embedded simulator") < report.index("**Decision:")
    assert "run the cluster stage" in report

    repo = tmp_path / "gitops"
    (repo / "clusters" / "dev").mkdir(parents=True)
    manifest = repo / "clusters" / "dev" / "spillover.yaml"
    original = (SAMPLES / "threshold-32kib.yaml").read_text(encoding="utf-8")
    manifest.write_text(original, encoding="utf-8")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "x")
    capsys.readouterr()

    argv = ["apply-decision", "--results", str(results), "--gitops", str(manifest), "-n", "clerum"]
    assert main(argv) == BAD_INPUT  # a simulated verdict needs --allow-simulated
    assert "comes from the simulator" in capsys.readouterr().err
    assert main([*argv, "--allow-simulated", "--dry-run"]) == OK
    out = capsys.readouterr().out
    assert "would change" in out and "spec.thresholdBytes: 32768 -> unset" in out
    assert manifest.read_text(encoding="utf-8") == original

    assert main([*argv, "--allow-simulated"]) == OK
    out = capsys.readouterr().out
    assert "commit it: git -C" in out
    assert "validated" in out and "apply the validated decision" not in out
    assert "not validated on the platform" in out
    diff = git(repo, "diff", "--unified=0")
    changed = [ln for ln in diff.splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
    assert changed == ["-  thresholdBytes: 32768"]
    # Applying it again changes nothing.
    assert main([*argv, "--allow-simulated"]) == OK
    assert "already says this" in capsys.readouterr().out
