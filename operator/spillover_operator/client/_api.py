"""The one place API exceptions become the library's error types, and API answers
become dicts (decoded from the raw JSON the server sent, not through the client's
models, so what we compare and report is exactly what is stored)."""

from __future__ import annotations

import http.client
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from spillover_operator.client.connection import Connection, short
from spillover_operator.client.errors import (
    ApiError,
    ApiUnavailable,
    Conflict,
    Forbidden,
    NotFound,
    NotServed,
    Rejected,
    Unauthorized,
)
from spillover_operator.client.transport import HttpStatusError, Query

JsonDict = dict[str, Any]


class StatusException(Protocol):
    """An HTTP error answer: ours (`HttpStatusError`) or the kubernetes package's
    ApiException."""

    status: Any
    reason: Any
    body: Any


def _as_status_error(exc: BaseException) -> StatusException | None:
    if isinstance(exc, HttpStatusError):
        return exc
    # The kubernetes package's ApiException, if that package is in use at all (it is
    # not imported here: importing it costs half a second).
    module = sys.modules.get("kubernetes.client.exceptions")
    api_exception = getattr(module, "ApiException", None)
    if api_exception is not None and isinstance(exc, api_exception):
        return exc  # type: ignore[no-any-return]
    return None


def _unreachable(exc: BaseException) -> bool:
    if isinstance(exc, OSError | http.client.HTTPException):
        return True
    urllib3 = sys.modules.get("urllib3.exceptions")
    http_error = getattr(urllib3, "HTTPError", None)
    return http_error is not None and isinstance(exc, http_error)


@contextmanager
def api_call(conn: Connection, verb: str, resource: str, what: str) -> Iterator[None]:
    """Run API calls, turning their failures into typed errors whose message names
    `what` (for example "SpilloverPolicy 'spillover'"), the `verb` and `resource`
    ("spilloverpolicies.spillover.clerum.io"), the namespace and the connection."""
    try:
        yield
    except Exception as exc:
        answered = _as_status_error(exc)
        if answered is not None:
            raise api_error(conn, answered, verb, resource, what) from None
        if _unreachable(exc):
            raise ApiUnavailable(
                f"cannot reach the API server using {conn.where}: {short(exc)}. "
                "Check the cluster is up and the kubeconfig/--context point at it."
            ) from None
        raise


def request(
    conn: Connection,
    method: str,
    path: str,
    *,
    verb: str,
    resource: str,
    what: str,
    query: Query | None = None,
    body: Any = None,
    content_type: str | None = None,
) -> JsonDict:
    """One request through the connection's transport; the JSON object answered. A
    write (any method but GET) passes the connection's write gate first."""
    if conn.write_gate is not None and method.upper() != "GET":
        conn.write_gate()
    with api_call(conn, verb, resource, what):
        data = conn.transport.request(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=conn.request_timeout,
        )
    return decode_bytes(data)


def decode_bytes(data: bytes | str) -> JsonDict:
    try:
        decoded = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
    except (TypeError, ValueError) as exc:
        raise ApiUnavailable(f"unexpected API response (not JSON): {exc}") from None
    if not isinstance(decoded, dict):
        raise ApiUnavailable(f"unexpected API response (not an object): {decoded!r:.200}")
    return decoded


def api_error(
    conn: Connection, exc: StatusException, verb: str, resource: str, what: str
) -> ApiError:
    status = int(exc.status or 0)
    server_message = status_message(exc)
    if status == 404:
        if _names_an_object(exc):
            return NotFound(
                f"{what} not found in namespace '{conn.namespace}' ({conn.where}). "
                "Is the namespace right (-n)?",
                status=status,
            )
        return NotServed(
            f"{what}: the API server does not serve {resource} ({server_message}). "
            f"Is the SpilloverPolicy CRD installed in the cluster of {conn.where}?",
            status=status,
        )
    if status == 401:
        return Unauthorized(
            f"unauthorized: the API server rejected the credentials of {conn.where} "
            f"({server_message}). Log in again or pick another --context.",
            status=status,
        )
    if status == 403 and "denied request" in server_message:
        # An admission policy's refusal (ValidatingAdmissionPolicy, webhook), not RBAC:
        # its own message says what to change.
        return Forbidden(
            f"refused by admission: the {verb} of {what} in namespace '{conn.namespace}' "
            f"({conn.where}) was denied: {server_message}",
            status=status,
        )
    if status == 403:
        return Forbidden(
            f"forbidden: the user of {conn.where} may not {verb} {resource} in namespace "
            f"'{conn.namespace}' ({server_message}). Grant that permission (Role/RoleBinding) "
            "or use a context that has it.",
            status=status,
        )
    if status == 409:
        return Conflict(
            f"{what} changed while we wrote it ({verb} {resource}): {server_message}",
            status=status,
        )
    if status in (400, 422):
        return Rejected(
            f"the API server rejected the {verb} of {what}: {server_message}", status=status
        )
    return ApiError(
        f"API error {status} {exc.reason or ''} on {verb} {resource}: {what} "
        f"({conn.where}): {server_message}",
        status=status,
    )


def decode(response: Any) -> JsonDict:
    """The JSON object the API server sent (`_preload_content=False` responses)."""
    return decode_bytes(response.data)


def _status_payload(exc: StatusException) -> JsonDict:
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def status_message(exc: StatusException) -> str:
    """The API server's one-line `message` of an error (never the whole body)."""
    message = _status_payload(exc).get("message")
    if isinstance(message, str) and message:
        return message
    return str(exc.reason or "no details")


def _names_an_object(exc: StatusException) -> bool:
    """A 404 for a missing object carries details.name; one for a resource type the server
    does not know (CRD not installed) does not."""
    details = _status_payload(exc).get("details")
    return isinstance(details, dict) and bool(details.get("name"))
