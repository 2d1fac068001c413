"""What a container's process sees: its environment resolved as the kubelet builds it.

The spillover variables take effect where a process reads them, so "what is in
effect" is not the `env` list alone. The kubelet builds a container's environment
(the rules this module follows, kubelet `makeEnvironmentVariables`):

1. `envFrom` sources in order, each key with the source's `prefix`; a later source
   overrides an earlier one;
2. then `env` entries in order, overriding `envFrom`; a later entry with the same
   name wins; `value` may reference earlier variables as `$(NAME)` (`$$` escapes);
   `valueFrom.configMapKeyRef` reads one key.

A value the reader may not see is `unknown`, never guessed: a Secret (the operator is
not allowed to read Secrets), a `fieldRef`/`resourceFieldRef` (computed by the
kubelet), a ConfigMap the lookup cannot read. A missing ConfigMap (or key) leaves the
variable unset when the reference is `optional`; otherwise the kubelet does not start
the container, and the value is `unknown` with that reason.

Pure: ConfigMaps come from a lookup the caller passes (`ConfigMapLookup`), so the
operator, spilloverctl and the harness resolve alike and tests call it directly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

State = Literal["set", "unset", "unknown"]


class ConfigMapUnreadable(Exception):
    """Raised by a lookup when a ConfigMap exists but may not or cannot be read."""


# name -> the ConfigMap's `data` (None: it does not exist). Raises ConfigMapUnreadable.
ConfigMapLookup = Callable[[str], Mapping[str, str] | None]


@dataclass(frozen=True)
class Resolved:
    """One variable as the process sees it, and where that comes from (for messages:
    `env`, `env (configMapKeyRef wrc-tuning/threshold)`, `envFrom configMap wrc-tuning`,
    `envFrom secret creds (unreadable)`...)."""

    state: State
    value: str | None
    source: str

    @property
    def known(self) -> bool:
        return self.state != "unknown"

    def shown(self) -> str:
        """The value for a table: the value, `unset` or `unknown`."""
        if self.state == "set":
            return str(self.value)
        return self.state


UNSET = Resolved("unset", None, "not set")


def no_config_maps(name: str) -> Mapping[str, str] | None:
    """A lookup for callers that may not read ConfigMaps: every one is unreadable."""
    raise ConfigMapUnreadable(f"ConfigMap {name} not read")


def resolve(
    container: Mapping[str, Any],
    names: Iterable[str],
    config_maps: ConfigMapLookup = no_config_maps,
) -> dict[str, Resolved]:
    """The variables `names` of `container` (a pod-spec container as an API dict)."""
    wanted = tuple(names)
    env: dict[str, Resolved] = {}
    for source in container.get("envFrom") or []:
        _apply_env_from(env, source, wanted, config_maps)
    for entry in container.get("env") or []:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        env[entry["name"]] = _entry(entry, env, config_maps)
    return {name: env.get(name, UNSET) for name in wanted}


def envfrom_sets(
    container: Mapping[str, Any],
    names: Iterable[str],
    config_maps: ConfigMapLookup = no_config_maps,
) -> dict[str, Resolved]:
    """The variables among `names` that `envFrom` alone gives a value (or may give:
    `unknown`). An `env` entry overrides them; without one, an "unset" policy field
    would not mean the mcp-host default."""
    wanted = tuple(names)
    env: dict[str, Resolved] = {}
    for source in container.get("envFrom") or []:
        _apply_env_from(env, source, wanted, config_maps)
    return {name: env[name] for name in wanted if name in env}


def _apply_env_from(
    env: dict[str, Resolved],
    source: Any,
    wanted: tuple[str, ...],
    config_maps: ConfigMapLookup,
) -> None:
    if not isinstance(source, Mapping):
        return
    prefix = str(source.get("prefix") or "")
    # only the variables this prefix can produce
    reachable = [name for name in wanted if name.startswith(prefix)]
    if not reachable:
        return
    cm_ref, secret_ref = source.get("configMapRef"), source.get("secretRef")
    if isinstance(secret_ref, Mapping):
        label = f"envFrom secret {secret_ref.get('name')}" + (
            f" (prefix {prefix})" if prefix else ""
        )
        for name in reachable:  # it may or may not hold the key: not ours to read
            env[name] = Resolved("unknown", None, f"{label}: Secrets are not read")
        return
    if not isinstance(cm_ref, Mapping):
        return
    cm_name = str(cm_ref.get("name"))
    label = f"envFrom configMap {cm_name}" + (f" (prefix {prefix})" if prefix else "")
    try:
        data = config_maps(cm_name)
    except ConfigMapUnreadable as exc:
        for name in reachable:
            env[name] = Resolved("unknown", None, f"{label}: {exc}")
        return
    if data is None:
        if not cm_ref.get("optional"):
            for name in reachable:
                env[name] = Resolved(
                    "unknown", None, f"{label}: missing (the container cannot start)"
                )
        return
    for key, value in data.items():
        name = prefix + key
        if name in reachable:
            env[name] = Resolved("set", str(value), label)


def _entry(
    entry: Mapping[str, Any], env: Mapping[str, Resolved], config_maps: ConfigMapLookup
) -> Resolved:
    value_from = entry.get("valueFrom")
    if not isinstance(value_from, Mapping):
        return Resolved("set", expand(str(entry.get("value") or ""), env), "env")
    cm_key = value_from.get("configMapKeyRef")
    if isinstance(cm_key, Mapping):
        return _config_map_key(cm_key, config_maps)
    secret_key = value_from.get("secretKeyRef")
    if isinstance(secret_key, Mapping):
        where = f"{secret_key.get('name')}/{secret_key.get('key')}"
        return Resolved("unknown", None, f"env (secretKeyRef {where}): Secrets are not read")
    kind = next(iter(value_from), "valueFrom")
    return Resolved("unknown", None, f"env ({kind}): computed by the kubelet")


def _config_map_key(ref: Mapping[str, Any], config_maps: ConfigMapLookup) -> Resolved:
    cm_name, key = str(ref.get("name")), str(ref.get("key"))
    label = f"env (configMapKeyRef {cm_name}/{key})"
    try:
        data = config_maps(cm_name)
    except ConfigMapUnreadable as exc:
        return Resolved("unknown", None, f"{label}: {exc}")
    if data is not None and key in data:
        return Resolved("set", str(data[key]), label)
    what = "ConfigMap missing" if data is None else "key missing"
    if ref.get("optional"):
        return Resolved("unset", None, f"{label}: {what}, optional")
    return Resolved("unknown", None, f"{label}: {what} (the container cannot start)")


_REFERENCE = re.compile(r"\$\$|\$\(([^)]*)\)")


def expand(value: str, env: Mapping[str, Resolved]) -> str:
    """`$(NAME)` replaced by an earlier variable's value, `$$` by `$`; a reference to
    an unknown or unset variable stays as written (what the kubelet does)."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        ref = env.get(match.group(1))
        if ref is None or ref.state != "set":
            return match.group(0)
        return str(ref.value)

    return _REFERENCE.sub(one, value)
