"""What a policy means for the WRC container's environment, as pure functions.

Deployments are plain dicts in Kubernetes API JSON form (camelCase), as kopf bodies or
`ApiClient().sanitize_for_serialization(obj)` give them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spillover_operator.domain.constants import VALUE_FROM
from spillover_operator.domain.model import (
    ENV_FIELDS,
    FIELD_OF_VAR,
    PASSTHROUGH_VAR,
    SPILLOVER_VARS,
    PolicySpec,
)
from spillover_operator.domain.resolved_env import (
    ConfigMapLookup,
    Resolved,
    envfrom_sets,
    no_config_maps,
    resolve,
)

MANAGED_VARS: tuple[str, ...] = (*SPILLOVER_VARS, PASSTHROUGH_VAR)


class TargetError(LookupError):
    """The target Deployment or container does not exist (or has no containers)."""


class UnmanageableTargetError(TargetError):
    """The target container exists but cannot be changed safely (the passthrough list
    comes from valueFrom)."""


@dataclass(frozen=True)
class EnvChange:
    """One variable the plan changes. `None` means absent."""

    name: str
    before: str | None
    after: str | None


@dataclass(frozen=True)
class EnvPlan:
    """The changes a policy needs and the strategic merge patch making them.

    `patch` is None when the Deployment already matches (nothing to write).
    """

    changes: list[EnvChange]
    patch: dict[str, Any] | None
    # Only literal values of the three variables are set (`_values_only`): the patch is
    # right without its resourceVersion precondition (`unconditional`).
    values_only: bool = False

    @property
    def noop(self) -> bool:
        return self.patch is None

    def unconditional(self) -> dict[str, Any] | None:
        """The patch without the resourceVersion precondition when that is safe (values
        only), else the patch as it is."""
        if self.patch is None or not self.values_only:
            return self.patch
        return {k: v for k, v in self.patch.items() if k != "metadata"}


def render_env(spec: PolicySpec, shadowed: Collection[str] = ()) -> dict[str, str | None]:
    """The value each spillover variable must have; None means it must be absent.

    `shadowed`: the variables an `envFrom` source of the container sets (or may set: a
    Secret). There "absent from env" would not mean the mcp-host default but the
    envFrom value, so an unset spec field is written as the mcp-host default, explicitly
    (an `env` entry wins over `envFrom`): the policy stays the one source of truth.
    """
    env = {f.var: f.to_env(spec.value(f)) for f in ENV_FIELDS}
    for var in shadowed:
        if var in env and env[var] is None:
            env[var] = FIELD_OF_VAR[var].default
    return env


def envfrom_shadowed(
    deployment: Mapping[str, Any],
    container: str | None,
    config_maps: ConfigMapLookup = no_config_maps,
) -> dict[str, Resolved]:
    """The spillover variables an `envFrom` source of the target container sets (or may
    set: `unknown` for a Secret or an unreadable ConfigMap), by name.
    Raises TargetError when the container does not exist."""
    return envfrom_sets(select_container(deployment, container), SPILLOVER_VARS, config_maps)


def resolved_env(
    deployment: Mapping[str, Any],
    container: str | None,
    config_maps: ConfigMapLookup = no_config_maps,
) -> dict[str, Resolved]:
    """The three spillover variables and the passthrough list as the target container's
    process sees them (`resolved_env.resolve`: env, valueFrom, envFrom; a Secret is
    `unknown`). Raises TargetError when the container does not exist."""
    return resolve(select_container(deployment, container), MANAGED_VARS, config_maps)


def _split_names(value: str | None) -> list[str]:
    """The names of a comma-separated list: stripped, empty ones dropped, first kept."""
    names: list[str] = []
    if not value:
        return names
    for part in value.split(","):
        name = part.strip()
        if name and name not in names:
            names.append(name)
    return names


def passthrough_names(value: str | None) -> list[str]:
    """The variable names an `MCP_HOST_ENV_PASSTHROUGH` value forwards, in order."""
    return _split_names(value)


def merge_passthrough(current: str | None, required: Sequence[str] = SPILLOVER_VARS) -> str:
    """`current` with every name of `required` present.

    Missing names are appended; the other names and their order are kept; whitespace
    around names is dropped, duplicates collapse to their first occurrence and empty
    entries are dropped.
    """
    names = _split_names(current)
    for name in required:
        if name not in names:
            names.append(name)
    return ",".join(names)


def _containers(deployment: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = deployment.get("spec") or {}
    template = spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    containers = pod_spec.get("containers") or []
    return [c for c in containers if isinstance(c, Mapping)]


def _deployment_ref(deployment: Mapping[str, Any]) -> str:
    meta = deployment.get("metadata") or {}
    ns = meta.get("namespace")
    name = meta.get("name", "<unnamed>")
    return f"Deployment {ns}/{name}" if ns else f"Deployment {name}"


def select_container(deployment: Mapping[str, Any], name: str | None) -> Mapping[str, Any]:
    """The target container: `name`, or the first container when `name` is None."""
    containers = _containers(deployment)
    if not containers:
        raise TargetError(f"{_deployment_ref(deployment)} has no containers")
    if name is None:
        return containers[0]
    for container in containers:
        if container.get("name") == name:
            return container
    existing = ", ".join(str(c.get("name")) for c in containers)
    raise TargetError(
        f"container {name!r} not found in {_deployment_ref(deployment)}; "
        f"its containers are: {existing} (set spec.target.container to one of them, "
        "or omit it to use the first)"
    )


def _env_entries(container: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The env entries by name; for a name listed twice the last wins (as in the pod)."""
    entries: dict[str, Mapping[str, Any]] = {}
    for entry in container.get("env") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            entries[entry["name"]] = entry
    return entries


