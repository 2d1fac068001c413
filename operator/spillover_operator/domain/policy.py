"""The SpilloverPolicy spec: strict parsing and validation.

The CRD schema enforces the same rules on the API server; this module is the
operator's own check (a policy stored under an older, looser CRD still gets a clear
`InvalidSpec` instead of being half-applied) and the validator behind
`spilloverctl render`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from spillover_operator.domain.constants import DNS1123_LABEL, DNS1123_SUBDOMAIN
from spillover_operator.domain.labels import SelectorError, parse_selector
from spillover_operator.domain.model import (
    DEFAULT_RECIPE_CONTAINER,
    DEFAULT_RECIPE_SELECTOR,
    ENV_FIELDS,
    ON_DELETE_VALUES,
    RECIPE_POD_KEYS,
    REFRESH_VALUES,
    SPEC_KEYS,
    TARGET_KEYS,
    EnvField,
    OnDelete,
    PolicySpec,
    RecipePodsSpec,
    Refresh,
    default_recipe_pods,
)
from spillover_operator.domain.quoting import cut, shorten
from spillover_operator.domain.resource import API_VERSION, KIND

SELECTOR_FIELDS = ("matchLabels", "matchExpressions")

_SUBDOMAIN_RE = re.compile(DNS1123_SUBDOMAIN)
_LABEL_RE = re.compile(DNS1123_LABEL)


class InvalidSpecError(ValueError):
    """A policy that cannot be applied. `problems` lists every problem, each naming its
    field path (for example `spec.thresholdBytes: 100 is below the minimum 4096`)."""

    def __init__(self, problems: list[str], *, source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        head = f"{source}: " if source else ""
        if len(self.problems) == 1:
            text = f"{head}invalid SpilloverPolicy: {self.problems[0]}"
        else:
            lines = "\n".join(f"  - {p}" for p in self.problems)
            text = f"{head}invalid SpilloverPolicy ({len(self.problems)} problems):\n{lines}"
        super().__init__(text)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def _show(value: Any) -> str:
    """A value as a message quotes it, cut (a 1 MB value is not echoed back)."""
    return shorten(value) if isinstance(value, str) else cut(str(value))


def _bounded_int(
    spec: Mapping[str, Any], key: str, low: int, high: int, problems: list[str]
) -> int | None:
    if key not in spec or spec[key] is None:
        return None
    value = spec[key]
    path = f"spec.{key}"
    if isinstance(value, bool) or not isinstance(value, int):
        # YAML `4096.0` or "4096" are not integers: say so rather than guess.
        problems.append(
            f"{path}: must be an integer number of bytes ({low}..{high}), "
            f"got {_type_name(value)} {_show(value)}"
        )
        return None
    if value < low:
        problems.append(f"{path}: {value} is below the minimum {low} (allowed {low}..{high})")
        return None
    if value > high:
        problems.append(f"{path}: {value} is above the maximum {high} (allowed {low}..{high})")
        return None
    return value


def _switch(spec: Mapping[str, Any], f: EnvField, problems: list[str]) -> bool:
    """A switch is required, as the CRD requires it: a policy that does not say on or
    off is refused, never read as the mcp-host's default (a missing `enabled` taken as
    true would turn the kill switch ON; client-side `kubectl apply` drops `enabled:
    null` and sends the field absent)."""
    default = f.default == "true"
    fix = f"write `{f.key}: true` (spillover on) or `{f.key}: false` (spillover off)"
    if f.key not in spec:
        problems.append(f"spec.{f.key}: required, with no default; {fix}")
        return default
    raw = spec[f.key]
    if raw is None:
        problems.append(f"spec.{f.key}: null is neither on nor off; {fix}")
    elif isinstance(raw, bool):
        return raw
    else:
        problems.append(
            f"spec.{f.key}: must be a boolean (true or false, unquoted), "
            f"got {_type_name(raw)} {_show(raw)}"
        )
    return default


def _env_field(spec: Mapping[str, Any], f: EnvField, problems: list[str]) -> bool | int | None:
    """The value of one `EnvField` (model.py): a switch defaults to its default, bytes to
    None (absent)."""
    if f.kind == "switch":
        return _switch(spec, f, problems)
    return _bounded_int(spec, f.key, f.low, f.high, problems)


def parse_spec(spec: Mapping[str, Any]) -> PolicySpec:
    """Validate a SpilloverPolicy `spec` (camelCase, as stored) and return it typed.

    Raises InvalidSpecError listing every problem found.
    """
    problems: list[str] = []
    if not isinstance(spec, Mapping):
        raise InvalidSpecError([f"spec: must be a mapping, got {_type_name(spec)}"])

    for key in spec:
        if key not in SPEC_KEYS:
            problems.append(f"spec.{key}: unknown field (known fields: {', '.join(SPEC_KEYS)})")

    values = {f.attr: _env_field(spec, f, problems) for f in ENV_FIELDS}

    on_delete: OnDelete = "Retain"
    if "onDelete" in spec and spec["onDelete"] is not None:
        raw = spec["onDelete"]
        if raw in ON_DELETE_VALUES and isinstance(raw, str):
            on_delete = cast(OnDelete, raw)
        else:
            problems.append(
                f"spec.onDelete: must be one of Retain, Remove, got {_type_name(raw)} {_show(raw)}"
            )

    deployment = ""
    container: str | None = None
    target = spec.get("target")
    if target is None:
        problems.append(
            "spec.target: required; set spec.target.deployment to the name of the "
            "workflow-recipe controller Deployment in the policy's namespace"
        )
    elif not isinstance(target, Mapping):
        problems.append(
            f"spec.target: must be a mapping with `deployment` (and optionally `container`), "
            f"got {_type_name(target)}"
        )
    else:
        for key in target:
            if key not in TARGET_KEYS:
                problems.append(
                    f"spec.target.{key}: unknown field (known fields: {', '.join(TARGET_KEYS)})"
                )
        raw_dep = target.get("deployment")
        if raw_dep is None or raw_dep == "":
            problems.append(
                "spec.target.deployment: required; the name of the Deployment to configure "
                "(in the policy's namespace)"
            )
        elif not isinstance(raw_dep, str):
            problems.append(
                f"spec.target.deployment: must be a string, got {_type_name(raw_dep)} "
                f"{_show(raw_dep)}"
            )
        elif len(raw_dep) > 253 or not _SUBDOMAIN_RE.match(raw_dep):
            problems.append(
                f"spec.target.deployment: {_show(raw_dep)} is not a valid Deployment name "
                "(lowercase letters, digits, '-' and '.', starting and ending with a "
                "letter or digit, at most 253 characters)"
            )
        else:
            deployment = raw_dep
        raw_cont = target.get("container")
        if raw_cont is not None:
            if not isinstance(raw_cont, str):
                problems.append(
                    f"spec.target.container: must be a string, got {_type_name(raw_cont)} "
                    f"{_show(raw_cont)}"
                )
            elif len(raw_cont) > 63 or not _LABEL_RE.match(raw_cont):
                problems.append(
                    f"spec.target.container: {_show(raw_cont)} is not a valid container name "
                    "(lowercase letters, digits and '-', starting and ending with a letter "
                    "or digit, at most 63 characters); omit it to use the first container"
                )
            else:
                container = raw_cont

    recipe_pods = _recipe_pods(spec.get("recipePods"), problems)

    if problems:
        raise InvalidSpecError(problems)
    return PolicySpec(
        **values,  # type: ignore[arg-type]  # one per EnvField, typed by its kind
        deployment=deployment,
        container=container,
        on_delete=on_delete,
        recipe_pods=recipe_pods,
    )


def _selector(raw: Any, problems: list[str]) -> dict[str, Any] | None:
    path = "spec.recipePods.selector"
    if not isinstance(raw, Mapping):
        problems.append(
            f"{path}: must be a label selector (matchLabels and/or matchExpressions), "
            f"got {_type_name(raw)}"
        )
        return None
    before = len(problems)
    for key in raw:
        if key not in SELECTOR_FIELDS:
            problems.append(f"{path}.{key}: unknown field (known: {', '.join(SELECTOR_FIELDS)})")
    labels = raw.get("matchLabels")
    exprs = raw.get("matchExpressions")
    if len(problems) == before:
        try:
            parse_selector(raw, path=path)
        except SelectorError as exc:
            problems.append(str(exc))
    if not labels and not exprs and len(problems) == before:
        problems.append(
            f"{path}: an empty selector would match every pod of the namespace; name the "
            "mcp-host pods' labels (default matchLabels app.kubernetes.io/name: mcp-host)"
        )
    return dict(raw) if len(problems) == before else None


def _recipe_pods(raw: Any, problems: list[str]) -> RecipePodsSpec:
    if raw is None:
        return default_recipe_pods()
    if not isinstance(raw, Mapping):
        problems.append(f"spec.recipePods: must be a mapping, got {_type_name(raw)}")
        return default_recipe_pods()
    for key in raw:
        if key not in RECIPE_POD_KEYS:
            problems.append(
                f"spec.recipePods.{key}: unknown field (known fields: {', '.join(RECIPE_POD_KEYS)})"
            )
    selector = dict(DEFAULT_RECIPE_SELECTOR)
    if raw.get("selector") is not None:
        selector = _selector(raw["selector"], problems) or selector
    refresh: Refresh = "Never"
    raw_refresh = raw.get("refresh")
    if "refresh" in raw and raw_refresh is None:
        # Never taken as the default: a template's empty value meant some mode. The API
        # server refuses it too (the CRD, and spillover-policy-fields for kubectl apply).
        problems.append(
            f"spec.recipePods.refresh: null is not a refresh mode; write one of "
            f"{', '.join(REFRESH_VALUES)}, or remove the line (Never)"
        )
    elif raw_refresh is not None:
        if isinstance(raw_refresh, str) and raw_refresh in REFRESH_VALUES:
            refresh = raw_refresh
        else:
            problems.append(
                f"spec.recipePods.refresh: must be one of {', '.join(REFRESH_VALUES)}, got "
                f"{_type_name(raw_refresh)} {_show(raw_refresh)}"
            )
    container: str | None = None
    raw_cont = raw.get("container")
    if raw_cont is not None:
        if not isinstance(raw_cont, str) or len(raw_cont) > 63 or not _LABEL_RE.match(raw_cont):
            problems.append(
                f"spec.recipePods.container: {_show(raw_cont)} is not a valid container name; "
                f"omit it to read the container {DEFAULT_RECIPE_CONTAINER!r} (else the first)"
            )
        else:
            container = raw_cont
    return RecipePodsSpec(selector=selector, refresh=refresh, container=container, given=True)


def parse_policy_document(doc: Any, *, source: str) -> tuple[dict[str, Any], PolicySpec]:
    """Validate a whole SpilloverPolicy manifest (already loaded from YAML/JSON).

    Returns (metadata, spec). `source` (a file name, "<stdin>") prefixes the error.
    """
    if not isinstance(doc, Mapping):
        raise InvalidSpecError(
            [
                f"document: expected a SpilloverPolicy mapping (apiVersion, kind, metadata, "
                f"spec), got {_type_name(doc)}"
            ],
            source=source,
        )
    problems: list[str] = []
    api_version = doc.get("apiVersion")
    if api_version != API_VERSION:
        problems.append(
            f"apiVersion: must be {API_VERSION!r}, got "
            + ("nothing" if api_version is None else _show(api_version))
        )
    kind = doc.get("kind")
    if kind != KIND:
        problems.append(
            f"kind: must be {KIND!r}, got " + ("nothing" if kind is None else _show(kind))
        )
    for key in doc:
        if key not in ("apiVersion", "kind", "metadata", "spec", "status"):
            problems.append(
                f"{key}: unknown top-level field (expected apiVersion, kind, metadata, spec)"
            )

    metadata: dict[str, Any] = {}
    raw_meta = doc.get("metadata")
    if not isinstance(raw_meta, Mapping):
        problems.append(
            "metadata: required mapping with at least `name`, got "
            + ("nothing" if raw_meta is None else _type_name(raw_meta))
        )
    else:
        metadata = dict(raw_meta)
        name = raw_meta.get("name")
        if name is None or name == "":
            problems.append("metadata.name: required; name the policy (for example `spillover`)")
        elif not isinstance(name, str):
            problems.append(f"metadata.name: must be a string, got {_type_name(name)}")
        elif len(name) > 253 or not _SUBDOMAIN_RE.match(name):
            problems.append(
                f"metadata.name: {_show(name)} is not a valid name (lowercase letters, digits, "
                "'-' and '.', starting and ending with a letter or digit)"
            )
        ns = raw_meta.get("namespace")
        if ns is not None and (not isinstance(ns, str) or not _LABEL_RE.match(ns)):
            problems.append(f"metadata.namespace: {_show(ns)} is not a valid namespace name")

    spec: PolicySpec | None = None
    raw_spec = doc.get("spec")
    if raw_spec is None:
        problems.append("spec: required; at least spec.target.deployment must be set")
    else:
        try:
            spec = parse_spec(raw_spec)
        except InvalidSpecError as exc:
            problems.extend(exc.problems)

    if problems or spec is None:
        raise InvalidSpecError(problems, source=source)
    return metadata, spec


def parse_policy_spec(policy: Mapping[str, Any]) -> PolicySpec | InvalidSpecError:
    """The typed spec of a stored policy object, or its refusal as a value: a caller
    that reports an invalid policy branches on the type instead of catching.
    `PolicyCopy` calls it where a copy comes into the operator."""
    try:
        return parse_spec(policy.get("spec") or {})
    except InvalidSpecError as exc:
        return exc


class PolicyCopy(dict[str, Any]):
    """A SpilloverPolicy object as the operator received it (kopf's watch, a GET, the
    answer to a status write), with its spec parsed once, where the copy came in:
    deciding reads `spec` and never parses. A copy is never edited; a changed policy
    is a new copy.

    `known`: an earlier copy of the same policy. Its parse is kept when the spec cannot
    have changed since: same uid and same generation (the API server moves a policy's
    generation with every change to its spec), as for the answer to a status write.
    """

    spec: PolicySpec | InvalidSpecError

    def __init__(self, body: Mapping[str, Any], known: PolicyCopy | None = None) -> None:
        super().__init__(body)
        if known is not None and _same_spec(self, known):
            self.spec = known.spec
        else:
            self.spec = parse_policy_spec(self)


def _same_spec(copy: Mapping[str, Any], known: Mapping[str, Any]) -> bool:
    mine, theirs = copy.get("metadata") or {}, known.get("metadata") or {}
    uid, generation = mine.get("uid"), mine.get("generation")
    return (
        uid is not None
        and generation is not None
        and (uid, generation) == (theirs.get("uid"), theirs.get("generation"))
    )


def spec_to_json(spec: PolicySpec) -> dict[str, Any]:
    """The camelCase spec body of a SpilloverPolicy (unset fields omitted)."""
    body: dict[str, Any] = {}
    for f in ENV_FIELDS:
        value = spec.value(f)
        if value is not None:
            body[f.key] = value
    target: dict[str, Any] = {"deployment": spec.deployment}
    if spec.container is not None:
        target["container"] = spec.container
    body["target"] = target
    body["onDelete"] = spec.on_delete
    if spec.recipe_pods.given:
        body["recipePods"] = spec.recipe_pods.to_json()
    return body


@dataclass(frozen=True)
class TargetRef:
    """What a stored policy points at: the Deployment and, if named, the container."""

    deployment: str
    container: str | None


def target_of(spec: Any) -> TargetRef | None:
    """The target a stored SpilloverPolicy `spec` names, read from `target` as it is.

    The one place the target is read: the operator's index, reconcile, `status` and the
    waits all ask here. It answers even when the rest of the spec is invalid (an invalid
    policy is still found by its Deployment and reports InvalidSpec); for a valid spec it
    is `parse_spec(...).deployment/.container`. None when no Deployment name is given.
    """
    target = spec.get("target") if isinstance(spec, Mapping) else None
    if not isinstance(target, Mapping):
        return None
    deployment = target.get("deployment")
    if not isinstance(deployment, str) or not deployment:
        return None
    container = target.get("container")
    return TargetRef(deployment, container if isinstance(container, str) else None)
