"""What the harness reads from the pods: logs for a run's window, `.spill` entries and
output files by exec (in the pod that served the run), the mcp-host image. The values
in effect on the mcp-host pods are read by `recipe_pods`.

Every function returns data plus notes and never raises for a failure to observe
(the field becomes null with a note). Notes name pods, paths and counts, never a
log line or a file's content.
"""

from __future__ import annotations

import json
import math
import shlex
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL

from spillover_harness.profile import PodSelector


def _short(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    status = getattr(exc, "status", None)
    if status:
        return f"{type(exc).__name__} {status} {reason or ''}".strip()
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:120]}" if text else type(exc).__name__


def _started(pod: Any) -> datetime:
    ts = pod.metadata.creation_timestamp
    return ts if isinstance(ts, datetime) else datetime.min.replace(tzinfo=UTC)


def running_pods(core: client.CoreV1Api, namespace: str, selector: str) -> list[Any]:
    """Running pods matching the selector, newest first."""
    api: Any = core
    pods = api.list_namespaced_pod(namespace, label_selector=selector).items
    live = [
        p
        for p in pods
        if (p.status and p.status.phase == "Running") and not p.metadata.deletion_timestamp
    ]
    return sorted(live, key=_started, reverse=True)


def _container(pod: Any, wanted: str | None) -> str:
    names = [c.name for c in pod.spec.containers]
    if wanted is None:
        return str(names[0])
    return wanted


@dataclass
class PodLogs:
    lines: list[str] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)
    by_pod: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    ok: bool = False  # at least one pod's log was read


def pod_logs(
    core: client.CoreV1Api,
    namespace: str,
    pods: PodSelector,
    since: datetime,
    selector: str | None = None,
) -> PodLogs:
    """The logs since `since` of every running pod the selector (`selector`, else the
    PodSelector's) matches."""
    out = PodLogs()
    sel = selector or pods.selector
    try:
        found = running_pods(core, namespace, sel)
    except Exception as exc:
        out.notes.append(f"logs: cannot list pods {sel!r}: {_short(exc)}")
        return out
    if not found:
        out.notes.append(f"logs: no running pod matches {sel!r} in {namespace}")
        return out
    seconds = max(1, math.ceil((datetime.now(UTC) - since).total_seconds()) + 1)
    for pod in found:
        name = pod.metadata.name
        try:
            api: Any = core
            text = api.read_namespaced_pod_log(
                name,
                namespace,
                container=_container(pod, pods.container),
                since_seconds=seconds,
                _preload_content=False,
            ).data.decode("utf-8", errors="replace")
        except Exception as exc:
            out.notes.append(f"logs: cannot read pod {name}: {_short(exc)}")
            continue
        out.ok = True
        out.pods.append(name)
        out.by_pod[name] = text.splitlines()
        out.lines.extend(out.by_pod[name])
    return out


_EXEC = threading.local()


def _exec_api(core: client.CoreV1Api) -> client.CoreV1Api:
    """A CoreV1Api on an ApiClient of this thread's own for exec: `stream()` swaps the
    ApiClient's request method for a websocket while it runs, so a shared ApiClient
    would send another thread's ordinary calls (a policy patch) down that path."""
    config = core.api_client.configuration
    cached = getattr(_EXEC, "api", None)
    if cached is None or cached[0] is not config:
        cached = (config, client.CoreV1Api(client.ApiClient(config)))
        _EXEC.api = cached
    api: client.CoreV1Api = cached[1]
    return api


class ExecFailed(RuntimeError):
    """The exec did not run, or the command failed (the error channel's message)."""


