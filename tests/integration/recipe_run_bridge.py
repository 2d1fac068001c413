"""A test-only `RecipeRun` custom resource and `RecipeRunBridgeForTests`, the stand-in
for the platform's recipe controller (which cannot be had here), so that the harness's
`run.mode: custom-resource` meets a real API server.

The bridge plays the workflow-recipe controller (WRC) of docs/reference.md §1:

- it sees each new RecipeRun in its namespace (it lists them every 0.1 s; one whose
  status already names a run was started before and is only followed),
- works out the mcp-host environment the WRC would forward: every variable named in
  the WRC container's `MCP_HOST_ENV_PASSTHROUGH`, with the value the WRC Deployment
  carries *now* (or, with `stale_env`, a fixed environment: a WRC that does not
  forward the configuration),
- optionally (`mcp_host_pod_per_run=True`) creates one mcp-host pod per run carrying
  that environment (kwok makes it Running) and deletes it when the run has ended, as a
  platform that starts an mcp-host per run does (the status names it: `mcpHostPod`),
- starts the run on the HTTP simulator with that environment (`POST /runs`),
- and copies the simulator's run status (`GET /runs/{id}`) into the RecipeRun's
  status subresource until the run has ended.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from k8s_helpers import read_deployment
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from spillover_operator.domain.envplan import passthrough_names
from spillover_operator.domain.model import PASSTHROUGH_VAR

GROUP = "recipes.tests.spillover-ops.example"
VERSION = "v1"
KIND = "RecipeRun"
PLURAL = "reciperuns"
API_VERSION = f"{GROUP}/{VERSION}"
DONE_PHASES = ("Succeeded", "Failed", "Aborted", "TimedOut", "Error")
MCP_HOST_LABELS = {"app.kubernetes.io/name": "mcp-host"}


def recipe_run_crd() -> dict[str, Any]:
    """The CRD of the test-only RecipeRun (namespaced, free-form spec and status, with a
    status subresource)."""
    free = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "plural": PLURAL, "singular": "reciperun"},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": free, "status": free},
                        }
                    },
                }
            ],
        },
    }


class RecipeRunBridgeForTests:
    """Stand-in for the platform's recipe controller: RecipeRun objects in, runs on the
    HTTP simulator, the simulator's status back into the objects (see the module doc).

    `errors` collects what went wrong in the bridge's thread (a test asserts it empty).
    """

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        sim_url: str,
        *,
        wrc: str = "wrc",
        wrc_container: str = "controller",
        mcp_host_pod_per_run: bool = False,
        stale_env: Mapping[str, str] | None = None,
    ) -> None:
        self.api, self.namespace, self.sim_url = api, namespace, sim_url.rstrip("/")
        self.wrc, self.wrc_container = wrc, wrc_container
        self.mcp_host_pod_per_run = mcp_host_pod_per_run
        self.stale_env = dict(stale_env) if stale_env is not None else None
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.started: dict[str, str] = {}  # RecipeRun name -> simulator run id
        self.pods: dict[str, str] = {}  # RecipeRun name -> its mcp-host pod
        self.errors: list[str] = []
        self._done: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="recipe-run-bridge", daemon=True)

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> RecipeRunBridgeForTests:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self.sync()
            except Exception as exc:  # recorded for the test; the loop goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")

    # -- one pass ----------------------------------------------------------------------

    def sync(self) -> None:
        listing: Any = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL
        )
        for obj in listing["items"]:
            name = obj["metadata"]["name"]
            if name in self._done:
                continue
            if name not in self.started:
                known = (obj.get("status") or {}).get("runId")
                if known:  # started before this bridge: follow it, do not start it again
                    self.started[name] = str(known)
                else:
                    self._start(name, obj.get("spec") or {})
            self._copy_status(name)

    def forwarded_env(self) -> dict[str, str]:
        """What the WRC forwards to an mcp-host pod it creates now."""
        if self.stale_env is not None:
            return dict(self.stale_env)
        dep = read_deployment(self.api, self.namespace, self.wrc)
        containers = dep["spec"]["template"]["spec"]["containers"]
        container = next(c for c in containers if c["name"] == self.wrc_container)
        env = {e["name"]: e.get("value") for e in container.get("env") or []}
        names = passthrough_names(env.get(PASSTHROUGH_VAR))
        return {k: v for k, v in env.items() if k in names and isinstance(v, str)}

    def _start(self, name: str, spec: Mapping[str, Any]) -> None:
        """Idempotent, as a controller's reconcile is: a pod already created for the run
        is not created again, and a run the simulator already has counts as started."""
        env = self.forwarded_env()
        if self.mcp_host_pod_per_run and name not in self.pods:
            self.pods[name] = self._create_pod(name, env)
        run_id = str(spec["runId"])
        body = {
            "recipe": spec["recipe"],
            "input": spec["input"],
            "run_id": run_id,
            "seed": spec["seed"],
            "repetition": spec.get("repetition", 1),
            "env": env,
        }
        try:
            self._http("POST", "/runs", body)
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise
            self.errors.append(f"RecipeRun {name}: the simulator already had run {run_id}")
        self.started[name] = run_id

    def _create_pod(self, run_name: str, env: Mapping[str, str]) -> str:
        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(
                generate_name="mcp-host-run-",
                labels={**MCP_HOST_LABELS, "recipes.tests/run": run_name[:63].rstrip("-_.")},
            ),
            spec=client.V1PodSpec(
                containers=[
                    client.V1Container(
                        name="mcp-host",
                        image="example.invalid/mcp-host:1",
                        env=[client.V1EnvVar(name=k, value=v) for k, v in sorted(env.items())],
                    )
                ]
            ),
        )
        created: Any = self.core.create_namespaced_pod(self.namespace, pod)
        return str(created.metadata.name)

    def _copy_status(self, name: str) -> None:
        status = self._http("GET", f"/runs/{self.started[name]}")
        if self.pods.get(name):
            status["mcpHostPod"] = self.pods[name]
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                name,
                {"status": status},
                _content_type="application/merge-patch+json",
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            self._done.add(name)  # deleted (the harness cancels a run so): nothing to follow
            return
        if status.get("phase") in DONE_PHASES:
            self._done.add(name)
            if self.pods.get(name):  # a per-run mcp-host pod ends with its run
                try:
                    self.core.delete_namespaced_pod(self.pods[name], self.namespace)
                except ApiException as exc:
                    if exc.status != 404:
                        raise

    def _http(self, method: str, path: str, body: object | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.sim_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=30) as resp:
            doc: dict[str, Any] = json.loads(resp.read())
        return doc
