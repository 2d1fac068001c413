"""ConfigMaps read for env resolution (`spillover_operator.resolved_env`): one lookup
per namespace, each ConfigMap read at most once per lookup."""

from __future__ import annotations

from collections.abc import Mapping

from spillover_operator.client._api import api_call, decode
from spillover_operator.client.connection import Connection
from spillover_operator.client.errors import ApiError, NotFound
from spillover_operator.resolved_env import ConfigMapLookup, ConfigMapUnreadable

RESOURCE = "configmaps"


def config_map_lookup(conn: Connection) -> ConfigMapLookup:
    """A lookup for `resolved_env.resolve` in the connection's namespace: the data of a
    ConfigMap, None when it does not exist; ConfigMapUnreadable when it may not be read
    (forbidden) or the API fails, so the value is `unknown`, never guessed."""
    seen: dict[str, Mapping[str, str] | ConfigMapUnreadable | None] = {}

    def lookup(name: str) -> Mapping[str, str] | None:
        if name not in seen:
            seen[name] = _read(conn, name)
        found = seen[name]
        if isinstance(found, ConfigMapUnreadable):
            raise found
        return found

    return lookup


def _read(conn: Connection, name: str) -> Mapping[str, str] | ConfigMapUnreadable | None:
    try:
        with api_call(conn, "get", RESOURCE, f"ConfigMap '{name}'"):
            body = decode(
                conn.core.read_namespaced_config_map(
                    name,
                    conn.namespace,
                    _preload_content=False,
                    _request_timeout=conn.request_timeout,
                )
            )
    except NotFound:
        return None
    except ApiError as exc:
        return ConfigMapUnreadable(f"ConfigMap {name} not readable ({type(exc).__name__})")
    data = body.get("data") or {}
    return {str(k): str(v) for k, v in data.items()}