def _entry_value(entry: Mapping[str, Any] | None) -> str | None:
    if entry is None:
        return None
    if entry.get("valueFrom") is not None:
        return VALUE_FROM
    value = entry.get("value")
    return "" if value is None else str(value)


def effective_env(deployment: Mapping[str, Any], container: str | None) -> dict[str, str | None]:
    """The three spillover variables and the passthrough list as set on the container.

    None: absent; a variable set through valueFrom is reported as "<valueFrom>".
    Raises TargetError when the container does not exist.
    """
    entries = _env_entries(select_container(deployment, container))
    return {name: _entry_value(entries.get(name)) for name in MANAGED_VARS}


def _build_patch(
    deployment: Mapping[str, Any], container_name: str, env_patch: list[dict[str, Any]]
) -> dict[str, Any]:
    """The strategic merge patch: keyed by container name and env name.

    `$setElementOrder` directives (as `kubectl apply` sends them) pin the order of the
    containers and of the env list: existing entries keep their places, new ones are
    appended. Without them the API server may move the patched entries ahead of the
    others.
    """
    containers = _containers(deployment)
    container = next(c for c in containers if c.get("name") == container_name)
    removed = {item["name"] for item in env_patch if item.get("$patch") == "delete"}
    order: list[str] = []
    for entry in container.get("env") or []:
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if isinstance(name, str) and name not in removed and name not in order:
            order.append(name)
    for item in env_patch:
        if item["name"] not in removed and item["name"] not in order:
            order.append(item["name"])
    # The API server requires the patch list in the order of `$setElementOrder`.
    position = {name: index for index, name in enumerate(order)}
    kept = sorted(
        (item for item in env_patch if item["name"] in position),
        key=lambda item: position[item["name"]],
    )
    deletes = [item for item in env_patch if item["name"] not in position]
    container_patch: dict[str, Any] = {
        "name": container_name,
        "$setElementOrder/env": [{"name": name} for name in order],
        "env": kept + deletes,
    }
    patch: dict[str, Any] = {
        "spec": {
            "template": {
                "spec": {
                    "$setElementOrder/containers": [{"name": c.get("name")} for c in containers],
                    "containers": [container_patch],
                }
            }
        }
    }
    resource_version = (deployment.get("metadata") or {}).get("resourceVersion")
    if resource_version:
        # Optimistic concurrency: the API server answers 409 if the Deployment changed
        # since this plan was made (re-read and re-plan).
        patch["metadata"] = {"resourceVersion": str(resource_version)}
    return patch


