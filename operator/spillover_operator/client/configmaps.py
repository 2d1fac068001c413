"""ConfigMaps read for env resolution (`spillover_operator.domain.resolved_env`): one lookup
per namespace, each ConfigMap read at most once per lookup."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

from spillover_operator.client._api import request
from spillover_operator.client.connection import Connection
from spillover_operator.client.errors import ApiError, NotFound
from spillover_operator.domain.resolved_env import ConfigMapLookup, ConfigMapUnreadable

RESOURCE = "configmaps"
APPLY_PATCH = "application/apply-patch+yaml"  # server-side apply

# name -> when the ConfigMap's data last changed (None: unknown or missing).
ChangedAt = Callable[[str], datetime.datetime | None]


class ConfigMapReader:
    """One namespace's ConfigMaps, each read at most once: `lookup` (the data, for
    `resolved_env.resolve`) and `changed_at` (the latest write recorded in its
    managedFields: a running pod read the ConfigMap when it started, so a later write
    may not be in its process).

    `listed`: from the second ConfigMap asked for on, one LIST of the namespace's
    ConfigMaps (from the API server's watch cache, as the pods are listed) answers the
    rest, rather than a GET each: ten recipe Deployments reading a ConfigMap each cost
    a reconcile two requests, not ten. Where the LIST is refused (a Role without `list`
    on configmaps), GETs as without it."""

    def __init__(self, conn: Connection, *, listed: bool = False) -> None:
        self.conn = conn
        self.listed = listed
        self._seen: dict[str, dict[str, Any] | ConfigMapUnreadable | None] = {}
        self._all: dict[str, dict[str, Any]] | None = None

    def _get(self, name: str) -> dict[str, Any] | ConfigMapUnreadable | None:
        if name not in self._seen:
            if self._all is None and self.listed and self._seen:
                self._all = _list(self.conn)
                self.listed = self._all is not None
            if self._all is not None:
                self._seen[name] = self._all.get(name)
            else:
                self._seen[name] = _read(self.conn, name)
        return self._seen[name]

    def lookup(self, name: str) -> Mapping[str, str] | None:
        found = self._get(name)
        if isinstance(found, ConfigMapUnreadable):
            raise found
        if found is None:
            return None
        data = found.get("data") or {}
        return {str(k): str(v) for k, v in data.items()}

    def changed_at(self, name: str) -> datetime.datetime | None:
        found = self._get(name)
        if not isinstance(found, dict):
            return None
        meta = found.get("metadata") or {}
        stamps = [meta.get("creationTimestamp")]
        stamps += [m.get("time") for m in meta.get("managedFields") or [] if isinstance(m, dict)]
        times = [_time(s) for s in stamps]
        known = [t for t in times if t is not None]
        return max(known) if known else None


def _time(text: Any) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def get_config_map(conn: Connection, name: str) -> dict[str, Any]:
    """The ConfigMap `name` of the connection's namespace as stored; NotFound when it
    does not exist (other typed errors when it cannot be read)."""
    return request(
        conn,
        "GET",
        f"/api/v1/namespaces/{conn.namespace}/configmaps/{name}",
        verb="get",
        resource=RESOURCE,
        what=f"ConfigMap '{name}'",
    )


def config_map_lookup(conn: Connection) -> ConfigMapLookup:
    """A lookup for `resolved_env.resolve` in the connection's namespace: the data of a
    ConfigMap, None when it does not exist; ConfigMapUnreadable when it may not be read
    (forbidden) or the API fails, so the value is `unknown`, never guessed."""
    return ConfigMapReader(conn).lookup


def _read(conn: Connection, name: str) -> dict[str, Any] | ConfigMapUnreadable | None:
    try:
        body = get_config_map(conn, name)
    except NotFound:
        return None
    except ApiError as exc:
        return ConfigMapUnreadable(f"ConfigMap {name} not readable ({type(exc).__name__})")
    return body


def _list(conn: Connection) -> dict[str, dict[str, Any]] | None:
    """The namespace's ConfigMaps by name, from the watch cache; None when they may
    not be listed (or the LIST fails): read one by one then."""
    try:
        body = request(
            conn,
            "GET",
            f"/api/v1/namespaces/{conn.namespace}/configmaps",
            verb="list",
            resource=RESOURCE,
            what="ConfigMaps",
            query=[("resourceVersion", "0")],
        )
    except ApiError:
        return None
    items = body.get("items") or []
    return {str((cm.get("metadata") or {}).get("name")): cm for cm in items}


def apply_config_map(conn: Connection, body: Mapping[str, Any]) -> dict[str, Any]:
    """Server-side apply of a whole ConfigMap in the connection's namespace (create or
    update, forcing fields another manager set): what a controller that passes values
    to pods through a ConfigMap (the WRC stand-in's `configmap` recipes) does."""
    name = str((body.get("metadata") or {}).get("name", ""))
    return request(
        conn,
        "PATCH",
        f"/api/v1/namespaces/{conn.namespace}/configmaps/{name}",
        verb="patch",
        resource=RESOURCE,
        what=f"ConfigMap '{name}'",
        query=[("fieldManager", conn.field_manager), ("force", "true")],
        body=dict(body),
        content_type=APPLY_PATCH,
    )
