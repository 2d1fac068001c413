"""`spilloverctl render`: what a policy file renders to, with no cluster.

The plan is the operator's (`envplan.plan_apply`): ConfigMaps the Deployment's `envFrom`
names are read from the files given with `--config-map`; one not given may set any
variable, so an unset field it could shadow is planned as the mcp-host default written
explicitly (what the operator does with a source it cannot read), and a note says so.

Every way a file can be wrong becomes a BadInput (exit code 2) that names the file, the
field and the fix.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spillover_operator.domain.envplan import (
    EnvPlan,
    TargetError,
    desired_env,
    effective_env,
    envfrom_shadowed,
    merge_passthrough,
    plan_apply,
    select_container,
    shadow_notes,
)
from spillover_operator.domain.model import PASSTHROUGH_VAR, PolicySpec
from spillover_operator.domain.policy import InvalidSpecError, parse_policy_document, spec_to_json
from spillover_operator.domain.resolved_env import ConfigMapLookup, ConfigMapUnreadable
from spillover_operator.domain.strict_load import MAX_TEXT_CHARS, StrictLoadError, load_yaml_all
from spillover_operator.regular_file import NotARegularFile, TooLarge, read_regular

from .errors import BadInput

_MINIMAL_CONTAINER = "workflow-recipe-controller"


@dataclass(frozen=True)
class Rendered:
    metadata: dict[str, Any]
    spec: PolicySpec
    deployment: dict[str, Any]
    deployment_source: str
    plan: EnvPlan
    config_maps: ConfigMapLookup


def read_text(path: str) -> str:
    """The text of `path` ('-': stdin), at most MAX_TEXT_CHARS: a FIFO or a device such as
    /dev/zero is refused before it is read, and stdin is read no further than the bound."""
    if path == "-":
        text = sys.stdin.read(MAX_TEXT_CHARS + 1)
        if len(text) > MAX_TEXT_CHARS:
            raise BadInput(f"stdin: more than {MAX_TEXT_CHARS} characters; pass the policy file")
        return text
    try:
        return read_regular(path, MAX_TEXT_CHARS).decode("utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except NotARegularFile as exc:
        if exc.kind == "a directory":
            raise BadInput(f"{path}: is a directory, expected a YAML file") from None
        raise BadInput(
            f"{path}: is {exc.kind}, not a file; pass a YAML file (a pipe or device is never "
            "read; '-' reads stdin)"
        ) from None
    except TooLarge:
        raise BadInput(
            f"{path}: more than {MAX_TEXT_CHARS} bytes, larger than any manifest; pass the "
            "YAML file itself"
        ) from None
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not a text file (not UTF-8)") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror or exc}") from None


def load_one_document(text: str, source: str, what: str) -> Any:
    """The single YAML document in `text`; BadInput if it is not YAML, empty or several."""
    try:
        # duplicate keys (`enabled: false` then `enabled: true`), .inf, huge integers refused
        docs = load_yaml_all(text, source)
    except StrictLoadError as exc:
        raise BadInput(str(exc)) from None
    if not docs:
        raise BadInput(
            f"{source}: empty file; expected one {what} manifest "
            "(see manifests/samples/ for examples)"
        )
    if len(docs) > 1:
        raise BadInput(
            f"{source}: holds {len(docs)} YAML documents; put exactly one {what} in the file"
        )
    return docs[0]


def load_policy(path: str) -> tuple[dict[str, Any], PolicySpec]:
    source = "<stdin>" if path == "-" else path
    doc = load_one_document(read_text(path), source, "SpilloverPolicy")
    try:
        return parse_policy_document(doc, source=source)
    except InvalidSpecError as exc:
        raise BadInput(str(exc)) from None


def load_deployment(path: str, spec: PolicySpec) -> dict[str, Any]:
    source = "<stdin>" if path == "-" else path
    doc = load_one_document(read_text(path), source, "Deployment")
    if not isinstance(doc, Mapping):
        raise BadInput(
            f"{source}: expected a Deployment mapping (apiVersion, kind, metadata, spec), "
            f"got a {type(doc).__name__}"
        )
    problems: list[str] = []
    if doc.get("apiVersion") != "apps/v1":
        problems.append(f"apiVersion: must be 'apps/v1', got {doc.get('apiVersion')!r}")
    if doc.get("kind") != "Deployment":
        problems.append(f"kind: must be 'Deployment', got {doc.get('kind')!r}")
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if name is not None and name != spec.deployment:
        problems.append(
            f"metadata.name: the policy targets Deployment {spec.deployment!r}, this file holds "
            f"{name!r} (pass the target's manifest, or fix spec.target.deployment)"
        )
    dep_spec = doc.get("spec")
    template = dep_spec.get("template") if isinstance(dep_spec, Mapping) else None
    pod_spec = template.get("spec") if isinstance(template, Mapping) else None
    containers = pod_spec.get("containers") if isinstance(pod_spec, Mapping) else None
    if not isinstance(containers, list) or not containers:
        problems.append("spec.template.spec.containers: required, a non-empty list")
    else:
        for i, container in enumerate(containers):
            if not isinstance(container, Mapping) or not isinstance(container.get("name"), str):
                problems.append(f"spec.template.spec.containers[{i}]: needs a string `name`")
                continue
            env = container.get("env")
            if env is not None and (
                not isinstance(env, list)
                or not all(isinstance(e, Mapping) and isinstance(e.get("name"), str) for e in env)
            ):
                problems.append(
                    f"spec.template.spec.containers[{i}].env: must be a list of "
                    "{name: ..., value: ...} entries"
                )
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise BadInput(f"{source}: invalid Deployment:\n{listed}")
    return dict(doc)


def minimal_deployment(spec: PolicySpec, namespace: str | None) -> dict[str, Any]:
    """A Deployment whose target container has an empty env."""
    metadata: dict[str, Any] = {"name": spec.deployment}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "template": {
                "spec": {"containers": [{"name": spec.container or _MINIMAL_CONTAINER, "env": []}]}
            }
        },
    }


def load_config_map(path: str) -> tuple[str, dict[str, str]]:
    """(name, data) of a ConfigMap manifest file (`kubectl get configmap X -o yaml`)."""
    doc = load_one_document(read_text(path), path, "ConfigMap")
    if not isinstance(doc, Mapping):
        raise BadInput(f"{path}: expected a ConfigMap mapping, got a {type(doc).__name__}")
    problems: list[str] = []
    if doc.get("apiVersion") != "v1":
        problems.append(f"apiVersion: must be 'v1', got {doc.get('apiVersion')!r}")
    if doc.get("kind") != "ConfigMap":
        problems.append(f"kind: must be 'ConfigMap', got {doc.get('kind')!r}")
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        problems.append("metadata.name: required, the name envFrom refers to")
    data = doc.get("data") or {}
    if not isinstance(data, Mapping):
        problems.append("data: must be a mapping of keys to string values")
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise BadInput(f"{path}: invalid ConfigMap:\n{listed}")
    return str(name), {str(k): "" if v is None else str(v) for k, v in data.items()}


def config_map_files(paths: Sequence[str]) -> ConfigMapLookup:
    """A lookup over the ConfigMaps given as files. One not given is unreadable (its
    value `unknown`), never taken as missing: render cannot know it does not exist."""
    given: dict[str, dict[str, str]] = {}
    for path in paths:
        name, data = load_config_map(path)
        if name in given:
            raise BadInput(f"{path}: ConfigMap {name!r} is given twice; pass it once")
        given[name] = data

    def lookup(name: str) -> Mapping[str, str] | None:
        if name not in given:
            raise ConfigMapUnreadable(
                f"ConfigMap {name} not given (render reads no cluster: pass its manifest "
                "with --config-map)"
            )
        return given[name]

    return lookup


def render(
    policy_path: str, deployment_path: str | None, config_map_paths: Sequence[str] = ()
) -> Rendered:
    metadata, spec = load_policy(policy_path)
    config_maps = config_map_files(config_map_paths)
    if deployment_path is None:
        deployment = minimal_deployment(spec, metadata.get("namespace"))
        source = "a minimal Deployment with an empty env (no --deployment given)"
    else:
        deployment = load_deployment(deployment_path, spec)
        source = deployment_path
    try:
        plan = plan_apply(deployment, spec, config_maps=config_maps)
    except TargetError as exc:
        raise BadInput(f"{deployment_path}: {exc}") from None
    return Rendered(metadata, spec, deployment, source, plan, config_maps)


def rendered_to_document(rendered: Rendered) -> dict[str, Any]:
    """The output of `render`, as one mapping (printed as YAML or JSON)."""
    spec = rendered.spec
    env = desired_env(rendered.deployment, spec, rendered.config_maps)
    shadowed = envfrom_shadowed(rendered.deployment, spec.container, rendered.config_maps)
    current = effective_env(rendered.deployment, spec.container)
    env[PASSTHROUGH_VAR] = merge_passthrough(current.get(PASSTHROUGH_VAR))
    container = select_container(rendered.deployment, spec.container).get("name")
    return {
        "policy": {
            "name": rendered.metadata.get("name"),
            "namespace": rendered.metadata.get("namespace"),
            "spec": spec_to_json(spec),
        },
        "env": env,
        "deployment": {
            "name": spec.deployment,
            "container": container,
            "source": rendered.deployment_source,
        },
        "changes": [
            {"name": c.name, "before": c.before, "after": c.after} for c in rendered.plan.changes
        ],
        "patch": rendered.plan.patch,
        "envFromNotes": shadow_notes(spec, shadowed),
    }
