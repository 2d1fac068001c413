"""`spec.enabled` is required, with no default (manifests/crd): client-side `kubectl
apply` drops `enabled: null` before sending, so the field arrives absent, and a
default `true` turned the kill switch ON. Applied with our kubectl (`make kubectl`) to
the local control plane, a policy with `enabled: null` and one without `enabled` are
both refused by the API server; `enabled: false` is admitted and stored as false."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from controlplane.localcluster import LocalCluster
from k8s_helpers import read_policy
from kubernetes import client
from kustomize_build import kubectl

pytestmark = pytest.mark.integration

POLICY = """\
apiVersion: spillover.clerum.io/v1alpha1
kind: SpilloverPolicy
metadata:
  name: {name}
  namespace: {namespace}
spec:
{enabled}  target:
    deployment: workflow-recipe-controller
"""


def apply(
    control_plane: LocalCluster, tmp_path: Path, namespace: str, name: str, enabled: str
) -> subprocess.CompletedProcess[str]:
    """`kubectl apply -f` (client-side, kubectl's default) of one policy."""
    manifest = tmp_path / f"{name}.yaml"
    manifest.write_text(POLICY.format(name=name, namespace=namespace, enabled=enabled))
    return subprocess.run(
        [kubectl(), "--kubeconfig", str(control_plane.kubeconfig), "apply", "-f", str(manifest)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_kubectl_apply_refuses_a_policy_with_enabled_null_or_without_enabled(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    for name, enabled in (("null-enabled", "  enabled: null\n"), ("no-enabled", "")):
        proc = apply(control_plane, tmp_path, namespace, name, enabled)
        assert proc.returncode != 0, proc.stdout
        assert "spec.enabled: Required value" in proc.stderr, proc.stderr
        got = client.CustomObjectsApi(admin).list_namespaced_custom_object(
            "spillover.clerum.io", "v1alpha1", namespace, "spilloverpolicies"
        )
        assert [p["metadata"]["name"] for p in got["items"]] == []

    proc = apply(control_plane, tmp_path, namespace, "kill-switch", "  enabled: false\n")
    assert proc.returncode == 0, proc.stderr
    assert read_policy(admin, namespace, "kill-switch")["spec"]["enabled"] is False
