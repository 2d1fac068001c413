"""Other custom resources in the connection's namespace (the platform's own, such as
the harness's recipe runs): create, read, delete, and whether they are served."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spillover_operator.client._api import JsonDict, api_call, decode
from spillover_operator.client.connection import Connection
from spillover_operator.client.errors import NotFound


@dataclass(frozen=True)
class CustomResource:
    """A namespaced custom resource type."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def resource(self) -> str:
        """`plural.group`, as RBAC and error messages name it."""
        return f"{self.plural}.{self.group}"

    def what(self, name: str) -> str:
        return f"{self.kind} '{name}'"


def get_object(conn: Connection, res: CustomResource, name: str) -> JsonDict:
    with api_call(conn, "get", res.resource, res.what(name)):
        return decode(
            conn.custom.get_namespaced_custom_object(
                res.group,
                res.version,
                conn.namespace,
                res.plural,
                name,
                _preload_content=False,
                _request_timeout=conn.request_timeout,
            )
        )


def create_object(conn: Connection, res: CustomResource, body: dict[str, Any]) -> JsonDict:
    name = str((body.get("metadata") or {}).get("name", ""))
    with api_call(conn, "create", res.resource, res.what(name)):
        return decode(
            conn.custom.create_namespaced_custom_object(
                res.group,
                res.version,
                conn.namespace,
                res.plural,
                body,
                field_manager=conn.field_manager,
                _preload_content=False,
                _request_timeout=conn.request_timeout,
            )
        )


def delete_object(conn: Connection, res: CustomResource, name: str) -> None:
    with api_call(conn, "delete", res.resource, res.what(name)):
        conn.custom.delete_namespaced_custom_object(
            res.group,
            res.version,
            conn.namespace,
            res.plural,
            name,
            _request_timeout=conn.request_timeout,
        )


def is_served(conn: Connection, res: CustomResource) -> bool:
    """Whether the API server serves the resource in the namespace (a list of at most one
    object). False when it does not; other errors (Forbidden...) raise."""
    try:
        with api_call(conn, "list", res.resource, f"{res.kind} objects"):
            conn.custom.list_namespaced_custom_object(
                res.group,
                res.version,
                conn.namespace,
                res.plural,
                limit=1,
                _preload_content=False,
                _request_timeout=conn.request_timeout,
            )
    except NotFound:
        return False
    return True
