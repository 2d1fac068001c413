"""The platform stand-ins for the local real-node cluster, as manifests: the WRC stand-in
(`sim.wrc`) as Deployment ``workflow-recipe-controller`` with a ServiceAccount that may
render Deployments and list pods in its namespace, and a Service of the same name for
its run API. Its pods and the mcp-host pods it renders run on
the real node; the operator (`make deploy-local`) targets it like the platform's WRC.

    python3 -m spillover_harness.sim.platform --image IMG --recipe r1=2 | kubectl apply -f -
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import yaml
from spillover_operator.domain.model import PASSTHROUGH_VAR

from spillover_harness.sim.wrc import (
    MAX_RECIPES,
    MCP_HOST_MEMORY_LIMIT,
    MemoryLimitError,
    RecipeSpecError,
    memory_limit,
    parse_recipe,
)

WRC_NAME = "workflow-recipe-controller"
WRC_PORT = 8080
REAL_NODE_LABEL = "spillover.clerum.io/real-node"


def render_platform(
    namespace: str,
    image: str,
    recipes: Sequence[str],
    *,
    real_node: bool = True,
    mcp_host_memory_limit: str = MCP_HOST_MEMORY_LIMIT,
) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding, the WRC stand-in Deployment and its Service
    (the platform's run API, `run.service` of the `local` profile); the stand-in gives
    its mcp-host pods `mcp_host_memory_limit`."""
    if not recipes or len(recipes) > MAX_RECIPES:
        raise RecipeSpecError(f"give 1..{MAX_RECIPES} recipes")
    for recipe in recipes:
        parse_recipe(recipe)
    meta = {"name": WRC_NAME, "namespace": namespace}
    placement: dict[str, Any] = {}
    wrc_args = ["-m", "spillover_harness.sim.wrc", "--image", image, "--serve-runs"]
    wrc_args += [f"--recipe={r}" for r in recipes]
    wrc_args += [f"--mcp-host-memory-limit={memory_limit(mcp_host_memory_limit)}"]
    if real_node:
        placement = {
            "nodeSelector": {REAL_NODE_LABEL: "true"},
            "tolerations": [{"key": REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
        }
        wrc_args += [f"--node-selector={REAL_NODE_LABEL}=true", f"--tolerate={REAL_NODE_LABEL}"]
    labels = {"app.kubernetes.io/name": WRC_NAME}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": dict(meta),
            "rules": [
                {
                    "apiGroups": ["apps"],
                    "resources": ["deployments"],
                    "verbs": ["get", "create", "patch"],
                },
                # The run API sends each run to a Ready mcp-host pod of its recipe.
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
                # `configmap` recipes: the variables passed on in mcp-host-<recipe>-env.
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "verbs": ["get", "create", "patch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": dict(meta),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": WRC_NAME},
            "subjects": [{"kind": "ServiceAccount", "name": WRC_NAME, "namespace": namespace}],
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {**meta, "labels": dict(labels)},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": dict(labels)},
                "template": {
                    "metadata": {"labels": dict(labels)},
                    "spec": {
                        "serviceAccountName": WRC_NAME,
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
                        "terminationGracePeriodSeconds": 2,
                        **placement,
                        "containers": [
                            {
                                "name": "wrc",
                                "image": image,
                                "imagePullPolicy": "IfNotPresent",
                                "command": ["python3"],
                                "args": wrc_args,
                                # The operator appends the spillover variables' names.
                                "env": [{"name": PASSTHROUGH_VAR, "value": ""}],
                                "ports": [{"name": "http", "containerPort": WRC_PORT}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/healthz", "port": 8080},
                                    "periodSeconds": 1,
                                },
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]},
                                },
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": dict(meta),
            "spec": {
                "selector": dict(labels),
                "ports": [{"name": "http", "port": WRC_PORT, "targetPort": "http"}],
            },
        },
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m spillover_harness.sim.platform",
        description="Print the manifests of the WRC stand-in for the local real-node "
        "cluster (pipe them to `kubectl apply -f -`).",
    )
    parser.add_argument("--namespace", default="clerum")
    parser.add_argument("--image", default="localhost/spillover-platform:dev")
    parser.add_argument("--recipe", action="append", default=[], metavar="NAME[=N][:FAULT]")
    parser.add_argument("--no-real-node", action="store_true", help="do not pin to the real node")
    parser.add_argument(
        "--mcp-host-memory-limit",
        default=MCP_HOST_MEMORY_LIMIT,
        metavar="N(Mi|Gi)",
        help=f"the mcp-host containers' memory limit (default {MCP_HOST_MEMORY_LIMIT})",
    )
    args = parser.parse_args(argv)
    try:
        docs = render_platform(
            args.namespace,
            args.image,
            args.recipe or ["r1=2"],
            real_node=not args.no_real_node,
            mcp_host_memory_limit=args.mcp_host_memory_limit,
        )
    except (RecipeSpecError, MemoryLimitError) as exc:
        print(f"platform: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
