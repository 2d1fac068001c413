"""A stand-in for the workflow-recipe controller (WRC) on the local real-node cluster:
what the platform's WRC does with the spillover variables, and nothing else.

At start (a WRC reads its environment once) it renders, for each recipe, the recipe's
mcp-host Deployment ``mcp-host-<recipe>``: the simulator serving as the mcp-host
(``python3 -m spillover_harness.sim.server --env-from-process``), with every variable
named in its own ``MCP_HOST_ENV_PASSTHROUGH`` copied from its own environment. Then it
answers ``/healthz`` (so its rollout completes only once the values are passed on) and,
with ``--serve-runs``, the platform's run API: each run goes pod to pod to a Ready
mcp-host pod of its recipe, and its status names that pod (``mcpHostPod``). When
the operator changes the WRC's env the WRC pod is replaced, and the new one renders
again: the whole chain policy -> WRC Deployment -> WRC process -> mcp-host
Deployment -> mcp-host process, each step a real one.

``render_mcp_host`` is the pure part (tests call it); ``main`` talks to the API through
``spillover_operator.client`` in-cluster.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import re
import signal
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spillover_operator.domain.mcp_host import REPORT_ANNOTATION
from spillover_operator.domain.model import PASSTHROUGH_VAR

MCP_HOST_PORT = 8080
MCP_HOST_LABEL = ("app.kubernetes.io/name", "mcp-host")
RECIPE_LABEL = "spillover.clerum.io/recipe"
FAULTS = ("ignore-env",)
# How the WRC passes the variables on: in the Deployment's env (a change rolls the pods)
# or, with `configmap`, in the ConfigMap `mcp-host-<recipe>-env` the pods read at start
# (`envFrom`): their template does not change, so running pods keep the old values until
# something restarts them (the operator's recipe-pod refresh).
PASS_MODES = ("configmap",)
MAX_RECIPES = 20
MAX_REPLICAS = 10
MAX_BODY = 1 << 20
FIXTURES_DIR = "/tmp/fixtures"  # the `local` profile's fixtures.dir


class RecipeSpecError(ValueError):
    """A --recipe argument that is not NAME[=REPLICAS][:FAULT]."""


@dataclass(frozen=True)
class Recipe:
    name: str
    replicas: int = 1
    fault: str | None = None
    via_config_map: bool = False

    @property
    def config_map(self) -> str:
        return f"mcp-host-{self.name}-env"


def parse_recipe(text: str) -> Recipe:
    """NAME[=REPLICAS][:FAULT][:configmap], e.g. `r1`, `r1=2`, `r2=1:ignore-env`,
    `r3=2:configmap`."""
    head, *options = text.split(":")
    fault = next((o for o in options if o not in PASS_MODES), "")
    if len([o for o in options if o not in PASS_MODES]) > 1 or len(options) > 2:
        raise RecipeSpecError(f"{text!r}: at most one FAULT and one of {', '.join(PASS_MODES)}")
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
    return Recipe(name, count, fault or None, via_config_map="configmap" in options)


def forwarded_env(env: Mapping[str, str]) -> list[dict[str, str]]:
    """The variables MCP_HOST_ENV_PASSTHROUGH names, as this process has them (the
    platform's WRC forwards exactly these; a named variable it lacks is not set)."""
    names = [n.strip() for n in env.get(PASSTHROUGH_VAR, "").split(",") if n.strip()]
    return [{"name": n, "value": env[n]} for n in dict.fromkeys(names) if n in env]


MCP_HOST_MEMORY_LIMIT = "512Mi"
# What --mcp-host-memory-limit takes: a whole number of Mi or Gi, 16Mi..64Gi.
_MEMORY_LIMIT = re.compile(r"^([1-9][0-9]{0,4})(Mi|Gi)$")


class MemoryLimitError(ValueError):
    """Not a memory limit the stand-in gives its mcp-host pods."""


def memory_limit(text: str) -> str:
    """`text` if it is a memory limit of 16Mi..64Gi written as `<N>Mi` or `<N>Gi`."""
    match = _MEMORY_LIMIT.match(text)
    mib = int(match.group(1)) * (1024 if match.group(2) == "Gi" else 1) if match else 0
    if not 16 <= mib <= 64 * 1024:
        raise MemoryLimitError(
            f"memory limit {text[:40]!r}: give a whole number of Mi or Gi from 16Mi to 64Gi "
            f"(default {MCP_HOST_MEMORY_LIMIT})"
        )
    return text


def render_mcp_host(
    recipe: Recipe,
    *,
    image: str,
    env: Mapping[str, str],
    node_selector: Mapping[str, str] | None = None,
    tolerate: Sequence[str] = (),
    limit: str = MCP_HOST_MEMORY_LIMIT,
) -> dict[str, Any]:
    """The recipe's mcp-host Deployment, as the WRC renders it from its own `env`
    (`limit`: the container's memory limit)."""
    labels = {MCP_HOST_LABEL[0]: MCP_HOST_LABEL[1], RECIPE_LABEL: recipe.name}
    args = ["-m", "spillover_harness.sim.server", "--host", "0.0.0.0",
            "--port", str(MCP_HOST_PORT), "--env-from-process", "--log-stdout",
            "--export-fixtures", FIXTURES_DIR]  # fmt: skip
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
                "env": [] if recipe.via_config_map else forwarded_env(env),
                "ports": [{"name": "http", "containerPort": MCP_HOST_PORT}],
                **(
                    {"envFrom": [{"configMapRef": {"name": recipe.config_map}}]}
                    if recipe.via_config_map
                    else {}
                ),
                "readinessProbe": {
                    "httpGet": {"path": "/healthz", "port": MCP_HOST_PORT},
                    "periodSeconds": 2,
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                # A limit, as the platform gives its mcp-host (2Gi there; this node is
                # small): the cluster stage reports the peak against it (cAdvisor).
                "resources": {
                    "requests": {"memory": "64Mi"},
                    "limits": {"memory": limit},
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


def render_env_config_map(recipe: Recipe, env: Mapping[str, str]) -> dict[str, Any]:
    """The ConfigMap a `configmap` recipe's pods read their variables from."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": recipe.config_map, "labels": {RECIPE_LABEL: recipe.name}},
        "data": {e["name"]: e["value"] for e in forwarded_env(env)},
    }


class NoServingPod(LookupError):
    """No Ready mcp-host pod of the recipe to send a run to."""


@dataclass(frozen=True)
class ServingPod:
    name: str
    ip: str


def ready_pods(pods: Sequence[Mapping[str, Any]]) -> list[ServingPod]:
    """The pods a run may go to: Running, Ready, with an IP, not being deleted."""
    out: list[ServingPod] = []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        if meta.get("deletionTimestamp") or status.get("phase") != "Running" or not ready:
            continue
        if status.get("podIP"):
            out.append(ServingPod(str(meta.get("name")), str(status["podIP"])))
    return out


class RunRouter:
    """The platform's run API (`POST /runs`, `GET /runs/{id}`, `/logs`, `/cancel`), as
    the WRC offers it: each run goes to one Ready mcp-host pod of its recipe (the one
    that served the fewest runs here), pod to pod, and every answer about the run comes
    from that pod, with `mcpHostPod` naming it (the harness records the pod that served
    the run). `pods_of(recipe)` lists the recipe's pods (API dicts)."""

    def __init__(
        self,
        recipes: Sequence[str],
        pods_of: Callable[[str], Sequence[Mapping[str, Any]]],
        *,
        port: int = MCP_HOST_PORT,
        timeout_s: float = 10.0,
    ) -> None:
        self.recipes = set(recipes)
        self.pods_of, self.port, self.timeout_s = pods_of, port, timeout_s
        self._runs: dict[str, ServingPod] = {}
        self._served: dict[str, int] = {}
        self._lock = threading.Lock()

    def choose(self, recipe: str) -> ServingPod:
        pods = ready_pods(self.pods_of(recipe))
        if not pods:
            raise NoServingPod(f"no Ready mcp-host pod of recipe {recipe!r}")
        with self._lock:
            pod = min(pods, key=lambda p: (self._served.get(p.name, 0), p.name))
            self._served[pod.name] = self._served.get(pod.name, 0) + 1
        return pod

    def _send(
        self, pod: ServingPod, method: str, path: str, body: bytes | None = None
    ) -> tuple[int, bytes, str]:
        request = urllib.request.Request(
            f"http://{pod.ip}:{self.port}{path}", data=body, method=method,
            headers={"Content-Type": "application/json"} if body is not None else {},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                return resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), exc.headers.get("Content-Type", "")

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        """(HTTP status, body, content type) for one request of the run API."""
        parts = [p for p in path.split("?", 1)[0].split("/") if p]
        try:
            if method == "POST" and parts == ["runs"]:
                return self._start(body)
            if len(parts) >= 2 and parts[0] == "runs":
                with self._lock:
                    pod = self._runs.get(parts[1])
                if pod is None:
                    return _json(404, {"error": f"unknown run {parts[1][:128]!r}"})
                if method == "GET" and len(parts) == 2:
                    code, data, kind = self._send(pod, "GET", path)
                    if code == 200:
                        doc = json.loads(data)
                        doc["mcpHostPod"] = pod.name
                        return _json(200, doc)
                    return code, data, kind
                if (method, tuple(parts[2:])) in {("GET", ("logs",)), ("POST", ("cancel",))}:
                    return self._send(pod, method, path, body if method == "POST" else None)
            return _json(404, {"error": f"no such endpoint: {method} {path[:200]}"})
        except (OSError, ValueError) as exc:  # a pod gone, an answer that is not JSON
            return _json(502, {"error": f"mcp-host: {type(exc).__name__}: {str(exc)[:300]}"})

    def _start(self, body: bytes) -> tuple[int, bytes, str]:
        try:
            doc = json.loads(body)
        except ValueError:
            return _json(400, {"error": "the body must be JSON"})
        recipe = doc.get("recipe") if isinstance(doc, dict) else None
        if recipe not in self.recipes:
            known = ", ".join(sorted(self.recipes))
            return _json(400, {"error": f"unknown recipe {str(recipe)[:80]!r} (known: {known})"})
        try:
            pod = self.choose(recipe)
        except NoServingPod as exc:
            return _json(503, {"error": str(exc)})
        code, data, kind = self._send(pod, "POST", "/runs", body)
        if code == 202:
            run_id = json.loads(data).get("run_id")
            if isinstance(run_id, str):
                with self._lock:
                    self._runs[run_id] = pod
        return code, data, kind


def _json(code: int, doc: Mapping[str, Any]) -> tuple[int, bytes, str]:
    return code, json.dumps(doc).encode(), "application/json"


def _serve(port: int, router: RunRouter | None) -> http.server.ThreadingHTTPServer:
    """/healthz, and the run API when `router` is given."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self, code: int, data: bytes, kind: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind or "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self, method: str) -> None:
            if method == "GET" and self.path == "/healthz":
                self._answer(200, b"ok\n", "text/plain")
                return
            length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
            body = self.rfile.read(length) if length else b""
            if router is None:
                self._answer(404, b"not found\n", "text/plain")
                return
            self._answer(*router.handle(method, self.path, body))

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


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
        metavar="NAME[=N][:FAULT][:configmap]",
        help="a recipe and its mcp-host replicas (repeatable); FAULT: ignore-env; "
        "configmap: pass the variables in a ConfigMap the pods read at start",
    )
    parser.add_argument("--image", required=True, help="the mcp-host image (this one)")
    parser.add_argument("--node-selector", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--tolerate", action="append", default=[], metavar="TAINT_KEY")
    parser.add_argument("--health-port", type=int, default=8080, help="/healthz (and the runs)")
    parser.add_argument(
        "--mcp-host-memory-limit",
        default=MCP_HOST_MEMORY_LIMIT,
        metavar="N(Mi|Gi)",
        help=f"the mcp-host containers' memory limit (default {MCP_HOST_MEMORY_LIMIT})",
    )
    parser.add_argument(
        "--serve-runs",
        action="store_true",
        help="also serve the platform's run API on that port, each run sent to a Ready "
        "mcp-host pod of its recipe (needs list on pods)",
    )
    args = parser.parse_args(argv)
    try:
        if not args.recipe or len(args.recipe) > MAX_RECIPES:
            raise RecipeSpecError(f"give 1..{MAX_RECIPES} --recipe")
        recipes = [parse_recipe(r) for r in args.recipe]
        selector = dict(kv.split("=", 1) for kv in args.node_selector if "=" in kv)
        limit = memory_limit(args.mcp_host_memory_limit)
    except (RecipeSpecError, MemoryLimitError) as exc:
        print(f"wrc: {exc}", file=sys.stderr)
        return 2
    from spillover_operator.client import (
        ClientError,
        apply_config_map,
        apply_deployment,
        connect,
        list_pods,
    )

    try:
        conn = connect(field_manager="workflow-recipe-controller", prefer_in_cluster=True)
        for recipe in recipes:
            if recipe.via_config_map:
                apply_config_map(conn, render_env_config_map(recipe, os.environ))
            apply_deployment(
                conn,
                render_mcp_host(recipe, image=args.image, env=os.environ,
                                node_selector=selector, tolerate=args.tolerate,
                                limit=limit),
            )  # fmt: skip
            print(f"wrc: rendered mcp-host-{recipe.name}", flush=True)
    except ClientError as exc:
        print(f"wrc: {exc}", file=sys.stderr)
        return 1

    def pods_of(recipe: str) -> list[dict[str, Any]]:
        selector = f"{MCP_HOST_LABEL[0]}={MCP_HOST_LABEL[1]},{RECIPE_LABEL}={recipe}"
        return list_pods(conn, selector)

    router = RunRouter([r.name for r in recipes], pods_of) if args.serve_runs else None
    _serve(args.health_port, router)
    # PID 1 in its pod: stop at once on SIGTERM (otherwise the kubelet waits the grace
    # period out, and the WRC rollout with it).
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
