"""Requests to an HTTP endpoint behind the API server's proxy (`services/proxy`,
`pods/proxy`): the platform's own API (the harness starts and follows recipe runs
through the WRC Service this way when the profile says `access: service-proxy`).

The answer is the endpoint's, error statuses included: a 404 for an unknown run is
what the endpoint says, not a failure of the request.
"""

from __future__ import annotations

from typing import Any

from spillover_operator.client._api import api_call
from spillover_operator.client.connection import Connection
from spillover_operator.client.transport import ANY, HttpStatusError

# The RBAC verb of each method on `services/proxy` (named in error messages).
_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def proxy_request(
    conn: Connection,
    method: str,
    path: str,
    *,
    body: Any = None,
    timeout: tuple[float, float] | None = None,
) -> tuple[int, bytes]:
    """One request to `path` (the proxy prefix, for example
    `/api/v1/namespaces/NS/services/http:NAME:PORT/proxy`, then the endpoint's own
    path), with a JSON `body` when given: the HTTP status and the body answered, error
    statuses included (a success is reported as 200 whichever 2xx it was: the transport
    hands back only the body of a success). `ApiUnavailable` when the API server cannot
    be reached. `timeout`: (connect, read) seconds, the connection's by default."""
    verb = _VERBS.get(method.upper(), method.lower())
    with api_call(conn, verb, "services/proxy", f"{method} {path}"):
        try:
            data = conn.transport.request(
                method,
                path,
                body=body,
                timeout=timeout or conn.request_timeout,
                accept=ANY,
            )
        except HttpStatusError as exc:
            return int(exc.status), exc.body.encode("utf-8")
    return 200, data
