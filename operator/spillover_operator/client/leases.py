"""The operator's heartbeat: a coordination.k8s.io Lease it renews in each namespace it
watches (`spillover_operator.domain.heartbeat` says what one means)."""

from __future__ import annotations

import datetime

from spillover_operator.client._api import JsonDict, request
from spillover_operator.client.connection import Connection
from spillover_operator.client.errors import NotFound

RESOURCE = "leases.coordination.k8s.io"


def _path(conn: Connection, name: str = "") -> str:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{conn.namespace}/leases"
    return f"{path}/{name}" if name else path


def find_lease(conn: Connection, name: str) -> JsonDict | None:
    """The Lease, or None when there is none (other errors raise: Forbidden...)."""
    try:
        return request(
            conn, "GET", _path(conn, name), verb="get", resource=RESOURCE, what=f"Lease '{name}'"
        )
    except NotFound:
        return None


def micro_time(when: datetime.datetime) -> str:
    """A Lease's MicroTime (RFC 3339 with microseconds, UTC)."""
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def renew_lease(
    conn: Connection, name: str, holder: str, duration_s: int, now: datetime.datetime
) -> None:
    """Set the Lease's renewTime to `now` (create it if missing)."""
    spec = {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration_s,
        "renewTime": micro_time(now),
    }
    what = f"Lease '{name}'"
    try:
        request(
            conn,
            "PATCH",
            _path(conn, name),
            verb="patch",
            resource=RESOURCE,
            what=what,
            query=[("fieldManager", conn.field_manager)],
            body={"spec": spec},
            content_type="application/merge-patch+json",
        )
    except NotFound:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": conn.namespace},
            "spec": {**spec, "acquireTime": micro_time(now)},
        }
        request(
            conn,
            "POST",
            _path(conn),
            verb="create",
            resource=RESOURCE,
            what=what,
            query=[("fieldManager", conn.field_manager)],
            body=body,
        )


def create_lease(conn: Connection, name: str, spec: JsonDict) -> JsonDict:
    """Create the Lease with `spec`; Conflict (409) when it exists already: someone
    created it first."""
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": conn.namespace},
        "spec": spec,
    }
    return request(
        conn,
        "POST",
        _path(conn),
        verb="create",
        resource=RESOURCE,
        what=f"Lease '{name}'",
        query=[("fieldManager", conn.field_manager)],
        body=body,
    )


def update_lease(conn: Connection, name: str, spec: JsonDict, resource_version: str) -> JsonDict:
    """Merge `spec` into the Lease, only if it is still at `resource_version` (else
    Conflict, 409: someone wrote it since it was read). The answer is the Lease written."""
    return request(
        conn,
        "PATCH",
        _path(conn, name),
        verb="patch",
        resource=RESOURCE,
        what=f"Lease '{name}'",
        query=[("fieldManager", conn.field_manager)],
        body={"metadata": {"resourceVersion": resource_version}, "spec": spec},
        content_type="application/merge-patch+json",
    )
