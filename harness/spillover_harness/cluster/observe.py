"""What the harness reads from the pods: logs for a run's window, `.spill` entries and
output files by exec (in the pod that served the run), the mcp-host image. The values
in effect on the mcp-host pods are read by `recipe_pods`.

Every function returns data plus notes and never raises for a failure to observe
(the field becomes null with a note). Notes name pods, paths and counts, never a
log line or a file's content.

The pods, their logs and the exec go through the client library
(`spillover_operator.client`: pods as API dicts), the harness's one door to the API.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from spillover_operator.client import (
    Connection,
    exec_in_pod,
    list_pods,
    pod_container,
    read_pod_log,
)

from spillover_harness.profile import PodSelector

Pod = Mapping[str, Any]
"""A pod as the API server sent it (JSON)."""


def _short(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    status = getattr(exc, "status", None)
    if status:
        return f"{type(exc).__name__} {status} {reason or ''}".strip()
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:120]}" if text else type(exc).__name__


_NEVER = datetime.min.replace(tzinfo=UTC)


def _started(pod: Pod) -> datetime:
    ts = (pod.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(ts, str):
        return _NEVER
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return _NEVER


def name_of(obj: Mapping[str, Any]) -> str:
    """`metadata.name` of an API object (a pod, a Deployment)."""
    return str((obj.get("metadata") or {}).get("name"))


def running_pods(cluster: Connection, namespace: str, selector: str) -> list[Pod]:
    """Running pods matching the selector, newest first (API dicts)."""
    pods = list_pods(cluster.in_namespace(namespace), selector)
    live = [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
        and not (p.get("metadata") or {}).get("deletionTimestamp")
    ]
    return sorted(live, key=_started, reverse=True)


def _container(pod: Pod, wanted: str | None) -> str:
    if wanted is None:
        return str((pod_container(pod, None) or {}).get("name"))
    return wanted


@dataclass
class PodLogs:
    lines: list[str] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)
    by_pod: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    ok: bool = False  # at least one pod's log was read


def pod_logs(
    cluster: Connection,
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
        found = running_pods(cluster, namespace, sel)
    except Exception as exc:
        out.notes.append(f"logs: cannot list pods {sel!r}: {_short(exc)}")
        return out
    if not found:
        out.notes.append(f"logs: no running pod matches {sel!r} in {namespace}")
        return out
    seconds = max(1, math.ceil((datetime.now(UTC) - since).total_seconds()) + 1)
    for pod in found:
        name = name_of(pod)
        try:
            text = read_pod_log(
                cluster.in_namespace(namespace),
                name,
                _container(pod, pods.container),
                since_seconds=seconds,
            )
        except Exception as exc:
            out.notes.append(f"logs: cannot read pod {name}: {_short(exc)}")
            continue
        out.ok = True
        out.pods.append(name)
        out.by_pod[name] = text.splitlines()
        out.lines.extend(out.by_pod[name])
    return out


def exec_sh(
    cluster: Connection, namespace: str, pod: str, container: str, script: str, *args: str
) -> str:
    """Run `sh -c script sh args...` in the container; its stdout. Raises (ExecFailed
    when the API server or the kubelet reports a failure on the exec's error channel:
    without that check a refused exec would look like empty output)."""
    return exec_in_pod(
        cluster.in_namespace(namespace), pod, container, ["sh", "-c", script, "sh", *args]
    )


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


def pick_pod(cluster: Connection, namespace: str, pods: PodSelector) -> tuple[str, str] | str:
    """(pod, container) of the newest running pod, or why there is none."""
    try:
        found = running_pods(cluster, namespace, pods.selector)
    except Exception as exc:
        return f"cannot list pods {pods.selector!r}: {_short(exc)}"
    if not found:
        return f"no running pod matches {pods.selector!r} in {namespace}"
    return name_of(found[0]), _container(found[0], pods.container)


Where = tuple[str, str] | None
"""(pod, container) to exec into: the pod that served the run. None: the newest
running pod the PodSelector matches."""


def look_for_spill(
    cluster: Connection,
    namespace: str,
    pods: PodSelector,
    directory: str,
    spill_name: str,
    target: Where = None,
) -> DiskLook:
    ran = _exec_served(cluster, namespace, pods, target, _FIND_SPILL, directory, spill_name)
    if isinstance(ran, str):
        return DiskLook(None, note=f"disk: {ran}")
    out, moved = ran
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    if not lines or lines[0] == "MISSING":
        return DiskLook([], present=False, note=moved and f"disk: {moved}")
    entries = [line.removeprefix("./") for line in lines[1:]]
    return DiskLook(entries, present=True, note=moved and f"disk: {moved}")


def _exec_served(
    cluster: Connection,
    namespace: str,
    pods: PodSelector,
    target: Where,
    script: str,
    *args: str,
) -> tuple[str, str | None] | str:
    """Run the script in the pod that served the run (`target`), else in the newest
    running pod of `pods`: (stdout, a note when it ran elsewhere than the target), or
    why it could not run. The platform may end the serving pod with the run (one pod
    per run) between the harness's last look and this exec: when the exec fails and the
    target is no longer running, the check runs in the newest running pod, as it does
    when the pod had already ended, and says so."""
    where = target or pick_pod(cluster, namespace, pods)
    if isinstance(where, str):
        return where
    pod, container = where
    try:
        return exec_sh(cluster, namespace, pod, container, script, *args), None
    except Exception as exc:
        failure = f"exec in pod {pod} failed: {_short(exc)}"
        if target is None:
            return failure
    try:  # one list answers both: has the target ended, and which pod is the newest
        found = running_pods(cluster, namespace, pods.selector)
    except Exception:
        return failure  # cannot tell whether the target ended
    if any(name_of(p) == pod for p in found):
        return failure
    ended = f"the pod that served the run ({pod}) ended before the check"
    if not found:
        return f"{ended}; no running pod matches {pods.selector!r} in {namespace}"
    other, other_container = name_of(found[0]), _container(found[0], pods.container)
    try:
        out = exec_sh(cluster, namespace, other, other_container, script, *args)
    except Exception as exc:
        return f"{ended}; exec in pod {other} failed: {_short(exc)}"
    return out, f"{ended}; checked in the newest running pod ({other}) instead"


_CAT_FIRST = (
    'cd "$1" 2>/dev/null || exit 0; shift; '
    'for f in "$@"; do [ -f "$f" ] && exec cat "$f"; done; exit 0'
)


@dataclass
class OutputLook:
    text: str | None  # the first output file that exists; None: none exists or not read
    checked: bool  # False: the output could not be read (see note)
    note: str | None = None


def read_output(
    cluster: Connection,
    namespace: str,
    pods: PodSelector,
    directory: str,
    files: list[str],
    target: Where = None,
) -> OutputLook:
    """The first output file that exists. Its text is only judged, never kept."""
    ran = _exec_served(cluster, namespace, pods, target, _CAT_FIRST, directory, *files)
    if isinstance(ran, str):
        return OutputLook(None, checked=False, note=f"quality: reading the output: {ran}")
    text, moved = ran
    return OutputLook(text or None, checked=True, note=moved and f"quality: {moved}")


def image_id(pod: Pod, container: str | None) -> str | None:
    """The imageID (`repo@sha256:...`) the kubelet reports for the container (None: any
    container of the pod), None when it reports none."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if (container is None or status.get("name") == container) and status.get("imageID"):
            return str(status["imageID"])
    return None


def mcp_host_image(cluster: Connection, namespace: str, pods: PodSelector) -> str | None:
    """The imageID (digest) of the mcp-host container of the newest running pod."""
    for pod in running_pods(cluster, namespace, pods.selector):
        found = image_id(pod, pods.container)
        if found is not None:
            return found
    return None


def quote(args: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)
