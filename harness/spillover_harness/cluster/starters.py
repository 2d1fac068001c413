"""Starting a run on the platform and reading its status, as the profile's `run` says.

- `HttpStarter`: an HTTP execute endpoint of a Service, reached through `kubectl
  port-forward` (one forward for the stage, reopened if it dies) or the API
  server's service proxy; then GET `poll_path` for the status.
- `CustomResourceStarter`: create a custom resource from the template, read it
  back for the status; cancelling deletes it.

Both raise `StartError` (with a short message, never a response body: a body may
hold tool-result content) when the platform cannot be reached or refuses.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import requests
from spillover_operator.client import (
    ClientError,
    Connection,
    CustomResource,
    create_object,
    delete_object,
    get_object,
    proxy_request,
)

from spillover_harness.cluster.kubeconn import Target, context_for
from spillover_harness.profile import (
    CustomResourceRun,
    HttpRun,
    JsonPath,
    Profile,
    render_template,
)

REQUEST_TIMEOUT_S = 30.0
_FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+)")


class StartError(Exception):
    """The run could not be started or its status read."""


class KubectlNotRunnable(StartError):
    """The kubectl named for `run.access: port-forward` cannot be run (not found, not
    executable): no run can start until another is named."""


@dataclass(frozen=True)
class RunHandle:
    run_id: str  # ours
    platform_run_id: str  # the platform's (same as ours unless run_id_path says otherwise)


class Starter(Protocol):
    def start(self, values: Mapping[str, object]) -> RunHandle: ...
    def status(self, handle: RunHandle) -> dict[str, Any]: ...
    def logs(self, handle: RunHandle) -> list[str] | None: ...
    def cancel(self, handle: RunHandle) -> None: ...
    def close(self) -> None: ...


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:160]}" if text else type(exc).__name__


# ---------------------------------------------------------------------------- http


class PortForward:
    """`kubectl port-forward svc/NAME :PORT`, kept open; `url` reopens it when it died."""

    def __init__(self, profile: Profile, target: Target, run: HttpRun) -> None:
        self.profile, self.target, self.run = profile, target, run
        self._proc: subprocess.Popen[str] | None = None
        self._port: int | None = None
        self._lock = threading.Lock()

    def command(self) -> list[str]:
        cmd = [self.profile.kubectl]
        if self.target.kubeconfig:
            cmd += ["--kubeconfig", self.target.kubeconfig]
        context = context_for(self.profile, self.target)
        if context:
            cmd += ["--context", context]
        return [
            *cmd,
            "-n",
            self.profile.namespace,
            "port-forward",
            "--address",
            "127.0.0.1",
            f"svc/{self.run.service}",
            f":{self.run.port}",
        ]

    def url(self) -> str:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._open()
            return f"{self.run.scheme}://127.0.0.1:{self._port}"

    def _open(self) -> None:
        try:
            proc = subprocess.Popen(
                self.command(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        except OSError as exc:
            raise KubectlNotRunnable(
                f"cannot run {self.profile.kubectl} port-forward: {_short(exc)}"
            ) from None
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until kubectl says where it listens, or exits
        m = _FORWARDING.search(line)
        if m is None:
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise StartError(
                f"kubectl port-forward svc/{self.run.service} :{self.run.port} in namespace "
                f"{self.profile.namespace} failed: {(err or line).strip().splitlines()[-1:]}"
            )
        self._proc, self._port = proc, int(m.group(1))
        # drain stdout so kubectl never blocks on a full pipe
        threading.Thread(target=_drain, args=(proc,), daemon=True).start()

    def close(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait(timeout=10)
            self._proc = None


def _drain(proc: subprocess.Popen[str]) -> None:
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            for _ in stream:
                pass


class HttpStarter:
    def __init__(self, profile: Profile, target: Target, cluster: Connection) -> None:
        assert isinstance(profile.run, HttpRun)
        self.profile = profile
        self.run = profile.run
        self.cluster = cluster
        self.forward = (
            PortForward(profile, target, self.run) if self.run.access == "port-forward" else None
        )

    def _request(self, method: str, path: str, body: object | None = None) -> tuple[int, bytes]:
        if self.forward is not None:
            url = self.forward.url() + path
            try:
                resp = requests.request(method, url, json=body, timeout=REQUEST_TIMEOUT_S)
            except requests.RequestException as exc:
                raise StartError(f"{method} {path}: {_short(exc)}") from None
            return resp.status_code, resp.content
        prefix = self.run.service_proxy_prefix(self.profile.namespace)
        try:
            # The answer's status is the Service's, errors included.
            return proxy_request(
                self.cluster,
                method,
                prefix + path,
                body=body,
                timeout=(REQUEST_TIMEOUT_S, REQUEST_TIMEOUT_S),
            )
        except Exception as exc:  # ApiUnavailable: the API server cannot be reached
            raise StartError(f"{method} {path} through the service proxy: {_short(exc)}") from None

    def _json(self, method: str, path: str, body: object | None = None) -> Any:
        status, data = self._request(method, path, body)
        if status >= 300:
            raise StartError(f"{method} {path}: HTTP {status}")
        try:
            return json.loads(data)
        except ValueError:
            raise StartError(f"{method} {path}: the answer is not JSON") from None

    def start(self, values: Mapping[str, object]) -> RunHandle:
        path = str(render_template(self.run.execute_path, values))
        body = render_template(self.run.body, values)
        answer = self._json(self.run.execute_method, path, body)
        platform_id = str(values["run_id"])
        if self.run.run_id_path is not None:
            found = JsonPath.parse(self.run.run_id_path).first(answer)
            if found is None:
                raise StartError(
                    f"the execute answer has no run id at {self.run.run_id_path} (run.run_id_path)"
                )
            platform_id = str(found)
        return RunHandle(str(values["run_id"]), platform_id)

    def _path(self, template: str, handle: RunHandle) -> str:
        return template.format(
            run_id=handle.run_id,
            platform_run_id=handle.platform_run_id,
            namespace=self.profile.namespace,
        )

    def probe(self) -> int:
        """The HTTP status of a GET of the poll path for a run that does not exist (any
        answer below 500 means the endpoint is there). StartError when unreachable."""
        path = self._path(
            self.run.poll_path, RunHandle("spillover-preflight", "spillover-preflight")
        )
        return self._request("GET", path)[0]

    def status(self, handle: RunHandle) -> dict[str, Any]:
        doc = self._json("GET", self._path(self.run.poll_path, handle))
        if not isinstance(doc, dict):
            raise StartError("the run's status is not a JSON object")
        return doc

    def logs(self, handle: RunHandle) -> list[str] | None:
        if self.run.logs_path is None:
            return None
        status, data = self._request("GET", self._path(self.run.logs_path, handle))
        if status >= 300:
            raise StartError(f"GET {self.run.logs_path}: HTTP {status}")
        return data.decode("utf-8", errors="replace").splitlines()

    def cancel(self, handle: RunHandle) -> None:
        if self.run.cancel_path is not None:
            self._request("POST", self._path(self.run.cancel_path, handle), {})

    def close(self) -> None:
        if self.forward is not None:
            self.forward.close()


# ---------------------------------------------------------------------------- custom resource

_NAME_UNSAFE = re.compile(r"[^a-z0-9.-]+")
_NAME_DOTS = re.compile(r"[-.]*\.[-.]*")
MAX_NAME = 253


def object_name(text: str) -> str:
    """`text` as a Kubernetes object name (a DNS-1123 subdomain): lowercased, every run
    of other characters than `a-z 0-9 . -` replaced by `-`, each dot-separated part
    starting and ending with a letter or digit, at most 253 characters (a longer one
    is cut and ends with a hash of `text`). Run ids keep their hash part, so two run
    ids that differ only in case (`128KiB`, `128kib`) still give two names."""
    name = _NAME_DOTS.sub(".", _NAME_UNSAFE.sub("-", text.lower())).strip("-.")
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
        name = name[: MAX_NAME - 9].rstrip("-.") + "-" + digest
    if not name:
        raise StartError(f"run.name_template gives {text!r}, which has no letter or digit")
    return name


class CustomResourceStarter:
    def __init__(self, profile: Profile, cluster: Connection) -> None:
        assert isinstance(profile.run, CustomResourceRun)
        self.profile = profile
        self.run = profile.run
        self.cluster = cluster.in_namespace(profile.namespace)
        self.resource = CustomResource(
            self.run.group, self.run.version, self.run.plural, self.run.kind
        )

    def start(self, values: Mapping[str, object]) -> RunHandle:
        name = object_name(str(render_template(self.run.name_template, values)))
        rendered = render_template(self.run.template, values)
        body: dict[str, Any] = dict(rendered) if isinstance(rendered, dict) else {}
        meta = dict(body.get("metadata") or {})
        meta.update({"name": name, "namespace": self.profile.namespace})
        body.update({"apiVersion": self.run.api_version, "kind": self.run.kind, "metadata": meta})
        try:
            create_object(self.cluster, self.resource, body)
        except ClientError as exc:
            raise StartError(f"cannot create {self.run.kind} {name}: {exc.message}") from None
        return RunHandle(str(values["run_id"]), name)

    def status(self, handle: RunHandle) -> dict[str, Any]:
        try:
            return get_object(self.cluster, self.resource, handle.platform_run_id)
        except ClientError as exc:
            raise StartError(
                f"cannot read {self.run.kind} {handle.platform_run_id}: {exc.message}"
            ) from None

    def logs(self, handle: RunHandle) -> list[str] | None:
        return None

    def cancel(self, handle: RunHandle) -> None:
        try:
            delete_object(self.cluster, self.resource, handle.platform_run_id)
        except ClientError as exc:
            raise StartError(
                f"cannot delete {self.run.kind} {handle.platform_run_id}: {exc.message}"
            ) from None

    def close(self) -> None:
        return None


def make_starter(profile: Profile, target: Target, cluster: Connection) -> Starter:
    if isinstance(profile.run, HttpRun):
        return HttpStarter(profile, target, cluster)
    return CustomResourceStarter(profile, cluster)
