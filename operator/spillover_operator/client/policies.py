"""Reading and patching SpilloverPolicies (spec and status), in the connection's
namespace. Objects are API JSON dicts as stored."""

from __future__ import annotations

from typing import Any

from spillover_operator.client._api import JsonDict, request
from spillover_operator.client.connection import Connection
from spillover_operator.client.errors import NotFound, Rejected
from spillover_operator.domain.resource import GROUP, KIND, PLURAL, VERSION

RESOURCE = f"{PLURAL}.{GROUP}"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def _what(name: str) -> str:
    return f"{KIND} '{name}'"


def _path(conn: Connection, name: str = "", sub: str = "") -> str:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{conn.namespace}/{PLURAL}"
    return path + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def get_policy(conn: Connection, name: str) -> JsonDict:
    """The policy as stored; NotFound when it does not exist."""
    return request(conn, "GET", _path(conn, name), verb="get", resource=RESOURCE, what=_what(name))


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
    body = request(conn, "GET", _path(conn), verb="list", resource=RESOURCE, what=f"{KIND} objects")
    items = body.get("items") or []
    return [item for item in items if isinstance(item, dict)]


def patch_policy(
    conn: Connection, name: str, patch: dict[str, Any], *, resource_version: str | None = None
) -> JsonDict:
    """A JSON merge patch on the policy (`spec`, `metadata`); the policy after it. With
    `resource_version`, only if the policy is still that version (Conflict otherwise)."""
    if resource_version:
        meta = dict(patch.get("metadata") or {})
        meta["resourceVersion"] = resource_version
        patch = {**patch, "metadata": meta}
    return request(
        conn,
        "PATCH",
        _path(conn, name),
        verb="patch",
        resource=RESOURCE,
        what=_what(name),
        query=[("fieldManager", conn.field_manager)],
        body=patch,
        content_type=MERGE_PATCH,
    )


def patch_policy_status(
    conn: Connection,
    name: str,
    status_patch: dict[str, Any],
    *,
    resource_version: str | None = None,
) -> JsonDict:
    """A JSON merge patch on the policy's status subresource; with `resource_version`,
    only if the policy is still that version (Conflict otherwise)."""
    body: dict[str, Any] = {"status": status_patch}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    return request(
        conn,
        "PATCH",
        _path(conn, name, "status"),
        verb="patch",
        resource=f"{RESOURCE}/status",
        what=_what(name),
        query=[("fieldManager", conn.field_manager)],
        body=body,
        content_type=MERGE_PATCH,
    )


def remove_policy_finalizer(conn: Connection, name: str, finalizer: str) -> bool:
    """Take `finalizer` off the policy with a JSON patch that touches nothing else (no
    annotation: kopf's own patch that removes it also writes its annotations, which the
    API server may refuse, 422, and the policy then kept its finalizer for ever). The
    patch tests the list entry it removes, so a concurrent change of the finalizers is
    re-read, never clobbered. False when the policy is gone or no longer has it."""
    for _ in range(5):
        policy = find_policy(conn, name)
        if policy is None:
            return False
        finalizers = list((policy.get("metadata") or {}).get("finalizers") or [])
        if finalizer not in finalizers:
            return False
        path = f"/metadata/finalizers/{finalizers.index(finalizer)}"
        try:
            request(
                conn,
                "PATCH",
                _path(conn, name),
                verb="patch",
                resource=RESOURCE,
                what=_what(name),
                query=[("fieldManager", conn.field_manager)],
                body=[
                    {"op": "test", "path": path, "value": finalizer},
                    {"op": "remove", "path": path},
                ],
                content_type=JSON_PATCH,
            )
        except NotFound:
            return False
        except Rejected:
            continue  # the list changed since the read (the test failed): read it again
        return True
    raise Rejected(
        f"{_what(name)}: the finalizer {finalizer} could not be removed "
        "(the finalizers kept changing)"
    )
