"""Reading and patching SpilloverPolicies (spec and status), in the connection's
namespace. Objects are API JSON dicts as stored."""

from __future__ import annotations

from typing import Any

from spillover_operator.client._api import JsonDict, api_call, decode
from spillover_operator.client.connection import Connection
from spillover_operator.client.errors import NotFound
from spillover_operator.constants import GROUP, KIND, PLURAL, VERSION

RESOURCE = f"{PLURAL}.{GROUP}"
MERGE_PATCH = "application/merge-patch+json"


def _what(name: str) -> str:
    return f"{KIND} '{name}'"


def get_policy(conn: Connection, name: str) -> JsonDict:
    """The policy as stored; NotFound when it does not exist."""
    with api_call(conn, "get", RESOURCE, _what(name)):
        return decode(
            conn.custom.get_namespaced_custom_object(
                GROUP,
                VERSION,
                conn.namespace,
                PLURAL,
                name,
                _preload_content=False,
                _request_timeout=conn.request_timeout,
            )
        )


def find_policy(conn: Connection, name: str) -> JsonDict | None:
    """The policy as stored, or None when it does not exist (other errors raise)."""
    try:
        return get_policy(conn, name)
    except NotFound as exc:
        if type(exc) is NotFound:  # NotServed (no CRD) is not "this policy is gone"
            return None
        raise


def list_policies(conn: Connection) -> list[JsonDict]:
    """Every SpilloverPolicy in the namespace."""
    with api_call(conn, "list", RESOURCE, f"{KIND} objects"):
        body = decode(
            conn.custom.list_namespaced_custom_object(
                GROUP,
                VERSION,
                conn.namespace,
                PLURAL,
                _preload_content=False,
                _request_timeout=conn.request_timeout,
            )
        )
    items = body.get("items") or []
    return [item for item in items if isinstance(item, dict)]


def patch_policy(conn: Connection, name: str, patch: dict[str, Any]) -> JsonDict:
    """A JSON merge patch on the policy (`spec`, `metadata`); the policy after it."""
    with api_call(conn, "patch", RESOURCE, _what(name)):
        return decode(
            conn.custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                conn.namespace,
                PLURAL,
                name,
                patch,
                field_manager=conn.field_manager,
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=conn.request_timeout,
            )
        )


def patch_policy_status(conn: Connection, name: str, status_patch: dict[str, Any]) -> JsonDict:
    """A JSON merge patch on the policy's status subresource."""
    with api_call(conn, "patch", f"{RESOURCE}/status", _what(name)):
        return decode(
            conn.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                conn.namespace,
                PLURAL,
                name,
                {"status": status_patch},
                field_manager=conn.field_manager,
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=conn.request_timeout,
            )
        )