def exec_sh(
    core: client.CoreV1Api, namespace: str, pod: str, container: str, script: str, *args: str
) -> str:
    """Run `sh -c script sh args...` in the container; its stdout. Raises (ExecFailed
    when the API server or the kubelet reports a failure on the exec's error channel:
    without that check a refused exec would look like empty output)."""
    ws: Any = stream(
        _exec_api(core).connect_get_namespaced_pod_exec,
        pod,
        namespace,
        container=container,
        command=["sh", "-c", script, "sh", *args],
        stdout=True,
        stderr=False,
        stdin=False,
        tty=False,
        _preload_content=False,
        _request_timeout=60,
    )
    try:
        ws.run_forever(timeout=60)
        out = ws.read_stdout()
        error = ws.read_channel(ERROR_CHANNEL)
    finally:
        ws.close()
    if error:
        try:
            status = json.loads(error)
        except ValueError:
            status = {"status": "Failure", "message": error}
        if status.get("status") != "Success":
            message = str(status.get("message") or status.get("reason") or "exec failed")
            raise ExecFailed(message.splitlines()[0][:160])
    return str(out)


# Prints MISSING when the directory does not exist, else every entry named or ending
# with the spill name, one per line, relative to the directory.
_FIND_SPILL = (
    'cd "$1" 2>/dev/null || { echo MISSING; exit 0; }; echo PRESENT; '
    'find . \\( -name "$2" -o -name "*$2" \\) -print 2>/dev/null'
)


@dataclass
class DiskLook:
    entries: list[str] | None  # None = not checked
    present: bool = False  # the directory exists
    note: str | None = None


def pick_pod(core: client.CoreV1Api, namespace: str, pods: PodSelector) -> tuple[str, str] | str:
    """(pod, container) of the newest running pod, or why there is none."""
    try:
        found = running_pods(core, namespace, pods.selector)
    except Exception as exc:
        return f"cannot list pods {pods.selector!r}: {_short(exc)}"
    if not found:
        return f"no running pod matches {pods.selector!r} in {namespace}"
    return str(found[0].metadata.name), _container(found[0], pods.container)


Where = tuple[str, str] | None
"""(pod, container) to exec into: the pod that served the run. None: the newest
running pod the PodSelector matches."""


def look_for_spill(
    core: client.CoreV1Api,
    namespace: str,
    pods: PodSelector,
    directory: str,
    spill_name: str,
    target: Where = None,
) -> DiskLook:
    where = target or pick_pod(core, namespace, pods)
    if isinstance(where, str):
        return DiskLook(None, note=f"disk: {where}")
    pod, container = where
    try:
        out = exec_sh(core, namespace, pod, container, _FIND_SPILL, directory, spill_name)
    except Exception as exc:
        return DiskLook(None, note=f"disk: exec in pod {pod} failed: {_short(exc)}")
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    if not lines or lines[0] == "MISSING":
        return DiskLook([], present=False)
    return DiskLook([line.removeprefix("./") for line in lines[1:]], present=True)


_CAT_FIRST = (
    'cd "$1" 2>/dev/null || exit 0; shift; '
    'for f in "$@"; do [ -f "$f" ] && exec cat "$f"; done; exit 0'
)


def read_output(
    core: client.CoreV1Api,
    namespace: str,
    pods: PodSelector,
    directory: str,
    files: list[str],
    target: Where = None,
) -> tuple[str | None, str | None]:
    """(the first output file that exists, note). Its text is only judged, never kept."""
    where = target or pick_pod(core, namespace, pods)
    if isinstance(where, str):
        return None, f"quality: {where}"
    pod, container = where
    try:
        text = exec_sh(core, namespace, pod, container, _CAT_FIRST, directory, *files)
    except Exception as exc:
        return None, f"quality: reading the output in pod {pod} failed: {_short(exc)}"
    return (text if text else None), None


def mcp_host_image(core: client.CoreV1Api, namespace: str, pods: PodSelector) -> str | None:
    """The imageID (digest) of the mcp-host container of the newest running pod."""
    found = running_pods(core, namespace, pods.selector)
    for pod in found:
        for status in pod.status.container_statuses or []:
            if (pods.container is None or status.name == pods.container) and status.image_id:
                return str(status.image_id)
    return None


def quote(args: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)
