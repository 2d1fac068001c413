"""Kubernetes Events (core/v1, so `kubectl describe` shows them): one body for the
operator's and spilloverctl's Events."""

from __future__ import annotations

import datetime
import socket
from collections.abc import Mapping
from typing import Any

from spillover_operator.client._api import request
from spillover_operator.client.connection import Connection

MAX_MESSAGE = 1000


def event_body(
    obj: Mapping[str, Any],
    type_: str,
    reason: str,
    message: str,
    *,
    component: str,
    now: datetime.datetime,
    instance: str = "",
) -> dict[str, Any]:
    """An Event about `obj` (a dict with apiVersion, kind and metadata) from `component`
    (also the reporting component; `instance` the host). A message longer than the
    API's usual bound is cut with an ellipsis."""
    meta = obj.get("metadata") or {}
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 1] + "…"
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "generateName": f"{meta.get('name', 'object')}.",
            "namespace": meta.get("namespace"),
        },
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "type": type_,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    if instance:
        body["reportingInstance"] = instance[:128]
    return body


def post_event(
    conn: Connection, obj: Mapping[str, Any], type_: str, reason: str, message: str
) -> None:
    """Post an Event about `obj` in its namespace (else the connection's), from the
    connection's field manager. Needs `create events`; raises the library's errors
    (Forbidden without it): callers decide whether an Event may fail."""
    body = event_body(
        obj,
        type_,
        reason,
        message,
        component=conn.field_manager,
        now=datetime.datetime.now(datetime.UTC),
        instance=socket.gethostname(),
    )
    namespace = body["metadata"]["namespace"] or conn.namespace
    body["metadata"]["namespace"] = namespace
    body["involvedObject"]["namespace"] = body["involvedObject"]["namespace"] or namespace
    request(
        conn.in_namespace(namespace),
        "POST",
        f"/api/v1/namespaces/{namespace}/events",
        verb="create",
        resource="events",
        what="Event",
        body={k: v for k, v in body.items() if v is not None},
    )