def _plan(
    deployment: Mapping[str, Any],
    container_name: str | None,
    desired: Mapping[str, str | None],
    ensure_passthrough: bool,
) -> EnvPlan:
    container = select_container(deployment, container_name)
    name = str(container.get("name"))
    entries = _env_entries(container)
    changes: list[EnvChange] = []
    env_patch: list[dict[str, Any]] = []

    for var, want in desired.items():
        entry = entries.get(var)
        have = _entry_value(entry)
        if want is None:
            if entry is not None:
                changes.append(EnvChange(var, have, None))
                env_patch.append({"name": var, "$patch": "delete"})
            continue
        if entry is not None and entry.get("valueFrom") is None and have == want:
            continue
        changes.append(EnvChange(var, have, want))
        item: dict[str, Any] = {"name": var, "value": want}
        if entry is not None and entry.get("valueFrom") is not None:
            # Replacing a valueFrom entry: drop valueFrom, or the API server rejects an
            # entry with both.
            item["valueFrom"] = None
        env_patch.append(item)

    if ensure_passthrough:
        entry = entries.get(PASSTHROUGH_VAR)
        if entry is not None and entry.get("valueFrom") is not None:
            raise UnmanageableTargetError(
                f"{PASSTHROUGH_VAR} on container {name!r} of {_deployment_ref(deployment)} "
                "is set through valueFrom, so the operator cannot add the spillover names "
                "to it without losing the names it holds; set it as a literal value "
                f"(value: ...) that lists {', '.join(SPILLOVER_VARS)}, or replace valueFrom "
                "with a literal list"
            )
        have = _entry_value(entry)
        present = passthrough_names(have)
        if any(var not in present for var in SPILLOVER_VARS):
            # Only when a name is missing: a complete list is left byte-for-byte.
            want = merge_passthrough(have)
            changes.append(EnvChange(PASSTHROUGH_VAR, have, want))
            env_patch.append({"name": PASSTHROUGH_VAR, "value": want})

    if not env_patch:
        return EnvPlan(changes=[], patch=None)
    patch = _build_patch(deployment, name, env_patch)
    return EnvPlan(changes=changes, patch=patch, values_only=_values_only(env_patch))


def _values_only(env_patch: list[dict[str, Any]]) -> bool:
    """Whether the patch only sets literal values of the three spillover variables.

    Such a patch is right whatever else changed on the Deployment since it was read:
    each entry is merged by name, and what the server holds beyond the patch (other
    entries, other containers) is kept. The operator's first move on a policy change
    sends it without the resourceVersion precondition, so the kill switch is not
    refused because the Deployment's status moved meanwhile (every few milliseconds
    during a rollout: a 409, a GET and a second PATCH). A passthrough list, a removal
    or a `valueFrom` replaced is computed from what was read, and keeps it.
    """
    return all(
        set(item) == {"name", "value"} and item["name"] in SPILLOVER_VARS for item in env_patch
    )


def desired_env(
    deployment: Mapping[str, Any], spec: PolicySpec, config_maps: ConfigMapLookup
) -> dict[str, str | None]:
    """What the policy means for this Deployment's target container: `render_env` with
    the variables its `envFrom` sources set (or may set) shadowed. A ConfigMap the lookup
    cannot read may set anything, so it shadows too (`no_config_maps`: every one).
    Raises TargetError when the container does not exist."""
    return render_env(spec, envfrom_shadowed(deployment, spec.container, config_maps))


def plan_apply(
    deployment: Mapping[str, Any], spec: PolicySpec, *, config_maps: ConfigMapLookup
) -> EnvPlan:
    """The changes that make the target container match `spec`: the one planning entry
    point (operator, `spilloverctl --direct`, `spilloverctl render`).

    The three variables are set or removed as `desired_env` says: an unset field that an
    `envFrom` source shadows is written as the mcp-host default, so the value in effect is
    the policy's whoever plans. `config_maps` is required for that reason: a plan made
    without looking at envFrom would remove a variable and leave the envFrom value in
    effect. The passthrough list gets every missing spillover name; nothing else is
    touched.
    """
    desired = desired_env(deployment, spec, config_maps)
    return _plan(deployment, spec.container, desired, ensure_passthrough=True)


def plan_remove(deployment: Mapping[str, Any], spec: PolicySpec) -> EnvPlan:
    """The changes that remove the three variables (the passthrough list is left alone)."""
    return _plan(
        deployment, spec.container, dict.fromkeys(SPILLOVER_VARS), ensure_passthrough=False
    )


def _why(found: Resolved) -> str:
    """Why a value is unknown, from its source (`envFrom configMap x: <why>`)."""
    _, _, why = found.source.partition(": ")
    return why or "not readable"


def shadow_notes(spec: PolicySpec, shadowed: Mapping[str, Resolved]) -> list[str]:
    """For people: each unset spec field an `envFrom` source of the WRC container would
    otherwise decide, and what the operator writes instead."""
    notes: list[str] = []
    for f in ENV_FIELDS:
        var = f.var
        found = shadowed.get(var)
        if found is None or spec.value(f) is not None:
            continue
        what = f"={found.value}" if found.state == "set" else f" (value unknown: {_why(found)})"
        notes.append(
            f"{found.source.split(':')[0]} sets {var}{what}: spec.{f.key} is unset, "
            f"which there does not mean the mcp-host default; the operator writes "
            f"{var}={f.default} (the default) explicitly, and env wins over envFrom"
        )
    return notes
