"""A stand-in for the workflow-recipe controller (WRC) on the local real-node cluster:
what the platform's WRC does with the spillover variables, and nothing else.

At start (a WRC reads its environment once) it renders, for each recipe, the recipe's
mcp-host Deployment ``mcp-host-<recipe>``: the simulator serving as the mcp-host
(``python3 -m spillover_harness.sim.server --env-from-process``), with every variable
named in its own ``MCP_HOST_ENV_PASSTHROUGH`` copied from its own environment. Then it
answers ``/healthz`` (so its rollout completes only once the values are passed on) and
idles. When the operator changes the WRC's env the WRC pod is replaced, and the new one
renders again: the whole chain policy -> WRC Deployment -> WRC process -> mcp-host
Deployment -> mcp-host process, each step a real one.

``render_mcp_host`` is the pure part (tests call it); ``main`` talks to the API through
``spillover_operator.client`` in-cluster.
"""

from __future__ import annotations

import argparse
import http.server
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spillover_operator.constants import PASSTHROUGH_VAR
from spillover_operator.mcp_host import REPORT_ANNOTATION

MCP_HOST_PORT = 8080
MCP_HOST_LABEL = ("app.kubernetes.io/name", "mcp-host")
RECIPE_LABEL = "spillover.clerum.io/recipe"
FAULTS = ("ignore-env",)
MAX_RECIPES = 20
MAX_REPLICAS = 10


class RecipeSpecError(ValueError):
    """A --recipe argument that is not NAME[=REPLICAS][:FAULT]."""


@dataclass(frozen=True)
class Recipe:
    name: str
    replicas: int = 1
    fault: str | None = None


def parse_recipe(text: str) -> Recipe:
    """NAME[=REPLICAS][:FAULT], e.g. `r1`, `r1=2`, `r2=1:ignore-env`."""
    head, _, fault = text.partition(":")
    name, eq, replicas = head.partition("=")
    if not name or len(name) > 40 or not all(c.isalnum() or c == "-" for c in name):
        raise RecipeSpecError(f"recipe name {name!r}: letters, digits and '-', at most 40")
    if name != name.lower() or name.startswith("-") or name.endswith("-"):
        raise RecipeSpecError(f"recipe name {name!r}: lower case, no '-' at either end")
    count = 1
    if eq:
        if not replicas.isdigit() or not 0 <= int(replicas) <= MAX_REPLICAS:
            raise RecipeSpecError(f"{text!r}: REPLICAS must be 0..{MAX_REPLICAS}")
        count = int(replicas)
    if fault and fault not in FAULTS:
        raise RecipeSpecError(f"{text!r}: FAULT must be one of {', '.join(FAULTS)}")
    return Recipe(name, count, fault or None)


def forwarded_env(env: Mapping[str, str]) -> list[dict[str, str]]:
    """The variables MCP_HOST_ENV_PASSTHROUGH names, as this process has them (the
    platform's WRC forwards exactly these; a named variable it lacks is not set)."""
    names = [n.strip() for n in env.get(PASSTHROUGH_VAR, "").split(",") if n.strip()]
    return [{"name": n, "value": env[n]} for n in dict.fromkeys(names) if n in env]


def render_mcp_host(
    recipe: Recipe,
    *,
    image: str,
    env: Mapping[str, str],
    node_selector: Mapping[str, str] | None = None,
    tolerate: Sequence[str] = (),
) -> dict[str, Any]:
    """The recipe's mcp-host Deployment, as the WRC renders it from its own `env`."""
    labels = {MCP_HOST_LABEL[0]: MCP_HOST_LABEL[1], RECIPE_LABEL: recipe.name}
    args = ["-m", "spillover_harness.sim.server", "--host", "0.0.0.0",
            "--port", str(MCP_HOST_PORT), "--env-from-process"]  # fmt: skip
    if recipe.fault == "ignore-env":
        args.append("--fault-ignore-env")
    pod_spec: dict[str, Any] = {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "runAsGroup": 10001,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "mcp-host",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3"],
                "args": args,
                "env": forwarded_env(env),
                "ports": [{"name": "http", "containerPort": MCP_HOST_PORT}],
                "readinessProbe": {
                    "httpGet": {"path": "/healthz", "port": MCP_HOST_PORT},
                    "periodSeconds": 2,
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            }
        ],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
        "terminationGracePeriodSeconds": 2,
    }
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    if tolerate:
        pod_spec["tolerations"] = [
            {"key": key, "operator": "Exists", "effect": "NoSchedule"} for key in tolerate
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"mcp-host-{recipe.name}", "labels": dict(labels)},
        "spec": {
            "replicas": recipe.replicas,
            "selector": {"matchLabels": dict(labels)},
            "template": {
                "metadata": {
                    "labels": dict(labels),
                    # Where the process reports what it runs with (mcp_host.py).
                    "annotations": {REPORT_ANNOTATION: f"{MCP_HOST_PORT}/spillover"},
                },
                "spec": pod_spec,
            },
        },
    }


def _serve_health(port: int) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 404)
            self.end_headers()
            self.wfile.write(b"ok\n")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m spillover_harness.sim.wrc",
        description="The WRC stand-in: render each recipe's mcp-host Deployment from this "
        "process's own MCP_HOST_ENV_PASSTHROUGH variables, then answer /healthz.",
    )
    parser.add_argument(
        "--recipe",
        action="append",
        default=[],
        metavar="NAME[=N][:FAULT]",
        help="a recipe and its mcp-host replicas (repeatable); FAULT: ignore-env",
    )
    parser.add_argument("--image", required=True, help="the mcp-host image (this one)")
    parser.add_argument("--node-selector", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--tolerate", action="append", default=[], metavar="TAINT_KEY")
    parser.add_argument("--health-port", type=int, default=8080)
    args = parser.parse_args(argv)
    try:
        if not args.recipe or len(args.recipe) > MAX_RECIPES:
            raise RecipeSpecError(f"give 1..{MAX_RECIPES} --recipe")
        recipes = [parse_recipe(r) for r in args.recipe]
        selector = dict(kv.split("=", 1) for kv in args.node_selector if "=" in kv)
    except RecipeSpecError as exc:
        print(f"wrc: {exc}", file=sys.stderr)
        return 2
    from spillover_operator.client import ClientError, apply_deployment, connect

    try:
        conn = connect(field_manager="workflow-recipe-controller", prefer_in_cluster=True)
        for recipe in recipes:
            apply_deployment(
                conn,
                render_mcp_host(recipe, image=args.image, env=os.environ,
                                node_selector=selector, tolerate=args.tolerate),
            )  # fmt: skip
            print(f"wrc: rendered mcp-host-{recipe.name}", flush=True)
    except ClientError as exc:
        print(f"wrc: {exc}", file=sys.stderr)
        return 1
    _serve_health(args.health_port)
    # PID 1 in its pod: stop at once on SIGTERM (otherwise the kubelet waits the grace
    # period out, and the WRC rollout with it).
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
