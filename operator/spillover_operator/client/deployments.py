"""Reading the target (WRC) Deployment, listing Deployments, and patching its env with
a plan the domain made (`spillover_operator.domain.envplan`; what is in effect on it:
`spillover_operator.observed`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from spillover_operator.client._api import JsonDict, request
from spillover_operator.client.connection import Connection
from spillover_operator.client.errors import NotFound

RESOURCE = "deployments.apps"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"


def _what(name: str) -> str:
    return f"Deployment '{name}'"


def _path(conn: Connection, name: str) -> str:
    return f"/apis/apps/v1/namespaces/{conn.namespace}/deployments/{name}"


def get_deployment(conn: Connection, name: str) -> JsonDict:
    """The Deployment as stored; NotFound when it does not exist."""
    return request(conn, "GET", _path(conn, name), verb="get", resource=RESOURCE, what=_what(name))


def find_deployment(conn: Connection, name: str) -> JsonDict | None:
    """The Deployment, or None when it does not exist (other errors raise)."""
    try:
        return get_deployment(conn, name)
    except NotFound:
        return None


class EnvPatch(Protocol):
    """What `patch_deployment_env` sends: a planned strategic merge patch (None:
    nothing to change) and the same without its resourceVersion precondition when that
    is safe (`envplan.EnvPlan` is one; the client does not plan)."""

    @property
    def patch(self) -> dict[str, Any] | None: ...

    def unconditional(self) -> dict[str, Any] | None: ...


def patch_deployment_env(
    conn: Connection, name: str, plan: EnvPatch, *, precondition: bool = True
) -> JsonDict:
    """Send `plan.patch` as a strategic merge patch; the Deployment after it.

    The patch carries the resourceVersion the plan was made from: Conflict means the
    Deployment changed meanwhile (re-read, re-plan: `retry_on_conflict`); without
    `precondition` a plan of values only goes without it (`EnvPlan.unconditional`). A
    plan with nothing to change writes nothing and returns the Deployment as it is.
    """
    body = plan.patch if precondition else plan.unconditional()
    if body is None:
        return get_deployment(conn, name)
    return request(
        conn,
        "PATCH",
        _path(conn, name),
        verb="patch",
        resource=RESOURCE,
        what=_what(name),
        query=[("fieldManager", conn.field_manager)],
        body=body,
        content_type=STRATEGIC_MERGE,
    )


APPLY_PATCH = "application/apply-patch+yaml"


def apply_deployment(conn: Connection, body: Mapping[str, Any]) -> JsonDict:
    """Server-side apply of a whole Deployment (create or update) as the connection's
    field manager, taking over fields another manager set (force): what a controller
    that renders Deployments (the WRC stand-in, `spillover_harness.sim.wrc`) does."""
    name = str((body.get("metadata") or {}).get("name", ""))
    return request(
        conn,
        "PATCH",
        _path(conn, name),
        verb="patch",
        resource=RESOURCE,
        what=_what(name),
        query=[("fieldManager", conn.field_manager), ("force", "true")],
        body=dict(body),
        content_type=APPLY_PATCH,
    )


def list_deployments(
    conn: Connection, label_selector: str = "", *, from_cache: bool = False
) -> list[JsonDict]:
    """The Deployments of the connection's namespace matching `label_selector` (a
    selector string; empty: all), as API dicts sorted by name; `from_cache`: as the API
    server's watch cache has them (`pods.FROM_CACHE`)."""
    query = [("labelSelector", label_selector)] if label_selector else []
    if from_cache:
        query.append(("resourceVersion", "0"))
    body = request(
        conn,
        "GET",
        f"/apis/apps/v1/namespaces/{conn.namespace}/deployments",
        verb="list",
        resource=RESOURCE,
        what=f"Deployments matching {label_selector!r}" if label_selector else "Deployments",
        query=query or None,
    )
    items: list[JsonDict] = list(body.get("items") or [])
    return sorted(items, key=lambda dep: str((dep.get("metadata") or {}).get("name", "")))
