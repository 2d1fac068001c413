"""`WrcRendererForTests`: stand-in for the part of the platform's workflow-recipe
controller (WRC) that renders the recipe mcp-host workloads, which cannot be had here.

It plays behaviour (1) of issue 9: it re-renders its workloads when the WRC's env
changes. Every 0.1 s it reads the WRC container's `MCP_HOST_ENV_PASSTHROUGH` and the
values the WRC carries for those names, and when the standing mcp-host Deployment's
container does not carry exactly those spillover variables it rewrites that
container's env (the Deployment controller then rolls the pods out; kwok runs them).

`paused` stops it from re-rendering: running pods keep their env (behaviour 2), so a
configuration change leaves the mcp-host pods stale.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from k8s_helpers import read_deployment
from kubernetes import client
from spillover_operator.domain.envplan import passthrough_names
from spillover_operator.domain.model import PASSTHROUGH_VAR, SPILLOVER_VARS


class WrcRendererForTests:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        *,
        wrc: str = "wrc",
        wrc_container: str = "controller",
        mcp_host: str = "mcp-host",
        on_tick: Callable[[], object] | None = None,
    ) -> None:
        self.api, self.namespace = api, namespace
        self.wrc, self.wrc_container, self.mcp_host = wrc, wrc_container, mcp_host
        self.apps: Any = client.AppsV1Api(api)
        self.paused = threading.Event()
        # also called every tick, paused or not (platform_env: the kubelet's imageID report)
        self.on_tick = on_tick
        self.renders = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="wrc-renderer", daemon=True)

    def __enter__(self) -> WrcRendererForTests:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            try:
                if self.on_tick is not None:
                    self.on_tick()
                if not self.paused.is_set():
                    self.sync()
            except Exception as exc:  # kept for the test; the loop goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def forwarded(self) -> dict[str, str]:
        """The spillover variables the WRC forwards now (name -> value)."""
        dep = read_deployment(self.api, self.namespace, self.wrc)
        containers = dep["spec"]["template"]["spec"]["containers"]
        container = next(c for c in containers if c["name"] == self.wrc_container)
        env = {e["name"]: e.get("value") for e in container.get("env") or []}
        names = passthrough_names(env.get(PASSTHROUGH_VAR))
        return {
            k: v
            for k, v in env.items()
            if k in names and k in SPILLOVER_VARS and isinstance(v, str)
        }

    def sync(self) -> None:
        want = self.forwarded()
        dep = read_deployment(self.api, self.namespace, self.mcp_host)
        container = dep["spec"]["template"]["spec"]["containers"][0]
        env = list(container.get("env") or [])
        have = {e["name"]: e.get("value") for e in env if e["name"] in SPILLOVER_VARS}
        if have == want:
            return
        kept = [e for e in env if e["name"] not in SPILLOVER_VARS]
        kept += [{"name": k, "value": v} for k, v in sorted(want.items())]
        patch = [{"op": "add", "path": "/spec/template/spec/containers/0/env", "value": kept}]
        self.apps.patch_namespaced_deployment(
            self.mcp_host, self.namespace, patch, _content_type="application/json-patch+json"
        )
        self.renders += 1

    def set_pod_template_env(self, env: dict[str, str]) -> None:
        """Write these spillover variables into the mcp-host template directly (what a
        platform drift would do), whatever the WRC says."""
        dep = read_deployment(self.api, self.namespace, self.mcp_host)
        current = dep["spec"]["template"]["spec"]["containers"][0].get("env") or []
        kept = [e for e in current if e["name"] not in SPILLOVER_VARS]
        kept += [{"name": k, "value": v} for k, v in sorted(env.items())]
        patch = [{"op": "add", "path": "/spec/template/spec/containers/0/env", "value": kept}]
        self.apps.patch_namespaced_deployment(
            self.mcp_host, self.namespace, patch, _content_type="application/json-patch+json"
        )

    def set_pod_template_annotation(self, key: str, value: str) -> None:
        """Annotate the mcp-host pods (a rollout), e.g. with the commit of their image."""
        patch = {"spec": {"template": {"metadata": {"annotations": {key: value}}}}}
        self.apps.patch_namespaced_deployment(
            self.mcp_host, self.namespace, patch, _content_type="application/merge-patch+json"
        )
