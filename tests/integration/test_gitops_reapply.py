"""GitOps beside the operator (docs/gitops.md): re-applying the WRC manifest kept in
Git, as Flux and Argo CD's ServerSideApply do (server-side apply, forced, under their
own field manager), while the operator runs.

- manifests/gitops/wrc-deployment.yaml (its passthrough already lists the spillover
  names): the re-apply changes nothing: no new generation, no rollout, the operator's
  variables stay.
- The same manifest with the passthrough as the WRC ships it (without our names): the
  apply takes the names out, the operator puts them back: two new generations, two
  rollouts: the fight the documented manifest avoids.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import connection, env_map, wait_for
from spillover_operator.domain.model import ENABLED_VAR, PASSTHROUGH_VAR, SPILLOVER_VARS

# The operator tests' cluster fixtures and helpers (a namespace, the CRD, the operator
# under the manifests' Role).
from test_operator_integration import Cluster, cluster, crd, settled  # noqa: F401

pytestmark = pytest.mark.integration

GITOPS = Path(__file__).resolve().parents[2] / "manifests" / "gitops"
WRC = "workflow-recipe-controller"


def _git_manifest(namespace: str, passthrough: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((GITOPS / "wrc-deployment.yaml").read_text())
    doc = copy.deepcopy(doc)
    doc["metadata"]["namespace"] = namespace
    if passthrough is not None:
        for var in doc["spec"]["template"]["spec"]["containers"][0]["env"]:
            if var["name"] == PASSTHROUGH_VAR:
                var["value"] = passthrough
    return doc


def _server_side_apply(c: Cluster, doc: dict[str, Any], manager: str) -> None:
    conn = connection(c.api, c.namespace)
    conn.transport.request(
        "PATCH",
        f"/apis/apps/v1/namespaces/{c.namespace}/deployments/{doc['metadata']['name']}",
        query=[("fieldManager", manager), ("force", "true")],
        body=doc,
        content_type="application/apply-patch+yaml",
        timeout=conn.request_timeout,
    )


def _first_apply(c: Cluster) -> int:
    """Git creates the WRC, the operator applies the policy; the generation after."""
    _server_side_apply(c, _git_manifest(c.namespace), "kustomize-controller")
    op = c.start_operator()
    c.create_policy(
        "spillover", {"enabled": True, "thresholdBytes": 32768, "target": {"deployment": WRC}}
    )
    c.wait_ready("spillover")
    wait_for("the Deployment to settle", lambda: settled(c.deployment()), operator=op)
    return int(c.deployment()["metadata"]["generation"])


def test_reapplying_the_documented_manifest_changes_nothing(
    cluster: Cluster,  # noqa: F811
) -> None:
    before = _first_apply(cluster)
    env_before = env_map(cluster.deployment())
    assert env_before[ENABLED_VAR] == "true"

    _server_side_apply(cluster, _git_manifest(cluster.namespace), "kustomize-controller")
    after = cluster.deployment()
    assert after["metadata"]["generation"] == before
    assert env_map(after) == env_before
    policy = cluster.wait_ready("spillover")
    assert policy["status"]["rollout"]["complete"]


def test_reapplying_a_passthrough_without_our_names_costs_two_rollouts(
    cluster: Cluster,  # noqa: F811
) -> None:
    before = _first_apply(cluster)
    shipped = _git_manifest(cluster.namespace, passthrough="OPENAI_BASE_URL")
    _server_side_apply(cluster, shipped, "kustomize-controller")
    op = cluster.operators[-1]

    def restored() -> bool:
        passthrough = env_map(cluster.deployment()).get(PASSTHROUGH_VAR) or ""
        return all(name in passthrough.split(",") for name in SPILLOVER_VARS)

    wait_for("the operator to restore the passthrough names", restored, operator=op)
    cluster.wait_ready("spillover")
    assert cluster.deployment()["metadata"]["generation"] == before + 2
