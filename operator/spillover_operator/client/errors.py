"""What can go wrong talking to the cluster, as types. No exit codes here: each command
line maps these to the shared table (`spillover_operator.exit_codes`), the operator to
its retries, the harness to its stage errors.

Every message names the object, the verb and, where there is one, the fix; it never
carries a response body beyond the API server's own one-line `message`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Self


class ClientError(Exception):
    """Any failure of the client library; `message` is the text for people."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def with_message(self, message: str) -> Self:
        """The same failure (same type, same details) told differently."""
        clone = copy.copy(self)
        clone.message = message
        clone.args = (message,)
        return clone


class ConfigError(ClientError):
    """The kubeconfig, its context or the in-cluster service account cannot be used."""


class UnsupportedKubeconfig(ConfigError):
    """The kubeconfig asks for something this client does not do (an auth provider, a
    field it does not know): refused, never ignored, so a request never goes out with
    other credentials or another identity than the kubeconfig says. The message names
    the field, the entry and the kubeconfig."""


class ApiError(ClientError):
    """The API server answered with an error (`status` is its HTTP status; 0 when it
    could not be reached or its answer was not usable)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class ApiUnavailable(ApiError):
    """The API server could not be reached, or its answer was not JSON."""


class WriteRefused(ApiUnavailable):
    """The connection's write gate refused a write before it was sent: the operator is
    not (or no longer confirmed as) the leader of its namespace. Retried like an API
    server that cannot be reached."""


class Unauthorized(ApiError):
    """The API server rejected the credentials (401)."""


class Forbidden(ApiError):
    """The credentials lack a permission (403); the message names verb and resource."""


class NotFound(ApiError):
    """The object does not exist (404), or the target Deployment/container is missing."""


class NotServed(NotFound):
    """The API server does not serve the resource at all (the CRD is not installed)."""


class Rejected(ApiError):
    """The API server refused the request as invalid (400, 422)."""


class Conflict(ApiError):
    """The object changed between our read and our write (409), also after retries."""


class TimedOut(ClientError):
    """Waiting ran out of time; `pending` lists what had not happened yet."""

    def __init__(self, message: str, *, pending: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.pending = list(pending)


class OperatorRefused(ClientError):
    """The operator observed the policy and refused it (Ready=False with a reason that
    waiting cannot fix: InvalidSpec, Conflict, TargetNotSupported)."""

    def __init__(self, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class ExecFailed(ApiError):
    """A command run in a container (exec) did not run or failed: the message is the
    one the API server or the kubelet sent on the exec's error channel (its first line),
    so a refused exec is never taken for empty output."""
