"""What happens inside a pod's containers, read through the API server (which asks the
kubelet): a container's log (`read_pod_log`) and a command run in it (`exec_in_pod`).

The harness observes runs this way (the log lines of a run's window, `.spill` entries
and output files in the pod that served it). Nothing here knows what it reads: the
caller says which pod, container and command.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from spillover_operator.client._api import api_call
from spillover_operator.client.connection import Connection
from spillover_operator.client.errors import ExecFailed, UnsupportedKubeconfig
from spillover_operator.client.transport import ANY

# A command in a container that has not ended within this long is cut off.
EXEC_TIMEOUT_S = 60.0


def read_pod_log(
    conn: Connection, pod: str, container: str, *, since_seconds: int | None = None
) -> str:
    """The log of `container` in `pod` (the connection's namespace), the last
    `since_seconds` of it when given, as text (undecodable bytes replaced). Typed errors
    (`NotFound` for a pod that is gone, `ApiUnavailable`...) when it cannot be read."""
    query = [("container", container)]
    if since_seconds is not None:
        query.append(("sinceSeconds", str(since_seconds)))
    what = f"the log of Pod '{pod}' container '{container}'"
    with api_call(conn, "get", "pods/log", what):
        data = conn.transport.request(
            "GET",
            f"/api/v1/namespaces/{conn.namespace}/pods/{pod}/log",
            query=query,
            timeout=conn.request_timeout,
            accept=ANY,
        )
    return data.decode("utf-8", errors="replace")


_EXEC = threading.local()


def _exec_api(conn: Connection) -> Any:
    """A CoreV1Api on an ApiClient of this thread's own for exec: the kubernetes
    package's `stream()` swaps the ApiClient's request method for a websocket while it
    runs, so a shared ApiClient would send another thread's ordinary calls (a policy
    patch) down that path."""
    from kubernetes import client

    config = conn.api_client.configuration
    cached = getattr(_EXEC, "api", None)
    if cached is None or cached[0] is not config:
        cached = (config, client.CoreV1Api(client.ApiClient(config)))
        _EXEC.api = cached
    return cached[1]


def exec_in_pod(
    conn: Connection,
    pod: str,
    container: str,
    command: Sequence[str],
    *,
    timeout_s: float = EXEC_TIMEOUT_S,
) -> str:
    """Run `command` in `container` of `pod` (the connection's namespace, no stdin, no
    tty); its stdout. `ExecFailed` when the API server or the kubelet reports a failure
    on the exec's error channel (a refused exec, or a command that exits non-zero);
    typed errors when the exec cannot be opened."""
    from kubernetes.stream import stream
    from kubernetes.stream.ws_client import ERROR_CHANNEL

    what = f"an exec in Pod '{pod}' container '{container}'"
    if conn.impersonation:
        # The kubernetes package opens the exec's websocket with its own headers (the
        # credentials only): the exec would run as ourselves, not as whom we act as.
        raise UnsupportedKubeconfig(
            f"{what} cannot impersonate ({conn.impersonation.describe()}, {conn.where}): "
            "run it without --as and without `as` in the kubeconfig user entry"
        )
    with api_call(conn, "create", "pods/exec", what):
        ws: Any = stream(
            _exec_api(conn).connect_get_namespaced_pod_exec,
            pod,
            conn.namespace,
            container=container,
            command=list(command),
            stdout=True,
            stderr=False,
            stdin=False,
            tty=False,
            _preload_content=False,
            _request_timeout=timeout_s,
        )
        try:
            ws.run_forever(timeout=timeout_s)
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
