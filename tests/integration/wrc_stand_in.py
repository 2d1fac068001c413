"""A TEST-ONLY STAND-IN for the workflow-recipe controller (WRC).

The real WRC (which creates one mcp-host pod per recipe and forwards the variables
named in its MCP_HOST_ENV_PASSTHROUGH to it) cannot be had here: it is not public and
does not run on the local control plane. This stand-in plays only that part of it, on
the real API server, so the operator and spilloverctl meet real pods, ReplicaSets and
Deployments:

- "the WRC's env" is what the WRC's process sees: the container of its newest running
  pod, resolved as the kubelet does (`resolved_env`, ConfigMaps read), filtered by the
  names its MCP_HOST_ENV_PASSTHROUGH lists;
- it keeps one mcp-host workload per recipe (labels `app.kubernetes.io/name: mcp-host`,
  `recipe: <name>`, container `mcp-host`) in one of three behaviours, because whether
  the real WRC re-renders existing recipe workloads is not known:

  1. `rerender`: a Deployment per recipe whose template env it rewrites whenever the
     WRC's env changes (the Deployment controller rolls the pods);
  2. `at-pod-creation`: each pod gets the WRC's env of the moment it is created, so
     running pods keep the env they were created with. Two ways (`via`): `pods`, bare
     pods it controls (owner: a ConfigMap standing for the recipe run) and recreates
     when one is gone; `deployment`, a Deployment per recipe whose template reads a
     ConfigMap (`envFrom`) that the stand-in keeps equal to the WRC's env (a container
     reads it when it starts: a rollout restart brings the new values);
  3. `baked`: a Deployment per recipe whose template gets the WRC's env once, at
     creation, and is never re-rendered (a rollout restart brings the old values back).

`replicas` (per recipe Deployment), `max_surge` and `min_ready_seconds` shape the
recipe Deployments' rollouts; `pass_delay` makes it a slow WRC: it passes a change of
its env on only once it has seen it that long (the real WRC passes values on some time
after its own rollout).

`sync()` does one pass; `start()`/`stop()` run passes in a background thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from spillover_operator.client import Connection, config_map_lookup, list_pods
from spillover_operator.domain.envplan import passthrough_names
from spillover_operator.domain.model import PASSTHROUGH_VAR
from spillover_operator.domain.resolved_env import resolve

Behaviour = Literal["rerender", "at-pod-creation", "baked"]
Via = Literal["pods", "deployment"]
RECIPE_LABEL = "recipe"
MCP_HOST_LABELS = {"app.kubernetes.io/name": "mcp-host"}
CONTAINER = "mcp-host"
IMAGE = "example.invalid/mcp-host:1"
POLL_S = 0.3


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


@dataclass
class WrcStandIn:
    """See the module docstring. `api` is its own admin ApiClient (used from its thread)."""

    api: client.ApiClient
    namespace: str
    behaviour: Behaviour
    wrc: str = "workflow-recipe-controller"
    wrc_labels: Mapping[str, str] = field(default_factory=lambda: {"app": "wrc"})
    recipes: tuple[str, ...] = ("r1", "r2", "r3")
    via: Via = "pods"
    replicas: int = 1
    max_surge: int | None = None
    min_ready_seconds: int = 0
    pass_delay: float = 0.0
    errors: list[str] = field(default_factory=list)
    _passed: dict[str, str] | None = None
    _seen: tuple[dict[str, str], float] | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _serial: int = 0

    def __post_init__(self) -> None:
        self.conn = Connection.from_api_client(
            self.api, self.namespace, field_manager="wrc-stand-in"
        )
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)

    # ---- what the WRC forwards

    def forwarded_env(self) -> dict[str, str] | None:
        """The WRC process's variables named by its passthrough list (None while no WRC
        pod runs)."""
        selector = ",".join(f"{k}={v}" for k, v in sorted(self.wrc_labels.items()))
        running = [
            p
            for p in list_pods(self.conn, selector)
            if not _meta(p).get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") == "Running"
        ]
        if not running:
            return None
        newest = max(running, key=lambda p: str(_meta(p).get("creationTimestamp")))
        container = newest["spec"]["containers"][0]
        lookup = config_map_lookup(self.conn)
        passthrough = resolve(container, [PASSTHROUGH_VAR], lookup)[PASSTHROUGH_VAR]
        names = passthrough_names(passthrough.value if passthrough.state == "set" else None)
        values = resolve(container, names, lookup)
        return {n: str(v.value) for n, v in values.items() if v.state == "set"}

    # ---- one pass

    def _to_pass_on(self, env: dict[str, str]) -> dict[str, str]:
        """What it passes on now: `env` once it has seen it for `pass_delay`."""
        now = time.monotonic()
        if self._passed is None or self.pass_delay <= 0:
            self._passed = env
        elif env != self._passed:
            if self._seen is None or self._seen[0] != env:
                self._seen = (env, now)
            if now - self._seen[1] >= self.pass_delay:
                self._passed = env
        return self._passed

    def sync(self) -> None:
        seen = self.forwarded_env()
        if seen is None:
            return
        env = self._to_pass_on(seen)
        for recipe in self.recipes:
            if self.behaviour == "at-pod-creation" and self.via == "pods":
                self._sync_pods(recipe, env)
            elif self.behaviour == "at-pod-creation":
                self._sync_env_config_map(recipe, env)
                self._sync_deployment(recipe, env, env_from=f"recipe-env-{recipe}")
            else:
                self._sync_deployment(recipe, env)

    def _env_list(self, env: Mapping[str, str]) -> list[dict[str, str]]:
        return [{"name": k, "value": v} for k, v in sorted(env.items())]

    def _labels(self, recipe: str) -> dict[str, str]:
        return {**MCP_HOST_LABELS, RECIPE_LABEL: recipe}

    def _sync_env_config_map(self, recipe: str, env: Mapping[str, str]) -> None:
        name = f"recipe-env-{recipe}"
        body = {"metadata": {"name": name}, "data": dict(env)}
        try:
            current: Any = self.core.read_namespaced_config_map(name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.core.create_namespaced_config_map(self.namespace, body)
            # Kubernetes stamps times to the second, and a ConfigMap written in the
            # second a container starts may have come first (the operator then counts the
            # pod stale). A real pod starts seconds after its ConfigMap; here kwok is
            # quicker, so the pods are created in the next second.
            time.sleep(1.05 - time.time() % 1)
            return
        if (current.data or {}) != dict(env):
            self.core.replace_namespaced_config_map(name, self.namespace, body)

    def _sync_deployment(
        self, recipe: str, env: Mapping[str, str], env_from: str | None = None
    ) -> None:
        name = f"mcp-host-{recipe}"
        container: dict[str, Any] = {"name": CONTAINER, "image": IMAGE}
        if env_from is not None:
            container["envFrom"] = [{"configMapRef": {"name": env_from}}]
        else:
            container["env"] = self._env_list(env)
        try:
            dep: Any = self.apps.read_namespaced_deployment(name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "labels": self._labels(recipe)},
                "spec": {
                    "replicas": self.replicas,
                    "minReadySeconds": self.min_ready_seconds,
                    "selector": {"matchLabels": self._labels(recipe)},
                    "template": {
                        "metadata": {"labels": self._labels(recipe)},
                        "spec": {"containers": [container]},
                    },
                },
            }
            if self.max_surge is not None:
                body["spec"]["strategy"] = {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": self.max_surge, "maxUnavailable": 0},
                }
            self.apps.create_namespaced_deployment(self.namespace, body)
            return
        if self.behaviour != "rerender":
            return  # baked, or env through the ConfigMap: the template is never re-rendered
        current = dep.spec.template.spec.containers[0].env or []
        have = {e.name: e.value for e in current}
        if have != dict(env):
            self.apps.patch_namespaced_deployment(
                name,
                self.namespace,
                {
                    "spec": {
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": CONTAINER,
                                        "image": IMAGE,
                                        "env": self._env_list(env),
                                    }
                                ]
                            }
                        }
                    }
                },
                _content_type="application/merge-patch+json",
            )

    def _run_object(self, recipe: str) -> Any:
        """The ConfigMap standing for the recipe run: the controller owner of its pods."""
        name = f"recipe-run-{recipe}"
        try:
            return self.core.read_namespaced_config_map(name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
        body = {"metadata": {"name": name, "labels": {RECIPE_LABEL: recipe}}, "data": {}}
        return self.core.create_namespaced_config_map(self.namespace, body)

    def _sync_pods(self, recipe: str, env: Mapping[str, str]) -> None:
        run = self._run_object(recipe)
        live = [
            p
            for p in list_pods(self.conn, f"{RECIPE_LABEL}={recipe}")
            if not _meta(p).get("deletionTimestamp")
        ]
        if live:
            return
        self._serial += 1
        body = {
            "metadata": {
                "name": f"mcp-host-{recipe}-{self._serial}",
                "labels": self._labels(recipe),
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": run.metadata.name,
                        "uid": run.metadata.uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "containers": [{"name": CONTAINER, "image": IMAGE, "env": self._env_list(env)}]
            },
        }
        self.core.create_namespaced_pod(self.namespace, body)

    # ---- background

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception:  # recorded; the test checks `errors` at the end
                self.errors.append(traceback.format_exc())
            self._stop.wait(POLL_S)

    def start(self) -> WrcStandIn:
        self._thread = threading.Thread(target=self._loop, name="wrc-stand-in", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            with contextlib.suppress(RuntimeError):
                self._thread.join(timeout=10)
